import Foundation
import Testing

@testable import RampProtocol

/// `Recurrence.next`: the next time a repeating schedule takes effect, in local time, across
/// both daylight-saving changes of a year (Europe/Berlin, 2026: clocks go forward from 02:00 to
/// 03:00 on 29 March and back from 03:00 to 02:00 on 25 October).
@Suite struct RecurrenceTests {
  static let berlin = TimeZone(identifier: "Europe/Berlin")!
  static func offset(_ instant: Double) -> Int { berlin.secondsFromGMT(for: Date(timeIntervalSince1970: instant)) }
  static func utc(_ text: String) -> Double { RFC3339.parse(text)! }

  func next(_ recurrence: Recurrence, after text: String) -> String {
    let after = Self.utc(text)
    return RFC3339.format(recurrence.next(after: after, start: after, offset: Self.offset))
  }

  @Test func anOrdinaryDayIsTheLocalTime() {
    // 07:00 CET is 06:00 UTC; already past on the 24th at 10:00 UTC, so the 25th.
    #expect(
      next(.daily(seconds: 7 * 3600, days: Recurrence.everyDay), after: "2026-11-24T10:00:00Z")
        == "2026-11-25T06:00:00Z")
    #expect(
      next(.daily(seconds: 7 * 3600, days: Recurrence.everyDay), after: "2026-11-24T05:59:59Z")
        == "2026-11-24T06:00:00Z")
  }

  @Test func weekdaysSkipTheWeekend() {
    // Friday 27 November 2026, after 07:00 CET: next is Monday the 30th.
    #expect(
      next(.daily(seconds: 7 * 3600, days: Recurrence.weekdays), after: "2026-11-27T10:00:00Z")
        == "2026-11-30T06:00:00Z")
    #expect(next(.daily(seconds: 7 * 3600, days: [0]), after: "2026-11-27T10:00:00Z") == "2026-11-29T06:00:00Z")
  }

  @Test func aTimeOfDayKeepsItsLocalTimeAcrossSpringForward() {
    let seven = Recurrence.daily(seconds: 7 * 3600, days: Recurrence.everyDay)
    // 07:00 CET on the 28th is 06:00 UTC; 07:00 CEST on the 29th is 05:00 UTC: 23 hours apart.
    #expect(next(seven, after: "2026-03-28T00:00:00Z") == "2026-03-28T06:00:00Z")
    #expect(next(seven, after: "2026-03-28T06:00:00Z") == "2026-03-29T05:00:00Z")
  }

  @Test func aSkippedTimeFiresAsFarAfterTheChange() {
    let half = Recurrence.daily(seconds: 2 * 3600 + 1800, days: Recurrence.everyDay)
    // 02:30 does not exist on 29 March: it fires at 03:30 CEST (01:30 UTC), once.
    #expect(next(half, after: "2026-03-28T12:00:00Z") == "2026-03-29T01:30:00Z")
    // The next day is an ordinary 02:30 CEST.
    #expect(next(half, after: "2026-03-29T01:30:00Z") == "2026-03-30T00:30:00Z")
  }

  @Test func aRepeatedTimeFiresOnceAtTheFirst() {
    let half = Recurrence.daily(seconds: 2 * 3600 + 1800, days: Recurrence.everyDay)
    // 02:30 happens twice on 25 October: 00:30 UTC (CEST) and 01:30 UTC (CET). The first only.
    #expect(next(half, after: "2026-10-24T12:00:00Z") == "2026-10-25T00:30:00Z")
    #expect(next(half, after: "2026-10-25T00:30:00Z") == "2026-10-26T01:30:00Z")
    // 07:00 across the change: 25 hours apart.
    let seven = Recurrence.daily(seconds: 7 * 3600, days: Recurrence.everyDay)
    #expect(next(seven, after: "2026-10-24T05:00:00Z") == "2026-10-25T06:00:00Z")
  }

  @Test func anIntervalCountsRealSecondsAcrossTheChanges() {
    let hourly = Recurrence.every(seconds: 3600)
    let start = Self.utc("2026-03-29T00:30:00Z")
    // Through the skipped hour: 01:30 UTC, one real hour later, whatever the clocks say.
    #expect(hourly.next(after: start, start: start, offset: Self.offset) == start + 3600)
    // Late by 2.5 intervals: the next one still on the grid, none run twice.
    #expect(hourly.next(after: start + 9000, start: start, offset: Self.offset) == start + 10_800)
  }

  @Test func badRepeatsAreRefusedNamingTheField() {
    func refusal(_ line: String) -> (String?, ErrorCode?) {
      guard case .failure(let error) = Request.parse(line: line).result else { return (nil, nil) }
      return (error.field, error.code)
    }
    #expect(refusal(#"{"cmd":"stop","repeat":{"time":"25:00"}}"#) == ("repeat.time", .invalidField))
    #expect(refusal(#"{"cmd":"stop","repeat":{"every":0.5}}"#) == ("repeat.every", .outOfRange))
    #expect(
      refusal(#"{"cmd":"stop","repeat":{"time":"07:00","days":["mon","xyz"]}}"#) == ("repeat.days[1]", .invalidField))
    #expect(refusal(#"{"cmd":"stop","repeat":{"time":"07:00","every":5}}"#) == ("repeat.every", .invalidField))
    #expect(refusal(#"{"cmd":"stop","repeat":{"time":"07:00"},"at":5}"#) == ("at", .invalidField))
    #expect(refusal(#"{"cmd":"stop","repeat":{"every":5},"ack":"applied"}"#) == ("ack", .invalidField))
    #expect(refusal(#"{"cmd":"stop","tag":"x"}"#) == ("tag", .invalidField))
    #expect(refusal(#"{"cmd":"subscribe","repeat":{"every":5}}"#) == ("repeat", .invalidField))
    #expect(refusal(#"{"cmd":"unschedule"}"#) == ("schedule", .invalidField))
    #expect(refusal(#"{"cmd":"unschedule","schedule":-1}"#) == ("schedule", .invalidField))
  }

  @Test func aRepeatingRequestReadsBackTheSame() throws {
    let line =
      #"{"cmd":"play","path":"/a.wav","space":"db","repeat":{"time":"07:00","days":["mon","fri"]},"tag":"alarm"}"#
    let request = try Request.parse(line: line).result.get()
    #expect(request.repeats == .daily(seconds: 25_200, days: [1, 5]) && request.ack == .scheduled)
    #expect(try Request.parse(request.json) == request)
  }
}
