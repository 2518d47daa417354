import ArgumentParser
import FoundationEssentials
import RampCLI
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct PingCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "ping",
    abstract: "Check that rampd answers.",
    discussion: """
      Prints `pong` and the round-trip time. Exit status 0 when rampd answers, 69 when there is \
      no rampd at the socket: a cheap liveness check for scripts.

      Examples:
        rampctl ping
        rampctl ping --socket /run/rampd/rampd.sock || rampd &
      """)

  @OptionGroup var connection: ConnectionOptions

  func request() throws -> Request { Request(.ping) }

  func summary(of result: JSONValue) -> String { "pong" }

  func run() throws {
    do {
      let run = ClientRun(options: connection)
      let daemon = try run.connect()
      let sent = Date()
      let reply = try daemon.call(try request())
      let milliseconds = Date().timeIntervalSince(sent) * 1000
      Output.print(
        connection.json
          ? reply.text
          : "pong from rampd \(daemon.serverVersion) at \(daemon.path) in "
            + HumanUnits.format(gain: milliseconds, decimals: 2) + " ms")
    } catch let failure as ClientFailure {
      throw ClientRun.exit(failure)
    }
  }
}

struct VersionCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "version",
    abstract: "Print the versions of rampd and of its protocol.",
    discussion: """
      Examples:
        rampctl version
        rampctl version --json
        rampctl --version            rampctl's own version, without asking rampd
      """)

  @OptionGroup var connection: ConnectionOptions

  func request() throws -> Request { Request(.version) }

  func summary(of result: JSONValue) -> String {
    let server = result["server"]?.stringValue ?? "rampd"
    let version = result["version"]?.stringValue ?? "?"
    let wire = result["protocol"].map(ReplyText.number) ?? "?"
    return "\(server) \(version), protocol \(wire); rampctl \(RampCtl.version)"
  }
}

struct StatusCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "status",
    abstract: "Show rampd's master gain, output device, streams, duck rules and schedules (also: rampctl alone).",
    discussion: """
      The master gain line gives the gain in amplitude and dB (and the audible value while a ramp \
      moves it). The output line says which ALSA device rampd plays to, at what rate and format, \
      how it is paced, and how many underruns it had; when no sound card could be opened it names \
      the WAV file the embedded output writes. Then one row per stream: its state, gain, \
      measured loudness and trim (a stream played with --loudness), position in the file and the file's duration (a queue stream's: the playing item's), loop \
      flag and file, and each queue stream's queue, the playing item marked >; then the duck \
      rules, as duck-list shows them (what each lowers, its trigger, depth, phase and the level \
      it holds its targets at now); then the saved schedules, soonest first, in local time.

      Examples:
        rampctl status
        rampctl status --json | jq '.result.streams[].stream'
      """)

  @OptionGroup var connection: ConnectionOptions

  /// Set when `rampctl` was run with no subcommand: status, then how to find the others.
  @Flag(name: .customLong("bare-hint"), help: .private)
  var hint = false

  static let hintFlag = "--bare-hint"
  static let hintText = "(rampctl --help lists every command)"

  func request() throws -> Request { Request(.status) }

  func summary(of result: JSONValue) -> String {
    ReplyText.status(result) + (hint ? "\n" + Self.hintText : "")
  }

  func run() throws {
    do {
      try ClientRun(options: connection).perform(self)
    } catch let failure as ClientFailure {
      let exit = ClientRun.exit(failure)
      if hint { Output.error(Self.hintText) }
      throw exit
    }
  }
}
