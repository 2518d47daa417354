#if canImport(Glibc)
  import Glibc
#endif

/// A Unix socket address: a path, or an abstract name written `@name` (as systemd's
/// `$NOTIFY_SOCKET` may be). The one place a `sockaddr_un` is filled, for the daemon's listening
/// socket, its notifications and every client's connection.
public struct UnixAddress {
  public private(set) var storage = sockaddr_un()
  /// The address's length: an abstract name is exactly as long as it is; a path includes its
  /// terminator.
  public let length: socklen_t

  /// Nil when the name does not fit in `sun_path`.
  public init?(_ name: String) {
    storage.sun_family = sa_family_t(AF_UNIX)
    var bytes = Array(name.utf8)
    let abstract = bytes.first == UInt8(ascii: "@")
    if abstract { bytes[0] = 0 }
    guard bytes.count < MemoryLayout.size(ofValue: storage.sun_path) else { return nil }
    withUnsafeMutableBytes(of: &storage.sun_path) { raw in
      raw.copyBytes(from: bytes)
      if !abstract { raw[bytes.count] = 0 }
    }
    length = socklen_t(MemoryLayout.offset(of: \sockaddr_un.sun_path)! + bytes.count + (abstract ? 0 : 1))
  }

  /// Calls `body` with the address as the socket calls take it.
  public func withSocketAddress<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> Result) rethrows
    -> Result
  {
    try withUnsafePointer(to: storage) { pointer in
      try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, length) }
    }
  }

  /// `connect(2)`: 0, or -1 with `errno` set.
  public func connect(_ descriptor: CInt) -> CInt {
    withSocketAddress { Glibc.connect(descriptor, $0, $1) }
  }

  /// `bind(2)`: 0, or -1 with `errno` set.
  public func bind(_ descriptor: CInt) -> CInt {
    withSocketAddress { Glibc.bind(descriptor, $0, $1) }
  }
}
