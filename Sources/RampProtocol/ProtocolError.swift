import RampEngine

/// The stable error codes of the wire protocol. Clients branch on these, so a code is never
/// renamed or reused; PROTOCOL.md lists when each is sent.
public enum ErrorCode: String, Sendable, CaseIterable {
  /// The line is not valid JSON (or not valid UTF-8).
  case badJSON = "bad-json"
  /// Valid JSON, but not an object, or without a string "cmd", or with an id that is not a scalar.
  case badRequest = "bad-request"
  case lineTooLong = "line-too-long"
  case unknownCommand = "unknown-command"
  case missingField = "missing-field"
  /// Wrong type, NaN or infinity, a negative duration, a curve string that does not parse…
  case invalidField = "invalid-field"
  /// A key the command does not take, which catches typos such as "durtion".
  case unknownField = "unknown-field"
  /// A value outside what the property or the configuration allows (a gain above its maximum).
  case outOfRange = "out-of-range"
  case unknownKeyPath = "unknown-key-path"
  case unknownStream = "unknown-stream"
  case unknownAnimation = "unknown-animation"
  case streamExists = "stream-exists"
  /// A file that is missing, unreadable or cannot be decoded.
  case fileError = "file-error"
  /// A path outside the configured media roots.
  case forbiddenPath = "forbidden-path"
  /// A connection from a user the access rules do not admit (sent instead of the greeting).
  case permissionDenied = "permission-denied"
  case limitExceeded = "limit-exceeded"
  case timeout
  case shuttingDown = "shutting-down"
  case internalError = "internal-error"
  /// Events were lost on a full event queue, among them the end of an animation a `wait` waited
  /// for: it has ended, but how (finished or removed) is unknown.
  case eventsLost = "events-lost"
  /// A `duck`, `unduck` or `duck-remove` names no duck rule.
  case unknownDuck = "unknown-duck"
}

/// An error as it travels in a reply: a stable code, the field at fault (spelled as on the wire,
/// with its full path such as `commands[2].animation.keyTimes[1]`) and a message for people.
///
/// Messages the protocol writes start with the field path, so a client can print the message
/// alone and still say where the problem is.
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
  public var code: ErrorCode
  public var field: String?
  public var message: String
  /// An `out-of-range` refusal's bound, and the number it refused as rampd received it (after
  /// units: `+3dB` arrives as 1.4125…): what a client routes on, never the message.
  public var bound: Bound?
  public var value: Double?
  /// An `out-of-range` refusal's words after the number it quotes: the message is `<value>
  /// <detail>`, so a client can quote the value as its user typed it (`+3dB`) and keep the rest.
  public var detail: String?
  /// The message without the place it starts with (the field path, or where a `bad-json` line
  /// went wrong), for a caller that names the place its own way; nil when the message names no
  /// place.
  public private(set) var problem: String?
  /// A `bad-json` refusal's byte offset into the text, where parsing stopped.
  public private(set) var offset: Int?

  /// The bounds an `out-of-range` refusal names (`bound` on the wire).
  public enum Bound: String, Sendable, CaseIterable {
    /// A gain above `[gain] max`.
    case gainMaximum = "gain-maximum"
    /// A gain below 0.
    case gainMinimum = "gain-minimum"
    /// A value outside its property's range (a `pan` outside −1 … +1).
    case propertyRange = "property-range"
  }

  public init(_ code: ErrorCode, field: String? = nil, _ message: String) {
    self.code = code
    self.field = field
    self.message = message
  }

  /// An `out-of-range` refusal of `value` for crossing `bound`, saying `<value> <detail>`.
  public init(outOfRange bound: Bound, value: Double, field: String?, detail: String) {
    self.init(.outOfRange, field: field, "\(JSONValue.format(value)) \(detail)")
    self.bound = bound
    self.value = value
    self.detail = detail
  }

  /// An `out-of-range` refusal of `value`, outside `keyPath`'s range: however it was met (a
  /// request checked, a property defined), the same refusal.
  public static func outsideRange(
    _ value: Double, keyPath: String, range: ClosedRange<Double>, field: String?
  ) -> ProtocolError {
    ProtocolError(
      outOfRange: .propertyRange, value: value, field: field,
      detail:
        "is outside \(keyPath)'s range \(JSONValue.format(range.lowerBound))...\(JSONValue.format(range.upperBound))")
  }

  /// A `bad-json` refusal at byte `offset`: `bad JSON at column <offset + 1>: <problem>`.
  init(badJSONAt offset: Int, _ problem: String) {
    self.init(.badJSON, "bad JSON at column \(offset + 1): \(problem)")
    self.offset = offset
    self.problem = problem
  }

  public var description: String { "\(code.rawValue): \(message)" }

  /// Equal as the wire carries them: what a reply sends, not how the message was put together.
  public static func == (lhs: ProtocolError, rhs: ProtocolError) -> Bool {
    lhs.code == rhs.code && lhs.field == rhs.field && lhs.message == rhs.message && lhs.bound == rhs.bound
      && lhs.value == rhs.value && lhs.detail == rhs.detail
  }

  /// `<code>: <message>`, with the field when the message does not already start with it: what
  /// a client prints for a refusal.
  public var summary: String {
    var text = description
    if let field, !message.hasPrefix(field + ":") { text += " (field: \(field))" }
    return text
  }

  /// An error about `field`, with the field path in front of the message.
  static func at(_ field: String, _ code: ErrorCode, _ message: String) -> ProtocolError {
    var error = ProtocolError(code, field: field, "\(field): \(message)")
    error.problem = message
    return error
  }
}

extension ErrorCode {
  /// The protocol's code for an engine refusal: the one mapping, whichever path reports it (a
  /// request checked while it is parsed, or a command refused when it is applied).
  public init(_ code: EngineError.Code) {
    switch code {
    case .invalidValue, .invalidTimingFunction, .invalidKeyPath, .invalidAnimation: self = .invalidField
    case .outOfRange: self = .outOfRange
    case .unknownKeyPath: self = .unknownKeyPath
    case .limitExceeded: self = .limitExceeded
    case .unknownAnimation: self = .unknownAnimation
    }
  }
}

extension ProtocolError {
  /// An engine refusal met when a command is applied, as a reply reports it. `field` names the
  /// request field when the engine's own field is not a request field.
  public init(_ error: EngineError, field: String? = nil) {
    if case .outsideRange(let value, let keyPath, let range) = error.reason {
      self = .outsideRange(value, keyPath: keyPath, range: range, field: field ?? error.field)
      return
    }
    self.init(ErrorCode(error.code), field: field ?? error.field, error.message)
  }

  /// An engine refusal of an `animate` request's animation met when it is applied: its field
  /// under `animation` as the request spells it, but the request's own `key`.
  public init(refusingAnimation error: EngineError) {
    let field = error.field == "key" ? "key" : AnimationWire.requestField(error.field, in: "animation")
    self.init(error, field: field)
  }

  /// The same error, its field placed under `prefix` (`commands[2].to`).
  public func prefixed(_ prefix: String) -> ProtocolError {
    var error = self
    error.field = field.map { "\(prefix).\($0)" } ?? prefix
    return error
  }
}

/// The version of the wire protocol, sent in the greeting. It changes only when a change would
/// break a client written against the previous one; new commands and fields do not change it.
public enum ProtocolVersion {
  public static let current = 1
}
