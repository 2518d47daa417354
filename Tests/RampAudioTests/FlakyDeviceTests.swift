import Foundation
import Testing

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

/// The flaky PCMs of these tests, one per test (they run in parallel), in a configuration file
/// appended to `ALSA_CONFIG_PATH` after `AlsaTestConfig` has set it (as `MixerTestConfig` does).
private enum FlakyTestConfig {
  static let devices =
    ["rampd_flaky_data", "rampd_flaky_unplug"] + ["float", "s32", "s24", "s16"].map { "rampd_flaky_\($0)" }

  private static let setup: Result<String, TestSetupError> = {
    _ = AlsaTestConfig.directory
    let dir = "/tmp/rampd-flaky-tests-\(getpid())"
    do {
      try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
      atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-flaky-tests-\(getpid())") }
      _ = try FlakyDevice.pluginPath()
      let config = devices.map {
        FlakyDevice.pcmDefinition(name: $0, file: "\(dir)/\($0).raw", flag: "\(dir)/\($0).unplugged")
      }.joined()
      let path = "\(dir)/asound-flaky-test.conf"
      try config.write(toFile: path, atomically: true, encoding: .utf8)
      AlsaTestConfig.append(configuration: path)
    } catch {
      return .failure(error as? TestSetupError ?? TestSetupError(message: "\(error)"))
    }
    return .success(dir)
  }()

  static func file(_ device: String) throws -> String { "\(try setup.get())/\(device).raw" }
  static func flag(_ device: String) throws -> String { "\(try setup.get())/\(device).unplugged" }

  static func open(
    _ device: String, format: OutputConfiguration.SampleFormat = .float32, rate: Int = 48_000, channels: Int = 2
  ) throws -> AlsaPCMOutput {
    _ = try setup.get()
    return try AlsaPCMOutput(
      OutputConfiguration(device: device, sampleRate: rate, channels: channels, format: format, pacing: .clock))
  }
}

/// Interleaved stereo: a ramp on the left, a sine on the right, starting at frame `from`.
private func signal(frames: Int, from: Int = 0) -> [Float] {
  var samples = [Float](repeating: 0, count: frames * 2)
  for i in 0..<frames {
    let n = from + i
    samples[2 * i] = Float(n % 2_000) / 1_000 - 1
    samples[2 * i + 1] = Float(0.5 * sin(2 * Double.pi * 440 * Double(n) / 48_000))
  }
  return samples
}

private func write(_ output: AlsaPCMOutput, _ samples: [Float], block: Int = 480) throws {
  let channels = output.negotiated.channels
  let frames = samples.count / channels
  try samples.withUnsafeBufferPointer { buffer in
    var done = 0
    while done < frames {
      let count = min(block, frames - done)
      try output.write(buffer.baseAddress! + done * channels, frames: count)
      done += count
    }
  }
}

private func bitsEqual(_ got: [Float], _ expected: [Float]) -> Bool {
  got.count == expected.count && zip(got, expected).allSatisfy { $0.bitPattern == $1.bitPattern }
}

@Suite struct FlakyDeviceTests {
  @Test func playsEveryFrameIntoTheFile() throws {
    let device = "rampd_flaky_data"
    let output = try FlakyTestConfig.open(device)
    #expect(output.negotiated.format == .float32)
    #expect(output.negotiated.rate == 48_000 && output.negotiated.channels == 2)
    #expect(output.negotiated.pacing == .clock)

    let samples = signal(frames: 9_600)  // 0.2 s, in blocks that do not divide the period
    let start = secondsNow()
    try write(output, samples, block: 700)
    output.drain()
    let elapsed = secondsNow() - start
    output.close()

    let got = try FlakyDevice.floatSamples(try FlakyTestConfig.file(device))
    #expect(got.count == samples.count)
    #expect(bitsEqual(got, samples), "the file holds exactly the samples written")
    // The device swallows instantly; the clock pacing keeps real time.
    #expect(elapsed > 0.15, "took \(elapsed) s for 0.2 s of audio")
  }

  @Test(arguments: [
    (OutputConfiguration.SampleFormat.s16, 8_000, 1, 2),
    (.s24, 44_100, 6, 4),
    (.s32, 96_000, 8, 4),
    (.float32, 192_000, 2, 4),
  ])
  func acceptsFormatsRatesAndChannels(format: OutputConfiguration.SampleFormat, rate: Int, channels: Int, bytes: Int)
    throws
  {
    let device = "rampd_flaky_\(format.rawValue)"  // one per case: the cases run in parallel
    let file = try FlakyTestConfig.file(device)
    let before = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
    let output = try FlakyTestConfig.open(device, format: format, rate: rate, channels: channels)
    #expect(output.negotiated.format == format)
    #expect(output.negotiated.rate == rate)
    #expect(output.negotiated.channels == channels)
    let frames = 1_000
    try write(output, [Float](repeating: 0.25, count: frames * channels))
    output.close()
    let after = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
    #expect(after - before == frames * channels * bytes)
  }

  @Test func unpluggedDeviceFailsUntilPluggedBack() throws {
    let device = "rampd_flaky_unplug"
    let file = try FlakyTestConfig.file(device)
    let flag = try FlakyTestConfig.flag(device)
    defer { try? FlakyDevice.setUnplugged(false, flag: flag) }

    let first = signal(frames: 4_800)
    let output = try FlakyTestConfig.open(device)
    try write(output, first)
    #expect(bitsEqual(try FlakyDevice.floatSamples(file), first))

    // Unplugged while playing: the next write fails, naming the device and the reason.
    try FlakyDevice.setUnplugged(true, flag: flag)
    let writeError = #expect(throws: AudioError.self) { try write(output, signal(frames: 480)) }
    #expect(writeError?.code == .device)
    #expect(writeError?.message == "ALSA device '\(device)': write failed: No such device")
    // It stays failed, as a real unplugged card does, and nothing more reaches the file.
    #expect(throws: AudioError.self) { try write(output, signal(frames: 480)) }
    #expect(try FlakyDevice.floatSamples(file).count == first.count)

    // No reopening while it is unplugged.
    let openError = #expect(throws: AudioError.self) { _ = try FlakyTestConfig.open(device) }
    #expect(openError?.code == .device)
    #expect(openError?.message == "ALSA device '\(device)': cannot open for playback: No such device")

    // Plugged back: the dead handle stays dead; a new one plays, appending to the file.
    try FlakyDevice.setUnplugged(false, flag: flag)
    #expect(throws: AudioError.self) { try write(output, signal(frames: 480)) }
    output.drain()  // returns at once on a dead device
    output.close()
    let reopened = try FlakyTestConfig.open(device)
    let second = signal(frames: 2_400, from: 4_800)
    try write(reopened, second)
    reopened.drain()
    reopened.close()
    #expect(bitsEqual(try FlakyDevice.floatSamples(file), first + second))
  }
}

private func secondsNow() -> Double {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
