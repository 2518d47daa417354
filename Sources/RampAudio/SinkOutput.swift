/// The output of an offline render: a ``BlockSink`` (the sound file of `rampctl render`, a
/// measurement) on a virtual clock. It has no clock (``OutputCapabilities/Clock/none``: nothing
/// is ever late, so the render waits for every stream's audio), plays nothing in real time (no
/// heard position), never rewinds nor stops while idle, and fails only when its sink does.
///
/// Pushed, the player's owner calls `Player.renderOffline()` for each block. Pulled
/// (`delivery: .pull`), its owner calls ``pull(frames:)`` with the frames it wants, and the
/// render step runs for them as it runs in a pulled output's callback (``PulledRender``).
///
/// The sink's first sample is the show's first: what the limiter's delay line holds before it
/// (``skipFrames``, set by the player) is not written.
public final class SinkOutput: AudioOutput {
  public let sink: any BlockSink
  public let negotiated: NegotiatedOutput
  public let capabilities: OutputCapabilities
  /// Frames still to be dropped before the first one written.
  var skipFrames = 0
  /// Why the sink's last write failed.
  private var lastFailure: AudioError?
  /// Pulled: the render step, once the player has started it, and the block it renders into.
  private var renderer: (any PulledRender)?
  private let pulled: UnsafeMutablePointer<Float>
  /// The most frames one ``pull(frames:)`` may ask for.
  public let pullCapacity: Int
  public var announcesFailure = false

  /// `blockFrames`: the render's block (its period and buffer); `pullCapacity`: pulled, the most
  /// frames one ``pull(frames:)`` may ask for (by default the block).
  public init(
    sink: any BlockSink, rate: Int, channels: Int, blockFrames: Int, delivery: OutputCapabilities.Delivery = .push,
    pullCapacity: Int? = nil
  ) {
    self.sink = sink
    negotiated = NegotiatedOutput(
      device: "render", format: .float32, rate: rate, channels: channels, periodFrames: blockFrames,
      bufferFrames: blockFrames, pacing: .device, kind: .render)
    capabilities = OutputCapabilities(clock: .none, delivery: delivery)
    self.pullCapacity = delivery == .pull ? max(pullCapacity ?? blockFrames, 1) : 0
    pulled = .allocate(capacity: max(self.pullCapacity * channels, 1))
  }

  deinit { pulled.deallocate() }

  /// Pulled: asks the render step for `frames` frames (any number up to ``pullCapacity``, one
  /// block or several, or part of one) and writes them to the sink. `timing`: when they are heard,
  /// as the clock of whoever plays the sink's file in real time says it (nil: no one does).
  public func pull(frames: Int, timing: PullTiming? = nil) throws(AudioError) {
    guard let renderer else {
      throw AudioError(.invalidParameter, "pull: the output is not pulled, or its player has not started it")
    }
    guard (0...pullCapacity).contains(frames) else {
      throw AudioError(.invalidParameter, "pull: frames \(frames) is outside 0...\(pullCapacity)")
    }
    try renderer.renderPulled(into: pulled, frames: frames, timing: timing)
    guard writeBlock(pulled, frames: frames, clamped: true) else { throw failure }
  }

  public func startPulling(_ renderer: any PulledRender) -> Bool {
    guard capabilities.delivery == .pull else { return false }
    self.renderer = renderer
    return true
  }

  public func writeBlock(_ interleaved: UnsafePointer<Float>, frames: Int, clamped: Bool) -> Bool {
    let skipped = min(skipFrames, frames)
    skipFrames -= skipped
    guard skipped < frames else { return true }
    do {
      try sink.write(interleaved + skipped * negotiated.channels, frames: frames - skipped)
    } catch {
      lastFailure = error
      return false
    }
    return true
  }

  public var failure: AudioError { lastFailure ?? AudioError(.device, "render: no write failed") }

  /// No clock: room for anything, at once.
  public func secondsUntilWritable(frames: Int, refillAt refill: Int?) -> Double { 0 }
  public func availableFrames() -> Int? { nil }
  public func heardPosition() -> (delay: Int, nanoseconds: Int64)? { nil }
  public var delayFrames: Int { 0 }
  public var underruns: Int { 0 }
  public func rewindableFrames() -> Int { 0 }
  public func rewind(frames: Int) -> Int { 0 }
  public func stopForIdle() {}
  public func start(at nanoseconds: Int64) -> Bool { false }
  public func drain() {}
  public func close() {}
}
