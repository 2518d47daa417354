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

/// The kernels of the mix. (Renders themselves are tested in RampDaemonTests: OfflineShowTests.)
@Suite struct RenderTests {
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
