import FoundationEssentials
import RampClient
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Who a reply goes back to: a UDP sender, or a TCP connection (by its number).
enum Peer: Hashable, Sendable {
  case udp(SocketAddress)
  case tcp(Int)
}

/// rampd's answer to one message, or why there is none.
enum Outcome: Sendable {
  case success(JSONValue)
  case failure(code: String, message: String)
}

/// The connection to rampd shared by every OSC sender: requests go out with ids of its own, and
/// each reply comes back to the sender of its message through `deliver`, from a reader thread.
/// Connected at start and again on demand when rampd has gone (at most every half second).
final class RampdLink: @unchecked Sendable {
  /// Requests sent and not yet answered, over all senders (rampd's own bound on scheduled
  /// commands is 1024): more are refused with `limit-exceeded`.
  static let maxPending = 4096

  /// One request: one message's, or a `batch` of the messages of one bundle that take effect
  /// together, each answered in order.
  private struct Pending {
    let peer: Peer
    let addresses: [String]
  }

  private let path: String
  private let deliver: @Sendable (Peer, String, Outcome) -> Void
  private let log: RateLimitedLog
  private let lock = Mutex<Void>(())
  private var connection: DaemonConnection?
  private var pending: [Int: Pending] = [:]
  private var nextID = 1
  private var lastAttempt = -Double.infinity

  init(path: String, log: RateLimitedLog, deliver: @escaping @Sendable (Peer, String, Outcome) -> Void) {
    self.path = path
    self.log = log
    self.deliver = deliver
  }

  /// Connects now, if rampd is there; says so either way.
  func start() {
    if case .failure(let refusal) = connected() {
      log("\(refusal.message); trying again with the next message")
    }
  }

  /// Sends `request` for the messages `addresses` from `peer` (one, or those of a batch in its
  /// order); each one's reply comes through `deliver`.
  func send(_ request: JSONObject, from peer: Peer, addresses: [String]) throws(Refusal) {
    let connection = try connected().get()
    let id: Int? = lock.withLock { _ in
      guard pending.count < Self.maxPending else { return nil }
      let id = nextID
      nextID += 1
      pending[id] = Pending(peer: peer, addresses: addresses)
      return id
    }
    guard let id else {
      throw Refusal(code: "limit-exceeded", message: "\(Self.maxPending) requests await rampd's replies; try again")
    }
    var line = request
    line["id"] = .integer(id)
    let text = JSONValue.object(line).serialized()
    guard text.utf8.count < Self.maxLine else {
      lock.withLock { _ in _ = pending.removeValue(forKey: id) }
      throw Refusal(
        code: "limit-exceeded",
        message:
          "the request for these messages is \(text.utf8.count) bytes of JSON, over rampd's line of \(Self.maxLine)")
    }
    do {
      try connection.send(line: text)
    } catch {
      lock.withLock { _ in _ = pending.removeValue(forKey: id) }
      lost(connection, because: Self.describe(error))
      throw Refusal(code: "unreachable", message: Self.describe(error))
    }
  }

  /// A failure in one line: `cannot reach rampd at PATH: REASON`.
  private static func describe(_ failure: ClientFailure) -> String {
    switch failure {
    case .unreachable(let path, let reason): return "cannot reach rampd at \(path): \(reason)"
    default: return "\(failure)".replacing("\n", with: " ")
    }
  }

  private func connected() -> Result<DaemonConnection, Refusal> {
    lock.withLock { _ in
      if let connection { return .success(connection) }
      let now = Date().timeIntervalSince1970
      guard now - lastAttempt >= 0.5 else {
        return .failure(Refusal(code: "unreachable", message: "rampd at \(path) is not reachable"))
      }
      lastAttempt = now
      do throws(ClientFailure) {
        let made = try DaemonConnection(path: path, greetingTimeout: 5)
        connection = made
        let box = ConnectionBox(made)
        startThread(named: "rampd-osc reader") { [self] in read(box.connection) }
        log("connected to rampd \(made.serverVersion) at \(path)")
        return .success(made)
      } catch {
        return .failure(Refusal(code: "unreachable", message: Self.describe(error)))
      }
    }
  }

  /// Reads `connection` until it ends, handing each reply to its sender.
  private func read(_ connection: DaemonConnection) {
    while true {
      let received: ReceivedLine?
      do {
        received = try connection.nextLine(until: nil)
      } catch {
        lost(connection, because: Self.describe(error))
        return
      }
      guard let received, case .reply(let id, let result) = received.line else { continue }
      guard let number = id?.numberValue, let waiting = lock.withLock({ _ in pending.removeValue(forKey: Int(number)) })
      else {
        log("a reply from rampd that answers no message: \(received.text.prefix(200))")
        continue
      }
      for answer in Self.outcomes(of: result, addresses: waiting.addresses) {
        deliver(waiting.peer, answer.address, answer.outcome)
      }
    }
  }

  /// Each message's answer from rampd's reply to its request: a batch's `results` in order; a
  /// batch refused at `commands[i]` is that message's refusal, and its bundle's refusal for the
  /// others.
  static func outcomes(of result: Result<JSONValue, ProtocolError>, addresses: [String]) -> [(
    address: String, outcome: Outcome
  )] {
    switch result {
    case .success(let value) where addresses.count == 1:
      return [(addresses[0], .success(value))]
    case .success(let value):
      let results = value.objectValue?["results"]?.arrayValue ?? []
      return addresses.enumerated().map { index, address in
        (address, index < results.count ? .success(results[index]) : .success(value))
      }
    case .failure(let error):
      let refusal = Refusal(code: error.code.rawValue, message: error.message)
      let index = addresses.count == 1 ? 0 : batchIndex(error.field).flatMap { $0 < addresses.count ? $0 : nil }
      return outcomes(addresses: addresses, failed: index, refusal)
    }
  }

  /// The answers to messages that take effect together when the one at `failed` (nil: the group
  /// as a whole) was refused: its own refusal, and `bundle-refused` naming it for the others.
  static func outcomes(addresses: [String], failed: Int?, _ refusal: Refusal) -> [(address: String, outcome: Outcome)] {
    addresses.enumerated().map { index, address in
      if index == failed || failed == nil || addresses.count == 1 {
        return (address, .failure(code: refusal.code, message: refusal.message))
      }
      let culprit = failed.map { "message \($0 + 1) (\(addresses[$0]))" } ?? "another of its messages"
      return (
        address,
        .failure(
          code: "bundle-refused",
          message: "its bundle was refused at \(culprit): \(refusal.code): \(refusal.message)")
      )
    }
  }

  /// `i` from a batch's error field `commands[i]…`.
  private static func batchIndex(_ field: String?) -> Int? {
    guard let field, field.hasPrefix("commands["), let close = field.firstIndex(of: "]") else { return nil }
    return Int(field[field.index(field.startIndex, offsetBy: 9)..<close])
  }

  /// rampd's default `limits.line-length`: a longer request would be refused and the connection
  /// closed, failing every message still waiting on it.
  static let maxLine = 65_536

  /// rampd went away: every message still waiting is told so.
  private func lost(_ gone: DaemonConnection, because reason: String) {
    // The reader and a failed write both report a loss: the first one tells.
    let orphans: [Pending]? = lock.withLock { _ in
      guard connection === gone else { return nil }
      connection = nil
      let orphans = Array(pending.values)
      pending.removeAll()
      return orphans
    }
    guard let orphans else { return }
    log("lost rampd at \(path): \(reason)")
    for orphan in orphans {
      for address in orphan.addresses {
        deliver(
          orphan.peer, address,
          .failure(
            code: "unreachable", message: "rampd went away before it answered; the command may not have taken effect"))
      }
    }
  }
}

/// A connection handed to its reader thread, which alone reads it (the poll loop's thread only
/// writes to it; `DaemonConnection` keeps the two apart).
private final class ConnectionBox: @unchecked Sendable {
  let connection: DaemonConnection
  init(_ connection: DaemonConnection) { self.connection = connection }
}
