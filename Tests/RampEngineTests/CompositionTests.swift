import PropertyBased
import Testing

@testable import RampEngine

/// A command as the daemon gives it to the engine: every one that acts on a key path's value.
enum EngineCommand: CaseIterable {
  case setRamp, setInstant, fade, animateBasic, animateKeyframes, animateSpring, groupPart, repeating

  /// The ones that start from the value heard (a keyframe animation starts at its own first
  /// value, a repeat at its own `from`).
  var startsFromThePresentation: Bool {
    switch self {
    case .animateKeyframes, .repeating, .setInstant: return false
    default: return true
    }
  }

  /// Whether the value it leaves when it ends is the model value it sets (the others are animate
  /// commands, which leave the model as it was).
  var setsTheModel: Bool { self == .setRamp || self == .setInstant || self == .fade }

  /// Commits it on `p` at the engine's now, to `target`, as the daemon does; returns its id.
  @discardableResult
  func commit(on engine: AnimationEngine, to target: Double) throws -> UInt64? {
    let rate = engine.sampleRate
    switch self {
    case .setRamp:
      return try engine.set("p", to: target, transaction: Transaction(duration: 0.5, timingFunction: .easeInEaseOut))
    case .setInstant:
      return try engine.set("p", to: target, transaction: .instant)
    case .fade:
      // A fade: its model is the target, its start what is heard beneath the additive layers
      // (`Operation.fade`).
      let prepared = try PreparedAnimation(
        .basic(to: target, duration: 0.8, timingFunction: .fade(.qsin)), forKey: "fade", to: "p", sampleRate: rate,
        defaultDuration: 0.25)
      return try engine.commit(prepared, model: target)
    case .animateBasic:
      return try engine.add(.basic(to: target, duration: 0.6, timingFunction: .easeOut), forKey: "animation", to: "p")
    case .animateKeyframes:
      var keyframes = Animation(.keyframes(KeyframeAnimation(values: [1, 0, 1, 0])), timing: MediaTiming(duration: 4))
      keyframes.timing.fillMode = .removed
      return try engine.add(keyframes, forKey: "wobble", to: "p")
    case .animateSpring:
      let spring = Animation(
        .spring(SpringAnimation(to: target, parameters: SpringParameters(mass: 1, stiffness: 60, damping: 16))),
        timing: MediaTiming(duration: 0))
      return try engine.add(spring, forKey: "spring", to: "p")
    case .groupPart:
      let group = Animation(
        .group([.basic(to: target, duration: 0.7, timingFunction: .linear)]), timing: MediaTiming(duration: 0.7))
      return try engine.add(group, forKey: "group", to: "p")
    case .repeating:
      var swing = Animation.basic(from: 1, to: 0.2, duration: 0.4, timingFunction: .linear)
      swing.timing.repeatCount = .infinity
      swing.timing.autoreverses = true
      return try engine.add(swing, forKey: "swing", to: "p")
    }
  }
}

/// The largest step `command` makes on its own while it runs, ramping the whole range from 1 to
/// 0 and from 0 to 1: the bound for what any sample-to-sample step may be while it is heard.
func ownLargestStep(_ command: EngineCommand, sampleRate: Double) throws -> Double {
  var largest = 0.0
  for (start, target) in [(1.0, 0.0), (0.0, 1.0)] {
    let engine = try makeEngine(sampleRate: sampleRate, model: start)
    try command.commit(on: engine, to: target)
    let end = try activeEnd(engine, from: 0, default: Int(5 * sampleRate))
    largest = max(largest, largestStep(try play(engine, samples: end, block: 256)))
  }
  return largest
}

/// Where the active time of the one animation on `p` ends, counted from `origin` (`fallback`: it
/// does not end, or none runs).
func activeEnd(_ engine: AnimationEngine, from origin: Int, default fallback: Int) throws -> Int {
  guard let end = try engine.animations(on: "p").first?.endSample else { return fallback }
  return min(Int(end) - origin, fallback)
}

/// rampd's composition rule (BRIEF §3, differing from Core Animation): a later non-additive
/// command on a key path supersedes every non-additive animation running on it, from the
/// value heard; additive animations layer on top.
@Suite struct CompositionTests {
  static let rate = 8000.0

  /// Every ordered pair, the later one at offsets that fall on and off block boundaries, at three
  /// block sizes: the earlier one is reported superseded by the later one, nothing steps further
  /// than either command's own curve does, the later one's value is reached and held, and the
  /// samples are the same at every block size.
  @Test(arguments: EngineCommand.allCases)
  func everyPairTheLaterWins(_ earlier: EngineCommand) throws {
    let rate = Self.rate
    let ownSteps = try Dictionary(
      uniqueKeysWithValues: EngineCommand.allCases.map { ($0, try ownLargestStep($0, sampleRate: rate)) })
    for later in EngineCommand.allCases {
      // Each earlier command still runs at these offsets (the shortest lasts 0.5 s, 4000 samples).
      for offset in [1003, 2400, 3999] {
        var heardAt: [Int: [Double]] = [:]
        var reportsAt: [Int: [CompletionReport]] = [:]
        for block in [64, 480, 4096] {
          let engine = try makeEngine(sampleRate: rate, model: 1)
          let first = try earlier.commit(on: engine, to: 0)
          var heard = try play(engine, samples: offset, block: block)
          var reports: [CompletionReport] = []
          engine.drainCompletions { reports.append($0) }
          let before = try engine.presentation("p")
          let second = try later.commit(on: engine, to: 0.8)
          // An animate ends where it ends (not at the model value: it never sets it), and the
          // model is heard after it, as it would be on its own: the steps are checked up to there.
          let laterEnd = offset + (try activeEnd(engine, from: offset, default: Int(6 * rate)))
          engine.drainCompletions { reports.append($0) }
          heard += try play(engine, samples: Int(6 * rate), block: block)
          engine.drainCompletions { reports.append($0) }
          let context = Comment(rawValue: "\(earlier) then \(later) at \(offset), blocks of \(block)")

          // The earlier one ended when the later took over, superseded by it.
          if let first {
            let report = reports.first { $0.id == first }
            #expect(report?.finished == false, context)
            #expect(report?.ending == .superseded(by: second), context)
            #expect(report?.sample == Int64(offset), context)
          }
          // Heard from the value reached (a keyframe animation and a repeat start at their own values).
          if later.startsFromThePresentation {
            #expect(
              abs(heard[offset] - before) <= 1e-3 + (heard[offset - 1] - heard[offset - 2]).magnitude * 2, context)
          }
          // No jump: no step larger than either command's own.
          let bound = max(ownSteps[earlier]!, ownSteps[later]!)
          let until = later.setsTheModel ? heard.count : laterEnd
          let jumps = Array(heard[(later.startsFromThePresentation ? offset - 1 : offset)..<until])
          if later != .setInstant {
            #expect(largestStep(Array(heard[..<offset])) <= bound + 1e-9, context)
            #expect(largestStep(jumps) <= bound + 1e-9, context)
          }
          // The later value reached and held: 0.8 when it set the model, else the model it left
          // (the earlier's target for set and fade, 1 for an animate), for the last second.
          let held: Double
          switch later {
          case .setRamp, .setInstant, .fade: held = 0.8
          case .animateBasic, .animateKeyframes, .animateSpring, .groupPart:
            held = earlier.setsTheModel ? 0 : 1
          case .repeating: held = .nan
          }
          if !held.isNaN {
            let tail = heard.suffix(Int(rate))
            #expect(tail.allSatisfy { abs($0 - held) < 1e-6 }, "\(context): ends at \(tail.last!), not \(held)")
          }
          heardAt[block] = heard
          reportsAt[block] = reports
        }
        // What is reported does not depend on the blocks either (an end and a takeover in one block).
        #expect(
          reportsAt[64] == reportsAt[480] && reportsAt[480] == reportsAt[4096], "\(earlier) then \(later) at \(offset)")
        for block in [480, 4096] {
          let apart = zip(heardAt[64]!, heardAt[block]!).map { abs($0 - $1) }.max() ?? 0
          #expect(apart < 1e-12, "\(earlier) then \(later) at \(offset): blocks of 64 and \(block) differ by \(apart)")
        }
      }
    }
  }

  /// An additive animation is not superseded: a tremolo keeps running over a set, on top of the
  /// set's ramp, and a set does not end it.
  @Test func anAdditiveLayerSurvivesALaterCommand() throws {
    let engine = try makeEngine(sampleRate: Self.rate, model: 1)
    var tremolo = Animation(.keyframes(KeyframeAnimation(values: [0, -0.2, 0])), timing: MediaTiming(duration: 0.25))
    tremolo.timing.repeatCount = .infinity
    tremolo.isAdditive = true
    let id = try engine.add(tremolo, forKey: "tremolo", to: "p")
    try EngineCommand.fade.commit(on: engine, to: 0.3)
    var heard = try play(engine, samples: 1300)
    // Mid-dip: the set starts beneath the tremolo, which goes on adding, so nothing jumps.
    try EngineCommand.setRamp.commit(on: engine, to: 0.6)
    heard += try play(engine, samples: 16_000)
    // The tremolo's own steps (2e-4) and the set's (1.2e-4) at most; beneath it, a jump of up to 0.2.
    #expect(largestStep(heard) < 4e-4)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    #expect(!reports.contains { $0.id == id })
    #expect(try engine.animations(on: "p").map(\.key) == ["tremolo"])
    // On the new level: a whole cycle of the tremolo around 0.6.
    let cycle = try play(engine, samples: 2000)
    #expect(abs(cycle.max()! - 0.6) < 1e-9 && abs(cycle.min()! - 0.4) < 1e-3)
  }

  /// An animation that begins later than a command sent after it takes over at its begin: a set
  /// does not cancel what is scheduled, and the scheduled animation supersedes the set's ramp
  /// when it begins (and the model, not the ramp, shows when it ends).
  @Test func aScheduledAnimationTakesOverAtItsBegin() throws {
    let engine = try makeEngine(sampleRate: Self.rate, model: 1)
    var later = Animation.basic(from: 0.5, to: 0.5, duration: 0.01)
    later.timing.beginTime = 0.5
    let scheduled = try engine.add(later, forKey: "scheduled", to: "p")
    let set = try engine.set("p", to: 0, transaction: Transaction(duration: 2, timingFunction: .linear))
    let heard = try play(engine, samples: 16_000, block: 4096)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    // The set's ramp until 0.5 s, the scheduled hold for 10 ms, then the model: 0, not the ramp.
    #expect(abs(heard[3999] - (1 - 3999 / 16_000.0)) < 1e-9)
    #expect(heard[4000] == 0.5 && heard[4079] == 0.5)
    #expect(heard[4080] == 0 && heard[15_999] == 0)
    #expect(reports.first { $0.id == set }?.ending == .superseded(by: scheduled))
    #expect(reports.first { $0.id == set }?.sample == 4000)
    #expect(reports.first { $0.id == scheduled }?.finished == true)
  }

  /// A group's part takes over when it is first active, not when the group begins: until its
  /// own begin what ran goes on (not the model value), and a group on two key paths superseded
  /// on one is reported once its other part has ended.
  @Test func aGroupPartTakesOverWhenItBegins() throws {
    let rate = Self.rate
    let engine = try AnimationEngine(sampleRate: rate)
    for path in ["p", "q"] { try engine.define(path, value: 1, range: 0...1) }
    let fade = try PreparedAnimation(
      .basic(to: 0, duration: 4, timingFunction: .linear), forKey: "fade", to: "p", sampleRate: rate,
      defaultDuration: 0.25)
    let first = try engine.commit(fade, model: 0)
    var heard = try play(engine, samples: 4000, block: 333)
    var late = Animation.basic(to: 0.2, duration: 1, timingFunction: .linear)
    late.timing.beginTime = 1
    var other = Animation.basic(to: 0.5, duration: 3, timingFunction: .linear)
    other.keyPath = "q"
    let group = try engine.add(
      Animation(.group([late, other]), timing: MediaTiming(duration: 3)), forKey: "g", to: "p")
    heard += try play(engine, samples: 12_000, block: 333)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    // The fade went on for the second before the part began (0.875 to 0.625), then the part
    // took over from where it had captured its start (0.875), as an animate does.
    #expect(abs(heard[11_999] - (1 - 11_999 / 32_000.0)) < 1e-9)
    #expect(abs(heard[12_000] - 0.875) < 1e-9)
    #expect(reports.first { $0.id == first }?.ending == .superseded(by: group))
    #expect(reports.first { $0.id == first }?.sample == 12_000)
    // A set on q supersedes the group's part there; the group is reported when its part on p ends.
    try engine.set("q", to: 0.1, transaction: .instant)
    engine.drainCompletions { reports.append($0) }
    #expect(!reports.contains { $0.id == group })
    _ = try play(engine, samples: 16_000, block: 333)
    engine.drainCompletions { reports.append($0) }
    let ended = reports.filter { $0.id == group }
    #expect(ended.count == 1 && ended.first?.finished == false && ended.first?.ending == .superseded(by: nil))
    #expect(try engine.presentation("q") == 0.1)
  }

  /// A change starts beneath the additive layers, held to the property's range: from an
  /// animation's extreme value (which `animate` accepts) it starts at the range's end, and a
  /// value space that takes no negative values is not refused for it.
  @Test func aChangeStartsBeneathTheLayersWithinTheRange() throws {
    let rate = Self.rate
    let engine = try AnimationEngine(sampleRate: rate)
    try engine.define("p", value: 0.3, range: 0...1)
    var lift = Animation.basic(by: 0.1, duration: 0.1)
    lift.isAdditive = true
    lift.timing.fillMode = .forwards
    lift.timing.removedOnCompletion = false
    try engine.add(lift, forKey: "lift", to: "p")
    var under = Animation.basic(from: -4e306, to: -4e306, duration: 10)
    under.timing.fillMode = .both
    try engine.add(under, forKey: "under", to: "p")
    var heard = try play(engine, samples: 1000)
    // A power-space ramp from the range's end beneath (0), not refused for a negative start.
    try engine.set("p", to: 0.8, transaction: Transaction(duration: 0.5, timingFunction: .linear, valueSpace: .power))
    heard += try play(engine, samples: 8000)
    // Heard 0 before (the lift cannot lift -4e306), then the ramp from 0 with the lift on top.
    #expect(heard[999] == 0)
    #expect(abs(heard[1000] - 0.1) < 0.02)
    let after = Array(heard[1000...])
    #expect(largestStep(after) < 0.02, "a step of \(largestStep(after))")
    #expect(abs(heard.last! - 0.9) < 1e-12)
  }

  /// Two commands at one sample (a batch): the second, with slope continuity, takes the slope of
  /// the first, not a step from what the first ended.
  @Test func slopeContinuityAfterAChangeAtTheSameSample() throws {
    let engine = try makeEngine(sampleRate: Self.rate, model: 1)
    try EngineCommand.fade.commit(on: engine, to: 0)
    var heard = try play(engine, samples: 2000)
    try engine.set("p", to: 0.5, transaction: Transaction(duration: 1, timingFunction: .linear))
    let slope = try PreparedAnimation.implicitAction(
      to: 0.2, on: "p", transaction: Transaction(duration: 1, timingFunction: .linear, continuity: .slope),
      sampleRate: Self.rate)
    try engine.set("p", to: 0.2, action: try #require(slope))
    heard += try play(engine, samples: 12_000)
    #expect(largestStep(heard) < 5e-4, "a step of \(largestStep(heard))")
  }

  /// A late fade (begun in the past, as a scheduled command that came late) still supersedes
  /// what runs: it is the later command.
  @Test func aLateFadeIsStillTheLaterCommand() throws {
    let engine = try makeEngine(sampleRate: Self.rate, model: 1)
    let first = try EngineCommand.animateBasic.commit(on: engine, to: 0)
    _ = try play(engine, samples: 2000)
    let late = try PreparedAnimation(
      .basic(to: 0.9, duration: 1, timingFunction: .linear), forKey: "fade", to: "p", begin: .afterCommit(-0.1),
      sampleRate: Self.rate, defaultDuration: 0.25)
    let id = try engine.commit(late, from: try engine.presentation("p"), model: 0.9)
    _ = try play(engine, samples: 16_000)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    #expect(reports.first { $0.id == first }?.ending == .superseded(by: id))
    #expect(try engine.presentation("p") == 0.9)
  }

  /// An instant set supersedes too: the model shows at once, and stays.
  @Test func anInstantSetSupersedesWhatRuns() throws {
    let engine = try makeEngine(sampleRate: Self.rate, model: 1)
    let fade = try EngineCommand.fade.commit(on: engine, to: 0)
    _ = try play(engine, samples: 1000)
    try engine.set("p", to: 0.7, transaction: .instant)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    #expect(reports.first { $0.id == fade }?.ending == .superseded(by: nil))
    let heard = try play(engine, samples: 16_000)
    #expect(heard.allSatisfy { $0 == 0.7 })
  }

  /// Random commands on two key paths at random samples, rendered at two block sizes. Each
  /// command ramps linearly from the value heard (sets, fades, and animate commands that hold
  /// their value, and additive swells that end where they began). Whatever the order: the same
  /// samples at both block sizes, no step larger than the steepest ramp's, and at the end each key
  /// path holds what its last non-additive command asked.
  @Test func randomSequencesEndWhereTheLastCommandSaid() async {
    await propertyCheck(count: 150, input: Gen.double(in: 0...1).array(of: 60...60)) { numbers in
      var recipe = AnimationRecipe(numbers: numbers)
      let paths = ["p", "q"]
      struct Step {
        let sample: Int
        let path: String
        let kind: Int
        let target: Double
        let duration: Double
      }
      var steps: [Step] = []
      var sample = 0
      for _ in 0..<8 {
        sample += 1 + Int(recipe.next() * 3000)
        steps.append(
          Step(
            sample: sample, path: recipe.pick(paths), kind: recipe.pick([0, 1, 2, 3]), target: recipe.next(),
            duration: recipe.pick([0.05, 0.2, 0.6, 1.5])))
      }
      var results: [[String: [Double]]] = []
      var expected: [String: Double] = [:]
      var steepest = 0.0
      for block in [97, 1024] {
        let engine = try! AnimationEngine(sampleRate: Self.rate)
        for path in paths { try! engine.define(path, value: 1, range: 0...1) }
        var heard: [String: [Double]] = ["p": [], "q": []]
        func run(to end: Int) {
          while Int(engine.now) < end {
            let n = min(block, end - Int(engine.now))
            for path in paths { heard[path]! += try! values(engine, path, from: engine.now, count: n) }
            engine.advance(by: n)
            engine.drainCompletions()
          }
        }
        for step in steps {
          run(to: step.sample)
          let rate = Self.rate
          switch step.kind {
          case 0:
            try! engine.set(
              step.path, to: step.target, transaction: Transaction(duration: step.duration, timingFunction: .linear))
            expected[step.path] = step.target
          case 1:
            let fade = try! PreparedAnimation(
              .basic(to: step.target, duration: step.duration, timingFunction: .linear), forKey: "fade", to: step.path,
              sampleRate: rate, defaultDuration: 0.25)
            try! engine.commit(fade, model: step.target)
            expected[step.path] = step.target
          case 2:
            // An animate that holds where it goes.
            var hold = Animation.basic(to: step.target, duration: step.duration, timingFunction: .linear)
            hold.timing.fillMode = .forwards
            hold.timing.removedOnCompletion = false
            try! engine.add(hold, forKey: "hold-\(step.sample)", to: step.path)
            expected[step.path] = step.target
          default:
            // An additive swell that ends where it began: it changes no final level.
            var swell = Animation(
              .keyframes(KeyframeAnimation(values: [0, step.target * 0.1, 0])),
              timing: MediaTiming(duration: step.duration))
            swell.isAdditive = true
            try! engine.add(swell, forKey: "swell-\(step.sample)", to: step.path)
          }
          // A linear ramp of the whole range over its duration, and a swell's two segments.
          steepest = max(steepest, 1 / (step.duration * rate), 0.2 / (step.duration * rate))
        }
        run(to: sample + Int(2 * Self.rate))
        results.append(heard)
      }
      for path in paths {
        let heard = results[0][path]!
        let apart = zip(heard, results[1][path]!).map { abs($0 - $1) }.max() ?? 0
        #expect(apart < 1e-12, "\(path): blocks of 97 and 1024 differ by \(apart)")
        // Two ramps may overlap for a sample (an additive swell over a ramp): twice the steepest.
        #expect(largestStep(heard) <= 2 * steepest + 1e-9, "\(path): a jump of \(largestStep(heard))")
        #expect(abs(heard.last! - (expected[path] ?? 1)) < 1e-9, "\(path) ends at \(heard.last!)")
      }
    }
  }
}
