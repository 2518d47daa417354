import HummingbirdWebSocket
import NIOWebSocket
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One page's WebSocket: a rampd connection of its own, with every line relayed both ways.
///
/// The page speaks rampd's protocol (PROTOCOL.md) through it: each text message is one request
/// line, each message back one line from rampd. rampd-web adds lines of its own, told apart by a
/// `web` member: `{"web":"connected","server":"rampd","version":…,"socket":…}` once rampd's
/// greeting is read, `{"web":"disconnected","message":…}` when rampd cannot be reached or goes
/// away (the WebSocket then closes), `{"web":"refused","message":…}` for a message that is not
/// one line of text.
struct LiveRelay {
  let socket: String
  /// A request line may hold at most this (rampd's default `[limits] line-length`).
  static let maximumMessage = 65_536

  func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
    let link: RampdLink
    do {
      link = try await RampdLink.open(path: socket)
    } catch {
      try await outbound.write(.text(Self.webLine("disconnected", ["message": .string("\(error)")])))
      return
    }
    defer { link.close() }
    try await outbound.write(
      .text(
        Self.webLine(
          "connected", ["server": .string("rampd"), "version": .string(link.serverVersion), "socket": .string(socket)]
        )))
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask {
        for await output in link.lines {
          switch output {
          case .line(let text): try await outbound.write(.text(text))
          case .ended(let reason):
            try await outbound.write(.text(Self.webLine("disconnected", ["message": .string(reason)])))
            // The page reconnects; its messages would have nowhere to go.
            try await outbound.close(.goingAway, reason: "rampd went away")
          }
        }
      }
      group.addTask {
        for try await message in inbound.messages(maxSize: Self.maximumMessage) {
          guard case .text(let text) = message, !text.contains(where: { $0 == "\n" || $0 == "\r" }) else {
            try await outbound.write(
              .text(
                Self.webLine("refused", ["message": .string("a message is one request line of text, without newlines")])
              ))
            continue
          }
          try await link.send(text)
        }
      }
      // Either side ending ends both: the page left, or rampd did.
      try await group.next()
      group.cancelAll()
    }
  }

  static func webLine(_ kind: String, _ members: KeyValuePairs<String, JSONValue>) -> String {
    var object: JSONObject = ["web": .string(kind)]
    for (key, value) in members { object[key] = value }
    return JSONValue.object(object).serialized()
  }
}
