import Foundation
import Testing

@testable import RampAudio
@testable import RampTestSupport

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

  /// Run only in the child process `theGuardTrapsAnAllocationOnPipeWiresDataThread` starts,
  /// reaching that test's PipeWire: the same allocating command, committed while a stream loops
  /// through the native output, so in the render step PipeWire's data thread runs.
  @Test(.enabled(if: ProcessInfo.processInfo.environment["RAMPD_DELIBERATE_ALLOCATION_PIPEWIRE"] != nil))
  func deliberateAllocationOnPipeWiresDataThread() throws {
    let file = try temporaryDirectory().appendingPathComponent("constant.wav").path
    try writeSignal(file, frames: 48_000, channels: 2) { _, _ in 0.25 }
    let player = try Player(
      output: OutputConfiguration(
        device: PipeWireOutput.deviceName, format: .float32, periodTime: 0.02, bufferTime: 0.1, pacing: .device))
    player.start()
    defer { player.shutdown() }
    try player.play(file, id: "constant", loop: true)
    usleep(500_000)
    player.submit(AllocatingCommand())
    usleep(1_000_000)
  }

  /// The deliberate allocation on PipeWire's data thread, in a process of its own against a real
  /// PipeWire (`PipeWireSession`): it is aborted, saying so, naming PipeWire's data thread
  /// (`rampd-pw-data`, not `rampd-render`), the allocation in the backtrace under libpipewire's loop.
  @Test func theGuardTrapsAnAllocationOnPipeWiresDataThread() throws {
    let session = try PipeWireSession()
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = ["--testing-library", "swift-testing", "--filter", "deliberateAllocationOnPipeWiresDataThread"]
    process.environment = ProcessInfo.processInfo.environment.merging(session.environment) { $1 }.merging(
      ["RAMPD_DELIBERATE_ALLOCATION_PIPEWIRE": "1", "SWIFT_BACKTRACE": "enable=no"]) { $1 }
    let text = try process.standardErrorText()
    #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGABRT, "\(text)")
    // Named by the stream's `process` (PipeWire's data thread takes the name of the thread that
    // opened the stream), called from libpipewire's loop: the trap's backtrace goes from the Swift
    // allocation down through libpipewire to the thread's start.
    #expect(text.contains("rampd: allocation on the render thread (thread rampd-pw-data)"), "\(text)")
    let frames = text.split(separator: "\n")
    let allocated = try #require(frames.firstIndex { $0.contains("swift_allocObject") }, "\(text)")
    #expect(frames[allocated...].contains { $0.contains("libpipewire-0.3.so") }, "\(text)")
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
    #expect(text.contains("rampd: allocation on the render thread (thread rampd-render)"), "\(text)")
  }
}
