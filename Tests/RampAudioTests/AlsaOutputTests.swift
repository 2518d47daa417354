import Foundation
import RampSystem
import Synchronization
import Testing

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

/// Real ALSA without a sound card: `file` PCMs over `null` record what we write; `null` alone swallows it.
///
/// alsa-lib reads its configuration on the first `snd_pcm_open` and re-reads it whenever the list of
/// files named by `ALSA_CONFIG_PATH` (or their mtimes) changes, so setting the variable once, before
/// this suite's first open, is enough; no `snd_config_update_free_global()` is needed. Every test
/// calls `AlsaTestConfig.directory` first and uses its own PCM names and files, so they may run in parallel.
enum AlsaTestConfig {
  static let directory: String = {
    let dir = "/tmp/rampd-alsa-tests-\(getpid())"
    try! FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    func file(_ name: String, _ path: String, _ format: String) -> String {
      "pcm.\(name) { type file; slave.pcm null; file \"\(dir)/\(path)\"; format \(format) }\n"
    }
    func plug(_ name: String, _ slave: String, _ format: String) -> String {
      "pcm.\(name) { type plug; slave { pcm \"\(slave)\"; format \(format); rate 48000; channels 2 } }\n"
    }
    let config =
      file("rampd_test_float", "float.raw", "raw")
      + file("rampd_test_s24", "s24.raw", "raw")
      + file("rampd_test_auto_file", "auto.raw", "raw")
      + plug("rampd_test_s16", "rampd_test_s16_file", "S16_LE") + file("rampd_test_s16_file", "s16.wav", "wav")
      + plug("rampd_test_clamp16", "rampd_test_clamp16_file", "S16_LE")
      + file("rampd_test_clamp16_file", "clamp16.wav", "wav")
      + plug("rampd_test_s32", "rampd_test_s32_file", "S32_LE") + file("rampd_test_s32_file", "s32.wav", "wav")
      + plug("rampd_test_auto_plug", "rampd_test_auto_plug_file", "S16_LE")
      + file("rampd_test_auto_plug_file", "autoplug.wav", "wav")
      + "pcm.rampd_test_int_only { type linear; slave { pcm null; format S16_LE } }\n"
      // A chain through a slave definition, an inline PCM and an alias (OutputKindTests).
      + "pcm_slave.rampd_kind_slave { pcm \"rampd_test_int_only\" }\n"
      + "pcm.rampd_kind_chain { type asym; playback.pcm { type plug; slave rampd_kind_slave } }\n"
      + "pcm.rampd_kind_alias \"rampd_kind_chain\"\n"
      + (1...21).map { file("rampd_test_player\($0)", "player\($0).raw", "raw") }.joined()
    let path = "\(dir)/asound-test.conf"
    try! config.write(toFile: path, atomically: true, encoding: .utf8)
    setenv("ALSA_CONFIG_PATH", "/usr/share/alsa/alsa.conf:\(path)", 1)
    atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-alsa-tests-\(getpid())") }
    return dir
  }()

  static func path(_ name: String) -> String { "\(directory)/\(name)" }

  /// Puts the ALSA configuration file `path` on `ALSA_CONFIG_PATH`, after this suite's (once).
  /// One at a time: suites running in parallel each append theirs, and two reading the variable at
  /// once would each set it without the other's file.
  static func append(configuration path: String) {
    _ = directory
    appending.withLock { _ in
      let current = getenv("ALSA_CONFIG_PATH").map { String(cString: $0) } ?? "/usr/share/alsa/alsa.conf"
      if !current.split(separator: ":").contains(Substring(path)) {
        setenv("ALSA_CONFIG_PATH", "\(current):\(path)", 1)
      }
    }
  }

  private static let appending = Mutex<Void>(())
}

private func openOutput(
  _ device: String, format: OutputConfiguration.SampleFormat = .auto, pacing: OutputConfiguration.Pacing = .device
) throws -> AlsaPCMOutput {
  _ = AlsaTestConfig.directory
  return try AlsaPCMOutput(OutputConfiguration(device: device, format: format, pacing: pacing))
}

/// Writes `samples` (interleaved stereo) in blocks of `chunk` frames.
private func writeAll(_ output: AlsaPCMOutput, _ samples: [Float], chunk: Int) throws {
  let frames = samples.count / 2
  try samples.withUnsafeBufferPointer { buffer in
    var done = 0
    while done < frames {
      let count = min(chunk, frames - done)
      try output.write(buffer.baseAddress! + done * 2, frames: count)
      done += count
    }
  }
}

private func readFile(_ path: String) throws -> Data {
  let data = try Data(contentsOf: URL(fileURLWithPath: path))
  try? FileManager.default.removeItem(atPath: path)
  return data
}

private struct Wav {
  var channels: Int
  var rate: Int
  var bits: Int
  var data: Data
}

private func readWav(_ path: String) throws -> Wav {
  let file = try readFile(path)
  func u32(_ at: Int) -> Int { file[at..<at + 4].reversed().reduce(0) { $0 << 8 | Int($1) } }
  func u16(_ at: Int) -> Int { Int(file[at]) | Int(file[at + 1]) << 8 }
  #expect(String(decoding: file[0..<4], as: UTF8.self) == "RIFF")
  #expect(String(decoding: file[8..<12], as: UTF8.self) == "WAVE")
  var wav = Wav(channels: 0, rate: 0, bits: 0, data: Data())
  var at = 12
  while at + 8 <= file.count {
    let id = String(decoding: file[at..<at + 4], as: UTF8.self)
    let size = u32(at + 4)
    if id == "fmt " {
      #expect(u16(at + 8) == 1)  // PCM
      wav.channels = u16(at + 10)
      wav.rate = u32(at + 12)
      wav.bits = u16(at + 22)
    } else if id == "data" {
      #expect(at + 8 + size == file.count, "data chunk size matches the file")
      wav.data = file[(at + 8)..<min(at + 8 + size, file.count)]
      break
    }
    at += 8 + size + (size & 1)
  }
  return wav
}

private func decode<T: FixedWidthInteger>(_ data: Data, as: T.Type) -> [T] {
  data.withUnsafeBytes { raw in
    (0..<raw.count / MemoryLayout<T>.size).map {
      T(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * MemoryLayout<T>.size, as: T.self))
    }
  }
}

/// Interleaved stereo: a ramp on the left, a sine on the right.
private func testSignal(frames: Int, amplitude: Double = 0.9) -> [Float] {
  var samples = [Float]()
  samples.reserveCapacity(frames * 2)
  for i in 0..<frames {
    samples.append(Float(-1 + 2 * Double(i) / Double(frames)))
    samples.append(Float(amplitude * sin(2 * Double.pi * 997 * Double(i) / 48_000)))
  }
  return samples
}

@Suite struct AlsaOutputTests {
  // (a) float, raw file: bit-identical, in order, right count.
  @Test func floatFileIsBitIdentical() throws {
    let output = try openOutput("rampd_test_float", format: .float32)
    #expect(output.negotiated.format == .float32)
    #expect(output.negotiated.rate == 48_000)
    #expect(output.negotiated.channels == 2)
    #expect(output.negotiated.periodFrames == 480)
    #expect(output.negotiated.bufferFrames == 2400)
    #expect(output.negotiated.pacing == .device)

    let ramp = testSignal(frames: 24_007)
    var sine = [Float]()
    for i in 0..<12_345 {
      let x = Float(sin(2 * Double.pi * 440 * Double(i) / 48_000))
      sine += [x, -x]
    }
    try writeAll(output, ramp, chunk: 100_000)  // one call, looped inside in blocks
    try writeAll(output, sine, chunk: 333)  // many calls, not aligned to periods
    output.drain()
    output.close()
    output.close()  // idempotent

    let data = try readFile(AlsaTestConfig.path("float.raw"))
    let expected = ramp + sine
    #expect(data.count == expected.count * 4)
    let got = decode(data, as: UInt32.self)
    #expect(got.count == expected.count)
    let mismatch = got.indices.first { $0 < expected.count && got[$0] != expected[$0].bitPattern }
    #expect(mismatch == nil, "first mismatch at sample \(mismatch ?? -1)")
  }

  // (b) S16 through plug → file (WAV): quantized within rounding + dither, TPDF present.
  @Test func s16HasTPDFDither() throws {
    let output = try openOutput("rampd_test_s16", format: .s16)
    #expect(output.negotiated.format == .s16)
    let frames = 48_000
    var input = testSignal(frames: frames, amplitude: 0.5)
    for i in 0..<4_800 { input[2 * i + 1] = 0 }  // 0.1 s of silence on the right
    try writeAll(output, input, chunk: 1_000)
    output.drain()
    output.close()

    let wav = try readWav(AlsaTestConfig.path("s16.wav"))
    #expect(wav.channels == 2 && wav.rate == 48_000 && wav.bits == 16)
    let got = decode(wav.data, as: Int16.self)
    #expect(got.count == input.count)
    guard got.count == input.count else { return }

    var sum = 0.0
    var sumSquares = 0.0
    var maxError = 0.0
    var differsFromPlainRounding = 0
    for (o, x) in zip(got, input) {
      let exact = Double(x) * 32_768
      let error = Double(o) - exact
      sum += error
      sumSquares += error * error
      maxError = max(maxError, abs(error))
      if Double(o) != exact.rounded() { differsFromPlainRounding += 1 }
    }
    let n = Double(got.count)
    #expect(maxError <= 1.5, "rounding (0.5 LSB) + TPDF (1 LSB)")
    #expect(abs(sum / n) < 0.02, "dither is unbiased")
    // TPDF (variance 1/6) plus rounding of the dithered value (1/12): 0.25 LSB².
    let variance = sumSquares / n - (sum / n) * (sum / n)
    #expect(variance > 0.2 && variance < 0.3, "error variance \(variance) LSB²")
    #expect(differsFromPlainRounding > got.count / 5)
    let silence = (0..<4_800).map { got[2 * $0 + 1] }
    #expect(Set(silence).isSubset(of: [-1, 0, 1]))
    #expect(silence.contains { $0 != 0 }, "digital silence gets dither too")
  }

  @Test func s16ClampsInsteadOfWrapping() throws {
    let output = try openOutput("rampd_test_clamp16", format: .s16)
    let input: [Float] = [1.5, -1.5, 1, -1, .infinity, -.infinity, .nan, 0.999_999, -0.999_999, 1e9, -1e9, 2]
    try writeAll(output, input, chunk: 6)
    output.close()
    let wav = try readWav(AlsaTestConfig.path("clamp16.wav"))
    let got = decode(wav.data, as: Int16.self)
    #expect(Array(got.prefix(6)) == [32_767, -32_768, 32_767, -32_768, 32_767, -32_768])
    guard got.count == input.count else {
      Issue.record("got \(got.count) samples")
      return
    }
    #expect(abs(Int(got[6])) <= 1)  // NaN: silence (plus dither)
    #expect(got[7] >= 32_766)
    #expect(got[8] <= -32_766)
    #expect(Array(got.suffix(3)) == [32_767, -32_768, 32_767])
  }

  // S32 through plug → file (WAV): exact, no dither, clamped.
  @Test func s32IsExactAndClamped() throws {
    let output = try openOutput("rampd_test_s32", format: .s32)
    #expect(output.negotiated.format == .s32)
    var input = [Float]()
    for k in stride(from: -32_768, to: 32_768, by: 1) {
      input += [Float(k) / 32_768, Float(-k) / 65_536]
    }
    input += [1.5, -1.5, 1, -1]
    try writeAll(output, input, chunk: 777)
    output.drain()
    output.close()

    let wav = try readWav(AlsaTestConfig.path("s32.wav"))
    #expect(wav.channels == 2 && wav.rate == 48_000 && wav.bits == 32)
    let got = decode(wav.data, as: Int32.self)
    var expected = [Int32]()
    for k in stride(from: -32_768, to: 32_768, by: 1) {
      expected += [Int32(k) << 16, Int32(-k) << 15]
    }
    expected += [.max, .min, .max, .min]
    #expect(got.count == expected.count)
    let mismatch = got.indices.first { $0 < expected.count && got[$0] != expected[$0] }
    #expect(mismatch == nil, "first mismatch at sample \(mismatch ?? -1)")
  }

  // S24 in a 32-bit container, raw file: sign-extended, within rounding + dither.
  @Test func s24InThirtyTwoBitContainer() throws {
    let output = try openOutput("rampd_test_s24", format: .s24)
    let input = testSignal(frames: 10_000) + [1.5, -1.5]
    try writeAll(output, input, chunk: 4_096)
    output.close()
    let got = decode(try readFile(AlsaTestConfig.path("s24.raw")), as: Int32.self)
    #expect(got.count == input.count)
    guard got.count == input.count else { return }
    #expect(got.allSatisfy { (-8_388_608...8_388_607).contains($0) })
    let maxError = zip(got.dropLast(2), input.dropLast(2)).map { abs(Double($0) - Double($1) * 8_388_608) }.max()!
    #expect(maxError <= 1.5)
    #expect(Array(got.suffix(2)) == [8_388_607, -8_388_608])
  }

  // (c) clock pacing holds writes to wall-clock time; device pacing on null does not.
  @Test func clockPacingOnNull() throws {
    let clock = ContinuousClock()
    let signal = testSignal(frames: 14_400)  // 0.3 s

    let paced = try openOutput("null", format: .float32, pacing: .clock)
    #expect(paced.negotiated.pacing == .clock)
    let start = clock.now
    try writeAll(paced, signal, chunk: 480)
    let writing = clock.now - start
    let ahead = paced.delayFrames
    paced.drain()
    let draining = clock.now - start
    // At most one buffer (50 ms) ahead of the clock: ≥ 0.25 s to write, ≥ 0.3 s once drained.
    #expect(writing >= .milliseconds(230), "\(writing)")
    #expect(writing < .seconds(2), "\(writing)")
    #expect(draining >= .milliseconds(290), "\(draining)")
    #expect(ahead > 0 && ahead <= paced.negotiated.bufferFrames, "delay \(ahead)")

    let unpaced = try openOutput("null", format: .float32, pacing: .device)
    #expect(unpaced.negotiated.pacing == .device)
    let start2 = clock.now
    try writeAll(unpaced, signal, chunk: 480)
    let fast = clock.now - start2
    #expect(fast < .milliseconds(100), "\(fast)")
  }

  /// A clock-paced writer that falls behind the clock has let the (virtual) buffer run dry: an
  /// underrun, as a device would count one. One that keeps up counts none.
  @Test func clockPacingCountsAWriterThatFellBehind() throws {
    let signal = testSignal(frames: 4_800)  // 0.1 s
    let paced = try openOutput("null", format: .float32, pacing: .clock)
    try writeAll(paced, signal, chunk: 480)
    #expect(paced.underruns == 0)
    // Twice the 50 ms buffer without a write: everything written has been played and more.
    usleep(100_000)
    try writeAll(paced, signal, chunk: 480)
    #expect(paced.underruns == 1)
    try writeAll(paced, signal, chunk: 480)
    #expect(paced.underruns == 1, "caught up again, the clock re-anchored")
  }

  @Test func autoChoosesClockForNullChains() throws {
    for device in ["null", "rampd_test_auto_file", "rampd_test_auto_plug"] {
      let output = try openOutput(device, pacing: .auto)
      #expect(output.negotiated.pacing == .clock, "\(device)")
      #expect(output.negotiated.format == .float32, "\(device)")
      output.close()
    }
    #expect(OutputChain(types: ["plug", "hw"]).automaticPacing == .device)
    try? FileManager.default.removeItem(atPath: AlsaTestConfig.path("auto.raw"))
    try? FileManager.default.removeItem(atPath: AlsaTestConfig.path("autoplug.wav"))
  }

  @Test func autoFormatFallsBackToIntegers() throws {
    // The `linear` plugin takes integer formats only.
    let output = try openOutput("rampd_test_int_only", pacing: .auto)
    #expect(output.negotiated.format == .s32)
    #expect(output.negotiated.pacing == .clock)
  }

  // (d) errors.
  @Test func explicitFormatMustBeAccepted() throws {
    let error = #expect(throws: AudioError.self) { try openOutput("rampd_test_int_only", format: .float32) }
    #expect(error?.code == .device)
    #expect(error?.message.contains("rampd_test_int_only") == true, "\(error?.message ?? "")")
    #expect(error?.message.contains("float") == true, "\(error?.message ?? "")")
  }

  @Test func nonexistentDevice() throws {
    let error = #expect(throws: AudioError.self) { try openOutput("rampd_no_such_device") }
    #expect(error?.code == .device)
    #expect(error?.message.contains("rampd_no_such_device") == true, "\(error?.message ?? "")")
    #expect(error?.message.contains("No such file or directory") == true, "snd_strerror text")
  }

  @Test func writeAfterCloseThrows() throws {
    let output = try openOutput("null", format: .s16)
    output.close()
    #expect(!output.isOpen)
    let error = #expect(throws: AudioError.self) { try writeAll(output, [0, 0], chunk: 1) }
    #expect(error?.code == .device)
    #expect(output.delayFrames == 0)
  }

  @Test(arguments: [
    (OutputConfiguration(sampleRate: 7_999), "output.rate:"),
    (OutputConfiguration(sampleRate: 384_001), "output.rate:"),
    (OutputConfiguration(channels: 0), "output.channels:"),
    (OutputConfiguration(channels: 33), "output.channels:"),
    (OutputConfiguration(periodTime: 0.000_5), "output.period:"),
    (OutputConfiguration(periodTime: 1.5, bufferTime: 5), "output.period:"),
    (OutputConfiguration(periodTime: .nan), "output.period:"),
    (OutputConfiguration(periodTime: 0.01, bufferTime: 0.015), "output.buffer:"),
    (OutputConfiguration(periodTime: 0.5, bufferTime: 10.5), "output.buffer:"),
    (OutputConfiguration(device: ""), "output.device:"),
  ])
  func invalidConfiguration(configuration: OutputConfiguration, key: String) throws {
    let error = #expect(throws: AudioError.self) { try configuration.validate() }
    #expect(error?.code == .invalidParameter)
    #expect(error?.message.hasPrefix(key) == true, "\(error?.message ?? "")")
    // init validates before it touches ALSA.
    let initError = #expect(throws: AudioError.self) { try AlsaPCMOutput(configuration) }
    #expect(initError == error)
  }

  @Test func defaultsAreValid() throws {
    try OutputConfiguration().validate()
    try OutputConfiguration(periodTime: 0.001, bufferTime: 0.002).validate()
    try OutputConfiguration(sampleRate: 384_000, channels: 32, periodTime: 1, bufferTime: 10).validate()
  }
}
