import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

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
    // Without the limiter: the ramp is read off a full-scale tone.
    let daemon = try DaemonProcess(limiter: "off")
    let tone = try daemon.constantFile("tone", seconds: 60)
    let client = try daemon.client()
    let played = try client.request(["cmd": "play", "path": .string(tone), "stream": "tone"])
    try #require(played["ok"] == true, "\(played.serialized())")
    let tokenFile = "\(daemon.directory)/web-token"
    try Self.token.write(toFile: tokenFile, atomically: true, encoding: .utf8)
    let web = try WebServerProcess(["--socket", daemon.socket, "--token-file", tokenFile])
    let browser = try WebDriver()
    try browser.open("http://127.0.0.1:\(web.port)/?token=\(Self.token)")

    // The page is live: the tone's strip is there and its meter shows the level observe reports
    // (a constant 1.0: 0 dBFS peak), its gain the gain heard.
    let fader = try browser.element(#"input.fader[data-key="streams.tone.gain"]"#)
    try browser.wait(for: #"return document.querySelector('[data-stream="tone"]')?.dataset.gain === "1.000000""#)
    try browser.wait(for: #"return document.querySelector('[data-stream="tone"]')?.dataset.peak === "0.00""#)
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
        #"return Math.abs(parseFloat(document.querySelector('[data-stream="tone"]').dataset.gain) - \#(target)) < 1e-4"#
    )
    // The fade shows in the level, not only in the gain: 400 ms on, the peak is the new gain's.
    try browser.wait(
      for:
        #"return Math.abs(parseFloat(document.querySelector('[data-stream="tone"]').dataset.peak) - 20 * Math.log10(\#(target))) < 0.1"#
    )
    // RAMPD_WEB_SCREENSHOT=file.png keeps what the page shows now: the meters at their levels.
    if let file = ProcessInfo.processInfo.environment["RAMPD_WEB_SCREENSHOT"] {
      try browser.screenshot().write(to: URL(fileURLWithPath: file))
    }
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
    // The address rampd-web printed, as a person would paste it.
    try browser.open(web.url)
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

  /// The WebSocket relays one line each way: a socket the test opens from the page's own origin
  /// gets rampd-web's `connected` line, then rampd's reply to a request it sends; two lines in one
  /// message, or a binary message, are refused with a `web` line and the socket stays open; a
  /// message of more than 65536 bytes closes it (1009, too big); when rampd goes away, a socket
  /// gets `disconnected` and is closed as going away (1001).
  @Test func theLiveSocketRelaysOneLineEachWay() throws {
    let daemon = try DaemonProcess()
    let web = try WebServerProcess(["--socket", daemon.socket])
    let browser = try WebDriver()
    try browser.open(web.url)
    try browser.wait(for: "return document.body.dataset.state === 'live'")
    // probe(name): a socket of the test's, its messages and its close code kept on `window`.
    try browser.execute(
      """
      window.probe = (name) => {
        const state = { lines: [], closed: null };
        const socket = new WebSocket(`ws://${location.host}/live`);
        socket.onmessage = (event) => state.lines.push(typeof event.data === "string" ? event.data : "(binary)");
        socket.onclose = (event) => { state.closed = event.code; };
        window[name] = { socket, state };
      };
      probe("first");
      """)
    func lines(_ name: String) throws -> [JSONValue] {
      try (browser.execute("return window.\(name).state.lines").arrayValue ?? []).map {
        try JSON.parse($0.stringValue ?? "", maxDepth: 16)
      }
    }
    try browser.wait(for: "return window.first.state.lines.length >= 1")
    let connected = try lines("first")[0]
    #expect(connected["web"]?.stringValue == "connected", "\(connected.serialized())")
    #expect(connected["server"]?.stringValue == "rampd")
    #expect(connected["socket"]?.stringValue == daemon.socket)

    try browser.execute(#"window.first.socket.send('{"id":41,"cmd":"get","key":"master.gain"}')"#)
    try browser.wait(for: #"return window.first.state.lines.some((line) => JSON.parse(line).id === 41)"#)
    let reply = try #require(try lines("first").first { $0["id"]?.int == 41 })
    #expect(reply["ok"] == true, "\(reply.serialized())")
    #expect(reply["result"]?["model"]?.numberValue == 1, "\(reply.serialized())")

    let before = try lines("first").count
    try browser.execute(#"window.first.socket.send('{"id":42,"cmd":"status"}\n{"id":43,"cmd":"status"}')"#)
    try browser.execute("window.first.socket.send(new Uint8Array([123, 125]))")
    try browser.wait(for: "return window.first.state.lines.length >= \(before + 2)")
    let refused = try lines("first").dropFirst(before)
    for line in refused {
      #expect(line["web"]?.stringValue == "refused", "\(line.serialized())")
      #expect(line["message"]?.stringValue?.contains("one request line of text") == true)
    }
    #expect(try browser.execute("return window.first.state.closed").isNull, "a refused message leaves it open")
    try browser.execute(#"window.first.socket.send('{"id":44,"cmd":"get","key":"master.gain"}')"#)
    try browser.wait(for: #"return window.first.state.lines.some((line) => JSON.parse(line).id === 44)"#)

    try browser.execute(#"window.first.socket.send("x".repeat(65537))"#)
    try browser.wait(for: "return window.first.state.closed !== null")
    let tooBig = try browser.execute("return window.first.state.closed")
    #expect(tooBig.int == 1009, "\(tooBig.serialized())")

    try browser.execute("probe('second')")
    try browser.wait(for: "return window.second.state.lines.length >= 1")
    _ = daemon.stop()
    try browser.wait(for: "return window.second.state.closed !== null")
    #expect(try browser.execute("return window.second.state.closed").int == 1001)
    let last = try #require(try lines("second").last)
    #expect(last["web"]?.stringValue == "disconnected", "\(last.serialized())")
    #expect(web.process.isRunning, "rampd-web outlives rampd")
  }

  /// An upgrade to a WebSocket is checked as any request: without the token it is refused (401),
  /// with it from another site's page too (403), and neither is upgraded.
  @Test func anUpgradeWithoutTheTokenIsRefused() throws {
    let directory = try TemporaryDirectory("web-upgrade")
    let tokenFile = "\(directory.path)/token"
    try "\(Self.token)\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
    let web = try WebServerProcess(["--socket", "\(directory.path)/no-rampd.sock", "--token-file", tokenFile])
    let upgrade = [
      ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
      ("Sec-WebSocket-Version", "13"),
    ]
    let wrong = try HTTP.request(
      port: web.port, "GET", "/live", headers: upgrade + [("Authorization", "Bearer \(Self.token)x")])
    #expect(wrong.status == 401, "\(wrong.status) \(wrong.body)")
    #expect(wrong.header("Sec-WebSocket-Accept") == nil)
    let query = try HTTP.request(port: web.port, "GET", "/live?token=wrong-token-0123456789", headers: upgrade)
    #expect(query.status == 401, "\(query.status) \(query.body)")
    let foreign = try HTTP.request(
      port: web.port, "GET", "/live",
      headers: upgrade + [("Authorization", "Bearer \(Self.token)"), ("Origin", "http://evil.example")])
    #expect(foreign.status == 403, "\(foreign.status) \(foreign.body)")
    #expect(foreign.header("Sec-WebSocket-Accept") == nil)
  }

  /// A repeating schedule refused when its time comes (a stream of its id is playing) shows on
  /// the page: its row in Schedules says when and why, and the event log has the refusal.
  @Test func aRefusedScheduleShowsOnThePage() throws {
    let daemon = try DaemonProcess()
    let tone = try daemon.constantFile("tone", seconds: 1)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(tone), "stream": "alarm", "loop": true]).isOK)
    let web = try WebServerProcess(["--socket", daemon.socket])
    let browser = try WebDriver()
    try browser.open(web.url)
    try browser.wait(for: "return document.body.dataset.state === 'live'")
    let reply = try client.request([
      "cmd": "play", "path": .string(tone), "stream": "alarm", "repeat": ["every": 60], "at": 1, "tag": "alarm",
    ])
    let id = try #require(reply.result["scheduled"]?.int, "\(reply.serialized())")
    try browser.wait(
      for:
        #"return document.querySelector('#schedules tr[data-failed]')?.textContent.includes("stream-exists: a stream 'alarm' is already playing") === true"#
    )
    try browser.wait(
      for:
        #"return [...document.querySelectorAll('#log li[data-kind="error"]')].some((item) => item.textContent.includes("schedule-failed #\#(id) play [alarm]: stream-exists"))"#
    )
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
    let second = try runProcess(
      Executables.rampdWeb, ["--port", "\(first.port)"], environment: ["STATE_DIRECTORY": first.stateDirectory])
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

  /// Without a token configured, rampd-web makes one on its first start: 192 random bits, in a
  /// file of mode 0600 in a directory of mode 0700, the same on every later start and in
  /// `--show-url`. Another local user's request without it is refused; the page answers only the
  /// token.
  @Test(
    .enabled(
      if: geteuid() == 0 && SystemTool.path("setpriv") != nil && SystemTool.path("curl") != nil,
      "needs root, setpriv and curl to make requests as another user"))
  func withoutATokenOneIsMadeAndRequired() throws {
    let directory = try TemporaryDirectory("web-made")
    let socket = "\(directory.path)/no-rampd.sock"
    let web = try WebServerProcess(["--socket", socket])
    let tokenFile = "\(web.stateDirectory)/token"
    #expect(web.log.contains("made a token, kept in \(tokenFile)"), "\(web.log)")
    var status = stat()
    try #require(stat(tokenFile, &status) == 0, "no token file at \(tokenFile)")
    #expect(status.st_mode & 0o777 == 0o600, "mode \(String(status.st_mode & 0o777, radix: 8))")
    try #require(stat(web.stateDirectory, &status) == 0)
    #expect(status.st_mode & 0o777 == 0o700, "mode \(String(status.st_mode & 0o777, radix: 8))")
    let stored = try String(contentsOfFile: tokenFile, encoding: .utf8)
    #expect(stored == web.token + "\n")
    #expect(web.token.count == 48 && web.token.allSatisfy(\.isHexDigit), "\(web.token)")

    // `nobody`, with no group of the test's, on the same loopback address.
    func asStranger(_ arguments: [String]) throws -> ProcessOutcome {
      try runProcess(
        SystemTool.path("setpriv")!,
        [
          "--reuid=65534", "--regid=65534", "--clear-groups", "--", SystemTool.path("curl")!, "-s", "-o", "/dev/null",
          "-w", "%{http_code}",
        ] + arguments, environment: [:])
    }
    let base = "http://127.0.0.1:\(web.port)"
    for path in ["/", "/page.js", "/live", "/?token=", "/?token=\(String(web.token.reversed()))"] {
      let outcome = try asStranger([base + path])
      #expect(outcome.stdout == "401", "\(path) as nobody: \(outcome)")
    }
    let unreadable = try runProcess(
      SystemTool.path("setpriv")!, ["--reuid=65534", "--regid=65534", "--clear-groups", "--", "/bin/cat", tokenFile],
      environment: [:])
    #expect(unreadable.status != 0 && unreadable.stdout.isEmpty, "nobody read the token: \(unreadable)")
    #expect(try asStranger([web.url]).stdout == "200", "the printed address works, for whoever holds it")
    #expect(try asStranger(["-H", "Authorization: Bearer \(web.token)", base + "/"]).stdout == "200")

    // The same token on every start, and in --show-url (which serves nothing).
    let environment = ["STATE_DIRECTORY": web.stateDirectory]
    let shown = try runProcess(Executables.rampdWeb, ["--show-url", "--port", "6690"], environment: environment)
    #expect(shown.status == 0, "\(shown)")
    #expect(shown.stdout == "http://127.0.0.1:6690/?token=\(web.token)\n", "\(shown)")
    let again = try WebServerProcess(["--socket", socket], environment: environment)
    #expect(again.token == web.token)
    #expect(!again.log.contains("made a token"), "\(again.log)")
  }

  /// Two states directories, two tokens: a system unit and a user unit each get their own.
  @Test func eachStateDirectoryHasItsOwnToken() throws {
    let first = try WebServerProcess([])
    let second = try WebServerProcess([])
    #expect(first.token != second.token)
    #expect(try HTTP.request(port: second.port, "GET", "/?token=\(first.token)").status == 401)
    #expect(try HTTP.request(port: second.port, "GET", "/?token=\(second.token)").status == 200)
  }

  /// A token file that others may read, or that holds no token, is refused (exit 73) rather than
  /// trusted or silently replaced.
  @Test func aTokenFileOthersMayReadIsRefused() throws {
    let directory = try TemporaryDirectory("web-mode")
    let state = "\(directory.path)/state"
    try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
    let tokenFile = "\(state)/token"
    try "\(Self.token)\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
    chmod(tokenFile, 0o644)
    let refused = try runProcess(Executables.rampdWeb, ["--show-url"], environment: ["STATE_DIRECTORY": state])
    #expect(refused.status == 73, "\(refused)")
    #expect(refused.stderr.contains("\(tokenFile) may be read by others (mode 644)"), "\(refused)")
    chmod(tokenFile, 0o600)
    let accepted = try runProcess(Executables.rampdWeb, ["--show-url"], environment: ["STATE_DIRECTORY": state])
    #expect(accepted.stdout == "http://127.0.0.1:6690/?token=\(Self.token)\n", "\(accepted)")
    try "short\n".write(toFile: tokenFile, atomically: false, encoding: .utf8)
    let garbled = try runProcess(Executables.rampdWeb, ["--show-url"], environment: ["STATE_DIRECTORY": state])
    #expect(garbled.status == 73, "\(garbled)")
    #expect(garbled.stderr.contains("\(tokenFile) does not hold a token"), "\(garbled)")
  }
}
