import NIOCore
import NIOWebSocket
import RampClient
import RampProtocol

/// One page's WebSocket: a rampd connection of its own, with every line relayed both ways.
///
/// The page speaks rampd's protocol (PROTOCOL.md) through it: each text message is one request
/// line, each message back one line from rampd. rampd-web adds lines of its own, told apart by a
/// `web` member: `{"web":"connected","server":"rampd","version":…,"socket":…}` once rampd's
/// greeting is read, `{"web":"disconnected","message":…}` when rampd cannot be reached or goes
/// away (the WebSocket then closes), `{"web":"refused","message":…}` for a message that is not
/// one line of text, or one sent while `maximumEarly` wait for rampd's greeting or to be written to rampd. A page
/// that reads slower than rampd writes, `maximumWaiting` lines behind, is closed (1008) rather
/// than sent a part of what rampd said: it reconnects and reads the state afresh.
///
/// The last handler of the WebSocket's pipeline, after SwiftNIO's frame decoder and encoder:
/// everything here runs on the channel's event loop; the link's reader thread and its writer
/// come back to it through `eventLoop.execute`.
final class LiveRelay: ChannelInboundHandler, RemovableChannelHandler {
  typealias InboundIn = WebSocketFrame
  typealias OutboundOut = WebSocketFrame

  /// A request line may hold at most this (rampd's default `[limits] line-length`); a longer
  /// message closes the WebSocket (1009, message too big).
  static let maximumMessage = 65_536
  /// The longest frame SwiftNIO's decoder takes: longer than a message, so that a message too
  /// long is read whole and answered with a close (1009) the page receives. A frame longer than
  /// this is refused by the decoder before it is read, and the page may see the connection reset.
  static let maximumFrame = 1 << 20
  /// Lines from rampd kept while the page reads slower than rampd writes.
  static let maximumWaiting = 4096
  /// The page's messages kept until rampd's greeting is read, or not yet written to rampd.
  static let maximumEarly = 256
  /// How long the page has to answer a close before the connection is dropped.
  static let closeGrace: TimeAmount = .seconds(2)

  let socket: String
  private var context: ChannelHandlerContext?
  private var link: RampdLink?
  /// The page's messages before rampd's greeting was read, sent once it is.
  private var early: [String] = []
  /// Lines from rampd waiting for the channel to become writable.
  private var waiting = CircularBuffer<String>()
  /// A fragmented message being put together: its opcode and what has come of it.
  private var partial: (opcode: WebSocketOpcode, data: ByteBuffer)?
  /// A close frame was sent: nothing more goes out.
  private var closeSent = false

  init(socket: String) { self.socket = socket }

  func handlerAdded(context: ChannelHandlerContext) {
    self.context = context
    let relay = NIOLoopBound(self, eventLoop: context.eventLoop)
    RampdLink.open(path: socket) { result in
      relay.eventLoop.execute { relay.value.opened(result, relay: relay) }
    }
  }

  func handlerRemoved(context: ChannelHandlerContext) {
    link?.close()
    link = nil
    self.context = nil
  }

  func channelInactive(context: ChannelHandlerContext) {
    // The page went away: its rampd connection goes too.
    link?.close()
    link = nil
    context.fireChannelInactive()
  }

  /// rampd answered, or could not be reached.
  private func opened(_ result: Result<RampdLink, any Error>, relay: NIOLoopBound<LiveRelay>) {
    guard let context, context.channel.isActive, !closeSent else {
      // The page left while rampd-web was connecting.
      if case .success(let link) = result { link.close() }
      return
    }
    switch result {
    case .failure(let error):
      send(Self.webLine("disconnected", ["message": .string("\(error)")]))
      close(.normalClosure, reason: "")
    case .success(let link):
      self.link = link
      send(
        Self.webLine(
          "connected", ["server": .string("rampd"), "version": .string(link.serverVersion), "socket": .string(socket)]))
      link.start { output in relay.eventLoop.execute { relay.value.fromRampd(output) } }
      for line in early { forward(line, relay: relay) }
      early = []
    }
  }

  /// A line from rampd, or its going away.
  private func fromRampd(_ output: RampdLink.Output) {
    guard let context, !closeSent else { return }
    switch output {
    case .line(let text):
      if context.channel.isWritable && waiting.isEmpty {
        send(text)
      } else if waiting.count < Self.maximumWaiting {
        waiting.append(text)
      } else {
        // Dropping a line would leave the page believing what rampd no longer says.
        link?.close()
        link = nil
        close(.policyViolation, reason: "the page fell \(Self.maximumWaiting) lines behind rampd")
      }
    case .ended(let reason):
      link?.close()
      link = nil
      while let line = waiting.popFirst() { send(line, flush: false) }
      send(Self.webLine("disconnected", ["message": .string(reason)]))
      // The page reconnects; its messages would have nowhere to go.
      close(.goingAway, reason: "rampd went away")
    }
  }

  func channelWritabilityChanged(context: ChannelHandlerContext) {
    while context.channel.isWritable, !closeSent, let line = waiting.popFirst() { send(line) }
    context.fireChannelWritabilityChanged()
  }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    let frame = unwrapInboundIn(data)
    switch frame.opcode {
    case .connectionClose:
      if closeSent {
        context.close(promise: nil)
      } else {
        // The page closes: answered with its own code, then the connection ends.
        var data = frame.unmaskedData
        close(data.readWebSocketErrorCode() ?? .normalClosure, reason: "", answering: true)
      }
    case .ping:
      guard !closeSent else { return }
      context.writeAndFlush(
        wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
    case .pong:
      break
    case .text, .binary:
      // Closing: what the page sent before it read the close goes nowhere.
      guard !closeSent else { return }
      guard partial == nil else { return close(.protocolError, reason: "a new message inside a fragmented one") }
      partial = (frame.opcode, frame.unmaskedData)
      received(fin: frame.fin)
    case .continuation:
      guard !closeSent else { return }
      guard var message = partial else { return close(.protocolError, reason: "a continuation without a message") }
      partial = nil
      var data = frame.unmaskedData
      message.data.writeBuffer(&data)
      partial = message
      received(fin: frame.fin)
    default:
      close(.protocolError, reason: "an unknown opcode")
    }
  }

  /// A frame of a message came in: the message is checked when it is whole.
  private func received(fin: Bool) {
    guard let message = partial else { return }
    guard message.data.readableBytes <= Self.maximumMessage else {
      partial = nil
      return close(.messageTooLarge, reason: "a message holds at most \(Self.maximumMessage) bytes")
    }
    guard fin else { return }
    partial = nil
    let text = String(buffer: message.data)
    guard message.opcode == .text, !text.contains(where: { $0 == "\n" || $0 == "\r" }) else {
      send(Self.webLine("refused", ["message": .string("a message is one request line of text, without newlines")]))
      return
    }
    guard let context else { return }
    forward(text, relay: NIOLoopBound(self, eventLoop: context.eventLoop))
  }

  /// Sends the page's line to rampd, or keeps it until rampd's greeting is read.
  private func forward(_ line: String, relay: NIOLoopBound<LiveRelay>) {
    guard let link else {
      guard early.count < Self.maximumEarly else {
        send(
          Self.webLine(
            "refused", ["message": .string("rampd is not connected yet: \(Self.maximumEarly) messages wait")]))
        return
      }
      early.append(line)
      return
    }
    guard link.sendsWaiting < Self.maximumEarly else {
      send(
        Self.webLine(
          "refused", ["message": .string("rampd reads slower than the page sends: \(Self.maximumEarly) messages wait")])
      )
      return
    }
    link.send(line) { failure in relay.eventLoop.execute { relay.value.fromRampd(.ended("\(failure)")) } }
  }

  /// One text frame to the page.
  private func send(_ text: String, flush: Bool = true) {
    guard let context, !closeSent else { return }
    let frame = WebSocketFrame(fin: true, opcode: .text, data: context.channel.allocator.buffer(string: text))
    if flush {
      context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    } else {
      context.write(wrapOutboundOut(frame), promise: nil)
    }
  }

  /// Sends a close frame; the connection ends when the page answers it (or after `closeGrace`),
  /// or once it is sent when `answering` the page's.
  private func close(_ code: WebSocketErrorCode, reason: String, answering: Bool = false) {
    guard let context, !closeSent else { return }
    closeSent = true
    link?.close()
    link = nil
    var data = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
    data.write(webSocketErrorCode: code)
    data.writeString(reason)
    let channel = context.channel
    let sent = context.eventLoop.makePromise(of: Void.self)
    context.writeAndFlush(
      wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: sent)
    if answering {
      sent.futureResult.whenComplete { _ in channel.close(promise: nil) }
    } else {
      channel.eventLoop.scheduleTask(in: Self.closeGrace) { channel.close(promise: nil) }
    }
  }

  static func webLine(_ kind: String, _ members: KeyValuePairs<String, JSONValue>) -> String {
    var object: JSONObject = ["web": .string(kind)]
    for (key, value) in members { object[key] = value }
    return JSONValue.object(object).serialized()
  }
}
