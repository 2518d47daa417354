#if canImport(Glibc)
  import Glibc
#endif

/// Loopback addresses for the tests that talk to a tool over IP (rampd-web, rampd-osc,
/// rampd-mqtt and its broker).
enum Loopback {
  /// 127.0.0.1:`port`.
  static func address(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = in_addr_t(UInt32(0x7f00_0001).bigEndian)
    return address
  }

  /// A loopback TCP port nobody listens on now (the kernel's pick for a socket bound to port 0).
  static func freeTCPPort() throws -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var address = address(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
      }
    }
    guard bound else { throw HarnessError("no free port: \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
  }
}
