import Foundation
import RampEngine
import Testing

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

/// A real ALSA control without a sound card: `Tests/Fixtures/ctl_recorder.c`, an external control plugin
/// (snd_ctl_ext) with one playback volume "Master" that logs every value written to it.
///
/// The plugin is compiled once per test process and found through `ctl_type.recorder.lib` (an
/// absolute path) in a configuration file appended to `ALSA_CONFIG_PATH`. `AlsaOutputTests` sets
/// that variable once, lazily, overwriting it, so its setup is forced to run first; after that it
/// never writes the variable again. Every test uses its own control name and log file, so they may
/// run in parallel.
enum MixerTestConfig {
  /// Control name → plugin arguments. Each has its own log, `<directory>/<name>.log`.
  static let controls: [String: String] = [
    "rampd_mix_minmax": "initial 0",
    "rampd_mix_scale": "initial 0; tlv scale",
    "rampd_mix_readback": "initial 0",
    "rampd_mix_skip": "",
    "rampd_mix_linear": "initial 0; tlv none; min 0; max 100",
    "rampd_mix_mute": "initial 0; tlv minmax_mute",
    "rampd_mix_ramp": "initial 0",
    "rampd_mix_ramp_db": "initial 0",
    "rampd_mix_elements": "",
  ]

  private static let setup: Result<String, TestSetupError> = {
    _ = AlsaTestConfig.directory
    let dir = "/tmp/rampd-mixer-tests-\(getpid())"
    do {
      try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    } catch {
      return .failure(TestSetupError(message: "cannot create \(dir): \(error)"))
    }
    atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-mixer-tests-\(getpid())") }

    let library = "\(dir)/libasound_module_ctl_recorder.so"
    do {
      try CPluginFixture.compile("ctl_recorder.c", to: library)
    } catch {
      return .failure(error as? TestSetupError ?? TestSetupError(message: "\(error)"))
    }

    var config = "ctl_type.recorder { lib \"\(library)\" }\n"
    for (name, arguments) in controls.sorted(by: { $0.key < $1.key }) {
      config += "ctl.\(name) { type recorder; log \"\(dir)/\(name).log\"; \(arguments) }\n"
    }
    let path = "\(dir)/asound-mixer-test.conf"
    do {
      try config.write(toFile: path, atomically: true, encoding: .utf8)
    } catch {
      return .failure(TestSetupError(message: "cannot write \(path): \(error)"))
    }
    AlsaTestConfig.append(configuration: path)
    return .success(dir)
  }()

  static func directory() throws -> String { try setup.get() }

  /// Every value written to `control` so far.
  static func log(_ control: String) throws -> [Int] {
    let path = "\(try directory())/\(control).log"
    guard FileManager.default.fileExists(atPath: path) else { return [] }
    return try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
      guard let value = Int(line) else { throw TestSetupError(message: "bad log line '\(line)' in \(path)") }
      return value
    }
  }

  static func binding(_ control: String, name: String = "master", element: String = "Master") throws
    -> AlsaMixerBinding
  {
    _ = try directory()
    return try AlsaMixerBinding(MixerBindingConfiguration(name: name, card: control, element: element))
  }
}

struct TestSetupError: Error, CustomStringConvertible {
  var message: String
  var description: String { message }
}

@Suite struct MixerBindingTests {
  /// dB range -51...0 dB over 0...255 (0.2 dB a step): -6.02 dB is 224.9 steps up, nearest 225.
  @Test(arguments: ["rampd_mix_minmax", "rampd_mix_scale"])
  func setVolumeMapsThroughDecibels(control: String) throws {
    let binding = try MixerTestConfig.binding(control)
    #expect(binding.rawRange == 0...255)
    #expect(binding.decibelRange == -51...0)
    #expect(!binding.minimumIsMute)

    try binding.set(volume: 1.0)
    try binding.set(volume: 0.5)
    try binding.set(volume: 0.0)
    #expect(try MixerTestConfig.log(control) == [255, 225, 0])
    #expect(binding.writes == 3)
    #expect(try binding.currentRawValue() == 0)
  }

  @Test func valuesReadBackThroughAnotherMixer() throws {
    let control = "rampd_mix_readback"
    let binding = try MixerTestConfig.binding(control)
    for (volume, raw) in [(1.0, 255), (0.5, 225), (0.0, 0)] {
      try binding.set(volume: volume)
      #expect(try MixerTestConfig.log(control).last == raw)
      // A second mixer on the same control reads the value from the plugin, not from our cache.
      let reader = try MixerTestConfig.binding(control)
      #expect(try reader.currentRawValue() == raw, "volume \(volume)")
      #expect(try binding.currentRawValue() == raw)
    }
  }

  @Test func unchangedRawValueIsNotWritten() throws {
    let control = "rampd_mix_skip"  // starts at 255
    let binding = try MixerTestConfig.binding(control)
    try binding.set(volume: 1.0)
    try binding.set(volume: 1.2)
    #expect(binding.writes == 0)
    try binding.set(volume: 0.5)
    try binding.set(volume: 0.5)
    try binding.set(volume: 0.501)  // -6.003 dB: still step 225
    #expect(binding.writes == 1)
    #expect(try MixerTestConfig.log(control) == [225])
  }

  @Test func linearMappingWithoutDecibels() throws {
    let control = "rampd_mix_linear"
    let binding = try MixerTestConfig.binding(control)
    #expect(binding.rawRange == 0...100)
    #expect(binding.decibelRange == nil)
    for volume in [1.0, 0.5, 0.333, 0.0] { try binding.set(volume: volume) }
    #expect(try MixerTestConfig.log(control) == [100, 50, 33, 0])
    #expect(binding.rawValue(for: 0.005) == 1)
    #expect(binding.rawValue(for: 0.004) == 0)
  }

  @Test func muteStepOnlyForSilence() throws {
    let control = "rampd_mix_mute"
    let binding = try MixerTestConfig.binding(control)
    #expect(binding.minimumIsMute)
    #expect(binding.decibelRange.map { abs($0.lowerBound - -50.8) < 1e-9 && $0.upperBound == 0 } == true)
    #expect(binding.rawValue(for: 0.002) == 1)  // -54 dB: below the element, above the floor: not mute
    #expect(binding.rawValue(for: 0.0009) == 0)  // -61 dB: below the -60 dB floor: mute
    #expect(binding.rawValue(for: 0.004) == 15)  // -47.96 dB
    try binding.set(volume: 1)
    try binding.set(volume: 0.002)
    try binding.set(volume: 0)
    #expect(try MixerTestConfig.log(control) == [255, 1, 0])
  }

  /// Runs a 0.5 s fade of mixers.master.volume from 1 to 0 on a 48 kHz engine, updating the
  /// element every 480 samples (100 Hz); returns (the log, the sample of each write).
  private func ramp(_ control: String, space: ValueSpace) throws -> (log: [Int], writeSamples: [Int64]) {
    let binding = try MixerTestConfig.binding(control)
    let engine = try AnimationEngine(sampleRate: 48_000)
    try engine.define(binding.configuration.keyPath, value: 1)
    try engine.set(
      binding.configuration.keyPath, to: 0,
      transaction: Transaction(duration: 0.5, timingFunction: .linear, valueSpace: space))
    let interval = binding.sampleInterval(sampleRate: engine.sampleRate)
    #expect(interval == 480)
    var writeSamples: [Int64] = []
    for _ in 0...55 {
      let before = binding.writes
      try binding.update(engine: engine, atSample: engine.now)
      if binding.writes > before { writeSamples.append(engine.now) }
      engine.advance(by: Int(interval))
    }
    let log = try MixerTestConfig.log(control)
    #expect(log.count == binding.writes)
    return (log, writeSamples)
  }

  @Test func amplitudeRampIsWrittenAtControlRate() throws {
    let (log, samples) = try ramp("rampd_mix_ramp", space: .amplitude)
    #expect(log.first == 255)
    #expect(log.last == 0)
    #expect(zip(log, log.dropFirst()).allSatisfy { $0 > $1 }, "monotonic, no repeated value: \(log)")
    #expect((40...51).contains(log.count), "\(log.count) writes")
    #expect(samples.last == 24_000)
  }

  /// In dB space the fade falls 1.2 dB per 10 ms down to the -60 dB floor; the element's steps are
  /// 0.2 dB, so each write is within half a step of the line until the element's -51 dB bottom.
  @Test func decibelRampFallsLinearlyInDecibels() throws {
    let (log, samples) = try ramp("rampd_mix_ramp_db", space: .decibels)
    #expect(log.first == 255)
    #expect(log.last == 0)
    #expect(zip(log, log.dropFirst()).allSatisfy { $0 > $1 }, "\(log)")
    var checked = 0
    for (raw, sample) in zip(log, samples) {
      let expected = -60 * Double(sample) / 24_000
      guard expected > -51 else { continue }
      let recorded = -51 + 0.2 * Double(raw)
      #expect(abs(recorded - expected) <= 0.1 + 1e-9, "at sample \(sample): \(recorded) dB, expected \(expected) dB")
      checked += 1
    }
    #expect(checked == 43)  // 0, -1.2, … -50.4 dB
    // Equal dB steps: 1.2 dB = 6 raw steps per update.
    let falls = zip(log, log.dropFirst()).prefix(42).map { $0 - $1 }
    #expect(falls.allSatisfy { $0 == 6 }, "\(falls)")
  }

  @Test func unknownElementNamesItAndListsTheElements() throws {
    let error = #expect(throws: AudioError.self) {
      try MixerTestConfig.binding("rampd_mix_elements", name: "main", element: "Speaker")
    }
    #expect(error?.code == .invalidParameter)
    let message = error?.message ?? ""
    #expect(message.hasPrefix("mixers.main.element: "))
    #expect(message.contains("'Speaker'"))
    #expect(message.contains("rampd_mix_elements"))
    #expect(message.contains("elements: 'Master'"))
    #expect(try MixerTestConfig.log("rampd_mix_elements").isEmpty)
  }

  @Test func unknownCardIsADeviceError() throws {
    let error = #expect(throws: AudioError.self) {
      try MixerTestConfig.binding("rampd_no_such_card")
    }
    #expect(error?.code == .device)
    #expect(error?.message.hasPrefix("mixers.master.card: ") == true)
    #expect(error?.message.contains("'rampd_no_such_card'") == true)
  }

  @Test(arguments: [
    (MixerBindingConfiguration(name: "", card: "default", element: "Master"), "mixers..name"),
    (MixerBindingConfiguration(name: "a.b", card: "default", element: "Master"), "mixers.a.b.name"),
    (MixerBindingConfiguration(name: "m", card: "", element: "Master"), "mixers.m.card"),
    (MixerBindingConfiguration(name: "m", card: "default", element: ""), "mixers.m.element"),
    (MixerBindingConfiguration(name: "m", card: "default", element: "Master", index: -1), "mixers.m.index"),
    (MixerBindingConfiguration(name: "m", card: "default", element: "Master", controlRate: 0), "mixers.m.rate"),
    (
      MixerBindingConfiguration(name: "m", card: "default", element: "Master", minimumDecibels: 0),
      "mixers.m.minimum-db"
    ),
  ])
  func invalidConfiguration(configuration: MixerBindingConfiguration, key: String) throws {
    let error = #expect(throws: AudioError.self) { try configuration.validate() }
    #expect(error?.code == .invalidParameter)
    #expect(error?.message.hasPrefix("\(key): ") == true, "\(error?.message ?? "")")
    #expect(throws: AudioError.self) { try AlsaMixerBinding(configuration) }
  }

  @Test func keyPathAndDefaults() {
    let configuration = MixerBindingConfiguration(name: "master", card: "hw:0", element: "Master")
    #expect(configuration.keyPath == "mixers.master.volume")
    #expect(configuration.index == 0)
    #expect(configuration.controlRate == 100)
    #expect(configuration.minimumDecibels == -60)
  }
}
