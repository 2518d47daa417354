import ArgumentParser
import FoundationEssentials
import RampCLI
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A subcommand that sends one request to rampd and prints its reply.
///
/// `request()` is the whole mapping from arguments to the wire (pure, so unit tests check it
/// without a daemon); `validate()` runs it, so bad units are usage errors (exit 64) before any
/// connection is made.
protocol DaemonCommand: ParsableCommand, TalksToRampd {
  var connection: ConnectionOptions { get }
  func request() throws -> Request
  /// The reply for people (`--json` prints the line itself instead).
  func summary(of result: JSONValue) -> String
  /// What `--wait` waits for once the reply is in; nil when not asked to wait.
  func rampWait(for result: JSONValue) -> RampWait?
  /// True when asked to wait for the streams the command stops as well (so rampctl subscribes
  /// to `stream-ended` before sending it, and cannot miss the event).
  var waitsForStreamsToEnd: Bool { get }
  /// `--at` as typed, for the commands that take it.
  var atText: String? { get }
  /// What the user typed for each wire field that holds a value (`"value": "+3dB"`), so that a
  /// refusal echoes it and can point at the likely mistake (`RefusalText`).
  var typed: [String: String] { get }
}

extension DaemonCommand {
  func rampWait(for result: JSONValue) -> RampWait? { nil }
  var waitsForStreamsToEnd: Bool { false }
  var atText: String? { nil }
  var typed: [String: String] { [:] }

  mutating func validate() throws { _ = try request() }

  func run() throws {
    do {
      try ClientRun(options: connection).perform(self)
    } catch let failure as ClientFailure {
      throw ClientRun.exit(failure)
    }
  }
}

/// What `--wait` watches after a ramping command.
struct RampWait {
  init(
    animations: [UInt64], key: String? = nil, timeout: Double? = nil, observe: String?, duration: Double?,
    streams: [String] = []
  ) {
    self.animations = animations
    self.key = key
    self.timeout = timeout
    self.observe = observe
    self.duration = duration
    self.streams = streams
  }

  var animations: [UInt64]
  /// Wait for every animation on this key path instead (`rampctl wait --key`).
  var key: String?
  /// Seconds rampd waits before it replies `timeout`.
  var timeout: Double?
  /// Key path observed for the level on the progress line.
  var observe: String?
  /// The ramp's expected length in seconds, when known.
  var duration: Double?
  /// Streams whose `stream-ended` must arrive too.
  var streams: [String] = []
}

/// One run of a `DaemonCommand`: connect, send, print, and wait when asked.
struct ClientRun {
  let options: ConnectionOptions

  /// Seconds a request without `at` may take to be answered (even `play`, which opens the file
  /// first, answers in well under a second); past it rampctl reports a timeout (exit 75).
  static let replyTimeout = 30.0

  /// Connects; with `--json`, every line in which rampd refuses something goes to standard
  /// output as it came, so a script reads errors where it reads replies.
  func connect() throws(ClientFailure) -> DaemonConnection {
    let json = options.json
    let connection = try DaemonConnection(path: options.socketPath, onRefusal: { if json { Output.print($0) } })
    connection.isInterrupted = { Interruption.happened }
    return connection
  }

  func perform(_ command: some DaemonCommand) throws {
    let request = try command.request()
    let json = options.json
    if let at = command.atText, request.at == nil, request.repeats == nil, !json {
      Output.print("--at \(at) has passed: applied at once")
    }
    let connection = try connect()
    var ended: [String] = []
    let collectEnds = command.waitsForStreamsToEnd
    if collectEnds {
      _ = try connection.call(Request(.subscribe(events: [.streamEnded])))
    }
    let id = try connection.send(request)
    if !json, let due = Self.due(of: request), request.ack == .applied {
      Output.print("scheduled: takes effect at \(HumanUnits.format(localTime: due)); waiting")
    }
    let reply: (text: String, result: JSONValue)
    do throws(ClientFailure) {
      reply = try connection.reply(to: id, deadline: Self.deadline(for: request)) { other throws(ClientFailure) in
        if case .event(.streamEnded(let stream, _, _)) = other.line { ended.append(stream) }
      }
    } catch {
      throw Self.explained(error, typed: command.typed)
    }
    if !json, let schedule = reply.result["scheduled"]?.numberValue {
      let due = reply.result["due"]?.stringValue.flatMap(RFC3339.parse).map { HumanUnits.format(localTime: $0) }
      Output.print("scheduled (#\(ReplyText.number(.number(schedule)))): takes effect at \(due ?? "?")")
      return
    }
    Output.print(json ? reply.text : command.summary(of: reply.result))
    guard request.ack == .applied, var wait = command.rampWait(for: reply.result) else { return }
    if !collectEnds { wait.streams = [] }
    try RampWaiter(connection: connection, json: json).wait(for: wait, alreadyEnded: ended)
  }

  /// A refusal retold with what the user typed (`RefusalText`); any other failure as it is.
  static func explained(_ failure: ClientFailure, typed: [String: String]) -> ClientFailure {
    guard case .refused(let error) = failure else { return failure }
    return .refused(RefusalText.explained(error, typed: typed))
  }

  /// When a request with `at` takes effect, as Unix seconds.
  static func due(of request: Request, now: Date = Date()) -> Double? {
    request.at?.due(receivedAt: now.timeIntervalSince1970)
  }

  /// A scheduled request replies when it takes effect, so its deadline moves with its `at`.
  static func deadline(for request: Request) -> Date {
    let now = Date()
    guard request.ack != .scheduled, let at = request.at else { return now.addingTimeInterval(replyTimeout) }
    return now.addingTimeInterval(replyTimeout + at.secondsUntilDue(from: now.timeIntervalSince1970))
  }

  /// Prints the failure and turns it into the exit status it stands for.
  static func exit(_ failure: ClientFailure) -> ExitCode {
    Output.error(failure.description)
    return ExitCode(failure.exitStatus)
  }
}

/// Standard output and error, unbuffered line by line, so `--wait` output and pipes interleave
/// in order.
enum Output {
  static func print(_ text: String) {
    guard !text.isEmpty else { return }
    writeText((text + "\n"), to: 1)
  }

  static func write(_ text: String) {
    writeText(text, to: 1)
  }

  /// `rampctl: <message>` on standard error.
  static func error(_ message: String) {
    writeText("rampctl: \(message)\n", to: 2)
  }

  static var isTerminal: Bool { isatty(STDOUT_FILENO) != 0 }
}
