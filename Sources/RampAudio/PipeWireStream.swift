import CPipeWireShim
import Dispatch
import Synchronization

/// What PipeWire says in the cycle a block is asked for (`pw_stream_get_time_n`), and where the
/// block sits in the stream: enough to say when each of its frames is heard.
///
/// `now` (CLOCK_MONOTONIC, ns) is when the graph's clock read `ticks`; `delay` (graph ticks,
/// `rateNumerator/rateDenominator` seconds each) is how long the stream's next frame takes
/// through the graph to the device; `queued` (frames of this stream written and not yet taken)
/// and `buffered` (frames in the stream's resampler) are what lies ahead of the block.
///
/// On libpipewire 0.3.65 (Debian 12), in the `process` callback of an RT_PROCESS stream: `now` is
/// the driver's wake-up for the cycle (`clock.nsec`), `rate` 1/<graph rate>, `ticks` the driver's
/// position rebased so that it runs on across a change of driver (it jumps over cycles the graph
/// ran without the stream: on a null sink, heard as that many frames of silence before the
/// stream's next frame); `delay` the sink's reported latency (0 for a null sink); `queued` 0 (the block
/// is taken in the cycle it is written); `buffered` the resampler's delay (32 frames from 44.1 to
/// 48 kHz), 0 without one.
public struct PipeWireTiming: Sendable, Equatable {
  public var now: Int64
  public var rateNumerator: UInt32
  public var rateDenominator: UInt32
  public var ticks: UInt64
  public var delay: Int64
  public var queued: UInt64
  public var buffered: UInt64
  public var queuedBuffers: UInt32
  public var availableBuffers: UInt32
  /// This stream's frame number of the block's first frame (0 is the first frame after `open`).
  public var firstFrame: UInt64
  /// Frames in the block.
  public var frames: Int
  /// The stream's rate, frames a second.
  public var streamRate: Int
  /// Graph ticks the clock moved since the last block beyond what that block covered: more than
  /// a fraction of a block is a gap in the graph (an xrun), 0 otherwise.
  public var skippedTicks: UInt64
  /// Frames of this stream's rate that the sink played without the stream since its last block
  /// (the graph's gap, or the last block handed over a cycle late and still queued): every frame
  /// from this block on is heard that much later than the last block's timing said. 0 otherwise.
  public var slipFrames: Int = 0

  public init(
    now: Int64, rateNumerator: UInt32, rateDenominator: UInt32, ticks: UInt64, delay: Int64, queued: UInt64,
    buffered: UInt64, queuedBuffers: UInt32 = 0, availableBuffers: UInt32 = 0, firstFrame: UInt64, frames: Int,
    streamRate: Int, skippedTicks: UInt64 = 0
  ) {
    self.now = now
    self.rateNumerator = rateNumerator
    self.rateDenominator = rateDenominator
    self.ticks = ticks
    self.delay = delay
    self.queued = queued
    self.buffered = buffered
    self.queuedBuffers = queuedBuffers
    self.availableBuffers = availableBuffers
    self.firstFrame = firstFrame
    self.frames = frames
    self.streamRate = streamRate
    self.skippedTicks = skippedTicks
  }

  /// Whether PipeWire had a clock to report (no report before the stream's first cycle).
  public var isValid: Bool { rateNumerator != 0 && rateDenominator != 0 && streamRate > 0 }

  /// When frame `frame` of this stream is heard, in CLOCK_MONOTONIC ns:
  /// `now + delay` (graph time) `+ (queued + buffered + frame - firstFrame) / streamRate`.
  public func heardTime(ofFrame frame: UInt64) -> Int64 {
    guard isValid else { return now }
    let graph = Double(delay) * Double(rateNumerator) * 1e9 / Double(rateDenominator)
    let ahead = Double(queued) + Double(buffered) + Double(Int64(bitPattern: frame &- firstFrame))
    return now + Int64((graph + ahead * 1e9 / Double(streamRate)).rounded())
  }

  /// The inverse of `heardTime(ofFrame:)`: the frame of this stream heard at `time` (CLOCK_MONOTONIC
  /// ns), with its fraction. Less than `firstFrame` for a time before the block is heard.
  public func frame(heardAt time: Int64) -> Double {
    guard isValid else { return Double(firstFrame) }
    let graph = Double(delay) * Double(rateNumerator) * 1e9 / Double(rateDenominator)
    let fromFirst = (Double(time - now) - graph) * Double(streamRate) / 1e9 - Double(queued) - Double(buffered)
    return Double(firstFrame) + fromFirst
  }
}

/// A PipeWire stream's state, as `pw_stream_state` names it.
public enum PipeWireStreamState: Int32, Sendable {
  case error = -1
  case unconnected = 0
  case connecting = 1
  case paused = 2
  case streaming = 3
}

/// What a stream reports to the control side, off PipeWire's threads.
public enum PipeWireStreamEvent: Sendable, Equatable {
  /// The stream's new state, with PipeWire's error text for `.error`.
  case state(PipeWireStreamState, message: String?)
  /// The connection to the server failed (`-EPIPE` when the server went away).
  case coreError(code: Int32, message: String)
}

/// The format a stream was opened with, as PipeWire negotiated it.
public struct PipeWireFormat: Sendable, Equatable {
  public var rate: Int
  public var channels: Int
  /// The stream's node id in the graph.
  public var nodeID: UInt32
}

/// A native PipeWire playback stream (`pw_stream` on a `pw_thread_loop`, F32 interleaved) whose
/// audio is pulled: PipeWire's real-time data thread calls `render` for each quantum, with the
/// frames it asks for and when they will be heard (`PipeWireTiming`).
///
/// `render` runs on PipeWire's data thread and must not allocate, lock or wait; it is not called
/// before `open` nor after `close` returns. State changes and errors go to `events`, on a queue
/// of the stream's own, never on the data thread. A stream is opened and closed by one control
/// thread; after a failure (`.error`, `.unconnected`, `.coreError`) the caller closes it and
/// opens it again, as often as it likes.
///
/// Not `Sendable`: owned by the control thread that opens and closes it. What crosses threads
/// is the context PipeWire's callbacks reach (the render closure, run on the data thread alone,
/// its counters atomics) and `events`, a `@Sendable` closure called on the stream's own queue.
public final class PipeWireStream {
  /// Fills `samples` (`timing.frames` interleaved frames) with the block whose first frame is
  /// `timing.firstFrame`.
  public typealias Render = (_ samples: UnsafeMutableBufferPointer<Float>, _ timing: PipeWireTiming) -> Void

  private let context: Context
  private var handle: OpaquePointer?
  private let name: String

  public init(
    name: String = "rampd", render: @escaping Render,
    events: @escaping @Sendable (PipeWireStreamEvent) -> Void = { _ in }
  ) {
    self.name = name
    context = Context(render: render, events: events)
  }

  deinit { close() }

  /// Whether the stream is open.
  public var isOpen: Bool { handle != nil }
  /// Gaps the sink played without the stream, since `open`: a jump of the graph's `ticks` beyond
  /// the last block (cycles the stream was not asked for), and a buffer more still queued when a
  /// block is asked for than at the last (one handed over too late for its cycle: the sink played
  /// that cycle without it, and plays the stream a buffer later from then on).
  public var xruns: Int { context.xruns.load(ordering: .relaxed) }
  /// The graph ticks those gaps skipped.
  public var skippedTicks: UInt64 { context.skipped.load(ordering: .relaxed) }
  /// Blocks rendered since `open`.
  public var cycles: Int { context.cycles.load(ordering: .relaxed) }

  /// Connects to the PipeWire server and plays to the default sink, or `target` (a node's name
  /// or serial, `target.object`), asking for `latencyFrames` frames a quantum (`node.latency`)
  /// when given; waits up to `timeout` seconds for the format. `render` may be called before this
  /// returns.
  public func open(
    rate: Int, channels: Int, latencyFrames: Int? = nil, role: String? = nil, target: String? = nil,
    timeout: Double = 5
  ) throws(AudioError) -> PipeWireFormat {
    guard handle == nil else { throw AudioError(.device, "pipewire: the stream \(name) is already open") }
    guard (8000...768_000).contains(rate) else {
      throw AudioError(.invalidParameter, section: "pipewire", field: "rate", "\(rate) is not within 8000…768000")
    }
    guard (1...64).contains(channels) else {
      throw AudioError(.invalidParameter, section: "pipewire", field: "channels", "\(channels) is not within 1…64")
    }
    if let latencyFrames, !(1...65536).contains(latencyFrames) {
      throw AudioError(
        .invalidParameter, section: "pipewire", field: "latency", "\(latencyFrames) frames is not within 1…65536")
    }
    if let role, role.isEmpty || role.utf8.contains(0) {
      throw AudioError(.invalidParameter, section: "pipewire", field: "role", "an empty name or one with NUL")
    }
    if let target, target.isEmpty || target.utf8.contains(0) {
      throw AudioError(.invalidParameter, section: "pipewire", field: "target", "an empty name or one with NUL")
    }
    guard timeout > 0, timeout < 3600 else {
      throw AudioError(.invalidParameter, section: "pipewire", field: "timeout", "\(timeout) s is not within 0…3600")
    }
    context.reset(rate: rate)
    var format = rampd_pw_format()
    var message = [CChar](repeating: 0, count: 512)
    let opened: OpaquePointer? = name.withCString { name in
      withOptionalCString(role) { role in
        withOptionalCString(target) { target in
          var params = rampd_pw_params(
            rate: UInt32(rate), channels: UInt32(channels), latency_frames: UInt32(latencyFrames ?? 0), role: role,
            target: target, node_name: name, timeout_ms: UInt32(timeout * 1000))
          return rampd_pw_stream_open(
            &params, pipeWireRender, pipeWireEvent, Unmanaged.passUnretained(context).toOpaque(), &format, &message,
            message.count)
        }
      }
    }
    guard let opened else {
      let reason = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
      throw AudioError(.device, "pipewire: \(reason)")
    }
    handle = opened
    return PipeWireFormat(rate: Int(format.rate), channels: Int(format.channels), nodeID: format.node_id)
  }

  /// Inactive, PipeWire stops asking for blocks and the sink may suspend; active again, it asks
  /// from where the graph is (the gap is not counted as an xrun). Applied on the thread loop's
  /// thread soon after, the last wish winning: no lock is taken and nothing allocated here, so the
  /// render thread may ask.
  public func requestActive(_ active: Bool) {
    guard let handle else { return }
    context.resync.store(true, ordering: .releasing)
    rampd_pw_stream_request_active(handle, active ? 1 : 0)
  }

  /// Disconnects and lets go of the server; `render` is not called once this returns.
  public func close() {
    guard let handle else { return }
    rampd_pw_stream_close(handle)
    self.handle = nil
  }

  /// The version of libpipewire in use.
  public static var libraryVersion: String { String(cString: rampd_pw_library_version()) }

  /// What the C callbacks reach: the render closure and the data thread's own state. Reached
  /// through an unretained pointer, by the data thread (`process`, the plain properties below
  /// are its alone) and the thread loop's thread (`event`, atomics and the `@Sendable` events
  /// closure only); the stream keeps it alive until `close` has returned.
  fileprivate final class Context {
    let render: Render
    let events: @Sendable (PipeWireStreamEvent) -> Void
    let queue = DispatchQueue(label: "rampd.pipewire.events")
    let xruns = Atomic<Int>(0)
    let skipped = Atomic<UInt64>(0)
    let cycles = Atomic<Int>(0)
    /// Set off the data thread when the graph's clock may jump without a gap (paused, resumed).
    let resync = Atomic<Bool>(true)
    // The data thread's alone (and `reset`'s, before the stream exists).
    var rate = 0
    var nextFrame: UInt64 = 0
    var lastTicks: UInt64 = 0
    var lastFrames = 0
    var lastQueuedBuffers: UInt32 = 0
    var lastBuffers: UInt32 = 0
    var lastQueued: UInt64 = 0
    var lastNow: Int64 = 0
    var lastRate: (UInt32, UInt32) = (0, 0)

    init(render: @escaping Render, events: @escaping @Sendable (PipeWireStreamEvent) -> Void) {
      self.render = render
      self.events = events
    }

    func reset(rate: Int) {
      self.rate = rate
      nextFrame = 0
      lastFrames = 0
      lastQueuedBuffers = 0
      lastBuffers = 0
      lastQueued = 0
      xruns.store(0, ordering: .relaxed)
      skipped.store(0, ordering: .relaxed)
      cycles.store(0, ordering: .relaxed)
      resync.store(true, ordering: .releasing)
    }

    /// On the data thread.
    func process(_ data: UnsafeMutablePointer<Float>, frames: Int, channels: Int, _ time: rampd_pw_timing) {
      var timing = PipeWireTiming(
        now: time.now, rateNumerator: time.rate_num, rateDenominator: time.rate_denom, ticks: time.ticks,
        delay: time.delay, queued: time.queued, buffered: time.buffered, queuedBuffers: time.queued_buffers,
        availableBuffers: time.avail_buffers, firstFrame: nextFrame, frames: frames, streamRate: rate,
        skippedTicks: 0)
      let buffers = time.queued_buffers &+ time.avail_buffers
      let graphRate = timing.isValid ? Double(time.rate_denom) / Double(time.rate_num) : 0
      // The ticks moved as far as the clock did, give or take a block: else they are another
      // driver's (the graph changed drivers or rates), a new run to compare with, no gap.
      let elapsed = Double(time.now - lastNow) * graphRate / 1e9
      let sameClock =
        (time.rate_num, time.rate_denom) == lastRate
        && abs(Double(time.ticks &- lastTicks) - elapsed) < Double(lastFrames) * graphRate / Double(max(rate, 1))
      if resync.exchange(false, ordering: .acquiring) || lastFrames == 0 || !timing.isValid || !sameClock {
        // Nothing to compare with.
      } else {
        var gap = false
        // The block before covered lastFrames of the stream, and the cycles that found no buffer
        // to fill played what was queued (the last block's size each): that many ticks.
        let covered = Double(lastFrames) * Double(1 + time.missed_cycles)
        let expected = UInt64((covered * graphRate / Double(rate)).rounded())
        let moved = time.ticks &- lastTicks
        // A resampled stream's blocks vary by a few frames about the quantum: a gap is more.
        if moved > expected + max(expected / 4, 8) && moved < 1 << 40 {
          timing.skippedTicks = moved - expected
          timing.slipFrames = Int((Double(moved - expected) * Double(rate) / graphRate).rounded())
          skipped.add(moved - expected, ordering: .relaxed)
          gap = true
        }
        // A buffer more still queued than at the last block, of as many buffers: the last one was
        // handed over after its cycle, which the sink played without it.
        if buffers == lastBuffers && time.queued_buffers > lastQueuedBuffers {
          gap = true
          if time.queued > lastQueued { timing.slipFrames = max(timing.slipFrames, Int(time.queued - lastQueued)) }
        }
        if gap { xruns.add(1, ordering: .relaxed) }
      }
      lastQueuedBuffers = time.queued_buffers
      lastBuffers = buffers
      lastQueued = time.queued
      lastNow = time.now
      lastRate = (time.rate_num, time.rate_denom)
      lastTicks = time.ticks
      lastFrames = frames
      nextFrame &+= UInt64(frames)
      cycles.add(1, ordering: .relaxed)
      render(UnsafeMutableBufferPointer(start: data, count: frames * channels), timing)
    }

    /// On the thread loop's thread, its lock held: handed on at once.
    func event(kind: Int32, value: Int32, message: UnsafePointer<CChar>?) {
      let text = message.map { String(cString: $0) }
      let event: PipeWireStreamEvent
      switch kind {
      case Int32(RAMPD_PW_EVENT_STATE.rawValue):
        let state = PipeWireStreamState(rawValue: value) ?? .error
        if state != .streaming { resync.store(true, ordering: .releasing) }
        event = .state(state, message: text)
      default:
        event = .coreError(code: value, message: text ?? "")
      }
      let events = self.events
      queue.async { events(event) }
    }
  }
}

private func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
  guard let string else { return body(nil) }
  return string.withCString { body($0) }
}

private let pipeWireRender: rampd_pw_render_fn = { context, data, frames, channels, timing in
  guard let context, let data, let timing else { return }
  // The stream keeps the context alive until `close` returns: no retain and release per cycle.
  Unmanaged<PipeWireStream.Context>.fromOpaque(context)._withUnsafeGuaranteedRef {
    $0.process(data, frames: Int(frames), channels: Int(channels), timing.pointee)
  }
}

private let pipeWireEvent: rampd_pw_event_fn = { context, kind, value, message in
  guard let context else { return }
  Unmanaged<PipeWireStream.Context>.fromOpaque(context).takeUnretainedValue()
    .event(kind: kind, value: value, message: message)
}
