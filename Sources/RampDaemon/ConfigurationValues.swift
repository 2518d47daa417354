import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One configuration value as a layer gave it: TOML values keep their type; environment variables
/// and overrides are always `.string`, and every parser below accepts the string form too.
enum ConfigValue: Sendable, Equatable {
  case string(String)
  case integer(Int)
  case float(Double)
  case boolean(Bool)
  case array([ConfigValue])
  /// A table, a date or a time, where a scalar was expected: only named in messages.
  case other(String)

  /// `string "fast"`, `integer 5`, `floating-point number 1.5`, `boolean true`, `array`, `table`.
  var described: String {
    switch self {
    case .string(let text): return "string \(ConfigText.quoted(text))"
    case .integer(let value): return "integer \(value)"
    case .float(let value): return "floating-point number \(value)"
    case .boolean(let value): return "boolean \(value)"
    case .array: return "an array"
    case .other(let kind): return "a \(kind)"
    }
  }
}

/// Why a value was refused; the key and source are added by the caller.
struct ValueProblem: Error, Sendable, Equatable {
  let message: String
  init(_ message: String) { self.message = message }
}

/// The value parsers shared by every layer. Strings follow the same rules whatever layer they come
/// from, so `RAMPD_OUTPUT_RATE=44100` and `rate = "44100"` mean `rate = 44100`.
enum ConfigParse {
  static let durationForms = "a duration (a number of seconds, or a string such as \"10ms\", \"2s\", \"1m30s\")"
  static let decibelForms = "a gain in dB (a number, or a string such as \"-6dB\", \"0dB\", \"+6dB\")"

  static func string(_ value: ConfigValue) throws(ValueProblem) -> String {
    guard case .string(let text) = value else { throw ValueProblem("expected a string, got \(value.described)") }
    return text
  }

  /// A string; `""` means nil (the computed default).
  static func optionalString(_ value: ConfigValue) throws(ValueProblem) -> String? {
    let text = try string(value)
    return text.isEmpty ? nil : text
  }

  /// An absolute path, or `""` for nil.
  static func optionalAbsolutePath(_ value: ConfigValue) throws(ValueProblem) -> String? {
    guard let path = try optionalString(value) else { return nil }
    try checkAbsolutePath(path)
    return path
  }

  static func checkAbsolutePath(_ path: String) throws(ValueProblem) {
    guard path.hasPrefix("/") else {
      throw ValueProblem("\(ConfigText.quoted(path)) is not an absolute path (it must start with '/')")
    }
    guard !path.utf8.contains(0) else { throw ValueProblem("a path must not contain a NUL character") }
  }

  static func integer(_ value: ConfigValue) throws(ValueProblem) -> Int {
    switch value {
    case .integer(let number): return number
    case .float(let number) where number.isFinite && number.rounded() == number && abs(number) < 9e15:
      return Int(number)
    case .string(let text):
      if let number = plainInteger(text.trimmingWhitespace()) { return number }
    default: break
    }
    throw ValueProblem("expected an integer, got \(value.described)")
  }

  /// An integer within `range`; `unit` is appended to the number in the message (` Hz`, ` bytes`).
  static func integer(_ value: ConfigValue, in range: ClosedRange<Int>, unit: String = "") throws(ValueProblem)
    -> Int
  {
    let number = try integer(value)
    try check(number, in: range, unit: unit)
    return number
  }

  static func check(_ number: Int, in range: ClosedRange<Int>, unit: String = "") throws(ValueProblem) {
    guard range.contains(number) else {
      throw ValueProblem("\(number)\(unit) is outside \(range.lowerBound)...\(range.upperBound)\(unit)")
    }
  }

  /// A byte count: an integer, or a string with `KiB` or `MiB` (`"64KiB"`).
  static func byteCount(_ value: ConfigValue) throws(ValueProblem) -> Int {
    if case .string(let raw) = value {
      let text = raw.trimmingWhitespace()
      for (suffix, factor) in [("kib", 1024), ("mib", 1024 * 1024)] where text.lowercased().hasSuffix(suffix) {
        let digits = text.dropLast(suffix.count).trimmingWhitespace()
        if let number = plainInteger(digits), number >= 0, number <= Int.max / factor { return number * factor }
      }
    }
    do {
      return try integer(value)
    } catch {
      throw ValueProblem(
        "expected a number of bytes (an integer, or a string such as \"64KiB\"), got \(value.described)")
    }
  }

  /// A sample rate in Hz: an integer, or a string such as `"48000"`, `"48k"`, `"44.1kHz"`
  /// (`HumanUnits.sampleRate`, as rampctl reads `--rate`). Zero and negative numbers are left to
  /// the caller's range check.
  static func sampleRate(_ value: ConfigValue) throws(ValueProblem) -> Int {
    if case .string(let raw) = value, let hertz = try? HumanUnits.sampleRate(raw) {
      if hertz.rounded() == hertz && hertz < 1e9 { return Int(hertz) }
      throw ValueProblem("\(ConfigText.quoted(raw)) is not a whole number of Hz")
    }
    return try integer(value)
  }

  /// A frequency in Hz: a number, or a string such as `"200"` or `"200Hz"`.
  static func hertz(_ value: ConfigValue) throws(ValueProblem) -> Double {
    let number: Double?
    switch value {
    case .integer(let n): number = Double(n)
    case .float(let n): number = n
    case .string(let raw):
      var text = raw.trimmingWhitespace().lowercased()
      if text.hasSuffix("hz") { text = text.dropLast(2).trimmingWhitespace() }
      number = HumanUnits.plainNumber(text)
    default: number = nil
    }
    guard let number else {
      throw ValueProblem("expected a frequency in Hz (a number, or a string such as \"200Hz\"), got \(value.described)")
    }
    guard number.isFinite else { throw ValueProblem("must be a finite number of Hz, got \(number)") }
    return number
  }

  static func boolean(_ value: ConfigValue) throws(ValueProblem) -> Bool {
    switch value {
    case .boolean(let flag): return flag
    case .string(let text):
      switch text.trimmingWhitespace().lowercased() {
      case "true", "yes", "on", "1": return true
      case "false", "no", "off", "0": return false
      default: break
      }
    default: break
    }
    throw ValueProblem("expected true or false, got \(value.described)")
  }

  /// Seconds, finite and >= 0: a TOML number, or a string `"10ms"`, `"2s"`, `"1m30s"`, `"1h"`,
  /// `"1.5"`, read by `HumanUnits.duration` as rampctl reads `--duration`.
  static func duration(_ value: ConfigValue) throws(ValueProblem) -> Double {
    let seconds: Double
    switch value {
    case .integer(let number): seconds = Double(number)
    case .float(let number): seconds = number
    case .string(let raw):
      // The sign is read here, so a negative duration is refused as such, with its value.
      var text = raw.trimmingWhitespace()
      let negative = text.first == "-" || text.first == "\u{2212}"
      if negative || text.first == "+" { text.removeFirst() }
      guard !text.hasPrefix("-"), !text.hasPrefix("+"), let magnitude = try? HumanUnits.duration(text) else {
        throw ValueProblem("expected \(durationForms), got \(value.described)")
      }
      seconds = negative ? -magnitude : magnitude
    default:
      throw ValueProblem("expected \(durationForms), got \(value.described)")
    }
    guard seconds.isFinite else { throw ValueProblem("must be a finite number of seconds, got \(seconds)") }
    guard seconds >= 0 else { throw ValueProblem("must not be negative, got \(ConfigText.duration(seconds))") }
    return seconds == 0 ? 0 : seconds
  }

  /// A duration within `range` seconds.
  static func duration(_ value: ConfigValue, in range: ClosedRange<Double>) throws(ValueProblem) -> Double {
    let seconds = try duration(value)
    guard range.contains(seconds) else {
      throw ValueProblem(
        "\(ConfigText.duration(seconds)) is outside \(ConfigText.duration(range.lowerBound))"
          + "...\(ConfigText.duration(range.upperBound))")
    }
    return seconds
  }

  /// Decibels, finite: a number, or a string `"-6dB"`, `"-6 dB"`, `"+6dB"`, `"0"` (`HumanUnits.decibels`).
  static func decibels(_ value: ConfigValue) throws(ValueProblem) -> Double {
    let number: Double?
    switch value {
    case .integer(let n): number = Double(n)
    case .float(let n): number = n
    case .string(let raw): number = try? HumanUnits.decibels(raw)
    default: number = nil
    }
    guard let number else { throw ValueProblem("expected \(decibelForms), got \(value.described)") }
    guard number.isFinite else { throw ValueProblem("must be a finite number of dB, got \(number)") }
    return number == 0 ? 0 : number
  }

  /// A loudness target with its unit, `"-18LUFS"` (`HumanUnits.loudness`), or `"off"` (nil). A
  /// bare number is refused: it could be dB as well.
  static func loudness(_ value: ConfigValue) throws(ValueProblem) -> Double? {
    switch value {
    case .string("off"): return nil
    case .string(let raw):
      do { return try HumanUnits.loudness(raw, option: "loudness") } catch {
        throw ValueProblem(Self.unitProblem(error))
      }
    case .integer, .float:
      throw ValueProblem(
        "expected a string with its unit such as \"-18LUFS\", or \"off\", got \(value.described): a bare number "
          + "has no unit")
    default:
      throw ValueProblem("expected a loudness such as \"-18LUFS\", or \"off\", got \(value.described)")
    }
  }

  /// A true-peak level with its unit, `"-1dBTP"` (a number is dBTP too), within `range`.
  static func truePeak(_ value: ConfigValue, in range: ClosedRange<Double>) throws(ValueProblem) -> Double {
    var text: String
    switch value {
    case .integer(let n): text = String(n)
    case .float(let n): text = String(n)
    case .string(let raw): text = raw.trimmingWhitespace()
    default: throw ValueProblem("expected a true-peak level such as \"-1dBTP\", got \(value.described)")
    }
    if text.lowercased().hasSuffix("dbtp") { text = String(text.dropLast(4)) }
    guard let number = HumanUnits.plainNumber(text.trimmingWhitespace()), number.isFinite else {
      throw ValueProblem("expected a true-peak level such as \"-1dBTP\", got \(value.described)")
    }
    guard range.contains(number) else {
      throw ValueProblem(
        "\(ConfigText.number(number)) dBTP is outside \(ConfigText.number(range.lowerBound)) dBTP"
          + "...\(ConfigText.number(range.upperBound)) dBTP")
    }
    return number == 0 ? 0 : number
  }

  /// A unit error's text without its leading `option: `, which the key's name replaces.
  private static func unitProblem(_ error: UnitError) -> String {
    let text = error.description
    let prefix = error.option + ": "
    return text.hasPrefix(prefix) ? String(text.dropFirst(prefix.count)) : text
  }

  /// A list of strings: a TOML array of strings, or one string of `:`-separated items (`""` is the
  /// empty list), as `PATH` is written.
  static func stringList(_ value: ConfigValue) throws(ValueProblem) -> [String] {
    switch value {
    case .array(let items):
      var strings: [String] = []
      for (index, item) in items.enumerated() {
        guard case .string(let text) = item else {
          throw ValueProblem("expected an array of strings, but item \(index + 1) is \(item.described)")
        }
        strings.append(text)
      }
      return strings
    case .string(let text):
      return text.isEmpty ? [] : text.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
    default:
      throw ValueProblem("expected an array of strings (or one string of ':'-separated items), got \(value.described)")
    }
  }

  /// One of `choices` (case-insensitive).
  static func choice<T>(_ value: ConfigValue, _ choices: [(String, T)]) throws(ValueProblem) -> T {
    let names = choices.map(\.0).joined(separator: ", ")
    guard case .string(let raw) = value else {
      throw ValueProblem("expected one of \(names), got \(value.described)")
    }
    let text = raw.trimmingWhitespace().lowercased()
    guard let match = choices.first(where: { $0.0 == text }) else {
      throw ValueProblem("\(ConfigText.quoted(raw)) is not one of \(names)")
    }
    return match.1
  }

  /// Permission bits as an octal string: `"0660"`, `"660"`, `"0o660"`.
  static func fileMode(_ value: ConfigValue) throws(ValueProblem) -> UInt16 {
    guard case .string(let raw) = value else {
      if case .integer = value {
        throw ValueProblem(
          "expected an octal mode as a string such as \"0660\", got \(value.described) "
            + "(an integer is ambiguous: write the octal digits in quotes)")
      }
      throw ValueProblem("expected an octal mode as a string such as \"0660\", got \(value.described)")
    }
    var text = raw.trimmingWhitespace().lowercased()
    if text.hasPrefix("0o") { text.removeFirst(2) }
    guard !text.isEmpty, text.count <= 5, text.allSatisfy({ ("0"..."7").contains($0) }),
      let mode = UInt16(text, radix: 8)
    else {
      throw ValueProblem("\(ConfigText.quoted(raw)) is not an octal mode such as \"0660\"")
    }
    guard mode <= 0o777 else {
      throw ValueProblem(
        "\(ConfigText.mode(mode)) has bits above 0777 (setuid, setgid, sticky) that a socket cannot use")
    }
    guard mode & 0o600 == 0o600 else {
      throw ValueProblem("\(ConfigText.mode(mode)) does not let the daemon's own user read and write the socket (0600)")
    }
    return mode
  }

  /// A plain decimal integer with an optional sign (`"44100"`, `"-3"`); not `"0x10"`, `"1e3"` or `"4 4"`.
  static func plainInteger(_ text: String) -> Int? {
    var digits = Substring(text)
    if digits.first == "+" || digits.first == "-" { digits = digits.dropFirst() }
    guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
    return Int(text.hasPrefix("+") ? String(text.dropFirst()) : text)
  }
}

/// Formatting shared by messages and rendering.
enum ConfigText {
  /// A TOML basic string: `"a \"b\""`.
  static func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\t": out += "\\t"
      case "\r": out += "\\r"
      default:
        if scalar.value < 0x20 || scalar.value == 0x7F {
          let digits = String(scalar.value, radix: 16, uppercase: true)
          out += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
        } else {
          out.unicodeScalars.append(scalar)
        }
      }
    }
    return out + "\""
  }

  /// Seconds for a message: `0.5 s`, `10 ms`.
  static func duration(_ seconds: Double) -> String {
    if seconds != 0 && abs(seconds) < 1 {
      let millis = seconds * 1000
      if millis.rounded() == millis { return "\(Int(millis)) ms" }
    }
    if seconds.rounded() == seconds && abs(seconds) < 1e15 { return "\(Int(seconds)) s" }
    return "\(seconds) s"
  }

  /// A number as short as it reads back exactly: `48000`, `0.25`, `-6`.
  static func number(_ value: Double) -> String {
    if value.rounded() == value && abs(value) < 1e15 { return "\(Int(value))" }
    return "\(value)"
  }

  /// `0660`.
  static func mode(_ mode: UInt16) -> String {
    let octal = String(mode, radix: 8)
    return String(repeating: "0", count: max(0, 4 - octal.count)) + octal
  }

  /// A duration as a TOML value that parses back to exactly `seconds`: `"10ms"`, `"2s"`, `"1m30s"`, or a number.
  static func durationValue(_ seconds: Double) -> String {
    var candidates: [String] = []
    if seconds == 0 { return "\"0s\"" }
    let millis = seconds * 1000
    if seconds < 1, millis.rounded() == millis { candidates.append("\(Int(millis))ms") }
    if seconds < 1 { candidates.append("\(number(millis))ms") }
    if seconds >= 60, seconds < 86_400 * 366 {
      let whole = Int(seconds.rounded(.down))
      let rest = Double(whole % 60) + (seconds - Double(whole))
      var text = ""
      if whole >= 3600 { text += "\(whole / 3600)h" }
      if whole % 3600 >= 60 { text += "\((whole % 3600) / 60)m" }
      if rest > 0 { text += "\(number(rest))s" }
      candidates.append(text)
    }
    candidates.append("\(number(seconds))s")
    for candidate in candidates where !candidate.contains("e") && (try? HumanUnits.duration(candidate)) == seconds {
      return quoted(candidate)
    }
    return "\(seconds)"
  }

  /// A loudness target as TOML: `"-18LUFS"`.
  static func loudnessValue(_ lufs: Double) -> String { quoted(number(lufs) + "LUFS") }

  /// A true-peak level as TOML: `"-1dBTP"`.
  static func truePeakValue(_ decibels: Double) -> String { quoted(number(decibels) + "dBTP") }

  /// dB as a TOML string that parses back exactly: `"0dB"`, `"+6dB"`, `"-3.5dB"`.
  static func decibelValue(_ decibels: Double) -> String {
    let text = number(decibels)
    guard !text.contains("e") else { return "\(decibels)" }
    return quoted((decibels > 0 ? "+" : "") + text + "dB")
  }
}
