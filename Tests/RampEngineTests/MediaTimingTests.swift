import Testing

@testable import RampEngine

/// Media timing through the engine, at 1 kHz so sample k is k ms: a linear 0→1 ramp over one
/// second makes the value equal the animation's local progress.
@Suite struct MediaTimingTests {
  func ramp(_ change: (inout MediaTiming) -> Void = { _ in }) -> Animation {
    var animation = Animation.basic(from: 0, to: 1, duration: 1)
    change(&animation.timing)
    return animation
  }

  @Test func linearRampFollowsLocalTimeThenReturnsToTheModel() throws {
    let engine = try makeEngine(model: 7)
    try engine.add(ramp(), forKey: "a", to: "p")
    let v = try values(engine, count: 1200)
    for k in 0..<1000 { #expect(abs(v[k] - Double(k) / 1000) < 1e-12) }
    #expect(v[1000] == 7)
    #expect(v[1199] == 7)
  }

  @Test func beginTimeOnExactSample() throws {
    let engine = try makeEngine(sampleRate: 48_000, model: 0.5)
    try engine.add(ramp { $0.beginTime = 0.25 }, forKey: "late", to: "p")
    let v = try values(engine, from: 11_999, count: 3)
    #expect(v == [0.5, 0, 1 / 48_000])
  }

  @Test func fillModes() throws {
    let engine = try makeEngine(model: 0.5)
    try engine.define("b", value: 0.5, range: 0...2)
    try engine.define("f", value: 0.5, range: 0...2)
    try engine.define("both", value: 0.5, range: 0...2)
    let late: (inout MediaTiming) -> Void = { $0.beginTime = 0.1 }
    try engine.add(
      ramp {
        late(&$0)
        $0.fillMode = .backwards
      }, forKey: "a", to: "b")
    try engine.add(
      ramp {
        late(&$0)
        $0.fillMode = .forwards
        $0.removedOnCompletion = false
      }, forKey: "a", to: "f")
    try engine.add(
      ramp {
        late(&$0)
        $0.fillMode = .both
        $0.removedOnCompletion = false
      }, forKey: "a", to: "both")
    try engine.add(ramp { late(&$0) }, forKey: "a", to: "p")
    // Before the begin time only backwards fill applies the animation.
    #expect(try value(engine, "p", at: 50) == 0.5)
    #expect(try value(engine, "b", at: 50) == 0)
    #expect(try value(engine, "f", at: 50) == 0.5)
    #expect(try value(engine, "both", at: 50) == 0)
    // After the end only forwards fill holds the end value.
    #expect(try value(engine, "p", at: 1100) == 0.5)
    #expect(try value(engine, "b", at: 1100) == 0.5)
    #expect(try value(engine, "f", at: 1100) == 1)
    #expect(try value(engine, "both", at: 1100) == 1)
    // Completion removes what is removed on completion, and keeps the rest filling.
    engine.advance(by: 1200)
    #expect(try engine.animations(on: "f").count == 1)
    #expect(try engine.animations(on: "b").isEmpty)
    #expect(try engine.presentation("f") == 1)
    #expect(try engine.presentation("b") == 0.5)
  }

  @Test func fractionalRepeatCount() throws {
    let engine = try makeEngine(model: -1)
    try engine.add(
      ramp {
        $0.repeatCount = 2.5
        $0.fillMode = .forwards
      }, forKey: "a", to: "p")
    let v = try values(engine, count: 2600)
    #expect(abs(v[1250] - 0.25) < 1e-12)
    #expect(abs(v[2250] - 0.25) < 1e-12)
    #expect(abs(v[2499] - 0.499) < 1e-12)
    #expect(v[2500] == 0.5)  // filled at the fractional end
    #expect(try engine.animations(on: "p")[0].endSample == 2500)
  }

  @Test func infiniteRepeatNeverEnds() throws {
    let engine = try makeEngine()
    try engine.add(ramp { $0.repeatCount = .infinity }, forKey: "a", to: "p")
    #expect(abs(try value(engine, at: 100_300) - 0.3) < 1e-9)
    engine.advance(by: 1_000_000)
    let status = try engine.animations(on: "p")
    #expect(status.count == 1)
    #expect(status[0].endSample == nil)
    #expect(!engine.hasPendingCompletions)
  }

  @Test func repeatDurationSetsTheActiveDuration() throws {
    let engine = try makeEngine(model: 9)
    try engine.add(ramp { $0.repeatDuration = 1.5 }, forKey: "a", to: "p")
    let v = try values(engine, count: 1600)
    #expect(abs(v[1400] - 0.4) < 1e-12)
    #expect(v[1500] == 9)
  }

  @Test func autoreversesPlaysBackAndCountsAsOneCycle() throws {
    let engine = try makeEngine(model: 9)
    try engine.add(
      ramp {
        $0.autoreverses = true
        $0.fillMode = .forwards
      }, forKey: "a", to: "p")
    let v = try values(engine, count: 2100)
    #expect(abs(v[250] - 0.25) < 1e-12)
    #expect(abs(v[1000] - 1) < 1e-12)
    #expect(abs(v[1250] - 0.75) < 1e-12)
    #expect(abs(v[1750] - 0.25) < 1e-12)
    #expect(v[2000] == 0)  // a whole back-and-forth ends where it began
  }

  @Test func speedScalesLocalTime() throws {
    let engine = try makeEngine(model: 9)
    try engine.add(ramp { $0.speed = 2 }, forKey: "a", to: "p")
    let v = try values(engine, count: 600)
    #expect(abs(v[250] - 0.5) < 1e-12)
    #expect(v[500] == 9)
  }

  @Test func timeOffsetShiftsThePhaseAndWraps() throws {
    let engine = try makeEngine(model: 9)
    try engine.add(ramp { $0.timeOffset = 0.25 }, forKey: "a", to: "p")
    let v = try values(engine, count: 1100)
    #expect(abs(v[0] - 0.25) < 1e-12)
    #expect(abs(v[700] - 0.95) < 1e-12)
    #expect(abs(v[800] - 0.05) < 1e-12)  // wrapped to the start of the cycle
    #expect(v[1000] == 9)
  }

  @Test func speedZeroFreezesAtTheOffset() throws {
    let engine = try makeEngine(model: 9)
    try engine.add(
      ramp {
        $0.speed = 0
        $0.timeOffset = 0.4
      }, forKey: "a", to: "p")
    #expect(abs(try value(engine, at: 0) - 0.4) < 1e-12)
    #expect(abs(try value(engine, at: 123_456) - 0.4) < 1e-12)
  }

  @Test func cumulativeRepeatsBuildOnTheLastCycle() throws {
    let engine = try makeEngine()
    var animation = ramp { $0.repeatCount = 3 }
    animation.isCumulative = true
    try engine.add(animation, forKey: "a", to: "p")
    let v = try values(engine, count: 3000)
    #expect(abs(v[500] - 0.5) < 1e-12)
    #expect(abs(v[1500] - 1.5) < 1e-12)
    #expect(abs(v[2500] - 2.5) < 1e-12)
    #expect(largestStep(v) < 0.0011)  // continuous across cycles
  }

  @Test func invalidTimingIsRefusedWithTheFieldNamed() throws {
    let engine = try makeEngine()
    let cases: [((inout MediaTiming) -> Void, String)] = [
      ({ $0.duration = .nan }, "duration"), ({ $0.duration = -1 }, "duration"),
      ({ $0.duration = .infinity }, "duration"),
      ({ $0.speed = -1 }, "speed"), ({ $0.speed = .nan }, "speed"), ({ $0.beginTime = .infinity }, "beginTime"),
      ({ $0.beginTime = 1e300 }, "beginTime"), ({ $0.timeOffset = .nan }, "timeOffset"),
      ({ $0.repeatCount = -2 }, "repeatCount"), ({ $0.repeatCount = .nan }, "repeatCount"),
      ({ $0.repeatDuration = -.infinity }, "repeatDuration"),
      (
        {
          $0.repeatCount = 2
          $0.repeatDuration = 3
        }, "repeatDuration"
      ),
    ]
    for (change, field) in cases {
      #expect(throws: EngineError.self) { try engine.add(ramp(change), forKey: "a", to: "p") }
      do { try engine.add(ramp(change), forKey: "a", to: "p") } catch { #expect(error.field == field) }
    }
    #expect(try engine.animations(on: "p").isEmpty)
  }
}
