import Foundation
import RampEngine
import Synchronization

/// What the render thread reports: animation completions, streams ending, output trouble.
public enum PlayerEvent: Sendable, Equatable {
  case animationFinished(CompletionReport)
  case streamEnded(id: String, reason: StreamEndReason)
  case underrun(stream: String)
  case deviceFailed(String)
}

public enum StreamEndReason: String, Sendable {
  /// The file played to its end.
  case finished
  /// Stopped by a command (after its fade-out).
  case stopped
  /// Decoding failed mid-file.
  case failed
}

/// Everything the render thread owns, handed to commands that run on it between blocks.
public final class RenderState: @unchecked Sendable {
  public let engine: AnimationEngine
  public let sampleRate: Int
  public let channels: Int
  let master: PropertyHandle
  var streams: [PlayingStream] = []
  fileprivate let events: SPSCQueue<PlayerEvent>

  init(engine: AnimationEngine, sampleRate: Int, channels: Int, events: SPSCQueue<PlayerEvent>) throws {
    self.engine = engine
    self.sampleRate = sampleRate
    self.channels = channels
    self.events = events
    master = try engine.define("master.gain", value: 1, range: 0...1)
    streams.reserveCapacity(64)
  }

  public var streamIDs: [String] { streams.map(\.id) }
}

/// A stream on the render thread: its decoder's ring, its gain, and the transport gain that
/// makes starting, pausing and stopping ramps instead of cuts.
final class PlayingStream {
  let id: String
  let decoder: StreamDecoder
  let gain: PropertyHandle
  let transport: PropertyHandle
  var paused: Bool
  var stopping = false
  /// A seek waiting for the ramp to silence (then the decoder is asked) or for the decoder.
  var pendingSeek: Int?
  var seekRequested = false
  var resumeAfterSeek = false
  var ended = false

  init(id: String, decoder: StreamDecoder, gain: PropertyHandle, transport: PropertyHandle, paused: Bool) {
    self.id = id
    self.decoder = decoder
    self.gain = gain
    self.transport = transport
    self.paused = paused
  }
}

/// Plays files through ALSA with per-sample gain from the animation engine. A real OS thread
/// renders one period at a time: it applies queued commands, pulls each stream's decoded audio
/// from its ring, multiplies by `streams.<id>.gain` × the stream's transport ramp, sums, applies
/// `master.gain`, clamps, and writes to the device; completions and stream ends go back as
/// events.
///
/// Commands run on the render thread between blocks (the engine belongs to that thread); the
/// block rendering itself does not allocate, lock or log.
public final class Player: @unchecked Sendable {
  public let output: AlsaPCMOutput.Negotiated
  /// Seconds of the ramp that starts, pauses, resumes and stops a stream.
  public let declick: Double
  private let device: AlsaPCMOutput
  private let state: RenderState
  private let commands = SPSCQueue<@Sendable (RenderState) -> Void>(minimumCapacity: 1024)
  private let events = SPSCQueue<PlayerEvent>(minimumCapacity: 4096)
  private let running = Atomic<Bool>(false)
  private let finished = Atomic<Bool>(false)
  private var thread: Thread?
  /// Blocks rendered, for status and tests.
  public var blocksRendered: Int { blockCount.load(ordering: .relaxed) }
  private let blockCount = Atomic<Int>(0)

  public init(output configuration: OutputConfiguration, declick: Double = 0.010) throws {
    device = try AlsaPCMOutput(configuration)
    output = device.negotiated
    self.declick = declick
    let engine = try AnimationEngine(sampleRate: Double(output.rate), maxBlockSize: max(output.periodFrames, 64))
    state = try RenderState(engine: engine, sampleRate: output.rate, channels: output.channels, events: events)
  }

  /// Starts the render thread.
  public func start() {
    guard thread == nil else { return }
    running.store(true, ordering: .releasing)
    let thread = Thread { [self] in renderLoop() }
    thread.name = "rampd-render"
    thread.qualityOfService = .userInteractive
    self.thread = thread
    thread.start()
  }

  /// Stops rendering after the current block and waits for the thread; the device is drained.
  public func shutdown() {
    guard thread != nil else { return }
    running.store(false, ordering: .releasing)
    while !finished.load(ordering: .acquiring) { usleep(1_000) }
    thread = nil
  }

  /// Runs `body` on the render thread before the next block. False when the queue is full.
  @discardableResult
  public func perform(_ body: @escaping @Sendable (RenderState) -> Void) -> Bool {
    commands.push(body)
  }

  /// The next event from the render thread, if any.
  public func nextEvent() -> PlayerEvent? { events.pop() }

  /// Opens `path` now (so a bad file is refused here, with its name), then starts it as stream
  /// `id`: its gain at `gain`, faded in over `fadeIn` seconds with `curve` (or the declick ramp).
  public func play(
    _ path: String, id: String, gain: Double = 1, fadeIn: Double = 0, curve: TimingFunction = .linear,
    loop: Bool = false, paused: Bool = false
  ) throws {
    let decoder = try StreamDecoder(
      path: path, outputRate: output.rate, outputChannels: output.channels, bufferSeconds: 1, loops: loop)
    decoder.waitUntilPrefilled()
    let declick = declick
    perform { state in
      do {
        let engine = state.engine
        let gainHandle = try engine.define("streams.\(id).gain", value: gain, range: 0...1)
        let transport = try engine.define("streams.\(id).transport", value: paused ? 0 : 1, range: 0...1)
        if fadeIn > 0 {
          try engine.add(
            .basic(from: 0, to: gain, duration: fadeIn, timingFunction: curve), forKey: "fade-in",
            to: "streams.\(id).gain")
        } else if !paused {
          try engine.add(.basic(from: 0, to: 1, duration: declick), forKey: "declick", to: "streams.\(id).transport")
        }
        state.streams.append(
          PlayingStream(id: id, decoder: decoder, gain: gainHandle, transport: transport, paused: paused))
      } catch {
        decoder.cancel()
        _ = state.events.push(.streamEnded(id: id, reason: .failed))
      }
    }
  }

  /// Pauses stream `id` after a ramp to silence; `resume` ramps back.
  public func pause(_ id: String) {
    let declick = declick
    perform { state in
      guard let stream = state.streams.first(where: { $0.id == id }) else { return }
      _ = try? state.engine.set(
        "streams.\(id).transport", to: 0, transaction: Transaction(duration: declick, timingFunction: .linear))
      stream.paused = true
    }
  }

  public func resume(_ id: String) {
    let declick = declick
    perform { state in
      guard let stream = state.streams.first(where: { $0.id == id }) else { return }
      stream.paused = false
      _ = try? state.engine.set(
        "streams.\(id).transport", to: 1, transaction: Transaction(duration: declick, timingFunction: .linear))
    }
  }

  /// Moves stream `id` to `seconds` into its file: a ramp to silence, the jump, a ramp back.
  public func seek(_ id: String, to seconds: Double) {
    let declick = declick
    let frame = Int(max(seconds, 0) * Double(output.rate))
    perform { state in
      guard let stream = state.streams.first(where: { $0.id == id }) else { return }
      _ = try? state.engine.set(
        "streams.\(id).transport", to: 0, transaction: Transaction(duration: declick, timingFunction: .linear))
      stream.pendingSeek = frame
      stream.seekRequested = false
    }
  }

  /// Stops stream `id` after a fade to silence over `fade` seconds (at least the declick ramp).
  public func stop(_ id: String, fade: Double = 0, curve: TimingFunction = .linear) {
    let seconds = max(fade, declick)
    perform { state in
      guard let stream = state.streams.first(where: { $0.id == id }) else { return }
      _ = try? state.engine.set(
        "streams.\(id).transport", to: 0, transaction: Transaction(duration: seconds, timingFunction: curve))
      stream.stopping = true
    }
  }

  /// Runs the queued commands now, on the calling thread: for tests that drive `renderBlock`
  /// themselves instead of starting the render thread.
  func applyPendingCommands() {
    while let command = commands.pop() { command(state) }
  }

  /// True while a stream's ring holds less than a block (tests pace themselves with it).
  func streamsBehind(frames: Int) -> Bool {
    var index = 0
    while index < state.streams.count {
      let decoder = state.streams[index].decoder
      if !decoder.isFinished && decoder.ring.available < frames * output.channels { return true }
      index += 1
    }
    return false
  }

  /// Writes one rendered block to the device, as the render loop does.
  func writeToDevice(_ mix: UnsafePointer<Float>, frames: Int) throws(AudioError) {
    try device.write(mix, frames: frames)
  }

  private func renderLoop() {
    let buffers = RenderBuffers(frames: output.periodFrames, channels: output.channels)
    defer {
      buffers.deallocate()
      device.drain()
      finished.store(true, ordering: .releasing)
    }
    while running.load(ordering: .acquiring) {
      while let command = commands.pop() { command(state) }
      resumeStreamsAfterSeek()
      renderBlock(buffers)
      do {
        try device.write(buffers.mix, frames: buffers.frames)
      } catch {
        _ = events.push(.deviceFailed(error.message))
        running.store(false, ordering: .releasing)
      }
      blockCount.add(1, ordering: .relaxed)
      finishStreams()
    }
  }

  /// One block into `buffers.mix`. Allocation-free: the render thread's hot path.
  func renderBlock(_ buffers: RenderBuffers) {
    let frames = buffers.frames
    let channels = buffers.channels
    let mix = buffers.mix
    let audio = buffers.audio
    let gain = buffers.gain
    let ramp = buffers.ramp
    let engine = state.engine
    let now = engine.now
    mix.update(repeating: 0, count: frames * channels)
    // Index loop, not for-in: an unspecialised iterator allocates in a debug build.
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if stream.ended { continue }
      if let frame = stream.pendingSeek {
        // Seeking: once silent, ask the decoder; once it has sought, drop the stale audio and
        // ramp back in. Until then the stream holds its place, silent.
        engine.render(stream.transport, start: now, count: 1, into: ramp)
        if ramp[0] == 0 {
          if !stream.seekRequested {
            stream.decoder.requestSeek(toOutputFrame: frame)
            stream.seekRequested = true
          }
          if let mark = stream.decoder.takeSeekMark() {
            stream.decoder.ring.discard(upTo: mark)
            stream.pendingSeek = nil
            stream.seekRequested = false
            if !stream.paused { stream.resumeAfterSeek = true }
          }
          continue
        }
      }
      if stream.paused {
        // Paused: the position holds once the ramp to silence is over.
        engine.render(stream.transport, start: now, count: 1, into: ramp)
        if ramp[0] == 0 { continue }
      }
      let wanted = frames * channels
      let got = stream.decoder.ring.read(into: audio, count: wanted)
      if got < wanted {
        (audio + got).update(repeating: 0, count: wanted - got)
        if !stream.decoder.isFinished { _ = state.events.push(.underrun(stream: stream.id)) }
      }
      engine.render(stream.gain, start: now, count: frames, into: gain)
      engine.render(stream.transport, start: now, count: frames, into: ramp)
      GainKernel.multiply(gain, by: ramp, count: frames)
      GainKernel.accumulate(audio, gain: gain, frames: frames, channels: channels, into: mix)
    }
    engine.render(state.master, start: now, count: frames, into: gain)
    GainKernel.apply(mix, gain: gain, frames: frames, channels: channels, into: mix)
    GainKernel.clamp(mix, count: frames * channels)
    engine.advance(by: frames)
    engine.drainCompletions { report in _ = state.events.push(.animationFinished(report)) }
  }

  /// Ramps streams back in after a seek (between blocks: starting an animation allocates).
  private func resumeStreamsAfterSeek() {
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      guard stream.resumeAfterSeek else { continue }
      stream.resumeAfterSeek = false
      _ = try? state.engine.set(
        "streams.\(stream.id).transport", to: 1, transaction: Transaction(duration: declick, timingFunction: .linear))
    }
  }

  /// Streams whose file ended (ring empty) or whose stop ramp is over leave the mix.
  private func finishStreams() {
    let engine = state.engine
    var index = state.streams.count - 1
    while index >= 0 {
      let stream = state.streams[index]
      let drained = stream.decoder.isFinished && stream.decoder.ring.available == 0 && stream.pendingSeek == nil
      var stopped = false
      if stream.stopping {
        var level: Float = 1
        engine.render(stream.transport, start: engine.now, count: 1, into: &level)
        stopped = level == 0
      }
      if drained || stopped {
        stream.decoder.cancel()
        let reason: StreamEndReason = stopped ? .stopped : (stream.decoder.error != nil ? .failed : .finished)
        _ = state.events.push(.streamEnded(id: stream.id, reason: reason))
        engine.undefine("streams.\(stream.id)")
        state.streams.remove(at: index)
      }
      index -= 1
    }
  }
}

/// The render thread's working memory for one block, allocated once before it starts.
struct RenderBuffers {
  let frames: Int
  let channels: Int
  /// The sum of the streams, then the output block.
  let mix: UnsafeMutablePointer<Float>
  /// One stream's decoded audio.
  let audio: UnsafeMutablePointer<Float>
  /// Per-frame gains.
  let gain: UnsafeMutablePointer<Float>
  let ramp: UnsafeMutablePointer<Float>

  init(frames: Int, channels: Int) {
    self.frames = frames
    self.channels = channels
    mix = .allocate(capacity: frames * channels)
    audio = .allocate(capacity: frames * channels)
    gain = .allocate(capacity: frames)
    ramp = .allocate(capacity: frames)
  }

  func deallocate() {
    mix.deallocate()
    audio.deallocate()
    gain.deallocate()
    ramp.deallocate()
  }
}
