import Foundation
import Logging
import RampDaemon
import RampProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// Runs each input as one client's byte stream against a real rampd in this process: the real
/// socket server (SwiftNIO, line framing, sessions), controller, preparation and player, rendering
/// on ALSA's `null` PCM paced by the clock, with its state file and a media root. Every line the
/// server writes back is read with the client's own parser.
///
/// What it checks beyond the sanitizers:
/// - every request that should be answered at once (or within `soon` seconds) is answered within
///   `replyTimeout` (a render thread or event loop that hangs, or a lost reply), and the server
///   closes a connection only after `line-too-long`;
/// - every server line parses as a greeting, a reply or an event;
/// - every request that parses comes back the same from its `json`, as a saved schedule is read
///   back after a restart.
///
/// A request that fails does so before the input is over, so libFuzzer keeps the right input: the
/// input's last line is ended and a `version` follows it, whose reply comes after every request
/// before it has been handled (those that open files or are scheduled are handled off the event
/// loop, in order; `version` waits behind them, and needs no render thread). Only requests scheduled further ahead than `soon` seconds, and `wait`s, may
/// still act after the input; the last 16 inputs are kept in `recent/` for such a case.
///
/// State is kept bounded across inputs: after each one every stream is stopped and master.gain's
/// animations removed; a daemon whose schedules (far in the future) pile up is retired and a fresh
/// one started, the old one kept, shut down, so nothing it holds counts as a leak.
final class Harness {
  let directory: String
  let replyTimeout: Double
  private var daemon: Generation?
  private var retired: [Generation] = []
  private var generations = 0
  private var inputs = 0
  static let barrier = Array("\n{\"id\":\"rampd-fuzz-barrier\",\"cmd\":\"version\"}\n".utf8)

  init() {
    signal(SIGPIPE, SIG_IGN)
    let environment = ProcessInfo.processInfo.environment
    let base = environment["RAMPD_FUZZ_DIR"] ?? NSTemporaryDirectory()
    directory = "\(base)/rampd-fuzz.\(getpid())"
    replyTimeout = environment["RAMPD_FUZZ_REPLY_TIMEOUT"].flatMap(Double.init) ?? 10
    do {
      try? FileManager.default.removeItem(atPath: directory)
      try Media.populate(directory)
      try FileManager.default.createDirectory(atPath: directory + "/recent", withIntermediateDirectories: true)
    } catch {
      fatalError("fuzz harness: cannot prepare \(directory): \(error)")
    }
    // script/fuzz gives a directory it removes itself; a bare run (a replay) cleans up after itself.
    if environment["RAMPD_FUZZ_DIR"] == nil {
      atexit { try? FileManager.default.removeItem(atPath: harness.directory) }
    }
    // LeakSanitizer's check at exit (registered before this, so it runs after) scans the daemon's
    // threads as they are at that instant: one caught mid-hand-over (the recovery thread growing
    // what it keeps, a queue's work in flight) holds a block LeakSanitizer cannot see held. The
    // daemon is shut down first, as any rampd is at its end, so what is left is what leaked.
    // libFuzzer leaves by exit() only when it is done; after a crash, hang or leak it calls _Exit.
    atexit { harness.shutDown() }
  }

  /// Shuts down the daemon that serves inputs, and keeps it (retired): nothing it holds is freed
  /// here, and nothing it still holds is reported.
  func shutDown() {
    guard let daemon else { return }
    daemon.daemon.shutdown()
    retired.append(daemon)
    self.daemon = nil
  }

  func run(_ input: [UInt8]) {
    let daemon = current()
    inputs += 1
    _ = FileManager.default.createFile(atPath: "\(directory)/recent/\(inputs % 16)", contents: Data(input))
    let expected = Expectation(input, lineLimit: daemon.lineLimit, options: daemon.parseOptions)
    for request in expected.requests { checkRoundTrip(request, input: input) }
    converse(input, expected: expected, with: daemon)
    if expected.changesState { daemon.reset(timeout: replyTimeout, input: input) }
    if inputs % 64 == 0 {
      let pending = daemon.pendingSchedules(timeout: replyTimeout)
      if pending > Generation.pendingLimit / 2 { retire(pending: pending) }
    }
  }

  private func current() -> Generation {
    if let daemon { return daemon }
    generations += 1
    let fresh = Generation(directory: directory, number: generations)
    daemon = fresh
    return fresh
  }

  /// Schedules far in the future would fill `limits.pending-scheduled` and make every `at` refused.
  private func retire(pending: Int) {
    FileHandle.standardError.write(
      Data("rampd-fuzz: \(pending) schedules pending after \(inputs) inputs; starting a fresh rampd\n".utf8))
    shutDown()
  }

  private func converse(_ input: [UInt8], expected: Expectation, with daemon: Generation) {
    guard let connection = Connection(path: daemon.socketPath) else {
      Failure.report("cannot connect to \(daemon.socketPath): \(String(cString: strerror(errno)))", input: input)
    }
    let deadline = Clock.now + replyTimeout
    guard let greeting = connection.line(before: deadline) else {
      Failure.report("no greeting", input: input)
    }
    guard case .greeting = read(greeting, input: input) else {
      Failure.report("the first line is not a greeting: \(text(greeting))", input: input)
    }
    connection.send(input)
    var awaited = expected.prompt
    if !expected.closes {
      connection.send(Self.barrier)
      awaited += 1
    }
    var replies = 0
    while replies < awaited {
      guard let line = connection.line(before: deadline) else {
        if connection.closed && expected.closes { return }
        Failure.report(
          connection.closed
            ? "the server closed the connection after \(replies) of \(awaited) replies"
            : "\(replies) of \(awaited) replies within \(replyTimeout) s", input: input)
      }
      switch read(line, input: input) {
      case .reply: replies += 1
      case .event, .unknownEvent: break
      case .greeting: Failure.report("a second greeting: \(text(line))", input: input)
      }
    }
  }

  private func read(_ line: [UInt8], input: [UInt8]) -> ServerLine {
    do {
      return try ServerLine.parse(text(line))
    } catch {
      Failure.report("the server wrote a line a client cannot read (\(error.message)): \(text(line))", input: input)
    }
  }

  private func text(_ line: [UInt8]) -> String { String(decoding: line, as: UTF8.self) }

  /// A scheduled request is saved as its `json` and parsed again after a restart (with the
  /// default options, as `Controller.restore` does): it must come back the same.
  private func checkRoundTrip(_ request: Request, input: [UInt8]) {
    let saved = request.json.serialized()
    let (_, again) = Request.parse(utf8: Array(saved.utf8))
    switch again {
    case .success(let back) where back == request: return
    case .success(let back): Failure.report("\(saved) reads back as a different request: \(back)", input: input)
    case .failure(let error): Failure.report("\(saved) does not read back: \(error.message)", input: input)
    }
  }
}

/// What the server must answer to one input: one reply per request line that is not blank, at
/// once unless it waits (`wait`, or `at` more than `soon` seconds ahead without `"ack":
/// "scheduled"`). The framing rules are rampd's (PROTOCOL.md §1): lines end at `\n`, a `\r` before
/// it is dropped, a line longer than the limit is answered with `line-too-long` and the connection
/// closed. The harness ends a last line without a newline (unless it is already too long).
struct Expectation {
  static let soon = 0.1
  var prompt = 0
  var closes = false
  var requests: [Request] = []
  /// Whether the input may leave streams or animations behind.
  var changesState = false

  init(_ input: [UInt8], lineLimit: Int, options: ParseOptions) {
    var start = 0
    while let newline = input[start...].firstIndex(of: UInt8(ascii: "\n")) {
      guard newline - start <= lineLimit else {
        prompt += 1
        closes = true
        return
      }
      var line = input[start..<newline]
      if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
      start = newline + 1
      consider(line, options: options)
    }
    if input.count - start > lineLimit {
      prompt += 1
      closes = true
    } else if start < input.count {
      var line = input[start...]
      if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
      consider(line, options: options)
    }
  }

  private mutating func consider(_ line: ArraySlice<UInt8>, options: ParseOptions) {
    if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) { return }
    let (_, result) = Request.parse(utf8: line, options: options)
    guard case .success(let request) = result else {
      prompt += 1
      return
    }
    requests.append(request)
    switch request.command {
    case .ping, .version, .status, .get, .list, .subscribe, .unsubscribe, .observe, .unobserve, .wait: break
    default: changesState = true
    }
    if case .wait = request.command { return }
    if let at = request.at, request.ack == .applied {
      let ahead: Double
      switch at {
      case .delay(let seconds): ahead = seconds
      case .date(let seconds): ahead = seconds - Date().timeIntervalSince1970
      }
      guard ahead <= Self.soon else { return }
    }
    prompt += 1
  }
}

/// One daemon: its configuration, socket and state file, and a client of its own for resets.
final class Generation {
  /// Small, since a scheduled play holds its decoder (a thread and a second of audio) until due.
  static let pendingLimit = 64
  let daemon: Daemon
  let socketPath: String
  let lineLimit: Int
  let parseOptions: ParseOptions

  /// `lineLength`: the daemon's `[limits] line-length`, small so that the byte fuzzer's inputs
  /// reach it.
  init(directory: String, number: Int, lineLength: Int = 1024) {
    let home = "\(directory)/g\(number)"
    socketPath = home + "/rampd.sock"
    // A short period, since an input that changes state waits for its reset to be applied (at the
    // next block); a non-default dB floor, so a request's floor must survive the round trip through `json`.
    let toml = """
      [socket]
      path = "\(socketPath)"
      [output]
      device = "null"
      pacing = "clock"
      period = "2ms"
      buffer = "10ms"
      [embedded-output]
      enabled = false
      [fade]
      db-floor = "-72dB"
      [gain]
      max = "+6dB"
      [limits]
      clients = 4096
      line-length = \(lineLength)
      streams = 4
      pending-scheduled = \(Self.pendingLimit)
      [media]
      roots = ["\(directory)/media", "\(directory)/media2"]
      [state]
      path = "\(home)/state.json"
      """
    do {
      try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
      let configuration = try DaemonConfiguration.parse(toml: toml, source: "fuzz")
      lineLimit = configuration.limits.lineLength
      parseOptions = ParseOptions(decibelFloor: configuration.fades.decibelFloor)
      daemon = try Daemon(
        configuration: configuration, environment: [:], logger: Logger(label: "rampd") { _ in QuietLogHandler() })
      try daemon.start()
    } catch {
      fatalError("fuzz harness: cannot start rampd: \(error)")
    }
  }

  /// Every stream stopped, master.gain back to 1 with no animation: what the next input starts from.
  func reset(timeout: Double, input: [UInt8]) {
    let reply = ask(
      #"{"cmd":"batch","commands":[{"cmd":"stop"},{"cmd":"remove","key":"master.gain"},"#
        + #"{"cmd":"set","key":"master.gain","value":1,"duration":0}]}"#, timeout: timeout)
    guard let reply else { Failure.report("the reset after this input got no reply within \(timeout) s", input: input) }
    guard case .object(let object) = reply, object["ok"] == .bool(true) else {
      Failure.report("the reset after this input was refused: \(reply.serialized())", input: input)
    }
  }

  /// Schedules saved and not yet over (`status`'s `scheduled`).
  func pendingSchedules(timeout: Double) -> Int {
    guard let reply = ask(#"{"cmd":"status"}"#, timeout: timeout),
      case .object(let object) = reply, case .object(let result)? = object["result"],
      case .array(let scheduled)? = result["scheduled"]
    else { return 0 }
    return scheduled.count
  }

  private func ask(_ line: String, timeout: Double) -> JSONValue? {
    let (_, parsed) = Request.parse(line: line)
    guard case .success(let request) = parsed else { fatalError("fuzz harness: \(line) does not parse") }
    let client = Inbox()
    // Handled on the controller's loop, as a connection's request is.
    let controller = daemon.controller
    controller.control.execute { controller.handle(request, from: client, sequence: 0) }
    return client.wait(timeout: timeout)
  }
}

/// The harness's own client: keeps the one reply it waits for.
final class Inbox: Client, @unchecked Sendable {
  private let condition = NSCondition()
  private var received: JSONValue?

  func reply(_ line: JSONValue, sequence: Int) {
    condition.lock()
    received = line
    condition.signal()
    condition.unlock()
  }

  func event(_ line: String) {}

  var awaitsNoOtherReply: Bool { true }

  var confinedToMediaRoots: Bool { false }

  func wait(timeout: Double) -> JSONValue? {
    let deadline = Date(timeIntervalSinceNow: timeout)
    condition.lock()
    defer { condition.unlock() }
    while received == nil && condition.wait(until: deadline) {}
    return received
  }
}

enum Failure {
  /// Stops the run the way a crash does, so libFuzzer keeps the input as a reproducer.
  static func report(_ message: String, input: [UInt8]) -> Never {
    let shown = String(decoding: input.prefix(2048), as: UTF8.self)
    FileHandle.standardError.write(Data("\n==rampd-fuzz== \(message)\n==rampd-fuzz== input: \(shown)\n".utf8))
    abort()
  }
}

/// Built on the first input; libFuzzer calls from one thread.
nonisolated(unsafe) let harness = Harness()
