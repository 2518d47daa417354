import CAllocationGuard
import CEbur128
import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// `streams.<id>.level.*` and `master.level.*`: what is heard, measured on the render thread and
/// read through published values, as `observe` reads them.
@Suite struct SignalLevelTests {
  /// Keeps every block an offline player renders.
  final class Recorder: BlockSink {
    var samples: [Float] = []
    func write(_ samples: UnsafePointer<Float>, frames: Int) throws(AudioError) {
      self.samples.append(contentsOf: UnsafeBufferPointer(start: samples, count: frames * 2))
    }
  }

  static let rate = 48_000
  /// 1 kHz: 48 samples a cycle, so some fall on the crests and the sample peak is the wave's.
  static func sine(_ frame: Int) -> Float { 0.1 * Float(sin(2 * Double.pi * 1000 * Double(frame) / 48_000)) }

  /// libebur128's momentary loudness (EBUR128_MODE_M) of the last 400 ms of `samples` (stereo).
  static func referenceMomentary(_ samples: [Float]) throws -> Double {
    let state = try #require(ebur128_init(2, UInt(rate), Int32(EBUR128_MODE_M.rawValue)))
    var handle: UnsafeMutablePointer<ebur128_state>? = state
    defer { ebur128_destroy(&handle) }
    let window = Array(samples.suffix(rate * 2 * 4 / 10))
    _ = window.withUnsafeBufferPointer { ebur128_add_frames_float(state, $0.baseAddress, window.count / 2) }
    var loudness = 0.0
    _ = ebur128_loudness_momentary(state, &loudness)
    return loudness
  }

  /// A −20 dBFS sine reads −20 dB peak (± 0.1) and the momentary loudness libebur128 and
  /// ffmpeg's `ebur128` give it (± 0.2 LU), on its stream and on the master; a fade of its gain
  /// to −20 dB shows in the level (falling block after block to −40 dB), not only in the gain.
  /// Blocks of 1000 frames: not a multiple of the meter's 10 ms steps.
  @Test func aSineReadsItsLevelAndAFadeShowsInIt() throws {
    let directory = try temporaryDirectory()
    let path = directory.appendingPathComponent("sine.wav").path
    try writeSignal(path, frames: Self.rate * 4) { frame, _ in Self.sine(frame) }
    let recorder = Recorder()
    let player = try Player(sink: recorder, rate: Self.rate, channels: 2, blockFrames: 1000)
    defer { player.finishOffline() }
    let keys = [
      "streams.tone.level.peak", "streams.tone.level.momentary", "master.level.peak", "master.level.momentary",
    ]
    let published = try keys.map { try player.publish($0) }
    func reading(_ key: String) -> Double { published[keys.firstIndex(of: key)!].latest.value }
    try player.play(path, id: "tone")
    for _ in 0..<48 { try player.renderOffline() }
    // What the meter saw by the last block's start: the blocks before it.
    let heard = Array(recorder.samples.prefix(recorder.samples.count - 2000))
    let reference = try Self.referenceMomentary(heard)
    let ffmpeg = try ffmpegMomentary(path, seconds: 1, in: directory.path)
    #expect(abs(reference - ffmpeg) <= 0.1, "libebur128 \(reference), ffmpeg \(ffmpeg) LUFS")
    for scope in ["streams.tone", "master"] {
      #expect(abs(reading("\(scope).level.peak") - -20) <= 0.1, "\(scope): \(reading("\(scope).level.peak")) dB")
      let momentary = reading("\(scope).level.momentary")
      #expect(abs(momentary - reference) <= 0.2, "\(scope): \(momentary) LUFS, libebur128 \(reference)")
      #expect(abs(momentary - ffmpeg) <= 0.2, "\(scope): \(momentary) LUFS, ffmpeg \(ffmpeg)")
    }

    player.perform { state in
      _ = try? state.engine.set("streams.tone.gain", to: 0.1, transaction: Transaction(duration: 1))
    }
    var peaks: [Double] = []
    var loudness: [Double] = []
    for _ in 0..<96 {
      try player.renderOffline()
      peaks.append(reading("streams.tone.level.peak"))
      loudness.append(reading("master.level.momentary"))
    }
    let rises = zip(peaks, peaks.dropFirst()).filter { $1 > $0 + 1e-9 }
    #expect(rises.isEmpty, "the peak rose during the fade: \(rises)")
    #expect(abs(peaks.last! - -40) <= 0.1, "after the fade: \(peaks.last!) dB")
    #expect(abs(loudness.last! - (reference - 20)) <= 0.2, "after the fade: \(loudness.last!) LUFS")
    // 0.9 s into the fade, the window starts 0.5 s in: at about −5 dB of gain.
    #expect(peaks[42] < -22 && peaks[42] > -38, "during the fade: \(peaks[42]) dB")
    let gain = try #require(player.inspectOffline { state in state.engine.handleIfDefined("streams.tone.gain") })
    var model = 0.0
    player.inspectOffline { state in state.engine.render(gain, start: state.engine.now, count: 1, into: &model) }
    #expect(abs(model - 0.1) < 1e-9, "the gain is the fade's end")
  }

  /// A stream that pauses reads silence once its level's window has passed: the meter is fed the
  /// silence it adds to the mix, not left on its last sound.
  @Test func aPausedStreamFallsToTheFloor() throws {
    let (player, path) = try Self.offlinePlayerAndSine()
    defer { player.finishOffline() }
    let peak = try player.publish("streams.tone.level.peak")
    let momentary = try player.publish("streams.tone.level.momentary")
    try player.play(path, id: "tone")
    for _ in 0..<50 { try player.renderOffline() }
    #expect(abs(peak.latest.value - -20) <= 0.1)
    player.pause("tone")
    for _ in 0..<50 { try player.renderOffline() }
    #expect(peak.latest.value == SignalLevel.floor && momentary.latest.value == SignalLevel.floor)
  }

  /// Nothing is metered while no level is observed; a level observed later starts from silence
  /// (its momentary loudness climbs as the window fills) and reads the stream's level once its
  /// 400 ms have passed.
  @Test func levelsObservedLaterStartFromSilence() throws {
    let (player, path) = try Self.offlinePlayerAndSine()
    defer { player.finishOffline() }
    try player.play(path, id: "tone")
    for _ in 0..<50 { try player.renderOffline() }
    #expect(player.inspectOffline { !$0.metersLevels }, "metering with no level observed")
    let peak = try player.publish("streams.tone.level.peak")
    let momentary = try player.publish("master.level.momentary")
    try player.renderOffline()
    try player.renderOffline()
    #expect(player.inspectOffline { $0.metersLevels })
    // A block in: the crests are there, most of the loudness window is not.
    #expect(abs(peak.latest.value - -20) <= 0.1, "\(peak.latest)")
    #expect(momentary.latest.value < -30, "the loudness of a window not yet full: \(momentary.latest)")
    for _ in 0..<42 { try player.renderOffline() }
    #expect(abs(peak.latest.value - -20) <= 0.1, "\(peak.latest)")
    #expect(abs(momentary.latest.value - -20) <= 0.1, "\(momentary.latest)")
    player.unpublish(peak)
    player.unpublish(momentary)
    try player.renderOffline()
    try player.renderOffline()
    #expect(player.inspectOffline { !$0.metersLevels }, "metering after the last level went")
  }

  /// An offline player in blocks of 480 frames, and a four-second sine file for it to play.
  static func offlinePlayerAndSine(test: String = #function) throws -> (Player, String) {
    let path = try temporaryDirectory(test).appendingPathComponent("sine.wav").path
    try writeSignal(path, frames: Self.rate * 4) { frame, _ in Self.sine(frame) }
    return (try Player(sink: Recorder(), rate: Self.rate, channels: 2, blockFrames: 480), path)
  }

  /// Metering and publishing levels allocate and free nothing on the render thread: two streams
  /// (one at rest, mixed straight from its ring; one under a fade), the master, the levels'
  /// meters looked up again after every block, as after a command.
  @Test func meteringAllocatesAndFreesNothing() throws {
    let directory = try temporaryDirectory()
    let player = try Player(sink: Recorder(), rate: Self.rate, channels: 2, blockFrames: 480)
    defer { player.finishOffline() }
    for name in ["a", "b"] {
      let path = directory.appendingPathComponent("\(name).wav").path
      try writeSignal(path, frames: Self.rate * 4) { frame, _ in Self.sine(frame) }
      try player.play(path, id: name, fadeIn: name == "b" ? 3 : 0, loop: true)
    }
    let keys = [
      "streams.a.level.peak", "streams.a.level.momentary", "streams.b.level.peak", "streams.b.level.momentary",
      "master.level.peak", "master.level.momentary",
    ]
    let published = try keys.map { try player.publish($0) }
    player.renderer.applyPendingCommands()
    let buffers = RenderBuffers(frames: 480, channels: 2)
    defer { buffers.deallocate() }
    for _ in 0..<20 {
      player.renderer.publishValues(due: 0)
      player.renderer.renderBlock(buffers)
    }
    var allocations = 0
    var frees = 0
    for _ in 0..<200 {
      while player.renderer.streamsBehind(frames: 480) { usleep(100) }
      player.renderer.publishedHandlesStale = true
      let allocated = rampd_allocations_on_this_thread()
      let freed = rampd_frees_on_this_thread()
      player.renderer.publishValues(due: 0)
      player.renderer.renderBlock(buffers)
      allocations += rampd_allocations_on_this_thread() - allocated
      frees += rampd_frees_on_this_thread() - freed
    }
    #expect(allocations == 0 && frees == 0, "\(allocations) allocations, \(frees) frees in 200 blocks")
    for value in published {
      #expect(value.latest.value > -30 && value.latest.value < -10, "\(value.keyPath): \(value.latest.value)")
    }
  }
}

/// ffmpeg's `ebur128` momentary loudness of `path` at `seconds` (the "M:" of its line nearest that
/// time).
func ffmpegMomentary(_ path: String, seconds: Double, in directory: String) throws -> Double {
  let ffmpeg = try #require(
    ["/usr/bin/ffmpeg", "/usr/local/bin/ffmpeg"].first { FileManager.default.isExecutableFile(atPath: $0) },
    "ffmpeg is not installed (script/setup installs it)")
  let process = Process()
  process.executableURL = URL(fileURLWithPath: ffmpeg)
  process.arguments = ["-nostats", "-hide_banner", "-i", path, "-af", "ebur128", "-f", "null", "-"]
  process.currentDirectoryURL = URL(fileURLWithPath: directory)
  let text = try process.standardErrorText()
  // Lines such as "[Parsed_ebur128_0 @ 0x...] t: 1        TARGET:-23 LUFS    M: -20.7 S:-120.7 ...".
  // Lines every 100 ms, t the end of the window (0.999979 for 1 s).
  let lines = text.split(separator: "\n").compactMap { line -> (Double, Substring)? in
    guard let t = line.range(of: "t: "), let time = Double(line[t.upperBound...].split(separator: " ").first ?? "")
    else { return nil }
    return (time, line)
  }
  let line = try #require(
    lines.min { abs($0.0 - seconds) < abs($1.0 - seconds) }?.1, "no momentary lines in ffmpeg's output: \(text)")
  let m = try #require(line.range(of: "M:"))
  return try #require(Double(line[m.upperBound...].split(separator: " ").first ?? ""), "\(line)")
}
