import FoundationEssentials
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One line from rampd, as received (for `--json`) and as understood.
public struct ReceivedLine: Sendable {
  public let text: String
  public let line: ServerLine
}

/// A blocking connection to rampd: connect, check the greeting, send requests with fresh ids,
/// and read lines, telling replies (by id) from events.
///
/// Events that arrive while a reply is awaited are handed to the caller's `onOther` rather than
/// dropped, so a command that subscribed first (`fade-out --then stop --wait`) sees every event.
/// Reads poll in short slices so that Ctrl-C (`Interruption`) is noticed promptly.
public final class DaemonConnection {
  public let path: String
  public private(set) var serverVersion = ""
  private let descriptor: CInt
  private var framer = LineFramer(maxLineBytes: 16 << 20)
  private var lines: [[UInt8]] = []
  private var nextID = 1
  /// Checked between reads; true makes the read throw `.interrupted`.
  public var isInterrupted: () -> Bool = { false }
  /// Given each line in which rampd refuses something, as received (`--json` prints them).
  public var onRefusal: (String) -> Void

  /// The longest a read blocks before it looks at `isInterrupted` and the deadline again.
  public static let pollSlice = 0.05

  /// Connects and reads the greeting, refusing a server that does not speak protocol 1.
  public init(path: String, greetingTimeout: Double = 10, onRefusal: @escaping (String) -> Void = { _ in })
    throws(ClientFailure)
  {
    self.path = path
    self.onRefusal = onRefusal
    guard let address = UnixAddress(path) else {
      throw .unreachable(path: path, reason: "the path is longer than a Unix socket path may be")
    }
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw .unreachable(path: path, reason: Self.errnoText()) }
    self.descriptor = descriptor
    guard address.connect(descriptor) == 0 else {
      let reason = Self.errnoText()
      close(descriptor)
      throw .unreachable(path: path, reason: reason)
    }
    let greeting = try nextLine(deadline: Date().addingTimeInterval(greetingTimeout))
    guard case .greeting(let server, let version, let protocolVersion) = greeting.line else {
      close(descriptor)
      // A daemon at its client limit answers with an error instead of a greeting: try later.
      if case .reply(_, .failure(let error)) = greeting.line {
        onRefusal(greeting.text)
        if error.code == .permissionDenied { throw .notPermitted(path: path, error: error) }
        throw .unreachable(path: path, reason: "rampd refused the connection: \(ClientFailure.describe(error))")
      }
      throw .protocolViolation("expected a greeting from \(path), got \(greeting.text)")
    }
    guard protocolVersion == ProtocolVersion.current else {
      close(descriptor)
      throw .protocolViolation(
        "\(server) \(version) at \(path) speaks protocol \(protocolVersion); this rampctl speaks \(ProtocolVersion.current)"
      )
    }
    serverVersion = version
  }

  deinit { close(descriptor) }

  // MARK: Sending

  /// Sends `request` with a fresh id (any id it had is replaced) and returns that id.
  @discardableResult
  public func send(_ request: Request) throws(ClientFailure) -> JSONValue {
    var request = request
    let id = JSONValue.integer(nextID)
    nextID += 1
    request.id = id
    try send(line: request.json.serialized())
    return id
  }

  /// Sends one line as it is (a newline is added).
  public func send(line: String) throws(ClientFailure) {
    let bytes = Array((line + "\n").utf8)
    var sent = 0
    while sent < bytes.count {
      let result = bytes[sent...].withUnsafeBytes { raw in
        Glibc.send(descriptor, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL))
      }
      if result < 0 && errno == EINTR { continue }
      guard result > 0 else { throw .unreachable(path: path, reason: "sending failed: \(Self.errnoText())") }
      sent += result
    }
  }

  // MARK: Receiving

  /// The reply to request `id`. Events (and replies to other requests) read on the way go to
  /// `onOther` in arrival order. A failed reply throws `.refused`.
  public func reply(
    to id: JSONValue, deadline: Date? = nil, onOther: (ReceivedLine) throws(ClientFailure) -> Void = { _ in }
  ) throws(ClientFailure) -> (text: String, result: JSONValue) {
    while true {
      let received = try nextLine(deadline: deadline)
      guard case .reply(let replyID, let result) = received.line, replyID == id else {
        try onOther(received)
        continue
      }
      switch result {
      case .success(let value): return (received.text, value)
      case .failure(let error): throw refusal(error, line: received.text)
      }
    }
  }

  /// `.refused(error)`, once `onRefusal` has seen the line that said so.
  public func refusal(_ error: ProtocolError, line: String) -> ClientFailure {
    onRefusal(line)
    return .refused(error)
  }

  /// Sends `request` and returns its reply.
  public func call(_ request: Request, timeout: Double? = 30) throws(ClientFailure) -> (text: String, result: JSONValue)
  {
    let id = try send(request)
    return try reply(to: id, deadline: timeout.map { Date().addingTimeInterval($0) })
  }

  /// The next line, or nil when `deadline` passes first. `nil` deadline waits for ever.
  public func nextLine(until deadline: Date?) throws(ClientFailure) -> ReceivedLine? {
    while lines.isEmpty {
      if isInterrupted() { throw .interrupted }
      let remaining = deadline.map { $0.timeIntervalSinceNow } ?? Self.pollSlice
      if remaining <= 0 { return nil }
      try fill(waitingAtMost: min(remaining, Self.pollSlice))
    }
    let bytes = lines.removeFirst()
    let text = String(decoding: bytes, as: UTF8.self)
    do {
      return ReceivedLine(text: text, line: try ServerLine.parse(text))
    } catch {
      throw .protocolViolation("cannot read a line from rampd (\(error.message)): \(text)")
    }
  }

  /// The next line; past `deadline` this throws `.timedOut`.
  public func nextLine(deadline: Date?) throws(ClientFailure) -> ReceivedLine {
    guard let line = try nextLine(until: deadline) else {
      throw .timedOut("rampd at \(path) did not answer in time")
    }
    return line
  }

  /// Reads what is available, waiting at most `seconds` for something to arrive.
  private func fill(waitingAtMost seconds: Double) throws(ClientFailure) {
    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    let ready = poll(&poller, 1, Int32((seconds * 1000).rounded(.up)))
    if ready < 0 {
      if errno == EINTR { return }
      throw .unreachable(path: path, reason: "poll failed: \(Self.errnoText())")
    }
    guard ready > 0 else { return }
    var buffer = [UInt8](repeating: 0, count: 65_536)
    let count = recv(descriptor, &buffer, buffer.count, 0)
    if count < 0 {
      if errno == EINTR || errno == EAGAIN { return }
      throw .unreachable(path: path, reason: "reading failed: \(Self.errnoText())")
    }
    guard count > 0 else { throw .unreachable(path: path, reason: "rampd closed the connection") }
    for frame in framer.push(buffer[..<count]) {
      switch frame {
      case .line(let bytes): lines.append(bytes)
      case .tooLong: throw .protocolViolation("rampd sent a line longer than \(framer.maxLineBytes) bytes")
      }
    }
  }

  private static func errnoText() -> String { String(cString: strerror(errno)) }
}
