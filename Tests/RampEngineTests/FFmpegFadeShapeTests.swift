import Foundation
import Testing

@testable import RampEngine

private let ffmpegPath = "/usr/bin/ffmpeg"

/// Cross-checks every `FadeShape` against the real ffmpeg `afade` filter, sample by sample.
///
/// ffmpeg renders a constant 1.0 signal through `afade`, so each output sample is exactly the
/// gain ffmpeg applied there. Everything stays in double precision: `aevalsrc` generates doubles,
/// `aformat=sample_fmts=dbl` keeps `afade` on its double path (`fade_gain` is computed in double
/// and `s[i] * gain` with s = 1.0 is exact), and the output is raw `pcm_f64le`. So the only
/// possible differences are last-bit differences between libm calls, and we compare with an
/// absolute tolerance of 1e-12: far above double rounding (~1e-16), far below any real formula
/// difference (and well inside the 1e-6 that any float32 stage would have needed).
@Suite(
  "FadeShape against ffmpeg afade",
  .enabled(if: FileManager.default.isExecutableFile(atPath: ffmpegPath), "needs \(ffmpegPath)")
)
struct FFmpegFadeShapeTests {
  static let ffmpeg = ffmpegPath
  static let sampleRate = 48_000
  /// Fade length in samples: d = 0.1 s at 48 kHz. ffmpeg turns d into samples with
  /// av_rescale(100000 µs, 48000, 1e6) = 4800 exactly.
  static let n = 4_800
  static let duration = "0.1"
  /// The source runs a little past the fade so that sample N, the fade's last, is surely there.
  static let sourceDuration = "0.11"
  static let tolerance = 1e-12

  // How ffmpeg 5.1 indexes samples (libavfilter/af_afade.c, confirmed by probing 5.1.9 with
  // curve=tri, which outputs k/4800 exactly): sample k of the stream (with st=0) gets
  // fade_gain(curve, index, N) = g(clamp(index / N, 0, 1)) with index = k for t=in and
  // index = N - k for t=out (start = start_sample + nb_samples - cur_sample, direction -1).
  // So fade-in sample k is g(k/N): sample 0 is g(0) and sample N is the first at g(1), and
  // fade-out sample k is g((N - k)/N) = g(1 - k/N): sample 0 is g(1) and sample N is g(0).
  // There is no half-sample offset, and the fade spans N + 1 samples counting both ends.
  // Only k in 0...N is compared: after the fade, ffmpeg's output depends on its frame
  // boundaries (aevalsrc frames of 1024 samples), not on the curve. A fade-out keeps applying
  // the clamped g(0) up to the end of the frame holding sample N and silences later frames
  // outright, so for `exp`, whose g(0) is 1e-5 rather than 0, the tail is 1e-5 then 0.

  @Test("afade=t=in matches gain(k/N)", arguments: FadeShape.allCases)
  func fadeIn(_ shape: FadeShape) throws {
    let samples = try Self.render(shape, type: "in")
    try #require(samples.count > Self.n, "ffmpeg produced \(samples.count) samples for \(shape)")
    var comparisons: [Comparison] = []
    for k in 0...Self.n {
      let x = Double(k) / Double(Self.n)
      comparisons.append(Comparison(path: "gain(x)", k: k, x: x, ffmpeg: samples[k], ours: shape.gain(x)))
      // The timing function of a rising ramp is the plain shape.
      comparisons.append(
        Comparison(
          path: "rising ramp y", k: k, x: x, ffmpeg: samples[k],
          ours: TimingFunction.fade(shape).forRamp(falling: false).value(at: x)))
    }
    Self.check(shape, "in", comparisons)
  }

  @Test("afade=t=out matches gain(1 - k/N) and a falling ramp's value", arguments: FadeShape.allCases)
  func fadeOut(_ shape: FadeShape) throws {
    let samples = try Self.render(shape, type: "out")
    try #require(samples.count > Self.n, "ffmpeg produced \(samples.count) samples for \(shape)")
    let falling = TimingFunction.fade(shape).forRamp(falling: true)
    var comparisons: [Comparison] = []
    for k in 0...Self.n {
      let x = Double(k) / Double(Self.n)
      // The shape, mirrored in time exactly as ffmpeg indexes it.
      comparisons.append(
        Comparison(
          path: "gain(1 - x)", k: k, x: x, ffmpeg: samples[k],
          ours: shape.gain(Double(Self.n - k) / Double(Self.n))))
      // A 1 → 0 ramp: progress y = 1 − g(1 − x), so the value is 1 − y.
      comparisons.append(
        Comparison(path: "falling ramp 1 - y", k: k, x: x, ffmpeg: samples[k], ours: 1 - falling.value(at: x)))
    }
    Self.check(shape, "out", comparisons)
  }

  struct Comparison {
    var path: String
    var k: Int
    var x: Double
    var ffmpeg: Double
    var ours: Double
    var error: Double { abs(ffmpeg - ours) }
  }

  /// Records one issue per shape and direction, with ffmpeg's value against ours at a few x.
  static func check(_ shape: FadeShape, _ type: String, _ comparisons: [Comparison]) {
    let worst = comparisons.max { $0.error < $1.error }!
    var paths: [String] = []
    for comparison in comparisons where !paths.contains(comparison.path) { paths.append(comparison.path) }
    let maxima = paths.map { path in
      let error = comparisons.filter { $0.path == path }.map(\.error).max()!
      return "\(path) \(error)"
    }
    let failing = comparisons.filter { !($0.error <= tolerance) }  // NaN counts as failing
    guard !failing.isEmpty else { return }
    var probes = Set([0, n / 10, n / 4, n / 2, 3 * n / 4, 9 * n / 10, n - 1, n, worst.k])
    for failure in failing.prefix(3) { probes.insert(failure.k) }
    let table = comparisons.filter { probes.contains($0.k) }.map {
      "  \($0.path) k=\($0.k) x=\($0.x): ffmpeg \($0.ffmpeg), ours \($0.ours), diff \($0.ffmpeg - $0.ours)"
    }
    Issue.record(
      """
      FadeShape.\(shape.rawValue) differs from afade=t=\(type):curve=\(shape.rawValue) at \
      \(failing.count) of \(comparisons.count) comparisons (tolerance \(tolerance)); worst per path: \(maxima.joined(separator: ", ")):
      \(table.joined(separator: "\n"))
      """)
  }

  /// Runs ffmpeg on a constant 1.0 signal and returns the faded samples as doubles.
  static func render(_ shape: FadeShape, type: String) throws -> [Double] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: ffmpeg)
    process.arguments = [
      "-nostdin", "-hide_banner", "-loglevel", "error",
      "-f", "lavfi", "-i", "aevalsrc=1:s=\(sampleRate):d=\(sourceDuration)",
      "-af", "aformat=sample_fmts=dbl,afade=t=\(type):st=0:d=\(duration):curve=\(shape.rawValue)",
      "-f", "f64le", "-c:a", "pcm_f64le", "-",
    ]
    let output = Pipe()
    let errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    try process.run()
    // Drain stdout before waiting: the output (~42 KB) may not fit in the pipe buffer.
    let data = output.fileHandleForReading.readDataToEndOfFile()
    let messages = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
      throw FFmpegFailed(
        status: process.terminationStatus, arguments: process.arguments ?? [],
        message: String(decoding: messages, as: UTF8.self))
    }
    return data.withUnsafeBytes { raw in
      (0..<raw.count / 8).map { i in
        Double(bitPattern: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self)))
      }
    }
  }

  struct FFmpegFailed: Error, CustomStringConvertible {
    var status: Int32
    var arguments: [String]
    var message: String
    var description: String { "ffmpeg \(arguments.joined(separator: " ")) exited \(status): \(message)" }
  }
}
