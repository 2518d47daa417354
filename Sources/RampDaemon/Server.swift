import Foundation
import Logging
import NIOCore
import NIOPosix
import RampAudio
import RampProtocol
import Synchronization

/// The Unix-socket server: one line of JSON per request, one per reply or event.
public final class Server: @unchecked Sendable {
  public let path: String
  private let controller: Controller
  private var configuration: DaemonConfiguration { controller.configuration }
  private let logger: Logger
  private let group: MultiThreadedEventLoopGroup
  private var channel: Channel?
  private var bell: Channel?
  /// Sends what the connections wrote, once per turn of the event loop.
  private let output: OutputFlusher
  let clientCount = Atomic<Int>(0)
  /// The access rules of the running configuration, resolved once per change (a name lookup may be
  /// slow, and the event loop serves everyone).
  private let policies = Mutex<(access: AccessSettings, socket: SocketSettings, policy: AccessPolicy)?>(nil)

  public init(path: String, controller: Controller, logger: Logger) {
    self.path = path
    self.controller = controller
    self.logger = logger
    group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    output = OutputFlusher(controller: controller)
  }

  /// The loop that serves every connection (and hands replies out).
  public var eventLoop: EventLoop { group.next() }

  /// Binds the socket (replacing a stale one), sets its mode and group, and starts accepting.
  public func start() throws {
    _ = try accessPolicy(throwing: true)
    try Self.prepareDirectory(for: path)
    try Self.removeStaleSocket(at: path)
    let channel = try bootstrap().bind(unixDomainSocketPath: path).wait()
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
    bell = try NIOPipeBootstrap(group: group)
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
    try? group.syncShutdownGracefully()
    if channel?.localAddress?.pathname == path { unlink(path) }
  }

  private func bootstrap() -> ServerBootstrap {
    let controller = controller
    let logger = logger
    let clients = self
    let output = output
    return ServerBootstrap(group: group)
      .serverChannelOption(.backlog, value: 64)
      .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
      // A client that has sent everything and shut its side (`socat`, `nc -N`, a script's
      // shutdown(SHUT_WR)) still gets its replies: the session closes once they are out.
      .childChannelOption(.allowRemoteHalfClosure, value: true)
      .childChannelInitializer { channel in
        // Read per connection, so a reload's limits apply to the next one.
        let configuration = controller.configuration
        let limit = configuration.limits.clients
        guard clients.clientCount.add(1, ordering: .relaxed).newValue <= limit else {
          clients.clientCount.subtract(1, ordering: .relaxed)
          let error = ProtocolError(.limitExceeded, "\(limit) clients are connected, the most allowed (limits.clients)")
          return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(Refusal(line: Reply.failure(id: nil, error: error)))
          }
        }
        channel.closeFuture.whenComplete { _ in clients.clientCount.subtract(1, ordering: .relaxed) }
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
    let directory = (path as NSString).deletingLastPathComponent
    guard !directory.isEmpty else { return }
    do {
      try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    } catch {
      throw ServerError("cannot create \(directory) for the socket: \(error.localizedDescription)")
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

/// One connection: parses requests, hands them to the controller, writes replies and events, and
/// runs the connection's observers.
final class Session: ChannelInboundHandler, Client, @unchecked Sendable {
  typealias InboundIn = ByteBuffer
  typealias OutboundOut = ByteBuffer

  private let channel: Channel
  private let controller: Controller
  private var configuration: DaemonConfiguration { controller.configuration }
  private let logger: Logger
  private let output: OutputFlusher
  /// Output written and not yet sent (event-loop thread only): `output` sends it.
  private var unsent = false
  /// Where a reply is serialised before it is copied to the socket's buffer, kept from one to the
  /// next (event-loop thread only).
  private var scratch: [UInt8] = []
  /// Requests arrive as lines (event-loop thread only).
  private var framer: LineFramer
  /// Set once the connection closed, or is being closed for a line over the limit: no further
  /// line is handled.
  private var closing = false
  /// While the lines of a read are being handled (a reply that fails can close the connection
  /// meanwhile).
  private var handlingLines = false
  /// Set once the client shut its sending side: the connection closes when every request read
  /// has its reply written.
  private var inputClosed = false
  /// Observed key paths (event-loop thread only).
  private var observers: [String: Observer] = [:]
  /// Commands that open files run here, so that never stalls the event loop that serves every
  /// client; the others run on the event loop, unless one of this connection's is still queued
  /// here (its commands take effect in the order they came).
  private let commands = DispatchQueue(label: "rampd.session")
  private let queued = Atomic<Int>(0)
  /// Requests read and not yet answered.
  private let unanswered = Atomic<Int>(0)
  let peer: Peer
  let confinedToMediaRoots: Bool
  /// When the last complete request arrived (event-loop thread only): a client that trickles a
  /// line byte by byte is as idle as one that sends nothing.
  private var lastRequest = NIODeadline.now()
  private var idleCheck: Scheduled<Void>?
  /// Flow control: the connection is not read while its unsent output is past the high water mark
  /// or this many of its requests await replies, so a client that floods without reading holds a
  /// bounded amount of the daemon's memory (and the kernel's socket buffers hold the rest).
  static let maximumInFlight = 4096
  private let readingPaused = Atomic<Bool>(false)
  /// Replies leave in request order (PROTOCOL.md §1), yet some are ready before an earlier one: a
  /// refusal found while parsing, `subscribe`, `observe` or `version` are answered at once, while an
  /// earlier command may still wait for the render thread. The rest is event-loop only.
  private var nextSequence = 0
  /// The requests whose replies keep request order and are not written yet, oldest first.
  private var inOrder = CircularBuffer<Int>()
  /// Replies ready before an earlier one, by request.
  private var held: [Int: JSONValue] = [:]
  /// `wait` (when its animations end) and a plain `at` (when it takes effect) reply whenever.
  private var anyOrder = Set<Int>()

  /// Lives on the connection's event loop only.
  final class Observer: @unchecked Sendable {
    let published: PublishedValue
    /// Hz, taken from the daemon's observe budget until the observation stops.
    let rate: Double
    var task: RepeatedTask?
    var last: Double?
    init(published: PublishedValue, rate: Double) {
      self.published = published
      self.rate = rate
    }
  }

  init(
    channel: Channel, controller: Controller, peer: Peer, confined: Bool, lineLength: Int, output: OutputFlusher,
    logger: Logger
  ) {
    self.channel = channel
    self.output = output
    framer = LineFramer(maximumLength: lineLength)
    self.controller = controller
    self.peer = peer
    confinedToMediaRoots = confined
    self.logger = logger
  }

  func channelActive(context: ChannelHandlerContext) {
    write(Greeting.line(version: RampdVersion.current))
    scheduleIdleCheck(after: nil)
    context.fireChannelActive()
  }

  func channelInactive(context: ChannelHandlerContext) {
    handleLastLine()
    closing = true
    idleCheck?.cancel()
    for observer in observers.values { stop(observer) }
    observers = [:]
    controller.disconnected(self)
    context.fireChannelInactive()
  }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    guard !closing else { return }
    defer { updateReading() }
    framer.append(unwrapInboundIn(data))
    handlingLines = true
    defer { handlingLines = false }
    do {
      while !closing, let line = try framer.nextLine() { handle(line: line) }
    } catch {
      closing = true
      close(with: Reply.failure(id: nil, error: ProtocolError.lineTooLong(limit: error.limit)))
    }
  }

  /// The client has sent everything (a half-close; a client that closed both ways comes here
  /// too, before the connection goes). The requests read are answered, then the connection closes.
  func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
    guard let event = event as? ChannelEvent, event == .inputClosed else {
      context.fireUserInboundEventTriggered(event)
      return
    }
    handleLastLine()
    inputClosed = true
    closeOnceAnswered()
  }

  /// A last line without a newline still counts, unless the connection went while the lines
  /// before it were handled.
  private func handleLastLine() {
    if !closing && !handlingLines, let last = framer.remainder() { handle(line: last) }
  }

  /// After a half-close: closes the connection once every reply is written (and flushed).
  private func closeOnceAnswered() {
    guard inputClosed, !closing, unanswered.load(ordering: .relaxed) == 0 else { return }
    closing = true
    idleCheck?.cancel()
    close(after: channel.allocator.buffer(capacity: 0))
  }

  /// One request line.
  private func handle(line bytes: ByteBufferView) {
    lastRequest = .now()
    if bytes.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) { return }
    // Every request gets exactly one reply, through `reply`.
    unanswered.add(1, ordering: .relaxed)
    let sequence = nextSequence
    nextSequence += 1
    let (id, result) = Request.parse(
      utf8: bytes, options: ParseOptions(decibelFloor: controller.live.read { $0.fades.decibelFloor }))
    switch result {
    case .failure(let error):
      inOrder.append(sequence)
      reply(Reply.failure(id: id, error: error), sequence: sequence)
    case .success(let request):
      if case .wait = request.command {
        anyOrder.insert(sequence)
      } else if request.at != nil && request.ack != .scheduled {
        anyOrder.insert(sequence)
      } else {
        inOrder.append(sequence)
      }
      switch request.command {
      case .observe(let key, let rate):
        reply(observe(key, rate: rate, id: request.id), sequence: sequence)
      case .unobserve(let key):
        reply(unobserve(key, id: request.id), sequence: sequence)
      default:
        let controller = controller
        // Saving a schedule waits for the disk: that too runs off the event loop.
        if !request.command.opensFiles && request.at == nil && queued.load(ordering: .acquiring) == 0 {
          controller.handle(request, from: self, sequence: sequence)
          return
        }
        queued.add(1, ordering: .relaxed)
        commands.async { [self] in
          controller.handle(request, from: self, sequence: sequence)
          queued.subtract(1, ordering: .releasing)
        }
      }
    }
  }

  func errorCaught(context: ChannelHandlerContext, error: Error) {
    logger.debug("connection error", metadata: ["error": "\(error)"])
    context.close(promise: nil)
  }

  // MARK: Idle connections

  /// Checks again after `delay`, or after the idle timeout. With no timeout configured it looks
  /// every minute, so a reload that sets one reaches connections already open.
  private func scheduleIdleCheck(after delay: TimeAmount?) {
    let timeout = configuration.limits.idleTimeout
    let wait = delay ?? (timeout > 0 ? .nanoseconds(Int64(timeout * 1e9)) : .seconds(60))
    idleCheck = channel.eventLoop.scheduleTask(in: wait) { [weak self] in self?.checkIdle() }
  }

  /// Closes a connection that sent no request for `limits.idle-timeout` and waits for nothing: no
  /// subscription, no observer, no reply due.
  private func checkIdle() {
    let timeout = configuration.limits.idleTimeout
    guard timeout > 0, channel.isActive else {
      if channel.isActive { scheduleIdleCheck(after: nil) }
      return
    }
    let limit = TimeAmount.nanoseconds(Int64(timeout * 1e9))
    let idle = NIODeadline.now() - lastRequest
    let waiting = !observers.isEmpty || unanswered.load(ordering: .relaxed) > 0 || controller.isSubscribed(self)
    guard idle >= limit, !waiting else {
      scheduleIdleCheck(after: idle >= limit ? limit : limit - idle)
      return
    }
    logger.info("closing an idle connection", metadata: ["peer": "\(peer)"])
    let error = ProtocolError(
      .timeout, "no request for \(ConfigText.duration(timeout)) (limits.idle-timeout); closing the connection")
    close(with: Reply.failure(id: nil, error: error))
  }

  /// Sends a last line, then closes the connection.
  private func close(with line: JSONValue) {
    var buffer = channel.allocator.buffer(capacity: 256)
    buffer.writeString(line.serializedLine())
    close(after: buffer)
  }

  /// Closes the connection once `bytes`, and everything written before them, are sent.
  private func close(after bytes: ByteBuffer) {
    let channel = channel
    // What the replies written before acknowledge is in the journal before they leave.
    controller.persistence?.writeJournal()
    channel.writeAndFlush(bytes).whenComplete { _ in channel.close(promise: nil) }
  }

  // MARK: Client

  func channelWritabilityChanged(context: ChannelHandlerContext) {
    updateReading()
    context.fireChannelWritabilityChanged()
  }

  /// Pauses or resumes reading requests (see `maximumInFlight`). Event loop only.
  private func updateReading() {
    let read = channel.isWritable && unanswered.load(ordering: .relaxed) < Self.maximumInFlight
    guard read == readingPaused.load(ordering: .relaxed) else { return }
    readingPaused.store(!read, ordering: .relaxed)
    channel.setOption(ChannelOptions.autoRead, value: read).whenFailure { _ in }
  }

  func reply(_ line: JSONValue, sequence: Int) {
    let loop = channel.eventLoop
    if loop.inEventLoop {
      deliver(line, sequence: sequence)
    } else {
      // Written from the loop only, so a reply handed over from another thread cannot be
      // overtaken there by a later one written directly.
      loop.execute { self.deliver(line, sequence: sequence) }
    }
  }

  private func deliver(_ line: JSONValue, sequence: Int) {
    unanswered.subtract(1, ordering: .relaxed)
    if readingPaused.load(ordering: .relaxed) { updateReading() }
    defer { closeOnceAnswered() }
    if anyOrder.remove(sequence) != nil {
      write(line)
      return
    }
    guard inOrder.first == sequence else {
      held[sequence] = line
      return
    }
    inOrder.removeFirst()
    write(line)
    while let next = inOrder.first, let ready = held.removeValue(forKey: next) {
      inOrder.removeFirst()
      write(ready)
    }
  }

  var awaitsNoOtherReply: Bool { unanswered.load(ordering: .relaxed) == 1 }

  func event(_ line: String) {
    // Written from the loop only (a reload's event comes from another thread).
    guard channel.eventLoop.inEventLoop else {
      channel.eventLoop.execute { self.event(line) }
      return
    }
    // A subscriber that does not read loses events instead of holding the daemon's memory.
    guard channel.isWritable else { return }
    write(text: line)
  }

  private func write(_ line: JSONValue) {
    scratch.removeAll(keepingCapacity: true)
    line.write(into: &scratch)
    scratch.append(UInt8(ascii: "\n"))
    var buffer = channel.allocator.buffer(capacity: scratch.count)
    buffer.writeBytes(scratch)
    send(buffer)
  }

  private func write(text: String) {
    var buffer = channel.allocator.buffer(capacity: text.utf8.count)
    buffer.writeString(text)
    send(buffer)
  }

  /// Writes `buffer` now and has it sent at the end of this turn of the event loop, with whatever
  /// else this and the other connections write meanwhile.
  private func send(_ buffer: ByteBuffer) {
    channel.write(buffer, promise: nil)
    guard !unsent else { return }
    unsent = true
    output.sendLater(self)
  }

  var eventLoop: EventLoop { channel.eventLoop }

  /// Sends what was written (the flusher calls it, on the event loop).
  func sendWritten() {
    unsent = false
    channel.flush()
  }

  // MARK: Observe

  private func observe(_ key: String, rate: Double, id: JSONValue?) -> JSONValue {
    do {
      try Preparation.checkAddressable(key)
    } catch {
      return Reply.failure(id: id, error: error)
    }
    let limits = configuration.limits
    guard rate <= limits.maxObserveRate else {
      return Reply.failure(
        id: id,
        error: ProtocolError(
          .outOfRange, field: "rate", "\(rate) Hz is above limits.max-observe-rate (\(limits.maxObserveRate) Hz)"))
    }
    if observers[key] == nil && observers.count >= limits.observersPerClient {
      return Reply.failure(
        id: id,
        error: ProtocolError(
          .limitExceeded, field: "key", "\(limits.observersPerClient) key paths are observed, the most allowed"))
    }
    let replaced = observers[key]?.rate ?? 0
    if let total = controller.observeBudget.take(rate, replacing: replaced, limit: limits.observeBudget) {
      return Reply.failure(
        id: id,
        error: ProtocolError(
          .limitExceeded, field: "rate",
          "rate: \(JSONValue.format(rate)) Hz would bring the observe rates of every connection to"
            + " \(JSONValue.format(total)) Hz, above limits.observe-budget (\(JSONValue.format(limits.observeBudget)) Hz)"
        ))
    }
    if let old = observers.removeValue(forKey: key) { stop(old) }
    let published: PublishedValue
    do {
      published = try controller.player.publish(key)
    } catch {
      controller.observeBudget.release(rate)
      return Reply.failure(id: id, error: Controller.refusal(error))
    }
    let observer = Observer(published: published, rate: rate)
    let interval = TimeAmount.nanoseconds(Int64(1e9 / rate))
    observer.task = channel.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) {
      [weak self, observer] _ in
      self?.report(observer)
    }
    observers[key] = observer
    return Reply.success(id: id, result: ["key": .string(key), "rate": .number(rate)])
  }

  /// Sends the observed value when it changed since the last report (and the first time).
  private func report(_ observer: Observer) {
    let (value, sample) = observer.published.latest
    guard sample >= 0, !value.isNaN, value != observer.last else { return }
    observer.last = value
    event(Event.value(key: observer.published.keyPath, value: value, sample: sample).json.serializedLine())
  }

  private func unobserve(_ key: String?, id: JSONValue?) -> JSONValue {
    let keys = key.map { [$0] } ?? Array(observers.keys)
    if let key, observers[key] == nil {
      return Reply.failure(id: id, error: ProtocolError(.invalidField, field: "key", "key: '\(key)' is not observed"))
    }
    for key in keys {
      if let observer = observers.removeValue(forKey: key) { stop(observer) }
    }
    return Reply.success(id: id, result: ["keys": .array(keys.sorted().map { .string($0) })])
  }

  private func stop(_ observer: Observer) {
    controller.observeBudget.release(observer.rate)
    observer.task?.cancel()
    controller.player.unpublish(observer.published)
  }
}

extension Command {
  /// Whether preparing it opens files (so it may block on a slow disk, or measure a file's
  /// loudness): a queue command opens the item that follows the playing one.
  var opensFiles: Bool {
    switch self {
    case .play, .queueAdd, .queueRemove, .queueClear, .skip: true
    case .batch(let requests): requests.contains { $0.command.opensFiles }
    default: false
    }
  }
}
