import Foundation
import RampProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// A client connection to the daemon's Unix socket, as any client makes one: raw bytes out,
/// newline-delimited lines in.
final class Connection {
  private let descriptor: CInt
  private var received: [UInt8] = []
  /// Where the next line starts in `received`.
  private var start = 0
  /// One receive buffer for every connection (libFuzzer runs inputs one at a time): a fresh one
  /// per read cost more than the rest of the harness.
  nonisolated(unsafe) private static let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
  /// The server closed its side.
  private(set) var closed = false

  init?(path: String) {
    descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return nil }
    guard let address = UnixAddress(path), address.connect(descriptor) == 0 else {
      Glibc.close(descriptor)
      return nil
    }
  }

  deinit { Glibc.close(descriptor) }

  /// Sends everything, or stops when the server has closed (it does after `line-too-long`).
  func send(_ bytes: [UInt8]) {
    var offset = 0
    while offset < bytes.count {
      let sent = bytes[offset...].withUnsafeBytes {
        Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      if sent < 0 && errno == EINTR { continue }
      guard sent > 0 else { return }
      offset += sent
    }
  }

  /// The next line (without its newline), or nil when the server closed or `deadline`
  /// (monotonic seconds) passed.
  func line(before deadline: Double) -> [UInt8]? {
    while true {
      if let newline = received[start...].firstIndex(of: UInt8(ascii: "\n")) {
        let line = Array(received[start..<newline])
        start = newline + 1
        return line
      }
      received.removeFirst(start)
      start = 0
      if closed { return nil }
      let left = deadline - Clock.now
      guard left > 0 else { return nil }
      var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
      let ready = poll(&poller, 1, Int32(min(left * 1000, 1000)) + 1)
      if ready < 0 && errno != EINTR { closed = true }
      guard ready > 0 else { continue }
      let chunk = Self.chunk
      let count = recv(descriptor, chunk.baseAddress, chunk.count, 0)
      if count < 0 && errno == EINTR { continue }
      if count <= 0 {
        closed = true
        continue
      }
      received += chunk[..<count]
    }
  }
}

enum Clock {
  /// Monotonic seconds.
  static var now: Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
  }
}
