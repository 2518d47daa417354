import Synchronization

/// The native PipeWire output's stream settings (`output.pipewire-role`, `output.pipewire-target`,
/// `output.pipewire-quantum`).
public struct PipeWireSettings: Sendable, Equatable {
  /// `media.role`: what WirePlumber's policy sees the stream as.
  public var role = "Music"
  /// `target.object`: the sink's node name or serial; empty: the default sink.
  public var target = ""
  /// `node.latency` in frames: the quantum rampd asks for, and renders a block of per cycle.
  public var quantum = 1024

  public init(role: String = "Music", target: String = "", quantum: Int = 1024) {
    self.role = role
    self.target = target
    self.quantum = quantum
  }

  public func validate() throws(AudioError) {
    let invalid = AudioError.invalidOutput
    if role.isEmpty || role.utf8.contains(0) { throw invalid("pipewire-role", "must be a non-empty name") }
    if target.utf8.contains(0) { throw invalid("pipewire-target", "must not contain NUL") }
    if !(32...8192).contains(quantum) || quantum & (quantum - 1) != 0 {
      throw invalid("pipewire-quantum", "\(quantum) frames is not a power of two within 32...8192")
    }
  }
}

/// rampd's native PipeWire output: a ``PipeWireStream`` whose real-time `process` callback runs the
/// render step (``PulledRender``) for exactly the quantum PipeWire asks for, with when it is heard
/// from `pw_stream_get_time_n`. Nothing is rewound: a change is rendered into the next quantum
/// asked for, heard one quantum and the graph's delay after it is sent.
///
/// Owned by one thread at a time, as every ``AudioOutput``; the data thread reaches only what the
/// render closure holds (`DataSide`, handed over by `startPulling` with a release store and taken
/// with an acquire load), the control side's events only `Shared` (atomics, a mutex off the render
/// path).
public final class PipeWireOutput: AudioOutput {
  /// The name of the native output in `output.device` (`status.output.kind` too).
  public static let deviceName = "pipewire-native"

  public let negotiated: NegotiatedOutput
  public let capabilities: OutputCapabilities
  public var announcesFailure = false
  private let stream: PipeWireStream
  private let shared: Shared
  private let data: DataSide
  private var active = true

  /// What the control side's events and the render thread share: why the stream failed, and whom
  /// to tell. Atomics, and a mutex the render thread never takes (the events' queue and whoever
  /// builds `failure` do).
  final class Shared: Sendable {
    let failed = Atomic<Bool>(false)
    let closed = Atomic<Bool>(false)
    let message = Mutex<String>("")
    /// Whom to tell when the stream stops, retained here once it is set (by the render thread, as
    /// it first lends its step: a compare-exchange and a retain, no lock, no allocation).
    let notice = Atomic<Unmanaged<PulledOutputStop>?>(nil)
    /// The last cycle's mapping: `delay` frames handed over not yet heard at `nanoseconds`.
    let delay = Atomic<Int>(0)
    let nanoseconds = Atomic<Int64>(0)
    let timed = Atomic<Bool>(false)

    func event(_ event: PipeWireStreamEvent) {
      let text: String
      switch event {
      case .state(.error, let message): text = "pipewire: stream error: \(message ?? "")"
      case .state(.unconnected, _): text = "pipewire: the stream was disconnected"
      case .coreError(let code, let message): text = "pipewire: connection lost (error \(-code)): \(message)"
      default: return
      }
      guard !closed.load(ordering: .acquiring) else { return }
      message.withLock { if $0.isEmpty { $0 = text } }
      // Sequentially consistent, as `tell` and `startPulling`'s check: one of the two sees the other.
      guard !failed.exchange(true, ordering: .sequentiallyConsistent) else { return }
      notice.load(ordering: .sequentiallyConsistent)?.takeUnretainedValue().announce()
    }

    /// Sets whom to tell, once.
    func tell(_ stop: PulledOutputStop) {
      let retained = Unmanaged.passRetained(stop)
      if !notice.compareExchange(expected: nil, desired: retained, ordering: .sequentiallyConsistent).exchanged {
        // Already set (it is the same renderer for the output's life): not the last reference.
        retained.release()
      }
    }

    deinit { notice.load(ordering: .acquiring)?.release() }
  }

  /// The data thread's: whom it renders for, set before `lent` is stored (releasing) and read
  /// after it is loaded (acquiring).
  final class DataSide {
    var renderer: (any PulledRender)?
    let lent = Atomic<Bool>(false)
  }

  /// Opens a stream to the PipeWire server at `configuration`'s rate and channels, with its
  /// `pipewire` settings; throws when no server answers or the format is not given in time.
  public init(_ configuration: OutputConfiguration, timeout: Double = 2) throws(AudioError) {
    try configuration.validate()
    let shared = Shared()
    let data = DataSide()
    self.shared = shared
    self.data = data
    stream = PipeWireStream(
      name: "rampd",
      render: { samples, timing in PipeWireOutput.process(samples, timing, data: data, shared: shared) },
      events: { shared.event($0) })
    let settings = configuration.pipewire
    let format = try stream.open(
      rate: configuration.sampleRate, channels: configuration.channels, latencyFrames: settings.quantum,
      role: settings.role, target: settings.target.isEmpty ? nil : settings.target, timeout: timeout)
    negotiated = NegotiatedOutput(
      device: configuration.device, format: .float32, rate: format.rate, channels: format.channels,
      periodFrames: settings.quantum, bufferFrames: 2 * settings.quantum, pacing: .device, kind: .pipewireNative)
    capabilities = OutputCapabilities(
      clock: .own, delivery: .pull, mayRewind: false, stopsWhenIdle: true, releasesWhenIdle: true,
      boundsHeardDrift: false)
  }

  deinit { close() }

  /// On PipeWire's data thread, each cycle: the render step for the quantum asked for, or
  /// silence until the output is lent to a renderer.
  private static func process(
    _ samples: UnsafeMutableBufferPointer<Float>, _ timing: PipeWireTiming, data: DataSide, shared: Shared
  ) {
    guard data.lent.load(ordering: .acquiring), let renderer = data.renderer, let base = samples.baseAddress,
      timing.isValid
    else {
      samples.update(repeating: 0)
      return
    }
    let pull = pullTiming(timing)
    shared.delay.store(pull.delay, ordering: .relaxed)
    shared.nanoseconds.store(pull.nanoseconds, ordering: .relaxed)
    shared.timed.store(true, ordering: .releasing)
    do throws(AudioError) {
      try renderer.renderPulled(into: base, frames: timing.frames, timing: pull)
    } catch {
      samples.update(repeating: 0)
    }
  }

  /// What a cycle's timing says in the render loop's terms: the frames handed over not yet heard
  /// at `now` (the graph's delay in the stream's frames, what the stream and its resampler still
  /// hold, and this buffer), and whether the graph skipped cycles since the last (a jump of
  /// `ticks`).
  public static func pullTiming(_ timing: PipeWireTiming) -> PullTiming {
    let graph =
      Double(timing.delay) * Double(timing.rateNumerator) * Double(timing.streamRate)
      / Double(max(timing.rateDenominator, 1))
    let delay = Int(graph.rounded()) + Int(timing.queued) + Int(timing.buffered) + timing.frames
    return PullTiming(
      delay: delay, nanoseconds: timing.now, discontinuity: timing.skippedTicks > 0, slip: timing.slipFrames)
  }

  // MARK: Delivery

  public func writeBlock(_ interleaved: UnsafePointer<Float>, frames: Int, clamped: Bool) -> Bool { false }
  public func secondsUntilWritable(frames: Int, refillAt refill: Int?) -> Double { 0 }
  public func availableFrames() -> Int? { failed ? nil : negotiated.periodFrames }

  /// From now on the data thread renders for `renderer`. Activates a stream stopped for idle
  /// (asked of PipeWire's loop, without a lock: the render thread calls this).
  public func startPulling(_ renderer: any PulledRender) -> Bool {
    if data.renderer == nil {
      data.renderer = renderer
      if let stop = renderer.stopNotice { shared.tell(stop) }
    }
    data.lent.store(true, ordering: .releasing)
    if !active {
      stream.requestActive(true)
      active = true
    }
    // A failure before the notice was set told no one: seen here.
    return !shared.failed.load(ordering: .sequentiallyConsistent)
  }

  private var failed: Bool { shared.failed.load(ordering: .acquiring) }

  // MARK: Heard

  public func heardPosition() -> (delay: Int, nanoseconds: Int64)? {
    guard shared.timed.load(ordering: .acquiring) else { return nil }
    return (shared.delay.load(ordering: .relaxed), shared.nanoseconds.load(ordering: .relaxed))
  }

  public var delayFrames: Int { shared.delay.load(ordering: .relaxed) }
  /// Gaps the sink played without this stream since it opened (``PipeWireStream/xruns``).
  public var underruns: Int { stream.xruns }

  // MARK: Rewind: nothing to rewind, each quantum is rendered when it is asked for.

  public func rewindableFrames() -> Int { 0 }
  public func rewind(frames: Int) -> Int { 0 }

  // MARK: Idle and end

  /// Inactive: PipeWire stops asking and the sink may suspend.
  public func stopForIdle() {
    data.lent.store(false, ordering: .releasing)
    guard active else { return }
    stream.requestActive(false)
    active = false
    shared.timed.store(false, ordering: .releasing)
  }

  /// A stream starts when PipeWire's graph next runs, not at a set moment.
  public func start(at nanoseconds: Int64) -> Bool { false }

  /// What was handed over plays within a quantum: nothing to drain.
  public func drain() {}

  public func close() {
    shared.closed.store(true, ordering: .releasing)
    data.lent.store(false, ordering: .releasing)
    stream.close()
  }

  // MARK: Failure

  public var failure: AudioError {
    let text = shared.message.withLock { $0 }
    return AudioError(.device, text.isEmpty ? "pipewire: the stream stopped" : text)
  }

  // MARK: Choosing it

  /// Whether `device = "default"` plays through the native output: ALSA's `default` PCM is
  /// PipeWire's plugin (pipewire-alsa), which plays only where a PipeWire server runs, as the
  /// native output does. Not whether a server answers now: a server starting (its socket bound,
  /// not yet listening) would send the first open to ALSA's plugin and the next to the native
  /// output.
  public static func servesDefault() -> Bool {
    OutputChain.types(ofConfigured: "default").last == "pipewire"
  }
}
