import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The space in which an animation interpolates between its values. The values themselves
/// (from, to, keyframes, the property's model) are always linear amplitudes.
public enum ValueSpace: Sendable, Hashable, CustomStringConvertible {
  /// Straight lines in amplitude (the default).
  case amplitude
  /// Straight lines in decibels. Amplitudes at or below `floor` dB are encoded as the floor, and
  /// the floor decodes to silence (0): a dB fade-out runs down to the floor and ends in silence,
  /// and a dB fade-in starts from silence and is at the floor one sample later. A nil floor is
  /// one nobody gave (`db` rather than `db(-60)`): the engine uses `defaultDecibelFloor`, and
  /// the daemon, reading a request, its configured `fade.db-floor`. A given floor is kept as
  /// given, even when it equals the default.
  case decibels(floor: Double?)
  /// Straight lines in power (amplitude squared): an equal-power crossfade.
  case power

  public static let defaultDecibelFloor = -60.0
  public static let ceilingDecibels = 400.0
  public static let decibels = ValueSpace.decibels(floor: nil)

  /// Parses `amplitude`, `db`, `db(-80)` or `power`.
  public init(parsing text: String) throws(EngineError) {
    let source = text.trimmingWhitespace().lowercased()
    switch source {
    case "amplitude", "linear": self = .amplitude
    case "power": self = .power
    case "db", "decibels": self = .decibels
    default:
      if source.hasPrefix("db(") && source.hasSuffix(")") {
        let inner = source.dropFirst(3).dropLast().trimmingWhitespace()
        guard let floor = Double(inner), floor.isFinite, floor < 0 else {
          throw EngineError(
            .invalidValue, field: "space", "db floor must be a negative number of dB, got '\(inner)'")
        }
        self = .decibels(floor: floor)
        return
      }
      throw EngineError(
        .invalidValue, field: "space", "unknown value space '\(text)'; expected amplitude, db, db(<floor>) or power")
    }
  }

  public var description: String {
    switch self {
    case .amplitude: return "amplitude"
    case .power: return "power"
    case .decibels(let floor): return floor.map { "db(\($0))" } ?? "db"
    }
  }

  /// Amplitude into this space.
  @inlinable public func encode(_ amplitude: Double) -> Double {
    switch self {
    case .amplitude: return amplitude
    case .power: return amplitude * abs(amplitude)
    case .decibels(let given):
      let floor = given ?? Self.defaultDecibelFloor
      guard amplitude > 0 else { return floor }
      return Swift.max(20 * log10(amplitude), floor)
    }
  }

  /// This space back into amplitude.
  @inlinable public func decode(_ value: Double) -> Double {
    switch self {
    case .amplitude: return value
    case .power: return value >= 0 ? value.squareRoot() : -(-value).squareRoot()
    case .decibels(let given):
      guard value > given ?? Self.defaultDecibelFloor else { return 0 }
      // A spring or an overshooting curve can swing far above its endpoints; in dB that is an
      // exponent, so it is capped where the amplitude is still finite (+400 dB).
      return pow(10, min(value, Self.ceilingDecibels) / 20)
    }
  }
}
