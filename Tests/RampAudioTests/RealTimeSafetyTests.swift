import CAllocationCounter
import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// The render thread never allocates: counted, not assumed. The allocator is wrapped (see
/// Tests/CAllocationCounter) and the blocks are rendered on this thread, with three streams
/// playing (one at rest), a fade and an additive keyframe wobble in flight, a cubic-bezier master
/// ramp, and the device write included.
@Suite struct RealTimeSafetyTests {
  @Test func renderingABlockAllocatesNothing() throws {
    let configuration = OutputConfiguration(
      device: "rampd_test_player5", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device)
    _ = AlsaTestConfig.directory
    let player = try Player(output: configuration)
    let directory = try temporaryDirectory()
    // "c" rests after its declick: mixed straight from its ring.
    for name in ["a", "b", "c"] {
      let path = directory.appendingPathComponent("\(name).wav").path
      try writeSignal(path, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
      try player.play(path, id: name, fadeIn: name == "a" ? 1 : 0, curve: .easeInEaseOut, loop: true)
    }
    player.perform { state in
      var wobble = Animation.keyframes([0, -0.3, 0], duration: 0.05)
      wobble.isAdditive = true
      wobble.timing.repeatCount = .infinity
      _ = try? state.engine.add(wobble, forKey: "wobble", to: "streams.b.gain")
      _ = try? state.engine.set("master.gain", to: 0.5, transaction: Transaction(duration: 2, timingFunction: .default))
    }
    player.applyPendingCommands()

    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    func block() throws {
      player.renderBlock(buffers)
      try player.writeToDevice(buffers.mix, frames: frames)
    }
    // Warm up: first calls may size libsndfile and ALSA buffers.
    for _ in 0..<10 { try block() }
    let before = rampd_allocations_on_this_thread()
    var loud: Float = 0
    for _ in 0..<200 {
      // Keep the decoders ahead, as they would be in real time.
      while player.streamsBehind(frames: frames) { usleep(100) }
      try block()
      loud = max(loud, buffers.mix[0])
    }
    let after = rampd_allocations_on_this_thread()
    #expect(after - before == 0, "\(after - before) allocations in 200 blocks")
    #expect(loud > 0.01, "the blocks carried sound")
    // The counter does count: an allocation on this thread shows up.
    let probe = rampd_allocations_on_this_thread()
    let array = [Int](repeating: 1, count: 1000)
    #expect(rampd_allocations_on_this_thread() > probe && array.count == 1000)
  }
}
