import NIOHTTP1
import Testing

@testable import RampWeb

/// The access check and the routes on a request head, without a server: which of the three ways
/// carries the token, what each refusal answers, and what an admitted request gets.
@Suite struct AccessCheckTests {
  static let token = "test-token-0123456789abcdef"
  let access = AccessCheck(token: AccessCheckTests.token)

  func head(_ uri: String, _ headers: [(String, String)] = [], method: HTTPMethod = .GET) -> HTTPRequestHead {
    HTTPRequestHead(
      version: .http1_1, method: method, uri: uri, headers: HTTPHeaders([("Host", "127.0.0.1:6690")] + headers))
  }

  @Test func theTokenInAnyOfItsThreePlaces() {
    #expect(access.decide(head("/?token=\(Self.token)")) == .admitted(setCookie: true))
    #expect(access.decide(head("/page.js?a=1&token=\(Self.token)#x")) == .admitted(setCookie: true))
    // Percent-encoded, as a URL may carry it ('t' is %74).
    #expect(access.decide(head("/?token=%74est-token-0123456789abcdef")) == .admitted(setCookie: true))
    #expect(access.decide(head("/", [("Authorization", "Bearer \(Self.token)")])) == .admitted(setCookie: false))
    #expect(
      access.decide(head("/", [("Cookie", "other=1; rampd-web-token=\(Self.token); more=2")]))
        == .admitted(setCookie: false))
    #expect(access.decide(head("/", [("Cookie", "rampd-web-token=\"\(Self.token)\"")])) == .admitted(setCookie: false))
  }

  @Test func withoutTheTokenUnauthorized() {
    let refusals = [
      head("/"), head("/?token="), head("/?token=\(Self.token)x"), head("/?tok=\(Self.token)"),
      head("/", [("Authorization", "Bearer \(Self.token.dropLast())")]),
      head("/", [("Authorization", "Basic \(Self.token)")]),
      head("/", [("Cookie", "rampd-web-token=wrong-token-0123456789")]),
      head("/", [("Cookie", "another-rampd-web-token=\(Self.token)")]),
    ]
    for request in refusals {
      guard case .refused(let status, let message, let headers) = access.decide(request) else {
        Issue.record("\(request.uri) \(request.headers) was admitted")
        continue
      }
      #expect(status == .unauthorized)
      #expect(message.contains("rampd-web needs its token"))
      #expect(headers["WWW-Authenticate"] == ["Bearer realm=\"rampd-web\""])
    }
    // An empty token admits nobody, not even an empty one presented.
    #expect(AccessCheck(token: "").decide(head("/?token=")) != .admitted(setCookie: true))
  }

  @Test func anotherSitesPageIsForbidden() {
    let bearer = ("Authorization", "Bearer \(Self.token)")
    #expect(access.decide(head("/live", [bearer, ("Origin", "http://127.0.0.1:6690")])) == .admitted(setCookie: false))
    #expect(
      access.decide(head("/live", [bearer, ("Origin", "https://127.0.0.1:6690")])) == .admitted(setCookie: false))
    guard
      case .refused(let status, let message, _) = access.decide(
        head("/live", [bearer, ("Origin", "http://evil.example")]))
    else {
      Issue.record("a foreign origin was admitted")
      return
    }
    #expect(status == .forbidden)
    #expect(message == "rampd-web answers only its own page, not one from http://evil.example")
  }

  @Test func routes() {
    let bearer = ("Authorization", "Bearer \(Self.token)")
    let page = PageHandler.reply(to: head("/?token=\(Self.token)"), access: access)
    #expect(page.status == .ok)
    #expect(page.body == PageFiles.html)
    #expect(page.headers["Content-Type"] == ["text/html; charset=utf-8"])
    #expect(page.headers["Cache-Control"] == ["no-store"])
    #expect(page.headers["X-Content-Type-Options"] == ["nosniff"])
    #expect(page.headers["Referrer-Policy"] == ["no-referrer"])
    #expect(page.headers["Content-Security-Policy"].first?.hasPrefix("default-src 'self'") == true)
    #expect(page.headers["Set-Cookie"] == ["rampd-web-token=\(Self.token); Path=/; HttpOnly; SameSite=Strict"])

    let style = PageHandler.reply(to: head("/page.css", [bearer]), access: access)
    #expect(style.status == .ok && style.body == PageFiles.style && style.headers["Set-Cookie"].isEmpty)
    #expect(PageHandler.reply(to: head("/favicon.ico", [bearer]), access: access).status == .noContent)
    #expect(PageHandler.reply(to: head("/elsewhere", [bearer]), access: access).status == .notFound)
    let posted = PageHandler.reply(to: head("/", [bearer], method: .POST), access: access)
    #expect(posted.status == .methodNotAllowed && posted.headers["Allow"] == ["GET"])
    #expect(PageHandler.reply(to: head("/live", [bearer]), access: access).status == .upgradeRequired)
    // The check comes first: a path with no route is refused too, without the token.
    #expect(PageHandler.reply(to: head("/elsewhere"), access: access).status == .unauthorized)
  }

  @Test func httpDates() {
    #expect(PageHandler.httpDate(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
    #expect(PageHandler.httpDate(1_796_688_746) == "Tue, 08 Dec 2026 00:12:26 GMT")
  }
}
