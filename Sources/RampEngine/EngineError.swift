/// Every way the engine refuses input. Each error names the field at fault, so the
/// protocol and the CLI can pass the message on unchanged.
public struct EngineError: Error, Equatable, Sendable, CustomStringConvertible {
  public enum Code: String, Sendable, CaseIterable {
    /// A number is NaN, infinite where that is not allowed, or negative.
    case invalidValue = "invalid-value"
    /// A value outside the range a property was defined with (a gain above its maximum), or a
    /// time beyond the engine's horizon (`MediaTiming.horizon`).
    case outOfRange = "out-of-range"
    /// A timing-function or fade-shape string that does not parse.
    case invalidTimingFunction = "invalid-curve"
    /// A key path that is not well formed.
    case invalidKeyPath = "invalid-key-path"
    /// A well-formed key path that names no property.
    case unknownKeyPath = "unknown-key-path"
    /// An animation whose fields do not fit together (empty keyframes, mismatched keyTimes, …).
    case invalidAnimation = "invalid-animation"
    /// A configured limit was reached (animations per key path, …).
    case limitExceeded = "limit-exceeded"
    /// No animation under that key.
    case unknownAnimation = "unknown-animation"
  }

  public let code: Code
  /// The field the message is about, as it is spelled in the protocol (`duration`, `keyTimes[2]`).
  public let field: String?
  /// Why, as plain values: a refusal met on the render thread is made without allocating, and
  /// put in words (`message`) where it is reported.
  public let reason: Reason

  /// Why the engine refused, as plain values. The names it holds are ones the engine already
  /// has (a property's key path, an animation's key), copied, not built.
  public enum Reason: Sendable {
    /// Put in words where it was met (input checked off the render thread).
    case text(String)
    case notFinite(Double)
    case outsideRange(Double, keyPath: String, range: ClosedRange<Double>)
    case noProperty(keyPath: String)
    case tooManyAnimations(keyPath: String, limit: Int)
    case negativeInSpace(ValueSpace, from: Double, to: Double)
    case noAnimation(key: String, keyPath: String)
    /// A time (as the caller gave it) beyond `MediaTiming.horizon`.
    case beyondHorizon(Double)
    case committedTwice
    /// More animations would end before the next drain than the engine has room to report.
    case tooManyEnding(limit: Int)
  }

  public init(_ code: Code, field: String? = nil, _ message: String) {
    self.init(code, field: field, reason: .text(message))
  }

  public init(_ code: Code, field: String? = nil, reason: Reason) {
    self.code = code
    self.field = field
    self.reason = reason
  }

  /// The same refusal, about `field` instead.
  public func about(_ field: String?) -> EngineError { EngineError(code, field: field, reason: reason) }

  public var message: String {
    switch reason {
    case .text(let text): return text
    case .notFinite(let value): return "must be a finite number, got \(value)"
    case .outsideRange(let value, let keyPath, let range): return "\(value) is outside \(keyPath)'s range \(range)"
    case .noProperty(let keyPath): return "no property '\(keyPath)'"
    case .tooManyAnimations(let keyPath, let limit):
      return "\(keyPath) already has \(limit) animations, the most allowed"
    case .negativeInSpace(let space, let from, let to):
      return "\(space) needs non-negative values, got \(from) and \(to)"
    case .noAnimation(let key, let keyPath): return "no animation '\(key)' on \(keyPath)"
    case .beyondHorizon(let seconds):
      return "\(seconds) s is beyond the horizon of \(Int(MediaTiming.horizon)) s (about 31 years)"
    case .committedTwice: return "an animation prepared once is added once"
    case .tooManyEnding(let limit):
      return "more than \(limit) animations would end at once, the most the engine has room to report; try again"
    }
  }

  public var description: String {
    if let field { return "\(field): \(message)" }
    return message
  }

  /// Equal when reported alike: the same code, field and words.
  public static func == (lhs: EngineError, rhs: EngineError) -> Bool {
    lhs.code == rhs.code && lhs.field == rhs.field && lhs.message == rhs.message
  }
}

/// Validation helpers shared by every type that takes numbers from the outside world.
enum Check {
  static func finite(_ value: Double, _ field: String) throws(EngineError) {
    guard value.isFinite else {
      throw EngineError(.invalidValue, field: field, reason: .notFinite(value))
    }
  }

  static func nonNegative(_ value: Double, _ field: String) throws(EngineError) {
    try finite(value, field)
    guard value >= 0 else {
      throw EngineError(.invalidValue, field: field, "must not be negative, got \(value)")
    }
  }

  static func positive(_ value: Double, _ field: String) throws(EngineError) {
    try finite(value, field)
    guard value > 0 else {
      throw EngineError(.invalidValue, field: field, "must be greater than zero, got \(value)")
    }
  }

  /// Positive and not subnormal: the render thread flushes subnormals to zero, so a divisor such
  /// as a spring's mass must be judged the same wherever it is checked.
  static func positiveNormal(_ value: Double, _ field: String) throws(EngineError) {
    try positive(value, field)
    guard value >= Double.leastNormalMagnitude else {
      throw EngineError(
        .invalidValue, field: field,
        "must be at least \(Double.leastNormalMagnitude) (a subnormal is zero here), got \(value)")
    }
  }

  /// A time (seconds, either sign) within `MediaTiming.horizon`; `shown` is the value as the
  /// caller gave it, when the check is on a value derived from it.
  /// `slack`: seconds allowed past it, for a time the caller made by adding a clock to one
  /// within the horizon (rounding must not refuse it).
  static func withinHorizon(_ seconds: Double, _ field: String, shown: Double? = nil, slack: Double = 0)
    throws(EngineError)
  {
    guard abs(seconds) <= MediaTiming.horizon + slack else {
      throw EngineError(.outOfRange, field: field, reason: .beyondHorizon(shown ?? seconds))
    }
  }

  static func nonNegativeOrInfinite(_ value: Double, _ field: String) throws(EngineError) {
    guard !value.isNaN, value >= 0 else {
      throw EngineError(.invalidValue, field: field, "must be zero, positive or infinity, got \(value)")
    }
  }
}
