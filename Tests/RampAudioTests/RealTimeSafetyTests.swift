import CAllocationGuard
import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// The render thread never allocates: counted, not assumed. The allocator is wrapped (see
/// Sources/CAllocationGuard) and the blocks are rendered on this thread, with three streams
/// playing (one at rest), a fade and an additive keyframe wobble in flight, a cubic-bezier master
/// ramp, and the device write included.
@Suite struct RealTimeSafetyTests {
  func devicePacedPlayer(_ device: String) throws -> Player {
    _ = AlsaTestConfig.directory
    return try Player(
      output: OutputConfiguration(
        device: device, format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device))
  }

  @Test func renderingABlockAllocatesNothing() throws {
    let player = try devicePacedPlayer("rampd_test_player5")
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
    player.renderer.applyPendingCommands()

    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    func block() throws { try renderAndWrite(player, buffers) }
    // Warm up: first calls may size libsndfile and ALSA buffers.
    for _ in 0..<10 { try block() }
    let before = rampd_allocations_on_this_thread()
    let freesBefore = rampd_frees_on_this_thread()
    var loud: Float = 0
    for _ in 0..<200 {
      // Keep the decoders ahead, as they would be in real time.
      while player.renderer.streamsBehind(frames: frames) { usleep(100) }
      try block()
      loud = max(loud, buffers.mix[0])
    }
    let after = rampd_allocations_on_this_thread()
    let freesAfter = rampd_frees_on_this_thread()
    #expect(after - before == 0, "\(after - before) allocations in 200 blocks")
    #expect(freesAfter - freesBefore == 0, "\(freesAfter - freesBefore) frees in 200 blocks")
    #expect(loud > 0.01, "the blocks carried sound")
    // The counter does count: an allocation on this thread shows up.
    let probe = rampd_allocations_on_this_thread()
    let array = [Int](repeating: 1, count: 1000)
    #expect(rampd_allocations_on_this_thread() > probe && array.count == 1000)
  }

  /// What the render thread lets go of is freed elsewhere (the recovery thread, here never
  /// started: it waits in the queue): 0 allocations and 0 frees while a resampled stream plays
  /// to its end and leaves the mix (its decoder, ring, soxr state and file go to the queue),
  /// another seeks (ramp out, the jump, the refill, ramp in), an animation finishes, and a
  /// command's closure, the last owner of an object, is let go after it ran. (A first stream
  /// ends before the count: the Swift runtime fills its caches the first time a path runs.)
  @Test func streamEndSeekAndFinishedAnimationsFreeNothingOnTheRenderThread() throws {
    let player = try devicePacedPlayer("rampd_test_player20")
    let directory = try temporaryDirectory()
    let long = directory.appendingPathComponent("long.wav").path
    try writeSignal(long, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
    // Resampled: the stream that ends frees a soxr state too (off this thread).
    let short = directory.appendingPathComponent("short.wav").path
    try writeSignal(short, frames: 441, rate: 44_100)
    // Ends in the counted blocks.
    let ending = directory.appendingPathComponent("ending.wav").path
    try writeSignal(ending, frames: 4_410, rate: 44_100) { f, _ in Float(sin(Double(f) / 20)) * 0.3 }
    try player.play(long, id: "long", loop: true)
    try player.play(short, id: "short")
    try player.play(ending, id: "ending")
    final class Marker: Sendable {}
    var marker: Marker? = Marker()
    player.perform { [marker] state in
      _ = marker
      _ = try? state.engine.add(
        .basic(from: 0, to: -0.1, duration: 0.1), forKey: "dip", to: "streams.long.gain")
    }
    player.renderer.applyPendingCommands()
    // A command whose closure holds the last reference to an object: applied in the window.
    player.perform { [marker] _ in _ = marker }
    marker = nil

    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    func block() throws { try renderAndWrite(player, buffers, finishingStreams: true) }
    for _ in 0..<10 { try block() }
    var events: [PlayerEvent] = []
    while let event = player.nextEvent() { events.append(event) }
    #expect(events.contains(.streamEnded(id: "short", reason: .finished)), "\(events)")
    // Counted: the blocks and the application of the marker's command; not counted: the seek's
    // command (made and applied on this thread, as a control thread would make it), and the
    // waits for the decoders.
    var count = AllocationCount()
    count.counting { player.renderer.applyPendingCommands() }
    for index in 0..<200 {
      if index == 20 {
        player.seek("long", to: 0.5)
        player.renderer.applyPendingCommands()
      }
      while player.renderer.streamsBehind(frames: frames) { usleep(100) }
      try count.counting { try block() }
    }
    while let event = player.nextEvent() { events.append(event) }
    #expect(events.contains(.streamEnded(id: "ending", reason: .finished)), "\(events)")
    #expect(events.contains { if case .animationFinished = $0 { true } else { false } }, "\(events)")
    #expect(count.allocated == 0, "\(count.allocated) allocations")
    #expect(count.freed == 0, "\(count.freed) frees")
  }

  /// Ducking runs on the render thread without allocating or freeing: a sidechain following two
  /// trigger streams (peak and RMS detectors), a rule on a stream playing, one on the master
  /// triggered by hand, their attacks, holds and releases, their events, and a rule removed and
  /// let go (handed off the thread), all within the counted blocks.
  @Test func duckingAllocatesAndFreesNothingOnTheRenderThread() throws {
    let player = try devicePacedPlayer("rampd_test_player21")
    let directory = try temporaryDirectory()
    let bed = directory.appendingPathComponent("bed.wav").path
    try writeSignal(bed, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
    // A burst every 0.1 s: the sidechains go on and off within the counted blocks.
    let voice = directory.appendingPathComponent("voice.wav").path
    try writeSignal(voice, frames: 96_000) { f, _ in f % 4_800 < 2_400 ? Float(sin(Double(f) / 10)) * 0.5 : 0 }
    try player.play(bed, id: "bed", loop: true)
    try player.play(voice, id: "voice1", loop: true)
    try player.play(voice, id: "voice2", loop: true)
    let rules = [
      DuckRule(
        name: "rms", targets: ["streams.bed.gain"], trigger: "voice*",
        sidechain: DuckRule.Sidechain(threshold: -20, detector: .rms, window: 0.01), attack: 0.02, hold: 0.01,
        release: 0.02),
      DuckRule(
        name: "peak", targets: ["streams.bed.gain", "master.gain"], trigger: "voice2",
        // Released 20 ms after a 20 ms window of quiet: over before the next burst, 50 ms after
        // the last.
        sidechain: DuckRule.Sidechain(threshold: -10, detector: .peak, window: 0.02), attack: 0.01, hold: 0,
        release: 0.02, releaseCurve: .fade(.qsin)),
      DuckRule(name: "hand", targets: ["master.gain"], depth: 6, attack: 0.05, hold: 0.02, release: 0.05),
      DuckRule(name: "playing", targets: ["streams.voice2.gain"], trigger: "voice1", attack: 0.05),
    ].map(player.prepareDuck)
    player.perform { state in
      for rule in rules { _ = state.ducks.add(rule, now: state.engine.now) }
      _ = state.ducks.setManual("hand", true)
    }
    player.renderer.applyPendingCommands()

    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    func block() throws { try renderAndWrite(player, buffers, finishingStreams: true) }
    for _ in 0..<10 { try block() }
    var count = AllocationCount()
    var events: [PlayerEvent] = []
    for index in 0..<400 {
      if index == 40 {
        player.perform { state in _ = state.ducks.setManual("hand", false) }
        count.counting { player.renderer.applyPendingCommands() }
      }
      if index == 120 {
        player.perform { state in _ = state.ducks.remove("rms") }
        count.counting { player.renderer.applyPendingCommands() }
      }
      while player.renderer.streamsBehind(frames: frames) { usleep(100) }
      try count.counting { try block() }
      while let event = player.nextEvent() { events.append(event) }
    }
    func tally(_ rule: String, started: Bool) -> Int {
      events.count { event in
        switch event {
        case .duckStarted(let name, _): started && name == rule
        case .duckEnded(let name, _): !started && name == rule
        default: false
        }
      }
    }
    #expect(tally("rms", started: true) >= 2 && tally("rms", started: false) >= 2, "\(events)")
    #expect(tally("peak", started: true) >= 2 && tally("peak", started: false) >= 2, "\(events)")
    #expect(tally("hand", started: true) == 1 && tally("hand", started: false) == 1, "\(events)")
    #expect(tally("playing", started: true) == 1, "\(events)")
    #expect(count.allocated == 0, "\(count.allocated) allocations")
    #expect(count.freed == 0, "\(count.freed) frees")
  }
}

/// Allocations and frees on this thread while the bodies given to `counting` ran.
private struct AllocationCount {
  var allocated = 0
  var freed = 0

  mutating func counting(_ body: () throws -> Void) rethrows {
    let allocations = rampd_allocations_on_this_thread()
    let frees = rampd_frees_on_this_thread()
    try body()
    allocated += rampd_allocations_on_this_thread() - allocations
    freed += rampd_frees_on_this_thread() - frees
  }
}

extension RealTimeSafetyTests {
  /// On a device that plays in real time, writing a block and reading where the device is (its
  /// status: delay and timestamp, fed to the sample-to-time mapping) allocate nothing either.
  @Test func mappingTheDeviceClockAllocatesNothing() throws {
    let player = try ClockedDevice.player("rampd_clocked_status", period: 0.005, buffer: 0.02)
    let path = try temporaryDirectory().appendingPathComponent("tone.wav").path
    try writeSignal(path, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
    try player.play(path, id: "tone")
    player.renderer.applyPendingCommands()
    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    for _ in 0..<20 { try renderAndWrite(player, buffers) }
    let before = rampd_allocations_on_this_thread()
    let freesBefore = rampd_frees_on_this_thread()
    for _ in 0..<200 {
      while player.renderer.streamsBehind(frames: frames) { usleep(100) }
      try renderAndWrite(player, buffers)
    }
    let after = rampd_allocations_on_this_thread()
    let freesAfter = rampd_frees_on_this_thread()
    #expect(after - before == 0, "\(after - before) allocations in 200 blocks")
    #expect(freesAfter - freesBefore == 0, "\(freesAfter - freesBefore) frees in 200 blocks")
    // The device's delay and clock were read: the mapping is known, its delay within the buffer.
    let measured = try #require(player.measuredOutput)
    #expect(measured.delay > 0 && measured.delay <= 0.021, "delay \(measured.delay) s")
  }
}

/// One block rendered and written to the device, as the render loop does.
private func renderAndWrite(_ player: Player, _ buffers: RenderBuffers, finishingStreams: Bool = false) throws {
  player.renderer.renderBlock(buffers)
  try player.renderer.writeToDevice(buffers.mix, frames: player.output.periodFrames)
  // As the render loop ends the streams whose files are done, after the block.
  if finishingStreams { player.renderer.finishStreams() }
}

extension RealTimeSafetyTests {
  /// Rewinding allocates and frees nothing either: on the clocked device with rewind on, blocks
  /// waited for, recorded for rewind, rendered and written, and every twentieth a rewind of what the device
  /// holds (rendering again up to the rewind point included), as before a command. With the
  /// master limiter too, at work on a full-scale tone: saved and restored with the records.
  @Test(arguments: [false, true]) func rewindingAllocatesNothing(limiting: Bool) throws {
    let player = try ClockedDevice.player(
      limiting ? "rampd_clocked_rewind_safety_limited" : "rampd_clocked_rewind_safety", period: 0.005,
      buffer: 0.05, rewind: .on, limiter: LimiterSettings(enabled: limiting))
    let path = try temporaryDirectory().appendingPathComponent("tone.wav").path
    try writeSignal(path, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * (limiting ? 1 : 0.3) }
    try player.play(path, id: "tone", loop: true)
    player.perform { state in
      _ = try? state.engine.set("master.gain", to: 0.5, transaction: Transaction(duration: 2, timingFunction: .default))
    }
    player.renderer.applyPendingCommands()
    let frames = player.output.periodFrames
    let buffers = RenderBuffers(frames: frames, channels: player.output.channels)
    defer { buffers.deallocate() }
    func block() throws {
      // Waits as the render thread does: for the device to run low, by timer, taking commands.
      if let device = player.renderer.device { player.renderer.waitForRoomTakingCommands(on: device, frames: frames) }
      player.renderer.beginRewindableBlock()
      player.renderer.renderBlock(buffers)
      try player.renderer.writeToDevice(buffers.mix, frames: frames)
      player.renderer.endRewindableBlock()
    }
    for _ in 0..<20 { try block() }
    player.renderer.rewindBeforeCommand(at: nil)
    var count = AllocationCount()
    let rewindsBefore = player.outputRewind.rewinds
    for index in 0..<200 {
      while player.renderer.streamsBehind(frames: frames) { usleep(100) }
      if index % 20 == 19 { count.counting { player.renderer.rewindBeforeCommand(at: nil) } }
      try count.counting { try block() }
    }
    #expect(player.outputRewind.rewinds - rewindsBefore == 10, "\(player.outputRewind.rewinds - rewindsBefore) rewinds")
    #expect(count.allocated == 0, "\(count.allocated) allocations")
    #expect(count.freed == 0, "\(count.freed) frees")
    if limiting { #expect(player.limiter.map { $0.engagements > 0 } == true, "the limiter worked") }
  }
}

extension RealTimeSafetyTests {
  /// A pulled output's render step (``PulledRender``) allocates and frees nothing either: the
  /// offline render's output driven as a pull, at pulls of 1 to 2048 frames (split into blocks of
  /// a period, or part of one), with a stream playing, a fade in flight and the heard clock fed
  /// from each pull's timing. (The step itself: what the output then does with the buffer is its
  /// own. The fade outlasts the pulls: what ends is freed between an offline player's blocks,
  /// where no recovery thread frees it.)
  @Test func aPulledRenderStepAllocatesNothing() throws {
    let output = SinkOutput(
      sink: PulledRenderTests.Recorder(), rate: 48_000, channels: 2, blockFrames: 480, delivery: .pull,
      pullCapacity: 2_048)
    let player = try Player(offline: output)
    defer { player.finishOffline() }
    let path = try temporaryDirectory().appendingPathComponent("tone.wav").path
    try writeSignal(path, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
    try player.play(path, id: "tone", loop: true)
    player.perform { state in
      _ = try? state.engine.set(
        "master.gain", to: 0.5, transaction: Transaction(duration: 20, timingFunction: .default))
    }
    let buffer = UnsafeMutablePointer<Float>.allocate(capacity: 2_048 * 2)
    defer { buffer.deallocate() }
    var rendered: Int64 = 0
    let start = monotonicNanoseconds()
    func pull(_ frames: Int) throws {
      let timing = PullTiming(delay: 1_024 + frames, nanoseconds: start + rendered * 1_000_000_000 / 48_000)
      try player.renderer.renderPulled(into: buffer, frames: frames, timing: timing)
      rendered += Int64(frames)
    }
    for _ in 0..<20 { try pull(480) }
    var count = AllocationCount()
    var loud: Float = 0
    let sizes = [1, 37, 480, 481, 1_024, 2_048, 256]
    for index in 0..<200 {
      let frames = sizes[index % sizes.count]
      try count.counting { try pull(frames) }
      loud = max(loud, abs(buffer[0]))
    }
    #expect(count.allocated == 0, "\(count.allocated) allocations")
    #expect(count.freed == 0, "\(count.freed) frees")
    #expect(loud > 0.01, "the pulls carried sound")
    #expect(player.measuredOutput != nil, "the heard clock was fed")
  }
}
