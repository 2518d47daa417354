import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// A fresh directory for one test's files.
func temporaryDirectory(_ name: String = #function) throws -> URL {
  let url = FileManager.default.temporaryDirectory
    .appendingPathComponent("rampd-tests-\(getpid())-\(name.filter(\.isLetter))-\(UInt32.random(in: 0...UInt32.max))")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url
}

/// Writes `frames` frames of `value` (or of `signal(frame, channel)`) to a float WAV.
func writeSignal(
  _ path: String, frames: Int, channels: Int = 2, rate: Int = 48_000, encoding: SampleEncoding = .float,
  signal: (Int, Int) -> Float = { _, _ in 1 }
) throws {
  let writer = try SoundFileWriter(path: path, sampleRate: rate, channels: channels, encoding: encoding)
  var buffer = [Float](repeating: 0, count: frames * channels)
  for f in 0..<frames { for c in 0..<channels { buffer[f * channels + c] = signal(f, c) } }
  try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
  try writer.close()
}

/// Every frame of a file, interleaved.
func readAll(_ path: String) throws -> (samples: [Float], channels: Int, rate: Int) {
  let reader = try SoundFileReader(path: path)
  var samples: [Float] = []
  var chunk = [Float](repeating: 0, count: 4096 * reader.channels)
  while true {
    let got = try chunk.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 4096) }
    if got == 0 { break }
    samples += chunk[0..<(got * reader.channels)]
  }
  return (samples, reader.channels, reader.sampleRate)
}

@Suite struct RenderTests {
  /// A constant 1.0 input makes the output equal the gain curve, sample by sample.
  @Test(arguments: ["linear", "ease-in-out", "default", "cubic-bezier(0.1,1,1,0.2)", "qsin", "exp", "steps(4)"])
  func fadeInOfConstantInputIsTheCurve(_ curveName: String) throws {
    let directory = try temporaryDirectory()
    let input = directory.appendingPathComponent("ones.wav").path
    let output = directory.appendingPathComponent("out.wav").path
    try writeSignal(input, frames: 30_000)
    let curve = try TimingFunction(parsing: curveName)
    _ = try OfflineRenderer.render(
      input: input, output: output, options: RenderOptions(fadeIn: 0.5, curve: curve, encoding: .float))
    let (samples, channels, _) = try readAll(output)
    #expect(samples.count == 60_000)
    var worst = 0.0
    for f in 0..<30_000 {
      let expected = f < 24_000 ? curve.value(at: Double(f) / 24_000) : 1
      for c in 0..<channels { worst = max(worst, abs(Double(samples[f * channels + c]) - expected)) }
    }
    #expect(worst <= 1e-6, "\(curveName): worst \(worst)")
  }

  /// A falling fade shape is ffmpeg's afade=t=out: g(1 − x), ending in exactly the target.
  @Test func fadeOutMirrorsTheShape() throws {
    let directory = try temporaryDirectory()
    let input = directory.appendingPathComponent("ones.wav").path
    let output = directory.appendingPathComponent("out.wav").path
    try writeSignal(input, frames: 48_000, channels: 1)
    _ = try OfflineRenderer.render(
      input: input, output: output, options: RenderOptions(fadeOut: 0.5, curve: .fade(.qsin), encoding: .float))
    let (samples, _, _) = try readAll(output)
    for f in 0..<24_000 { #expect(samples[f] == 1) }
    var worst = 0.0
    for k in 0..<24_000 {
      worst = max(worst, abs(Double(samples[24_000 + k]) - FadeShape.qsin.gain(1 - Double(k) / 24_000)))
    }
    #expect(worst <= 1e-6)
  }

  @Test func scriptChangesLandOnExactSamples() throws {
    let directory = try temporaryDirectory()
    let input = directory.appendingPathComponent("ones.wav").path
    let output = directory.appendingPathComponent("out.wav").path
    try writeSignal(input, frames: 48_000, channels: 1)
    let changes = [
      ScheduledChange(at: 0.25, label: "drop") { try $0.set("master.gain", to: 0.5, transaction: .instant) },
      ScheduledChange(at: 0.5, label: "fade") {
        try $0.set("streams.main.gain", to: 0, transaction: Transaction(duration: 0.25, timingFunction: .linear))
      },
    ]
    _ = try OfflineRenderer.render(
      input: input, output: output, options: RenderOptions(encoding: .float, changes: changes, blockFrames: 1000))
    let (samples, _, _) = try readAll(output)
    #expect(samples[11_999] == 1)
    #expect(samples[12_000] == 0.5)
    #expect(samples[23_999] == 0.5)
    #expect(abs(Double(samples[24_000 + 6_000]) - 0.5 * 0.5) < 1e-6)  // master 0.5 × stream halfway down
    #expect(samples[36_000] == 0)
  }

  @Test func renderingTwiceGivesTheSameBytes() throws {
    let directory = try temporaryDirectory()
    let input = directory.appendingPathComponent("noise.wav").path
    var seed: UInt32 = 12345
    try writeSignal(input, frames: 96_000, encoding: .pcm16) { _, _ in
      seed = seed &* 1_664_525 &+ 1_013_904_223
      return Float(Int32(bitPattern: seed)) / Float(Int32.max) * 0.9
    }
    let changes = [
      ScheduledChange(at: 0.7, label: "duck") {
        try $0.set("master.gain", to: 0.2, transaction: Transaction(duration: 0.3, timingFunction: .easeInEaseOut))
      }
    ]
    var outputs: [Data] = []
    for name in ["a.wav", "b.wav"] {
      let output = directory.appendingPathComponent(name).path
      _ = try OfflineRenderer.render(
        input: input, output: output,
        options: RenderOptions(fadeIn: 0.3, fadeOut: 0.4, curve: .fade(.esin), changes: changes))
      outputs.append(try Data(contentsOf: URL(fileURLWithPath: output)))
    }
    #expect(outputs[0] == outputs[1])
    #expect(outputs[0].count > 96_000 * 4)
  }

  /// Every format this machine's libsndfile writes: rendered, read back, fade-in present.
  @Test func rendersIntoEveryWritableFormat() throws {
    let directory = try temporaryDirectory()
    let input = directory.appendingPathComponent("tone.wav").path
    try writeSignal(input, frames: 48_000, encoding: .pcm24) { f, _ in
      Float(sin(Double(f) * 2 * .pi * 440 / 48_000) * 0.5)
    }
    #expect(SoundFileWriter.writableExtensions.count >= 5)
    for ext in SoundFileWriter.writableExtensions {
      let output = directory.appendingPathComponent("out.\(ext)").path
      let summary = try OfflineRenderer.render(
        input: input, output: output, options: RenderOptions(fadeIn: 0.5, fadeOut: 0.2, encoding: .pcm16))
      #expect(summary.frames == 48_000)
      let (samples, channels, rate) = try readAll(output)
      #expect(channels == 2 && rate == 48_000, "\(ext)")
      #expect(abs(samples.count / 2 - 48_000) < 2_000, "\(ext): \(samples.count / 2) frames")
      let head = samples.prefix(200).map { abs($0) }.max() ?? 1
      let middle = samples[(24_000 * 2)..<(26_000 * 2)].map { abs($0) }.max() ?? 0
      #expect(head < 0.01, "\(ext): fade-in missing (\(head))")
      #expect(middle > 0.4, "\(ext): signal missing (\(middle))")
    }
  }

  @Test func unreadableInputIsNamed() throws {
    let directory = try temporaryDirectory()
    let missing = directory.appendingPathComponent("missing.wav").path
    do {
      _ = try OfflineRenderer.render(
        input: missing, output: directory.appendingPathComponent("o.wav").path, options: RenderOptions())
      Issue.record("rendered a missing file")
    } catch let error as AudioError {
      #expect(error.code == .unreadableFile)
      #expect(error.message.contains(missing))
    }
  }

  @Test func clampSaturatesAndSilencesNaN() {
    var samples: [Float] = [0.5, 1.5, -1.5, .nan, -.infinity, .infinity, -0.25]
    samples.withUnsafeMutableBufferPointer { GainKernel.clamp($0.baseAddress!, count: $0.count) }
    #expect(samples == [0.5, 1, -1, 0, -1, 1, -0.25])
  }

  @Test func accumulateMixesStreamsWithTheirGains() {
    let a: [Float] = [1, 1, 1, 1, 1, 1]
    let b: [Float] = [0.5, -0.5, 0.5, -0.5, 0.5, -0.5]
    let gainA: [Float] = [0, 0.5, 1]
    let gainB: [Float] = [1, 1, 0]
    var out = [Float](repeating: 0, count: 6)
    out.withUnsafeMutableBufferPointer { o in
      GainKernel.accumulate(a, gain: gainA, frames: 3, channels: 2, into: o.baseAddress!)
      GainKernel.accumulate(b, gain: gainB, frames: 3, channels: 2, into: o.baseAddress!)
    }
    #expect(out == [0.5, -0.5, 1, 0, 1, 1])
  }
}
