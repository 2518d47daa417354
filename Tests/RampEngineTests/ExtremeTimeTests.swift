import Testing

@testable import RampEngine

/// The engine called directly with times and sample positions at the edges of what a Double and
/// an Int64 hold: nothing traps, times beyond the horizon are refused with the field named, and
/// what is accepted renders finite values.
@Suite struct ExtremeTimeTests {
  /// Renders a few blocks and checks every value is finite.
  func renderFinite(_ engine: AnimationEngine, from start: Int64 = 0, blocks: Int = 3) throws {
    for block in 0..<blocks {
      let v = try values(engine, from: Sample.add(start, Int64(block * 512)), count: 512)
      #expect(v.allSatisfy { $0.isFinite })
      engine.advance(by: 512)
    }
  }

  /// The line that once trapped on `beginSample + count`: begin and duration both 1e14 s.
  @Test func theIssueLineIsRefusedNamingTheField() throws {
    let engine = try makeEngine(sampleRate: 48_000)
    for (begin, duration, field) in [(1e14, 1e14, "duration"), (1e14, 1.0, "beginTime"), (0.0, 1e14, "duration")] {
      var animation = Animation.basic(to: 1, duration: duration)
      animation.timing.beginTime = begin
      do {
        try engine.add(animation, forKey: "a", to: "p")
        Issue.record("beginTime \(begin), duration \(duration) was accepted")
      } catch {
        #expect(error.code == .outOfRange)
        #expect(error.field == field)
      }
    }
    #expect(try engine.animations(on: "p").isEmpty)
  }

  @Test func everyTimeFieldHasTheHorizon() throws {
    let engine = try makeEngine(sampleRate: 48_000)
    // A begin time has a millisecond's leeway, for the clock added to it: past that.
    let past = MediaTiming.horizon + 1
    let cases: [(String, (inout MediaTiming) -> Void)] = [
      ("beginTime", { $0.beginTime = past }), ("beginTime", { $0.beginTime = -past }),
      ("duration", { $0.duration = past }), ("timeOffset", { $0.timeOffset = -past }),
      ("repeatDuration", { $0.repeatDuration = past }),
    ]
    for (field, change) in cases {
      var animation = Animation.basic(to: 1, duration: 1)
      change(&animation.timing)
      do {
        try engine.add(animation, forKey: "a", to: "p")
        Issue.record("\(field) beyond the horizon was accepted")
      } catch {
        #expect(error.code == .outOfRange)
        #expect(error.field == field)
        #expect(error.message.contains("horizon"))
      }
    }
    // Inside a group, the child's own fields, named by their path.
    var child = Animation.basic(to: 1, duration: 1)
    child.timing.beginTime = -past
    #expect(throws: EngineError.self) { try engine.add(.group([child]), forKey: "g", to: "p") }
    do { try engine.add(.group([child]), forKey: "g", to: "p") } catch {
      #expect(error.field == "animations[0].beginTime")
    }
    // At the horizon itself: accepted.
    var edge = Animation.basic(to: 1, duration: MediaTiming.horizon)
    edge.timing.beginTime = MediaTiming.horizon
    try engine.add(edge, forKey: "edge", to: "p")
    try renderFinite(engine)
    #expect(try #require(engine.animations(on: "p").first).endSample == Int64(2 * MediaTiming.horizon * 48_000))
  }

  /// At a sample rate so high that the horizon in samples passes Int64: positions saturate.
  @Test func positionsSaturateAtAnAbsurdSampleRate() throws {
    let engine = try makeEngine(sampleRate: 1e13)
    var animation = Animation.basic(from: 0, to: 1, duration: MediaTiming.horizon)
    animation.timing.beginTime = MediaTiming.horizon
    animation.timing.repeatCount = 1e300
    try engine.add(animation, forKey: "far", to: "p")
    var early = Animation.basic(from: 0, to: 1, duration: MediaTiming.horizon)
    early.timing.beginTime = -MediaTiming.horizon
    early.timing.fillMode = .both
    try engine.add(early, forKey: "early", to: "p")
    let statuses = try engine.animations(on: "p")
    #expect(statuses.first { $0.key == "far" }?.beginSample == Int64(9.2e18))
    #expect(statuses.allSatisfy { ($0.progress ?? 0).isFinite })
    try renderFinite(engine)
    try renderFinite(engine, from: .max - 100)
    try renderFinite(engine, from: .min)
    #expect(try engine.presentation("p", at: .max).isFinite)
    #expect(try engine.presentation("p", at: .min).isFinite)
  }

  /// The clock itself saturates rather than wrapping.
  @Test func theClockSaturates() throws {
    let engine = try makeEngine(sampleRate: 48_000)
    engine.advance(by: .max)
    engine.advance(by: .max)
    #expect(engine.now == .max)
    try engine.add(.basic(from: 0, to: 1, duration: 1), forKey: "a", to: "p")
    try engine.set("p", to: 0.5, transaction: Transaction(duration: 1))
    try renderFinite(engine, from: engine.now)
    _ = try engine.animations(on: "p")
  }

  /// Every kind of animation and every timing field, at the extremes the horizon allows.
  @Test func everyKindAtTheExtremesRendersFinite() throws {
    let times: [Double] = [0, .leastNonzeroMagnitude, 1e-9, 1, 1e9, -1e9, 9_007_199_254_740_991 / 1e7]
    let counts: [Double] = [0, .leastNonzeroMagnitude, 0.5, 1e300, .infinity]
    let speeds: [Double] = [0, .leastNonzeroMagnitude, 1, 1e300, .greatestFiniteMagnitude]
    var kinds: [Animation] = [
      .basic(from: 0, to: 1, duration: 1), .keyframes([0, 1, 0.25, 0.5], duration: 1),
      .keyframes([0, 1, 0.25], duration: 1, calculationMode: .cubic),
      .spring(from: 0, to: 1, parameters: SpringParameters(mass: 1, stiffness: 100, damping: 10)),
    ]
    // Groups nested 30 deep around a basic ramp.
    var nested = Animation.basic(from: 0, to: 1, duration: 1)
    for _ in 0..<30 { nested = .group([nested]) }
    kinds.append(nested)
    var index = 0
    for kind in kinds {
      for time in times {
        let engine = try makeEngine(sampleRate: 48_000)
        engine.advance(by: 1 << 40)
        var animation = kind
        animation.timing.beginTime = Double(engine.now) / 48_000 + time
        animation.timing.duration = abs(time)
        animation.timing.timeOffset = -time
        animation.timing.repeatCount = counts[index % counts.count]
        animation.timing.speed = speeds[index % speeds.count]
        animation.timing.autoreverses = index % 2 == 0
        animation.timing.fillMode = .both
        animation.isCumulative = index % 3 == 0
        animation.isAdditive = index % 4 == 1
        index += 1
        do { try engine.add(animation, forKey: "a", to: "p") } catch {
          // Refusals are for the animation's own fields, named.
          #expect(error.field != nil)
          continue
        }
        // Timing at these extremes may compute a value that is not finite (infinite speed): the
        // point is that nothing traps, and the clock and positions stay in range.
        for _ in 0..<3 {
          _ = try values(engine, from: engine.now, count: 512)
          engine.advance(by: 512)
        }
        _ = try engine.animations(on: "p")
      }
    }
  }
}
