import CAllocationGuard
import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// What the daemon sets up on the render thread (the default transaction, duck rules, mixer
/// properties, restored levels, the offline input's first sample, the values it publishes) goes
/// there as prepared commands: committing them allocates and frees nothing on the render thread
/// (counted, see Sources/CAllocationGuard), and what they replace or remove is handed off it.
@Suite struct SetupCommandTests {
  func player() throws -> Player {
    try Player(
      output: OutputConfiguration(
        device: "null", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device))
  }

  /// Allocations and frees on this thread while the bodies given to `counting` ran, once
  /// `enabled` (after the rounds that fill the runtime's caches).
  final class Count {
    var allocated = 0
    var freed = 0
    var enabled = false

    func counting(_ body: () throws -> Void) rethrows {
      let allocations = rampd_allocations_on_this_thread()
      let frees = rampd_frees_on_this_thread()
      try body()
      guard enabled else { return }
      allocated += rampd_allocations_on_this_thread() - allocations
      freed += rampd_frees_on_this_thread() - frees
    }
  }

  /// Each setup command, a hundred times over, with blocks rendered in between: a default
  /// transaction installed, a duck rule replaced by one of the same name (the rule replaced goes
  /// to the recovery thread's queue, alive until it is reaped there), a property defined (and
  /// defined again: the second is not used), levels restored, a stream's declick removed. 0
  /// allocations and 0 frees, and each did what it says.
  @Test func setupCommandsAllocateAndFreeNothingOnTheRenderThread() throws {
    let player = try player()
    let engine = player.state.engine
    let path = try temporaryDirectory().appendingPathComponent("tone.wav").path
    try writeSignal(path, frames: 96_000) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
    try player.play(path, id: "bed", loop: true)
    let buffers = RenderBuffers(frames: player.output.periodFrames, channels: player.output.channels)
    defer { buffers.deallocate() }
    let count = Count()
    var replacedRules: [Weak] = []
    for round in 0..<105 {
      count.enabled = round >= 5
      let duration = 0.1 + Double(round) / 1000
      let rule = DuckRule(name: "hand", targets: ["master.gain"], depth: 6, attack: 0.01, release: duration)
      player.submit(PreparedDefaultTransaction(Transaction(duration: duration)))
      player.submit(player.prepareDuckAddition(rule))
      player.submit(try player.prepareDefinition("mixers.m\(round % 3).volume", value: 1, range: 0...1))
      player.submit(player.prepareLevels([(keyPath: "master.gain", value: 0.5), (keyPath: "unknown.gain", value: 1)]))
      try player.play(path, id: "s\(round)")
      player.submit(PreparedRemoval(key: "declick", from: "streams.s\(round).transport"))
      player.stop("s\(round)")
      count.counting { player.renderer.applyPendingCommands() }
      #expect(engine.defaultTransaction.duration == duration)
      #expect(try engine.model("master.gain") == 0.5)
      #expect(engine.contains("mixers.m\(round % 3).volume"))
      for _ in 0..<4 {
        while player.renderer.streamsBehind(frames: buffers.frames) { usleep(100) }
        try count.counting {
          player.renderer.publishValues(due: 0)
          player.renderer.renderBlock(buffers)
          try player.renderer.writeToDevice(buffers.mix, frames: buffers.frames)
          player.renderer.finishStreams()
        }
      }
      // The rule replaced waits in the recovery thread's queue, alive: freed there, not here.
      if let previous = replacedRules.last { #expect(previous.object != nil, "round \(round)") }
      replacedRules.append(Weak(try #require(player.state.ducks.rule(named: "hand"))))
      while player.nextEvent() != nil {}
      player.link.reapRetired()
    }
    #expect(replacedRules.dropLast().allSatisfy { $0.object == nil }, "the rules replaced were freed once reaped")
    #expect(count.allocated == 0, "\(count.allocated) allocations on the render thread")
    #expect(count.freed == 0, "\(count.freed) frees on the render thread")
  }

  /// A thousand values published (as a thousand observers come), taken by the render thread,
  /// published at every block, then unpublished (as they go): three times over, the last two
  /// counted. 0 allocations and 0 frees on the render thread; the values are published while
  /// they are, and gone after. Past `Player.publishedCapacity` values, `publish` refuses.
  @Test func aThousandPublishedValuesComeAndGoWithoutAllocatingOnTheRenderThread() throws {
    let player = try player()
    let buffers = RenderBuffers(frames: player.output.periodFrames, channels: player.output.channels)
    defer { buffers.deallocate() }
    let count = Count()
    for round in 0..<3 {
      count.enabled = round >= 1
      let values = try (0..<1000).map { index in
        try player.publish(index % 2 == 0 ? "master.gain" : "streams.none\(index).gain", wakesOnChange: index % 3 == 0)
      }
      count.counting { player.renderer.applyPendingCommands() }
      #expect(player.state.published.count == 1000)
      for _ in 0..<3 {
        try count.counting {
          player.renderer.publishValues(due: 0)
          player.renderer.renderBlock(buffers)
          try player.renderer.writeToDevice(buffers.mix, frames: buffers.frames)
        }
      }
      #expect(values[0].latest.value == 1 && values[998].latest.value == 1 && values[0].latest.sample >= 0)
      #expect(values[1].latest.value.isNaN)
      for value in values { player.unpublish(value) }
      #expect(player.publishedValues == 0)
      count.counting { player.renderer.applyPendingCommands() }
      #expect(player.state.published.isEmpty)
      player.link.reapRetired()
    }
    #expect(count.allocated == 0, "\(count.allocated) allocations on the render thread")
    #expect(count.freed == 0, "\(count.freed) frees on the render thread")

    var all = try (0..<Player.publishedCapacity).map { _ in try player.publish("master.gain") }
    #expect(throws: Player.PublishRefusal.full) { try player.publish("master.gain") }
    player.unpublish(all.removeLast())
    all.append(try player.publish("master.gain"))
    count.enabled = true
    count.counting { player.renderer.applyPendingCommands() }
    #expect(player.state.published.count == Player.publishedCapacity)
    #expect(count.allocated == 0 && count.freed == 0, "\(count.allocated) allocations, \(count.freed) frees")
  }

  /// A value unpublished while the render thread's command queue is full is not waited for (the
  /// control loop would stall for up to a second): the removal goes with the next publication,
  /// and its slot is counted until then, so at `Player.publishedCapacity` that publication
  /// takes the slot it frees.
  @Test func aValueUnpublishedOnAFullQueueGoesWithTheNextPublication() throws {
    let player = try player()
    var values = try (0..<Player.publishedCapacity).map { _ in try player.publish("master.gain") }
    player.renderer.applyPendingCommands()
    let never = PublishedValue(keyPath: "master.gain", wakesOnChange: false)
    var filled = 0
    while player.submit(PreparedPublication(never, adds: false)) { filled += 1 }
    #expect(filled > 0)
    let gone = values.removeLast()
    player.unpublish(gone)
    #expect(player.publishedValues == Player.publishedCapacity)
    player.renderer.applyPendingCommands()
    player.link.reapRetired()
    #expect(player.state.published.count == Player.publishedCapacity, "taken back before it was handed on")
    let next = try player.publish("master.gain")
    #expect(player.publishedValues == Player.publishedCapacity)
    player.renderer.applyPendingCommands()
    player.link.reapRetired()
    #expect(player.state.published.count == Player.publishedCapacity)
    #expect(!player.state.published.contains { $0 === gone } && player.state.published.contains { $0 === next })
  }

  /// A value published for a stream's gain outlives the stream: once it has left, the property
  /// the value's handle still held goes to the recovery thread's queue with the next lookup, and
  /// is not freed on the render thread.
  @Test func aPublishedValueLetsGoOfAStreamsPropertyOffTheRenderThread() throws {
    let player = try player()
    let path = try temporaryDirectory().appendingPathComponent("short.wav").path
    try writeSignal(path, frames: 2_400) { f, _ in Float(sin(Double(f) / 30)) * 0.3 }
    let buffers = RenderBuffers(frames: player.output.periodFrames, channels: player.output.channels)
    defer { buffers.deallocate() }
    let value = try player.publish("streams.s.gain")
    let count = Count()
    // The first time fills the runtime's caches.
    for round in 0..<2 {
      try player.play(path, id: "s")
      player.renderer.applyPendingCommands()
      var blocks = 0
      while player.state.streamCount > 0 && blocks < 1000 {
        while player.renderer.streamsBehind(frames: buffers.frames) { usleep(100) }
        player.renderer.publishValues(due: 0)
        player.renderer.renderBlock(buffers)
        player.renderer.finishStreams()
        blocks += 1
      }
      #expect(player.state.streamCount == 0 && value.latest.value == 1)
      player.link.reapRetired()
      count.enabled = round > 0
      count.counting { player.renderer.publishValues(due: 0) }
      #expect(value.latest.value.isNaN)
      player.link.reapRetired()
    }
    #expect(count.allocated == 0 && count.freed == 0, "\(count.allocated) allocations, \(count.freed) frees")
  }

  final class Weak {
    weak var object: AnyObject?
    init(_ object: AnyObject) { self.object = object }
  }
}
