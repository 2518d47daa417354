import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// A playback device that can be unplugged on demand: `Tests/Fixtures/pcm_flaky.c`, an external ALSA
/// PCM plugin (snd_pcm_ioplug) of type `rampd_flaky`.
///
/// It takes interleaved FLOAT_LE, S32_LE, S24_LE or S16_LE, 1...8 channels, 8000...192000 Hz, appends
/// every frame written to `file` as raw bytes and consumes instantly like `null` (open it with
/// `pacing: .clock`; `.auto` sees no null PCM and picks `.device`). While the file `flag` exists,
/// opening fails with ENODEV and a write fails with ENODEV ("No such device"), leaving that handle
/// DISCONNECTED for good, like an unplugged USB card; once the flag is removed, a new open works.
///
/// Usage: put `pcmDefinition(name:file:flag:)` in an ALSA configuration file on `ALSA_CONFIG_PATH`
/// and call `pluginPath()` (which builds the plugin, once per process) before opening the PCM.
enum FlakyDevice {
  /// Where `pluginPath()` builds the plugin: fixed per process, so definitions can be written first.
  static let libraryPath = "/tmp/rampd-flaky-\(getpid())/libasound_module_pcm_rampd_flaky.so"

  private static let build: Result<String, TestSetupError> = {
    let dir = (libraryPath as NSString).deletingLastPathComponent
    do {
      try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
      atexit { try? FileManager.default.removeItem(atPath: "/tmp/rampd-flaky-\(getpid())") }
      try CPluginFixture.compile("pcm_flaky.c", to: libraryPath)
    } catch {
      return .failure(error as? TestSetupError ?? TestSetupError(message: "\(error)"))
    }
    return .success(libraryPath)
  }()

  /// Builds the plugin (once per process) and returns its absolute path, `libraryPath`.
  static func pluginPath() throws -> String { try build.get() }

  /// ALSA configuration for a PCM `name` of type `rampd_flaky`, with the `pcm_type` entry that loads
  /// the plugin from `libraryPath`. Repeating the `pcm_type` entry for several PCMs is harmless.
  static func pcmDefinition(name: String, file: String, flag: String) -> String {
    "pcm_type.rampd_flaky { lib \"\(libraryPath)\" }\n"
      + "pcm.\(name) { type rampd_flaky; file \"\(file)\"; flag \"\(flag)\" }\n"
  }

  /// "Unplugs" (creates `flag`) or "plugs back" (removes it) a device.
  static func setUnplugged(_ unplugged: Bool, flag: String) throws {
    if unplugged {
      guard FileManager.default.createFile(atPath: flag, contents: nil) else {
        throw TestSetupError(message: "cannot create \(flag)")
      }
    } else if FileManager.default.fileExists(atPath: flag) {
      try FileManager.default.removeItem(atPath: flag)
    }
  }

  /// The float samples in `file` (FLOAT_LE), or none if it does not exist.
  static func floatSamples(_ file: String) throws -> [Float] {
    guard FileManager.default.fileExists(atPath: file) else { return [] }
    let data = try Data(contentsOf: URL(fileURLWithPath: file))
    return data.withUnsafeBytes { raw in
      (0..<raw.count / 4).map {
        Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 4, as: UInt32.self)))
      }
    }
  }
}

/// Builds an ALSA plugin from `Tests/Fixtures` into a shared object with the system C compiler.
/// (The fixtures live outside the test target: SwiftPM refuses C sources in a Swift target.)
enum CPluginFixture {
  static func compile(_ fixture: String, to library: String) throws {
    let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .appendingPathComponent("Fixtures/\(fixture)").path
    let compiler = Process()
    compiler.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    compiler.arguments = ["cc", "-shared", "-fPIC", "-o", library, source, "-lasound"]
    let output = Pipe()
    compiler.standardOutput = output
    compiler.standardError = output
    do {
      try compiler.run()
    } catch {
      throw TestSetupError(message: "cannot run cc: \(error)")
    }
    let diagnostics = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    compiler.waitUntilExit()
    guard compiler.terminationStatus == 0 else {
      throw TestSetupError(message: "cc \(source) failed:\n\(diagnostics)")
    }
  }
}
