import CFuzzDriver
import Foundation

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
