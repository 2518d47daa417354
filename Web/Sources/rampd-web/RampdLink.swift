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
/// and every line rampd sends (replies, events, observed values) comes out of `lines`.
///
/// The blocking `DaemonConnection` does the talking: a thread of its own reads, a serial queue
/// writes. The two touch no common state but the descriptor, so they may overlap.
final class RampdLink: @unchecked Sendable {
  enum Output: Sendable {
    case line(String)
    /// rampd closed the connection, or it failed: the last thing `lines` yields.
    case ended(String)
  }

  let serverVersion: String
  let lines: AsyncStream<Output>
  private let connection: DaemonConnection
  private let writer = DispatchQueue(label: "rampd-web.link")
  private let closing = ClosingFlag()

  private init(connection: DaemonConnection) {
    self.connection = connection
    serverVersion = connection.serverVersion
    let (lines, continuation) = AsyncStream<Output>.makeStream(bufferingPolicy: .bufferingNewest(4096))
    self.lines = lines
    connection.isInterrupted = { [closing] in closing.isSet }
    // The thread holds the link until it ends: a poll slice after `close()`, or when rampd goes.
    startThread(named: "rampd-web-read") { [self] in
      while true {
        do {
          // No deadline: each read waits a poll slice, then looks at `isInterrupted`.
          guard let received = try self.connection.nextLine(until: nil) else { continue }
          continuation.yield(.line(received.text))
        } catch {
          // Interrupted: the page went away and `close()` was called; nobody is listening.
          if (error as? ClientFailure) != .interrupted { continuation.yield(.ended("\(error)")) }
          continuation.finish()
          return
        }
      }
    }
  }

  /// Connects to rampd at `path` (greeting checked), off the caller's thread.
  static func open(path: String) async throws -> RampdLink {
    try await withCheckedThrowingContinuation { continuation in
      DispatchQueue.global().async {
        do {
          continuation.resume(returning: RampdLink(connection: try DaemonConnection(path: path)))
        } catch {
          continuation.resume(throwing: error)
        }
      }
    }
  }

  /// Sends one request line to rampd as the page wrote it.
  func send(_ line: String) async throws {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      writer.async { [self] in
        do {
          try connection.send(line: line)
          continuation.resume()
        } catch {
          continuation.resume(throwing: error)
        }
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
