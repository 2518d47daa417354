#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// Local time through the C library's time zone database (`TZ`, else `/etc/localtime`): the
/// offset from UTC at an instant, and the calendar fields of a wall-clock time. Foundation's
/// `TimeZone.current` needs ICU for this and, without it, reads GMT.
///
/// A wall-clock time is counted as `Recurrence` counts it: seconds since 1970-01-01 00:00 as if
/// local time were UTC, that is an instant plus the offset in force then.
public enum LocalClock {
  /// The local time zone's offset from UTC, in seconds, at an instant (Unix seconds).
  public static func offset(_ instant: Double) -> Int {
    guard instant.isFinite, abs(instant) < 1e15 else { return 0 }
    // `TZ` read again, as every C time function but `localtime_r` does.
    tzset()
    var seconds = time_t(instant.rounded(.down))
    var parts = tm()
    guard localtime_r(&seconds, &parts) != nil else { return 0 }
    return Int(parts.tm_gmtoff)
  }

  /// The calendar fields of a wall-clock time: `year` (e.g. 2026), `month` 1 to 12, `day`,
  /// `hour`, `minute`, `second`.
  public static func fields(_ wallClock: Int) -> Fields {
    var seconds = time_t(wallClock)
    var parts = tm()
    _ = gmtime_r(&seconds, &parts)
    return Fields(
      year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday),
      hour: Int(parts.tm_hour), minute: Int(parts.tm_min), second: Int(parts.tm_sec))
  }

  /// The wall-clock time of calendar fields; nil for a date that does not exist (`2026-02-30`,
  /// `25:00`).
  public static func wallClock(_ fields: Fields) -> Int? {
    var parts = tm()
    parts.tm_year = Int32(clamping: fields.year - 1900)
    parts.tm_mon = Int32(clamping: fields.month - 1)
    parts.tm_mday = Int32(clamping: fields.day)
    parts.tm_hour = Int32(clamping: fields.hour)
    parts.tm_min = Int32(clamping: fields.minute)
    parts.tm_sec = Int32(clamping: fields.second)
    let seconds = timegm(&parts)
    // timegm carries an overflowing field into the next (February 30th is March 2nd).
    guard Self.fields(Int(seconds)) == fields else { return nil }
    return Int(seconds)
  }

  /// The instant showing a wall-clock time, in the zone whose offset `offset` gives (the local
  /// one by default). A time that happens twice (the hour repeated when clocks go back) is the
  /// first; a time that does not exist (skipped when clocks go forward) is read with the offset
  /// before the change, which lands as far past the change: 02:30 on a day that jumps from 02:00
  /// to 03:00 is 03:30.
  public static func instant(wallClock local: Double, offset: (Double) -> Int = LocalClock.offset) -> Double {
    // The offsets in force half a day either side: the two a change that day is between.
    let before = Double(offset(local - 43_200 - Double(offset(local - 43_200))))
    let after = Double(offset(local + 43_200 - Double(offset(local + 43_200))))
    let candidates = [local - before, local - after].filter { Double(offset($0)) == local - $0 }
    return candidates.min() ?? local - before
  }

  public struct Fields: Equatable, Sendable {
    public var year, month, day, hour, minute, second: Int
    public init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
      (self.year, self.month, self.day, self.hour, self.minute, self.second) = (year, month, day, hour, minute, second)
    }
  }
}
