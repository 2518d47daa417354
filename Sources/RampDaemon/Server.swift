import FoundationEssentials
import Logging
import NIOCore
import NIOPosix
import RampAudio
import RampEngine
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// How many clients are connected: counted by the server, read by `status`.
public final class ConnectionCount: Sendable {
  let value = Atomic<Int>(0)
  public init() {}
}

/// The Unix-socket server: one line of JSON per request, one per reply or event.
public final class Server: @unchecked Sendable {
  public let path: String
  private let controller: Controller
  private var configuration: DaemonConfiguration { controller.configuration }
  private let logger: Logger
  /// The control loop: it serves every connection.
  private let loop: EventLoop
  private var channel: Channel?
  private var bell: Channel?
  /// `start` bound the socket at `path` (not inherited).
  private var boundHere = false
  /// Sends what the connections wrote, once per turn of the event loop.
  private let output: OutputFlusher
  /// How many clients are connected (shared with the controller's `status`).
  let connections: ConnectionCount
  /// The access rules of the running configuration, resolved once per change (a name lookup may be
  /// slow, and the event loop serves everyone).
  private let policies = Mutex<(access: AccessSettings, socket: SocketSettings, policy: AccessPolicy)?>(nil)

  public init(path: String, controller: Controller, connections: ConnectionCount = ConnectionCount(), logger: Logger) {
    self.path = path
    self.connections = connections
    self.controller = controller
    self.logger = logger
    loop = controller.control.eventLoop
    output = OutputFlusher(controller: controller)
  }

  /// The loop that serves every connection (and hands replies out): the controller's.
  public var eventLoop: EventLoop { loop }

  /// Binds the socket (replacing a stale one), sets its mode and group, and starts accepting.
  public func start() throws {
    _ = try accessPolicy(throwing: true)
    try Self.prepareDirectory(for: path)
    try Self.removeStaleSocket(at: path)
    let channel = try bootstrap().bind(unixDomainSocketPath: path).wait()
    boundHere = true
    try applyPermissions()
    self.channel = channel
    try watchEvents()
  }

  /// Serves on a socket that systemd (or a test harness) already bound and listens on.
  public func start(inheritedDescriptor descriptor: CInt) throws {
    _ = try accessPolicy(throwing: true)
    channel = try bootstrap().withBoundSocket(descriptor).wait()
    try watchEvents()
  }

  /// Replies and events are handed out on the event loop itself, woken by the player's doorbell:
  /// a reply crosses from the render thread straight to the loop that writes it.
  private func watchEvents() throws {
    let descriptor = dup(controller.player.eventDescriptor)
    guard descriptor >= 0 else { throw ServerError("cannot watch the player's events: \(errnoText())") }
    let controller = controller
    bell = try NIOPipeBootstrap(group: loop)
      .channelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
          try channel.pipeline.syncOperations.addHandler(EventBell(controller: controller))
        }
      }
      .takingOwnershipOfDescriptor(input: descriptor).wait()
  }

  public func shutdown() {
    try? bell?.close().wait()
    try? channel?.close().wait()
    // Only a socket rampd bound itself: an inherited one belongs to systemd's rampd.socket,
    // which keeps listening and starts rampd again on the next connection.
    if boundHere { unlink(path) }
  }

  private func bootstrap() -> ServerBootstrap {
    let controller = controller
    let logger = logger
    let clients = self
    let output = output
    return ServerBootstrap(group: loop)
      .serverChannelOption(.backlog, value: 64)
      .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
      // A client that has sent everything and shut its side (`socat`, `nc -N`, a script's
      // shutdown(SHUT_WR)) still gets its replies: the session closes once they are out.
      .childChannelOption(.allowRemoteHalfClosure, value: true)
      .childChannelInitializer { channel in
        // Read per connection, so a reload's limits apply to the next one.
        let configuration = controller.configuration
        let limit = configuration.limits.clients
        guard clients.connections.value.add(1, ordering: .relaxed).newValue <= limit else {
          clients.connections.value.subtract(1, ordering: .relaxed)
          let error = ProtocolError(.limitExceeded, "\(limit) clients are connected, the most allowed (limits.clients)")
          return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(Refusal(line: Reply.failure(id: nil, error: error)))
          }
        }
        channel.closeFuture.whenComplete { _ in clients.connections.value.subtract(1, ordering: .relaxed) }
        return PeerCredentials.read(from: channel).flatMapThrowing { peer in
          let policy = try? clients.accessPolicy(throwing: false)
          guard let peer, let policy, policy.admits(peer) else {
            let refusal =
              peer.map(AccessPolicy.refusal) ?? ProtocolError(.permissionDenied, "the peer's credentials are unknown")
            logger.notice("connection refused", metadata: ["reason": "\(refusal.message)"])
            try channel.pipeline.syncOperations.addHandler(Refusal(line: Reply.failure(id: nil, error: refusal)))
            return
          }
          let session = Session(
            channel: channel, controller: controller, peer: peer, confined: !policy.isOwner(peer),
            lineLength: configuration.limits.lineLength, output: output, logger: logger)
          try channel.pipeline.syncOperations.addHandler(session)
        }
      }
  }

  /// The access rules for the configuration now in force. A name that no longer resolves (a user
  /// deleted since the last reload) keeps the previous rules, with an error in the log.
  func accessPolicy(throwing: Bool) throws -> AccessPolicy {
    let configuration = configuration
    return try policies.withLock { cached in
      if let cached, cached.access == configuration.access, cached.socket == configuration.socket {
        return cached.policy
      }
      do {
        let policy = try AccessPolicy(access: configuration.access, socketGroup: configuration.socket.resolvedGroup())
        cached = (configuration.access, configuration.socket, policy)
        return policy
      } catch {
        if throwing { throw ServerError("\(error)") }
        logger.error("access rules not updated", metadata: ["error": "\(error)"])
        guard let old = cached?.policy else { throw ServerError("\(error)") }
        cached = (configuration.access, configuration.socket, old)
        return old
      }
    }
  }

  private func applyPermissions() throws {
    let mode = configuration.socket.resolvedMode()
    guard chmod(path, mode_t(mode)) == 0 else {
      throw ServerError("cannot set mode \(String(mode, radix: 8)) on \(path): \(errnoText())")
    }
    if let name = configuration.socket.resolvedGroup() {
      guard let entry = getgrnam(name) else { throw ServerError("socket.group: no group '\(name)'") }
      guard chown(path, uid_t.max, entry.pointee.gr_gid) == 0 else {
        throw ServerError("cannot give \(path) to group '\(name)': \(errnoText())")
      }
    }
  }

  static func prepareDirectory(for path: String) throws {
    let directory = directoryPart(of: path)
    guard !directory.isEmpty else { return }
    do {
      try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    } catch {
      throw ServerError("cannot create \(directory) for the socket: \(failureReason(error))")
    }
  }

  /// A socket file left by a daemon that died is removed; one that answers means a daemon runs.
  static func removeStaleSocket(at path: String) throws {
    var info = stat()
    guard lstat(path, &info) == 0 else { return }
    guard (info.st_mode & S_IFMT) == S_IFSOCK else {
      throw ServerError("\(path) exists and is not a socket; refusing to replace it")
    }
    try refuseLiveListener(at: path)
    unlink(path)
  }

  /// Throws when a daemon answers at `path` (a socket file left by one that died does not).
  static func refuseLiveListener(at path: String) throws {
    if let probe = try? SocketProbe.connect(path) {
      Glibc.close(probe)
      throw ServerError("another rampd is already listening on \(path); this one stops without touching anything")
    }
  }
}

public struct ServerError: Error, CustomStringConvertible {
  public let description: String
  init(_ description: String) { self.description = description }
}

func errnoText() -> String { String(cString: strerror(errno)) }

/// A blocking connect, to tell a live socket from a stale file.
enum SocketProbe {
  static func connect(_ path: String) throws -> CInt {
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw ServerError(errnoText()) }
    guard let address = UnixAddress(path) else {
      Glibc.close(descriptor)
      throw ServerError("socket path too long")
    }
    guard address.connect(descriptor) == 0 else {
      Glibc.close(descriptor)
      throw ServerError(errnoText())
    }
    return descriptor
  }
}

/// Splits the byte stream into lines (without the newline, or a CR before it); a line longer than
/// the limit is an error, so one client cannot make the daemon buffer without end. Lines are
/// handed out in place, from the bytes read: only a read that ends inside a line is appended to.
///
/// Pulled one line at a time, so no access to the framer is open while a line is handled: the
/// handling may close the connection, and with it end the reading.
struct LineFramer {
  let maximumLength: Int
  /// Bytes read and not yet handed out.
  private var unread: ByteBuffer?
  /// Bytes of `unread` already searched for a newline: a long line arriving in many reads is
  /// scanned once, not once per read (which took the event loop 90 s for a 15 MiB line).
  private var scanned = 0

  init(maximumLength: Int) { self.maximumLength = maximumLength }

  mutating func append(_ chunk: ByteBuffer) {
    guard var bytes = unread else {
      unread = chunk
      scanned = 0
      return
    }
    unread = nil  // the buffer is then not shared, so it grows in place
    bytes.writeImmutableBuffer(chunk)
    unread = bytes
  }

  /// The next complete line; nil until its newline has come.
  mutating func nextLine() throws(LineTooLong) -> ByteBufferView? {
    guard var bytes = unread else { return nil }
    let view = bytes.readableBytesView
    guard let newline = Self.newline(in: view, from: view.startIndex + scanned) else {
      guard view.count <= maximumLength else { throw LineTooLong(limit: maximumLength) }
      scanned = view.count
      return nil
    }
    let length = newline - view.startIndex
    guard length <= maximumLength else { throw LineTooLong(limit: maximumLength) }
    // Tolerate CRLF from hand-typed sessions (socat, nc).
    let end = length > 0 && view[newline - 1] == UInt8(ascii: "\r") ? newline - 1 : newline
    bytes.moveReaderIndex(forwardBy: length + 1)
    unread = bytes.readableBytes > 0 ? bytes : nil
    scanned = 0
    return view[view.startIndex..<end]
  }

  /// The index of the first newline at or after `start`, found with `memchr` over the bytes read
  /// (a byte-by-byte search of the view cost more than the rest of splitting the line).
  private static func newline(in view: ByteBufferView, from start: Int) -> Int? {
    view.withUnsafeBytes { bytes in
      let offset = start - view.startIndex
      guard offset < bytes.count, let base = bytes.baseAddress,
        let found = memchr(base + offset, Int32(UInt8(ascii: "\n")), bytes.count - offset)
      else { return nil }
      return view.startIndex + (base.distance(to: UnsafeRawPointer(found)))
    }
  }

  /// What is left once the client closed its side: a last line that no newline ended.
  mutating func remainder() -> ByteBufferView? {
    defer { unread = nil }
    guard let unread, unread.readableBytes > 0 else { return nil }
    return unread.readableBytesView
  }
}

/// Delivers the render thread's replies and events whenever its doorbell rings.
final class EventBell: ChannelInboundHandler, Sendable {
  typealias InboundIn = ByteBuffer
  let controller: Controller

  init(controller: Controller) { self.controller = controller }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

  func channelReadComplete(context: ChannelHandlerContext) { controller.deliverEvents() }
}

/// Says why a connection is refused, instead of the greeting, and closes it.
final class Refusal: ChannelInboundHandler, Sendable {
  typealias InboundIn = ByteBuffer
  typealias OutboundOut = ByteBuffer
  let text: String

  init(line: JSONValue) { text = line.serializedLine() }

  func channelActive(context: ChannelHandlerContext) {
    var buffer = context.channel.allocator.buffer(capacity: text.utf8.count)
    buffer.writeString(text)
    let channel = context.channel
    context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in channel.close(promise: nil) }
  }
}

struct LineTooLong: Error {
  let limit: Int
}
