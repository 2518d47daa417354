import Foundation
import RampEngine
import Synchronization
import Testing

@testable import RampAudio

/// How many times thread `id` of this process has run (its wake-ups, and the preemptions it
/// resumed from): the third field of its `schedstat`.
func timesRun(_ id: Int32) throws -> Int {
  let text = try String(contentsOfFile: "/proc/self/task/\(id)/schedstat", encoding: .utf8)
  return try #require(Int(text.split(whereSeparator: \.isWhitespace)[2]))
}

/// How many times thread `id` of this process went to sleep and was woken: its voluntary
/// context switches. Unlike `timesRun`, preemptions by a busy machine's other work do not count.
func timesWoken(_ id: Int32) throws -> Int {
  let text = try String(contentsOfFile: "/proc/self/task/\(id)/status", encoding: .utf8)
  let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") })
  return try #require(Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)))
}

/// The render thread's wake-ups and the blocks it rendered over one second, after a fifth of a
/// second to settle.
func wakeUpsAndBlocksInASecond(_ player: Player) throws -> (woke: Int, rendered: Int) {
  usleep(200_000)
  let (woken, blocks) = (try timesWoken(player.renderThreadID), player.blocksRendered)
  usleep(1_000_000)
  return (try timesWoken(player.renderThreadID) - woken, player.blocksRendered - blocks)
}

/// Polls `condition` every millisecond for up to `seconds`; the seconds it took, nil if never.
func secondsUntil(_ seconds: Double, _ condition: () -> Bool) -> Double? {
  let start = monotonicSeconds()
  while monotonicSeconds() - start < seconds {
    if condition() { return monotonicSeconds() - start }
    usleep(1_000)
  }
  return nil
}

/// The threads that play sleep until there is something to do: the decoder until its ring is
/// half empty (or a seek or a stop), the render thread paced by the clock once per several
/// periods, a mixer binding's reader until its value moves. Wake-ups are counted by the kernel.
@Suite struct WakeUpTests {
  func longFile(seconds: Double, name: String = #function) throws -> String {
    let path = try temporaryDirectory(name).appendingPathComponent("ramp.wav").path
    let frames = Int(seconds * 48_000)
    // A different value on every frame, so order and completeness can be checked.
    try writeSignal(path, frames: frames, channels: 2) { f, _ in Float(f) / Float(frames) }
    return path
  }

  /// Full, the decoder sleeps: the old one napped 10 ms at a time, 100 wake-ups a second.
  @Test func aDecoderWithAFullRingSleeps() throws {
    let decoder = try StreamDecoder(
      path: try longFile(seconds: 10), outputRate: 48_000, outputChannels: 2, bufferSeconds: 2)
    defer { decoder.cancel() }
    #expect(secondsUntil(5) { decoder.ring.space == 0 } != nil, "the ring fills")
    let thread = decoder.threadID
    #expect(thread > 0)
    let before = try timesRun(thread)
    usleep(1_000_000)
    let woke = try timesRun(thread) - before
    #expect(woke <= 2, "\(woke) wake-ups in a second with a full ring")
  }

  /// Read through `read` much faster than real time, the decoder is woken at half a ring each
  /// time and keeps up: what its own fallback timer (paced for real time) would not do. Every
  /// frame arrives, in order.
  @Test func readingWakesTheDecoderSoItKeepsUpFasterThanRealTime() throws {
    let seconds = 6.0
    let decoder = try StreamDecoder(
      path: try longFile(seconds: seconds), outputRate: 48_000, outputChannels: 2, bufferSeconds: 0.5)
    defer { decoder.cancel() }
    decoder.waitUntilPrefilled()
    var chunk = [Float](repeating: 0, count: 960)
    var frames = 0
    var ordered = true
    let start = monotonicSeconds()
    while !(decoder.isFinished && decoder.ring.available == 0) && monotonicSeconds() - start < 10 {
      let got = chunk.withUnsafeMutableBufferPointer { decoder.read(into: $0.baseAddress!, count: 960) }
      for i in stride(from: 0, to: got, by: 2) where chunk[i] != Float(frames + i / 2) / Float(seconds * 48_000) {
        ordered = false
      }
      frames += got / 2
      if got == 0 { usleep(200) }
    }
    let elapsed = monotonicSeconds() - start
    #expect(frames == Int(seconds * 48_000))
    #expect(ordered)
    #expect(elapsed < seconds / 3, "\(elapsed) s to read \(seconds) s of audio")
  }

  /// Asleep with a full ring, a seek is taken at once, and a cancelled decoder's thread ends.
  @Test func seekAndCancelWakeASleepingDecoder() throws {
    var decoder: StreamDecoder? = try StreamDecoder(
      path: try longFile(seconds: 10), outputRate: 48_000, outputChannels: 2, bufferSeconds: 2)
    weak let watched = decoder
    #expect(secondsUntil(5) { decoder!.ring.space == 0 } != nil)
    usleep(50_000)
    decoder!.requestSeek(toOutputFrame: 240_000)
    let sought = secondsUntil(1) { decoder!.takeSeekMark() != nil }
    #expect(sought != nil && sought! < 0.05, "seek taken after \(sought ?? -1) s")
    #expect(secondsUntil(5) { decoder!.ring.space == 0 } != nil)
    usleep(50_000)
    decoder!.cancel()
    decoder = nil
    // The thread holds the decoder until it returns.
    let ended = secondsUntil(1) { watched == nil }
    #expect(ended != nil && ended! < 0.05, "the thread ended after \(ended ?? -1) s")
  }

  /// Paced by the clock (period 5 ms, buffer 20 ms) with a margin of one period, the render
  /// thread sleeps until one period is left ahead and then writes three periods back to back:
  /// about 67 wake-ups a second for 200 blocks, and the recording is still every sample of the file.
  @Test func clockPacingWithASmallMarginWakesOncePerSeveralPeriods() throws {
    let path = AlsaTestConfig.path("player10.raw")
    let player = try Player(
      output: OutputConfiguration(
        device: "rampd_test_player10", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .clock,
        marginTime: 0.005))
    let file = try longFile(seconds: 1.5)
    player.start()
    let start = try player.prepare(file, id: "r")
    let landed = Atomic<Int64>(-1)
    player.perform { state in
      _ = start(state)
      landed.store(state.engine.now, ordering: .relaxed)
    }
    #expect(secondsUntil(5) { player.renderThreadID > 0 && landed.load(ordering: .relaxed) >= 0 } != nil)
    let (woke, rendered) = try wakeUpsAndBlocksInASecond(player)
    #expect((180...220).contains(rendered), "\(rendered) blocks in a second")
    #expect(woke < rendered / 2, "\(woke) wake-ups for \(rendered) blocks")
    #expect(secondsUntil(5) { player.nextEvent() == .streamEnded(id: "r", reason: .finished) } != nil)
    player.shutdown()
    let samples = try Data(contentsOf: URL(fileURLWithPath: path)).withUnsafeBytes {
      Array($0.bindMemory(to: Float.self))
    }
    let first = Int(landed.load(ordering: .relaxed))
    // The declick ramp scales the first 10 ms; after it, the file itself, sample for sample.
    var exact = true
    for f in 480..<72_000 where samples[2 * (first + f)] != Float(f) / 72_000 { exact = false }
    #expect(exact, "the file, sample for sample, from the sample the play command landed on")
  }

  /// Several blocks rendered at one wake-up still reach a reader one period apart.
  @Test func publishedValuesAdvanceEveryPeriod() throws {
    _ = AlsaTestConfig.directory
    let player = try Player(
      output: OutputConfiguration(
        device: "rampd_test_player11", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .clock))
    let master = try player.publish("master.gain")
    player.start()
    defer { player.shutdown() }
    player.perform { state in _ = try? state.engine.set("master.gain", to: 0, transaction: Transaction(duration: 5)) }
    usleep(100_000)
    var samples: [Int64] = []
    let start = monotonicSeconds()
    while monotonicSeconds() - start < 0.3 {
      let sample = master.latest.sample
      if sample != samples.last { samples.append(sample) }
      usleep(500)
    }
    let steps = zip(samples, samples.dropFirst()).map { $1 - $0 }
    let period = Int64(player.output.periodFrames)
    #expect(samples.count >= 45, "\(samples.count) values in 0.3 s (60 periods)")
    #expect(steps.filter { $0 == period }.count >= steps.count * 3 / 4, "steps: \(steps)")
  }

  /// A reader waiting for a change sleeps until the value moves, or until woken.
  @Test func waitForChangeSleepsUntilTheValueMoves() throws {
    _ = AlsaTestConfig.directory
    let player = try Player(
      output: OutputConfiguration(
        device: "rampd_test_player12", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .clock))
    let master = try player.publish("master.gain", wakesOnChange: true)
    player.start()
    defer { player.shutdown() }
    #expect(secondsUntil(5) { master.latest.value == 1 } != nil)
    // When the reader woke, on the monotonic clock: after the change, whenever its thread began.
    let woke = Mutex<Double?>(nil)
    let reader = Thread {
      master.waitForChange(from: 1, timeout: 5)
      woke.withLock { $0 = monotonicSeconds() }
    }
    reader.start()
    usleep(300_000)
    #expect(woke.withLock { $0 } == nil, "still asleep while the value holds")
    let changed = monotonicSeconds()
    player.perform { state in _ = try? state.engine.set("master.gain", to: 0.5, transaction: .instant) }
    #expect(secondsUntil(1) { woke.withLock { $0 } != nil } != nil)
    let after = (woke.withLock { $0 } ?? 0) - changed
    #expect(after >= 0 && after < 1, "woke \(after) s after the change")

    let interrupted = Mutex<Bool>(false)
    let sleeper = Thread {
      master.waitForChange(from: 0.5)
      interrupted.withLock { $0 = true }
    }
    sleeper.start()
    usleep(100_000)
    #expect(!interrupted.withLock { $0 })
    master.wake()
    #expect(secondsUntil(1) { interrupted.withLock { $0 } } != nil)
  }

  /// A stream whose gain and transport rest is mixed straight from its ring at one gain for the
  /// block: the very products the per-frame path makes, sample for sample.
  @Test func aStreamAtRestIsMixedStraightFromItsRing() throws {
    _ = AlsaTestConfig.directory
    let player = try Player(
      output: OutputConfiguration(
        device: "rampd_test_player13", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device))
    let path = try temporaryDirectory().appendingPathComponent("signal.wav").path
    func signal(_ f: Int, _ c: Int) -> Float { Float(sin(Double(f * 2 + c) / 7)) * 0.9 }
    try writeSignal(path, frames: 24_000, channels: 2, signal: signal)
    try player.play(path, id: "s", gain: 0.7)
    player.renderer.applyPendingCommands()
    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: 2)
    defer { buffers.deallocate() }
    var worst: Float = 0
    for block in 0..<40 {
      while player.renderer.streamsBehind(frames: frames) { usleep(100) }
      player.renderer.renderBlock(buffers)
      // After the 480-frame declick the stream rests at 0.7.
      guard block * frames >= 480 else { continue }
      for f in 0..<frames {
        for c in 0..<2 {
          let expected = signal(block * frames + f, c) * Float(0.7)
          worst = max(worst, abs(buffers.mix[2 * f + c] - expected))
        }
      }
    }
    #expect(worst == 0, "off by \(worst)")
  }

  /// Published values look their key paths up again when a command or a stream's end may have
  /// defined or removed one (and not every block): NaN before the stream, its gain while it
  /// plays, NaN again once it has ended.
  @Test func publishedValuesFollowKeyPathsThatComeAndGo() throws {
    _ = AlsaTestConfig.directory
    let player = try Player(
      output: OutputConfiguration(
        device: "rampd_test_player14", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .clock))
    let gain = try player.publish("streams.s.gain")
    player.start()
    defer { player.shutdown() }
    #expect(secondsUntil(5) { gain.latest.sample >= 0 } != nil)
    #expect(gain.latest.value.isNaN)
    let path = try temporaryDirectory().appendingPathComponent("short.wav").path
    try writeSignal(path, frames: 9_600, channels: 2)
    try player.play(path, id: "s", gain: 0.25)
    #expect(secondsUntil(5) { gain.latest.value == 0.25 } != nil, "\(gain.latest)")
    #expect(secondsUntil(5) { gain.latest.value.isNaN } != nil, "\(gain.latest) after the stream")
  }
}
