import Hummingbird

/// Who may use the page and its WebSocket.
///
/// Every request must carry the token: `Authorization: Bearer TOKEN`, `?token=TOKEN` (how a
/// person opens the page; the reply then sets it as a cookie, so the page's own requests and its
/// WebSocket carry it too) or that cookie. A web site cannot learn it, so DNS rebinding does not
/// reach the page either. A WebSocket must come from the page itself (`Origin` the same as
/// `Host`), so that another site open in the same browser cannot drive rampd.
struct AccessCheck<Context: RequestContext>: RouterMiddleware {
  let token: String
  static var cookieName: String { "rampd-web-token" }

  func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
    -> Response
  {
    let host = request.head.authority ?? ""
    let bearer = request.headers[.authorization].flatMap { value in
      value.hasPrefix("Bearer ") ? String(value.dropFirst("Bearer ".count)) : nil
    }
    let query = request.uri.queryParameters.get("token")
    let cookie = request.cookies[Self.cookieName]?.value
    guard !token.isEmpty, [bearer, query, cookie].contains(where: { $0.map { Self.same($0, token) } ?? false }) else {
      return Self.refusal(
        .unauthorized,
        "rampd-web needs its token: open the page as /?token=TOKEN (`rampd-web --show-url` prints it), "
          + "or send Authorization: Bearer TOKEN",
        extra: [.wwwAuthenticate: "Bearer realm=\"rampd-web\""])
    }
    let fromQuery = query.map { Self.same($0, token) } ?? false
    if let origin = request.headers[.origin], origin != "http://\(host)" && origin != "https://\(host)" {
      return Self.refusal(.forbidden, "rampd-web answers only its own page, not one from \(origin)")
    }
    var response = try await next(request, context)
    if fromQuery {
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

  static func refusal(_ status: HTTPResponse.Status, _ message: String, extra: HTTPFields = [:]) -> Response {
    var headers = extra
    headers[.contentType] = "text/plain; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: message + "\n")))
  }
}
