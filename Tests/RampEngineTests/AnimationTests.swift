import Foundation
import Testing

@testable import RampEngine

@Suite struct BasicAnimationTests {
  /// Core Animation's from/to/by table, with the model at 0.2 and an animation holding the
  /// audible (presentation) value at 0.8 when the new one is added.
  @Test(arguments: [
    (BasicAnimation(from: 0.1, to: 0.9), 0.1, 0.9),
    (BasicAnimation(from: 0.1, by: 0.3), 0.1, 0.4),
    (BasicAnimation(to: 0.9, by: 0.3), 0.6, 0.9),
    (BasicAnimation(from: 0.1), 0.1, 0.2),
    (BasicAnimation(to: 0.9), 0.8, 0.9),
    (BasicAnimation(by: 0.3), 0.8, 1.1),
    (BasicAnimation(), 0.8, 0.2),
  ])
  func fromToByTable(_ basic: BasicAnimation, from: Double, to: Double) throws {
    let engine = try makeEngine(model: 0.2)
    var hold = Animation.basic(from: 0.8, to: 0.8, duration: 10)
    hold.timing.fillMode = .forwards
    try engine.add(hold, forKey: "hold", to: "p")
    var animation = Animation(.basic(basic), timing: MediaTiming(duration: 1))
    animation.timing.fillMode = .forwards
    try engine.add(animation, forKey: "new", to: "p")
    let v = try values(engine, count: 1001)
    #expect(abs(v[0] - from) < 1e-12)
    #expect(abs(v[500] - (from + to) / 2) < 1e-12)
    #expect(abs(v[1000] - to) < 1e-12)
  }

  @Test func allThreeOfFromToByIsRefused() throws {
    let engine = try makeEngine()
    let animation = Animation(.basic(BasicAnimation(from: 0, to: 1, by: 1)))
    #expect(throws: EngineError(.invalidAnimation, field: "by", "give at most two of from, to and by")) {
      try engine.add(animation, forKey: "a", to: "p")
    }
  }

  @Test func nonFiniteEndpointsAreRefused() throws {
    let engine = try makeEngine()
    for bad in [Double.nan, .infinity, -.infinity] {
      #expect(throws: EngineError.self) { try engine.add(.basic(from: bad, to: 1), forKey: "a", to: "p") }
      #expect(throws: EngineError.self) { try engine.add(.basic(to: bad), forKey: "a", to: "p") }
      #expect(throws: EngineError.self) { try engine.add(.basic(by: bad), forKey: "a", to: "p") }
    }
  }

  @Test func nonAdditiveApplyInOrderAddedAndAdditiveSumOnTop() throws {
    let engine = try makeEngine(model: 0.5)
    var wobble = Animation.basic(from: 0, to: 0.25, duration: 1)
    wobble.isAdditive = true
    try engine.add(wobble, forKey: "wobble", to: "p")  // added first, applies last
    try engine.add(.basic(from: 0, to: 1, duration: 1), forKey: "first", to: "p")
    try engine.add(.basic(from: 1, to: 0, duration: 1), forKey: "second", to: "p")
    let v = try values(engine, count: 1000)
    for k in stride(from: 0, to: 1000, by: 37) {
      let x = Double(k) / 1000
      #expect(abs(v[k] - ((1 - x) + 0.25 * x)) < 1e-12)
    }
  }

  @Test func aNewAnimationUnderTheSameKeyReplacesTheOld() throws {
    let engine = try makeEngine()
    try engine.add(.basic(from: 0, to: 1, duration: 1), forKey: "a", to: "p")
    try engine.add(.basic(from: 5, to: 5, duration: 1), forKey: "a", to: "p")
    #expect(try engine.animations(on: "p").count == 1)
    #expect(try value(engine, at: 10) == 5)
  }

  @Test func valueSpaces() throws {
    let engine = try makeEngine(model: 0)
    var db = Animation.basic(from: 1, to: 0, duration: 1)
    db.valueSpace = .decibels(floor: -60)
    db.timing.fillMode = .forwards
    try engine.add(db, forKey: "a", to: "p")
    var v = try values(engine, count: 1001)
    #expect(abs(v[500] - pow(10, -30.0 / 20)) < 1e-12)
    #expect(abs(v[250] - pow(10, -15.0 / 20)) < 1e-12)
    #expect(v[999] > 0.001)
    #expect(v[1000] == 0)  // the floor is silence where the ramp reaches it

    var power = Animation.basic(from: 0, to: 1, duration: 1)
    power.valueSpace = .power
    try engine.add(power, forKey: "a", to: "p")
    v = try values(engine, count: 1000)
    #expect(abs(v[500] - 0.5.squareRoot()) < 1e-12)
    #expect(abs(v[250] - 0.25.squareRoot()) < 1e-12)

    var negative = Animation.basic(from: -1, to: 1, duration: 1)
    negative.valueSpace = .decibels
    #expect(throws: EngineError.self) { try engine.add(negative, forKey: "a", to: "p") }
  }

  @Test func valueSpacesParse() throws {
    #expect(try ValueSpace(parsing: "amplitude") == .amplitude)
    // "db" gives no floor (the reader's default applies); "db(-60)" gives one, the default's value.
    #expect(try ValueSpace(parsing: "db") == .decibels(floor: nil))
    #expect(try ValueSpace(parsing: "db(-60)") == .decibels(floor: -60))
    #expect(ValueSpace.decibels(floor: nil).encode(0) == -60 && ValueSpace.decibels(floor: nil).decode(-60) == 0)
    #expect(try ValueSpace(parsing: "db(-90)") == .decibels(floor: -90))
    #expect(try ValueSpace(parsing: "power") == .power)
    for bad in ["dB(+3)", "db(nan)", "db(0)", "loud", ""] {
      #expect(throws: EngineError.self) { try ValueSpace(parsing: bad) }
    }
  }

  /// A fade shape on a falling ramp is afade=t=out: value = g(1 − x).
  @Test func fallingFadeShapeRampIsTheMirroredShape() throws {
    let engine = try makeEngine(sampleRate: 48_000)
    var fade = Animation.basic(from: 1, to: 0, duration: 0.5)
    fade.timingFunction = .fade(.qsin)
    try engine.add(fade, forKey: "a", to: "p")
    let v = try values(engine, count: 24_000)
    for k in stride(from: 0, to: 24_000, by: 101) {
      #expect(abs(v[k] - FadeShape.qsin.gain(1 - Double(k) / 24_000)) < 1e-12)
    }
  }
}

@Suite struct KeyframeAnimationTests {
  func run(_ keyframes: KeyframeAnimation, count: Int = 1001) throws -> [Double] {
    let engine = try makeEngine(model: -9)
    var animation = Animation(.keyframes(keyframes), timing: MediaTiming(duration: 1))
    animation.timing.fillMode = .forwards
    try engine.add(animation, forKey: "k", to: "p")
    return try values(engine, count: count)
  }

  @Test func linearWithKeyTimes() throws {
    let v = try run(KeyframeAnimation(values: [0, 1, 0], keyTimes: [0, 0.25, 1]))
    #expect(abs(v[125] - 0.5) < 1e-12)
    #expect(abs(v[250] - 1) < 1e-12)
    #expect(abs(v[625] - 0.5) < 1e-12)
    #expect(abs(v[1000]) < 1e-12)
  }

  @Test func linearEvenlySpacedByDefault() throws {
    let v = try run(KeyframeAnimation(values: [1, 0.5, 1, 0]))
    #expect(abs(v[0] - 1) < 1e-12)
    #expect(abs(v[333] - (1 - 0.5 * 0.999)) < 1e-12)
    #expect(abs(v[500] - 0.75) < 1e-12)
    #expect(abs(v[1000]) < 1e-12)
  }

  @Test func discreteHoldsEachValue() throws {
    let v = try run(KeyframeAnimation(values: [0.2, 0.4, 0.6], calculationMode: .discrete))
    #expect(v[0] == 0.2)
    #expect(v[333] == 0.2)
    #expect(v[334] == 0.4)
    #expect(v[666] == 0.4)
    #expect(v[667] == 0.6)
    #expect(v[1000] == 0.6)
    let withTimes = try run(
      KeyframeAnimation(values: [0.2, 0.4], keyTimes: [0, 0.9], calculationMode: .discrete))
    #expect(withTimes[899] == 0.2)
    #expect(withTimes[900] == 0.4)
  }

  @Test func pacedMovesAtOneSpeedAndIgnoresKeyTimes() throws {
    let v = try run(
      KeyframeAnimation(values: [0, 1, 0.5], keyTimes: [0, 0.9, 1], calculationMode: .paced))
    // Distances 1 and 0.5: the first key is reached at two thirds of the way.
    #expect(abs(v[333] - 0.4995) < 1e-12)
    #expect(abs(v[667] - 0.9995) < 2e-3)
    // One speed everywhere but the sample where it turns back and the filled end.
    let steps = zip(v, v.dropFirst()).map { abs($1 - $0) }.enumerated().filter {
      abs($0.offset - 666) > 1 && $0.offset < 999
    }
    #expect(steps.allSatisfy { abs($0.element - 0.0015) < 1e-9 })
  }

  @Test func cubicIsCatmullRomAndHonoursTension() throws {
    var v = try run(KeyframeAnimation(values: [0, 1, 3, 3], calculationMode: .cubic))
    // Keys are hit; the middle segment's midpoint is the Catmull-Rom value.
    #expect(abs(v[0]) < 1e-12)
    #expect(abs(v[333] - 1) < 0.01)
    // Uneven key times scale the tangents so the speed matches across a key.
    let uneven = try run(
      KeyframeAnimation(values: [0, 1, 3, 3], keyTimes: [0, 0.25, 0.75, 1], calculationMode: .cubic))
    #expect(abs((uneven[251] - uneven[250]) - (uneven[250] - uneven[249])) < 1e-4)
    #expect(abs(v[500] - 2.0625) < 1e-12)
    v = try run(KeyframeAnimation(values: [0, 1, 3, 3], calculationMode: .cubic, tensionValues: [1, 1, 1, 1]))
    #expect(abs(v[500] - 2.0) < 1e-12)
  }

  @Test func cubicIsSmoothAcrossKeysUnlessContinuityBreaksIt() throws {
    func kink(_ continuity: Double) throws -> Double {
      let v = try run(
        KeyframeAnimation(
          values: [0, 1, 0.2, 0.8], keyTimes: [0, 0.3, 0.6, 1], calculationMode: .cubic,
          continuityValues: [0, continuity, 0, 0]))
      // Change of slope across the key at sample 300.
      return abs((v[301] - v[300]) - (v[300] - v[299]))
    }
    #expect(try kink(0) < 1e-4)
    #expect(try kink(-1) > 1e-3)
  }

  @Test func perSegmentTimingFunctions() throws {
    let v = try run(KeyframeAnimation(values: [0, 1, 0], timingFunctions: [.easeIn, .linear]))
    #expect(abs(v[250] - 0.315357) < 1e-5)
    #expect(abs(v[750] - 0.5) < 1e-12)
  }

  @Test func malformedKeyframesAreRefused() throws {
    let cases: [(KeyframeAnimation, String)] = [
      (KeyframeAnimation(values: []), "values"),
      (KeyframeAnimation(values: [0, .nan]), "values[1]"),
      (KeyframeAnimation(values: [0, 1], keyTimes: [0, 0.5, 1]), "keyTimes"),
      (KeyframeAnimation(values: [0, 1, 2], keyTimes: [0, 0.7, 0.5]), "keyTimes[2]"),
      (KeyframeAnimation(values: [0, 1], keyTimes: [0.1, 1]), "keyTimes"),
      (KeyframeAnimation(values: [0, 1], keyTimes: [0, .infinity]), "keyTimes[1]"),
      (KeyframeAnimation(values: [0, 1, 2], timingFunctions: [.linear]), "timingFunctions"),
      (KeyframeAnimation(values: [0, 1], calculationMode: .cubic, tensionValues: [0]), "tensionValues"),
      (KeyframeAnimation(values: [0, 1], calculationMode: .cubic, biasValues: [0, .nan]), "biasValues[1]"),
      (KeyframeAnimation(values: [0, 1], keyTimes: [0], calculationMode: .discrete), "keyTimes"),
    ]
    let engine = try makeEngine()
    for (keyframes, field) in cases {
      do {
        try engine.add(Animation(.keyframes(keyframes)), forKey: "k", to: "p")
        Issue.record("accepted \(keyframes)")
      } catch {
        #expect(error.field == field, "\(error)")
      }
    }
  }
}

@Suite struct SpringAnimationTests {
  func springValues(_ parameters: SpringParameters, count: Int, sampleRate: Double = 1000) throws -> [Double] {
    let engine = try makeEngine(sampleRate: sampleRate)
    var spring = Animation.spring(from: 0, to: 1, parameters: parameters)
    spring.timing.duration = Double(count) / sampleRate
    try engine.add(spring, forKey: "s", to: "p")
    return try values(engine, count: count)
  }

  @Test func underdampedMatchesTheClosedForm() throws {
    let v = try springValues(SpringParameters(mass: 1, stiffness: 100, damping: 10), count: 2000)
    let omega = 10.0
    let zeta = 0.5
    let wd = omega * (1 - zeta * zeta).squareRoot()
    for k in stride(from: 0, to: 2000, by: 7) {
      let t = Double(k) / 1000
      let expected = 1 - exp(-zeta * omega * t) * (cos(wd * t) + zeta * omega / wd * sin(wd * t))
      #expect(abs(v[k] - expected) < 1e-9)
    }
    #expect(v.max()! > 1.1)  // it overshoots
  }

  @Test func criticalAndOverdamped() throws {
    let critical = try springValues(SpringParameters(stiffness: 100, damping: 20), count: 1000)
    for k in stride(from: 0, to: 1000, by: 13) {
      let t = Double(k) / 1000
      #expect(abs(critical[k] - (1 - exp(-10 * t) * (1 + 10 * t))) < 1e-9)
    }
    let over = try springValues(SpringParameters(stiffness: 100, damping: 30, allowsOverdamping: true), count: 1000)
    let root = 125.0.squareRoot()
    let r1 = -15 + root
    let r2 = -15 - root
    for k in stride(from: 0, to: 1000, by: 13) {
      let t = Double(k) / 1000
      let expected = 1 - (r2 * exp(r1 * t) - r1 * exp(r2 * t)) / (r2 - r1)
      #expect(abs(over[k] - expected) < 1e-9)
    }
    // Without allowsOverdamping the damping ratio is held at 1 (Core Animation's behaviour).
    let clamped = try springValues(SpringParameters(stiffness: 100, damping: 30), count: 1000)
    for k in stride(from: 0, to: 1000, by: 13) { #expect(abs(clamped[k] - critical[k]) < 1e-12) }
  }

  @Test func initialVelocityIsInDistancePerSecond() throws {
    let v = try springValues(
      SpringParameters(stiffness: 100, damping: 20, initialVelocity: 5), count: 10, sampleRate: 100_000)
    #expect(abs((v[1] - v[0]) * 100_000 - 5) < 0.01)
  }

  @Test func settlingDurationIsWhereItStaysWithinATenthOfAPercent() throws {
    for parameters in [
      SpringParameters(stiffness: 100, damping: 10), SpringParameters(mass: 2, stiffness: 300, damping: 2),
      SpringParameters(stiffness: 100, damping: 20, initialVelocity: 30),
      SpringParameters(stiffness: 100, damping: 50, allowsOverdamping: true),
    ] {
      let settling = parameters.settlingDuration
      #expect(settling.isFinite && settling > 0)
      let motion = SpringMotion(parameters)
      for k in 0..<2000 {
        let t = settling + Double(k) * 0.005
        #expect(abs(motion.progress(t) - 1) <= 1.0001e-3, "\(parameters) at \(t)")
      }
      if case .underdamped = motion.regime {
      } else {
        #expect(abs(motion.progress(settling * 0.999) - 1) > 1e-3 * 0.99)
      }
    }
    #expect(SpringParameters(stiffness: 100, damping: 0).settlingDuration == .infinity)
  }

  @Test func durationDefaultsToTheSettlingDuration() throws {
    let engine = try makeEngine()
    let parameters = SpringParameters(stiffness: 100, damping: 10)
    try engine.add(.spring(from: 0, to: 1, parameters: parameters), forKey: "s", to: "p")
    let status = try engine.animations(on: "p")[0]
    #expect(status.endSample == Int64((parameters.settlingDuration * 1000).rounded(.up)))
  }

  @Test func perceptualForm() throws {
    let p = try SpringParameters.perceptual(duration: 0.5, bounce: 0)
    #expect(abs(p.stiffness - pow(2 * .pi / 0.5, 2)) < 1e-9)
    #expect(abs(p.damping - 2 * (p.stiffness * p.mass).squareRoot()) < 1e-9)  // critical
    let bouncy = try SpringParameters.perceptual(duration: 0.5, bounce: 0.3)
    #expect(abs(bouncy.damping / (2 * (bouncy.stiffness).squareRoot()) - 0.7) < 1e-9)
    let sluggish = try SpringParameters.perceptual(duration: 0.5, bounce: -0.5)
    #expect(abs(sluggish.damping / (2 * (sluggish.stiffness).squareRoot()) - 2) < 1e-9)
    for (duration, bounce) in [(0.0, 0.0), (-1, 0), (.nan, 0), (1, 1), (1, -1), (1, .nan)] {
      #expect(throws: EngineError.self) { try SpringParameters.perceptual(duration: duration, bounce: bounce) }
    }
  }

  @Test func invalidParametersAreRefused() throws {
    let engine = try makeEngine()
    let cases: [(SpringParameters, String)] = [
      (SpringParameters(mass: 0), "mass"), (SpringParameters(stiffness: -1), "stiffness"),
      (SpringParameters(damping: -1), "damping"), (SpringParameters(initialVelocity: .nan), "initialVelocity"),
      (SpringParameters(mass: .infinity), "mass"),
    ]
    for (parameters, field) in cases {
      do {
        try engine.add(.spring(to: 1, parameters: parameters), forKey: "s", to: "p")
        Issue.record("accepted \(parameters)")
      } catch { #expect(error.field == field) }
    }
  }
}

@Suite struct GroupAnimationTests {
  @Test func childrenRunInGroupTimeAndAreClipped() throws {
    let engine = try makeEngine(model: 9)
    var late = Animation.basic(from: 0, to: 1, duration: 1)
    late.timing.beginTime = 0.5
    let long = Animation.basic(from: 0, to: 1, duration: 2)
    try engine.add(.group([long], duration: 1), forKey: "g", to: "p")
    try engine.define("q", value: 9, range: 0...10)
    try engine.add(.group([late], duration: 1), forKey: "g", to: "q")
    let v = try values(engine, count: 1100)
    #expect(abs(v[500] - 0.25) < 1e-12)
    #expect(abs(v[999] - 0.4995) < 1e-12)
    #expect(v[1000] == 9)  // clipped at the group's end
    let q = try values(engine, "q", count: 1100)
    #expect(q[499] == 9)
    #expect(abs(q[750] - 0.25) < 1e-12)
    #expect(q[1000] == 9)
  }

  @Test func groupRepeatsRestartChildrenAndGroupSpeedScalesThem() throws {
    let engine = try makeEngine(model: 9)
    var group = Animation.group([.basic(from: 0, to: 1, duration: 1)], duration: 1)
    group.timing.repeatCount = 2
    group.timing.speed = 2
    try engine.add(group, forKey: "g", to: "p")
    let v = try values(engine, count: 1100)
    #expect(abs(v[250] - 0.5) < 1e-12)
    #expect(abs(v[750] - 0.5) < 1e-12)
    #expect(v[1000] == 9)
  }

  @Test func groupCurveBendsChildTime() throws {
    let engine = try makeEngine(model: 9)
    var group = Animation.group([.basic(from: 0, to: 1, duration: 1)], duration: 1)
    group.timingFunction = .easeIn
    try engine.add(group, forKey: "g", to: "p")
    #expect(abs(try value(engine, at: 500) - 0.315357) < 1e-5)
  }

  @Test func groupAcrossKeyPathsReportsOnce() throws {
    let engine = try makeEngine()
    try engine.define("streams.a.gain", value: 1, range: 0...1)
    try engine.define("streams.b.gain", value: 0, range: 0...1)
    var fadeOut = Animation.basic(from: 1, to: 0, duration: 0.5)
    fadeOut.keyPath = "streams.a.gain"
    var fadeIn = Animation.basic(from: 0, to: 1, duration: 0.5)
    fadeIn.keyPath = "streams.b.gain"
    try engine.add(.group([fadeOut, fadeIn]), forKey: "crossfade", to: "streams.a.gain")
    // Duration 0: the group lasts as long as its longest child.
    #expect(try engine.animations(on: "streams.b.gain")[0].endSample == 500)
    #expect(abs(try engine.presentation("streams.a.gain", at: 250) - 0.5) < 1e-12)
    #expect(abs(try engine.presentation("streams.b.gain", at: 250) - 0.5) < 1e-12)
    engine.advance(by: 600)
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    #expect(reports.count == 1)
    #expect(reports.first?.finished == true)
    #expect(reports.first?.key == "crossfade")
  }

  @Test func emptyGroupAndUnknownChildKeyPathAreRefused() throws {
    let engine = try makeEngine()
    #expect(throws: EngineError.self) { try engine.add(.group([]), forKey: "g", to: "p") }
    var child = Animation.basic(to: 1)
    child.keyPath = "streams.nope.gain"
    do {
      try engine.add(.group([child]), forKey: "g", to: "p")
      Issue.record("accepted")
    } catch {
      #expect(error.code == .unknownKeyPath)
      #expect(error.field == "animations[0].keyPath")
    }
    // Inside a group inside a group: the whole path to the child.
    do {
      try engine.add(.group([.basic(to: 1), .group([.basic(to: 0.5), child])]), forKey: "g", to: "p")
      Issue.record("accepted")
    } catch {
      #expect(error.field == "animations[1].animations[1].keyPath")
      #expect(error.message == "no property 'streams.nope.gain'")
    }
    var badChild = Animation.basic(to: 1)
    badChild.timing.duration = -1
    do {
      try engine.add(.group([child, badChild]), forKey: "g", to: "p")
      Issue.record("accepted")
    } catch { #expect(error.field == "animations[1].duration") }
  }
}
