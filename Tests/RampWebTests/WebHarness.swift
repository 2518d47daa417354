import Foundation
import RampProtocol

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

extension Executables {
  /// As the package installs it: a link to rampd by that name.
  static var rampdWeb: String { rampd(as: "rampd-web") }
}

/// A real `rampd-web` process, started on a free loopback port (`--port 0`): the port and the
/// token are read from the address it prints once it serves. Its state directory (where it keeps
/// the token it makes) is one of its own unless the environment names one (`STATE_DIRECTORY`).
final class WebServerProcess {
  let tool: LoggedProcess
  let port: Int
  /// The address it printed, the token included.
  let url: String
  let token: String
  /// Where it keeps a token it makes (`STATE_DIRECTORY`).
  let stateDirectory: String
  private let state: TemporaryDirectory
  var process: Process { tool.process }
  var log: String { tool.log }

  init(_ arguments: [String], environment extra: [String: String] = [:]) throws {
    state = try TemporaryDirectory("web-state")
    var environment = childEnvironment
    environment["STATE_DIRECTORY"] = "\(state.path)/rampd-web"
    environment.merge(extra) { $1 }
    stateDirectory = environment["STATE_DIRECTORY"]!
    tool = try LoggedProcess(Executables.rampdWeb, ["--port", "0"] + arguments, environment: environment)
    var served: (url: String, port: Int, token: String)?
    let pattern = try Regex(#"serving (http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9._~-]+)) "#)
    try tool.waitUntil("rampd-web did not start") { log in
      guard let match = log.firstMatch(of: pattern) else { return false }
      served = (
        String(match.output[1].substring!), Int(match.output[2].substring!)!, String(match.output[3].substring!)
      )
      return true
    }
    (url, port, token) = served!
  }
}

/// One HTTP/1.1 exchange over a fresh loopback TCP connection (`Connection: close`), as raw as a
/// test needs it: any header may be set, `Host` and `Origin` included.
enum HTTP {
  struct Reply {
    var status: Int
    var headers: [(String, String)]
    var body: String
    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
  }

  static func request(
    port: Int, _ method: String, _ path: String, headers: [(String, String)] = [], body: String? = nil
  ) throws -> Reply {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw HarnessError("socket: \(errno)") }
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = in_addr_t(UInt32(0x7f00_0001).bigEndian)
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard connected == 0 else { throw HarnessError("cannot connect to 127.0.0.1:\(port): \(errno)") }
    var all = headers
    if !all.contains(where: { $0.0.lowercased() == "host" }) { all.append(("Host", "127.0.0.1:\(port)")) }
    all.append(("Connection", "close"))
    if let body {
      all.append(("Content-Type", "application/json"))
      all.append(("Content-Length", "\(body.utf8.count)"))
    }
    let head = "\(method) \(path) HTTP/1.1\r\n" + all.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
    let bytes = Array((head + (body ?? "")).utf8)
    var sent = 0
    while sent < bytes.count {
      let result = bytes[sent...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
      guard result > 0 else { throw HarnessError("sending failed: \(errno)") }
      sent += result
    }
    var timeout = timeval(tv_sec: 30, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
      let count = recv(descriptor, &buffer, buffer.count, 0)
      if count < 0 && errno == EINTR { continue }
      guard count >= 0 else { throw HarnessError("reading failed: \(errno)") }
      if count == 0 { break }
      received += buffer[..<count]
      if let reply = parse(received) { return reply }
    }
    guard let reply = parse(received, complete: true) else {
      throw HarnessError("not an HTTP reply: \(String(decoding: received, as: UTF8.self))")
    }
    return reply
  }

  /// The reply once its head and its whole body (by Content-Length, or to the end) are in.
  private static func parse(_ bytes: [UInt8], complete: Bool = false) -> Reply? {
    let separator = Array("\r\n\r\n".utf8)
    guard let end = (0..<max(0, bytes.count - 3)).first(where: { Array(bytes[$0..<$0 + 4]) == separator }) else {
      return nil
    }
    let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
    let parts = lines[0].split(separator: " ")
    guard parts.count >= 2, let status = Int(parts[1]) else { return nil }
    let headers = lines.dropFirst().compactMap { line -> (String, String)? in
      guard let colon = line.firstIndex(of: ":") else { return nil }
      return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
    }
    let body = Array(bytes[(end + 4)...])
    let length = headers.first { $0.0.lowercased() == "content-length" }.flatMap { Int($0.1) }
    if let length, body.count >= length {
      return Reply(status: status, headers: headers, body: String(decoding: body.prefix(length), as: UTF8.self))
    }
    guard complete else { return nil }
    return Reply(status: status, headers: headers, body: String(decoding: body, as: UTF8.self))
  }
}

/// Headless Chromium from Debian's packages, driven through chromedriver's W3C WebDriver
/// endpoints: load a page, find elements, run a script, move the pointer as a person would.
final class WebDriver {
  static let chromium = "/usr/bin/chromium"
  static let chromedriver = "/usr/bin/chromedriver"

  private let driver = Process()
  private let port: Int
  private let profile: String
  private var session = ""

  init(width: Int = 1100, height: Int = 900) throws {
    for tool in [Self.chromium, Self.chromedriver] where !FileManager.default.isExecutableFile(atPath: tool) {
      throw HarnessError("\(tool) is missing: script/setup installs Debian's chromium and chromium-driver")
    }
    port = try Loopback.freeTCPPort()
    profile = NSTemporaryDirectory() + "rampd-web-chromium-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    driver.executableURL = URL(fileURLWithPath: Self.chromedriver)
    driver.arguments = ["--port=\(port)"]
    driver.standardOutput = FileHandle.nullDevice
    driver.standardError = FileHandle.nullDevice
    try driver.run()
    let deadline = Date().addingTimeInterval(20)
    while (try? HTTP.request(port: port, "GET", "/status"))?.status != 200 {
      guard driver.isRunning, Date() < deadline else { throw HarnessError("chromedriver did not start") }
      usleep(20_000)
    }
    let options: JSONValue = [
      "binary": .string(Self.chromium),
      "args": [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        .string("--window-size=\(width),\(height)"), .string("--user-data-dir=\(profile)"),
      ],
    ]
    let created = try call(
      "POST", "/session",
      ["capabilities": ["alwaysMatch": ["browserName": "chrome", "goog:chromeOptions": options]]])
    guard let id = created["sessionId"]?.stringValue else { throw HarnessError("no session: \(created.serialized())") }
    session = id
  }

  deinit {
    if !session.isEmpty { _ = try? call("DELETE", "/session/\(session)", nil) }
    // chromedriver ignores SIGTERM: it is asked to leave, and killed if it has not.
    _ = try? HTTP.request(port: port, "GET", "/shutdown")
    let deadline = Date().addingTimeInterval(2)
    while driver.isRunning && Date() < deadline { usleep(20_000) }
    if driver.isRunning { kill(driver.processIdentifier, SIGKILL) }
    driver.waitUntilExit()
    try? FileManager.default.removeItem(atPath: profile)
  }

  /// One WebDriver command; its `value`, or the error WebDriver answered.
  @discardableResult
  func call(_ method: String, _ path: String, _ body: JSONValue?) throws -> JSONValue {
    let reply = try HTTP.request(
      port: port, method, path, body: body.map { $0.serialized() } ?? (method == "POST" ? "{}" : nil))
    let parsed = try JSON.parse(reply.body, maxDepth: 64)
    guard reply.status == 200, let value = parsed["value"] else {
      throw HarnessError("WebDriver \(method) \(path): \(reply.status) \(reply.body.prefix(500))")
    }
    return value
  }

  func open(_ url: String) throws { try call("POST", "/session/\(session)/url", ["url": .string(url)]) }

  /// The element matching `selector`, waiting up to `timeout` for it to appear.
  func element(_ selector: String, timeout: Double = 15) throws -> String {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
      if let found = try? call(
        "POST", "/session/\(session)/element", ["using": "css selector", "value": .string(selector)]),
        let id = found.objectValue?.first(where: { _ in true })?.value.stringValue
      {
        return id
      }
      guard Date() < deadline else { throw HarnessError("no element \(selector) after \(timeout) s") }
      usleep(100_000)
    }
  }

  /// Runs `script` in the page (`arguments[0]`… available) and returns what it returns.
  @discardableResult
  func execute(_ script: String, _ arguments: [JSONValue] = []) throws -> JSONValue {
    try call("POST", "/session/\(session)/execute/sync", ["script": .string(script), "args": .array(arguments)])
  }

  /// The viewport as a PNG.
  func screenshot() throws -> Data {
    let encoded = try call("GET", "/session/\(session)/screenshot", nil)
    guard let text = encoded.stringValue, let png = Data(base64Encoded: text) else {
      throw HarnessError("no screenshot: \(encoded.serialized().prefix(200))")
    }
    return png
  }

  /// Waits until `script` returns true.
  func wait(for script: String, timeout: Double = 15) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while try execute(script).boolValue != true {
      guard Date() < deadline else { throw HarnessError("still false after \(timeout) s: \(script)") }
      usleep(50_000)
    }
  }

  /// The element's box in CSS pixels of the viewport.
  func rect(_ element: String) throws -> (x: Double, y: Double, width: Double, height: Double) {
    let value = try call("GET", "/session/\(session)/element/\(element)/rect", nil)
    return (
      value["x"]?.numberValue ?? 0, value["y"]?.numberValue ?? 0, value["width"]?.numberValue ?? 0,
      value["height"]?.numberValue ?? 0
    )
  }

  /// A mouse drag through `points` (viewport pixels): press at the first, move through the rest
  /// (each move taking `stepMs`), release at the last.
  func drag(through points: [(Double, Double)], stepMs: Int = 40) throws {
    var actions: [JSONValue] = []
    for (index, point) in points.enumerated() {
      actions.append([
        "type": "pointerMove", "origin": "viewport", "x": .integer(Int(point.0.rounded())),
        "y": .integer(Int(point.1.rounded())), "duration": .integer(index == 0 ? 0 : stepMs),
      ])
      if index == 0 { actions.append(["type": "pointerDown", "button": 0]) }
    }
    actions.append(["type": "pointerUp", "button": 0])
    try call(
      "POST", "/session/\(session)/actions",
      [
        "actions": [
          ["type": "pointer", "id": "mouse", "parameters": ["pointerType": "mouse"], "actions": .array(actions)]
        ]
      ])
  }
}
