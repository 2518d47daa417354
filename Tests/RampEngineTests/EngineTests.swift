import Synchronization
import Testing

@testable import RampEngine

/// Renders the way the render thread does: a block at `now`, then advance.
func play(_ engine: AnimationEngine, _ keyPath: String = "p", samples: Int, block: Int = 480) throws -> [Double] {
  var out: [Double] = []
  out.reserveCapacity(samples)
  while out.count < samples {
    let n = min(block, samples - out.count)
    out += try values(engine, keyPath, from: engine.now, count: n)
    engine.advance(by: n)
  }
  return out
}

@Suite struct EngineTests {
  let linearSecond = Transaction(duration: 1, timingFunction: .linear)

  @Test func setAnimatesImplicitlyFromThePresentationValue() throws {
    let engine = try makeEngine(sampleRate: 1000, model: 1)
    try engine.set("p", to: 0, transaction: linearSecond)
    #expect(try engine.model("p") == 0)
    let v = try play(engine, samples: 1100)
    #expect(v[0] == 1)
    #expect(abs(v[500] - 0.5) < 1e-12)
    #expect(v[1000] == 0)
    #expect(try engine.animations(on: "p").isEmpty)
  }

  @Test func instantSetJumpsAndDropsTheImplicitAnimation() throws {
    let engine = try makeEngine(sampleRate: 1000, model: 1)
    try engine.set("p", to: 0, transaction: linearSecond)
    _ = try play(engine, samples: 100)
    try engine.set("p", to: 0.25, transaction: .instant)
    #expect(try engine.presentation("p") == 0.25)
    #expect(try engine.animations(on: "p").isEmpty)
  }

  @Test func theDefaultTransactionIsCoreAnimations() throws {
    let engine = try makeEngine(sampleRate: 1000, model: 0)
    try engine.set("p", to: 1)
    let status = try engine.animations(on: "p")
    #expect(status.count == 1 && status[0].endSample == 250)
    #expect(abs(try engine.presentation("p", at: 125) - TimingFunction.default.value(at: 0.5)) < 1e-12)
  }

  /// The latest command wins and nothing jumps: a retarget mid-ramp starts where the sound is.
  @Test func retargetKeepsTheValueContinuous() throws {
    let engine = try makeEngine(sampleRate: 48_000, model: 1)
    try engine.set("p", to: 0, transaction: linearSecond)
    var v = try play(engine, samples: 14_400)  // 0.3 s
    try engine.set("p", to: 1, transaction: Transaction(duration: 0.5, timingFunction: .linear))
    v += try play(engine, samples: 30_000)
    #expect(largestStep(v) <= 1 / 48_000 + 1e-12)
    #expect(v.last == 1)
  }

  /// With slope continuity the rate of change carries across the retarget too.
  @Test(arguments: [Continuity.value, .slope])
  func retargetSlope(_ continuity: Continuity) throws {
    let engine = try makeEngine(sampleRate: 48_000, model: 1)
    try engine.set("p", to: 0, transaction: linearSecond)
    var v = try play(engine, samples: 14_400)
    try engine.set("p", to: 1, transaction: Transaction(duration: 0.5, timingFunction: .linear, continuity: continuity))
    v += try play(engine, samples: 30_000)
    let junction = 14_400
    let bend = abs((v[junction + 1] - v[junction]) - (v[junction] - v[junction - 1]))
    if continuity == .slope {
      #expect(bend < 1e-7)
      // Smooth everywhere: no second difference larger than the correction's own curvature.
      var worst = 0.0
      for k in 1..<(junction + 23_990) {
        let second = v[k + 1] - 2 * v[k] + v[k - 1]
        worst = max(worst, abs(second))
      }
      #expect(worst < 1e-7)
    } else {
      #expect(bend > 3e-5)
    }
    #expect(largestStep(v) < 2.5 / 48_000)
    #expect(abs(v[junction + 24_000] - 1) < 1e-12)
  }

  @Test func completionReportsFinishedTrueAtTheEndAndFalseWhenReplaced() throws {
    let engine = try makeEngine(sampleRate: 1000)
    let heard = Mutex<[Bool]>([])
    let first = try engine.add(.basic(from: 0, to: 1, duration: 1), forKey: "a", to: "p") { finished in
      heard.withLock { $0.append(finished) }
    }
    let second = try engine.add(.basic(from: 0, to: 1, duration: 1), forKey: "a", to: "p") { finished in
      heard.withLock { $0.append(finished) }
    }
    _ = try play(engine, samples: 999)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    #expect(
      reports == [
        CompletionReport(id: first, key: "a", keyPath: "p", finished: false, sample: 0, ending: .superseded(by: second))
      ])
    _ = try play(engine, samples: 1)
    engine.drainCompletions { reports.append($0) }
    #expect(reports.last == CompletionReport(id: second, key: "a", keyPath: "p", finished: true, sample: 1000))
    #expect(heard.withLock { $0 } == [false, true])
  }

  @Test func removeWithDeclickRampsInsteadOfJumping() throws {
    let engine = try makeEngine(sampleRate: 48_000, model: 0)
    try engine.add(.basic(from: 1, to: 1, duration: 10), forKey: "hold", to: "p")
    var v = try play(engine, samples: 1000)
    try engine.removeAnimation(forKey: "hold", from: "p", declick: 0.01)
    v += try play(engine, samples: 1000)
    #expect(largestStep(v) <= 1 / 480 + 1e-12)
    #expect(v.last == 0)
    engine.drainCompletions()
    #expect(throws: EngineError.self) { try engine.removeAnimation(forKey: "hold", from: "p") }
  }

  /// Whether an animation is internal is a flag, not its name: a client's animation named like a
  /// smoothing ramp is a client's, and a smoothing ramp replaces no animation under its name.
  @Test func internalIsAFlagNotAName() throws {
    let engine = try makeEngine(sampleRate: 1000, model: 0)
    let hold = try engine.add(.basic(from: 1, to: 1, duration: 10), forKey: "hold", to: "p")
    // The ramp the removal below commits takes the next id, and so the name `declick-<id>`.
    let namesake = "declick-\(hold + 3)"
    var additive = Animation.basic(from: 0, to: 0.5, duration: 0.5)
    additive.isAdditive = true
    let client = try engine.add(additive, forKey: namesake, to: "p")
    #expect(client == hold + 1)
    try engine.define("q", value: 0)
    let prefixed = try engine.add(.basic(from: 0, to: 0.25, duration: 0.5), forKey: "declickX", to: "q")
    try engine.removeAnimation(forKey: "hold", from: "p", declick: 0.01)
    _ = try play(engine, samples: 1000)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    let ramp = try #require(reports.first { $0.id == hold + 3 })
    #expect(ramp.key == namesake && ramp.isInternal && ramp.finished)
    #expect(reports.first { $0.id == hold }.map { !$0.isInternal && !$0.finished } == true)
    let namesakeEnd = try #require(reports.first { $0.id == client })
    #expect(namesakeEnd.finished && !namesakeEnd.isInternal, "the ramp replaced the client's animation: \(reports)")
    let prefixedEnd = try #require(reports.first { $0.id == prefixed })
    #expect(prefixedEnd.finished && !prefixedEnd.isInternal)
  }

  @Test func removeWithoutDeclickJumpsToTheModel() throws {
    let engine = try makeEngine(sampleRate: 48_000, model: 0)
    try engine.add(.basic(from: 1, to: 1, duration: 10), forKey: "hold", to: "p")
    try engine.removeAllAnimations(from: "p")
    #expect(try engine.presentation("p") == 0)
  }

  @Test func cancelHoldsTheAudibleValue() throws {
    let engine = try makeEngine(sampleRate: 1000, model: 1)
    try engine.set("p", to: 0, transaction: linearSecond)
    _ = try play(engine, samples: 400)
    try engine.cancel("p")
    #expect(abs(try engine.model("p") - 0.6) < 1e-12)
    #expect(try play(engine, samples: 10).allSatisfy { abs($0 - 0.6) < 1e-12 })
  }

  @Test func renderingIsIndependentOfBlockSize() throws {
    func record(block: Int) throws -> [Double] {
      let engine = try makeEngine(sampleRate: 48_000, model: 0.3)
      var wobble = Animation.keyframes([0, 0.1, -0.1, 0], duration: 0.05)
      wobble.isAdditive = true
      wobble.timing.repeatCount = .infinity
      try engine.add(wobble, forKey: "wobble", to: "p")
      var fade = Animation.basic(to: 1, duration: 0.3, timingFunction: .easeInEaseOut)
      fade.timing.autoreverses = true
      fade.timing.repeatCount = 1.5
      try engine.add(fade, forKey: "fade", to: "p")
      return try play(engine, samples: 48_000, block: block)
    }
    let reference = try record(block: 48_000)
    for block in [1, 7, 64, 480, 4096] {
      let other = try record(block: block)
      let worst = zip(other, reference).map { abs($0 - $1) }.max()!
      #expect(worst < 1e-9, "block \(block): off by \(worst)")
    }
  }

  @Test func outputIsClampedToThePropertyRange() throws {
    let engine = try AnimationEngine(sampleRate: 1000)
    try engine.define("master.gain", value: 0.5, range: 0...1)
    try engine.add(
      .spring(to: 1, parameters: SpringParameters(stiffness: 100, damping: 2)), forKey: "s", to: "master.gain")
    let v = try values(engine, "master.gain", count: 3000)
    #expect(v.allSatisfy { (0...1).contains($0) })
    #expect(v.contains(1))
  }

  @Test func keyPathsAppearAndDisappear() throws {
    let engine = try AnimationEngine(sampleRate: 1000)
    try engine.define("master.gain", value: 1)
    try engine.define("streams.s1.gain", value: 1)
    try engine.define("streams.s1.pan", value: 0, range: -1...1)
    try engine.define("streams.s10.gain", value: 1)
    try engine.set("streams.s1.gain", to: 0)
    #expect(engine.undefine("streams.s1") == 2)
    #expect(engine.keyPaths == ["master.gain", "streams.s10.gain"])
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    #expect(reports.map(\.finished) == [false])
    #expect(throws: EngineError(.unknownKeyPath, field: "key", "no property 'streams.s1.gain'")) {
      try engine.model("streams.s1.gain")
    }
  }

  @Test func badInputGetsTypedErrorsAndChangesNothing() throws {
    let engine = try makeEngine(sampleRate: 1000, model: 0.5)
    try engine.define("g", value: 0.5, range: 0...1)
    let attempts: [(String, () throws -> Void, EngineError.Code, String?)] = [
      ("invalid key path", { try engine.set("a..b", to: 1) }, .invalidKeyPath, "key"),
      ("key path with space", { _ = try engine.model("master gain") }, .invalidKeyPath, "key"),
      ("unknown key path", { try engine.set("nope.gain", to: 1) }, .unknownKeyPath, "key"),
      ("NaN value", { try engine.set("g", to: .nan) }, .invalidValue, "value"),
      ("infinite value", { try engine.set("g", to: .infinity) }, .invalidValue, "value"),
      ("out of range", { try engine.set("g", to: 1.5) }, .outOfRange, "value"),
      (
        "negative duration", { try engine.set("g", to: 1, transaction: Transaction(duration: -1)) }, .invalidValue,
        "duration"
      ),
      (
        "NaN duration", { try engine.set("g", to: 1, transaction: Transaction(duration: .nan)) }, .invalidValue,
        "duration"
      ),
      ("empty key", { try engine.add(.basic(to: 1), forKey: "", to: "g") }, .invalidAnimation, "name"),
      ("remove unknown", { try engine.removeAnimation(forKey: "x", from: "g") }, .unknownAnimation, "name"),
      ("NaN declick", { try engine.removeAllAnimations(from: "g", declick: .nan) }, .invalidValue, "declick"),
      ("empty keyframes", { try engine.add(.keyframes([]), forKey: "k", to: "g") }, .invalidAnimation, "values"),
      ("bad define", { try engine.define("x", value: 2, range: 0...1) }, .outOfRange, "value"),
    ]
    for (name, attempt, code, field) in attempts {
      do {
        try attempt()
        Issue.record("\(name): accepted")
      } catch let error as EngineError {
        #expect(error.code == code, "\(name): \(error)")
        #expect(error.field == field, "\(name): \(error)")
      } catch {
        Issue.record("\(name): \(error)")
      }
    }
    #expect(try engine.model("g") == 0.5)
    #expect(try engine.animations(on: "g").isEmpty)
    for rate in [0, -1, Double.nan, .infinity] {
      #expect(throws: EngineError.self) { try AnimationEngine(sampleRate: rate) }
    }
  }

  @Test func theAnimationLimitIsEnforcedBeforeAnythingChanges() throws {
    let engine = try AnimationEngine(sampleRate: 1000, maxAnimationsPerKeyPath: 3)
    try engine.define("p", value: 0)
    // Additive ones stack (a non-additive one would supersede the others).
    for key in ["a", "b", "c"] {
      try engine.add(.basic(by: 0.1, duration: 1).with { $0.isAdditive = true }, forKey: key, to: "p")
    }
    #expect(throws: EngineError.self) {
      try engine.add(.basic(by: 0.1, duration: 1).with { $0.isAdditive = true }, forKey: "d", to: "p")
    }
    // Replacing under an existing key is not an extra animation.
    try engine.add(.basic(by: 0.5, duration: 1).with { $0.isAdditive = true }, forKey: "b", to: "p")
    #expect(try engine.animations(on: "p").map(\.key) == ["a", "c", "b"])
    // Nor is one that supersedes (every animation here is additive: none is superseded).
    #expect(throws: EngineError.self) { try engine.add(.basic(to: 1, duration: 1), forKey: "e", to: "p") }
  }

  /// A set or fade refused for the limit changes nothing, its model value included; a commit that
  /// supersedes what runs does not count what it supersedes.
  @Test func aRefusedSetOrFadeLeavesTheModelAndASupersedingOneFits() throws {
    let engine = try AnimationEngine(sampleRate: 1000, maxAnimationsPerKeyPath: 3)
    try engine.define("p", value: 0)
    func action(_ value: Double) throws -> PreparedAnimation {
      try #require(
        try PreparedAnimation.implicitAction(
          to: value, on: "p", transaction: Transaction(duration: 1), sampleRate: 1000))
    }
    func fade(_ name: String) throws -> PreparedAnimation {
      try PreparedAnimation(.basic(to: 1, duration: 1), forKey: name, to: "p", sampleRate: 1000, defaultDuration: 0)
    }
    let layer = Animation.basic(by: 0, duration: 10).with { $0.isAdditive = true }
    try engine.add(layer, forKey: "a", to: "p")
    try engine.set("p", to: 0.5, action: try action(0.5))
    try engine.add(layer, forKey: "b", to: "p")
    // Full, but a set supersedes the implicit animation, and a fade the set's.
    try engine.set("p", to: 0.8, action: try action(0.8))
    try engine.commit(try fade("fade"), model: 0.9)
    #expect(try engine.animations(on: "p").map(\.key) == ["a", "b", "fade"])
    #expect(try engine.model("p") == 0.9)
    // An instant set supersedes too. Then full of additive ones: both are refused, and the model stays.
    try engine.set("p", to: 0.9, action: nil)
    try engine.add(layer, forKey: "c", to: "p")
    #expect(try engine.animations(on: "p").map(\.key) == ["a", "b", "c"])
    #expect(throws: EngineError.self) {
      try engine.add(layer, forKey: "d", to: "p")
    }
    #expect(throws: EngineError.self) { try engine.set("p", to: 0.2, action: try action(0.2)) }
    #expect(throws: EngineError.self) { try engine.commit(try fade("other"), model: 0.1) }
    #expect(try engine.model("p") == 0.9)
    #expect(try engine.animations(on: "p").map(\.key) == ["a", "b", "c"])
  }

  @Test func listReportsProgress() throws {
    let engine = try makeEngine(sampleRate: 1000)
    try engine.add(.basic(to: 1, duration: 2), forKey: "fade", to: "p")
    _ = try play(engine, samples: 500)
    let status = try engine.animations(on: "p")[0]
    #expect(status.key == "fade" && status.kind == "basic" && status.progress == 0.25)
  }
}

@Suite struct CurveValidationTests {
  /// Curves built from the enum's cases skip the parser's checks; the engine checks them again.
  @Test func curvesBuiltDirectlyAreValidatedWhenAdded() throws {
    let engine = try makeEngine()
    let bad: [(TimingFunction, String)] = [
      (.steps(1, .jumpNone), "timingFunction"), (.steps(0, .jumpEnd), "timingFunction"),
      (.cubicBezier(UnitBezier(2, 0, 1, 1)), "timingFunction"),
      (.cubicBezier(UnitBezier(0, .nan, 1, 1)), "timingFunction"),
    ]
    for (curve, field) in bad {
      #expect(throws: EngineError.self) {
        try engine.add(.basic(to: 1, duration: 1, timingFunction: curve), forKey: "a", to: "p")
      }
      do { try engine.add(.basic(to: 1, timingFunction: curve), forKey: "a", to: "p") } catch {
        #expect(error.field == field)
      }
      #expect(throws: EngineError.self) { try engine.set("p", to: 1, transaction: Transaction(timingFunction: curve)) }
      let keyframes = KeyframeAnimation(values: [0, 1], timingFunctions: [curve])
      do { try engine.add(Animation(.keyframes(keyframes)), forKey: "a", to: "p") } catch {
        #expect(error.field == "timingFunctions[0]")
      }
    }
    var floorless = Animation.basic(to: 1)
    floorless.valueSpace = .decibels(floor: 3)
    #expect(throws: EngineError.self) { try engine.add(floorless, forKey: "a", to: "p") }
    #expect(try engine.animations(on: "p").isEmpty)
  }
}
