import Foundation
import RampProtocol
import Testing

/// NumberText and LocalClock stand in for Foundation's `String(format:)` and `Calendar`: the same
/// text, the same dates.
@Suite struct NumberTextTests {
  static let values: [Double] = {
    var values: [Double] = [
      0, -0.0, 0.125, 0.5, 1.5, 2.5, -6.0206, 1e-7, 0.0005, 0.0015, 123_456_789.123, 1e300, -1e-300, 4.35, -23.125,
      .nan, .infinity, -.infinity, .greatestFiniteMagnitude, .leastNonzeroMagnitude,
    ]
    // Decibels and gains as replies and logs carry them, from a fixed seed.
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    for _ in 0..<2000 {
      state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      let unit = Double(state >> 11) / Double(1 << 53)
      values.append((unit - 0.5) * 200)
      values.append(unit)
    }
    return values
  }()

  @Test func printsWhatStringFormatPrinted() {
    for value in Self.values {
      for decimals in 0...9 {
        #expect(NumberText.fixed(value, decimals: decimals) == String(format: "%.\(decimals)f", value), "\(value)")
        #expect(
          NumberText.fixed(value, decimals: decimals, sign: true) == String(format: "%+.\(decimals)f", value),
          "\(value)")
      }
      #expect(NumberText.general(value) == String(format: "%g", value), "\(value)")
    }
  }

  @Test func aDateThatDoesNotExistHasNoWallClock() {
    let leap = LocalClock.Fields(year: 2028, month: 2, day: 29, hour: 23, minute: 59, second: 59)
    #expect(LocalClock.wallClock(leap).map(LocalClock.fields) == leap)
    #expect(
      LocalClock.wallClock(LocalClock.Fields(year: 2026, month: 2, day: 29, hour: 0, minute: 0, second: 0)) == nil)
    #expect(
      LocalClock.wallClock(LocalClock.Fields(year: 2026, month: 4, day: 1, hour: 24, minute: 0, second: 0)) == nil)
    #expect(LocalClock.wallClock(LocalClock.Fields(year: 1970, month: 1, day: 1, hour: 0, minute: 0, second: 0)) == 0)
  }

  /// Berlin's offsets through a year with both daylight-saving changes, as Foundation's
  /// `TimeZone` (ICU) reads them: LocalClock's wall clock is the same at every quarter hour.
  @Test func wallClockFieldsMatchFoundations() throws {
    let berlin = try #require(TimeZone(identifier: "Europe/Berlin"))
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = berlin
    let offset = { berlin.secondsFromGMT(for: Date(timeIntervalSince1970: $0)) }
    let start = try #require(RFC3339.parse("2026-01-01T00:00:00Z"))
    for step in stride(from: 0.0, to: 365 * 86_400, by: 900) {
      let instant = start + step
      let parts = calendar.dateComponents(
        [.year, .month, .day, .hour, .minute, .second], from: Date(timeIntervalSince1970: instant))
      let fields = LocalClock.fields(Int(instant) + offset(instant))
      #expect(
        fields
          == LocalClock.Fields(
            year: parts.year!, month: parts.month!, day: parts.day!, hour: parts.hour!, minute: parts.minute!,
            second: parts.second!), "\(instant)")
    }
  }
}
