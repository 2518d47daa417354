import Dispatch
import RampClient
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One connection to rampd on behalf of one page: lines the page sends go to rampd as they are,
/// and every line rampd sends (replies, events, observed values) is handed to the function given
/// to `start`.
///
/// The blocking `DaemonConnection` does the talking: a thread of its own reads, a serial queue
/// writes. The two touch no common state but the descriptor, so they may overlap.
final class RampdLink: @unchecked Sendable {
  enum Output: Sendable {
    case line(String)
    /// rampd closed the connection, or it failed: the last thing the reader hands on.
    case ended(String)
  }

  let serverVersion: String
  private let connection: DaemonConnection
  private let writer = DispatchQueue(label: "rampd-web.link")
  private let closing = ClosingFlag()
  private let inFlight = Atomic<Int>(0)

  /// Lines given to `send` not yet written (rampd reads slower than the page writes).
  var sendsWaiting: Int { inFlight.load(ordering: .relaxed) }

  /// Connects to rampd at `path` and reads its greeting: blocks, so not on an event loop.
  private init(path: String) throws {
    connection = try DaemonConnection(path: path)
    serverVersion = connection.serverVersion
    connection.isInterrupted = { [closing] in closing.isSet }
  }

  /// Connects to rampd at `path` (greeting checked) off the caller's thread, then calls `done`
  /// with the link or why there is none.
  static func open(path: String, then done: @escaping @Sendable (Result<RampdLink, any Error>) -> Void) {
    DispatchQueue.global().async {
      done(Result { try RampdLink(path: path) })
    }
  }

  /// Starts reading: each line rampd sends goes to `deliver`, then `.ended` when rampd goes away
  /// (nothing after `close()`). The thread holds the link until it ends: a poll slice after
  /// `close()`, or when rampd goes.
  func start(delivering deliver: @escaping @Sendable (Output) -> Void) {
    startThread(named: "rampd-web-read") { [self] in
      while true {
        do throws(ClientFailure) {
          // No deadline: each read waits a poll slice, then looks at `isInterrupted`.
          guard let received = try self.connection.nextLine(until: nil) else { continue }
          deliver(.line(received.text))
        } catch {
          // Interrupted: the page went away and `close()` was called; nobody is listening.
          if error != .interrupted { deliver(.ended("\(error)")) }
          return
        }
      }
    }
  }

  /// Sends one request line to rampd as the page wrote it, in order, off the caller's thread;
  /// `done` is called with the failure, if it fails.
  /// Nothing is written after `close()`.
  func send(_ line: String, failed: @escaping @Sendable (ClientFailure) -> Void) {
    inFlight.add(1, ordering: .relaxed)
    writer.async { [self] in
      defer { inFlight.subtract(1, ordering: .relaxed) }
      guard !closing.isSet else { return }
      do throws(ClientFailure) {
        try connection.send(line: line)
      } catch {
        failed(error)
      }
    }
  }

  /// Ends the reader within a poll slice; the connection closes when the last reference goes.
  func close() { closing.set() }
}

/// Set once, read from the reader thread.
private final class ClosingFlag: Sendable {
  private let value = Atomic(false)
  var isSet: Bool { value.load(ordering: .acquiring) }
  func set() { value.store(true, ordering: .releasing) }
}
