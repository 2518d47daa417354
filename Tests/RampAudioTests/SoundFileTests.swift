import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// A fresh directory under the system's temporary directory.
private func makeTemporaryDirectory() throws -> String {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent("rampd-soundfile-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url.path
}

private func removeDirectory(_ path: String) {
  try? FileManager.default.removeItem(atPath: path)
}

/// Stereo test signal: left a 440 Hz sine at 0.5, right a 660 Hz sine whose amplitude ramps
/// linearly from 0 to 0.9 (a gain ramp).
private func testSignal(frames: Int, rate: Int) -> [Float] {
  var samples = [Float](repeating: 0, count: frames * 2)
  for f in 0..<frames {
    let t = Double(f) / Double(rate)
    samples[2 * f] = Float(0.5 * sin(2 * .pi * 440 * t))
    samples[2 * f + 1] = Float(0.9 * Double(f) / Double(frames) * sin(2 * .pi * 660 * t))
  }
  return samples
}

private func write(_ samples: [Float], to path: String, rate: Int, channels: Int, encoding: SampleEncoding) throws {
  let writer = try SoundFileWriter(path: path, sampleRate: rate, channels: channels, encoding: encoding)
  // Several blocks, as a renderer would write them.
  let frames = samples.count / channels
  var done = 0
  try samples.withUnsafeBufferPointer { buffer in
    while done < frames {
      let n = min(4000, frames - done)
      try writer.write(buffer.baseAddress! + done * channels, frames: n)
      done += n
    }
  }
  try writer.close()
  try writer.close()  // idempotent
}

private struct Decoded {
  var sampleRate: Int
  var channels: Int
  var declaredFrames: Int64
  var formatName: String
  var encoding: SampleEncoding?
  var samples: [Float]
  var frames: Int { samples.count / channels }
}

private func decodeFile(_ path: String) throws -> Decoded {
  let reader = try SoundFileReader(path: path)
  var samples: [Float] = []
  var block = [Float](repeating: 0, count: 1000 * reader.channels)
  while true {
    let n = try block.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 1000) }
    if n == 0 { break }
    samples.append(contentsOf: block[0..<(n * reader.channels)])
  }
  return Decoded(
    sampleRate: reader.sampleRate, channels: reader.channels, declaredFrames: reader.frames,
    formatName: reader.formatName, encoding: reader.encoding, samples: samples)
}

private func channel(_ samples: [Float], _ c: Int, of channels: Int) -> [Float] {
  stride(from: c, to: samples.count, by: channels).map { samples[$0] }
}

/// Normalised cross-correlation of `a` with `b` delayed by `lag` samples, over their overlap.
private func correlation(_ a: [Float], _ b: [Float], lag: Int) -> Double {
  var ab = 0.0
  var aa = 0.0
  var bb = 0.0
  a.withUnsafeBufferPointer { a in
    b.withUnsafeBufferPointer { b in
      for i in 0..<a.count {
        let j = i + lag
        guard j >= 0, j < b.count else { continue }
        let x = Double(a[i])
        let y = Double(b[j])
        ab += x * y
        aa += x * x
        bb += y * y
      }
    }
  }
  return aa > 0 && bb > 0 ? ab / (aa * bb).squareRoot() : 0
}

private let lossyExtensions: Set<String> = ["ogg", "oga", "opus", "mp3"]

private func validEncodings(for ext: String) -> [SampleEncoding] {
  ext == "flac" ? [.pcm16, .pcm24] : SampleEncoding.allCases
}

struct RoundTripCase: Sendable, CustomTestStringConvertible {
  var ext: String
  var encoding: SampleEncoding
  var testDescription: String { ".\(ext) \(encoding.rawValue)" }
}

// Lossy codecs ignore the encoding, so each is tried once.
private let roundTripCases: [RoundTripCase] = SoundFileWriter.writableExtensions.flatMap { ext in
  (lossyExtensions.contains(ext) ? [.pcm16] : validEncodings(for: ext)).map { RoundTripCase(ext: ext, encoding: $0) }
}

@Suite struct SoundFileTests {
  @Test func writableExtensionsCoverTheCoreFormats() {
    let exts = SoundFileWriter.writableExtensions
    for ext in ["wav", "wave", "aif", "aiff", "flac", "ogg", "oga", "opus", "caf", "w64", "au"] {
      #expect(exts.contains(ext), "libsndfile \(SoundFileWriter.libraryVersion) cannot write .\(ext)")
    }
    #expect(!exts.contains("raw"))
    #expect(SoundFileWriter.libraryVersion.hasPrefix("libsndfile-"))
  }

  @Test(arguments: roundTripCases)
  func roundTrip(_ testCase: RoundTripCase) throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let rate = 48000
    let frames = rate / 2
    let original = testSignal(frames: frames, rate: rate)
    let path = dir + "/signal." + testCase.ext
    try write(original, to: path, rate: rate, channels: 2, encoding: testCase.encoding)

    let decoded = try decodeFile(path)
    #expect(decoded.sampleRate == rate)
    #expect(decoded.channels == 2)
    #expect(!decoded.formatName.isEmpty)

    if lossyExtensions.contains(testCase.ext) {
      // libsndfile compensates the codec delay (Opus pre-skip, Vorbis granule positions, the MP3
      // LAME tag), so the decoded signal is aligned with the original; the length may still differ
      // by some padding, and the samples are only similar. (A best-lag search would be ambiguous:
      // the test tones are periodic.)
      #expect(abs(decoded.frames - frames) <= 1152, "decoded \(decoded.frames) frames of \(frames)")
      for c in 0..<2 {
        let a = channel(original, c, of: 2)
        let b = channel(decoded.samples, c, of: 2)
        // Away from the edges, where codecs ramp in and out.
        let r = correlation(Array(a[2000..<(frames - 2000)]), Array(b[2000..<min(frames - 2000, b.count)]), lag: 0)
        #expect(r > 0.99, "channel \(c): correlation \(r)")
        // RMS error relative to the signal's RMS.
        var err = 0.0
        var ref = 0.0
        for i in 2000..<min(frames - 2000, b.count) {
          err += (Double(a[i]) - Double(b[i])) * (Double(a[i]) - Double(b[i]))
          ref += Double(a[i]) * Double(a[i])
        }
        let relative = (err / ref).squareRoot()
        #expect(relative < 0.15, "channel \(c): relative RMS error \(relative)")
      }
    } else {
      #expect(decoded.frames == frames)
      #expect(decoded.declaredFrames == Int64(frames))
      #expect(decoded.encoding == testCase.encoding || testCase.ext == "flac")
      // One quantisation step, and a half more: libsndfile writes integers scaled by 2^(n−1) − 1
      // and reads them back scaled by 1 / 2^(n−1), so |x| loses up to one more step near full scale.
      let step: Float
      switch testCase.encoding {
      case .float: step = 0
      case .pcm16: step = 1.0 / 32768
      case .pcm24: step = 1.0 / 8_388_608
      // 2^-31 steps are below float32's own resolution near ±0.9 (2^-24 relative).
      case .pcm32: step = 1.0 / 16_777_216
      }
      let tolerance = 1.5 * step
      var worst: Float = 0
      for i in 0..<min(original.count, decoded.samples.count) {
        worst = max(worst, abs(original[i] - decoded.samples[i]))
      }
      #expect(worst <= tolerance, "max error \(worst) > \(tolerance)")
      if testCase.encoding == .float {
        #expect(decoded.samples == original)
      }
    }
  }

  @Test(arguments: [SampleEncoding.pcm16, .pcm24, .pcm32])
  func integerEncodingsClipInsteadOfWrapping(_ encoding: SampleEncoding) throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let path = dir + "/clip.wav"
    try write([1.5, -1.5, 1.0, -1.0, 3.0, -7.0], to: path, rate: 48000, channels: 2, encoding: encoding)
    let decoded = try decodeFile(path)
    #expect(decoded.samples.count == 6)
    for (i, value) in decoded.samples.enumerated() {
      let expected: Float = i % 2 == 0 ? 1 : -1
      #expect(abs(value - expected) < 1e-4, "sample \(i) = \(value)")
    }
  }

  @Test func floatFilesKeepValuesBeyondFullScale() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let path = dir + "/hot.wav"
    try write([1.5, -2.25], to: path, rate: 44100, channels: 1, encoding: .float)
    #expect(try decodeFile(path).samples == [1.5, -2.25])
  }

  @Test func readerReportsFormatAndSeeks() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let path = dir + "/seek.wav"
    let original = testSignal(frames: 10000, rate: 44100)
    try write(original, to: path, rate: 44100, channels: 2, encoding: .float)
    let reader = try SoundFileReader(path: path)
    #expect(reader.path == path)
    #expect(reader.sampleRate == 44100)
    #expect(reader.frames == 10000)
    #expect(reader.formatName.contains("WAV"))
    #expect(reader.encoding == .float)
    #expect(reader.seekable)
    try reader.seek(toFrame: 1234)
    var buffer = [Float](repeating: 0, count: 20)
    let n = try buffer.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 10) }
    #expect(n == 10)
    #expect(buffer == Array(original[2468..<2488]))
    try reader.seek(toFrame: 9995)
    let tail = try buffer.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 10) }
    #expect(tail == 5)
    #expect(try buffer.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 10) } == 0)
    #expect(throws: AudioError.self) { try reader.seek(toFrame: -1) }
  }

  @Test func writeAfterCloseThrows() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let writer = try SoundFileWriter(path: dir + "/closed.wav", sampleRate: 48000, channels: 1, encoding: .pcm16)
    try writer.close()
    let samples: [Float] = [0, 0]
    let error = #expect(throws: AudioError.self) {
      try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 2) }
    }
    #expect(error?.code == .unwritableFile)
  }

  // MARK: - Errors

  @Test func missingFileNamesTheFile() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let path = dir + "/no-such-file.wav"
    let error = #expect(throws: AudioError.self) { try SoundFileReader(path: path) }
    #expect(error?.code == .unreadableFile)
    #expect(error?.message.contains("'\(path)'") == true)
    #expect(error?.message.contains("No such file") == true, "\(error?.message ?? "")")
  }

  @Test func directoryIsRefused() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let error = #expect(throws: AudioError.self) { try SoundFileReader(path: dir) }
    #expect(error?.code == .unreadableFile)
    #expect(error?.message.contains("'\(dir)'") == true)
    #expect(error?.message.contains("directory") == true)
  }

  /// A FIFO is judged on the open descriptor, opened without waiting for a writer: refused at
  /// once instead of blocking the caller.
  @Test func fifoAndDeviceAreRefusedWithoutBlocking() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let fifo = dir + "/pipe.wav"
    #expect(mkfifo(fifo, 0o600) == 0)
    for path in [fifo, "/dev/zero", "/dev/null"] {
      let started = Date()
      let error = #expect(throws: AudioError.self) { try SoundFileReader(path: path) }
      #expect(error?.message.contains("not a regular file") == true, "\(path): \(error?.message ?? "")")
      #expect(Date().timeIntervalSince(started) < 1)
    }
  }

  /// `openedPath` is what the descriptor is, links resolved: what a policy on places checks.
  @Test func openedPathResolvesLinks() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    try FileManager.default.createDirectory(atPath: dir + "/real", withIntermediateDirectories: false)
    try write([0, 0.5], to: dir + "/real/a.wav", rate: 8000, channels: 1, encoding: .float)
    #expect(symlink(dir + "/real", dir + "/linked") == 0)
    let reader = try SoundFileReader(path: dir + "/linked/./a.wav")
    let canonical = try #require(realpath(dir + "/real/a.wav", nil))
    defer { free(canonical) }
    #expect(reader.openedPath == String(cString: canonical))
    #expect(reader.path == dir + "/linked/./a.wav")
  }

  @Test func textFileIsNotAudio() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let path = dir + "/notes.wav"
    try "These are my notes, not a WAV file.\nSecond line.\n".write(toFile: path, atomically: true, encoding: .utf8)
    let error = #expect(throws: AudioError.self) { try SoundFileReader(path: path) }
    #expect(error?.code == .unreadableFile)
    #expect(error?.message.hasPrefix("cannot read '\(path)': ") == true)
    #expect(error?.message.lowercased().contains("format") == true, "\(error?.message ?? "")")
  }

  @Test func corruptHeaderIsRefused() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    var generator = SplitMix(seed: 7)
    // "RIFF", a size, then garbage where "WAVE" and the chunks should be.
    var bytes: [UInt8] = Array("RIFF".utf8) + [0x24, 0x08, 0x00, 0x00]
    bytes += (0..<2048).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    let garbage = dir + "/garbage.wav"
    try Data(bytes).write(to: URL(fileURLWithPath: garbage))
    let error = #expect(throws: AudioError.self) { try SoundFileReader(path: garbage) }
    #expect(error?.code == .unreadableFile)
    #expect(error?.message.hasPrefix("cannot read '\(garbage)': ") == true)

    // "RIFF….WAVE" followed by a garbage "fmt " chunk.
    var wave: [UInt8] = Array("RIFF".utf8) + [0x24, 0x08, 0x00, 0x00] + Array("WAVEfmt ".utf8)
    wave += [0x10, 0x00, 0x00, 0x00] + [0xFF, 0xFF, 0x00, 0x00] + [UInt8](repeating: 0xEE, count: 12)
    wave += Array("data".utf8) + [0x00, 0x08, 0x00, 0x00] + [UInt8](repeating: 0, count: 2048)
    let badFormat = dir + "/bad-fmt.wav"
    try Data(wave).write(to: URL(fileURLWithPath: badFormat))
    let error2 = #expect(throws: AudioError.self) { try SoundFileReader(path: badFormat) }
    #expect(error2?.code == .unreadableFile)
    #expect(error2?.message.hasPrefix("cannot read '\(badFormat)': ") == true)
  }

  @Test func truncatedWavPlaysWhatIsThere() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let path = dir + "/truncated.wav"
    let frames = 24000
    let original = testSignal(frames: frames, rate: 48000)
    try write(original, to: path, rate: 48000, channels: 2, encoding: .pcm16)
    let full = try Data(contentsOf: URL(fileURLWithPath: path))
    // Keep the header (which still claims 24000 frames) and a bit over 10000 frames of data,
    // ending in the middle of a frame.
    let kept = full.count - frames * 4 + 10000 * 4 + 3
    try full.prefix(kept).write(to: URL(fileURLWithPath: path))

    let decoded = try decodeFile(path)
    #expect(decoded.frames >= 10000 && decoded.frames <= 10001, "\(decoded.frames) frames")
    for i in 0..<(10000 * 2) {
      #expect(abs(decoded.samples[i] - original[i]) <= 1.0 / 32768)
    }
  }

  @Test func unknownOutputExtension() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    for name in ["out.xyz", "out", "out.raw"] {
      let path = dir + "/" + name
      let error = #expect(throws: AudioError.self) {
        try SoundFileWriter(path: path, sampleRate: 48000, channels: 2, encoding: .pcm16)
      }
      #expect(error?.code == .unwritableFile)
      #expect(error?.message.contains("'\(path)'") == true)
      #expect(error?.message.contains(".wav") == true && error?.message.contains(".flac") == true)
      #expect(!FileManager.default.fileExists(atPath: path))
    }
  }

  @Test(arguments: [SampleEncoding.float, .pcm32])
  func flacRefusesFloatAndPcm32(_ encoding: SampleEncoding) throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let error = #expect(throws: AudioError.self) {
      try SoundFileWriter(path: dir + "/out.flac", sampleRate: 48000, channels: 2, encoding: encoding)
    }
    #expect(error?.code == .invalidParameter)
    #expect(error?.message.contains("FLAC") == true)
    #expect(error?.message.contains("'\(encoding.rawValue)'") == true)
  }

  @Test func opusRefuses44100() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let error = #expect(throws: AudioError.self) {
      try SoundFileWriter(path: dir + "/out.opus", sampleRate: 44100, channels: 2, encoding: .float)
    }
    #expect(error?.code == .invalidParameter)
    #expect(error?.message.contains("44100") == true)
    #expect(error?.message.contains("48000") == true)
  }

  @Test func uppercaseExtensionAndBadParameters() throws {
    let dir = try makeTemporaryDirectory()
    defer { removeDirectory(dir) }
    let samples: [Float] = [0.25, -0.25]
    try write(samples, to: dir + "/UPPER.WAV", rate: 8000, channels: 1, encoding: .float)
    #expect(try decodeFile(dir + "/UPPER.WAV").samples == samples)
    #expect(throws: AudioError.self) {
      try SoundFileWriter(path: dir + "/a.wav", sampleRate: 0, channels: 2, encoding: .pcm16)
    }
    #expect(throws: AudioError.self) {
      try SoundFileWriter(path: dir + "/a.wav", sampleRate: 48000, channels: 0, encoding: .pcm16)
    }
    let error = #expect(throws: AudioError.self) {
      try SoundFileWriter(path: dir + "/missing-dir/a.wav", sampleRate: 48000, channels: 2, encoding: .pcm16)
    }
    #expect(error?.code == .unwritableFile)
    #expect(error?.message.contains("missing-dir/a.wav") == true)
  }
}
