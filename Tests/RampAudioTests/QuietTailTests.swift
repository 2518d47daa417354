import Foundation
import RampAudio
import Testing

/// The level-triggered crossfade's detector (`QuietTail`): where a file's quiet tail begins, by
/// 50 ms RMS blocks counted from the start of the window, in output frames.
@Suite struct QuietTailTests {
  /// A mono or stereo file whose every sample is `sample(frame)`.
  static func write(
    _ name: String, frames: Int, rate: Int = 48_000, channels: Int = 2, encoding: SampleEncoding = .float,
    _ sample: (Int) -> Float
  ) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("quiet-\(getpid())-\(name)").path
    let writer = try SoundFileWriter(path: path, sampleRate: rate, channels: channels, encoding: encoding)
    var buffer = [Float](repeating: 0, count: frames * channels)
    for frame in 0..<frames {
      for channel in 0..<channels { buffer[frame * channels + channel] = sample(frame) }
    }
    try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
    return path
  }

  static let trigger = QuietTail.Trigger(threshold: -30, window: 2)

  @Test func theTailBeginsAfterTheLastLoudBlock() throws {
    // 4 s; loud (0.5) until frame 150 100, then 0.01. The window starts at frame 96 000; the
    // fall lies in block 22 ([148 800, 151 200)), which is loud: the tail begins at 151 200.
    let path = try Self.write("fall.wav", frames: 192_000) { $0 < 150_100 ? 0.5 : 0.01 }
    defer { unlink(path) }
    #expect(QuietTail.start(of: path, Self.trigger, outputRate: 48_000) == 151_200)
    // Resampled to 96 kHz: the same instant, in the output's frames.
    #expect(QuietTail.start(of: path, Self.trigger, outputRate: 96_000) == 302_400)
    // A block loud on average though mostly quiet: 100 loud frames of 2 400 at 0.5 are −19.8 dBFS.
    let edge = try Self.write("edge.wav", frames: 192_000) { $0 < 148_900 ? 0.5 : 0.001 }
    defer { unlink(edge) }
    #expect(QuietTail.start(of: edge, Self.trigger, outputRate: 48_000) == 151_200)
    // 5 loud frames of 2 400 are −32.8 dBFS: that block is quiet, the tail begins before it.
    let under = try Self.write("under.wav", frames: 192_000) { $0 < 148_805 ? 0.5 : 0 }
    defer { unlink(under) }
    #expect(QuietTail.start(of: under, Self.trigger, outputRate: 48_000) == 148_800)
  }

  @Test func aQuietWindowIsAllTailAndALoudEndIsNone() throws {
    let quiet = try Self.write("quiet.wav", frames: 192_000, channels: 1) { $0 < 50_000 ? 0.5 : 0.02 }
    defer { unlink(quiet) }
    #expect(QuietTail.start(of: quiet, Self.trigger, outputRate: 48_000) == 96_000, "the window's start")
    let loud = try Self.write("loud.wav", frames: 192_000) { $0 < 191_990 ? 0.01 : 0.9 }
    defer { unlink(loud) }
    #expect(QuietTail.start(of: loud, Self.trigger, outputRate: 48_000) == nil, "its last block is loud")
    // Shorter than the window: looked at whole.
    let short = try Self.write("short.wav", frames: 24_000, encoding: .pcm16) { $0 < 12_345 ? 0.5 : 0 }
    defer { unlink(short) }
    #expect(QuietTail.start(of: short, Self.trigger, outputRate: 48_000) == 14_400)
    #expect(QuietTail.start(of: "/no/such/file.wav", Self.trigger, outputRate: 48_000) == nil)
  }

  /// What the analysis costs where it runs (when an item is opened): printed, not asserted.
  @Test func theAnalysisOfATenSecondWindowIsQuick() throws {
    let frames = 48_000 * 180
    for encoding in [SampleEncoding.pcm16, .float] {
      let path = try Self.write("long-\(encoding).wav", frames: frames, encoding: encoding) { frame in
        frame < frames - 96_000 ? Float(sin(Double(frame) / 20) * 0.5) : 0
      }
      defer { unlink(path) }
      let trigger = QuietTail.Trigger(threshold: -40, window: 10)
      let start = Date()
      let tail = QuietTail.start(of: path, trigger, outputRate: 48_000)
      let elapsed = Date().timeIntervalSince(start)
      print("QuietTail: a 10 s window of a 3 min \(encoding) WAV in \(String(format: "%.1f", elapsed * 1000)) ms")
      #expect(tail == frames - 96_000)
    }
  }
}
