import ArgumentParser
import Foundation
import Logging
import RampDaemon

/// `rampd`: the daemon. Configuration layers: built-in defaults < `--config` file < `RAMPD_*`
/// environment < flags.
struct Rampd: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "rampd",
    abstract: "Play audio and ramp its gain on command, sample-accurately.",
    discussion: """
      rampd plays files through ALSA and animates gains (master.gain, streams.<id>.gain, \
      mixers.<name>.volume) with Core Animation's model: fades, keyframes, springs, groups, \
      retargeted mid-flight without a click. Clients speak newline-delimited JSON on a Unix \
      socket (see PROTOCOL.md, or use rampctl).

      With no sound card (or when the configured device cannot be opened) rampd plays into a WAV \
      file through ALSA's file plugin, paced in real time, and says where in its log and in \
      `rampctl status`.

      Systemd socket activation is supported: an inherited listening socket (LISTEN_FDS) is used \
      instead of binding one.
      """,
    version: RampdVersion.current)

  @Option(name: .long, help: ArgumentHelp("TOML configuration file.", valueName: "file"))
  var config: String?

  @Option(name: .long, help: ArgumentHelp("Unix socket path (socket.path).", valueName: "path"))
  var socket: String?

  @Option(name: .long, help: ArgumentHelp("ALSA playback device (output.device).", valueName: "pcm"))
  var device: String?

  @Option(
    name: .long,
    help: ArgumentHelp(
      "Log level: trace, debug, info, notice, warning, error, critical (log.level).", valueName: "level"))
  var logLevel: String?

  @Option(
    name: .long,
    help: ArgumentHelp("Where the embedded output writes its WAV file (embedded-output.path).", valueName: "file"))
  var embeddedFile: String?

  @Flag(name: .long, help: "Validate the configuration and exit (status 0 when valid).")
  var checkConfig = false

  @Flag(name: .long, help: "With --check-config: print the effective configuration as TOML.")
  var print = false

  func run() throws {
    let environment = ProcessInfo.processInfo.environment
    var overrides: [String: String] = [:]
    var flags: [String: String] = [:]
    func override(_ key: String, _ value: String?, _ flag: String) {
      guard let value else { return }
      overrides[key] = value
      flags[key] = flag
    }
    override("socket.path", socket, "--socket")
    override("output.device", device, "--device")
    override("log.level", logLevel, "--log-level")
    override("embedded-output.path", embeddedFile, "--embedded-file")
    let configuration: DaemonConfiguration
    do {
      configuration = try DaemonConfiguration.load(
        file: config ?? environment["RAMPD_CONFIG"], environment: environment, overrides: overrides, flags: flags)
    } catch {
      FileHandle.standardError.write(Data("rampd: \(error)\n".utf8))
      throw ExitCode(78)  // EX_CONFIG
    }
    if checkConfig {
      if print { Swift.print(configuration.rendered, terminator: "") } else { Swift.print("configuration OK") }
      return
    }
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = configuration.log.level
      return handler
    }
    let logger = Logger(label: "rampd")
    let daemon: Daemon
    do {
      daemon = try Daemon(configuration: configuration, environment: environment, logger: logger)
      try daemon.start(inheritedSocket: Self.inheritedSocket(environment))
    } catch {
      logger.critical("cannot start: \(error)")
      throw ExitCode(69)  // EX_UNAVAILABLE
    }
    Self.waitForTermination()
    daemon.shutdown()
  }

  /// The first socket systemd passed (LISTEN_PID/LISTEN_FDS, sd_listen_fds(3)), if any.
  static func inheritedSocket(_ environment: [String: String]) -> CInt? {
    guard let pid = environment["LISTEN_PID"].flatMap(Int32.init), pid == getpid(),
      let count = environment["LISTEN_FDS"].flatMap(Int.init), count >= 1
    else { return nil }
    unsetenv("LISTEN_PID")
    unsetenv("LISTEN_FDS")
    unsetenv("LISTEN_FDNAMES")
    return 3
  }

  /// Blocks until SIGTERM or SIGINT.
  static func waitForTermination() {
    let done = DispatchSemaphore(value: 0)
    var sources: [DispatchSourceSignal] = []
    for number in [SIGTERM, SIGINT] {
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      source.setEventHandler { done.signal() }
      source.resume()
      sources.append(source)
    }
    done.wait()
    _ = sources
  }
}

Rampd.main()
