import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// A command scheduled for a wall-clock time is heard at that time: on the clocked test device
/// (`Tests/Fixtures/pcm_clocked.c`), the frame that carries the change is consumed within 1 ms of
/// the time asked for, whatever the device's clock error.
@Suite struct HeardOnTimeTests {
  /// Plays a constant `level` through device `name` (200 ms buffer), lets the mapping learn the
  /// device for `settle` seconds, then schedules master.gain 0.5 for `ahead` seconds from now;
  /// returns how far from that time (in seconds) the first frame at half the level was heard,
  /// and the player's measured output.
  func heardError(
    _ name: String, settle: Double = 1.5, ahead: Double = 2, level: Float = 1,
    limiter: LimiterSettings = LimiterSettings(enabled: false), name test: String = #function
  ) throws -> (error: Double, measured: (delay: Double, driftPPM: Double)?) {
    let player = try ClockedDevice.player(name, limiter: limiter)
    let file = try temporaryDirectory(test).appendingPathComponent("one.wav").path
    try writeSignal(file, frames: 48_000 * Int(settle + ahead + 2), channels: 2) { _, _ in level }
    player.start()
    try player.play(file, id: "one")
    usleep(UInt32(settle * 1e6))
    let (wall, monotonic) = (realtimeSeconds(), monotonicNanoseconds())
    let sample = player.sample(heardAt: wall + ahead)
    player.perform(at: sample) { state in _ = try? state.engine.set("master.gain", to: 0.5, transaction: .instant) }
    usleep(UInt32((ahead + 0.5) * 1e6))
    let measured = player.measuredOutput
    player.shutdown()
    let recording = try ClockedDevice.recording(name)
    let playing = try #require((0..<recording.frames).first { recording.sample($0) == level })
    let changed = try #require((playing..<recording.frames).first { recording.sample($0) == level / 2 })
    #expect(recording.sample(changed - 1) == level)
    let heard = try #require(recording.nanoseconds(ofFrame: changed))
    return (Double(heard - (monotonic + Int64(ahead * 1e9))) / 1e9, measured)
  }

  @Test func aScheduledChangeIsHeardAtItsTime() throws {
    let (error, measured) = try heardError("rampd_clocked_on_time")
    #expect(abs(error) < 0.001, "heard \(error * 1000) ms from its time")
    let delay = try #require(measured?.delay)
    // Right after a write the device holds at most its buffer (200 ms). It does not rewind, so it
    // wakes rampd when all but the margin (half the buffer) is free, and the blocks written then
    // fill it again: after the first of them it holds about 110 ms, after the last about 200 ms.
    // (Less than 100 ms only if a wake-up came later than a loaded machine makes it.)
    #expect(delay > 0.05 && delay <= 0.21, "delay \(delay) s")
  }

  /// Through the master limiter, whose look-ahead delays the output by 58 frames (1.2 ms): the
  /// heard clock counts them, so the change is still heard at its time.
  @Test func aScheduledChangeIsHeardAtItsTimeThroughTheLimiter() throws {
    let (error, _) = try heardError("rampd_clocked_limiter_on_time", level: 0.5, limiter: LimiterSettings())
    #expect(abs(error) < 0.001, "heard \(error * 1000) ms from its time")
  }

  @Test func onTimeWithTheDeviceClock100PPMFast() throws {
    let (error, measured) = try heardError("rampd_clocked_fast")
    #expect(abs(error) < 0.001, "heard \(error * 1000) ms from its time")
    let drift = try #require(measured?.driftPPM)
    #expect(abs(drift - 100) < 20, "drift \(drift) ppm")
  }

  @Test func onTimeWithTheDeviceClock100PPMSlow() throws {
    let (error, measured) = try heardError("rampd_clocked_slow")
    #expect(abs(error) < 0.001, "heard \(error * 1000) ms from its time")
    let drift = try #require(measured?.driftPPM)
    #expect(abs(drift + 100) < 20, "drift \(drift) ppm")
  }

  /// An hour away with a clock 100 ppm off is 0.36 s of drift: the same as three seconds with a
  /// clock 12 % off, which the device simulates. Counted at the nominal rate, the change would be
  /// heard 0.36 s early or late.
  @Test func onTimeAnHourAwayFast() throws {
    let (error, _) = try heardError("rampd_clocked_hour_fast", ahead: 3)
    #expect(abs(error) < 0.001, "heard \(error * 1000) ms from its time")
  }

  @Test func onTimeAnHourAwaySlow() throws {
    let (error, _) = try heardError("rampd_clocked_hour_slow", ahead: 3)
    #expect(abs(error) < 0.001, "heard \(error * 1000) ms from its time")
  }

  /// The mapping itself, fed an hour of a card 100 ppm fast whose position comes with a few
  /// frames of noise: its rate converges on the card's, and a sample an hour ahead is placed
  /// within 1 ms.
  @Test func theMappingFollowsAnHourOfDrift() {
    var clock = HeardClock(rate: 48_000)
    let rate = 48_000 * (1 + 100e-6)
    var time: Int64 = 1_000_000_000
    var noise: UInt64 = 0x2545_F491_4F6C_DD1D
    // One observation per 10 ms block for an hour, each off by up to ±3 frames.
    for _ in 0..<360_000 {
      time += 10_000_000
      noise = noise &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      let played = Double(time - 1_000_000_000) / 1e9 * rate + Double(Int(noise >> 61) - 3)
      clock.observe(sample: Int64(played), at: time)
    }
    #expect(abs(clock.driftPPM - 100) < 0.1, "drift \(clock.driftPPM) ppm")
    let hourLater = time + 3_600_000_000_000
    let truth = Double(hourLater - 1_000_000_000) / 1e9 * rate
    let predicted = clock.sample(at: hourLater)
    #expect(abs(predicted - truth) < 48, "off by \(predicted - truth) frames an hour ahead")
    // Counted at the nominal rate instead, it would be 0.36 s off.
    #expect(abs(truth - Double(hourLater - 1_000_000_000) / 1e9 * 48_000) > 17_000)
  }

  /// An audio server's graph running late: the position moves in steps of a 1024-frame quantum
  /// at uneven times (up to 15 ms late), on a clock that is the nominal one. The rate in use
  /// never strays by more than a fraction of the 1000 ppm a nominal clock is trusted within, and
  /// settles near 0 ppm; fitted from a run's two ends instead, it swung by tens of thousands.
  @Test func aPointerInLateQuantaMovesTheRateLittle() {
    var clock = HeardClock(rate: 48_000)
    var noise: UInt64 = 0x9E37_79B9_7F4A_7C15
    var time: Int64 = 1_000_000_000
    var worst = 0.0
    for block in 0..<3_000 {
      time += 10_000_000
      noise = noise &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      let late = Int64(noise >> 40) % 15_000_000
      // What the device says it played: whole quanta, as of a moment up to 15 ms ago.
      let played = (Double(time - late - 1_000_000_000) / 1e9 * 48_000 / 1024).rounded(.down) * 1024
      clock.observe(sample: Int64(played), at: time)
      if block > 100 { worst = max(worst, abs(clock.driftPPM)) }
    }
    #expect(worst < 500, "the rate strayed by \(worst) ppm")
    #expect(abs(clock.driftPPM) < 50, "drift \(clock.driftPPM) ppm after 30 s")
  }

  /// An audio server's client whose reported delay wanders, as ALSA's `pulse` through
  /// pipewire-pulse does in a stream's first seconds (measured: 3.7 ms a second off the line its
  /// samples are heard on, with 3 ms jumps back every second or two), on a clock that is the
  /// nominal one. Two wall-clock times a second apart, converted 0.7 s apart (as a schedule held
  /// on the wall clock is), land a second apart within the 1000 ppm a clock may drift; a
  /// position that followed each report put them up to 6 ms apart.
  @Test func aServersWanderingDelayMovesTheMappingNoFasterThanAClockDrifts() {
    var clock = HeardClock(rate: 48_000)
    clock.boundsDrift = true
    let start: Int64 = 1_000_000_000
    func wander(_ seconds: Double) -> Double {
      (-3.7e-3 * seconds + 3e-3 * (seconds / 1.7).rounded(.down)) * 48_000
    }
    var converted: [(at: Double, sample: Double)] = []
    var time = start
    // The stream's first six seconds.
    for block in 1...300 {
      time = start + Int64(block) * 20_000_000
      let seconds = Double(time - start) / 1e9
      clock.observe(sample: Int64((seconds * 48_000 + wander(seconds)).rounded()), at: time)
      // Every 0.1 s, the sample heard 1.7 s from now.
      if block % 5 == 0 { converted.append((seconds, clock.sample(at: time + 1_700_000_000))) }
    }
    var worst = 0.0
    for (index, first) in converted.enumerated() where first.at >= 0.5 {
      guard let second = converted[index...].first(where: { $0.at >= first.at + 0.7 - 1e-9 }) else { break }
      worst = max(worst, abs(second.sample - first.sample - (second.at - first.at) * 48_000))
    }
    #expect(worst <= 0.7 * 48 + 1, "two conversions 0.7 s apart are \(worst) frames off")
    #expect(abs(clock.driftPPM) <= 1000, "drift \(clock.driftPPM) ppm")
  }

  /// An audio server's client whose pointer moves in whole quanta of 1024 or 2048 frames, as of a
  /// moment up to 20 ms ago, on a clock that is the nominal one: its swings (up to 63 ms wide)
  /// are wandering, not a shift, so two wall-clock times a second apart, converted 0.7 s apart,
  /// land a second apart within the 2 ms the rate and the slew allow: 43 and 30 frames off (a
  /// position that followed each report, 532 and 812; one that took each swing past 20 ms for a
  /// shift, up to 1399).
  @Test func aServersPointerInQuantaIsWanderingNotAShift() {
    for quantum in [1024.0, 2048.0] {
      var clock = HeardClock(rate: 48_000)
      clock.boundsDrift = true
      var noise: UInt64 = 0x9E37_79B9_7F4A_7C15
      let start: Int64 = 1_000_000_000
      var converted: [(at: Double, sample: Double)] = []
      for block in 1...3_000 {
        let time = start + Int64(block) * 10_000_000
        noise = noise &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        let late = Int64(noise >> 40) % 20_000_000
        let played = (Double(time - late - start) / 1e9 * 48_000 / quantum).rounded(.down) * quantum
        clock.observe(sample: Int64(played), at: time)
        if block % 10 == 0 { converted.append((Double(time - start) / 1e9, clock.sample(at: time + 1_700_000_000))) }
      }
      var worst = 0.0
      for (index, first) in converted.enumerated() where first.at >= 2 {
        guard let second = converted[index...].first(where: { $0.at >= first.at + 0.7 - 1e-9 }) else { break }
        worst = max(worst, abs(second.sample - first.sample - (second.at - first.at) * 48_000))
      }
      #expect(worst <= 96, "quanta of \(quantum): two conversions 0.7 s apart are \(worst) frames off")
    }
  }

  /// The same client's report shifted for good (the server's graph skipped): by 30 ms, more than
  /// the wandering `HeardClock.slewedSeconds` allows for, it is followed within a fifth of a
  /// second; by 10 ms, it is taken as wandering and moves the mapping 1 ms a second.
  @Test func aServersShiftIsFollowedAndItsWanderingSlewed() {
    for (shift, within) in [(0.03, 0.2), (0.01, 1.0)] {
      var clock = HeardClock(rate: 48_000)
      clock.boundsDrift = true
      let start: Int64 = 1_000_000_000
      var time = start
      for block in 1...(100 + Int(within / 0.02)) {
        time = start + Int64(block) * 20_000_000
        let seconds = Double(time - start) / 1e9
        clock.observe(sample: Int64(((seconds - (block > 100 ? shift : 0)) * 48_000).rounded()), at: time)
      }
      let truth = (Double(time - start) / 1e9 - shift) * 48_000
      let off = abs(clock.sample(at: time) - truth)
      if shift > HeardClock.slewedSeconds {
        #expect(off < 48, "a \(shift) s shift: \(off) frames off after \(within) s")
      } else {
        #expect(abs(off - (shift - within * 1e-3) * 48_000) <= 2, "a \(shift) s shift: \(off) frames off")
      }
    }
  }
}
