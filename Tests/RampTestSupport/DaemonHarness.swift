import Foundation
import RampAudio
import RampProtocol
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The built executables (`swift build --build-tests` builds them next to the test bundle).
enum Executables {
  static let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path
  /// Where rampd and rampctl are: next to the test bundle, else the main package's debug build.
  static let tools =
    FileManager.default.isExecutableFile(atPath: "\(directory)/rampd") ? directory : "\(Repository.root)/.build/debug"
  /// RAMPD_TEST_BINARY runs the daemon tests on another build (a release build, to measure).
  static var rampd: String { ProcessInfo.processInfo.environment["RAMPD_TEST_BINARY"] ?? "\(tools)/rampd" }
  static var rampctl: String { "\(tools)/rampctl" }
  /// rampd's executable under the name of another tool it carries (rampd-web, rampd-osc, rampd-mqtt), as
  /// the package installs it: a link to `rampd` (RAMPD_TEST_BINARY's when set) by that name.
  static func rampd(as tool: String) -> String {
    let link = "\(toolLinks)/\(tool)"
    if (try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == nil {
      try? FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: rampd)
    }
    return link
  }
  /// A directory of the tests' own for those links, made once per test process.
  private static let toolLinks: String = {
    var template = Array("\(FileManager.default.temporaryDirectory.path)/rampd-tools-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
  }()
}

/// What a finished child process said.
struct ProcessOutcome: CustomStringConvertible {
  var status: Int32
  var stdout: String
  var stderr: String
  var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

/// The tests' environment without its `RAMPD_` variables: what every rampd and rampctl the
/// harness starts is given, with what the test sets on top. rampd refuses a `RAMPD_` variable it
/// does not own (a misspelt setting must not pass unnoticed), and the harness's own knobs
/// (`RAMPD_FUZZ`, `RAMPD_TEST_SEED`, `RAMPD_TEST_BINARY`) and a developer's own settings
/// (`RAMPD_SOCKET`, `RAMPD_OUTPUT_DEVICE`) are not the daemon under test's to read.
let childEnvironment = withoutRampdVariables(ProcessInfo.processInfo.environment)

/// `environment` without its `RAMPD_` variables (see `childEnvironment`).
func withoutRampdVariables(_ environment: [String: String]) -> [String: String] {
  environment.filter { !$0.key.hasPrefix("RAMPD_") }
}

/// Runs `executable` to its end, feeding it `stdin` and collecting both of its outputs; its
/// environment is `environment`, else `childEnvironment`.
func runProcess(
  _ executable: String, _ arguments: [String], environment: [String: String]? = nil, stdin: String? = nil,
  directory: String? = nil
) throws -> ProcessOutcome {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  process.environment = environment ?? childEnvironment
  if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
  let output = Pipe()
  let errors = Pipe()
  process.standardOutput = output
  process.standardError = errors
  let input = Pipe()
  process.standardInput = input
  try process.run()
  if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
  try input.fileHandleForWriting.close()
  // Both pipes are read to their end before waiting, so a full pipe cannot stall the child.
  let collected = DispatchGroup()
  nonisolated(unsafe) var errorText = ""
  DispatchQueue.global().async(group: collected) {
    errorText = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  }
  let outputText = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  collected.wait()
  process.waitUntilExit()
  return ProcessOutcome(status: process.terminationStatus, stdout: outputText, stderr: errorText)
}

/// rampd on the embedded output (there is no device `rampd_no_such_device`) into `file` (nil: its
/// default), its socket `socket` (default `directory/s.sock`) and state file
/// `directory/state.json`, with these `RAMPD_` variables and no others; returns once it greets on
/// the socket (or after 4 s). Its standard error goes to `log` when given.
func startRampdWithoutADevice(
  in directory: String, file: String?, socket: String? = nil, environment extra: [String: String] = [:],
  log: String? = nil
) throws -> Process {
  let socket = socket ?? "\(directory)/s.sock"
  let process = Process()
  process.executableURL = URL(fileURLWithPath: Executables.rampd)
  process.arguments =
    ["--socket", socket, "--device", "rampd_no_such_device"] + (file.map { ["--embedded-file", $0] } ?? [])
  // Its own state file: daemons sharing one refuse each other.
  process.environment = childEnvironment.merging(
    ["RAMPD_STATE_PATH": "\(directory)/state.json"].merging(extra) { $1 }
  ) { $1 }
  if let log {
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    process.standardError = FileHandle(forWritingAtPath: log)
  } else {
    process.standardError = FileHandle.nullDevice
  }
  try process.run()
  // The socket file appears at bind, a moment before rampd listens: wait for a greeting.
  for _ in 0..<400 where process.isRunning && (try? LineClient(path: socket)) == nil { usleep(10_000) }
  return process
}

/// A real `rampd` process playing into ALSA's `file` plugin over `null` (raw float samples, paced
/// by the clock), with its own socket, configuration and recording in a temporary directory.
final class DaemonProcess {
  let directory: String
  let socket: String
  let recording: String
  let process = Process()
  let stderr = Pipe()
  /// What rampd wrote to standard error, read as it comes: a full pipe would stop the daemon at its
  /// next log line.
  private let logSink = LogSink()
  var log: String { logSink.text }
  /// The read end of the recording when it is a named pipe (`recordingIsPipe`), else -1.
  private(set) var pipeReadEnd: CInt = -1
  /// A daemon started on an earlier one's directory leaves it for that one to remove.
  private let ownsDirectory: Bool

  init(
    name: String = #function, limiter: String = "-1dBTP", extraConfiguration: String = "", extraALSA: String = "",
    periodMs: Int = 5,
    bufferMs: Int = 20, environment extraEnvironment: [String: String] = [:], journal: Bool = false,
    reusing earlier: String? = nil, realtimeLimit: Int? = nil, launcher: [String] = [], pacing: String = "clock",
    recordingIsPipe: Bool = false
  ) throws {
    ownsDirectory = earlier == nil
    directory =
      earlier
      ?? NSTemporaryDirectory()
      + "rampd-e2e-\(getpid())-\(name.filter(\.isLetter))-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    socket = "\(directory)/rampd.sock"
    recording = "\(directory)/played.raw"
    let values = [
      "device": "rampd_e2e", "recording": recording, "socket": socket, "state": "\(directory)/state.json",
      "period": "\(periodMs)ms", "buffer": "\(bufferMs)ms", "pacing": pacing, "limiter": limiter,
    ]
    let alsa = try Fixture.filled("test-daemon.asound.conf", values) + extraALSA
    try alsa.write(toFile: "\(directory)/asound.conf", atomically: true, encoding: .utf8)
    let toml = try Fixture.filled("test-daemon.toml", values) + extraConfiguration + "\n"
    try toml.write(toFile: "\(directory)/rampd.toml", atomically: true, encoding: .utf8)
    process.executableURL = URL(fileURLWithPath: Executables.rampd)
    process.arguments = ["--config", "\(directory)/rampd.toml"]
    if let realtimeLimit {
      // As systemd's LimitRTPRIO= does: prlimit sets it, then becomes rampd (the same process).
      process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
      process.arguments = ["--rtprio=\(realtimeLimit)", "--", Executables.rampd] + process.arguments!
    }
    if let command = launcher.first {
      // Runs rampd (prlimit, setpriv: commands that become it).
      process.arguments = launcher.dropFirst() + [process.executableURL!.path] + process.arguments!
      process.executableURL = URL(fileURLWithPath: command)
    }
    var environment = childEnvironment
    environment["ALSA_CONFIG_PATH"] = "/usr/share/alsa/alsa.conf:\(directory)/asound.conf"
    environment.merge(extraEnvironment) { $1 }
    if journal {
      // As systemd does: the device and inode of the stream standard error goes to.
      var info = stat()
      fstat(stderr.fileHandleForWriting.fileDescriptor, &info)
      environment["JOURNAL_STREAM"] = "\(info.st_dev):\(info.st_ino)"
    }
    process.environment = environment
    process.standardError = stderr
    logSink.collect(from: stderr)
    process.standardOutput = FileHandle.nullDevice
    if recordingIsPipe {
      // Opened for reading now (rampd opens it for writing as it starts) and read only when the
      // test says: until then the render thread stops at the write that finds the pipe full.
      unlink(recording)
      guard mkfifo(recording, 0o600) == 0 else { throw HarnessError("mkfifo \(recording) failed") }
      pipeReadEnd = open(recording, O_RDONLY | O_NONBLOCK)
    }
    // An earlier daemon killed on this directory left its socket file: wait for the new one.
    unlink(socket)
    try process.run()
    let deadline = Date().addingTimeInterval(20)
    // The socket file appears at bind, a moment before rampd listens: wait for a greeting.
    while (try? LineClient(path: socket)) == nil {
      guard process.isRunning, Date() < deadline else {
        throw HarnessError("rampd did not start: \(readLog())")
      }
      usleep(10_000)
    }
  }

  deinit {
    if process.isRunning { terminate() }
    if ownsDirectory { try? FileManager.default.removeItem(atPath: directory) }
  }

  func client() throws -> LineClient { try LineClient(path: socket) }

  /// Stops the daemon (SIGTERM) and returns its exit status.
  @discardableResult
  func stop() -> Int32 {
    terminate()
    _ = readLog()
    return process.terminationStatus
  }

  /// SIGTERM, and SIGKILL if that has not ended it within 20 s: a daemon that no longer stops (a
  /// render thread spinning on a failed device) fails its test instead of hanging the suite.
  private func terminate() {
    process.terminate()
    let deadline = Date().addingTimeInterval(20)
    while process.isRunning, Date() < deadline { usleep(20_000) }
    if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
  }

  /// The log so far; once the daemon has exited, all of it.
  @discardableResult
  func readLog() -> String {
    if !process.isRunning {
      stderr.fileHandleForReading.readabilityHandler = nil
      logSink.append(stderr.fileHandleForReading.readDataToEndOfFile())
    }
    return log
  }

  /// Every sample played so far, interleaved stereo.
  func played() throws -> [Float] {
    let data = try Data(contentsOf: URL(fileURLWithPath: recording))
    return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
  }

  /// One channel of what was played.
  func played(channel: Int) throws -> [Float] {
    let all = try played()
    return stride(from: channel, to: all.count, by: 2).map { all[$0] }
  }

  /// A stereo float WAV of `seconds` with `left` and `right` constant values.
  func constantFile(_ name: String, seconds: Double, left: Float = 1, right: Float = 1) throws -> String {
    let path = "\(directory)/\(name).wav"
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    let frames = Int(seconds * 48_000)
    var buffer = [Float](repeating: 0, count: frames * 2)
    for frame in 0..<frames {
      buffer[2 * frame] = left
      buffer[2 * frame + 1] = right
    }
    try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
    return path
  }
}

/// Text gathered from another thread.
final class LogSink: @unchecked Sendable {
  private let lock = NSLock()
  private var data = Data()

  func append(_ more: Data) {
    lock.withLock { data.append(more) }
  }

  /// Appends what comes out of `pipe`, as it comes (a full pipe would stop its writer).
  func collect(from pipe: Pipe) {
    pipe.fileHandleForReading.readabilityHandler = { [self] handle in
      let data = handle.availableData
      // End of file: the handler would be called again and again.
      if data.isEmpty { handle.readabilityHandler = nil }
      append(data)
    }
  }

  var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }
}

/// The files in Tests/Fixtures: ALSA plugins built into shared libraries with cc, and the
/// configuration templates of a daemon under test (shared with the Python client's tests).
enum Fixture {
  static func path(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .appendingPathComponent("Fixtures/\(name)").path
  }

  /// Template `name` with every `{key}` of `values` replaced by its value.
  static func filled(_ name: String, _ values: [String: String]) throws -> String {
    var text = try String(contentsOfFile: path(name), encoding: .utf8)
    for (key, value) in values { text = text.replacingOccurrences(of: "{\(key)}", with: value) }
    return text
  }

  static func compile(_ name: String, to library: String) throws {
    try cc(["-shared", "-fPIC", "-o", library, path(name), "-lasound"])
  }

  /// Fixture `name`, a program, built against the C library `package` names to pkg-config.
  static func compileProgram(_ name: String, to program: String, package: String) throws {
    let flags = try runProcess("/usr/bin/pkg-config", ["--cflags", "--libs", package])
    guard flags.status == 0 else { throw HarnessError("pkg-config \(package): \(flags)") }
    try cc(["-O2", "-o", program, path(name)] + flags.stdout.split(whereSeparator: \.isWhitespace).map(String.init))
  }

  private static func cc(_ arguments: [String]) throws {
    let compiler = Process()
    compiler.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    compiler.arguments = ["cc"] + arguments
    try compiler.run()
    compiler.waitUntilExit()
    guard compiler.terminationStatus == 0 else { throw HarnessError("cc \(arguments.joined(separator: " ")) failed") }
  }
}

struct HarnessError: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// A plain blocking Unix-socket client speaking lines of JSON, as a script would.
final class LineClient {
  let descriptor: CInt
  private var pending: [UInt8] = []
  /// Events read while waiting for replies, in arrival order.
  private(set) var events: [JSONValue] = []
  private(set) var greeting: JSONValue = .null
  private var nextID = 0

  init(path: String) throws {
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    self.descriptor = descriptor
    let connected = UnixAddress(path)?.connect(descriptor) ?? -1
    guard connected == 0 else { throw HarnessError("connect \(path): \(String(cString: strerror(errno)))") }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    greeting = try readLine()
    guard greeting["hello"] != nil else { throw HarnessError("refused: \(greeting.serialized())") }
  }

  deinit { close(descriptor) }

  func send(raw line: String, newline: Bool = true) throws {
    try send(bytes: Array((newline ? line + "\n" : line).utf8))
  }

  func send(bytes: [UInt8]) throws {
    var sent = 0
    while sent < bytes.count {
      let result = bytes[sent...].withUnsafeBytes {
        Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      guard result > 0 else { throw HarnessError("send: \(String(cString: strerror(errno)))") }
      sent += result
    }
  }

  /// Sends `request` with a fresh id and returns its reply; events on the way are kept.
  @discardableResult
  func request(_ request: JSONObject) throws -> JSONValue {
    nextID += 1
    var object = request
    object["id"] = .integer(nextID)
    try send(raw: JSONValue.object(object).serialized())
    return try reply(to: nextID)
  }

  /// The reply with `id`, keeping the events read before it.
  func reply(to id: Int) throws -> JSONValue {
    while true {
      let line = try readLine()
      if line["event"] != nil {
        events.append(line)
        continue
      }
      if line["id"] == .integer(id) { return line }
      throw HarnessError("unexpected line \(line.serialized()) while waiting for reply \(id)")
    }
  }

  /// Reads lines until an event matches, returning it (all events are kept).
  func waitForEvent(timeout: Double = 10, _ match: (JSONValue) -> Bool) throws -> JSONValue {
    if let found = events.first(where: match) { return found }
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      let line = try readLine()
      guard line["event"] != nil else { throw HarnessError("unexpected reply \(line.serialized())") }
      events.append(line)
      if match(line) { return line }
    }
    throw HarnessError("no matching event in \(timeout) s; saw \(events.map { $0.serialized() })")
  }

  func readLine() throws -> JSONValue {
    switch try receiveLine(from: descriptor, pending: &pending) {
    case .line(let bytes): return try JSON.parse(String(decoding: bytes, as: UTF8.self))
    case .closed: throw HarnessError("connection closed")
    case .failed: throw HarnessError("recv: timed out or failed")
    }
  }

  /// True when the daemon closed the connection: end of stream, or a reset (it closed with our
  /// unread bytes still queued).
  func isClosedByPeer() -> Bool { readsUntilClosed(descriptor) }
}

/// What the next line of a connection came to.
enum ReceivedLine {
  case line([UInt8])
  /// End of stream, or a reset.
  case closed
  /// `recv` failed otherwise (its timeout), `errno` says why.
  case failed
}

/// The next line of `descriptor` without its newline, reading into `pending` as needed (what
/// follows the line stays there for the next call).
func receiveLine(from descriptor: CInt, pending: inout [UInt8]) throws -> ReceivedLine {
  while true {
    if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
      let line = Array(pending[..<newline])
      pending.removeSubrange(...newline)
      return .line(line)
    }
    var buffer = [UInt8](repeating: 0, count: 65_536)
    let count = recv(descriptor, &buffer, buffer.count, 0)
    if count == 0 || (count < 0 && errno == ECONNRESET) { return .closed }
    guard count > 0 else { return .failed }
    pending += buffer[..<count]
  }
}

/// Reads `descriptor` until the peer closes it; true when it did (end of stream, or a reset),
/// false when `recv` failed otherwise (its timeout).
func readsUntilClosed(_ descriptor: CInt) -> Bool {
  var buffer = [UInt8](repeating: 0, count: 65_536)
  while true {
    let count = recv(descriptor, &buffer, buffer.count, 0)
    if count == 0 { return true }
    if count < 0 { return errno == ECONNRESET }
  }
}

extension JSONValue {
  var isOK: Bool { self["ok"] == .bool(true) }
  var errorCode: String? { self["error"]?["code"]?.stringValue }
  var errorField: String? { self["error"]?["field"]?.stringValue }
  var errorMessage: String? { self["error"]?["message"]?.stringValue }
  var result: JSONValue { self["result"] ?? .null }
  var int: Int? { numberValue.map { Int($0) } }
}

/// ALSA's own configuration, for a test that uses the default device.
enum AlsaConfiguration {
  /// /usr/share/alsa/alsa.conf without its top-level `@hooks [...]`: without the files it loads
  /// from /etc and home, which alsa-lib reads after every file of `ALSA_CONFIG_PATH` (so a
  /// machine's PipeWire or PulseAudio `pcm.!default` would win over a test's own).
  static func withoutHooks(_ path: String = "/usr/share/alsa/alsa.conf") throws -> String {
    let configuration = try String(contentsOfFile: path, encoding: .utf8)
    guard let start = configuration.range(of: "\n@hooks [") else { return configuration }
    var depth = 0
    var index = configuration.index(after: start.lowerBound)
    while index < configuration.endIndex {
      if configuration[index] == "[" { depth += 1 }
      if configuration[index] == "]" {
        depth -= 1
        if depth == 0 { break }
      }
      index = configuration.index(after: index)
    }
    guard index < configuration.endIndex else { return configuration }
    return String(configuration[..<start.lowerBound]) + "\n" + configuration[configuration.index(after: index)...]
  }
}
