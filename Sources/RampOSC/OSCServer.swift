import FoundationEssentials
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Which replies are sent back.
enum ReplyMode: String, CaseIterable, Sendable {
  case all
  case errors
  case none
}

/// What rampd-osc is told on its command line.
struct OSCSettings: Sendable {
  var listen: SocketAddress
  var allow: [SourceRange]
  var space: AddressSpace
  var socket: String
  var replies: ReplyMode
  /// Replies to UDP senders go to this port of the sender's address instead of the port it sent from.
  var replyPort: UInt16?
}

/// The OSC side: one UDP socket and one TCP listener on the same address and port, a poll loop
/// reading packets (UDP datagrams, SLIP frames on TCP), and replies sent back to each sender.
final class OSCServer: @unchecked Sendable {
  /// The largest packet read: a UDP datagram's payload, a SLIP frame.
  static let maxPacket = 65_536
  static let maxConnections = 32

  private final class Connection {
    let descriptor: CInt
    let address: SocketAddress
    var decoder = StreamDecoder(maxFrame: OSCServer.maxPacket)
    var closing = false
    init(descriptor: CInt, address: SocketAddress) {
      self.descriptor = descriptor
      self.address = address
    }
  }

  private let settings: OSCSettings
  private let log = RateLimitedLog()
  private var link: RampdLink!
  private let udp: CInt
  private let tcp: CInt
  /// The port both listen on (the one given, or the one the system chose for port 0).
  let port: UInt16
  private let lock = Mutex<Void>(())
  private var connections: [Int: Connection] = [:]
  private var nextConnection = 1

  init(settings: OSCSettings) throws(Refusal) {
    self.settings = settings
    (udp, tcp, port) = try Self.bind(settings.listen)
    link = RampdLink(path: settings.socket, log: log) { [unowned self] peer, address, outcome in
      reply(to: peer, address: address, outcome)
    }
  }

  /// A UDP socket and a TCP listener on `address`; with port 0, a port free for both.
  private static func bind(_ address: SocketAddress) throws(Refusal) -> (CInt, CInt, UInt16) {
    var lastError = ""
    for _ in 0..<(address.port == 0 ? 20 : 1) {
      let udp = socket(address.family, Int32(SOCK_DGRAM.rawValue), 0)
      guard udp >= 0 else { throw Refusal(code: "listen", message: "socket: \(SystemError.text)") }
      guard address.withSockaddr({ Glibc.bind(udp, $0, $1) }) == 0 else {
        lastError = SystemError.text
        close(udp)
        break
      }
      var bound = sockaddr_storage()
      var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
      _ = withUnsafeMutablePointer(to: &bound) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(udp, $0, &length) }
      }
      let port = SocketAddress(storage: bound, length: length).port
      let tcp = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
      var yes: Int32 = 1
      setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
      if address.with(port: port).withSockaddr({ Glibc.bind(tcp, $0, $1) }) == 0 && listen(tcp, 16) == 0 {
        for descriptor in [udp, tcp] { _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK) }
        var size: Int32 = 1 << 20
        setsockopt(udp, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        return (udp, tcp, port)
      }
      lastError = SystemError.text
      close(udp)
      close(tcp)
    }
    throw Refusal(code: "listen", message: "cannot listen on \(address): \(lastError)")
  }

  /// Serves until the process is stopped.
  func run() -> Never {
    // A parent may have started it with signals blocked (SIGTERM among them): stopping must work.
    var none = sigset_t()
    sigemptyset(&none)
    pthread_sigmask(SIG_SETMASK, &none, nil)
    signal(SIGPIPE, SIG_IGN)
    let shown = settings.listen.with(port: port)
    writeText(
      "rampd-osc: listening on \(shown) (UDP, and TCP: SLIP or size-prefixed packets) for rampd at \(settings.socket)\n",
      to: STDERR_FILENO)
    link.start()
    var buffer = [UInt8](repeating: 0, count: Self.maxPacket)
    while true {
      let open = lock.withLock { _ in connections.map { ($0.key, $0.value) } }
      var polled = [
        pollfd(fd: udp, events: Int16(POLLIN), revents: 0), pollfd(fd: tcp, events: Int16(POLLIN), revents: 0),
      ]
      polled += open.map { pollfd(fd: $0.1.descriptor, events: Int16(POLLIN), revents: 0) }
      let ready = poll(&polled, nfds_t(polled.count), 1000)
      if ready < 0 {
        if errno == EINTR { continue }
        log("poll failed: \(SystemError.text)")
        sleep(1)
        continue
      }
      if polled[0].revents != 0 { readDatagrams(&buffer) }
      if polled[1].revents != 0 { accept() }
      for (index, entry) in open.enumerated() where polled[index + 2].revents != 0 {
        readStream(entry.0, entry.1, &buffer)
      }
    }
  }

  // MARK: Receiving

  /// Every datagram waiting (at most 256 at a time, so TCP gets its turn in a flood).
  private func readDatagrams(_ buffer: inout [UInt8]) {
    for _ in 0..<256 {
      var from = sockaddr_storage()
      var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
      let count = buffer.withUnsafeMutableBytes { raw in
        withUnsafeMutablePointer(to: &from) {
          $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            recvfrom(udp, raw.baseAddress, raw.count, 0, $0, &length)
          }
        }
      }
      guard count >= 0 else { return }
      let source = SocketAddress(storage: from, length: length)
      guard allowed(source) else { continue }
      handle(Array(buffer[..<count]), from: .udp(source), source: source, transport: "UDP")
    }
  }

  private func allowed(_ source: SocketAddress) -> Bool {
    if settings.allow.contains(where: { $0.contains(source) }) { return true }
    log("\(source): not in the allowed sources (--allow); ignored")
    return false
  }

  private func accept() {
    var from = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    let descriptor = withUnsafeMutablePointer(to: &from) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(tcp, $0, &length) }
    }
    guard descriptor >= 0 else { return }
    let source = SocketAddress(storage: from, length: length)
    guard allowed(source) else {
      close(descriptor)
      return
    }
    let admitted = lock.withLock { _ -> Bool in
      guard connections.count < Self.maxConnections else { return false }
      _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
      connections[nextConnection] = Connection(descriptor: descriptor, address: source)
      nextConnection += 1
      return true
    }
    if !admitted {
      log("\(source): refused, \(Self.maxConnections) TCP connections are open")
      close(descriptor)
    }
  }

  private func readStream(_ number: Int, _ connection: Connection, _ buffer: inout [UInt8]) {
    let count = recv(connection.descriptor, &buffer, buffer.count, 0)
    if count < 0 && (errno == EAGAIN || errno == EINTR) && !connection.closing { return }
    guard count > 0, !connection.closing else {
      drop(number)
      return
    }
    for output in connection.decoder.push(buffer[..<count]) {
      switch output {
      case .packet(let packet):
        handle(packet, from: .tcp(number), source: connection.address, transport: "TCP")
      case .error(let reason):
        log("\(connection.address) (TCP): \(reason); closing the connection")
        drop(number)
        return
      }
    }
  }

  /// Closes connection `number` (on the poll loop's thread only, so a descriptor is never closed
  /// while a reply is written to it).
  private func drop(_ number: Int) {
    lock.withLock { _ in
      if let connection = connections.removeValue(forKey: number) { close(connection.descriptor) }
    }
  }

  /// One packet: its messages become requests to rampd; a malformed one is logged and dropped.
  private func handle(_ packet: [UInt8], from peer: Peer, source: SocketAddress, transport: String) {
    let messages: [OSCMessage]
    do {
      messages = try OSCCodec.decode(packet)
    } catch {
      log("\(source) (\(transport)): a malformed packet of \(packet.count) bytes, ignored: \(error)")
      return
    }
    for together in messages.takingEffectTogether {
      let addresses = together.map(\.address)
      let request: JSONObject
      let failure: Refusal
      let failed: Int?
      do {
        request = try settings.space.request(for: together)
        do {
          try link.send(request, from: peer, addresses: addresses)
          continue
        } catch {
          (failure, failed) = (error, nil)
        }
      } catch {
        (failure, failed) = (error.refusal, error.failed)
      }
      let named = failed.map { "\(together[$0].address) \(together[$0].typeTags)" }
      log(
        "\(source) (\(transport)) \(named ?? addresses.joined(separator: " ")): \(failure.code): \(failure.message)")
      for answer in RampdLink.outcomes(addresses: addresses, failed: failed, failure) {
        reply(to: peer, address: answer.address, answer.outcome)
      }
    }
  }

  // MARK: Replying

  /// `/rampd/reply ,ss address result` or `/rampd/error ,sss address code message`, to the sender.
  private func reply(to peer: Peer, address: String, _ outcome: Outcome) {
    let packet: [UInt8]
    switch (outcome, settings.replies) {
    case (_, .none), (.success, .errors): return
    case (.success(let result), _):
      packet = OSCCodec.encode(address: "/rampd/reply", strings: [address, result.serialized()])
    case (.failure(let code, let message), _):
      packet = OSCCodec.encode(address: "/rampd/error", strings: [address, code, message])
    }
    switch peer {
    case .udp(let source):
      let destination = settings.replyPort.map { source.with(port: $0) } ?? source
      let sent = packet.withUnsafeBytes { raw in
        destination.withSockaddr { sendto(udp, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT), $0, $1) }
      }
      if sent < 0 { log("\(destination): a reply could not be sent: \(SystemError.text)") }
    case .tcp(let number):
      lock.withLock { _ in
        guard let connection = connections[number], !connection.closing else { return }
        // Answered in the framing it sends.
        let framed =
          connection.decoder.framing == .sizePrefixed
          ? (0..<4).map { UInt8(truncatingIfNeeded: packet.count >> (24 - 8 * $0)) } + packet : OSCCodec.slip(packet)
        let sent = framed.withUnsafeBytes {
          send(connection.descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
        }
        if sent != framed.count {
          // A sender that does not read its replies is let go; the poll loop closes it.
          log("\(connection.address) (TCP): does not read its replies; closing the connection")
          connection.closing = true
          shutdown(connection.descriptor, Int32(SHUT_RDWR))
        }
      }
    }
  }
}
