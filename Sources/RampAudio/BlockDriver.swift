/// What drives a block of the render loop (`RenderLoop.step`): the two ways differ only before a
/// block and in where it goes.
///
/// - `DeviceBlocks`, the render thread's: the device's clock or its room paces the blocks, the
///   commands are taken while waiting, and a block goes to the device (or, without one, keeps time).
/// - `SinkBlocks`, an offline player's: no clock; every command and every stream's audio is waited
///   for, and a block goes to the sink.
///
/// Called on the render thread with plain data only: no allocation, lock or log.
protocol BlockDriver {
  /// Before a block: waits for its time and takes the commands due; returns when the block is
  /// due to be heard (nanoseconds, 0: unknown), for the published values.
  mutating func beforeBlock(_ loop: RenderLoop, _ buffers: RenderBuffers) -> Int64
  /// The rendered block, out.
  mutating func deliver(_ loop: RenderLoop, _ buffers: RenderBuffers) throws(AudioError)
  /// After the block and its events.
  mutating func afterBlock(_ loop: RenderLoop)
}

/// The render thread's blocks, paced by the device in use (its clock, or its room).
struct DeviceBlocks: BlockDriver {
  mutating func beforeBlock(_ loop: RenderLoop, _ buffers: RenderBuffers) -> Int64 {
    if loop.link.blockCount.load(ordering: .relaxed) > 0 { loop.idleIfNothingToRender(buffers) }
    // With clock pacing, the wait comes before the block is rendered: a command taken during
    // it lands on the block's first sample, heard at most one buffer later.
    var due: Int64 = 0
    // The pacing of the device in use: the fallback and the configured device may differ.
    if let device = loop.device, device.capabilities.clock != .ours {
      let waited = loop.waitForRoomTakingCommands(on: device, frames: buffers.frames)
      loop.observeAfterWrite = waited
      // A device that rewinds is filled by timer, several blocks per wake-up, as with the clock.
      if loop.rewindHistory.enabled && device.capabilities.rewindsNow {
        due = loop.dueOfBlock(waited: waited, on: device)
      }
    }
    if let device = loop.device, device.capabilities.clock == .ours {
      let waited = loop.takeCommandsWhileWaiting(for: device, frames: buffers.frames)
      loop.observeAfterWrite = waited
      due = loop.dueOfBlock(waited: waited, on: device)
    }
    loop.takeCommands()
    // Replies leave now, not after the block has waited for the device.
    loop.flushEvents()
    if let device = loop.device, device.capabilities.clock != .ours {
      loop.waitForStreams(on: device, frames: buffers.frames)
    }
    return due
  }

  mutating func deliver(_ loop: RenderLoop, _ buffers: RenderBuffers) throws(AudioError) {
    loop.writeOrKeepTime(buffers)
  }

  mutating func afterBlock(_ loop: RenderLoop) {}
}

/// An offline player's blocks: as fast as they render, each once every command due and every
/// stream's audio is in (`RenderLoop.waitForEveryStream`), into the sink.
struct SinkBlocks: BlockDriver {
  mutating func beforeBlock(_ loop: RenderLoop, _ buffers: RenderBuffers) -> Int64 {
    loop.takeEveryCommand()
    loop.waitForEveryStream(frames: buffers.frames)
    return 0
  }

  mutating func deliver(_ loop: RenderLoop, _ buffers: RenderBuffers) throws(AudioError) {
    guard let output = loop.device else { return }
    guard output.writeBlock(buffers.mix, frames: buffers.frames, clamped: true) else { throw output.failure }
  }

  mutating func afterBlock(_ loop: RenderLoop) {
    // No recovery thread offline: what was retired is freed here, between blocks.
    while loop.link.retired.pop() != nil {}
  }
}

/// A pulled output's blocks (``PulledRender``): the output asks for `frames` frames on its own
/// thread, with when they are heard (`timing`), and the step runs there, into its buffer. Nothing
/// is waited for but, on an output with no clock, every stream's audio, as `SinkBlocks` waits.
struct PulledBlocks: BlockDriver {
  /// Where the block goes in the buffer the output handed over.
  let destination: UnsafeMutablePointer<Float>
  /// Frames of that buffer before this block.
  let offset: Int
  /// The output's timing of the whole buffer, and whether this block is its last.
  let timing: PullTiming?
  let last: Bool

  mutating func beforeBlock(_ loop: RenderLoop, _ buffers: RenderBuffers) -> Int64 {
    if loop.waitsForDecoders {
      loop.takeEveryCommand()
      loop.waitForEveryStream(frames: buffers.frames)
    } else {
      loop.takeCommands()
      loop.flushEvents()
    }
    guard let timing else { return 0 }
    return timing.nanoseconds + Int64(offset) * 1_000_000_000 / Int64(loop.output.rate)
  }

  mutating func deliver(_ loop: RenderLoop, _ buffers: RenderBuffers) throws(AudioError) {
    // Mixed there already (``RenderLoop/renderPulledBlocks(into:frames:timing:)``).
    if buffers.mix != destination { destination.update(from: buffers.mix, count: buffers.frames * buffers.channels) }
    guard last else { return }
    loop.pulledDelivered(timing)
    if !loop.offline, let device = loop.device {
      loop.pulledLiveDelivered(
        destination - offset * buffers.channels, frames: offset + buffers.frames, on: device)
    }
  }

  mutating func afterBlock(_ loop: RenderLoop) {
    // No recovery thread offline: what was retired is freed here, between blocks.
    if loop.offline { while loop.link.retired.pop() != nil {} }
  }
}
