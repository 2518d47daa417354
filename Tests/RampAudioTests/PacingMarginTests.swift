import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// Paced by the clock, what stands between a late wake-up of the render thread and an underrun
/// is the margin left ahead of the clock when it wakes (`OutputConfiguration.marginTime`). A
/// command given with `wake: false` runs at the thread's own next wake-up, when the margin is all
/// that is left ahead; sleeping in it stands for a wake-up that comes that late.
@Suite struct PacingMarginTests {
  /// Underruns counted across three stalls of `stall` seconds at the render thread's wake-up, on
  /// `null` paced by the clock with a 10 ms period and a 100 ms buffer.
  func underruns(margin: Double?, stall: Double) throws -> Int {
    let player = try Player(
      output: OutputConfiguration(
        device: "null", format: .float32, periodTime: 0.01, bufferTime: 0.1, pacing: .clock, marginTime: margin))
    player.start()
    defer { player.shutdown() }
    // A long fade keeps it rendering (nothing to render would stop it for idle).
    player.perform { state in _ = try? state.engine.set("master.gain", to: 0, transaction: Transaction(duration: 60)) }
    #expect(secondsUntil(5) { player.blocksRendered > 20 } != nil)
    usleep(200_000)
    let before = player.deviceUnderruns
    for _ in 0..<3 {
      player.perform(wake: false) { _ in usleep(UInt32(stall * 1e6)) }
      usleep(300_000)
    }
    return player.deviceUnderruns - before
  }

  /// By default the margin is half the buffer in whole periods: a wake-up 30 ms late leaves 20 ms
  /// ahead.
  @Test func theDefaultMarginOutlastsALateWakeUp() throws {
    let underruns = try underruns(margin: nil, stall: 0.03)
    #expect(underruns == 0, "\(underruns) underruns across three 30 ms stalls with a 50 ms margin")
  }

  /// With a margin of one period the same late wake-ups underrun: the margin is what protects.
  @Test func aOnePeriodMarginUnderrunsOnTheSameLateWakeUp() throws {
    let underruns = try underruns(margin: 0.01, stall: 0.03)
    #expect(underruns >= 3, "\(underruns) underruns across three 30 ms stalls with a 10 ms margin")
  }

  /// The default margin, half the buffer, wakes the thread once per two periods here (a margin of
  /// one period once per three: `WakeUpTests`), not once per period: waking costs more than
  /// rendering a block.
  @Test func theDefaultMarginWakesOncePerHalfBuffer() throws {
    let player = try Player(
      output: OutputConfiguration(device: "null", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .clock)
    )
    player.start()
    defer { player.shutdown() }
    player.perform { state in _ = try? state.engine.set("master.gain", to: 0, transaction: Transaction(duration: 60)) }
    #expect(secondsUntil(5) { player.renderThreadID > 0 && player.blocksRendered > 20 } != nil)
    let (woke, rendered) = try wakeUpsAndBlocksInASecond(player)
    #expect((180...220).contains(rendered), "\(rendered) blocks in a second")
    #expect(woke <= rendered * 6 / 10, "\(woke) wake-ups for \(rendered) blocks")
  }

  /// A margin outside one period to the buffer less one period is refused, naming the key.
  @Test func aMarginOutsideItsRangeIsRefused() {
    for margin in [0.005, 0.045, -1, .nan] {
      #expect(throws: AudioError.self) {
        try OutputConfiguration(periodTime: 0.01, bufferTime: 0.05, marginTime: margin).validate()
      }
    }
    for margin in [0.01, 0.025, 0.04] {
      #expect((try? OutputConfiguration(periodTime: 0.01, bufferTime: 0.05, marginTime: margin).validate()) != nil)
    }
    do {
      try OutputConfiguration(periodTime: 0.01, bufferTime: 0.05, marginTime: 0.045).validate()
    } catch {
      #expect(error.message.hasPrefix("output.margin: 0.045 s is outside one period"), "\(error.message)")
    }
  }
}
