import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// A tool of ours run as a child (rampd-web, rampd-osc, rampd-mqtt), its standard error gathered
/// as its log, stopped as systemd stops it (SIGTERM, then waited for) when released.
final class LoggedProcess {
  let process = Process()
  private let sink = LogSink()
  var log: String { sink.text }

  init(_ executable: String, _ arguments: [String], environment: [String: String]) throws {
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.environment = environment
    let errors = Pipe()
    process.standardOutput = FileHandle.nullDevice
    process.standardError = errors
    sink.collect(from: errors)
    try process.run()
  }

  /// Waits until `ready` finds what it looks for in the log (the tool says it serves); throws
  /// `failure` with the log when the tool exits or `timeout` seconds pass first.
  func waitUntil(_ failure: String, timeout: Double = 20, _ ready: (String) throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while try !ready(log) {
      guard process.isRunning, Date() < deadline else { throw HarnessError("\(failure): \(log)") }
      usleep(10_000)
    }
  }

  deinit { terminate() }

  /// SIGTERM, as systemd stops it; its exit status.
  @discardableResult
  func terminate() -> Int32 {
    if process.isRunning { process.terminate() }
    process.waitUntilExit()
    return process.terminationStatus
  }

  /// SIGKILL: gone without a word, as a crash or a power cut.
  func kill() {
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }
}
