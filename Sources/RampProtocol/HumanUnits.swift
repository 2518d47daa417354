import RampEngine
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Why a value typed on the command line was refused, naming the option it was given to.
///
/// `description` is the whole message (`--duration: '-2s' is negative; …`), ready for
/// ArgumentParser's `ValidationError` or a protocol error reply.
public struct UnitError: Error, Equatable, Sendable, CustomStringConvertible {
  public enum Problem: Equatable, Sendable {
    /// Nothing but whitespace.
    case empty
    /// Below zero where zero or more is required.
    case negative
    /// Zero where more than zero is required (a sample rate).
    case zero
    /// `nan` in any spelling.
    case notANumber
    /// `inf`, `+inf dB`, or a number too large to be finite (`1e400s`).
    case infinite
    /// Not the kind of value expected at all; the detail says what is wrong.
    case malformed(String)
    /// A value of the right kind outside the range allowed; the detail says which.
    case outOfRange(String)
  }

  /// The option the value was given to, as the user spells it (`--duration`).
  public let option: String
  /// The text as typed.
  public let input: String
  public let problem: Problem
  /// What would have been accepted, e.g. "a duration such as 2s, 500ms, 1m30s, 1h or 1.5 (seconds)".
  public let expected: String

  public init(option: String, input: String, problem: Problem, expected: String) {
    self.option = option
    self.input = input
    self.problem = problem
    self.expected = expected
  }

  public var description: String {
    let quoted = "'\(input)'"
    switch problem {
    case .empty: return "\(option): the value is empty; expected \(expected)"
    case .negative: return "\(option): \(quoted) is negative; expected \(expected)"
    case .zero: return "\(option): \(quoted) is zero; expected \(expected)"
    case .notANumber: return "\(option): \(quoted) is not a number (NaN); expected \(expected)"
    case .infinite: return "\(option): \(quoted) is not finite; expected \(expected)"
    case .malformed(let detail): return "\(option): \(quoted) is not valid (\(detail)); expected \(expected)"
    case .outOfRange(let detail): return "\(option): \(quoted) is \(detail); expected \(expected)"
    }
  }
}

/// The units people type and read: durations (`2s`, `500ms`, `1m30s`, `1.5`, `1h`), gains
/// (`0.5`, `50%`, `-6dB`, `-inf dB`) and sample rates (`48000`, `48k`, `44.1kHz`).
///
/// Parsing is strict and total: every input either gives a finite value or a `UnitError` that
/// names the option and the problem. Formatting gives back strings the parsers accept.
public enum HumanUnits {
  public static let durationForms = "a duration >= 0 such as 2s, 500ms, 1m30s, 1h or 1.5 (seconds)"
  public static let gainForms = "a gain >= 0 such as 0.5, 50%, -6dB or -inf dB"
  public static let sampleRateForms = "a sample rate > 0 such as 48000, 48k or 44.1kHz"
  public static let decibelForms = "a level in dB such as -6dB, 0dB or +6dB"
  public static let loudnessForms = "a loudness from -60LUFS to -5LUFS such as -18LUFS or -23 LUFS"
  /// The loudness targets taken: below −60 LUFS a file is mostly lifted out of the noise floor
  /// it was mastered over; above −5 LUFS no trim gets a file there under a true-peak ceiling.
  public static let loudnessRange = -60.0 ... -5.0

  // MARK: Durations

  /// Seconds from `2s`, `500ms`, `1m30s`, `1h`, `1h2m3.5s`, `1.5` (bare seconds) or `0`.
  ///
  /// Units are `h`, `m` (or `min`), `s` and `ms`, largest first, each at most once; blanks
  /// between parts are allowed (`1m 30s`). The result is finite and >= 0.
  public static func duration(_ text: String, option: String = "duration") throws(UnitError) -> Double {
    func fail(_ problem: UnitError.Problem) -> UnitError {
      UnitError(option: option, input: text, problem: problem, expected: durationForms)
    }
    var source = normalized(text)
    guard !source.isEmpty else { throw fail(.empty) }
    let negative = source.first == "-"
    if source.first == "-" || source.first == "+" { source.removeFirst() }
    if let special = specialNumber(source, units: ["s", "ms", "m", "min", "h"]) {
      if special.isNaN { throw fail(.notANumber) }
      throw fail(negative ? .negative : .infinite)
    }
    if source.isEmpty { throw fail(.malformed("no number")) }

    let total: Double
    if let seconds = plainNumber(source) {
      total = seconds
    } else {
      let units: [(name: String, seconds: Double)] = [("h", 3600), ("min", 60), ("m", 60), ("s", 1), ("ms", 0.001)]
      let rank = ["h": 0, "min": 1, "m": 1, "s": 2, "ms": 3]
      var scanner = UnitScanner(source)
      var sum = 0.0
      var lastRank = -1
      while !scanner.atEnd {
        scanner.skipBlanks()
        guard let number = scanner.number() else {
          let rest = scanner.rest
          if rest.first == "-" || rest.first == "+" {
            throw fail(.malformed("a sign may only lead the whole duration"))
          }
          throw fail(.malformed("expected a number at '\(rest)'"))
        }
        scanner.skipBlanks()
        let unit = scanner.letters()
        if unit.isEmpty {
          let hint = scanner.atEnd ? "; write e.g. 1m30s, not 1m30" : ""
          throw fail(.malformed("'\(number.text)' has no unit\(hint)"))
        }
        guard let factor = units.first(where: { $0.name == unit })?.seconds, let unitRank = rank[unit] else {
          throw fail(.malformed("unknown unit '\(unit)'; use h, m, s or ms"))
        }
        guard unitRank > lastRank else {
          throw fail(.malformed("units must go from largest to smallest, each at most once"))
        }
        lastRank = unitRank
        // Milliseconds divide, so `10ms` is exactly 0.01 (10 × 0.001 need not be).
        sum += unit == "ms" ? number.value / 1000 : number.value * factor
        scanner.skipBlanks()
      }
      total = sum
    }
    guard total.isFinite else { throw fail(.infinite) }
    if negative && total > 0 { throw fail(.negative) }
    return total == 0 ? 0 : total
  }

  /// A duration the way `duration(_:)` reads it back: `0s`, `250ms`, `2s`, `1.5s`, `1m30s`, `1h`.
  public static func format(duration seconds: Double) -> String {
    guard seconds.isFinite else { return "\(seconds)s" }
    guard seconds != 0 else { return "0s" }
    let sign = seconds < 0 ? "-" : ""
    let value = abs(seconds)
    if value < 1 {
      return sign + trimmed(value * 1000, decimals: 3) + "ms"
    }
    if value < 60 {
      return sign + trimmed(value, decimals: 3) + "s"
    }
    // Whole milliseconds from here, so 59.9996 s does not print as 60 s.
    let millis = (value * 1000).rounded()
    guard millis < 9e15 else { return sign + trimmed(value, decimals: 0) + "s" }
    let totalMillis = Int64(millis)
    let hours = totalMillis / 3_600_000
    let minutes = (totalMillis / 60_000) % 60
    let rest = Double(totalMillis % 60_000) / 1000
    var text = sign
    if hours > 0 { text += "\(hours)h" }
    if minutes > 0 { text += "\(minutes)m" }
    if rest > 0 { text += trimmed(rest, decimals: 3) + "s" }
    return text
  }

  // MARK: Gains

  /// A linear amplitude from `0.5`, `50%`, `-6dB` (any case, blanks allowed before the unit)
  /// or `-inf dB` (silence, 0). The result is finite and >= 0.
  public static func gain(_ text: String, option: String = "gain") throws(UnitError) -> Double {
    func fail(_ problem: UnitError.Problem) -> UnitError {
      UnitError(option: option, input: text, problem: problem, expected: gainForms)
    }
    let source = normalized(text)
    guard !source.isEmpty else { throw fail(.empty) }

    if source.hasSuffix("db") {
      let number = String(source.dropLast(2)).trimmingWhitespace()
      if specialNumber(number, units: []) == -.infinity { return 0 }  // -inf dB is silence
      let amplitude = pow(10, try decibelNumber(number, fail) / 20)
      guard amplitude.isFinite else { throw fail(.infinite) }
      return amplitude
    }

    if source.hasSuffix("%") {
      let number = String(source.dropLast()).trimmingWhitespace()
      guard !number.isEmpty else { throw fail(.malformed("no number before %")) }
      let value = try finiteNonNegative(number, fail)
      let amplitude = value / 100
      return amplitude == 0 ? 0 : amplitude
    }

    let value = try finiteNonNegative(source, fail)
    return value == 0 ? 0 : value
  }

  /// A level in decibels, finite and signed, from `-6dB`, `-6 dB`, `+6dB` or a bare number
  /// (`-6`, `0`): what a gain in dB reads before it becomes an amplitude.
  public static func decibels(_ text: String, option: String = "dB") throws(UnitError) -> Double {
    func fail(_ problem: UnitError.Problem) -> UnitError {
      UnitError(option: option, input: text, problem: problem, expected: decibelForms)
    }
    var source = normalized(text)
    guard !source.isEmpty else { throw fail(.empty) }
    if source.hasSuffix("db") { source = String(source.dropLast(2)).trimmingWhitespace() }
    return try decibelNumber(source, fail)
  }

  /// The number before `dB`: finite, either sign.
  private static func decibelNumber(_ number: String, _ fail: (UnitError.Problem) -> UnitError) throws(UnitError)
    -> Double
  {
    guard !number.isEmpty else { throw fail(.malformed("no number before dB")) }
    if let special = specialNumber(number, units: []) { throw fail(special.isNaN ? .notANumber : .infinite) }
    guard let decibels = plainNumber(number) else { throw fail(.malformed("'\(number)' before dB is not a number")) }
    guard decibels.isFinite else { throw fail(.infinite) }
    return decibels == 0 ? 0 : decibels
  }

  // MARK: Loudness

  /// A loudness target in LUFS from `-18LUFS` or `-23 LUFS` (any case), within `loudnessRange`.
  /// The unit is required: a bare `-18` could as well be dB or dBTP, and is refused.
  public static func loudness(_ text: String, option: String = "loudness") throws(UnitError) -> Double {
    func fail(_ problem: UnitError.Problem) -> UnitError {
      UnitError(option: option, input: text, problem: problem, expected: loudnessForms)
    }
    let source = normalized(text)
    guard !source.isEmpty else { throw fail(.empty) }
    guard source.hasSuffix("lufs") else {
      throw fail(.malformed(plainNumber(source) != nil ? "no unit: write LUFS after the number" : "no LUFS unit"))
    }
    let number = String(source.dropLast(4)).trimmingWhitespace()
    guard !number.isEmpty else { throw fail(.malformed("no number before LUFS")) }
    if let special = specialNumber(number, units: []) { throw fail(special.isNaN ? .notANumber : .infinite) }
    guard let value = plainNumber(number) else { throw fail(.malformed("'\(number)' before LUFS is not a number")) }
    try checkLoudness(value, fail)
    return value == 0 ? 0 : value
  }

  /// Refuses a loudness target (LUFS) outside `loudnessRange`.
  public static func checkLoudness(_ value: Double, _ fail: (UnitError.Problem) -> UnitError) throws(UnitError) {
    guard value.isFinite else { throw fail(value.isNaN ? .notANumber : .infinite) }
    if value > loudnessRange.upperBound {
      throw fail(.outOfRange("above the maximum, \(trimmed(loudnessRange.upperBound, decimals: 2)) LUFS"))
    }
    if value < loudnessRange.lowerBound {
      throw fail(.outOfRange("below the minimum, \(trimmed(loudnessRange.lowerBound, decimals: 2)) LUFS"))
    }
  }

  /// `-18 LUFS`.
  public static func format(loudness lufs: Double) -> String {
    lufs.isFinite ? trimmed(lufs, decimals: 2) + " LUFS" : (lufs < 0 ? "-inf LUFS" : "inf LUFS")
  }

  /// `-inf dB`, `-6.02 dB`, `0.00 dB`, `+6.02 dB` for a linear amplitude.
  public static func format(decibels amplitude: Double, decimals: Int = 2) -> String {
    guard amplitude > 0 else { return amplitude == 0 ? "-inf dB" : "nan dB" }
    var db = 20 * log10(amplitude)
    if abs(db) < 0.5 * pow(10, Double(-decimals)) { db = 0 }
    let body = NumberText.fixed(db, decimals: decimals)
    return (db > 0 ? "+" : "") + body + " dB"
  }

  /// An amplitude with up to `decimals` decimals and no trailing zeros: `0`, `0.5`, `0.129162`.
  public static func format(gain amplitude: Double, decimals: Int = 6) -> String {
    trimmed(amplitude, decimals: decimals)
  }

  // MARK: Sample rates

  /// Hertz from `48000`, `48000Hz`, `48k`, `44.1kHz` (any case, blanks allowed before the
  /// unit). The result is finite and > 0.
  public static func sampleRate(_ text: String, option: String = "rate") throws(UnitError) -> Double {
    func fail(_ problem: UnitError.Problem) -> UnitError {
      UnitError(option: option, input: text, problem: problem, expected: sampleRateForms)
    }
    var source = normalized(text)
    guard !source.isEmpty else { throw fail(.empty) }
    var factor = 1.0
    if source.hasSuffix("hz") { source = String(source.dropLast(2)).trimmingWhitespace() }
    if source.hasSuffix("k") {
      source = String(source.dropLast()).trimmingWhitespace()
      factor = 1000
    }
    guard !source.isEmpty else { throw fail(.malformed("no number")) }
    let hertz = try finiteNonNegative(source, fail) * factor
    guard hertz.isFinite else { throw fail(.infinite) }
    guard hertz > 0 else { throw fail(.zero) }
    return hertz
  }

  /// `48000 Hz`, `44100 Hz`, `22050.5 Hz`.
  public static func format(sampleRate hertz: Double) -> String {
    trimmed(hertz, decimals: 3) + " Hz"
  }

  // MARK: Helpers

  /// Trimmed and lowercased, with the Unicode minus sign (U+2212) read as `-`.
  private static func normalized(_ text: String) -> String {
    text.trimmingWhitespace().lowercased().replacing("\u{2212}", with: "-")
  }

  /// A plain decimal number (`12`, `1.5`, `.5`, `2.`, `1e3`, with an optional sign), or nil.
  /// Unlike `Double(_:)`, refuses hexadecimal, `inf`, `nan` and blanks.
  public static func plainNumber(_ text: String) -> Double? {
    var scanner = UnitScanner(text)
    let negative = scanner.sign()
    guard let number = scanner.number(), scanner.atEnd else { return nil }
    return negative ? -number.value : number.value
  }

  /// `nan`, `inf`, `infinity`, optionally signed and optionally followed by one of `units`
  /// (`infs`, `-inf`): ±infinity or NaN. Nil for anything else.
  private static func specialNumber(_ text: String, units: [String]) -> Double? {
    var body = Substring(text)
    var negative = false
    if body.first == "-" || body.first == "+" {
      negative = body.first == "-"
      body = body.dropFirst()
    }
    for word in ["infinity", "inf", "nan"] where body.hasPrefix(word) {
      let rest = body.dropFirst(word.count).trimmingWhitespace()
      guard rest.isEmpty || units.contains(rest) else { continue }
      if word == "nan" { return .nan }
      return negative ? -.infinity : .infinity
    }
    return nil
  }

  private static func finiteNonNegative(_ text: String, _ fail: (UnitError.Problem) -> UnitError) throws(UnitError)
    -> Double
  {
    if let special = specialNumber(text, units: []) {
      throw fail(special.isNaN ? .notANumber : (special < 0 ? .negative : .infinite))
    }
    guard let value = plainNumber(text) else { throw fail(.malformed("not a number")) }
    guard value.isFinite else { throw fail(.infinite) }
    guard value >= 0 else { throw fail(.negative) }
    return value
  }

  /// `value` with at most `decimals` decimals, trailing zeros (and a trailing point) removed.
  public static func trimmed(_ value: Double, decimals: Int) -> String {
    var text = NumberText.fixed(value, decimals: decimals)
    if text.contains(".") {
      while text.hasSuffix("0") { text.removeLast() }
      if text.hasSuffix(".") { text.removeLast() }
    }
    return text == "-0" ? "0" : text
  }
}

/// A cursor over ASCII text for the unit parsers.
private struct UnitScanner {
  let bytes: [UInt8]
  var index = 0

  init(_ text: String) { bytes = Array(text.utf8) }

  var atEnd: Bool { index >= bytes.count }
  var rest: String { String(decoding: bytes[min(index, bytes.count)...], as: UTF8.self) }

  private func isDigit(_ i: Int) -> Bool { i < bytes.count && bytes[i] >= 0x30 && bytes[i] <= 0x39 }

  mutating func skipBlanks() {
    while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
  }

  /// Consumes a leading `+` or `-`; true for `-`.
  mutating func sign() -> Bool {
    guard index < bytes.count, bytes[index] == 0x2B || bytes[index] == 0x2D else { return false }
    index += 1
    return bytes[index - 1] == 0x2D
  }

  /// An unsigned decimal: digits, an optional fraction, an optional exponent. At least one
  /// digit before or after the point.
  mutating func number() -> (value: Double, text: String)? {
    let start = index
    var i = index
    var digits = 0
    while isDigit(i) {
      i += 1
      digits += 1
    }
    if i < bytes.count, bytes[i] == 0x2E {
      i += 1
      while isDigit(i) {
        i += 1
        digits += 1
      }
    }
    guard digits > 0 else { return nil }
    // An exponent only when digits follow, so `1e` is left for the unit check to refuse.
    if i < bytes.count, bytes[i] == 0x65 {
      var j = i + 1
      if j < bytes.count, bytes[j] == 0x2B || bytes[j] == 0x2D { j += 1 }
      if isDigit(j) {
        while isDigit(j) { j += 1 }
        i = j
      }
    }
    let text = String(decoding: bytes[start..<i], as: UTF8.self)
    guard let value = Double(text) else { return nil }
    index = i
    return (value, text)
  }

  /// A run of letters (`ms`, `min`, `h`, or something unknown to report).
  mutating func letters() -> String {
    let start = index
    while index < bytes.count, !(bytes[index] >= 0x30 && bytes[index] <= 0x39), bytes[index] != 0x20,
      bytes[index] != 0x2E, bytes[index] != 0x2B, bytes[index] != 0x2D
    {
      index += 1
    }
    return String(decoding: bytes[start..<index], as: UTF8.self)
  }
}
