import Foundation
import Testing

@testable import RampAudio

/// In a debug build the render thread's loop runs with allocations guarded: one traps, naming
/// itself and printing where (Sources/CAllocationGuard, in rampd and in the test binary), so
/// every test that plays through a render thread is also an allocation test.
@Suite struct RenderGuardTests {
  /// A command that allocates when it is committed, as none of rampd's may.
  final class AllocatingCommand: RenderCommand {
    func commit(_ state: RenderState) {
      let numbers = [Int](repeating: 7, count: Int(state.engine.now & 0xff) + 100)
      withExtendedLifetime(numbers) {}
    }
  }

  /// Run only in the child process `theGuardTrapsAnAllocationOnTheRenderThread` starts.
  @Test(.enabled(if: ProcessInfo.processInfo.environment["RAMPD_DELIBERATE_ALLOCATION"] != nil))
  func deliberateAllocationOnTheRenderThread() throws {
    let player = try Player(
      output: OutputConfiguration(
        device: "null", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device))
    player.start()
    defer { player.shutdown() }
    usleep(50_000)
    player.submit(AllocatingCommand())
    usleep(500_000)
  }

  /// The deliberate allocation above, in a process of its own: it is aborted, saying so, with the
  /// command's commit in the backtrace.
  @Test func theGuardTrapsAnAllocationOnTheRenderThread() throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = ["--testing-library", "swift-testing", "--filter", "deliberateAllocationOnTheRenderThread"]
    process.environment = ProcessInfo.processInfo.environment.merging(
      ["RAMPD_DELIBERATE_ALLOCATION": "1", "SWIFT_BACKTRACE": "enable=no"]) { $1 }
    let text = try process.standardErrorText()
    #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGABRT, "\(text)")
    #expect(text.contains("rampd: allocation on the render thread"), "\(text)")
  }
}
