import Foundation
import RampProtocol

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

extension Executables {
  /// As the package installs it: a link to rampd by that name.
  static var rampdMQTT: String { rampd(as: "rampd-mqtt") }
}

/// Debian's Mosquitto 2.0 and its clients (script/setup installs mosquitto and mosquitto-clients).
enum MosquittoTools {
  static let broker = "/usr/sbin/mosquitto"
  static let publish = "/usr/bin/mosquitto_pub"
  static let subscribe = "/usr/bin/mosquitto_sub"

  static func check() throws {
    for tool in [broker, publish, subscribe] where !FileManager.default.isExecutableFile(atPath: tool) {
      throw HarnessError("\(tool) is missing: script/setup installs Debian's mosquitto and mosquitto-clients")
    }
  }
}

/// A real Mosquitto broker on a free loopback port, with a configuration and a persistence
/// directory of its own (not the system's service): sessions and retained messages survive
/// `restart()`, as they would a broker's reboot.
/// One `mosquitto_pub -l` to `topic`, started once, publishing each line written to it (QoS 1):
/// a script's way of sending many messages without a process each.
final class LinePublisher {
  private let process = Process()
  private let input = Pipe()

  init(broker: Broker, topic: String) throws {
    process.executableURL = URL(fileURLWithPath: MosquittoTools.publish)
    process.arguments = ["-h", "127.0.0.1", "-p", "\(broker.port)", "-q", "1", "-t", topic, "-l"]
    process.standardInput = input
    try withSignalsUnblocked { try process.run() }
  }

  /// Publishes `line` (a newline is added).
  func publish(_ line: String) { input.fileHandleForWriting.write(Data("\(line)\n".utf8)) }

  /// Ends its input and waits for it to exit.
  func finish() throws {
    try input.fileHandleForWriting.close()
    process.waitUntilExit()
  }
}

final class Broker {
  let port: Int
  private let directory: TemporaryDirectory
  private var process = Process()
  private let sink = LogSink()
  var log: String { sink.text }

  init() throws {
    try MosquittoTools.check()
    directory = try TemporaryDirectory("mosquitto")
    port = try Loopback.freeTCPPort()
    // Run as root (a container's tests), Mosquitto would become the user mosquitto, who cannot
    // write here; as anyone else `user` is ignored.
    let configuration = """
      listener \(port) 127.0.0.1
      allow_anonymous true
      set_tcp_nodelay true
      persistence true
      persistence_location \(directory.path)/
      user \(String(cString: getpwuid(geteuid()).pointee.pw_name))
      log_dest stderr
      log_type error
      log_type warning
      log_type notice
      log_type information
      """
    try configuration.write(toFile: "\(directory.path)/mosquitto.conf", atomically: true, encoding: .utf8)
    try start()
  }

  deinit { stop() }

  func start() throws {
    process = Process()
    process.executableURL = URL(fileURLWithPath: MosquittoTools.broker)
    process.arguments = ["-c", "\(directory.path)/mosquitto.conf"]
    let errors = Pipe()
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    sink.collect(from: errors)
    try withSignalsUnblocked { try process.run() }
    let deadline = Date().addingTimeInterval(10)
    while !Self.accepts(port: port) {
      guard process.isRunning, Date() < deadline else { throw HarnessError("mosquitto did not start: \(log)") }
      usleep(10_000)
    }
  }

  /// SIGTERM: Mosquitto saves its sessions and queued messages, then exits.
  func stop() {
    guard process.isRunning else { return }
    process.terminate()
    process.waitUntilExit()
  }

  func restart() throws {
    stop()
    try start()
  }

  /// Publishes one message with mosquitto_pub (QoS 1 unless told).
  func publish(_ topic: String, _ payload: String, qos: Int = 1, retain: Bool = false) throws {
    let outcome = try mosquittoTool(
      MosquittoTools.publish,
      ["-h", "127.0.0.1", "-p", "\(port)", "-q", "\(qos)", "-t", topic, "-m", payload] + (retain ? ["-r"] : []))
    guard outcome.status == 0 else { throw HarnessError("mosquitto_pub \(topic): \(outcome)") }
  }

  /// The first `count` messages on `topic` (retained ones first) as `topic payload` lines, read
  /// with mosquitto_sub within `timeout` seconds; fewer if fewer came.
  func messages(_ topic: String, count: Int, timeout: Int = 5) throws -> [(topic: String, payload: String)] {
    let outcome = try mosquittoTool(
      MosquittoTools.subscribe,
      ["-h", "127.0.0.1", "-p", "\(port)", "-t", topic, "-v", "-C", "\(count)", "-W", "\(timeout)"])
    return outcome.stdout.split(separator: "\n").map { line in
      let space = line.firstIndex(of: " ") ?? line.endIndex
      return (String(line[..<space]), String(line[space...].dropFirst()))
    }
  }

  /// The retained message on `topic` (nil: none within a second).
  func retained(_ topic: String) throws -> String? {
    try messages(topic, count: 1, timeout: 1).first?.payload
  }

  /// Waits until the retained message on `topic` is `payload`.
  func waitFor(_ topic: String, _ payload: String, timeout: Double = 10) throws {
    let deadline = Date().addingTimeInterval(timeout)
    var last: String?
    while Date() < deadline {
      last = try retained(topic)
      if last == payload { return }
      usleep(50_000)
    }
    throw HarnessError("\(topic) is \(last ?? "nothing"), not \(payload), after \(timeout) s")
  }

  private static func accepts(port: Int) -> Bool {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var address = Loopback.address(port: UInt16(port))
    return withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
      }
    }
  }
}

/// A real `rampd-mqtt` between `broker` and `daemon`'s socket.
final class BridgeProcess {
  let tool: LoggedProcess
  let box: String
  var process: Process { tool.process }
  var log: String { tool.log }

  init(box: String, broker: Broker, socket: String, arguments: [String] = []) throws {
    self.box = box
    tool = try LoggedProcess(
      Executables.rampdMQTT,
      ["--broker", "mqtt://127.0.0.1:\(broker.port)", "--box", box, "--socket", socket] + arguments,
      environment: childEnvironment)
    try tool.waitUntil("rampd-mqtt did not connect", timeout: 15) {
      $0.contains("connected to the broker") && $0.contains("connected to rampd")
    }
  }

  /// SIGTERM, as systemd stops it; its exit status.
  @discardableResult
  func terminate() -> Int32 { tool.terminate() }

  /// SIGKILL: gone without a word, as a crash or a power cut.
  func kill() { tool.kill() }

  /// How many times its log says `text`.
  func count(_ text: String) -> Int { log.components(separatedBy: text).count - 1 }
}

/// Runs `body` (which starts a child) with no signal blocked: a child inherits its parent
/// thread's signal mask, and the test's threads block some. Mosquitto would never see `stop()`'s
/// SIGTERM, nor mosquitto_sub its -W alarm.
func withSignalsUnblocked<T>(_ body: () throws -> T) rethrows -> T {
  var none = sigset_t()
  var previous = sigset_t()
  sigemptyset(&none)
  pthread_sigmask(SIG_SETMASK, &none, &previous)
  defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
  return try body()
}

/// mosquitto_pub or mosquitto_sub to its end (`runProcess`, signals unblocked).
func mosquittoTool(_ tool: String, _ arguments: [String], stdin: String? = nil) throws -> ProcessOutcome {
  try withSignalsUnblocked { try runProcess(tool, arguments, stdin: stdin) }
}

/// The model value of `key` in `daemon`.
func model(_ key: String, _ daemon: DaemonProcess) throws -> Double? {
  try daemon.client().request(["cmd": "get", "key": .string(key)]).result["model"]?.numberValue
}

/// The runs of equal samples in `samples`: each value with how many samples in a row it held.
func runs(_ samples: [Float]) -> [(value: Float, count: Int)] {
  var result: [(value: Float, count: Int)] = []
  for sample in samples {
    if let last = result.last, last.value == sample {
      result[result.count - 1].count += 1
    } else {
      result.append((sample, 1))
    }
  }
  return result
}
