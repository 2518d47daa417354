import Logging
import NIOCore
import NIOPosix
import RampAudio
import RampProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One connection: parses requests, hands them to the controller, writes replies and events, and
/// runs the connection's observers.
final class Session: ChannelInboundHandler, Client, HandOverTarget, @unchecked Sendable {
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
  /// The key paths this connection observes (event-loop thread only): the controller starts and
  /// stops them, the connection ends them when it goes.
  private lazy var observing = ConnectionObservers(
    loop: channel.eventLoop, budget: controller.observeBudget, player: controller.player
  ) { [weak self] line in self?.event(line) }
  var observers: ConnectionObservers? { observing }
  /// Requests that came while an earlier one of this connection's waits for the disk (opening a
  /// file, saving a schedule): handed to the controller in turn, once that one is handed on, so a
  /// connection's commands take effect in the order they came (event-loop thread only).
  private var waiting = CircularBuffer<(request: Request, sequence: Int)>()
  /// A request of this connection's is being handed on (event-loop thread only).
  private var handingOn = false
  /// `handOnWaiting` is under way (event-loop thread only).
  private var drainingWaiting = false
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
    observing.stopAll()
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
      case .observe, .unobserve:
        // Answered at once, whatever this connection's earlier commands still wait for.
        controller.handle(request, from: self, sequence: sequence)
      default:
        // Nothing of this connection's waits: straight on, without a trip through the queue.
        guard handingOn || drainingWaiting || !waiting.isEmpty else {
          handingOn = true
          controller.handle(request, from: self, sequence: sequence, handedOver: HandOver(self))
          return
        }
        waiting.append((request, sequence))
        handOnWaiting()
      }
    }
  }

  /// Hands the waiting requests to the controller, one after another; one that waits for the disk
  /// is handed on later (`handedOn`), and the rest wait for it.
  private func handOnWaiting() {
    // One handed on at once calls back from within `handle`: the loop below takes the next.
    guard !drainingWaiting else { return }
    drainingWaiting = true
    defer { drainingWaiting = false }
    while !handingOn, let next = waiting.popFirst() {
      handingOn = true
      controller.handle(next.request, from: self, sequence: next.sequence, handedOver: HandOver(self))
    }
  }

  func handedOn() {
    channel.eventLoop.preconditionInEventLoop()
    handingOn = false
    handOnWaiting()
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
    let waiting = !observing.isEmpty || unanswered.load(ordering: .relaxed) > 0 || controller.isSubscribed(self)
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
