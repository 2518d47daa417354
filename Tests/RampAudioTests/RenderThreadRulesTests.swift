import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// The render thread's rules beyond allocation, each checked where it shows: in the samples
/// recorded through a real ALSA `file` PCM, or in what a decoder thread writes to its ring.
@Suite struct RenderThreadRulesTests {
  func player(_ number: Int, pacing: OutputConfiguration.Pacing = .clock) throws -> (Player, String) {
    _ = AlsaTestConfig.directory
    let path = AlsaTestConfig.path("player\(number).raw")
    let configuration = OutputConfiguration(
      device: "rampd_test_player\(number)", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: pacing)
    return (try Player(output: configuration), path)
  }

  // The recording and event helpers are PlayerTests' own.
  func recorded(_ path: String) throws -> [Float] { try PlayerTests().recorded(path) }

  @discardableResult
  func waitFor(_ player: Player, seconds: Double = 20, _ match: (PlayerEvent) -> Bool) -> [PlayerEvent] {
    PlayerTests().waitFor(player, seconds: seconds, match)
  }

  static func isSubnormal(_ sample: Float) -> Bool { sample != 0 && abs(sample) < Float.leastNormalMagnitude }

  /// A fade down to a −800 dB floor passes through gains below Float's smallest normal (about
  /// −758 dB): with flush-to-zero on the render thread they are 0, so the recording holds no
  /// subnormal sample, and the fade does reach silence.
  @Test func aDecibelFloorFadeProducesNoSubnormalSamples() throws {
    let (player, path) = try player(16)
    let file = try temporaryDirectory().appendingPathComponent("constant.wav").path
    try writeSignal(file, frames: 48_000, channels: 2) { _, _ in 0.5 }
    player.start()
    try player.play(file, id: "s")
    usleep(50_000)
    player.perform { state in
      _ = try? state.engine.set(
        "streams.s.gain", to: 0,
        transaction: Transaction(duration: 0.2, timingFunction: .linear, valueSpace: .decibels(floor: -800)))
    }
    usleep(400_000)
    player.stop("s")
    waitFor(player) { if case .streamEnded = $0 { true } else { false } }
    player.shutdown()
    let samples = try recorded(path)
    let subnormal = samples.filter(Self.isSubnormal).count
    #expect(subnormal == 0, "\(subnormal) subnormal samples recorded")
    // The fade went through: loud, then silent while the stream still played.
    let loud = try #require(samples.firstIndex { $0 > 0.4 })
    #expect(samples[loud...].contains(0))
  }

  /// A decoder thread flushes subnormals too: a file of subnormal samples resampled by libsoxr
  /// (its arithmetic on the decoder thread) comes out as zeros.
  @Test func aDecoderFlushesSubnormalSamples() throws {
    let file = try temporaryDirectory().appendingPathComponent("tiny.wav").path
    // A quarter and an eighth of the smallest normal Float: both subnormal.
    let tiny = Float.leastNormalMagnitude / 4
    try writeSignal(file, frames: 44_100, channels: 2, rate: 44_100) { f, _ in f % 2 == 0 ? tiny : -tiny / 2 }
    let decoder = try StreamDecoder(path: file, outputRate: 48_000, outputChannels: 2, bufferSeconds: 2)
    defer { decoder.cancel() }
    decoder.waitUntilPrefilled(seconds: 0.9)
    var samples = [Float](repeating: 1, count: 48_000 * 2)
    let got = samples.withUnsafeMutableBufferPointer { decoder.read(into: $0.baseAddress!, count: $0.count) }
    #expect(got > 40_000)
    let subnormal = samples[..<got].filter(Self.isSubnormal).count
    #expect(subnormal == 0, "\(subnormal) of \(got) samples subnormal")
  }
}

extension RenderThreadRulesTests {
  /// A decoder that falls behind (its thread stalled until its one-second ring runs dry) makes an
  /// underrun that ramps out over the audio left and back in once the ring has refilled: no step
  /// in the recording larger than the declick ramp allows. The stream holds its place meanwhile:
  /// it resumes where it stopped, behind the timeline by the gap and no more.
  @Test func anUnderrunRampsOutAndBackIn() throws {
    let (player, path) = try player(17)
    let frames = 3 * 48_000
    let file = try temporaryDirectory().appendingPathComponent("slope.wav").path
    // The signal says where in the file it is: 0.2 at the start rising to 0.8 at three seconds.
    func value(_ frame: Int) -> Double { 0.2 + 0.6 * Double(frame) / Double(frames) }
    try writeSignal(file, frames: frames, channels: 2) { f, _ in Float(value(f)) }
    player.start()
    defer { player.shutdown() }
    try player.play(file, id: "s")
    usleep(100_000)
    player.perform { state in state.streams.first?.decoder.stalledForTesting.store(true, ordering: .relaxed) }
    waitFor(player, seconds: 5) { $0 == .underrun(stream: "s") }
    usleep(100_000)
    player.perform { state in state.streams.first?.decoder.stalledForTesting.store(false, ordering: .relaxed) }
    usleep(300_000)
    player.stop("s")
    waitFor(player) { $0 == .streamEnded(id: "s", reason: .stopped) }
    player.shutdown()
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element).map(Double.init)
    let start = try #require(left.firstIndex { $0 != 0 })
    let end = try #require(left.lastIndex { $0 != 0 })
    let step = largestStep(Array(left[start...end]))
    #expect(step <= 0.8 / 480 + 1e-5, "a step of \(step)")
    // The gap: silence in the middle of the stream, then the stream again.
    let gap = try #require(left[start...].firstIndex { $0 == 0 })
    let resumed = try #require(left[gap...].firstIndex { $0 != 0 })
    #expect(resumed - gap > 480, "a gap of \(resumed - gap) frames")
    // After the ramp in, the file's audio from where it stopped.
    let played = gap - start
    let after = left[resumed + 600]
    #expect(abs(after - value(played + 600)) < 3e-5, "\(after), expected \(value(played + 600))")
  }
}

extension RenderThreadRulesTests {
  /// A second seek that arrives while the decoder is still seeking for the first (it has taken
  /// the first request but not yet published where the new audio starts) lands where the second
  /// asked, and plays on from there without a jump. (The first seek's mark, tagged with its
  /// generation, is not paired with the second; the decoder checks for a newer request before it
  /// writes any audio, so this interleaving sounds right even without the tags.)
  @Test func aSecondSeekOvertakingTheFirstLandsWhereItAsked() throws {
    let (player, path) = try player(18)
    let frames = 48_000
    let file = try temporaryDirectory().appendingPathComponent("slope.wav").path
    func value(_ seconds: Double) -> Double { 0.2 + 0.6 * seconds }
    try writeSignal(file, frames: frames, channels: 2) { f, _ in Float(value(Double(f) / Double(frames))) }
    player.start()
    defer { player.shutdown() }
    try player.play(file, id: "s")
    usleep(50_000)
    player.perform { state in state.streams.first?.decoder.holdSeekMarkForTesting.store(true, ordering: .relaxed) }
    player.seek("s", to: 0.1)
    // The first seek ramps out (10 ms) and is taken by the decoder, which holds its mark.
    usleep(100_000)
    player.seek("s", to: 0.6)
    usleep(50_000)
    player.perform { state in state.streams.first?.decoder.holdSeekMarkForTesting.store(false, ordering: .relaxed) }
    waitFor(player) { $0 == .streamEnded(id: "s", reason: .finished) }
    player.shutdown()
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element).map(Double.init)
    let start = try #require(left.firstIndex { $0 != 0 })
    let gap = try #require(left[start...].firstIndex { $0 == 0 })
    let resumed = try #require(left[gap...].firstIndex { $0 != 0 })
    // 10 ms after it resumed: the file at 0.6 s + 10 ms, not at 0.1 s.
    let after = left[resumed + 480]
    #expect(abs(after - value(0.61)) < 0.002, "\(after), expected \(value(0.61))")
    // And it plays on from there to the file's end, without a jump back.
    let end = try #require(left.lastIndex { $0 != 0 })
    #expect(largestStep(Array(left[resumed...end])) <= 0.8 / 480 + 1e-5)
    #expect(abs(Double(end - resumed) - 0.4 * 48_000) < 200, "\(end - resumed) frames after the seek")
  }
}

extension RenderThreadRulesTests {
  /// A thousand commands scheduled out of order, many for the same sample, more than the render
  /// thread takes per block: each runs on its exact sample, soonest first, and commands for the
  /// same sample in the order they were submitted.
  @Test func scheduledCommandsRunInOrderOnTheirSamples() throws {
    let (player, _) = try player(19)
    player.start()
    defer { player.shutdown() }
    usleep(20_000)
    let base = player.currentSample + 24_000
    final class Log: @unchecked Sendable {
      var entries: [(index: Int, sample: Int64, ran: Int64)] = []
    }
    let log = Log()
    log.entries.reserveCapacity(2000)
    var generator = SystemRandomNumberGenerator()
    let count = 1000
    let samples = (0..<count).map { _ in base + Int64.random(in: 0..<60, using: &generator) * 97 }
    for (index, sample) in samples.enumerated() {
      #expect(
        player.perform(at: sample, wake: false) { state in log.entries.append((index, sample, state.engine.now)) })
    }
    let deadline = Date().addingTimeInterval(10)
    while player.currentSample < base + 60 * 97 + 960 && Date() < deadline { usleep(10_000) }
    player.shutdown()
    #expect(log.entries.count == count)
    #expect(log.entries.allSatisfy { $0.sample == $0.ran }, "a command ran off its sample")
    let order = log.entries.map { ($0.sample, $0.index) }
    let sorted = order.sorted { $0.0 < $1.0 || ($0.0 == $1.0 && $0.1 < $1.1) }
    #expect(order.elementsEqual(sorted) { $0 == $1 }, "out of order")
  }
}
