import NIOCore
import NIOHTTP1

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The HTTP side: the page's three files and its icon, behind `AccessCheck`, on SwiftNIO's
/// HTTP/1.1 codec. `/live` reaches here only when it is not upgraded to a WebSocket (a plain
/// request, or one the access check refused).
final class PageHandler: ChannelInboundHandler, RemovableChannelHandler {
  typealias InboundIn = HTTPServerRequestPart
  typealias OutboundOut = HTTPServerResponsePart

  /// Its name in the pipeline, by which the upgrade to a WebSocket removes it.
  static let name = "rampd-web-page"

  let access: AccessCheck
  private var request: HTTPRequestHead?

  init(access: AccessCheck) { self.access = access }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    switch unwrapInboundIn(data) {
    case .head(let head):
      request = head
    case .body:
      // No route takes a body: it is read and let go.
      break
    case .end:
      guard let head = request else { return }
      request = nil
      let reply = Self.reply(to: head, access: access)
      var headers = reply.headers
      headers.add(name: "Content-Length", value: "\(reply.body.count)")
      headers.add(name: "Date", value: Self.httpDate(time(nil)))
      headers.add(name: "Server", value: "rampd-web")
      if !head.isKeepAlive { headers.add(name: "Connection", value: "close") }
      context.write(
        wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: reply.status, headers: headers))),
        promise: nil)
      if !reply.body.isEmpty {
        context.write(
          wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: reply.body)))), promise: nil)
      }
      let sent = context.eventLoop.makePromise(of: Void.self)
      context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: sent)
      if !head.isKeepAlive {
        let channel = context.channel
        sent.futureResult.whenComplete { _ in channel.close(promise: nil) }
      }
    }
  }

  /// What a request gets: the access check first (401, 403), then the route (404 for a path
  /// with none, 405 for a method other than GET on one).
  struct Reply: Equatable {
    var status: HTTPResponseStatus
    var headers: HTTPHeaders
    var body: [UInt8]
  }

  static func reply(to head: HTTPRequestHead, access: AccessCheck) -> Reply {
    let setCookie: Bool
    switch access.decide(head) {
    case .refused(let status, let message, var headers):
      headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
      return Reply(status: status, headers: headers, body: Array((message + "\n").utf8))
    case .admitted(let fromQuery):
      setCookie = fromQuery
    }
    var reply = route(head)
    if setCookie { reply.headers.add(name: "Set-Cookie", value: access.cookieHeader) }
    return reply
  }

  /// The paths rampd-web answers.
  static let paths = ["/", "/page.js", "/page.css", "/favicon.ico", "/live"]

  private static func route(_ head: HTTPRequestHead) -> Reply {
    let path = String(head.uri.prefix { $0 != "?" && $0 != "#" })
    guard paths.contains(path) else { return Reply(status: .notFound, headers: [:], body: []) }
    guard head.method == .GET else { return Reply(status: .methodNotAllowed, headers: ["Allow": "GET"], body: []) }
    switch path {
    case "/": return file(PageFiles.html, "text/html; charset=utf-8")
    case "/page.js": return file(PageFiles.script, "text/javascript; charset=utf-8")
    case "/page.css": return file(PageFiles.style, "text/css; charset=utf-8")
    case "/favicon.ico": return Reply(status: .noContent, headers: [:], body: [])
    default:
      // /live without an upgrade.
      return Reply(
        status: .upgradeRequired, headers: ["Upgrade": "websocket", "Content-Type": "text/plain; charset=utf-8"],
        body: Array("/live is the page's WebSocket\n".utf8))
    }
  }

  static func file(_ bytes: [UInt8], _ type: String) -> Reply {
    Reply(
      status: .ok,
      headers: [
        "Content-Type": type, "Cache-Control": "no-store",
        "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
      ],
      body: bytes)
  }

  /// `seconds` since the epoch as HTTP writes a date (RFC 9110, IMF-fixdate):
  /// `Tue, 08 Dec 2026 00:12:26 GMT`.
  static func httpDate(_ seconds: time_t) -> String {
    var time = seconds
    var parts = tm()
    gmtime_r(&time, &parts)
    let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func two(_ number: Int32) -> String { number < 10 ? "0\(number)" : "\(number)" }
    return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
      + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
  }
}

/// The page's files, embedded in the binary (Sources/RampWeb/Page).
enum PageFiles {
  static let html = PackageResources.page_html
  static let script = PackageResources.page_js
  static let style = PackageResources.page_css
}
