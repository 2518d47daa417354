import Testing

@testable import RampEngine

/// `Animation.validate()`: what the engine refuses about an animation for its own sake, checked
/// without an engine; `add` refuses the same animations with the same errors.
@Suite struct AnimationValidationTests {
  static func refusal(_ animation: Animation) -> EngineError? {
    do {
      try animation.validate()
      return nil
    } catch { return error }
  }

  static func addRefusal(_ animation: Animation, value: Double = 0.5) -> EngineError? {
    do {
      let engine = try AnimationEngine(sampleRate: 48_000)
      try engine.define("g", value: value, range: 0...1)
      try engine.add(animation, forKey: "a", to: "g")
      return nil
    } catch { return error }
  }

  static var refused: [(String, Animation, EngineError.Code, String)] {
    var power = Animation.basic(from: -0.5, to: 1, duration: 1)
    power.valueSpace = .power
    var powerChild = Animation.keyframes([0, -0.25], duration: 1)
    powerChild.valueSpace = .decibels
    var floorless = Animation.basic(to: 1, duration: 1)
    floorless.valueSpace = .decibels(floor: 0)
    return [
      ("negative duration", .basic(to: 1, duration: -1), .invalidValue, "duration"),
      ("three ends", .basic(from: 0, to: 1, by: 1, duration: 1), .invalidAnimation, "by"),
      ("NaN end", .basic(to: .nan, duration: 1), .invalidValue, "to"),
      ("negative in power space", power, .invalidAnimation, "space"),
      ("dB floor not below 0", floorless, .invalidValue, "space"),
      (
        "key times that do not match", .keyframes([0, 1], keyTimes: [0, 0.5, 1], duration: 1), .invalidAnimation,
        "keyTimes"
      ),
      ("empty group", .group([], duration: 1), .invalidAnimation, "animations"),
      (
        "a child's own fault", .group([.basic(to: 1, duration: 1), powerChild]), .invalidAnimation,
        "animations[1].space"
      ),
      ("a child's timing", .group([.basic(to: 1, duration: .infinity)]), .invalidValue, "animations[0].duration"),
      ("spring parameters", .spring(to: 1, parameters: SpringParameters(mass: 0)), .invalidValue, "mass"),
    ]
  }

  @Test func refusesWhatTheEngineRefusesWithTheSameError() {
    for (name, animation, code, field) in Self.refused {
      let error = Self.refusal(animation)
      #expect(error?.code == code, "\(name)")
      #expect(error?.field == field, "\(name): \(String(describing: error))")
      #expect(Self.addRefusal(animation) == error, "\(name): add refuses it the same way")
    }
  }

  @Test func leavesToTheEngineWhatDependsOnItsState() {
    // In power space, `by` alone starts from the value the engine holds: -0.25 from 0.5 is fine.
    var relative = Animation.basic(by: -0.25, duration: 1)
    relative.valueSpace = .power
    #expect(Self.refusal(relative) == nil)
    #expect(Self.addRefusal(relative, value: 0.5) == nil)
    // From 0.1 it would go below zero: only the engine, knowing the value, refuses it.
    #expect(Self.addRefusal(relative, value: 0.1)?.field == "space")
    // An absolute begin time is judged against the engine's clock, beyond its horizon.
    var late = Animation.basic(to: 1, duration: 1)
    late.timing.beginTime = 1e300
    #expect(Self.refusal(late) == nil)
    #expect(Self.addRefusal(late)?.code == .outOfRange)
    #expect(Self.addRefusal(late)?.field == "beginTime")
    // Key paths are the engine's to know.
    var elsewhere = Animation.basic(to: 1, duration: 1)
    elsewhere.keyPath = "no.such.path"
    #expect(Self.refusal(.group([elsewhere])) == nil)
  }
}
