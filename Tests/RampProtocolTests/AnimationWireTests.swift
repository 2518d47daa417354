import RampEngine
import Testing

@testable import RampProtocol

/// The animation object of an `animate` line, parsed.
func animation(_ object: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> Animation {
  let line = #"{"cmd":"animate","key":"master.gain","animation":\#(object)}"#
  guard case .animate(let animate) = try request(line, sourceLocation: sourceLocation).command else {
    Issue.record("not an animate command", sourceLocation: sourceLocation)
    throw ProtocolError(.internalError, "not animate")
  }
  return animate.animation
}

/// The refusal of an animation object.
func animationRefusal(_ object: String) -> ProtocolError? {
  refusal(#"{"cmd":"animate","key":"master.gain","animation":\#(object)}"#)
}

@Suite struct AnimationParsingTests {
  @Test func animateDefaults() throws {
    let parsed = try request(#"{"cmd":"animate","key":"master.gain","animation":{"type":"basic","to":0.5}}"#)
    #expect(parsed == Request(.animate(Animate(key: "master.gain", animation: .basic(to: 0.5)))))
    guard case .animate(let animate) = parsed.command else { return }
    #expect(animate.name == "animation" && animate.continuity == .value)
    let named = try request(
      #"{"cmd":"animate","key":"k","name":"wobble","continuity":"slope","animation":{"type":"basic"}}"#)
    #expect(named == Request(.animate(Animate(key: "k", name: "wobble", animation: .basic(), continuity: .slope))))
  }

  @Test func basicWithEveryTimingField() throws {
    let parsed = try animation(
      #"{"type":"basic","from":0,"to":1,"beginTime":0.5,"duration":2,"speed":2,"timeOffset":0.25,"#
        + #""repeatCount":"inf","autoreverses":true,"fillMode":"both","removedOnCompletion":false,"#
        + #""timingFunction":"ease-in-out","additive":true,"cumulative":true,"valueSpace":"db","dbFloor":-90}"#)
    var expected = Animation.basic(from: 0, to: 1, duration: 2, timingFunction: .easeInEaseOut)
    expected.timing = MediaTiming(
      beginTime: 0.5, duration: 2, speed: 2, timeOffset: 0.25, repeatCount: .infinity, autoreverses: true,
      fillMode: .both, removedOnCompletion: false)
    expected.isAdditive = true
    expected.isCumulative = true
    expected.valueSpace = .decibels(floor: -90)
    #expect(AnimationWire.same(parsed, expected))
    #expect(try animation(#"{"type":"basic","by":0.5,"repeatDuration":3.5}"#).timing.repeatDuration == 3.5)
    #expect(try animation(#"{"type":"basic","repeatDuration":"inf"}"#).timing.repeatDuration == .infinity)
    #expect(try animation(#"{"type":"basic","repeatCount":2.5}"#).timing.repeatCount == 2.5)
  }

  @Test func keyframes() throws {
    let parsed = try animation(
      #"{"type":"keyframe","values":[0,1,0.5],"keyTimes":[0,0.25,1],"timingFunctions":["ease-in","qsin"],"#
        + #""calculationMode":"cubic","tensionValues":[0,0.5,0],"continuityValues":[0,0,0],"biasValues":[1,0,-1],"#
        + #""duration":4}"#)
    let expected = KeyframeAnimation(
      values: [0, 1, 0.5], keyTimes: [0, 0.25, 1], timingFunctions: [.easeIn, .fade(.qsin)], calculationMode: .cubic,
      tensionValues: [0, 0.5, 0], continuityValues: [0, 0, 0], biasValues: [1, 0, -1])
    #expect(AnimationWire.same(parsed, Animation(.keyframes(expected), timing: MediaTiming(duration: 4))))
    // Discrete mode takes one key time more than there are values.
    let discrete = try animation(
      #"{"type":"keyframe","values":[0,1],"keyTimes":[0,0.5,1],"calculationMode":"discrete"}"#)
    guard case .keyframes(let frames) = discrete.content else { return }
    #expect(frames.keyTimes == [0, 0.5, 1] && frames.calculationMode == .discrete)
  }

  @Test func springs() throws {
    let physical = try animation(
      #"{"type":"spring","to":1,"mass":2,"stiffness":300,"damping":5,"initialVelocity":-1,"allowsOverdamping":true}"#)
    let parameters = SpringParameters(
      mass: 2, stiffness: 300, damping: 5, initialVelocity: -1, allowsOverdamping: true)
    #expect(AnimationWire.same(physical, .spring(to: 1, parameters: parameters)))
    // Defaults are Core Animation's.
    guard case .spring(let defaults) = try animation(#"{"type":"spring","to":1}"#).content else { return }
    #expect(defaults.parameters == SpringParameters())

    let perceptual = try animation(#"{"type":"spring","from":0,"to":1,"duration":0.5,"bounce":0.3}"#)
    let expected = try SpringParameters.perceptual(duration: 0.5, bounce: 0.3)
    #expect(AnimationWire.same(perceptual, .spring(from: 0, to: 1, parameters: expected)))
    // The perceptual duration is the spring's; the animation itself runs until it settles.
    #expect(perceptual.timing.duration == 0)
  }

  @Test func groups() throws {
    let parsed = try animation(
      #"{"type":"group","duration":3,"animations":[{"type":"basic","to":0},"#
        + #"{"type":"keyframe","keyPath":"streams.s1.gain","values":[1,0]},"#
        + #"{"type":"group","animations":[{"type":"basic","by":1,"beginTime":1}]}]}"#)
    var second = Animation.keyframes([1, 0])
    second.keyPath = "streams.s1.gain"
    var inner = Animation.basic(by: 1)
    inner.timing.beginTime = 1
    let expected = Animation.group([.basic(to: 0), second, .group([inner])], duration: 3)
    #expect(AnimationWire.same(parsed, expected))
  }

  @Test func errorsNameTheExactField() {
    let cases: [(String, String)] = [
      (#"{"type":"tween"}"#, "animation.type"),
      (#"{"type":5}"#, "animation.type"),
      (#"{"type":"basic","from":0,"to":1,"by":1}"#, "animation.by"),
      (#"{"type":"basic","duration":-1}"#, "animation.duration"),
      (#"{"type":"basic","speed":-1}"#, "animation.speed"),
      (#"{"type":"basic","timeOffset":"1"}"#, "animation.timeOffset"),
      (#"{"type":"basic","beginTime":"now"}"#, "animation.beginTime"),
      (#"{"type":"basic","repeatCount":"forever"}"#, "animation.repeatCount"),
      (#"{"type":"basic","repeatCount":-1}"#, "animation.repeatCount"),
      (#"{"type":"basic","repeatCount":2,"repeatDuration":3}"#, "animation.repeatDuration"),
      (#"{"type":"basic","fillMode":"sometimes"}"#, "animation.fillMode"),
      (#"{"type":"basic","autoreverses":"yes"}"#, "animation.autoreverses"),
      (#"{"type":"basic","timingFunction":"wobble"}"#, "animation.timingFunction"),
      (#"{"type":"basic","valueSpace":"loud"}"#, "animation.valueSpace"),
      (#"{"type":"basic","dbFloor":-80}"#, "animation.dbFloor"),
      (#"{"type":"basic","from":-1,"valueSpace":"power"}"#, "animation.from"),
      (#"{"type":"keyframe","values":[]}"#, "animation.values"),
      (#"{"type":"keyframe","values":[0.5,-0.5],"valueSpace":"db"}"#, "animation.values[1]"),
      (#"{"type":"keyframe","values":[0,1],"keyTimes":[0]}"#, "animation.keyTimes"),
      (#"{"type":"keyframe","values":[0,1],"keyTimes":[0.1,1]}"#, "animation.keyTimes[0]"),
      (#"{"type":"keyframe","values":[0,1,2],"keyTimes":[0,0.5,0.9]}"#, "animation.keyTimes[2]"),
      (#"{"type":"keyframe","values":[0,1,2],"keyTimes":[0,1.5,1]}"#, "animation.keyTimes[1]"),
      (#"{"type":"keyframe","values":[0,1],"keyTimes":[0,1,1],"calculationMode":"linear"}"#, "animation.keyTimes"),
      (#"{"type":"keyframe","values":[0,1],"keyTimes":[0,1,1,1],"calculationMode":"discrete"}"#, "animation.keyTimes"),
      (#"{"type":"keyframe","values":[0,1],"timingFunctions":["linear","linear"]}"#, "animation.timingFunctions"),
      (#"{"type":"keyframe","values":[0,1,0],"timingFunctions":["linear","nope"]}"#, "animation.timingFunctions[1]"),
      (#"{"type":"keyframe","values":[0,1],"tensionValues":[0,0]}"#, "animation.tensionValues"),
      (#"{"type":"keyframe","values":[0,1],"calculationMode":"cubic","biasValues":[0]}"#, "animation.biasValues"),
      (#"{"type":"keyframe","values":[0,1],"calculationMode":"smooth"}"#, "animation.calculationMode"),
      (#"{"type":"spring","mass":0}"#, "animation.mass"),
      (#"{"type":"spring","stiffness":-1}"#, "animation.stiffness"),
      (#"{"type":"spring","damping":-1}"#, "animation.damping"),
      (#"{"type":"spring","duration":0.5,"bounce":1}"#, "animation.bounce"),
      (#"{"type":"spring","duration":0,"bounce":0}"#, "animation.duration"),
      (#"{"type":"group","animations":[]}"#, "animation.animations"),
      (#"{"type":"group","animations":[5]}"#, "animation.animations[0]"),
      (#"{"type":"group","animations":[{"type":"basic","keyPath":"a..b"}]}"#, "animation.animations[0].keyPath"),
      (
        #"{"type":"group","animations":[{"type":"basic"},{"type":"group","animations":[{"type":"spring","mass":-2}]}]}"#,
        "animation.animations[1].animations[0].mass"
      ),
    ]
    for (object, field) in cases {
      let error = animationRefusal(object)
      #expect(error?.code == .invalidField, "\(object): \(String(describing: error))")
      #expect(error?.field == field, "\(object)")
      #expect(error?.message.hasPrefix(field + ": ") == true, "\(object): \(String(describing: error?.message))")
      // The problem travels without the path, for callers that name the field their own way.
      #expect(error.map { $0.problem.map { "\(field): \($0)" } == $0.message } == true, "\(object)")
    }
  }

  @Test func theFieldPathReachesIntoGroupsAndBatches() {
    let object =
      #"{"type":"group","animations":[{"type":"basic"},{"type":"keyframe","values":[0,1,0,1],"keyTimes":[0,0.7,0.5,1]}]}"#
    #expect(
      animationRefusal(object)
        == ProtocolError(
          .invalidField, field: "animation.animations[1].keyTimes[2]",
          "animation.animations[1].keyTimes[2]: key times must not decrease (0.7 then 0.5)"))
    let batch = #"{"cmd":"batch","commands":[{"cmd":"ping"},{"cmd":"animate","key":"k","animation":\#(object)}]}"#
    #expect(refusal(batch)?.field == "commands[1].animation.animations[1].keyTimes[2]")
  }

  @Test func messagesSayWhatIsWrong() {
    #expect(
      animationRefusal(#"{"type":"spring","duration":0.5,"bounce":1}"#)?.message
        == "animation.bounce: must be greater than -1 and less than 1, got 1.0")
    #expect(
      animationRefusal(#"{"type":"keyframe","values":[0,1],"timingFunctions":["linear","linear"]}"#)?.message
        == "animation.timingFunctions: needs one timing function per segment (1), got 2")
    #expect(
      animationRefusal(#"{"type":"keyframe","values":[0,1],"tensionValues":[0,0]}"#)?.message
        == #"animation.tensionValues: only calculationMode "cubic" uses tensionValues"#)
    #expect(
      animationRefusal(#"{"type":"basic","repeatCount":"forever"}"#)?.message
        == #"animation.repeatCount: expected a number not negative or "inf", got "forever""#)
  }

  @Test func fieldsThatDoNotBelongAreUnknown() {
    // keyPath is for a group's children; the command's key says where the animation goes.
    #expect(animationRefusal(#"{"type":"basic","keyPath":"k"}"#)?.code == .unknownField)
    #expect(animationRefusal(#"{"type":"basic","keyPath":"k"}"#)?.field == "animation.keyPath")
    // The perceptual form (bounce) does not mix with the physical one.
    #expect(
      animationRefusal(#"{"type":"spring","duration":1,"bounce":0,"mass":1}"#)
        == ProtocolError(
          .unknownField, field: "animation.mass",
          #"animation.mass: a spring given by duration and bounce takes no field "mass""#))
    #expect(
      animationRefusal(#"{"type":"group","animations":[{"type":"basic"}],"values":[1]}"#)?.field == "animation.values")
  }

  /// What only the engine knows is still refused at parse time, through `Animation.validate`.
  @Test func theEngineChecksWhatTheProtocolDoesNot() {
    #expect(
      animationRefusal(#"{"type":"basic","beginTime":1e300}"#)
        == ProtocolError(
          .outOfRange, field: "animation.beginTime",
          "animation.beginTime: 1e300 s is beyond the horizon of 1000000000 s (about 31 years)"))
    // to − by is the start value, negative here, which power space cannot hold.
    #expect(
      animationRefusal(#"{"type":"basic","to":0,"by":0.5,"valueSpace":"power"}"#)
        == ProtocolError(
          .invalidField, field: "animation.valueSpace",
          "animation.valueSpace: power needs non-negative values, got -0.5 and 0.0"))
    // In a group, the child's field, under the name the wire uses.
    #expect(
      animationRefusal(#"{"type":"group","animations":[{"type":"basic","to":0,"by":0.5,"valueSpace":"power"}]}"#)
        == ProtocolError(
          .invalidField, field: "animation.animations[0].valueSpace",
          "animation.animations[0].valueSpace: power needs non-negative values, got -0.5 and 0.0"))
  }

  /// What depends on the daemon's state (the value a relative animation starts from) is left to it.
  @Test func aRelativeAnimationIsJudgedWhereItStarts() {
    #expect(animationRefusal(#"{"type":"basic","by":-0.25,"valueSpace":"power"}"#) == nil)
  }
}
