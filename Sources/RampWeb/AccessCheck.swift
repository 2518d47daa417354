import NIOHTTP1
import RampSystem

/// Who may use the page and its WebSocket.
///
/// Every request must carry the token: `Authorization: Bearer TOKEN`, `?token=TOKEN` (how a
/// person opens the page; the reply then sets it as a cookie, so the page's own requests and its
/// WebSocket carry it too) or that cookie. A web site cannot learn it, so DNS rebinding does not
/// reach the page either. A WebSocket must come from the page itself (`Origin` the same as
/// `Host`), so that another site open in the same browser cannot drive rampd.
struct AccessCheck: Sendable {
  let token: String
  static let cookieName = "rampd-web-token"

  /// What the check makes of one request.
  enum Decision: Equatable {
    /// Admitted; `setCookie` when the token came in the query, so the reply sets it as a cookie.
    case admitted(setCookie: Bool)
    case refused(HTTPResponseStatus, String, HTTPHeaders)
  }

  func decide(_ head: HTTPRequestHead) -> Decision {
    let host = head.headers.first(name: "Host") ?? ""
    let bearer = head.headers["Authorization"].lazy.compactMap { value in
      value.hasPrefix("Bearer ") ? String(value.dropFirst("Bearer ".count)) : nil
    }.first
    let query = Self.queryValue("token", in: head.uri)
    let cookie = Self.cookie(Self.cookieName, in: head.headers)
    guard !token.isEmpty, [bearer, query, cookie].contains(where: { $0.map { Self.same($0, token) } ?? false }) else {
      return .refused(
        .unauthorized,
        "rampd-web needs its token: open the page as /?token=TOKEN (`rampd-web --show-url` prints it), "
          + "or send Authorization: Bearer TOKEN",
        ["WWW-Authenticate": "Bearer realm=\"rampd-web\""])
    }
    if let origin = head.headers.first(name: "Origin"), origin != "http://\(host)" && origin != "https://\(host)" {
      return .refused(.forbidden, "rampd-web answers only its own page, not one from \(origin)", [:])
    }
    return .admitted(setCookie: query.map { Self.same($0, token) } ?? false)
  }

  /// The cookie a reply to a request admitted by its query sets: the token, for this site's
  /// requests only, out of the page's scripts' reach.
  var cookieHeader: String { "\(Self.cookieName)=\(token); Path=/; HttpOnly; SameSite=Strict" }

  /// Compares in time independent of where the first difference is.
  static func same(_ presented: String, _ token: String) -> Bool {
    let a = Array(presented.utf8)
    let b = Array(token.utf8)
    var difference = UInt8(a.count == b.count ? 0 : 1)
    for index in 0..<b.count { difference |= (index < a.count ? a[index] : 0) ^ b[index] }
    return difference == 0
  }

  /// The first value of `name` in the query of `uri`, percent-decoded; nil when it has none.
  static func queryValue(_ name: String, in uri: String) -> String? {
    guard let mark = uri.firstIndex(of: "?") else { return nil }
    let query = uri[uri.index(after: mark)...].prefix { $0 != "#" }
    for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
      let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      if percentDecoded(parts[0]) == name { return parts.count > 1 ? percentDecoded(parts[1]) : "" }
    }
    return nil
  }

  /// The value of the cookie `name` in the request's `Cookie` headers.
  static func cookie(_ name: String, in headers: HTTPHeaders) -> String? {
    for line in headers["Cookie"] {
      for item in line.split(separator: ";") {
        let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].trimmingWhitespace() == name else { continue }
        let value = parts[1].trimmingWhitespace()
        if value.count >= 2 && value.hasPrefix("\"") && value.hasSuffix("\"") {
          return String(value.dropFirst().dropLast())
        }
        return value
      }
    }
    return nil
  }

  /// `text` with each `%XX` replaced by its byte; a `%` not followed by two hexadecimal digits is
  /// kept as it is.
  static func percentDecoded(_ text: Substring) -> String {
    guard text.contains("%") else { return String(text) }
    let bytes = Array(text.utf8)
    var decoded: [UInt8] = []
    var index = 0
    while index < bytes.count {
      if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
        let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
      {
        decoded.append(high << 4 | low)
        index += 3
      } else {
        decoded.append(bytes[index])
        index += 1
      }
    }
    return String(decoding: decoded, as: UTF8.self)
  }

  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
  }
}
