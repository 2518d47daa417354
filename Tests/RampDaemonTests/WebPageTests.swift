import Foundation
import RampProtocol
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// rampd-web end to end: the real rampd on an ALSA file PCM, the real rampd-web in front of it,
/// and Debian's Chromium, headless, driven through chromedriver as a person would use the page.
@Suite(.serialized) struct WebPageTests {
  static let token = "test-token-0123456789abcdef"

  /// Dragging a stream's fader ramps its gain: the recorded output of a constant 1.0 tone moves
  /// from 1 to the fader's new gain with no step larger than the glide's slope (a `set` with a
  /// duration for each move, never a jump), and ends at that gain.
  @Test func faderDragRampsTheRecordedOutput() throws {
    let daemon = try DaemonProcess()
    let tone = try daemon.constantFile("tone", seconds: 60)
    let client = try daemon.client()
    let played = try client.request(["cmd": "play", "path": .string(tone), "stream": "tone"])
    try #require(played["ok"] == true, "\(played.serialized())")
    let tokenFile = "\(daemon.directory)/web-token"
    try Self.token.write(toFile: tokenFile, atomically: true, encoding: .utf8)
    let web = try WebServerProcess(["--socket", daemon.socket, "--token-file", tokenFile])
    let browser = try WebDriver()
    try browser.open("http://127.0.0.1:\(web.port)/?token=\(Self.token)")

    // The page is live: the tone's strip is there and its meter shows what observe reports.
    let fader = try browser.element(#"input.fader[data-key="streams.tone.gain"]"#)
    try browser.wait(for: #"return document.querySelector('[data-stream="tone"]')?.dataset.level === "1.000000""#)
    #expect(try browser.execute("return location.search").stringValue == "", "the token left the address bar")
    let glide = try #require(
      try browser.execute("return parseFloat(document.querySelector('#glide').value)").numberValue)

    // Let the start's declick pass, then drag the thumb from the right end to the middle.
    usleep(200_000)
    let before = try daemon.played(channel: 0).count
    let box = try browser.rect(fader)
    let y = box.y + box.height / 2
    let start = box.x + box.width - 8
    let end = box.x + box.width * 0.45
    try browser.drag(through: (0...8).map { step in (start + (end - start) * Double(step) / 8, y) })
    let position = try #require(
      try browser.execute(
        "return parseFloat(arguments[0].value)", [["element-6066-11e4-a52e-4f735466cecf": .string(fader)]]
      ).numberValue)
    #expect(position < 70, "the drag moved the fader (to \(position))")
    let target = try #require(try browser.execute("return gainFromPosition(\(position))").numberValue)
    #expect(target > 0.001 && target < 0.5, "target gain \(target)")
    try browser.wait(
      for:
        #"return Math.abs(parseFloat(document.querySelector('[data-stream="tone"]').dataset.level) - \#(target)) < 1e-4"#
    )
    usleep(UInt32(0.2 * 1_000_000))

    let samples = try daemon.played(channel: 0)
    try #require(samples.count > before + 48_000 / 2)
    #expect(abs(samples[before] - 1) < 1e-6, "the tone played at 1 before the drag: \(samples[before])")
    // Every move retargets from the audible value towards a gain between 1 and the target, over
    // `glide` seconds: no sample may move by more than that ramp's slope.
    let slope = (1 - target) / (glide * 48_000)
    var steepest = 0.0
    for index in before..<(samples.count - 1) {
      steepest = max(steepest, Double(abs(samples[index + 1] - samples[index])))
    }
    #expect(steepest <= slope * 1.01 + 1e-6, "steepest step \(steepest), allowed \(slope)")
    let firstMoved = try #require(samples[before...].firstIndex { $0 < 0.999 }, "the output never moved")
    let arrived = try #require(
      samples[firstMoved...].firstIndex { abs(Double($0) - target) < 1e-4 }, "never reached \(target)")
    #expect(
      Double(arrived - firstMoved) >= (0.998 - target) / slope * 0.99, "a ramp of \(arrived - firstMoved) samples")
    for sample in samples.suffix(100) { #expect(abs(Double(sample) - target) < 1e-4) }
  }

  /// When rampd goes away the page says so and keeps trying; when rampd is back it is live
  /// again, with its streams.
  @Test func thePageFollowsRampdAwayAndBack() throws {
    let first = try DaemonProcess()
    let web = try WebServerProcess(["--socket", first.socket])
    let browser = try WebDriver()
    try browser.open("http://127.0.0.1:\(web.port)/")
    try browser.wait(for: "return document.body.dataset.state === 'live'")
    first.stop()
    try browser.wait(for: "return document.body.dataset.state === 'down'")
    #expect(web.process.isRunning, "rampd-web outlives rampd")

    // The same directory and socket; the first one keeps the directory until the test ends.
    let second = try DaemonProcess(reusing: first.directory)
    let tone = try second.constantFile("tone", seconds: 10)
    _ = try second.client().request(["cmd": "play", "path": .string(tone), "stream": "back"])
    try browser.wait(for: "return document.body.dataset.state === 'live'")
    _ = try browser.element(#"[data-stream="back"]"#)
  }

  /// Any address that is not a loopback one needs a token: rampd-web refuses to start, exit 64,
  /// naming the option; flags with bad values are refused the same way.
  @Test func nonLoopbackWithoutATokenIsRefused() throws {
    let refused = try runProcess(Executables.rampdWeb, ["--listen", "0.0.0.0"], environment: [:])
    #expect(refused.status == 64, "\(refused)")
    #expect(refused.stderr.contains("--listen 0.0.0.0 is not a loopback address"), "\(refused)")
    #expect(refused.stderr.contains("--token-file"), "\(refused)")

    let fromEnvironment = try runProcess(Executables.rampdWeb, [], environment: ["RAMPD_WEB_LISTEN": "::"])
    #expect(fromEnvironment.status == 64, "\(fromEnvironment)")
    #expect(fromEnvironment.stderr.contains("RAMPD_WEB_LISTEN :: is not a loopback address"), "\(fromEnvironment)")

    let cases: [([String], [String: String], String)] = [
      (["--listen", "example.org"], [:], "--listen 'example.org' is not an IP address"),
      (["--port", "70000"], [:], "--port 70000 is out of range"),
      ([], ["RAMPD_WEB_PORT": "http"], "RAMPD_WEB_PORT 'http' is not a port number"),
      ([], ["RAMPD_WEB_TOKEN": "short"], "the token in RAMPD_WEB_TOKEN has 5 characters; a token needs at least 16"),
      ([], ["RAMPD_WEB_TOKEN": "has spaces in it, sixteen+"], "may hold only letters, digits"),
      (["--token-file", "/nonexistent/token"], [:], "--token-file /nonexistent/token cannot be read"),
    ]
    for (arguments, environment, message) in cases {
      let outcome = try runProcess(Executables.rampdWeb, arguments, environment: environment)
      #expect(outcome.status == 64, "\(arguments) \(environment): \(outcome)")
      #expect(outcome.stderr.contains(message), "\(arguments) \(environment): \(outcome)")
    }
  }

  /// A second rampd-web on a port in use says which address and why, in words (not NIO's text),
  /// and exits 1 (the man page's status for an address that cannot be bound).
  @Test func aPortInUseIsNamed() throws {
    let first = try WebServerProcess([])
    let second = try runProcess(Executables.rampdWeb, ["--port", "\(first.port)"], environment: [:])
    #expect(second.status == 1, "\(second)")
    #expect(
      second.stderr
        == "rampd-web: cannot listen on 127.0.0.1:\(first.port): address already in use "
        + "(another rampd-web? choose another with --port or RAMPD_WEB_PORT)\n", "\(second)")
    #expect(first.process.isRunning)
  }

  /// With a token every request must carry it (401 otherwise, the WebSocket included); any of the
  /// three ways works; a WebSocket from another site's page is refused even with it.
  @Test func requestsWithoutTheTokenAreRefused() throws {
    let directory = try TemporaryDirectory("web-token")
    let tokenFile = "\(directory.path)/token"
    try "\(Self.token)\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
    let web = try WebServerProcess(["--socket", "\(directory.path)/no-rampd.sock", "--token-file", tokenFile])

    for path in ["/", "/page.js", "/live", "/?token=wrong-token-0123456789"] {
      let reply = try HTTP.request(port: web.port, "GET", path)
      #expect(reply.status == 401, "\(path): \(reply.status)")
      #expect(reply.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
    }
    let wrongBearer = try HTTP.request(
      port: web.port, "GET", "/", headers: [("Authorization", "Bearer \(Self.token)x")])
    #expect(wrongBearer.status == 401)

    let bearer = try HTTP.request(port: web.port, "GET", "/", headers: [("Authorization", "Bearer \(Self.token)")])
    #expect(bearer.status == 200)
    #expect(bearer.body.contains("<title>rampd</title>"))
    let query = try HTTP.request(port: web.port, "GET", "/?token=\(Self.token)")
    #expect(query.status == 200)
    let cookie = try #require(query.header("Set-Cookie"), "the token becomes a cookie")
    #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "\(cookie)")
    let withCookie = try HTTP.request(
      port: web.port, "GET", "/page.js", headers: [("Cookie", "rampd-web-token=\(Self.token)")])
    #expect(withCookie.status == 200)
    #expect(withCookie.header("Content-Type")?.hasPrefix("text/javascript") == true)

    let foreign = try HTTP.request(
      port: web.port, "GET", "/live",
      headers: [("Authorization", "Bearer \(Self.token)"), ("Origin", "http://evil.example")])
    #expect(foreign.status == 403, "\(foreign.status) \(foreign.body)")
  }

  /// Without a token (loopback only), a request must be addressed to a loopback name: a page on
  /// another site that a DNS rebinding points at 127.0.0.1 is refused.
  @Test func withoutATokenOnlyLoopbackHostsAreServed() throws {
    let directory = try TemporaryDirectory("web-host")
    let web = try WebServerProcess(["--socket", "\(directory.path)/no-rampd.sock"])
    #expect(try HTTP.request(port: web.port, "GET", "/").status == 200)
    #expect(try HTTP.request(port: web.port, "GET", "/", headers: [("Host", "localhost:\(web.port)")]).status == 200)
    #expect(try HTTP.request(port: web.port, "GET", "/", headers: [("Host", "[::1]:\(web.port)")]).status == 200)
    let rebound = try HTTP.request(port: web.port, "GET", "/", headers: [("Host", "rebind.example:\(web.port)")])
    #expect(rebound.status == 403, "\(rebound.status)")
  }
}
