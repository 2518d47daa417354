import Foundation
import RampAudio
import RampDaemon
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// `rampctl render --loudness`: the whole render measured, then written with one constant gain
/// that brings it to the target under the true-peak ceiling.
@Suite struct RenderLoudnessTests {
  /// Noise with a slow swell (so the render has dynamics a constant gain must keep), from a
  /// fixed seed: the same file every run.
  static func noise(_ bench: ShowBench, _ name: String, seconds: Double, level: Float) throws -> String {
    var random = SplitMix(seed: 28)
    let frames = Int(seconds * 48_000)
    return try bench.file(name, frames: frames, channels: 2) { frame, _ in
      let swell = 0.6 + 0.4 * Float(sin(2 * Double.pi * Double(frame) / 48_000 / 3))
      return level * swell * (Float(random.unit()) * 2 - 1)
    }
  }

  /// A show of two streams, one fading, rendered plain and at `-16LUFS`: the output measures
  /// −16 ± 0.1 LUFS by libebur128 and by ffmpeg's `ebur128`, and is the plain render times the
  /// gain reported, sample for sample.
  @Test func theOutputIsThePlainRenderTimesOneGainAtTheTarget() throws {
    let bench = try ShowBench()
    let bed = try Self.noise(bench, "bed.wav", seconds: 8, level: 0.05)
    try bench.file("tone.wav", frames: 48_000 * 3, channels: 2) { frame, _ in
      0.1 * Float(sin(2 * Double.pi * 440 * Double(frame) / 48_000))
    }
    let show = """
      {"at": 2, "cmd": "play", "path": "\(bench.path("tone.wav"))", "stream": "tone"}
      {"at": 2, "cmd": "fade", "key": "streams.main.gain", "to": "-12dB", "duration": "1s"}
      """
    let plain = try bench.render(input: bed, show, output: "plain.wav")
    #expect(plain.summary.normalisation == nil)
    let loud = try bench.render(input: bed, show, output: "loud.wav") { $0.loudness = -16 }
    let trim = try #require(loud.summary.normalisation)
    #expect(!trim.limited)
    #expect(trim.decibels > 3, "the show is quiet: \(trim)")
    let before = try Loudness.measure(path: bench.path("plain.wav"))
    #expect(abs(trim.loudness.integrated - before.integrated) < 1e-9, "the first pass measures the plain render")
    #expect(loud.samples.count == plain.samples.count && loud.summary.frames == plain.summary.frames)
    let factor = trim.factor
    let differing = plain.samples.indices.filter { loud.samples[$0] != plain.samples[$0] * factor }
    #expect(
      differing.count == 0,
      "\(differing.count) samples are not the plain render × \(factor), first \(differing.first ?? -1)")
    let after = try Loudness.measure(path: bench.path("loud.wav"))
    #expect(abs(after.integrated - -16) <= 0.1, "libebur128: \(after.integrated) LUFS")
    let ffmpeg = try LoudnessTests.ffmpeg(bench.path("loud.wav"), in: bench.directory)
    #expect(abs(ffmpeg.integrated - -16) <= 0.1, "ffmpeg: \(ffmpeg.integrated) LUFS")
  }

  /// A target the render cannot reach under the ceiling (`playback.loudness-ceiling` of the
  /// configuration) stops at the ceiling: the output's true peak is the ceiling, its loudness
  /// under the target, and the summary says it was limited.
  @Test(arguments: [-1.0, -6.0])
  func aTooLoudTargetIsHeldUnderTheCeiling(_ ceiling: Double) throws {
    let bench = try ShowBench()
    let input = try Self.noise(bench, "in.wav", seconds: 5, level: 0.02)
    let loud = try bench.render(input: input) {
      $0.loudness = -5
      $0.configuration.playback.ceiling = ceiling
    }
    let trim = try #require(loud.summary.normalisation)
    #expect(trim.limited && trim.target.ceiling == ceiling, "\(trim)")
    let after = try Loudness.measure(path: bench.path("out.wav"))
    #expect(abs(after.truePeak - ceiling) <= 0.01, "true peak \(after.truePeak) dBTP, ceiling \(ceiling)")
    #expect(after.integrated < -5 - 1, "\(after.integrated) LUFS")
    #expect(abs(after.integrated - trim.result) <= 0.1, "\(after.integrated) LUFS, said \(trim.result)")
  }

  /// A silent render has no integrated loudness: it is written at its own level, and rampctl says
  /// so (and, for a render it normalised, the gain it applied).
  @Test func aSilentRenderIsLeftAtItsLevelAndSaysSo() throws {
    let bench = try ShowBench()
    try bench.file("quiet.wav", frames: 48_000, channels: 2) { frame, _ in frame % 2 == 0 ? 1e-6 : -1e-6 }
    let silent = try bench.render(input: bench.path("quiet.wav")) { $0.loudness = -16 }
    let trim = try #require(silent.summary.normalisation)
    #expect(trim.decibels == 0 && trim.loudness.unmeasured == .silent, "\(trim)")
    #expect(silent.samples.allSatisfy { abs($0) == Float(1e-6) }, "the render kept its level")

    let run = try runProcess(
      Executables.rampctl, ["render", bench.path("quiet.wav"), bench.path("cli.wav"), "--loudness", "-16LUFS"])
    #expect(run.status == 0, "\(run)")
    #expect(run.stderr.contains("no integrated loudness") && run.stderr.contains("gain +0.00 dB"), "\(run)")

    let input = try Self.noise(bench, "in.wav", seconds: 3, level: 0.05)
    let normalised = try runProcess(
      Executables.rampctl, ["render", input, bench.path("cli.wav"), "--loudness", "-20LUFS"])
    #expect(normalised.status == 0, "\(normalised)")
    let trimmed = try bench.render(input: input, output: "api.wav") { $0.loudness = -20 }
    let gain = String(format: "gain %+.2f dB", try #require(trimmed.summary.normalisation).decibels)
    #expect(normalised.stderr.contains(gain) && normalised.stderr.contains("→ -20 LUFS"), "\(normalised)")
  }

  /// `--loudness` is read by `play --loudness`'s parser: what it refuses, render refuses with the
  /// same words, naming the option, and the output is not written.
  @Test(arguments: ["5", "-16", "+3LUFS", "-4LUFS", "-61LUFS", "loud", "nanLUFS", ""])
  func badTargetsAreRefusedNamingTheOption(_ value: String) throws {
    let bench = try ShowBench()
    try bench.file("in.wav", frames: 4_800, channels: 2) { _, _ in 0.5 }
    let render = try runProcess(
      Executables.rampctl, ["render", bench.path("in.wav"), bench.path("out.wav"), "--loudness", value])
    let play = try runProcess(Executables.rampctl, ["play", bench.path("in.wav"), "--loudness", value])
    #expect(render.status == 64, "\(render)")
    #expect(render.stderr.contains("--loudness:"), "\(render)")
    let reason = { (stderr: String) in stderr.split(separator: "\n").first { $0.contains("--loudness") } }
    #expect(reason(render.stderr) != nil && reason(render.stderr) == reason(play.stderr), "\(render)\n\(play)")
    #expect(!FileManager.default.fileExists(atPath: bench.path("out.wav")))
  }
}
