import ArgumentParser
import Dispatch
import FoundationEssentials
import Logging
import RampAudio
import RampCtlCommands
import RampDaemon
import RampEngine
import RampMQTT
import RampOSC
import RampSystem
import RampWeb

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

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

      One rampd per socket and per state file: a rampd started while another listens on its \
      socket (or is starting on it: the lock <socket>.lock), holds its state file (the lock \
      <state.path>.lock) or plays into its embedded output file says so and exits (status 69) \
      before it has opened anything.
      """,
    version: RampdVersion.current)

  @Option(name: .long, help: ArgumentHelp("TOML configuration file.", valueName: "file"))
  var config: String?

  @Option(
    name: .long,
    help: ArgumentHelp("Unix socket path (socket.path; default: $RAMPD_SOCKET, as for rampctl).", valueName: "path"))
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

  @Flag(name: .long, help: "Validate the configuration, report every error in it, and exit (status 0 when valid).")
  var checkConfig = false

  @Flag(name: .long, help: "With --check-config: print the effective configuration as TOML.")
  var print = false

  func run() throws {
    // Blocked before any thread starts (threads inherit the mask), these signals wait, pending,
    // until the signal sources take them: one arriving while rampd starts is not lost.
    var blocked = sigset_t()
    sigemptyset(&blocked)
    for number in SignalHandling.signals { sigaddset(&blocked, number) }
    pthread_sigmask(SIG_BLOCK, &blocked, nil)
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
    let file = config ?? environment["RAMPD_CONFIG"]
    let load = { [overrides, flags] in
      try DaemonConfiguration.load(file: file, environment: environment, overrides: overrides, flags: flags)
    }
    let configuration: DaemonConfiguration
    do {
      configuration = try load()
    } catch {
      // Every error in the configuration, one a line.
      let lines = (error as? ConfigurationError)?.all.map(\.description) ?? ["\(error)"]
      writeText(lines.map { "rampd: \($0)\n" }.joined(), to: 2)
      throw ExitCode(78)  // EX_CONFIG
    }
    if checkConfig {
      if print { Swift.print(configuration.rendered, terminator: "") } else { Swift.print("configuration OK") }
      return
    }
    let level = DaemonLogHandler.SharedLevel(configuration.log.level)
    LoggingSystem.bootstrap { _ in DaemonLogHandler(level: level, environment: environment) }
    let logger = Logger(label: "rampd")
    // alsa-lib's raw lines would come before rampd's own account of what failed (no sound card:
    // eight of them): they go to the log, for debugging.
    AlsaMessages.route { message in logger.debug("alsa-lib: \(message)") }
    let signals = SignalHandling(reload: load, level: level, logger: logger)
    let daemon: Daemon
    do {
      let inherited = Self.inheritedSocket(environment)
      daemon = try Daemon(
        configuration: configuration, environment: environment, logger: logger, inheritedSocket: inherited)
      try daemon.start(inheritedSocket: inherited)
    } catch {
      logger.critical("cannot start: \(error)")
      throw ExitCode(69)  // EX_UNAVAILABLE
    }
    signals.serve(daemon)
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
}

/// SIGHUP reloads the configuration. The first SIGTERM or SIGINT stops gracefully (streams fade
/// out, the output drains, exit 0); a second one exits at once.
final class SignalHandling: @unchecked Sendable {
  private let queue = DispatchQueue(label: "rampd.signals")
  private let stop = DispatchSemaphore(value: 0)
  private var sources: [DispatchSourceSignal] = []
  // On `queue` only.
  private var daemon: Daemon?
  private var stopping = false

  static let signals = [SIGTERM, SIGINT, SIGHUP]

  init(reload: @escaping () throws -> DaemonConfiguration, level: DaemonLogHandler.SharedLevel, logger: Logger) {
    for number in Self.signals {
      let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
      source.setEventHandler { [self] in
        if number == SIGHUP {
          guard let daemon, !stopping else { return }
          daemon.notifier.reloading()
          do {
            let configuration = try reload()
            // A name in [access] that does not resolve refuses the reload like any bad value.
            _ = try AccessPolicy(access: configuration.access, socketGroup: configuration.socket.resolvedGroup())
            daemon.reload(configuration)
            level.set(configuration.log.level)
            daemon.notifier.ready(status: daemon.statusLine)
          } catch {
            logger.error("reload refused; the running configuration stays: \(error)")
            daemon.notifier.ready(status: "reload refused: \(error)")
          }
          return
        }
        if stopping {
          logger.warning("second signal: exiting at once")
          _exit(128 + number)
        }
        stopping = true
        stop.signal()
      }
      source.resume()
      sources.append(source)
    }
  }

  /// Serves until SIGTERM or SIGINT, then stops `daemon` gracefully.
  func serve(_ daemon: Daemon) {
    queue.sync { self.daemon = daemon }
    stop.wait()
    daemon.stopGracefully()
  }
}

// One executable, every tool: run by the name of another (the package's links to rampd), it is
// that tool, as busybox is.
switch CommandLine.arguments.first?.split(separator: "/").last.map(String.init) {
case RampCtl.invokedName: RampCtl.main()
case RampdOSC.invokedName: RampdOSC.main()
case RampdMQTT.invokedName: RampdMQTT.main()
case RampdWeb.invokedName: RampdWeb.main()
default: Rampd.main()
}
