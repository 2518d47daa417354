import Foundation
import Testing

@testable import RampAudio

/// The one clock pacer, shared by a clock-paced output and the render thread without a device.
@Suite struct ClockPacerTests {
  func seconds(_ body: () -> Void) -> Double {
    let start = monotonicNanoseconds()
    body()
    return Double(monotonicNanoseconds() - start) / 1e9
  }

  /// Blocks keep to the clock: a tenth of a second of them, one block allowed ahead, takes about a
  /// tenth of a second.
  @Test func writesKeepToTheClock() {
    var pacer = ClockPacer(rate: 48_000)
    let took = seconds {
      for _ in 0..<11 {
        pacer.wait(toWrite: 480, lead: 480)
        pacer.advance(by: 480)
      }
    }
    #expect(took > 0.09 && took < 0.5, "\(took) s")
  }

  /// After an outage (the writer away for 200 ms, far behind the clock) the pacer re-anchors and
  /// says so: the next tenth of a second of blocks is paced again, not written at once to catch
  /// up with the time lost.
  @Test func reAnchorsAfterAnOutage() {
    var pacer = ClockPacer(rate: 48_000)
    // Two blocks ahead: a wake-up late by less than a block (a loaded machine) is not an outage.
    for _ in 0..<5 {
      #expect(pacer.wait(toWrite: 480, lead: 960) == false)
      pacer.advance(by: 480)
    }
    usleep(200_000)
    var late = 0
    let took = seconds {
      for _ in 0..<10 {
        if pacer.wait(toWrite: 480, lead: 960) { late += 1 }
        pacer.advance(by: 480)
      }
    }
    #expect(late == 1, "re-anchored \(late) times")
    #expect(took > 0.07, "\(took) s for 0.1 s of blocks after the outage (two of them at once)")
    #expect(pacer.framesAhead() <= 960)
  }

  /// With a refill point, a writer that must wait sleeps until only that much is left ahead, then
  /// writes back to back: a buffer of five blocks refilled from empty wakes once per five blocks.
  @Test func aRefillPointGroupsTheWakeUps() {
    var pacer = ClockPacer(rate: 48_000)
    var waits = 0
    let took = seconds {
      for _ in 0..<26 {
        let before = monotonicNanoseconds()
        pacer.wait(toWrite: 480, lead: 2_400, refill: 0)
        if monotonicNanoseconds() - before > 1_000_000 { waits += 1 }
        pacer.advance(by: 480)
      }
    }
    // 26 blocks: the first five at once, then four sleeps of 50 ms, each followed by five blocks.
    #expect(waits == 5 || waits == 4, "\(waits) sleeps")
    #expect(took > 0.19 && took < 0.6, "\(took) s")
    #expect(pacer.framesAhead() <= 2_400)
  }
}
