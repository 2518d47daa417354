import Foundation
import Hummingbird

/// Who may use the page and its WebSocket.
///
/// With a token, every request must carry it: `Authorization: Bearer TOKEN`, `?token=TOKEN` (how
/// a person opens the page; the reply then sets it as a cookie, so the page's own requests and its
/// WebSocket carry it too) or that cookie. Without one (only on a loopback address), the `Host`
/// must name a loopback address, so that a web site cannot reach the page through DNS rebinding.
/// Either way a WebSocket must come from the page itself (`Origin` the same as `Host`), so that
/// another site open in the same browser cannot drive rampd.
struct AccessCheck<Context: RequestContext>: RouterMiddleware {
  let token: String?
  static var cookieName: String { "rampd-web-token" }

  func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
    -> Response
  {
    let host = request.head.authority ?? ""
    var fromQuery = false
    if let token {
      let bearer = request.headers[.authorization].flatMap { value in
        value.hasPrefix("Bearer ") ? String(value.dropFirst("Bearer ".count)) : nil
      }
      let query = request.uri.queryParameters.get("token")
      let cookie = request.cookies[Self.cookieName]?.value
      guard [bearer, query, cookie].contains(where: { $0.map { Self.same($0, token) } ?? false }) else {
        return Self.refusal(
          .unauthorized,
          "rampd-web needs its token: open the page as /?token=TOKEN, or send Authorization: Bearer TOKEN",
          extra: [.wwwAuthenticate: "Bearer realm=\"rampd-web\""])
      }
      fromQuery = query.map { Self.same($0, token) } ?? false
    } else if !Self.namesLoopback(host: host) {
      return Self.refusal(
        .forbidden, "rampd-web without a token answers only requests addressed to a loopback address, not '\(host)'")
    }
    if let origin = request.headers[.origin], origin != "http://\(host)" && origin != "https://\(host)" {
      return Self.refusal(.forbidden, "rampd-web answers only its own page, not one from \(origin)")
    }
    var response = try await next(request, context)
    if fromQuery, let token {
      response.setCookie(Cookie(name: Self.cookieName, value: token, path: "/", httpOnly: true, sameSite: .strict))
    }
    return response
  }

  /// Compares in time independent of where the first difference is.
  static func same(_ presented: String, _ token: String) -> Bool {
    let a = Array(presented.utf8)
    let b = Array(token.utf8)
    var difference = UInt8(a.count == b.count ? 0 : 1)
    for index in 0..<b.count { difference |= (index < a.count ? a[index] : 0) ^ b[index] }
    return difference == 0
  }

  /// Whether a `Host` value (`name[:port]`, `[v6]:port`) names a loopback address.
  static func namesLoopback(host: String) -> Bool {
    var name = host
    if name.hasPrefix("["), let close = name.firstIndex(of: "]") {
      name = String(name[name.index(after: name.startIndex)..<close])
    } else if let colon = name.lastIndex(of: ":") {
      name = String(name[..<colon])
    }
    return WebSettings.isLoopback(name) == true
  }

  static func refusal(_ status: HTTPResponse.Status, _ message: String, extra: HTTPFields = [:]) -> Response {
    var headers = extra
    headers[.contentType] = "text/plain; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: message + "\n")))
  }
}
