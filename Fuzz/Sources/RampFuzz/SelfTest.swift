import Foundation

/// `RAMPD_FUZZ_SELF_TEST=crash|leak|hang` makes every input fail that way, so `script/fuzz
/// --self-test` can prove that a crash, a leak and a hang each stop the run with a reproducer.
enum SelfTest {
  static let mode = ProcessInfo.processInfo.environment["RAMPD_FUZZ_SELF_TEST"]

  final class Lost {
    var payload = [UInt8](repeating: 7, count: 64)
  }

  static func afterInput() {
    switch mode {
    case "crash":
      fatalError("self-test: a deliberate crash")
    case "leak":
      // Unreachable once this returns: LeakSanitizer must report it.
      for _ in 0..<64 { _ = Unmanaged.passRetained(Lost()) }
    case "hang":
      while true { sleep(1) }
    default:
      break
    }
  }
}
