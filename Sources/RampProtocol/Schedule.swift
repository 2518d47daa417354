/// When a request takes effect, from its `"at"` key.
public enum Schedule: Sendable, Equatable {
  /// `"at": 2.5`: seconds after the daemon receives the request (in a timeline script, after
  /// the script starts). Finite and not negative.
  case delay(Double)
  /// `"at": "2026-11-21T07:30:00Z"`: an RFC 3339 date and time, as Unix seconds.
  case date(Double)

  var json: JSONValue {
    switch self {
    case .delay(let seconds): return .number(seconds)
    case .date(let seconds): return .string(RFC3339.format(seconds))
    }
  }

  /// When the request takes effect, as Unix seconds, for a request received at `now` (Unix
  /// seconds): the one conversion, for the daemon's schedules and the client's deadlines.
  public func due(receivedAt now: Double) -> Double {
    switch self {
    case .delay(let seconds): return now + seconds
    case .date(let date): return date
    }
  }

  /// Seconds from `now` (Unix seconds) until the request takes effect; 0 when it is already due.
  public func secondsUntilDue(from now: Double) -> Double {
    max(due(receivedAt: now) - now, 0)
  }

  /// The longest delay: 10¹⁰ s.
  public static let maximumDelay = 1e10

  static func parse(_ value: JSONValue, field: String) throws(ProtocolError) -> Schedule {
    switch value {
    case .number(let seconds):
      guard seconds.isFinite, seconds >= 0 else {
        throw .at(
          field, .invalidField, "a delay must be a finite number of seconds, not negative, got \(describe(value))")
      }
      // Further and the due sample would overflow the output's clock (and the due date RFC 3339).
      guard seconds <= maximumDelay else {
        throw .at(
          field, .invalidField,
          "a delay must be at most \(JSONValue.format(maximumDelay)) seconds (about 317 years), got \(describe(value))")
      }
      return .delay(seconds)
    case .string(let text):
      guard let seconds = RFC3339.parse(text) else {
        throw .at(
          field, .invalidField,
          "expected an RFC 3339 date and time such as \"2026-11-21T07:30:00Z\", got \(describe(value))")
      }
      return .date(seconds)
    default:
      throw .at(
        field, .invalidField, "expected seconds from now or an RFC 3339 date and time, got \(describe(value))")
    }
  }
}

/// RFC 3339 timestamps (`2026-11-21T07:30:00Z`, `2026-11-21T08:30:00.25+01:00`), converted
/// without Foundation so that formatting and parsing are exact inverses.
public enum RFC3339 {
  /// Unix seconds for a timestamp, or nil when it is not RFC 3339 (years 0000 to 9999).
  public static func parse(_ text: String) -> Double? {
    let b = Array(text.utf8)
    // YYYY-MM-DDTHH:MM:SS is 19 bytes; then an optional fraction and a zone.
    guard b.count >= 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[13] == UInt8(ascii: ":"),
      b[16] == UInt8(ascii: ":"), [UInt8(ascii: "T"), UInt8(ascii: "t"), UInt8(ascii: " ")].contains(b[10]),
      let year = digits(b, 0, 4), let month = digits(b, 5, 2), let day = digits(b, 8, 2),
      let hour = digits(b, 11, 2), let minute = digits(b, 14, 2), let second = digits(b, 17, 2)
    else { return nil }
    guard (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60,
      second <= 60
    else { return nil }
    var index = 19
    var fraction = 0.0
    if b[index] == UInt8(ascii: ".") {
      let start = index + 1
      index = start
      while index < b.count && b[index] >= UInt8(ascii: "0") && b[index] <= UInt8(ascii: "9") { index += 1 }
      guard index > start, index - start <= 40 else { return nil }
      fraction = Double("0." + String(decoding: b[start..<index], as: UTF8.self)) ?? 0
    }
    guard index < b.count else { return nil }
    var offsetSeconds = 0
    switch b[index] {
    case UInt8(ascii: "Z"), UInt8(ascii: "z"):
      guard index + 1 == b.count else { return nil }
    case UInt8(ascii: "+"), UInt8(ascii: "-"):
      guard index + 6 == b.count, b[index + 3] == UInt8(ascii: ":"), let hours = digits(b, index + 1, 2),
        let minutes = digits(b, index + 4, 2), hours < 24, minutes < 60
      else { return nil }
      offsetSeconds = (hours * 60 + minutes) * 60 * (b[index] == UInt8(ascii: "-") ? -1 : 1)
    default:
      return nil
    }
    let whole = daysFromCivil(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second
    return Double(whole - offsetSeconds) + fraction
  }

  /// The UTC timestamp for Unix seconds, with as many fraction digits as it takes to read back
  /// the same double.
  /// Outside years 0000 to 9999 (or NaN) the time is clamped to that range rather than trap.
  public static func format(_ seconds: Double) -> String {
    let seconds = seconds.isNaN ? 0 : min(max(seconds, earliest), latest)
    let whole = seconds.rounded(.down)
    // Exact: a double minus its floor is representable.
    let fraction = seconds - whole
    let total = Int(whole)
    var days = total / 86_400
    var inDay = total % 86_400
    if inDay < 0 {
      inDay += 86_400
      days -= 1
    }
    let (year, month, day) = civilFromDays(days)
    var text =
      "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(inDay / 3600, 2)):\(pad(inDay / 60 % 60, 2)):"
      + pad(inDay % 60, 2)
    if fraction > 0 { text += String(plainDecimal(fraction).dropFirst()) }
    return text + "Z"
  }

  /// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
  static let earliest = -62_167_219_200.0
  static let latest = 253_402_300_799.0

  private static func pad(_ value: Int, _ width: Int) -> String {
    let digits = String(value)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
  }

  /// "0.000012" rather than "1.2e-05": the shortest round-trip digits of a fraction in (0, 1),
  /// written out without an exponent.
  static func plainDecimal(_ fraction: Double) -> String {
    let text = fraction.description
    guard let e = text.firstIndex(of: "e") else { return text }
    let exponent = Int(text[text.index(after: e)...]) ?? 0
    let mantissa = text[..<e].replacingDot()
    return "0." + String(repeating: "0", count: -exponent - 1) + mantissa
  }

  private static func digits(_ bytes: [UInt8], _ start: Int, _ count: Int) -> Int? {
    guard start + count <= bytes.count else { return nil }
    var value = 0
    for byte in bytes[start..<(start + count)] {
      guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
      value = value * 10 + Int(byte - UInt8(ascii: "0"))
    }
    return value
  }

  private static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

  private static func daysIn(month: Int, year: Int) -> Int {
    switch month {
    case 2: return isLeap(year) ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
  }

  // Howard Hinnant's days-from-civil and its inverse, proleptic Gregorian calendar.
  private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yearOfEra = y - era * 400
    let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }

  private static func civilFromDays(_ days: Int) -> (year: Int, month: Int, day: Int) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let shiftedMonth = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
    let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
    return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
  }
}

extension Substring {
  /// The digits of a mantissa such as "1.25" as "125".
  fileprivate func replacingDot() -> String { String(filter { $0 != "." }) }
}
