import ArgumentParser
import Foundation
import RampCLI
import RampProtocol

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
    abstract: "Show rampd's output device, streams and uptime.",
    discussion: """
      The output line says which ALSA device rampd plays to, at what rate and format, how it is \
      paced, and how many underruns it had; when no sound card could be opened it names the WAV \
      file the embedded output writes. Then one row per stream: its state, position, loop flag \
      and file.

      Examples:
        rampctl status
        rampctl status --json | jq '.result.streams[].stream'
      """)

  @OptionGroup var connection: ConnectionOptions

  func request() throws -> Request { Request(.status) }

  func summary(of result: JSONValue) -> String { ReplyText.status(result) }
}
