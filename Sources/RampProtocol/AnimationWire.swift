import RampEngine

/// The `"animation"` object of `animate`: every field of the engine's `Animation`, by the
/// names Core Animation gives them.
enum AnimationWire {
  enum Kind: String, CaseIterable {
    case basic, keyframe, spring, group
  }

  /// The keys of each kind of object, from the protocol's description.
  static let commonKeys = ProtocolSchema.commonAnimationFields.map(\.name)
  static func keys(of kind: Kind) -> [String] { ProtocolSchema.animationFields[kind.rawValue]?.map(\.name) ?? [] }
  static let perceptualSpringKeys = ProtocolSchema.perceptualSpringFields.map(\.name)

  // MARK: Parsing

  /// `prefix` leads to this object (`"animation."`, `"animation.animations[1]."`); children of a
  /// group may name their own `keyPath`.
  static func parse(_ object: JSONObject, prefix: String, isChild: Bool, options: ParseOptions) throws(ProtocolError)
    -> Animation
  {
    let kind = try self.kind(of: object, prefix: prefix)
    let isPerceptual = kind == .spring && object["bounce"].map { $0 != .null } == true
    let allowed =
      commonKeys + (isChild ? [ProtocolSchema.childField.name] : [])
      + (isPerceptual ? perceptualSpringKeys : keys(of: kind))
    let context = isPerceptual ? "a spring given by duration and bounce" : "a \(kind.rawValue) animation"
    let reader = try FieldReader(object, prefix: prefix, allowed: allowed, context: context, options: options)

    var timing = try self.timing(reader)
    let space = try reader.space("valueSpace") ?? .amplitude
    let content: Animation.Content
    switch kind {
    case .basic:
      content = .basic(try basic(reader, space: space))
    case .keyframe:
      content = .keyframes(try keyframes(reader, space: space))
    case .spring:
      let ends = try basic(reader, space: space)
      let parameters = try isPerceptual ? perceptualSpring(reader) : physicalSpring(reader)
      // In the perceptual form "duration" is the spring's own; the animation lasts until it settles.
      if isPerceptual { timing.duration = 0 }
      content = .spring(SpringAnimation(from: ends.from, to: ends.to, by: ends.by, parameters: parameters))
    case .group:
      content = .group(try children(reader))
    }
    var animation = Animation(
      content, timing: timing, timingFunction: try reader.curve("timingFunction") ?? .linear,
      additive: try reader.bool("additive") ?? false, cumulative: try reader.bool("cumulative") ?? false,
      valueSpace: space)
    if isChild { animation.keyPath = try reader.keyPath("keyPath") }
    return animation
  }

  private static func kind(of object: JSONObject, prefix: String) throws(ProtocolError) -> Kind {
    let field = prefix + "type"
    guard let value = object["type"], value != .null else {
      throw .at(field, .missingField, "missing; this field is required")
    }
    guard case .string(let text) = value, let kind = Kind(rawValue: text) else {
      throw .at(field, .invalidField, "expected one of basic, keyframe, spring, group, got \(describe(value))")
    }
    return kind
  }

  private static func timing(_ reader: FieldReader) throws(ProtocolError) -> MediaTiming {
    var timing = MediaTiming()
    timing.beginTime = try reader.time("beginTime")
    timing.duration = try reader.seconds("duration") ?? 0
    if let speed = try reader.number("speed") {
      guard speed >= 0 else { throw reader.invalid("speed", "must not be negative, got \(JSONValue.format(speed))") }
      timing.speed = speed
    }
    timing.timeOffset = try reader.time("timeOffset") ?? 0
    timing.repeatCount = try countOrInfinity(reader, "repeatCount") ?? 0
    timing.repeatDuration = try countOrInfinity(reader, "repeatDuration") ?? 0
    if timing.repeatCount > 0 && timing.repeatDuration > 0 {
      throw reader.invalid("repeatDuration", "set repeatCount or repeatDuration, not both")
    }
    timing.autoreverses = try reader.bool("autoreverses") ?? false
    timing.fillMode = try reader.choice("fillMode", FillMode.self) ?? .removed
    timing.removedOnCompletion = try reader.bool("removedOnCompletion") ?? true
    return timing
  }

  /// A number not negative, or the string "inf" (JSON has no infinity).
  private static func countOrInfinity(_ reader: FieldReader, _ key: String) throws(ProtocolError) -> Double? {
    guard let value = reader.value(key) else { return nil }
    if value == .string("inf") { return .infinity }
    guard case .number(let number) = value, number.isFinite, number >= 0 else {
      throw reader.invalid(key, "expected a number not negative or \"inf\", got \(describe(value))")
    }
    // A repeat count is not a time: its product with the duration saturates in the engine.
    if key == "repeatDuration" { try FieldReader.withinHorizon(number, reader.path(key)) }
    return number
  }

  private static func basic(_ reader: FieldReader, space: ValueSpace) throws(ProtocolError) -> BasicAnimation {
    let ends = BasicAnimation(from: try reader.number("from"), to: try reader.number("to"), by: try reader.number("by"))
    if ends.from != nil && ends.to != nil && ends.by != nil {
      throw reader.invalid("by", "give at most two of from, to and by")
    }
    for (key, value) in [("from", ends.from), ("to", ends.to)] {
      if let value { try checkSign(value, space, reader.path(key)) }
    }
    return ends
  }

  /// dB and power spaces have no negative amplitudes.
  private static func checkSign(_ value: Double, _ space: ValueSpace, _ field: String) throws(ProtocolError) {
    guard value < 0, space != .amplitude else { return }
    throw .at(field, .invalidField, "\(space) needs values not negative, got \(JSONValue.format(value))")
  }

  private static func keyframes(_ reader: FieldReader, space: ValueSpace) throws(ProtocolError) -> KeyframeAnimation {
    let values = try reader.required(try reader.numbers("values"), "values")
    guard !values.isEmpty else { throw reader.invalid("values", "a keyframe animation needs at least one value") }
    for (index, value) in values.enumerated() { try checkSign(value, space, reader.path("values[\(index)]")) }
    let mode = try reader.choice("calculationMode", KeyframeAnimation.CalculationMode.self) ?? .linear
    var keyframes = KeyframeAnimation(values: values, calculationMode: mode)

    if let keyTimes = try reader.numbers("keyTimes") {
      try checkKeyTimes(keyTimes, valueCount: values.count, mode: mode, reader)
      keyframes.keyTimes = keyTimes
    }
    if let curves = try reader.array("timingFunctions") {
      let segments = max(values.count - 1, 0)
      guard curves.count == segments else {
        throw reader.invalid(
          "timingFunctions", "needs one timing function per segment (\(segments)), got \(curves.count)")
      }
      var parsed: [TimingFunction] = []
      for (index, curve) in curves.enumerated() {
        parsed.append(try FieldReader.curve(curve, reader.path("timingFunctions[\(index)]")))
      }
      keyframes.timingFunctions = parsed
    }
    for key in ["tensionValues", "continuityValues", "biasValues"] {
      guard let parameters = try reader.numbers(key) else { continue }
      guard mode == .cubic else { throw reader.invalid(key, "only calculationMode \"cubic\" uses \(key)") }
      guard parameters.count == values.count else {
        throw reader.invalid(key, "needs one value per keyframe (\(values.count)), got \(parameters.count)")
      }
      switch key {
      case "tensionValues": keyframes.tensionValues = parameters
      case "continuityValues": keyframes.continuityValues = parameters
      default: keyframes.biasValues = parameters
      }
    }
    return keyframes
  }

  /// The engine's rules for key times, checked here so that the error names the exact entry.
  private static func checkKeyTimes(
    _ keyTimes: [Double], valueCount count: Int, mode: KeyframeAnimation.CalculationMode, _ reader: FieldReader
  ) throws(ProtocolError) {
    switch mode {
    case .discrete:
      guard keyTimes.count == count || keyTimes.count == count + 1 else {
        throw reader.invalid(
          "keyTimes",
          "discrete mode needs \(count) or \(count + 1) key times for \(count) values, got \(keyTimes.count)")
      }
    case .linear, .cubic, .paced:
      guard keyTimes.count == count else {
        throw reader.invalid("keyTimes", "needs one key time per value (\(count)), got \(keyTimes.count)")
      }
    }
    for (index, time) in keyTimes.enumerated() {
      let key = "keyTimes[\(index)]"
      guard (0...1).contains(time) else {
        throw reader.invalid(key, "must be in [0, 1], got \(JSONValue.format(time))")
      }
      if index > 0 && time < keyTimes[index - 1] {
        throw reader.invalid(
          key,
          "key times must not decrease (\(JSONValue.format(keyTimes[index - 1])) then \(JSONValue.format(time)))")
      }
    }
    guard keyTimes.first == 0 else { throw reader.invalid("keyTimes[0]", "must be 0") }
    let mustEndAtOne = mode == .discrete ? keyTimes.count == count + 1 : count > 1
    if mustEndAtOne && keyTimes.last != 1 { throw reader.invalid("keyTimes[\(keyTimes.count - 1)]", "must be 1") }
  }

  private static func physicalSpring(_ reader: FieldReader) throws(ProtocolError) -> SpringParameters {
    var parameters = SpringParameters()
    if let mass = try reader.number("mass") {
      guard mass > 0 else { throw reader.invalid("mass", "must be greater than zero, got \(JSONValue.format(mass))") }
      parameters.mass = mass
    }
    if let stiffness = try reader.number("stiffness") {
      guard stiffness > 0 else {
        throw reader.invalid("stiffness", "must be greater than zero, got \(JSONValue.format(stiffness))")
      }
      parameters.stiffness = stiffness
    }
    if let damping = try reader.number("damping") {
      guard damping >= 0 else {
        throw reader.invalid("damping", "must not be negative, got \(JSONValue.format(damping))")
      }
      parameters.damping = damping
    }
    parameters.initialVelocity = try reader.number("initialVelocity") ?? 0
    parameters.allowsOverdamping = try reader.bool("allowsOverdamping") ?? false
    return parameters
  }

  private static func perceptualSpring(_ reader: FieldReader) throws(ProtocolError) -> SpringParameters {
    let duration = try reader.required(try reader.seconds("duration"), "duration")
    let bounce = try reader.required(try reader.number("bounce"), "bounce")
    let velocity = try reader.number("initialVelocity") ?? 0
    do {
      return try SpringParameters.perceptual(duration: duration, bounce: bounce, initialVelocity: velocity)
    } catch {
      throw engineError(error, field: reader.path(error.field ?? "bounce"))
    }
  }

  private static func children(_ reader: FieldReader) throws(ProtocolError) -> [Animation] {
    let elements = try reader.required(
      try reader.array("animations", limit: ProtocolLimits.groupCount), "animations")
    guard !elements.isEmpty else { throw reader.invalid("animations", "a group needs at least one animation") }
    var children: [Animation] = []
    for (index, element) in elements.enumerated() {
      let childPrefix = reader.path("animations[\(index)]")
      guard case .object(let object) = element else {
        throw .at(childPrefix, .invalidField, "expected an animation object, got \(describe(element))")
      }
      children.append(try parse(object, prefix: childPrefix + ".", isChild: true, options: reader.options))
    }
    return children
  }

  // MARK: The engine's own check

  /// Refuses now, as the engine would when the animation takes effect, whatever is wrong with the
  /// animation for its own sake (`Animation.validate`). Key paths, limits and values that depend
  /// on the daemon's state are left to it.
  static func checkWithEngine(_ animation: Animation, field: String) throws(ProtocolError) {
    do {
      try animation.validate()
    } catch {
      throw .at(requestField(error.field, in: field), ErrorCode(error.code), error.message)
    }
  }

  /// The request field an engine refusal of the animation at `field` is about. The engine says
  /// "space" where an animation object says "valueSpace".
  static func requestField(_ inner: String?, in field: String) -> String {
    guard let inner else { return field }
    return field + "." + (inner == "space" || inner.hasSuffix(".space") ? inner.dropLast(5) + "valueSpace" : inner)
  }

  // MARK: Encoding

  static func json(_ animation: Animation, isChild: Bool) -> JSONValue {
    var object = JSONObject()
    switch animation.content {
    case .basic(let basic):
      object["type"] = "basic"
      encodeEnds(basic.from, basic.to, basic.by, into: &object)
    case .keyframes(let keyframes):
      object["type"] = "keyframe"
      object["values"] = .array(keyframes.values.map(JSONValue.number))
      if let keyTimes = keyframes.keyTimes { object["keyTimes"] = .array(keyTimes.map(JSONValue.number)) }
      if let curves = keyframes.timingFunctions {
        object["timingFunctions"] = .array(curves.map { .string(curveName($0)) })
      }
      if keyframes.calculationMode != .linear {
        object["calculationMode"] = .string(keyframes.calculationMode.rawValue)
      }
      if let values = keyframes.tensionValues { object["tensionValues"] = .array(values.map(JSONValue.number)) }
      if let values = keyframes.continuityValues { object["continuityValues"] = .array(values.map(JSONValue.number)) }
      if let values = keyframes.biasValues { object["biasValues"] = .array(values.map(JSONValue.number)) }
    case .spring(let spring):
      // Always the physical form: the perceptual one is a way of choosing these numbers.
      object["type"] = "spring"
      encodeEnds(spring.from, spring.to, spring.by, into: &object)
      object["mass"] = .number(spring.parameters.mass)
      object["stiffness"] = .number(spring.parameters.stiffness)
      object["damping"] = .number(spring.parameters.damping)
      if spring.parameters.initialVelocity != 0 {
        object["initialVelocity"] = .number(spring.parameters.initialVelocity)
      }
      if spring.parameters.allowsOverdamping { object["allowsOverdamping"] = true }
    case .group(let children):
      object["type"] = "group"
      object["animations"] = .array(children.map { json($0, isChild: true) })
    }
    if isChild, let keyPath = animation.keyPath { object["keyPath"] = .string(keyPath) }
    encodeTiming(animation.timing, into: &object)
    if animation.timingFunction != .linear { object["timingFunction"] = .string(curveName(animation.timingFunction)) }
    if animation.isAdditive { object["additive"] = true }
    if animation.isCumulative { object["cumulative"] = true }
    encodeSpace(animation.valueSpace, key: "valueSpace", into: &object)
    return .object(object)
  }

  private static func encodeEnds(_ from: Double?, _ to: Double?, _ by: Double?, into object: inout JSONObject) {
    if let from { object["from"] = .number(from) }
    if let to { object["to"] = .number(to) }
    if let by { object["by"] = .number(by) }
  }

  private static func encodeTiming(_ timing: MediaTiming, into object: inout JSONObject) {
    let defaults = MediaTiming()
    if let begin = timing.beginTime { object["beginTime"] = .number(begin) }
    if timing.duration != defaults.duration { object["duration"] = .number(timing.duration) }
    if timing.speed != defaults.speed { object["speed"] = .number(timing.speed) }
    if timing.timeOffset != defaults.timeOffset { object["timeOffset"] = .number(timing.timeOffset) }
    if timing.repeatCount != defaults.repeatCount { object["repeatCount"] = countOrInfinity(timing.repeatCount) }
    if timing.repeatDuration != defaults.repeatDuration {
      object["repeatDuration"] = countOrInfinity(timing.repeatDuration)
    }
    if timing.autoreverses { object["autoreverses"] = true }
    if timing.fillMode != defaults.fillMode { object["fillMode"] = .string(timing.fillMode.rawValue) }
    if !timing.removedOnCompletion { object["removedOnCompletion"] = false }
  }

  private static func countOrInfinity(_ value: Double) -> JSONValue {
    value == .infinity ? "inf" : .number(value)
  }

  /// `omittingAmplitude`: for animations, where amplitude is the default. A fade's or a set's
  /// space defaults to the configured transaction's, so there amplitude must be written out.
  static func encodeSpace(
    _ space: ValueSpace, key: String, omittingAmplitude: Bool = true, into object: inout JSONObject
  ) {
    switch space {
    case .amplitude: if !omittingAmplitude { object[key] = "amplitude" }
    case .power: object[key] = "power"
    case .decibels(let floor):
      object[key] = "db"
      // A floor given is written whatever it is: left out, it would be the reader's configured one.
      if let floor { object["dbFloor"] = .number(floor) }
    }
  }

  /// The curve's name as the parser reads it back. (The engine's description marks a mirrored
  /// fade shape, which only the engine itself creates.)
  static func curveName(_ curve: TimingFunction) -> String {
    if case .fade(let shape, _) = curve { return shape.rawValue }
    return curve.description
  }

  // MARK: Equality

  /// Structural equality of two animations (the engine's `Animation` is not `Equatable`).
  static func same(_ a: Animation, _ b: Animation) -> Bool {
    guard a.timing == b.timing, a.timingFunction == b.timingFunction, a.isAdditive == b.isAdditive,
      a.isCumulative == b.isCumulative, a.valueSpace == b.valueSpace, a.keyPath == b.keyPath
    else { return false }
    switch (a.content, b.content) {
    case (.basic(let x), .basic(let y)): return x == y
    case (.keyframes(let x), .keyframes(let y)): return x == y
    case (.spring(let x), .spring(let y)): return x == y
    case (.group(let x), .group(let y)): return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
    default: return false
    }
  }
}
