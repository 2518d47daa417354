import CFuzzDriver
import Foundation

// The Swift runtime's crash handler would take a trap before libFuzzer (which leaves a handler
// already installed alone) and, under AddressSanitizer, fail reading memory itself; and
// LeakSanitizer reads its suppressions at start. Both come from the environment, so the target
// starts itself again with them when run bare (a reproducer replayed by hand).
if getenv("RAMPD_FUZZ_ENVIRONMENT") == nil {
  let suppressions = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../../lsan.supp").standardized.path
  let leakOptions = ProcessInfo.processInfo.environment["LSAN_OPTIONS"] ?? ""
  if !leakOptions.contains("suppressions=") {
    setenv("LSAN_OPTIONS", "suppressions=\(suppressions):print_suppressions=0:" + leakOptions, 1)
  }
  setenv("SWIFT_BACKTRACE", "enable=no", 0)
  setenv("RAMPD_FUZZ_ENVIRONMENT", "1", 1)
  // Through its own path rather than /proc/self/exe, which would name the process "exe".
  let path = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
  execv(path, CommandLine.unsafeArgv)
}

// `--structured REQUESTS [SEED]`: the structure-aware fuzzer (Structured.swift) instead of libFuzzer.
if CommandLine.arguments.count >= 3, CommandLine.arguments[1] == "--structured",
  let requests = Int(CommandLine.arguments[2])
{
  let seed = CommandLine.arguments.count > 3 ? UInt64(CommandLine.arguments[3]) ?? 1 : 1
  let started = Clock.now
  var fuzzer = StructuredFuzzer(seed: seed, directory: harness.directory, replyTimeout: harness.replyTimeout)
  fuzzer.run(requests: requests)
  print(
    "structured: \(fuzzer.sent) requests (seed \(seed)) in \(Int((Clock.now - started).rounded())) s, each followed by"
      + " a ping; no crash, no hang, every liveness check answered")
  let replies = fuzzer.outcomes.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }
  print("structured: replies read: \(replies.joined(separator: ", "))")
  exit(0)
}

// libFuzzer's flags and inputs come on the command line (`RampFuzz -runs=1000 corpus/`, or a
// reproducer's path).
var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in rampFuzzTestOneInput(data, size) })

/// One input: the byte stream of one client connection. Also exported under libFuzzer's usual
/// name, which its runtime refers to.
@_cdecl("LLVMFuzzerTestOneInput")
func rampFuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  harness.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
  SelfTest.afterInput()
  return 0
}
