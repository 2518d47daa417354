import CAllocationGuard
import Foundation
import RampEngine
import Testing

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

/// The flaky PCMs of these tests (`Tests/Fixtures/pcm_flaky.c`), one per test (they run in
/// parallel), in a configuration file appended to `ALSA_CONFIG_PATH` after `AlsaTestConfig` has
/// set it. Each records the audio it receives in `<name>.raw` and every open attempt in `<name>.opens`.
private enum RecoveryTestConfig {
  static let devices = [
    "rampd_recovery_play", "rampd_recovery_backoff", "rampd_recovery_shutdown", "rampd_recovery_allocations",
  ]

  private static let setup: Result<String, TestSetupError> = {
    _ = AlsaTestConfig.directory
    let dir = "/tmp/rampd-recovery-tests-\(getpid())"
    do {
      try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
      atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-recovery-tests-\(getpid())") }
      _ = try FlakyDevice.pluginPath()
      let config =
        "pcm_type.rampd_flaky { lib \"\(FlakyDevice.libraryPath)\" }\n"
        + devices.map {
          "pcm.\($0) { type rampd_flaky; file \"\(dir)/\($0).raw\"; flag \"\(dir)/\($0).unplugged\";"
            + " opens \"\(dir)/\($0).opens\" }\n"
        }.joined()
      let path = "\(dir)/asound-recovery-test.conf"
      try config.write(toFile: path, atomically: true, encoding: .utf8)
      AlsaTestConfig.append(configuration: path)
    } catch {
      return .failure(error as? TestSetupError ?? TestSetupError(message: "\(error)"))
    }
    return .success(dir)
  }()

  struct Files {
    /// Every frame the device received, FLOAT_LE.
    let raw: String
    /// Exists while the device is unplugged.
    let flag: String
    /// One CLOCK_MONOTONIC time stamp per open attempt.
    let opens: String
  }

  /// A player on flaky PCM `device`: float, 5 ms periods, a 20 ms buffer, paced by the clock.
  static func player(_ device: String) throws -> (Player, Files) {
    let dir = try setup.get()
    let files = Files(raw: "\(dir)/\(device).raw", flag: "\(dir)/\(device).unplugged", opens: "\(dir)/\(device).opens")
    let configuration = OutputConfiguration(
      device: device, format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .clock)
    return (try Player(output: configuration), files)
  }

  /// When each open of the device was attempted (monotonic seconds, as `monotonicSeconds()`).
  static func openAttempts(_ files: Files) throws -> [Double] {
    guard FileManager.default.fileExists(atPath: files.opens) else { return [] }
    return try String(contentsOfFile: files.opens, encoding: .utf8).split(separator: "\n").map { line in
      guard let seconds = Double(line) else {
        throw TestSetupError(message: "bad line '\(line)' in \(files.opens)")
      }
      return seconds
    }
  }
}

/// Waits up to `seconds` for the first event `match` accepts, sleeping on the doorbell; every event
/// taken on the way goes into `seen`. Nil on timeout.
private func waitFor(
  _ player: Player, seconds: Double, seen: inout [PlayerEvent], _ match: (PlayerEvent) -> Bool
) -> PlayerEvent? {
  let deadline = monotonicSeconds() + seconds
  while true {
    while let event = player.nextEvent() {
      seen.append(event)
      if match(event) { return event }
    }
    let left = deadline - monotonicSeconds()
    if left <= 0 { return nil }
    player.waitForEvents(timeout: min(left, 0.05))
  }
}

private func isDeviceFailure(_ event: PlayerEvent) -> Bool {
  if case .deviceFailed = event { true } else { false }
}

private func isUnderrun(_ event: PlayerEvent) -> Bool {
  if case .underrun = event { true } else { false }
}

/// A constant stereo float WAV of `seconds`.
private func constantFile(_ value: Float, seconds: Double, name: String = #function) throws -> String {
  let path = try temporaryDirectory(name).appendingPathComponent("constant.wav").path
  try writeSignal(path, frames: Int(seconds * 48_000), channels: 2) { _, _ in value }
  return path
}

/// The left channel of interleaved stereo samples.
private func left(_ samples: ArraySlice<Float>) -> [Double] {
  stride(from: samples.startIndex, to: samples.endIndex - 1, by: 2).map { Double(samples[$0]) }
}

/// A ticket that brings back the decoders of the streams in the mix.
private final class DecodersTicket: CommandTicket, @unchecked Sendable {
  var decoders: [StreamDecoder] = []
}

/// Device loss through real ALSA: `rampd_flaky` PCMs unplugged and plugged back while a Player
/// plays into them (see `FlakyDevice`).
@Suite struct DeviceRecoveryTests {
  /// The steepest step a 10 ms declick ramp of full scale makes at 48 kHz.
  static let declickStep = 1.0 / 480 + 1e-6

  /// The whole story: unplugged while playing, the player reports it, keeps rendering against
  /// the wall clock and keeps taking commands; plugged back, it reopens the device and the audio
  /// goes on at the gain set while there was no device, with no click inside either stretch.
  @Test func playbackSurvivesUnplugKeepingTimeAndCommandsAndResumesAtTheGainSetMeanwhile() throws {
    let device = "rampd_recovery_play"
    let (player, files) = try RecoveryTestConfig.player(device)
    defer { try? FlakyDevice.setUnplugged(false, flag: files.flag) }
    player.recoveryBackoff = (0.02, 0.1)
    let master = try player.publish("master.gain")
    player.start()
    defer { player.shutdown() }
    try player.play(try constantFile(1, seconds: 2), id: "s", loop: true)
    usleep(100_000)

    // Unplugged: the next write fails and says so.
    var events: [PlayerEvent] = []
    let unpluggedAt = monotonicSeconds()
    try FlakyDevice.setUnplugged(true, flag: files.flag)
    let failure = waitFor(player, seconds: 2, seen: &events, isDeviceFailure)
    let detection = monotonicSeconds() - unpluggedAt
    guard case .deviceFailed(let message)? = failure else {
      Issue.record("no deviceFailed event; saw \(events)")
      return
    }
    #expect(message.contains("'\(device)'") && message.contains("No such device"), "\(message)")
    #expect(!player.deviceIsHealthy)
    // Nothing more reaches the device until it is back: this is the audio from before the failure.
    let writtenBeforeFailure = try FlakyDevice.floatSamples(files.raw).count

    // Commands still run, on the render thread, with no device.
    let ticket = CommandTicket()
    let setAt = player.currentSample
    #expect(
      player.perform { state in
        _ = try? state.engine.set("master.gain", to: 0.5, transaction: .instant)
        state.complete(ticket)
      })
    #expect(waitFor(player, seconds: 1, seen: &events) { $0 == .commandCompleted(ticket) } != nil)
    #expect(!player.deviceIsHealthy, "the command ran while the device was lost")
    let appliedBy = monotonicSeconds() + 1
    while !(master.latest.value == 0.5 && master.latest.sample > setAt) && monotonicSeconds() < appliedBy {
      usleep(1_000)
    }
    #expect(master.latest.value == 0.5 && master.latest.sample > setAt, "master.gain is \(master.latest)")

    // Time goes on at the output rate against the wall clock.
    let (startTime, startSample) = (monotonicSeconds(), player.currentSample)
    usleep(200_000)
    let (endTime, endSample) = (monotonicSeconds(), player.currentSample)
    let speed = Double(endSample - startSample) / Double(player.output.rate) / (endTime - startTime)
    #expect((0.7...1.3).contains(speed), "rendered \(speed) s of audio a second while unplugged")
    #expect(!player.deviceIsHealthy)
    #expect(try FlakyDevice.floatSamples(files.raw).count == writtenBeforeFailure)

    // Plugged back: reopened within the longest backoff (plus slack), healthy, playing again.
    let pluggedAt = monotonicSeconds()
    try FlakyDevice.setUnplugged(false, flag: files.flag)
    let recovery = waitFor(player, seconds: 1, seen: &events) { $0 == .deviceRecovered(device) }
    let recoveryTime = monotonicSeconds() - pluggedAt
    #expect(recovery != nil, "no deviceRecovered within 1 s; saw \(events)")
    #expect(player.deviceIsHealthy)
    usleep(200_000)
    player.stop("s")
    #expect(waitFor(player, seconds: 2, seen: &events) { $0 == .streamEnded(id: "s", reason: .stopped) } != nil)
    player.shutdown()
    print("unplug detected after \(ms(detection)), recovered \(ms(recoveryTime)) after plugging back")
    #expect(!events.contains(where: isUnderrun), "the stream's decoder kept up: \(events)")

    let samples = try FlakyDevice.floatSamples(files.raw)
    let before = left(samples[..<writtenBeforeFailure])
    let after = left(samples[writtenBeforeFailure...])
    // Before the failure: the declick in, then full level to the end.
    #expect(before.count >= 2_400, "only \(before.count) frames before the failure")
    #expect(before.suffix(2_400).allSatisfy { $0 == 1 }, "full level up to the failure")
    #expect(largestStep(before) <= Self.declickStep, "a click before the failure: \(largestStep(before))")
    // After: the new master gain (after a short ramp at most), then the stop's ramp to silence.
    let firstHalf = try #require(after.firstIndex(of: 0.5), "no audio at gain 0.5 after recovery")
    #expect(firstHalf <= 480 && after[..<firstHalf].allSatisfy { (0...0.5).contains($0) })
    let steady = after[firstHalf...].prefix { $0 == 0.5 }.count
    #expect(steady >= 4_800, "only \(steady) frames at 0.5 before the stop")
    #expect(after.allSatisfy { $0 <= 0.5 }, "nothing at the old gain after recovery")
    #expect(try #require(after.last) <= 0.5 / 480 + 1e-6, "ends on the stop ramp's last steps")
    #expect(largestStep(after) <= Self.declickStep, "a click after recovery: \(largestStep(after))")
  }

  /// While the device stays unplugged the player retries the open with a doubling delay (the
  /// plugin logs each attempt), and a device plugged back is picked up within the longest delay.
  @Test func reopenIsRetriedWithDoublingDelaysAndSucceedsWithinTheLongestDelayOfPluggingBack() throws {
    let device = "rampd_recovery_backoff"
    let (player, files) = try RecoveryTestConfig.player(device)
    defer { try? FlakyDevice.setUnplugged(false, flag: files.flag) }
    let backoff = (first: 0.02, last: 0.1)
    player.recoveryBackoff = backoff
    player.start()
    defer { player.shutdown() }
    usleep(50_000)

    var events: [PlayerEvent] = []
    let unpluggedAt = monotonicSeconds()
    try FlakyDevice.setUnplugged(true, flag: files.flag)
    #expect(waitFor(player, seconds: 2, seen: &events, isDeviceFailure) != nil, "saw \(events)")
    let failedAt = monotonicSeconds()
    usleep(500_000)
    let pluggedAt = monotonicSeconds()
    try FlakyDevice.setUnplugged(false, flag: files.flag)
    #expect(waitFor(player, seconds: 1, seen: &events) { $0 == .deviceRecovered(device) } != nil, "saw \(events)")
    let recoveryTime = monotonicSeconds() - pluggedAt
    #expect(player.deviceIsHealthy)
    player.shutdown()

    let opens = try RecoveryTestConfig.openAttempts(files)
    // The player's own open, the attempts while unplugged, the one that worked.
    let whileUnplugged = opens.filter { $0 < pluggedAt }.dropFirst()
    let gaps = zip(whileUnplugged, whileUnplugged.dropFirst()).map { $1 - $0 }
    print(
      "\(whileUnplugged.count) opens while unplugged, \(ms(whileUnplugged.first.map { $0 - failedAt } ?? .nan))"
        + " after the failure, then every \(gaps.map(ms)); recovered \(ms(recoveryTime)) after plugging back")
    #expect((4...8).contains(whileUnplugged.count), "\(whileUnplugged.count) open attempts in 500 ms")
    if let first = whileUnplugged.first {
      // The failure is seen between unplugging and `failedAt`.
      #expect(first - unpluggedAt >= backoff.first && first - failedAt <= 0.1, "first retry \(first - failedAt) s")
    }
    // No retry sooner than the delay, which doubles, then holds at the longest.
    #expect(gaps.allSatisfy { $0 >= 2 * backoff.first - 0.005 }, "\(gaps)")
    #expect(gaps.allSatisfy { $0 <= backoff.last + 0.1 }, "\(gaps)")
    #expect((gaps.last ?? 0) >= backoff.last - 0.005, "the delay reaches the longest: \(gaps)")
    #expect(opens.count == whileUnplugged.count + 2, "one open once plugged back: \(opens)")
    #expect(recoveryTime <= backoff.last + 0.1, "recovered \(recoveryTime) s after plugging back")
  }

  /// Shutting down while the device is lost, with a stream playing and the recovery thread in the
  /// middle of a long backoff, returns at once; the recovery thread is gone (no more opens).
  @Test func shutdownWhileTheDeviceIsLostDoesNotWaitForRecovery() throws {
    let device = "rampd_recovery_shutdown"
    let (player, files) = try RecoveryTestConfig.player(device)
    defer { try? FlakyDevice.setUnplugged(false, flag: files.flag) }
    player.recoveryBackoff = (0.5, 5)
    player.start()
    defer { player.shutdown() }
    try player.play(try constantFile(1, seconds: 2), id: "s", loop: true)
    usleep(50_000)

    var events: [PlayerEvent] = []
    try FlakyDevice.setUnplugged(true, flag: files.flag)
    #expect(waitFor(player, seconds: 2, seen: &events, isDeviceFailure) != nil, "saw \(events)")
    usleep(600_000)  // past the first retry, into the second delay
    let decoders = DecodersTicket()
    player.perform { state in
      decoders.decoders = state.streams.map(\.decoder)
      state.complete(decoders)
    }
    #expect(waitFor(player, seconds: 1, seen: &events) { $0 == .commandCompleted(decoders) } != nil)
    #expect(!player.deviceIsHealthy)

    let start = monotonicSeconds()
    player.shutdown()
    let took = monotonicSeconds() - start
    print("shutdown with the device lost took \(ms(took))")
    #expect(took < 1, "shutdown took \(took) s")
    // Shutdown leaves the streams' decoders to their owner.
    for decoder in decoders.decoders { decoder.cancel() }

    let opens = try RecoveryTestConfig.openAttempts(files).count
    try FlakyDevice.setUnplugged(false, flag: files.flag)
    usleep(100_000)
    #expect(try RecoveryTestConfig.openAttempts(files).count == opens, "no reopening after shutdown")
  }

  /// Losing the device and getting it back allocates and frees nothing on the render thread: its
  /// steps (render a block, write it or keep time without a device, let finished streams go) run
  /// on this thread, counted, through an unplug (the write fails, the device goes to the recovery
  /// thread, time follows the clock, the failure is announced in words the recovery thread wrote)
  /// and the plug back (the reopened device is taken and played until it counts as recovered).
  /// The first loss and recovery only warms the runtime's caches; the second is counted.
  @Test func losingAndRecoveringTheDeviceAllocatesAndFreesNothingOnTheRenderThread() throws {
    let (player, files) = try RecoveryTestConfig.player("rampd_recovery_allocations")
    try FlakyDevice.setUnplugged(false, flag: files.flag)
    defer { try? FlakyDevice.setUnplugged(false, flag: files.flag) }
    try player.play(try constantFile(0.25, seconds: 1), id: "tone", loop: true)
    player.renderer.applyPendingCommands()
    // The recovery thread, as `start` runs it; this thread is the render thread.
    let link = player.link
    link.running.store(true, ordering: .releasing)
    let recovery = DeviceRecovery(
      link: link, configuration: player.configuration, output: player.output, open: player.openOutput,
      recoveryBackoff: (0.01, 0.02))
    Thread { recovery.run() }.start()
    defer {
      link.running.store(false, ordering: .releasing)
      link.recoveryBell.ring()
      while !link.recoveryFinished.load(ordering: .acquiring) { usleep(1_000) }
      player.renderer.discardPending()
    }
    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    var events: [PlayerEvent] = []
    var allocated = 0
    var freed = 0
    /// Blocks of the render loop until `done` (at most 2000); only the blocks are counted.
    func blocks(until done: () -> Bool) {
      var count = 0
      while !done() && count < 2000 {
        while player.renderer.streamsBehind(frames: frames) { usleep(100) }
        let allocations = rampd_allocations_on_this_thread()
        let frees = rampd_frees_on_this_thread()
        player.renderer.renderBlock(buffers)
        player.renderer.writeOrKeepTime(buffers)
        player.renderer.finishStreams()
        player.renderer.flushEvents()
        allocated += rampd_allocations_on_this_thread() - allocations
        freed += rampd_frees_on_this_thread() - frees
        while let event = player.nextEvent() { events.append(event) }
        count += 1
      }
    }
    func failures() -> Int { events.count { if case .deviceFailed = $0 { true } else { false } } }
    func recoveries() -> Int { events.count { if case .deviceRecovered = $0 { true } else { false } } }
    for round in 1...2 {
      if round == 2 {
        allocated = 0
        freed = 0
      }
      var played = 0
      blocks {
        played += 1
        return played > 20
      }
      try FlakyDevice.setUnplugged(true, flag: files.flag)
      blocks { failures() == round }
      #expect(!player.deviceIsHealthy)
      played = 0
      blocks {
        played += 1
        return played > 20
      }
      try FlakyDevice.setUnplugged(false, flag: files.flag)
      blocks { recoveries() == round }
      #expect(player.deviceIsHealthy)
    }
    #expect(failures() == 2 && recoveries() == 2, "\(events)")
    let message = events.compactMap { if case .deviceFailed(let message) = $0 { message } else { nil } }.first
    #expect(message?.contains("write failed") == true, "\(message ?? "no failure")")
    #expect(allocated == 0, "\(allocated) allocations on the render thread through a loss and a recovery")
    #expect(freed == 0, "\(freed) frees on the render thread through a loss and a recovery")
  }

}

private func ms(_ seconds: Double) -> String {
  "\(Int((seconds * 1_000).rounded())) ms"
}
