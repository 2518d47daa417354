import FoundationEssentials
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// An IPv4 or IPv6 socket address, as received from `recvfrom` or `accept`.
struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
  /// The `sockaddr_in` or `sockaddr_in6`, as bytes.
  let bytes: [UInt8]

  init(storage: sockaddr_storage, length: socklen_t) {
    var storage = storage
    bytes = withUnsafeBytes(of: &storage) { Array($0.prefix(Int(length))) }
  }

  /// A literal IPv4 or IPv6 address (`localhost` is 127.0.0.1) and a port.
  init?(host: String, port: UInt16) {
    var storage = sockaddr_storage()
    let literal = host == "localhost" ? "127.0.0.1" : host
    var length = 0
    let parsed = withUnsafeMutableBytes(of: &storage) { raw -> Bool in
      if literal.contains(":") {
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = port.bigEndian
        guard inet_pton(AF_INET6, literal, &address.sin6_addr) == 1 else { return false }
        withUnsafeBytes(of: &address) { raw.copyMemory(from: $0) }
        length = MemoryLayout<sockaddr_in6>.size
      } else {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, literal, &address.sin_addr) == 1 else { return false }
        withUnsafeBytes(of: &address) { raw.copyMemory(from: $0) }
        length = MemoryLayout<sockaddr_in>.size
      }
      return true
    }
    guard parsed else { return nil }
    self.init(storage: storage, length: socklen_t(length))
  }

  var family: Int32 { bytes.count >= MemoryLayout<sockaddr_in6>.size ? AF_INET6 : AF_INET }

  /// The address alone: 4 bytes, or 16 (an IPv4-mapped IPv6 address as its IPv4 4).
  var ip: [UInt8] {
    if family == AF_INET { return Array(bytes[4..<8]) }
    let six = Array(bytes[8..<24])
    if six[0..<10].allSatisfy({ $0 == 0 }) && six[10] == 0xff && six[11] == 0xff { return Array(six[12...]) }
    return six
  }

  var port: UInt16 { UInt16(bytes[2]) << 8 | UInt16(bytes[3]) }

  /// The same address with another port.
  func with(port: UInt16) -> SocketAddress {
    var copy = bytes
    copy[2] = UInt8(port >> 8)
    copy[3] = UInt8(port & 0xff)
    return SocketAddress(raw: copy)
  }

  private init(raw: [UInt8]) { bytes = raw }

  var description: String {
    var text = [CChar](repeating: 0, count: 64)
    let ip = self.ip
    let family = ip.count == 4 ? AF_INET : AF_INET6
    _ = ip.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &text, socklen_t(text.count)) }
    let host = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)"
  }

  /// Calls `body` with the address as a `sockaddr`.
  func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
    var storage = sockaddr_storage()
    withUnsafeMutableBytes(of: &storage) { $0.copyBytes(from: bytes) }
    return withUnsafePointer(to: &storage) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(bytes.count)) }
    }
  }
}

/// The sources rampd-osc listens to: `127.0.0.0/8`, `::1`, `192.168.1.0/24`, or `any`.
struct SourceRange: Equatable, Sendable, CustomStringConvertible {
  let prefix: [UInt8]
  let bits: Int
  let description: String

  static let loopback = [try! SourceRange(parsing: "127.0.0.0/8"), try! SourceRange(parsing: "::1")]

  init(parsing text: String) throws(Refusal) {
    description = text
    if text == "any" {
      prefix = []
      bits = 0
      return
    }
    let parts = text.split(separator: "/", omittingEmptySubsequences: false)
    guard parts.count <= 2, let address = SocketAddress(host: String(parts[0]), port: 0) else {
      throw Refusal(
        code: "invalid-allow",
        message: "--allow '\(text)': not an address or a range such as 192.168.1.0/24, ::1 or any")
    }
    prefix = address.ip
    let most = prefix.count * 8
    if parts.count == 2 {
      guard let bits = Int(parts[1]), (0...most).contains(bits) else {
        throw Refusal(code: "invalid-allow", message: "--allow '\(text)': the prefix length must be 0 to \(most)")
      }
      self.bits = bits
    } else {
      bits = most
    }
  }

  func contains(_ address: SocketAddress) -> Bool {
    if prefix.isEmpty { return true }
    let ip = address.ip
    guard ip.count == prefix.count else { return false }
    for bit in 0..<bits where (ip[bit / 8] ^ prefix[bit / 8]) & (0x80 >> UInt8(bit % 8)) != 0 { return false }
    return true
  }
}

/// Log lines on standard error, at most `perSecond` a second: a flood of bad packets is told in
/// a count, not in a line each.
final class RateLimitedLog: Sendable {
  private struct Window {
    var start = 0.0
    var written = 0
    var suppressed = 0
  }
  private let window = Mutex(Window())
  private let perSecond: Int

  init(perSecond: Int = 20) { self.perSecond = perSecond }

  func callAsFunction(_ line: String) {
    let text: String? = window.withLock { window in
      let now = Date().timeIntervalSince1970
      var prefix = ""
      if now - window.start >= 1 {
        if window.suppressed > 0 {
          prefix = "rampd-osc: \(window.suppressed) more lines like these left out in the last second\n"
        }
        window = Window(start: now)
      }
      guard window.written < perSecond else {
        window.suppressed += 1
        return prefix.isEmpty ? nil : prefix
      }
      window.written += 1
      return prefix + "rampd-osc: \(line)\n"
    }
    if let text { writeText(text, to: STDERR_FILENO) }
  }
}

enum SystemError {
  static var text: String { String(cString: strerror(errno)) }
}
