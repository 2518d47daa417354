import Foundation

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

/// A playback device that behaves like a sound card: `Tests/Fixtures/pcm_clocked.c`, an external
/// ALSA PCM plugin (snd_pcm_ioplug) of type `rampd_clocked`. It consumes its ring in real time by
/// its own clock (`ppm` fast or slow against CLOCK_MONOTONIC), has a hardware pointer, delay,
/// timestamps and rewind, and records every frame it consumes with the time it consumed it: the
/// reference for "heard". Open it with `pacing: .device` (or `.auto`).
///
/// Usage: put `pcmDefinition(name:file:times:ppm:)` in an ALSA configuration file on
/// `ALSA_CONFIG_PATH` and call `pluginPath()` (which builds the plugin, once per process) before
/// opening the PCM; read what it played with `Recording(file:times:)`.
enum ClockedDevice {
  /// Where `pluginPath()` builds the plugin: fixed per process, so definitions can be written first.
  static let libraryPath = "/tmp/rampd-clocked-\(getpid())/libasound_module_pcm_rampd_clocked.so"

  private static let build: Result<String, TestSetupError> = {
    let dir = (libraryPath as NSString).deletingLastPathComponent
    do {
      try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
      atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-clocked-\(getpid())") }
      try CPluginFixture.compile("pcm_clocked.c", to: libraryPath)
    } catch {
      return .failure(error as? TestSetupError ?? TestSetupError(message: "\(error)"))
    }
    return .success(libraryPath)
  }()

  /// Builds the plugin (once per process) and returns its absolute path, `libraryPath`.
  static func pluginPath() throws -> String { try build.get() }

  /// ALSA configuration for a PCM `name` of type `rampd_clocked`, with the `pcm_type` entry that
  /// loads the plugin from `libraryPath`.
  static func pcmDefinition(name: String, file: String, times: String, ppm: Double = 0) -> String {
    "pcm_type.rampd_clocked { lib \"\(libraryPath)\" }\n"
      + "pcm.\(name) { type rampd_clocked; file \"\(file)\"; times \"\(times)\"; ppm \(ppm) }\n"
  }

  /// The clocked PCMs of the tests, one per test (they run in parallel), and each one's clock
  /// error in ppm: defined once, in a configuration file appended to `ALSA_CONFIG_PATH` after
  /// `AlsaTestConfig` has set it.
  static let devices: [String: Double] = [
    "rampd_clocked_on_time": 0, "rampd_clocked_fast": 100, "rampd_clocked_slow": -100,
    // An hour of a 100 ppm error (0.36 s) in three seconds.
    "rampd_clocked_hour_fast": 120_000, "rampd_clocked_hour_slow": -120_000,
    "rampd_clocked_idle": 0, "rampd_clocked_status": 35, "rampd_clocked_device": 0,
    "rampd_clocked_rewind": 0, "rampd_clocked_rewind_query": 0, "rampd_clocked_limiter_rewind": 0,
    "rampd_clocked_limiter_on_time": 0,
    "rampd_clocked_rewind_safety": 0, "rampd_clocked_rewind_safety_limited": 0,
    "rampd_clocked_rewind_timer": 0,
    "rampd_clocked_behind_file": 0, "rampd_clocked_kind": 0,
  ]

  /// Devices that reach a clocked one through another plugin: ALSA's `file` plugin, which cannot
  /// rewind (what it passed on to its file stays there), in front of `rampd_clocked_behind_file`.
  static let chains = [
    "rampd_clocked_no_rewind":
      "type file; slave.pcm \"rampd_clocked_behind_file\"; file \"/dev/null\"; format raw",
    "rampd_clocked_kind_file": "type file; slave.pcm \"rampd_clocked_kind\"; file \"/dev/null\"; format raw",
  ]

  private static let setup: Result<String, TestSetupError> = {
    _ = AlsaTestConfig.directory
    let dir = "/tmp/rampd-clocked-tests-\(getpid())"
    do {
      try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
      atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-clocked-tests-\(getpid())") }
      _ = try pluginPath()
      let config =
        "pcm_type.rampd_clocked { lib \"\(libraryPath)\" }\n"
        + devices.keys.sorted().map {
          "pcm.\($0) { type rampd_clocked; file \"\(dir)/\($0).raw\"; times \"\(dir)/\($0).times\";"
            + " ppm \(devices[$0]!) }\n"
        }.joined() + chains.keys.sorted().map { "pcm.\($0) { \(chains[$0]!) }\n" }.joined()
      let path = "\(dir)/asound-clocked-test.conf"
      try config.write(toFile: path, atomically: true, encoding: .utf8)
      AlsaTestConfig.append(configuration: path)
    } catch {
      return .failure(error as? TestSetupError ?? TestSetupError(message: "\(error)"))
    }
    return .success(dir)
  }()

  /// Defines the devices (once) and returns device `name`'s recording files.
  static func files(_ name: String) throws -> (file: String, times: String) {
    let dir = try setup.get()
    return ("\(dir)/\(name).raw", "\(dir)/\(name).times")
  }

  /// A player on device `name` (float, paced by the device).
  /// `rewind: .on`: it rewinds (the device honours a rewind; `auto` rewinds on sound cards only).
  static func player(
    _ name: String, period: Double = 0.01, buffer: Double = 0.2, rewind: OutputConfiguration.Rewind = .auto,
    limiter: LimiterSettings = LimiterSettings(enabled: false)
  ) throws -> Player {
    _ = try files(name)
    var output = OutputConfiguration(
      device: name, format: .float32, periodTime: period, bufferTime: buffer, pacing: .device)
    output.rewind = rewind
    output.limiter = limiter
    return try Player(output: output)
  }

  /// What device `name` played so far.
  static func recording(_ name: String, channels: Int = 2) throws -> Recording {
    let (file, times) = try files(name)
    return try Recording(file: file, times: times, channels: channels, ppm: devices[name] ?? 0)
  }

  /// What the device played: the frames (interleaved float) and when each was consumed.
  struct Recording {
    let samples: [Float]
    let channels: Int
    /// Runs of frames consumed: first frame, CLOCK_MONOTONIC nanoseconds of that frame, count.
    let runs: [(frame: Int, nanoseconds: Int64, count: Int)]
    /// Frames per nanosecond of the device clock, as recorded.
    let rate: Double

    init(file: String, times: String, channels: Int = 2, nominalRate: Int = 48_000, ppm: Double = 0) throws {
      let data = try Data(contentsOf: URL(fileURLWithPath: file))
      samples = data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
      self.channels = channels
      let log = try Data(contentsOf: URL(fileURLWithPath: times))
      runs = log.withUnsafeBytes { raw in
        let values = Array(raw.bindMemory(to: Int64.self))
        return stride(from: 0, to: values.count - 2, by: 3).map {
          (Int(values[$0]), values[$0 + 1], Int(values[$0 + 2]))
        }
      }
      rate = Double(nominalRate) * (1 + ppm * 1e-6) / 1e9
    }

    var frames: Int { samples.count / channels }

    func sample(_ frame: Int, channel: Int = 0) -> Float { samples[frame * channels + channel] }

    /// When frame `frame` was consumed (heard), in CLOCK_MONOTONIC nanoseconds.
    func nanoseconds(ofFrame frame: Int) -> Int64? {
      var low = 0
      var high = runs.count - 1
      while low <= high {
        let mid = (low + high) / 2
        let run = runs[mid]
        if frame < run.frame {
          high = mid - 1
        } else if frame >= run.frame + run.count {
          low = mid + 1
        } else {
          return run.nanoseconds + Int64((Double(frame - run.frame) / rate).rounded())
        }
      }
      return nil
    }
  }
}
