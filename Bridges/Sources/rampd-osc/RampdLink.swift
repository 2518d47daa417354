import Foundation
import RampClient
import RampProtocol

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

  private struct Pending {
    let peer: Peer
    let address: String
  }

  private let path: String
  private let deliver: @Sendable (Peer, String, Outcome) -> Void
  private let log: RateLimitedLog
  private let lock = NSLock()
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

  /// Sends `request` for the message `address` from `peer`; its reply comes through `deliver`.
  func send(_ request: JSONObject, from peer: Peer, address: String) throws(Refusal) {
    let connection = try connected().get()
    let id: Int? = lock.withLock {
      guard pending.count < Self.maxPending else { return nil }
      let id = nextID
      nextID += 1
      pending[id] = Pending(peer: peer, address: address)
      return id
    }
    guard let id else {
      throw Refusal(code: "limit-exceeded", message: "\(Self.maxPending) requests await rampd's replies; try again")
    }
    var line = request
    line["id"] = .integer(id)
    do {
      try connection.send(line: JSONValue.object(line).serialized())
    } catch {
      lock.withLock { _ = pending.removeValue(forKey: id) }
      lost(connection, because: Self.describe(error))
      throw Refusal(code: "unreachable", message: Self.describe(error))
    }
  }

  /// A failure in one line: `cannot reach rampd at PATH: REASON`.
  private static func describe(_ failure: ClientFailure) -> String {
    switch failure {
    case .unreachable(let path, let reason): return "cannot reach rampd at \(path): \(reason)"
    default: return "\(failure)".replacingOccurrences(of: "\n", with: " ")
    }
  }

  private func connected() -> Result<DaemonConnection, Refusal> {
    lock.lock()
    defer { lock.unlock() }
    if let connection { return .success(connection) }
    let now = Date().timeIntervalSince1970
    guard now - lastAttempt >= 0.5 else {
      return .failure(Refusal(code: "unreachable", message: "rampd at \(path) is not reachable"))
    }
    lastAttempt = now
    do {
      let made = try DaemonConnection(path: path, greetingTimeout: 5)
      connection = made
      let box = ConnectionBox(made)
      let reader = Thread { [self] in read(box.connection) }
      reader.name = "rampd-osc reader"
      reader.start()
      log("connected to rampd \(made.serverVersion) at \(path)")
      return .success(made)
    } catch {
      return .failure(Refusal(code: "unreachable", message: Self.describe(error)))
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
      guard let number = id?.numberValue, let waiting = lock.withLock({ pending.removeValue(forKey: Int(number)) })
      else {
        log("a reply from rampd that answers no message: \(received.text.prefix(200))")
        continue
      }
      switch result {
      case .success(let value): deliver(waiting.peer, waiting.address, .success(value))
      case .failure(let error):
        deliver(waiting.peer, waiting.address, .failure(code: error.code.rawValue, message: error.message))
      }
    }
  }

  /// rampd went away: every message still waiting is told so.
  private func lost(_ gone: DaemonConnection, because reason: String) {
    let orphans: [Pending] = lock.withLock {
      guard connection === gone else { return [] }
      connection = nil
      let orphans = Array(pending.values)
      pending.removeAll()
      return orphans
    }
    guard !orphans.isEmpty || reason.contains("closed") else { return }
    log("lost rampd at \(path): \(reason)")
    for orphan in orphans {
      deliver(
        orphan.peer, orphan.address,
        .failure(
          code: "unreachable", message: "rampd went away before it answered; the command may not have taken effect"))
    }
  }
}

/// A connection handed to its reader thread, which alone reads it (the poll loop's thread only
/// writes to it; `DaemonConnection` keeps the two apart).
private final class ConnectionBox: @unchecked Sendable {
  let connection: DaemonConnection
  init(_ connection: DaemonConnection) { self.connection = connection }
}
