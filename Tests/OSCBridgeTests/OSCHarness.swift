import Foundation
import RampProtocol

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

extension Executables {
  /// As the package installs it: a link to rampd by that name.
  static var rampdOSC: String { rampd(as: "rampd-osc") }
}

/// A real `rampd-osc` in front of a real rampd, listening on a free loopback port (`--listen
/// 127.0.0.1:0`): the port is read from the line it prints once it listens.
final class OSCBridgeProcess {
  let tool: LoggedProcess
  let port: UInt16
  var process: Process { tool.process }
  var log: String { tool.log }

  init(socket: String, _ arguments: [String] = []) throws {
    tool = try LoggedProcess(
      Executables.rampdOSC, ["--listen", "127.0.0.1:0", "--socket", socket] + arguments, environment: childEnvironment)
    var port: UInt16 = 0
    try tool.waitUntil("rampd-osc did not start") { log in
      guard let match = log.firstMatch(of: #/listening on 127\.0\.0\.1:(\d+) /#) else { return false }
      port = UInt16(match.output.1)!
      return true
    }
    self.port = port
  }
}

/// OSC packets as the tests write and read them: written here byte by byte from the OSC 1.0
/// specification, not by liblo, which the bridge reads them with.
enum OSCWire {
  enum Argument {
    case f(Float)
    case i(Int32)
    case d(Double)
    case s(String)
    case t  // T: true, no data
  }

  static func padded(_ string: String) -> [UInt8] { padded(Array(string.utf8)) }

  static func padded(_ bytes: [UInt8]) -> [UInt8] {
    var bytes = bytes + [0]
    while bytes.count % 4 != 0 { bytes.append(0) }
    return bytes
  }

  static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian) { Array($0) }
  }

  static func message(_ address: String, _ arguments: [Argument] = []) -> [UInt8] {
    var tags = ","
    var data: [UInt8] = []
    for argument in arguments {
      switch argument {
      case .f(let value):
        tags += "f"
        data += bigEndian(value.bitPattern)
      case .i(let value):
        tags += "i"
        data += bigEndian(value)
      case .d(let value):
        tags += "d"
        data += bigEndian(value.bitPattern)
      case .s(let value):
        tags += "s"
        data += padded(value)
      case .t:
        tags += "T"
      }
    }
    return padded(address) + padded(tags) + data
  }

  /// The NTP timetag of a wall-clock time (Unix seconds).
  static func timetag(unix: Double) -> (seconds: UInt32, fraction: UInt32) {
    let ntp = unix + 2_208_988_800
    let seconds = ntp.rounded(.down)
    return (UInt32(seconds), UInt32(((ntp - seconds) * 4_294_967_296).rounded(.down)))
  }

  static let immediately: (seconds: UInt32, fraction: UInt32) = (0, 1)

  static func bundle(_ time: (seconds: UInt32, fraction: UInt32), _ elements: [[UInt8]]) -> [UInt8] {
    var bytes = padded("#bundle") + bigEndian(time.seconds) + bigEndian(time.fraction)
    for element in elements { bytes += bigEndian(Int32(element.count)) + element }
    return bytes
  }

  static func slip(_ packet: [UInt8]) -> [UInt8] {
    var framed: [UInt8] = [0xC0]
    for byte in packet {
      switch byte {
      case 0xC0: framed += [0xDB, 0xDC]
      case 0xDB: framed += [0xDB, 0xDD]
      default: framed.append(byte)
      }
    }
    return framed + [0xC0]
  }

  /// A reply: its address and its string arguments (`/rampd/reply ,ss`, `/rampd/error ,sss`).
  static func reply(_ packet: [UInt8]) -> (address: String, strings: [String])? {
    func string(at offset: inout Int) -> String? {
      guard let end = packet[offset...].firstIndex(of: 0) else { return nil }
      let text = String(decoding: packet[offset..<end], as: UTF8.self)
      offset = (end / 4 + 1) * 4
      return text
    }
    var offset = 0
    guard let address = string(at: &offset), let tags = string(at: &offset), tags.allSatisfy({ $0 == "," || $0 == "s" })
    else { return nil }
    var strings: [String] = []
    for _ in tags.dropFirst() {
      guard let text = string(at: &offset) else { return nil }
      strings.append(text)
    }
    return (address, strings)
  }
}

/// A UDP socket on the loopback interface, sending to the bridge and reading its replies.
final class UDPPeer {
  let descriptor: CInt
  let bridgePort: UInt16

  init(bridgePort: UInt16) throws {
    self.bridgePort = bridgePort
    descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    var address = Loopback.address(port: 0)
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard bound == 0 else { throw HarnessError("bind: \(errno)") }
  }

  deinit { close(descriptor) }

  func send(_ packet: [UInt8]) {
    var address = Loopback.address(port: bridgePort)
    _ = packet.withUnsafeBytes { raw in
      withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
      }
    }
  }

  /// The next reply, or nil after `timeout` seconds.
  func receive(timeout: Double = 5) -> (address: String, strings: [String])? {
    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    guard poll(&poller, 1, Int32(timeout * 1000)) == 1 else { return nil }
    var buffer = [UInt8](repeating: 0, count: 65_536)
    let count = recv(descriptor, &buffer, buffer.count, 0)
    guard count > 0 else { return nil }
    return OSCWire.reply(Array(buffer[..<count]))
  }

  /// Sends `packet` and returns the reply it gets.
  func exchange(_ packet: [UInt8], timeout: Double = 5) -> (address: String, strings: [String])? {
    send(packet)
    return receive(timeout: timeout)
  }
}

/// A TCP connection to the bridge, SLIP-framed both ways (OSC 1.1).
final class TCPPeer {
  let descriptor: CInt
  private var pending: [UInt8] = []

  init(bridgePort: UInt16) throws {
    descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = Loopback.address(port: bridgePort)
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard connected == 0 else { throw HarnessError("connect: \(errno)") }
  }

  deinit { close(descriptor) }

  func send(raw bytes: [UInt8]) {
    _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
  }

  /// The next SLIP frame's reply, or nil after `timeout` seconds or when the bridge closed.
  func receive(timeout: Double = 5) -> (address: String, strings: [String])? {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
      if let start = pending.firstIndex(where: { $0 != 0xC0 }), let end = pending[start...].firstIndex(of: 0xC0) {
        var frame: [UInt8] = []
        var escaped = false
        for byte in pending[start..<end] {
          if escaped {
            frame.append(byte == 0xDC ? 0xC0 : 0xDB)
            escaped = false
          } else if byte == 0xDB {
            escaped = true
          } else {
            frame.append(byte)
          }
        }
        pending.removeFirst(end + 1)
        return OSCWire.reply(frame)
      }
      var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
      let left = deadline.timeIntervalSinceNow
      guard left > 0, poll(&poller, 1, Int32(left * 1000) + 1) == 1 else { return nil }
      var buffer = [UInt8](repeating: 0, count: 65_536)
      let count = recv(descriptor, &buffer, buffer.count, 0)
      guard count > 0 else { return nil }
      pending += buffer[..<count]
    }
  }

  /// True once the bridge has closed the connection (within `timeout` seconds).
  func closedByPeer(timeout: Double = 5) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    var buffer = [UInt8](repeating: 0, count: 4096)
    while deadline.timeIntervalSinceNow > 0 {
      var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
      guard poll(&poller, 1, 100) >= 0 else { return false }
      if poller.revents != 0 {
        let count = recv(descriptor, &buffer, buffer.count, 0)
        if count == 0 || (count < 0 && errno == ECONNRESET) { return true }
      }
    }
    return false
  }
}

/// `oscsend` from liblo-tools, as a show controller's script would run it.
func oscsend(_ arguments: [String]) throws -> ProcessOutcome {
  try runProcess("/usr/bin/oscsend", arguments)
}
