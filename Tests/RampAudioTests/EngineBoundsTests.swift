import CAllocationGuard
import Foundation
import Testing

@testable import RampAudio
@testable import RampEngine

/// What the engine does on the render thread stays within storage reserved off it, however long
/// it runs (counted, see Sources/CAllocationGuard).
@Suite struct EngineBoundsTests {
  /// A removal's smoothing ramp is named `declick-<id>` when committed: the name is written into
  /// room reserved when the ramp was prepared, so the commit allocates and frees nothing at any
  /// id, past 10 million (where the name no longer fits a small string) up to the largest.
  @Test func aDeclickRampsNameAllocatesNothingAtAnyID() throws {
    let engine = try AnimationEngine(sampleRate: 1000)
    let ids: [UInt64] = [7, 9_999_999, 10_000_000, 123_456_789_012, UInt64.max - 1]
    for (index, id) in ids.enumerated() {
      try engine.define("p\(index)", value: 0)
      try engine.add(.basic(from: 1, to: 1, duration: 10), forKey: "hold", to: "p\(index)")
      engine.nextID = id
      let ramp = try PreparedAnimation.declickRamp(seconds: 0.01, sampleRate: 1000)
      let allocations = rampd_allocations_on_this_thread()
      let frees = rampd_frees_on_this_thread()
      try engine.removeAnimation(forKey: "hold", from: "p\(index)", declick: ramp)
      let allocated = rampd_allocations_on_this_thread() - allocations
      let freed = rampd_frees_on_this_thread() - frees
      // The first time, the runtime fills its caches.
      if index > 0 {
        #expect(allocated == 0 && freed == 0, "id \(id): \(allocated) allocations, \(freed) frees")
      }
      let names = try engine.animations(on: "p\(index)").map(\.key)
      #expect(names.contains("declick-\(id)"), "\(names)")
      engine.drainCompletions()
    }
  }

  /// The engine reports and retires what ends in room reserved for every animation that can
  /// exist at once; a change that could end more than the room left before the next drain is
  /// refused (limit-exceeded, naming the field), allocating nothing, and applies once drained.
  @Test func endingMoreThanTheRoomLeftIsRefusedWithoutAllocating() throws {
    let engine = try AnimationEngine(sampleRate: 1000, maxAnimationsPerKeyPath: 64, propertyCapacity: 4)
    #expect(engine.completionCapacity == 1024)
    for property in 0..<20 {
      try engine.define("p\(property)", value: 0)
      for index in 0..<64 {
        var animation = Animation.basic(from: 0, to: 0.01, duration: 10)
        animation.isAdditive = true
        try engine.add(animation, forKey: "a\(index)", to: "p\(property)")
      }
    }
    rampd_set_aside_throw_hooks()
    let allocations = rampd_allocations_on_this_thread()
    let frees = rampd_frees_on_this_thread()
    var removed = 0
    var refusal: EngineError?
    for property in 0..<20 {
      do throws(EngineError) {
        try engine.removeAllAnimations(from: "p\(property)", declick: nil)
        removed += 1
      } catch {
        refusal = error
        break
      }
    }
    let allocated = rampd_allocations_on_this_thread() - allocations
    let freed = rampd_frees_on_this_thread() - frees
    rampd_restore_throw_hooks()
    #expect(allocated == 0 && freed == 0, "\(allocated) allocations, \(freed) frees")
    #expect(removed == 16, "1024 animations ended, then the room was full")
    #expect(refusal?.code == .limitExceeded && refusal?.field == "key", "\(String(describing: refusal))")
    #expect(refusal?.message.contains("more than 1024 animations would end at once") == true)
    var reports = 0
    engine.drainCompletions { _ in reports += 1 }
    #expect(reports == 1024)
    try engine.removeAllAnimations(from: "p16", declick: nil)
    #expect(try engine.animations(on: "p16").isEmpty)
  }

  /// On the render thread, two thousand animations ended in a block or two (32 commands each
  /// removing 63: more than the 1024 the engine once reserved) allocate and free nothing: the
  /// player's engine has room for every animation it can hold and is drained after every
  /// command, and commands wait while the retired queue is half full.
  @Test func thousandsOfAnimationsEndingAtOnceAllocateNothingOnTheRenderThread() throws {
    let player = try Player(
      output: OutputConfiguration(
        device: "null", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device))
    let buffers = RenderBuffers(frames: player.output.periodFrames, channels: player.output.channels)
    defer { buffers.deallocate() }
    for round in 0..<2 {
      for property in 0..<32 {
        let keyPath = "mixers.m\(property).volume"
        player.submit(try player.prepareDefinition(keyPath, value: 0.5, range: 0...1))
        player.perform { state in
          for index in 0..<63 {
            _ = try? state.engine.add(.basic(from: 0, to: 1, duration: 10), forKey: "a\(index)", to: keyPath)
          }
        }
      }
      player.renderer.applyPendingCommands()
      player.renderer.renderBlock(buffers)
      for property in 0..<32 {
        let keyPath = "mixers.m\(property).volume"
        player.perform { state in _ = try? state.engine.removeAllAnimations(from: keyPath, declick: nil) }
      }
      // As the render loop does: a block's share of commands taken, the block rendered; what they
      // ended is freed by the recovery thread meanwhile (here, between blocks).
      var allocated = 0
      var freed = 0
      var finished = 0
      var blocks = 0
      while !player.link.commands.isEmpty {
        blocks += 1
        let allocations = rampd_allocations_on_this_thread()
        let frees = rampd_frees_on_this_thread()
        player.renderer.takeCommands()
        player.renderer.renderBlock(buffers)
        allocated += rampd_allocations_on_this_thread() - allocations
        freed += rampd_frees_on_this_thread() - frees
        while let event = player.nextEvent() {
          if case .animationFinished(let report) = event, !report.finished { finished += 1 }
        }
        player.link.reapRetired()
      }
      // The first round fills the runtime's caches.
      if round > 0 { #expect(allocated == 0 && freed == 0, "\(allocated) allocations, \(freed) frees") }
      #expect(finished == 32 * 63)
      #expect(blocks <= 3, "\(blocks) blocks")
      #expect(player.state.engine.animationCount(on: player.state.engine.handleIfDefined("mixers.m0.volume")!) == 0)
      player.link.reapRetired()
    }
  }
}
