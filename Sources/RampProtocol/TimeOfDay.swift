import FoundationEssentials
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// When something should happen, as people type it: the one parser behind `--at` and a
/// timeline script's `"at"` (`rampctl batch`, `rampctl render --script`).
extension HumanUnits {
  public static let whenForms =
    "a time of day (23:00, 07:30:15), a date (2026-11-21T07:30:00Z, or 2026-11-21 07:30 in local time) "
    + "or a delay (+10s, 20m, 90)"

  /// `HH:MM[:SS]`: the next such local time after `now`; an ISO 8601 / RFC 3339 date and time
  /// (without a zone, local time); or a delay (`+10s`, `10s`, `1m30s`, `90`: seconds).
  public static func when(_ text: String, option: String, now: Date = Date()) throws(UnitError) -> Schedule {
    let trimmed = text.trimmingWhitespace()
    func fail(_ detail: String) -> UnitError {
      UnitError(option: option, input: text, problem: .malformed(detail), expected: whenForms)
    }
    if let time = try timeOfDay(trimmed, fail) { return .date(next(time, after: now)) }
    if let date = RFC3339.parse(trimmed) ?? localDate(trimmed) { return .date(date) }
    if trimmed.first?.isNumber == true, trimmed.contains("-") || trimmed.contains(":") {
      throw fail("not a date and time, nor a time of day")
    }
    do {
      return .delay(try duration(trimmed, option: option))
    } catch {
      throw UnitError(option: option, input: text, problem: error.problem, expected: whenForms)
    }
  }

  /// `(hour, minute, second)` of `HH:MM` or `HH:MM:SS`; nil for text of another form.
  private static func timeOfDay(_ text: String, _ fail: (String) -> UnitError) throws(UnitError) -> (
    Int, Int, Int
  )? {
    let parts = text.split(separator: ":", omittingEmptySubsequences: false)
    guard (2...3).contains(parts.count), parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) }),
      parts.allSatisfy({ $0.allSatisfy(\.isNumber) })
    else { return nil }
    let values = parts.map { Int($0) ?? -1 }
    guard parts[0].count <= 2, parts.dropFirst().allSatisfy({ $0.count == 2 }), (0..<24).contains(values[0]),
      (0..<60).contains(values[1]), values.count == 2 || (0..<60).contains(values[2])
    else { throw fail("not a time of day: expected HH:MM or HH:MM:SS, 00:00 to 23:59:59") }
    return (values[0], values[1], values.count == 3 ? values[2] : 0)
  }

  /// The first moment after `now` showing that local time (today, else tomorrow).
  private static func next(_ time: (Int, Int, Int), after now: Date) -> Double {
    let seconds = time.0 * 3600 + time.1 * 60 + time.2
    return Recurrence.daily(seconds: seconds, days: Recurrence.everyDay)
      .next(after: now.timeIntervalSince1970, start: now.timeIntervalSince1970, offset: LocalClock.offset)
  }

  /// `YYYY-MM-DD[T| ]HH:MM[:SS[.fff]]` without a zone: local time.
  private static func localDate(_ text: String) -> Double? {
    let halves = text.split(whereSeparator: { $0 == "T" || $0 == "t" || $0 == " " })
    guard halves.count == 2 else { return nil }
    let day = halves[0].split(separator: "-", omittingEmptySubsequences: false)
    let clock = halves[1].split(separator: ":", omittingEmptySubsequences: false)
    guard day.count == 3, day[0].count == 4, day[1].count == 2, day[2].count == 2, (2...3).contains(clock.count),
      clock[0].count == 2, clock[1].count == 2
    else { return nil }
    let numbers = day.map { Int($0) } + clock.prefix(2).map { Int($0) }
    guard numbers.allSatisfy({ $0 != nil }) else { return nil }
    var seconds = 0.0
    if clock.count == 3 {
      let text = clock[2]
      guard text.count >= 2, text.prefix(2).allSatisfy(\.isNumber), let value = Double(text), value < 60,
        text.count == 2 || text.dropFirst(2).first == "."
      else { return nil }
      seconds = value
    }
    let fields = LocalClock.Fields(
      year: numbers[0]!, month: numbers[1]!, day: numbers[2]!, hour: numbers[3]!, minute: numbers[4]!, second: 0)
    // A date that does not exist, or a time skipped when the clocks went forward, is no date.
    guard let wallClock = LocalClock.wallClock(fields) else { return nil }
    let instant = LocalClock.instant(wallClock: Double(wallClock))
    guard LocalClock.fields(Int(instant) + LocalClock.offset(instant)) == fields else { return nil }
    return instant + seconds
  }

  /// `2026-11-21 23:00:00.000 +01:00`: a moment in local time (or the zone whose offset from UTC
  /// `offset` gives at an instant), to the millisecond.
  public static func format(localTime seconds: Double, offset: (Double) -> Int = LocalClock.offset) -> String {
    let millisecondsTotal = (seconds * 1000).rounded()
    let whole = (millisecondsTotal / 1000).rounded(.down)
    let milliseconds = Int(millisecondsTotal - whole * 1000)
    let offsetSeconds = offset(whole)
    let parts = LocalClock.fields(Int(whole) + offsetSeconds)
    func two(_ value: Int) -> String { pad(value, 2) }
    let minutes = offsetSeconds / 60
    let sign = minutes < 0 ? "-" : "+"
    return "\(pad(parts.year, 4))-\(two(parts.month))-\(two(parts.day)) "
      + "\(two(parts.hour)):\(two(parts.minute)):\(two(parts.second)).\(pad(milliseconds, 3)) "
      + "\(sign)\(two(abs(minutes) / 60)):\(two(abs(minutes) % 60))"
  }

  private static func pad(_ value: Int, _ width: Int) -> String {
    let digits = String(value)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
  }
}
