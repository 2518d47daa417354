import Foundation
import RampEngine
import Synchronization

/// What the render thread reports: animation completions, streams ending, output trouble.
public enum PlayerEvent: Sendable, Equatable {
  case animationFinished(CompletionReport)
  case streamEnded(id: String, reason: StreamEndReason)
  case streamStarted(id: String, path: String)
  case underrun(stream: String)
  /// The device failed; the message says how. Rendering goes on against the wall clock while the
  /// device is reopened with backoff.
  case deviceFailed(String)
  /// A new device is open and playing again; the name of the ALSA device.
  case deviceRecovered(String)
  /// A command's ticket, posted by `RenderState.complete` after the command ran: its results
  /// travel in the ticket, in order with the events around it.
  case commandCompleted(CommandTicket)
  /// The event queue was full: this many events (not tickets, which always have room) were
  /// dropped since the last announcement. Posted once there is room again, before the next event.
  /// Whoever waited for a lost event (an animation's end) must look again.
  case eventsLost(Int)
  /// Duck rule `rule` began its attack at `sample` (`DuckLayer`).
  case duckStarted(rule: String, sample: Int64)
  /// Duck rule `rule`'s release ended at `sample`: its targets are back at their model values.
  case duckEnded(rule: String, sample: Int64)
  /// Queue item `item` of stream `stream` began to be heard at `sample` (`StreamQueue`).
  case itemStarted(stream: String, item: UInt64, sample: Int64)
  /// Queue item `item` was last heard before `sample`: it played to its end or its fade out (a
  /// crossfade, a skip) is over, or its stream stopped or failed (`reason`).
  case itemEnded(stream: String, item: UInt64, sample: Int64, reason: ItemEndReason)
}

/// What a command hands back from the render thread. Subclass it to carry results; the render
/// thread writes them before posting the ticket, the event consumer reads them after.
open class CommandTicket: @unchecked Sendable, Equatable {
  public init() {}
  public static func == (a: CommandTicket, b: CommandTicket) -> Bool { a === b }
}

/// A key path's presentation value, published by the render thread at the start of every block
/// for threads that must not touch the engine (mixer bindings, observers). A reader that polls
/// only while the value moves can sleep in `waitForChange` while it holds still, if the value was
/// published with `wakesOnChange` (the render thread then rings it when the value changes).
///
/// Paced by the clock, the render thread renders several blocks at one wake-up; each block's value
/// then carries the time at which it becomes `latest`, one period after the one before, so a
/// reader still sees a new value every period, as if the blocks had been rendered one at a time.
public final class PublishedValue: @unchecked Sendable {
  public let keyPath: String
  /// The last values published, newest at `written - 1`: more than a batch of blocks holds at the
  /// default period and buffer.
  private let slots: [Slot]
  private let written = Atomic<Int>(0)
  /// The newest value stored (what `waitForChange` compares with).
  private let newest = Atomic<UInt64>(Double.nan.bitPattern)
  private let bell: Bell?
  /// A reader sleeps in `waitForChange`.
  private let sleeping = Atomic<Bool>(false)

  /// One published value. A sequence lock: odd `sequence` while the render thread writes it.
  private final class Slot: Sendable {
    let sequence = Atomic<Int>(0)
    let index = Atomic<Int>(-1)
    let sample = Atomic<Int64>(-1)
    let bits = Atomic<UInt64>(Double.nan.bitPattern)
    /// CLOCK_MONOTONIC nanoseconds from which it is `latest`.
    let due = Atomic<Int64>(0)
  }

  private static let slotCount = 16
  /// The key path's property as the render thread last looked it up (render thread only).
  fileprivate var handle: PropertyHandle?

  init(keyPath: String) {
    self.keyPath = keyPath
    slots = (0..<Self.slotCount).map { _ in Slot() }
    bell = nil
  }

  init(keyPath: String, wakesOnChange: Bool) throws(AudioError) {
    self.keyPath = keyPath
    slots = (0..<Self.slotCount).map { _ in Slot() }
    bell = wakesOnChange ? try Bell("published value") : nil
  }

  /// The value and the output sample it applies to; NaN while the key path does not exist (and
  /// sample −1 before the first block).
  public var latest: (value: Double, sample: Int64) {
    let now = monotonicNanoseconds()
    let count = written.load(ordering: .acquiring)
    var oldest: (value: Double, sample: Int64) = (.nan, -1)
    var index = count - 1
    while index >= 0 && index >= count - Self.slotCount {
      if let entry = read(index) {
        if entry.due <= now { return (Double(bitPattern: entry.bits), entry.sample) }
        oldest = (Double(bitPattern: entry.bits), entry.sample)
      }
      index -= 1
    }
    // Only values not yet due (or overwritten while read): the oldest of them.
    return oldest
  }

  /// Entry `index`, unless the render thread has overwritten it with a newer one.
  private func read(_ index: Int) -> (sample: Int64, bits: UInt64, due: Int64)? {
    let slot = slots[index % Self.slotCount]
    while true {
      let before = slot.sequence.load(ordering: .acquiring)
      if before & 1 == 1 { continue }
      let entry = (
        slot.sample.load(ordering: .relaxed), slot.bits.load(ordering: .relaxed),
        slot.due.load(ordering: .relaxed)
      )
      let stored = slot.index.load(ordering: .relaxed)
      atomicMemoryFence(ordering: .acquiring)
      guard slot.sequence.load(ordering: .relaxed) == before else { continue }
      return stored == index ? entry : nil
    }
  }

  /// Render thread: the value at `sample`, the latest from `due` (monotonic nanoseconds) on.
  fileprivate func store(_ value: Double, sample: Int64, due: Int64) {
    let index = written.load(ordering: .relaxed)
    let slot = slots[index % Self.slotCount]
    let sequence = slot.sequence.load(ordering: .relaxed)
    slot.sequence.store(sequence + 1, ordering: .relaxed)
    atomicMemoryFence(ordering: .releasing)
    slot.index.store(index, ordering: .relaxed)
    slot.sample.store(sample, ordering: .relaxed)
    slot.bits.store(value.bitPattern, ordering: .relaxed)
    slot.due.store(due, ordering: .relaxed)
    slot.sequence.store(sequence + 2, ordering: .releasing)
    written.store(index + 1, ordering: .releasing)
    let previous = newest.exchange(value.bitPattern, ordering: .relaxed)
    guard let bell, previous != value.bitPattern else { return }
    // Pairs with the fence in `waitForChange`: either the reader sees the new value, or this sees
    // the reader asleep.
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    if sleeping.load(ordering: .relaxed),
      sleeping.compareExchange(expected: true, desired: false, ordering: .relaxed).exchanged
    {
      bell.ring()
    }
  }

  /// Sleeps until the newest value stored is no longer `value` (bit for bit: NaN while the key
  /// path does not exist), `wake()` is called, or `timeout` seconds pass (negative: no limit).
  /// Returns at once for a value published without `wakesOnChange`.
  public func waitForChange(from value: Double, timeout: Double = -1) {
    guard let bell else { return }
    sleeping.store(true, ordering: .relaxed)
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    if newest.load(ordering: .relaxed) == value.bitPattern {
      bell.wait(milliseconds: timeout < 0 ? -1 : pollMilliseconds(timeout))
    }
    sleeping.store(false, ordering: .relaxed)
  }

  /// Wakes a reader sleeping in `waitForChange` (to stop it).
  public func wake() { bell?.ring() }
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
  /// Set when an event was posted in this block, so the loop rings the doorbell once.
  fileprivate var posted = false
  /// Counts what cannot be undone by rendering again (an event posted, a command run, something
  /// retired): a rewind goes no further back than its last change (`RewindHistory`).
  var irreversible = 0
  /// Events dropped on a full queue since the last `eventsLost` went out.
  fileprivate var lostEvents = 0
  fileprivate var published: ContiguousArray<PublishedValue> = []
  /// The duck rules, multiplied into their targets in the mix.
  public let ducks: DuckLayer
  /// The sample after the last one of audio a stream played before its file ended (0: none yet).
  public internal(set) var audioEnd: Int64 = 0
  /// The sample at which the last animation to end so far ended (0: none yet).
  public private(set) var settled: Int64 = 0

  /// The highest gain a `*.gain` property may take (linear; 1 is 0 dB).
  public let maxGain: Double

  init(engine: AnimationEngine, sampleRate: Int, channels: Int, maxGain: Double, events: SPSCQueue<PlayerEvent>) throws
  {
    self.engine = engine
    self.sampleRate = sampleRate
    self.channels = channels
    self.events = events
    master = try engine.define("master.gain", value: 1, range: 0...maxGain)
    self.maxGain = maxGain
    ducks = DuckLayer(sampleRate: Double(sampleRate), channels: channels, maxFrames: engine.maxBlockSize)
    streams.reserveCapacity(Player.streamCapacity)
    published.reserveCapacity(256)
  }

  public var streamIDs: [String] { streams.map(\.id) }

  /// How many streams are in the mix. Allocation-free, unlike `streamIDs`.
  public var streamCount: Int { streams.count }

  /// The streams in the mix, for status replies (off the hot path: allocates).
  public var streamSnapshots: [StreamSnapshot] {
    streams.map { stream in
      StreamSnapshot(
        id: stream.id, path: stream.decoder.path, paused: stream.paused, stopping: stream.stopping,
        loops: stream.decoder.loops, seconds: Double(stream.position) / Double(sampleRate))
    }
  }

  public func contains(stream id: String) -> Bool { stream(id) != nil }

  /// Seconds of audio in stream `id`'s file (nil: no such stream).
  public func length(ofStream id: String) -> Double? {
    guard let stream = stream(id) else { return nil }
    return Double(stream.decoder.outputLength) / Double(sampleRate)
  }

  /// Stream `id`, if it is in the mix. Allocation-free (an index loop).
  func stream(_ id: String) -> PlayingStream? {
    var index = 0
    while index < streams.count {
      if streams[index].id == id { return streams[index] }
      index += 1
    }
    return nil
  }

  /// Hands a command's ticket back to the control side, after the events the command caused.
  public func complete(_ ticket: CommandTicket) {
    post(.commandCompleted(ticket))
  }

  /// Posts an event for the control side. Never blocks: a full queue drops it, and the count of
  /// events dropped goes out as `eventsLost` before the next event that fits.
  public func post(_ event: PlayerEvent) {
    if case .animationFinished(let report) = event { settled = max(settled, report.sample) }
    announceLostEvents()
    irreversible &+= 1
    if events.push(event) {
      posted = true
    } else {
      lostEvents += 1
    }
  }

  /// Posts `eventsLost` if events were dropped and there is room for it now.
  fileprivate func announceLostEvents() {
    guard lostEvents > 0, events.push(.eventsLost(lostEvents)) else { return }
    lostEvents = 0
    posted = true
  }
}

/// A stream as a status reply shows it.
public struct StreamSnapshot: Sendable, Equatable {
  public let id: String
  public let path: String
  public let paused: Bool
  public let stopping: Bool
  public let loops: Bool
  /// Seconds of the file's audio played so far (at the output rate, after a seek: from there).
  public let seconds: Double
}

/// A stream on the render thread: its decoder's ring, its gain, and the transport gain that
/// makes starting, pausing and stopping ramps instead of cuts.
final class PlayingStream {
  let id: String
  /// The file playing (a queue's playing item).
  var decoder: StreamDecoder
  /// The queue the stream plays, if it plays one.
  var queue: StreamQueue?
  let gain: PropertyHandle
  let transport: PropertyHandle
  /// Stereo balance, −1 (left) … +1 (right); only a two-channel output applies it.
  let pan: PropertyHandle
  var paused: Bool
  var stopping = false
  /// A seek waiting for the ramp to silence (then the decoder is asked) or for the decoder.
  var pendingSeek: Int?
  var seekRequested = false
  /// Output frames of this stream's audio consumed, counted from the file's start.
  var position = 0
  /// The ring ran short: the stream ramped out and holds, silent and in place, until its ring has
  /// refilled (an underrun event was posted for it, unless a seek emptied the ring).
  var starved = false
  /// The underrun envelope: 1 while the ring keeps up, ramped to 0 over the audio left when it
  /// runs short, and back to 1 over the declick ramp once it has refilled.
  var supply: Float = 1

  init(
    id: String, decoder: StreamDecoder, gain: PropertyHandle, transport: PropertyHandle, pan: PropertyHandle,
    paused: Bool
  ) {
    self.id = id
    self.decoder = decoder
    self.gain = gain
    self.transport = transport
    self.pan = pan
    self.paused = paused
  }
}

/// A stream a transport command acted on, and the id of its ramp (for waiting on it).
public struct TransportChange: Sendable, Equatable {
  public let stream: String
  public let animation: UInt64?
}

/// What the render thread lets go of: handed to the recovery thread, which frees it, so the
/// render thread never does.
enum Retired {
  case object(AnyObject)
  case command(PlayerCommand)
}

/// A command prepared off the render thread and committed on it, between blocks: plain data
/// (files opened, animations compiled, key paths built, room reserved for what it did). `commit`
/// neither allocates, frees, locks nor waits; the control side reads what it recorded afterwards
/// (a ticket the commit posts, say). The object is let go of on the recovery thread.
public protocol RenderCommand: AnyObject, Sendable {
  func commit(_ state: RenderState)
}

/// A command for the render thread, run between blocks at `sample` (exactly: the block is split
/// there) or, when nil, before the next block: a prepared command, or a closure (which may
/// allocate: queries and tests).
struct PlayerCommand {
  let sample: Int64?
  let work: Work

  enum Work {
    case command(any RenderCommand)
    case closure(@Sendable (RenderState) -> Void)
  }
}

/// Plays files through ALSA with per-sample gain from the animation engine. A real OS thread
/// renders one period at a time: it applies queued commands, pulls each stream's decoded audio
/// from its ring, multiplies by `streams.<id>.gain` × the stream's transport ramp, sums, applies
/// `master.gain`, clamps, and writes to the device; completions and stream ends go back as
/// events, and a pipe doorbell wakes whoever waits for them.
///
/// Paced by the clock, the render thread writes blocks back to back until the buffer is full (one
/// buffer ahead of the clock), then sleeps until only the margin is left ahead
/// (`OutputConfiguration.marginTime`: by default the buffer less a period, so a wake-up may be
/// that late without an underrun; a smaller margin buys one wake-up per several periods). A
/// command arriving meanwhile wakes it and is applied at once, to the next block, so it is heard
/// within one buffer.
///
/// Commands run on the render thread between blocks (the engine belongs to that thread); a
/// command scheduled for a sample splits the block there, so it lands on that exact sample. The
/// block rendering itself does not allocate, lock or log, nor does committing a command prepared
/// off the render thread (`RenderCommand`: `prepare`, `prepareTransport`, a daemon's ticket);
/// a closure given to `perform` runs as it is.
///
/// A stream whose decoder falls behind ramps out over the audio it has left (at the declick
/// ramp's pace) rather than cut to silence, holds its place silent until its ring has refilled,
/// and ramps back in: it resumes where it stopped, late against the timeline by the gap. A seek
/// ramps out and in the same way, around the jump.
///
/// When the device fails, rendering goes on against the wall clock (animations and streams keep
/// time) while a recovery thread closes the dead device and reopens the configured one with
/// backoff; `deviceFailed` and `deviceRecovered` events say so.
public final class Player: @unchecked Sendable {
  public let output: AlsaPCMOutput.Negotiated
  public let configuration: OutputConfiguration
  /// Seconds of the ramp that starts, pauses, resumes and stops a stream.
  public let declick: Double
  /// The declick ramp in frames: also how an underrun ramps out and back in.
  let declickFrames: Int
  /// Frames a starved stream's ring must hold again before it ramps back in.
  let refillFrames: Int
  private(set) var device: AlsaPCMOutput?
  /// An offline player's output, instead of a device (see ``init(sink:rate:channels:blockFrames:declick:maxGain:scheduledCapacity:animationsPerKeyPath:eventCapacity:)``).
  private let sink: (any BlockSink)?
  /// An offline player's block: it has no render thread to own one.
  private var offlineBuffers: RenderBuffers?
  let state: RenderState
  private let commands = SPSCQueue<PlayerCommand>(minimumCapacity: 4096)
  /// Several control threads may submit; the render thread is the only consumer and never locks.
  private let submitLock = Mutex<Void>(())
  /// A completed command's ticket is its reply, which must not be dropped: commands are taken
  /// only while this queue keeps `eventReserve` slots free (for the events and tickets of the
  /// commands taken, scheduled ones coming due and the engine's own), and otherwise wait in
  /// theirs until the control side has caught up.
  private let events: SPSCQueue<PlayerEvent>
  /// Half the event queue.
  private let eventReserve: Int
  /// Rung by the render thread after posting events; `waitForEvents` sleeps on it.
  private let doorbell: Bell
  /// The other way: `perform` rings it, so a render thread waiting for the clock wakes to take
  /// the command at once.
  let commandBell: Bell
  /// Rung when the render thread hands over a dead device (and at shutdown): a recovery thread
  /// with a healthy device sleeps on it, without waking.
  private let recoveryBell: Bell
  let running = Atomic<Bool>(false)
  private let finished = Atomic<Bool>(false)
  private var thread: Thread?
  /// When and at which sample the render thread last woke to render a batch of blocks (render
  /// thread only): when published values become due.
  private var batchStart: (nanoseconds: Int64, sample: Int64)?
  /// A command ran or a stream left since the published values' handles were looked up (render
  /// thread only).
  private var publishedHandlesStale = true
  /// Commands waiting for their sample, soonest first (render thread only).
  private var scheduled: CommandSchedule
  public static let maximumScheduled = 4096
  /// Streams the render thread has room for without growing its tables.
  public static let streamCapacity = 64
  /// Commands taken from the queue per block (per wake-up while waiting for the clock): a flood
  /// of them delays a block by no more than this many; the rest are taken at the next.
  static let commandsPerBlock = 256
  /// Events (and command tickets) the render thread may post before the control side takes them.
  public static let defaultEventCapacity = 16_384

  /// Finished animations, commands run and streams gone, on their way to the recovery thread
  /// to be freed there (render thread → recovery thread).
  private let retired = SPSCQueue<Retired>(minimumCapacity: 4096)
  /// Something was retired in this block: the loop rings the recovery thread once.
  private var retiredInBlock = false

  // Device loss: the render thread hands the dead device over, the recovery thread hands a new one back.
  private let deadDevices = SPSCQueue<AlsaPCMOutput>(minimumCapacity: 4)
  /// Healthy devices handed over after `configuration.reopenAfter`, to be closed and opened afresh.
  private let retiredDevices = SPSCQueue<AlsaPCMOutput>(minimumCapacity: 4)
  /// Why a retired device could not be opened again (made on the recovery thread, so the render
  /// thread posts it without building a string).
  private let failedReopenings = SPSCQueue<String>(minimumCapacity: 4)
  /// `configuration.reopenAfter` in frames (nil: never), and the frames written to the device since
  /// it was opened (render thread only).
  private let reopenAfterFrames: Int?
  private var framesSinceOpen = 0
  private let freshDevices = SPSCQueue<AlsaPCMOutput>(minimumCapacity: 4)
  private let recoveryFinished = Atomic<Bool>(false)
  /// Seconds between reopen attempts: doubling from the first to the last.
  public var recoveryBackoff: (first: Double, last: Double) = (0.1, 2)
  /// Keeps time while there is no device to block on (lost, or without a clock and idle).
  private var idleClock: ClockPacer
  /// Underruns counted by devices since lost, so the total survives a reconnection.
  private var underrunsOfLostDevices = 0
  /// Which sample is heard when (render thread), and its copy for other threads.
  private var heardClock: HeardClock
  /// What a rewind needs to render again what the device holds (`Rewind.swift`).
  let rewindHistory: RewindHistory
  private let heard = HeardClock.Shared()
  /// The render thread sleeps, idle, and listens for commands (`perform` then rings it).
  private let idling = Atomic<Bool>(false)
  /// The device is stopped while nothing plays.
  private let stoppedIdle = Atomic<Bool>(false)
  /// Nanoseconds from waking up idle to the first sample heard, as last measured (render thread;
  /// one period until measured), and its copy for status (−1: not yet measured).
  private var resumeNanoseconds: Int64 = 0
  private let measuredResume = Atomic<Int64>(-1)
  /// When the render thread last woke up idle, and the sample it resumed at, until the device
  /// says when that sample is heard.
  private var resumed: (nanoseconds: Int64, sample: Int64)?
  /// The device's underruns at the last observation: one more means the device stopped and
  /// started again (render thread only).
  private var underrunsObserved = 0

  /// The render thread's kernel id once it runs (tests read its `schedstat`).
  var renderThreadID: Int32 { renderThread.load(ordering: .acquiring) }
  private let renderThread = Atomic<Int32>(0)
  /// Blocks rendered, for status and tests.
  public var blocksRendered: Int { blockCount.load(ordering: .relaxed) }
  private let blockCount = Atomic<Int>(0)
  /// The sample the next block starts at, published after each block: what `at` times count from.
  public var currentSample: Int64 { published.load(ordering: .acquiring) }
  let published = Atomic<Int64>(0)
  /// Device underruns recovered so far.
  public var deviceUnderruns: Int { underrunCount.load(ordering: .relaxed) }
  private let underrunCount = Atomic<Int>(0)
  /// False while the device is lost and being reopened.
  public var deviceIsHealthy: Bool { healthy.load(ordering: .relaxed) }
  /// True once the device is known to have no clock (device pacing over ALSA's `null`, a `file`
  /// plugin over it): its samples go as fast as it takes them, not at the wall clock's pace.
  public var deviceHasNoClock: Bool { noClock.load(ordering: .relaxed) }
  private let noClock = Atomic<Bool>(false)

  /// The render thread's SCHED_FIFO priority, or 0 when it runs at normal priority.
  public var realtimePriority: Int { realtime.load(ordering: .relaxed) }
  private let realtime = Atomic<Int>(0)

  /// Real time for the render thread where the process may have it without privilege: up to its
  /// RLIMIT_RTPRIO (systemd's LimitRTPRIO=), capped at 50 to stay below the kernel's own
  /// threads. Without that limit (or when refused) it stays at normal priority.
  private func raisePriority() {
    var limit = rlimit()
    guard getrlimit(__rlimit_resource_t(__RLIMIT_RTPRIO.rawValue), &limit) == 0, limit.rlim_cur > 0 else { return }
    var parameters = sched_param(sched_priority: Int32(min(limit.rlim_cur, 50)))
    if pthread_setschedparam(pthread_self(), SCHED_FIFO, &parameters) == 0 {
      realtime.store(Int(parameters.sched_priority), ordering: .relaxed)
    }
  }
  private let healthy = Atomic<Bool>(true)

  /// `scheduledCapacity`: how many commands may wait for their sample at once (reserved here, so
  /// the render thread never grows the schedule). `animationsPerKeyPath`: reserved per property
  /// for the same reason.
  public convenience init(
    output configuration: OutputConfiguration, declick: Double = 0.010, maxGain: Double = 1,
    scheduledCapacity: Int = Player.maximumScheduled, animationsPerKeyPath: Int = 64,
    eventCapacity: Int = Player.defaultEventCapacity
  ) throws {
    let device = try AlsaPCMOutput(configuration)
    try self.init(
      device: device, sink: nil, negotiated: device.negotiated, configuration: configuration, declick: declick,
      maxGain: maxGain, scheduledCapacity: scheduledCapacity, animationsPerKeyPath: animationsPerKeyPath,
      eventCapacity: eventCapacity)
  }

  /// A player whose blocks go to `sink`, `blockFrames` at a time, on a virtual clock: no render
  /// thread, no pacing, no device to recover. Whoever owns it is its render thread and calls
  /// ``renderOffline()`` for each block; commands, streams and the mix are the live player's own.
  public convenience init(
    sink: any BlockSink, rate: Int, channels: Int, blockFrames: Int, declick: Double = 0.010, maxGain: Double = 1,
    scheduledCapacity: Int = Player.maximumScheduled, animationsPerKeyPath: Int = 64,
    eventCapacity: Int = Player.defaultEventCapacity
  ) throws {
    let negotiated = AlsaPCMOutput.Negotiated(
      device: "offline", format: .float32, rate: rate, channels: channels, periodFrames: blockFrames,
      bufferFrames: blockFrames, pacing: .device)
    try self.init(
      device: nil, sink: sink, negotiated: negotiated,
      configuration: OutputConfiguration(
        device: "offline", sampleRate: rate, channels: channels, format: .float32,
        periodTime: Double(blockFrames) / Double(rate), bufferTime: Double(blockFrames) / Double(rate),
        pacing: .device),
      declick: declick, maxGain: maxGain, scheduledCapacity: scheduledCapacity,
      animationsPerKeyPath: animationsPerKeyPath, eventCapacity: eventCapacity)
    offlineBuffers = RenderBuffers(frames: blockFrames, channels: channels)
    running.store(true, ordering: .releasing)
  }

  private init(
    device: AlsaPCMOutput?, sink: (any BlockSink)?, negotiated: AlsaPCMOutput.Negotiated,
    configuration: OutputConfiguration, declick: Double, maxGain: Double, scheduledCapacity: Int,
    animationsPerKeyPath: Int, eventCapacity: Int
  ) throws {
    events = SPSCQueue<PlayerEvent>(minimumCapacity: max(eventCapacity, 16))
    eventReserve = events.capacity / 2
    self.device = device
    self.sink = sink
    self.configuration = configuration
    output = negotiated
    let rate = Double(negotiated.rate)
    reopenAfterFrames = configuration.reopenAfter.map { max(Int(($0 * rate).rounded()), 1) }
    self.declick = declick
    idleClock = ClockPacer(rate: negotiated.rate)
    heardClock = HeardClock(rate: negotiated.rate)
    rewindHistory = RewindHistory(
      enabled: device?.allowsRewind ?? false, blockFrames: negotiated.periodFrames,
      bufferFrames: negotiated.bufferFrames, channels: negotiated.channels)
    resumeNanoseconds = Int64(negotiated.periodFrames) * 1_000_000_000 / Int64(negotiated.rate)
    declickFrames = max(Int((declick * rate).rounded()), 1)
    refillFrames = declickFrames + 4 * negotiated.periodFrames
    let engine = try AnimationEngine(
      sampleRate: Double(output.rate), maxBlockSize: max(output.periodFrames, 64),
      maxAnimationsPerKeyPath: animationsPerKeyPath)
    state = try RenderState(
      engine: engine, sampleRate: output.rate, channels: output.channels, maxGain: maxGain, events: events)
    scheduled = CommandSchedule(capacity: max(scheduledCapacity, 16))
    doorbell = try Bell("event")
    commandBell = try Bell("command")
    recoveryBell = try Bell("recovery")
  }

  deinit { offlineBuffers?.deallocate() }

  /// Starts the render thread (and the thread that reopens a lost device).
  public func start() {
    guard thread == nil else { return }
    running.store(true, ordering: .releasing)
    let thread = Thread { [self] in renderLoop() }
    thread.name = "rampd-render"
    thread.qualityOfService = .userInteractive
    self.thread = thread
    let recovery = Thread { [self] in recoveryLoop() }
    recovery.name = "rampd-recovery"
    recovery.start()
    thread.start()
  }

  /// Stops rendering after the current block and waits for the threads; the device is drained.
  public func shutdown() {
    guard thread != nil else { return }
    running.store(false, ordering: .releasing)
    commandBell.ring()
    recoveryBell.ring()
    while !finished.load(ordering: .acquiring) || !recoveryFinished.load(ordering: .acquiring) { usleep(1_000) }
    thread = nil
    // Never to run now: what they hold goes with them (a scheduled play's decoder, its thread).
    scheduled.removeAll()
    while commands.pop() != nil {}
    while retired.pop() != nil {}
  }

  /// Runs `body` on the render thread: at output sample `sample` exactly (the block is split
  /// there), or before the next block when nil or already past. False when the queue is full.
  /// `wake` false leaves a render thread that waits for the clock asleep: the command still lands
  /// on the next block's first sample, but whoever waits for its outcome waits for that block (on
  /// a device that rewinds the render thread is woken anyway: the command is then heard now).
  @discardableResult
  public func perform(
    at sample: Int64? = nil, wake: Bool = true, _ body: @escaping @Sendable (RenderState) -> Void
  ) -> Bool {
    push(PlayerCommand(sample: sample, work: .closure(body)), wake: wake)
  }

  /// Commits `command` on the render thread, as `perform` runs a closure. False when the queue is
  /// full.
  @discardableResult
  public func submit(_ command: any RenderCommand, at sample: Int64? = nil, wake: Bool = true) -> Bool {
    push(PlayerCommand(sample: sample, work: .command(command)), wake: wake)
  }

  private func push(_ command: PlayerCommand, wake: Bool) -> Bool {
    let accepted = submitLock.withLock { _ in commands.push(command) }
    // Only a render thread waiting for the clock listens for it; one waiting for room in a device
    // that rewinds always takes a command at once (then heard within the rewind margin). More than
    // a block's share waiting wakes it too, so a flood of commands answered early is taken while
    // it waits rather than a block's share per block, which would fill the queue.
    let flooding = commands.freeSlots < commands.capacity - Self.commandsPerBlock
    if rewindHistory.enabled
      || (wake || flooding) && (output.pacing == .clock || idling.load(ordering: .sequentiallyConsistent))
    {
      commandBell.ring()
    }
    return accepted
  }

  /// Starts publishing `keyPath`'s presentation value at every block (NaN while it does not exist).
  public func publish(_ keyPath: String) -> PublishedValue {
    let value = PublishedValue(keyPath: keyPath)
    perform { state in state.published.append(value) }
    return value
  }

  /// The same, for a reader that sleeps in `PublishedValue.waitForChange` while the value holds
  /// still. Throws when no pipe can be made for it.
  public func publish(_ keyPath: String, wakesOnChange: Bool) throws(AudioError) -> PublishedValue {
    let value = try PublishedValue(keyPath: keyPath, wakesOnChange: wakesOnChange)
    perform { state in state.published.append(value) }
    return value
  }

  /// Stops publishing `value`.
  public func unpublish(_ value: PublishedValue) {
    perform { state in state.published.removeAll { $0 === value } }
  }

  /// The next event from the render thread, if any.
  public func nextEvent() -> PlayerEvent? { events.pop() }

  /// Blocks until the render thread posts an event or `timeout` seconds pass. True when rung.
  @discardableResult
  public func waitForEvents(timeout: Double) -> Bool {
    doorbell.wait(milliseconds: Int32(min(max(timeout, 0), 3600) * 1000))
  }

  /// The doorbell's read end, for an event loop that waits for events itself (readable when the
  /// render thread has posted some; whoever watches it reads the bytes, then drains `nextEvent`).
  public var eventDescriptor: Int32 { doorbell.readEnd }

  /// Opens `path` now (so a bad file is refused here, with its name), then starts it as stream
  /// `id`: its gain at `gain`, faded in over `fadeIn` seconds with `curve` (or the declick ramp).
  /// Blocks until the decoder has a head start: call it off the event loop.
  public func play(
    _ path: String, id: String, gain: Double = 1, fadeIn: Double = 0, curve: TimingFunction = .linear,
    loop: Bool = false, paused: Bool = false
  ) throws {
    submit(try prepare(path, id: id, gain: gain, fadeIn: fadeIn, curve: curve, loop: loop, paused: paused))
  }

  /// The part of `play` that may block or allocate (opening, prefilling, building the stream's
  /// properties and ramps), done on the calling thread; the stream returned joins the mix on the
  /// render thread (committed, or called with the render state), or fails if `id` is taken.
  /// `admit` sees the file actually opened (symbolic links resolved) before anything is decoded;
  /// what it throws refuses the file.
  public func prepare(
    _ path: String, id: String, gain: Double = 1, fadeIn: Double = 0, curve: TimingFunction = .linear,
    space: ValueSpace = .amplitude, loop: Bool = false, paused: Bool = false, queue: StreamQueue? = nil,
    admit: (_ openedPath: String) throws -> Void = { _ in }
  ) throws -> PreparedStream {
    // Offline, the render runs as fast as it can: a longer ring lets the decoder run further
    // ahead, so the two threads wait for each other a few times a minute of audio, not every second.
    let decoder = try StreamDecoder(
      path: path, outputRate: output.rate, outputChannels: output.channels,
      bufferSeconds: (sink == nil ? 1 : 4) + heldSeconds, loops: loop, start: false)
    try admit(decoder.openedPath)
    decoder.consumerBell = commandBell
    decoder.start()
    decoder.waitUntilPrefilled()
    let unstarted = UnstartedDecoder(decoder)
    let engine = state.engine
    let rate = engine.sampleRate
    let gainHandle = try engine.prepareProperty("streams.\(id).gain", value: gain, range: 0...state.maxGain)
    let transport = try engine.prepareProperty("streams.\(id).transport", value: paused ? 0 : 1, range: 0...1)
    let pan = try engine.prepareProperty("streams.\(id).pan", value: 0, range: -1...1)
    var ramp: (animation: PreparedAnimation, on: PropertyHandle)?
    if fadeIn > 0 {
      var fade = Animation.basic(from: 0, to: gain, duration: fadeIn, timingFunction: curve)
      fade.valueSpace = space
      ramp = (
        try PreparedAnimation(
          fade, forKey: "fade-in", to: gainHandle.keyPath, sampleRate: rate, defaultDuration: 0), gainHandle
      )
    } else if !paused {
      ramp = (
        try PreparedAnimation(
          .basic(from: 0, to: 1, duration: declick), forKey: "declick", to: transport.keyPath, sampleRate: rate,
          defaultDuration: 0), transport
      )
    }
    let stream = PlayingStream(
      id: id, decoder: decoder, gain: gainHandle, transport: transport, pan: pan, paused: paused)
    stream.queue = queue
    return PreparedStream(id: id, path: path, unstarted: unstarted, stream: stream, ramp: ramp, fadesIn: fadeIn > 0)
  }

  /// A duck rule made ready for the render thread (`DuckLayer.add`); its storage is allocated here.
  public func prepareDuck(_ rule: DuckRule) -> DuckState {
    DuckState(rule, sampleRate: Double(output.rate), channels: output.channels, maxFrames: state.ducks.maxFrames)
  }

  /// Pauses stream `id` (every stream when nil) after a ramp to silence over `fade` seconds (at
  /// least the declick ramp); `resume` ramps back.
  public func pause(_ id: String?, fade: Double = 0, curve: TimingFunction = .linear, at sample: Int64? = nil) {
    submit(prepareTransport(.pause, id, fade: fade, curve: curve), at: sample)
  }

  public func resume(_ id: String?, fade: Double = 0, curve: TimingFunction = .linear, at sample: Int64? = nil) {
    submit(prepareTransport(.resume, id, fade: fade, curve: curve), at: sample)
  }

  /// Stops stream `id` (every stream when nil) after a fade to silence over `fade` seconds (at
  /// least the declick ramp).
  public func stop(_ id: String?, fade: Double = 0, curve: TimingFunction = .linear, at sample: Int64? = nil) {
    submit(prepareTransport(.stop, id, fade: fade, curve: curve), at: sample)
  }

  /// Moves stream `id` to `seconds` into its file: a ramp to silence, the jump, a ramp back.
  public func seek(_ id: String, to seconds: Double, at sample: Int64? = nil) {
    perform(at: sample) { [self] state in _ = seek(id, to: seconds, in: state) }
  }

  /// A pause, resume or stop of stream `id` (every stream when nil), made ready off the render
  /// thread: a ramp over `fade` seconds (at least the declick ramp) prepared for each stream it
  /// may act on (`capacity` of them when `id` is nil).
  public func prepareTransport(
    _ kind: PreparedTransport.Kind, _ id: String?, fade: Double = 0, curve: TimingFunction = .linear,
    space: ValueSpace = .amplitude, capacity: Int = Player.streamCapacity
  ) -> PreparedTransport {
    PreparedTransport(
      kind, id, transaction: Transaction(duration: max(fade, declick), timingFunction: curve, valueSpace: space),
      sampleRate: Double(output.rate), capacity: id == nil ? max(capacity, 1) : 1)
  }

  /// Starts moving stream `id` to `seconds` into its file (the render thread ramps it out and back
  /// in around the jump, in `renderSpan`). False when no such stream plays. Allocation-free.
  @discardableResult
  public func seek(_ id: String, to seconds: Double, in state: RenderState) -> Bool {
    guard let stream = state.stream(id) else { return false }
    // Past the end is the end: capping at the file's length keeps a position such as 1e308 s from
    // overflowing the frame count.
    let wanted = seconds * Double(output.rate)
    let frame = wanted > 0 ? Int(min(wanted, Double(stream.decoder.outputLength))) : 0
    stream.pendingSeek = frame
    stream.seekRequested = false
    return true
  }

  /// Runs the queued commands now, on the calling thread: for tests that drive `renderBlock`
  /// themselves instead of starting the render thread.
  func applyPendingCommands() {
    while let command = commands.pop() { run(command) }
  }

  /// Runs a command's body. It may define or undefine key paths, so the published values'
  /// handles are looked up again before the next block.
  private func run(_ command: PlayerCommand) {
    switch command.work {
    case .command(let prepared): prepared.commit(state)
    case .closure(let body): body(state)
    }
    publishedHandlesStale = true
    retire(.command(command))
  }

  /// Hands `object` to the recovery thread, which frees it. Only a full queue (thousands retired
  /// in one block) lets go of it here.
  private func retire(_ object: Retired) {
    _ = retired.push(object)
    retiredInBlock = true
    state.irreversible &+= 1
  }

  /// Frees what the render thread let go of (the recovery thread does, and tests that drive
  /// `renderBlock` themselves).
  func reapRetired() {
    while retired.pop() != nil {}
  }

  /// True while a stream's ring holds less than a block (tests pace themselves with it).
  func streamsBehind(frames: Int) -> Bool {
    firstDecoderBehind(frames: frames, playingOnly: false) != nil
  }

  /// Writes one rendered block to the device, as the render loop does (and reads where the
  /// device is, as it does after a write).
  func writeToDevice(_ mix: UnsafePointer<Float>, frames: Int) throws(AudioError) {
    guard let device else { throw AudioError(.device, "no device") }
    try device.write(mix, frames: frames, clamped: true)
    observeHeard(device)
  }

  private func renderLoop() {
    nameThisThread("rampd-render")
    flushSubnormalsOnThisThread()
    raisePriority()
    renderThread.store(currentThreadID(), ordering: .releasing)
    let buffers = RenderBuffers(frames: output.periodFrames, channels: output.channels)
    defer {
      buffers.deallocate()
      device?.drain()
      // Closing finishes what the device writes (the file plugin fixes its WAV header here).
      device?.close()
      // The decoders' threads end with the streams.
      for stream in state.streams { stream.cancelDecoders() }
      finished.store(true, ordering: .releasing)
    }
    while running.load(ordering: .acquiring) {
      if blockCount.load(ordering: .relaxed) > 0 { idleIfNothingToRender(buffers) }
      // With clock pacing, the wait comes before the block is rendered: a command taken during
      // it lands on the block's first sample, heard at most one buffer later.
      var due: Int64 = 0
      if let device, output.pacing == .device { waitForRoomTakingCommands(on: device, frames: buffers.frames) }
      if let device, output.pacing == .clock {
        // The blocks of one wake-up become `latest` one period apart, from the wake-up on.
        let waited = takeCommandsWhileWaiting(for: device, frames: buffers.frames)
        // (A writer that never waits, always behind the clock, starts a batch every buffer.)
        if waited || state.engine.now - (batchStart?.sample ?? Int64.min / 2) > Int64(output.bufferFrames) {
          batchStart = (monotonicNanoseconds(), state.engine.now)
        }
        if let batchStart {
          due = batchStart.nanoseconds + (state.engine.now - batchStart.sample) * 1_000_000_000 / Int64(output.rate)
        }
      }
      takeCommands()
      // Replies leave now, not after the block has waited for the device.
      flushEvents()
      if let device, output.pacing == .device { waitForStreams(on: device, frames: buffers.frames) }
      publishValues(due: due)
      beginRewindableBlock()
      renderScheduled(buffers)
      // Published before the write (with device pacing, the wait for the device), so commands
      // taken meanwhile count from here.
      published.store(state.engine.now, ordering: .releasing)
      writeOrKeepTime(buffers)
      endRewindableBlock()
      blockCount.add(1, ordering: .relaxed)
      finishStreams()
      flushEvents()
    }
  }

  /// Renders one block of an offline player into its sink, on the calling thread (which is its
  /// render thread): the live loop's steps without the clock. Before the block it waits for every
  /// stream to have its audio (``waitForEveryStream(frames:)``), so the render does not depend
  /// on how fast the decoders run. The caller takes the events between blocks.
  public func renderOffline() throws(AudioError) {
    guard let sink, let buffers = offlineBuffers else {
      throw AudioError(.invalidParameter, "renderOffline needs a player made with a sink")
    }
    // Every command submitted so far, not a block's share: none may land late.
    repeat { takeCommands() } while commands.freeSlots < commands.capacity && events.freeSlots > eventReserve
    flushEvents()
    waitForEveryStream(frames: buffers.frames)
    publishValues(due: 0)
    renderScheduled(buffers)
    published.store(state.engine.now, ordering: .releasing)
    try sink.write(buffers.mix, frames: buffers.frames)
    blockCount.add(1, ordering: .relaxed)
    finishStreams()
    flushEvents()
    // No recovery thread offline: what was retired is freed here, between blocks.
    while retired.pop() != nil {}
  }

  /// Runs `body` with the render state between blocks of an offline player (whose caller is its
  /// render thread): what plays, what is in flight.
  public func inspectOffline<T>(_ body: (RenderState) throws -> T) rethrows -> T {
    precondition(sink != nil, "only an offline player's state can be inspected")
    return try body(state)
  }

  /// Ends an offline player: its streams' decoders stop, what waits to run is dropped.
  public func finishOffline() {
    for stream in state.streams { stream.cancelDecoders() }
    running.store(false, ordering: .releasing)
    scheduled.removeAll()
    while commands.pop() != nil {}
    while retired.pop() != nil {}
  }

  /// Rings the doorbell once if anything was posted since the last time.
  func flushEvents() {
    if retiredInBlock {
      retiredInBlock = false
      recoveryBell.ring()
    }
    state.announceLostEvents()
    guard state.posted else { return }
    state.posted = false
    doorbell.ring()
  }

  /// Stores each published key path's value at the block's first sample, due at `due`
  /// (monotonic nanoseconds). Allocation-free.
  private func publishValues(due: Int64) {
    let engine = state.engine
    // Key paths are looked up (hashed) only after something may have defined or undefined one.
    let lookUp = publishedHandlesStale
    publishedHandlesStale = false
    var index = 0
    while index < state.published.count {
      let published = state.published[index]
      index += 1
      if lookUp { published.handle = engine.handleIfDefined(published.keyPath) }
      var value = Double.nan
      if let handle = published.handle {
        engine.render(handle, start: engine.now, count: 1, into: &value)
      }
      published.store(value, sample: engine.now, due: due)
    }
  }

  /// Moves submitted commands into the schedule (soonest first) or runs them now: at most
  /// `commandsPerBlock`, the rest stay queued for the next block.
  func takeCommands() {
    let now = state.engine.now
    var taken = 0
    var rewound = false
    while taken < Self.commandsPerBlock, events.freeSlots > eventReserve, let command = commands.pop() {
      taken += 1
      guard let sample = command.sample, sample > now else {
        if !rewound {
          rewound = true
          rewindBeforeCommand(at: command.sample)
        }
        run(command)
        continue
      }
      if scheduled.count == scheduled.capacity {
        // Beyond the capacity reserved at start (the daemon's limit keeps it from happening):
        // run it now, early, rather than allocate here.
        run(command)
        continue
      }
      scheduled.insert(command, at: sample)
    }
  }

  /// Renders one block, split at each scheduled command's sample so it lands exactly there.
  private func renderScheduled(_ buffers: RenderBuffers) {
    var offset = 0
    while offset < buffers.frames {
      let now = state.engine.now
      while let first = scheduled.firstSample, first <= now {
        run(scheduled.removeFirst())
      }
      var span = buffers.frames - offset
      if let sample = scheduled.firstSample { span = min(span, Int(sample - now)) }
      renderSpan(buffers, offset: offset, frames: span)
      offset += span
    }
  }

  private func writeOrKeepTime(_ buffers: RenderBuffers) {
    // A device reopened on schedule that would not open again is lost like any other.
    if device == nil, let failure = failedReopenings.pop(), healthy.load(ordering: .relaxed) {
      healthy.store(false, ordering: .relaxed)
      state.post(.deviceFailed(failure))
    }
    if device == nil, let fresh = freshDevices.pop() {
      device = fresh
      framesSinceOpen = 0
    }
    guard let device else {
      keepTime(frames: buffers.frames)
      return
    }
    do {
      // The mix is clamped (GainKernel.clamp): a float device takes it as it is.
      try device.write(buffers.mix, frames: buffers.frames, clamped: true)
      framesSinceOpen += buffers.frames
      noClock.store(device.hasNoClock, ordering: .relaxed)
      observeHeard(device)
      // Recovered once it has taken two buffers, not when it opens: a `file` plugin opens its file
      // at the first write and writes it once its own buffer fills. (A device reopened on
      // schedule was never lost.)
      if !healthy.load(ordering: .relaxed) && framesSinceOpen >= 2 * output.bufferFrames {
        healthy.store(true, ordering: .relaxed)
        state.post(.deviceRecovered(device.negotiated.device))
      }
      underrunCount.store(underrunsOfLostDevices + device.underruns, ordering: .relaxed)
      // A device without a clock goes as fast as the streams decode; with none playing, time
      // would race (a ten-second fade over in microseconds, a core spinning): the clock keeps it.
      if device.hasNoClock && !streamsPlaying {
        keepTime(frames: buffers.frames)
      } else {
        idleClock.reset()
      }
      if let reopenAfterFrames, framesSinceOpen >= reopenAfterFrames { handOver(device, to: retiredDevices) }
    } catch {
      // Unhealthy before the event is out, so whoever takes the event sees the device as lost.
      // A reopened device that fails before it played was never back: no second event.
      if healthy.load(ordering: .relaxed) {
        healthy.store(false, ordering: .relaxed)
        state.post(.deviceFailed(error.message))
      }
      handOver(device, to: deadDevices)
    }
  }

  /// Feeds the sample-to-time mapping what the device says right after a write: the block's
  /// last sample is heard `delay` frames later than the device's timestamp.
  private func observeHeard(_ device: AlsaPCMOutput) {
    if device.underruns != underrunsObserved {
      underrunsObserved = device.underruns
      heardClock.restart()
    }
    guard let position = device.heardPosition() else { return }
    heardClock.observe(sample: state.engine.now - Int64(position.delay), at: position.nanoseconds)
    heard.store(heardClock, delay: Int64(position.delay))
    if let resumed {
      self.resumed = nil
      resumeNanoseconds = max(heardClock.nanoseconds(of: resumed.sample) - resumed.nanoseconds, 0)
      measuredResume.store(resumeNanoseconds, ordering: .relaxed)
    }
  }

  // MARK: Idle

  /// True while the device is stopped because nothing plays and nothing moves: the render thread
  /// sleeps until a command comes (or a scheduled one is due) and makes no wake-up meanwhile.
  public var isIdle: Bool { stoppedIdle.load(ordering: .relaxed) }

  /// Seconds from a command that ends the idle to its first sample heard, as last measured
  /// (nil before the first time).
  public var resumeLatency: Double? {
    let nanoseconds = measuredResume.load(ordering: .relaxed)
    return nanoseconds < 0 ? nil : Double(nanoseconds) / 1e9
  }

  /// Nothing to render but silence until a command comes: no command waits, no stream plays
  /// (every one paused and still, none seeking), no animation runs or waits to begin.
  private var nothingToRender: Bool {
    guard commands.isEmpty, !state.engine.isAnimating, !state.engine.hasPendingCompletions else { return false }
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if !stream.paused || stream.stopping || stream.pendingSeek != nil { return false }
    }
    return true
  }

  /// When nothing is to be rendered (`nothingToRender`) on a device that may stop
  /// (`AlsaPCMOutput.stopsWhenIdle`): lets the device play what it holds, stops it before it
  /// runs dry (what it still holds is the last block, silence), then sleeps until a command
  /// comes or a scheduled one must be rendered, without a timer. A command during the play-out
  /// ends it with the device still running. On waking, the sample clock catches up with the
  /// time spent idle as the device will play it (the mapping of samples to time extrapolated,
  /// plus the resume latency last measured), so an `at` time keeps its meaning; the device
  /// starts again once it holds two blocks (`AlsaPCMOutput.stopForIdle`), its first sample
  /// being silence or the command's ramp: no click. Allocation-free.
  private func idleIfNothingToRender(_ buffers: RenderBuffers) {
    guard let device, device.stopsWhenIdle, healthy.load(ordering: .relaxed), nothingToRender else { return }
    let nanosecondsPerFrame = 1e9 / Double(output.rate)
    // How long before a scheduled command the device must run again.
    let lead = Int64(Double(output.bufferFrames + 2 * output.periodFrames) * nanosecondsPerFrame) + resumeNanoseconds
    if let first = scheduled.firstSample, Double(first - state.engine.now) * nanosecondsPerFrame < Double(2 * lead) {
      return
    }
    // The block last written is silence (the one before may end a stream): the device stops
    // before it, and cuts nothing but silence.
    var index = 0
    while index < buffers.frames * buffers.channels {
      if buffers.mix[index] != 0 { return }
      index += 1
    }
    // Pairs with `perform`: either it sees `idling` and rings, or the command is seen here.
    idling.store(true, ordering: .sequentiallyConsistent)
    defer { idling.store(false, ordering: .sequentiallyConsistent) }
    guard commands.isEmpty else { return }
    let now = monotonicNanoseconds()
    // When the last sample written is heard; the device stops a period before.
    let lastHeard =
      heardClock.known
      ? heardClock.nanoseconds(of: state.engine.now) : now + Int64(Double(device.delayFrames) * nanosecondsPerFrame)
    let period = Int64(Double(output.periodFrames) * nanosecondsPerFrame)
    guard sleepIdle(until: lastHeard - period) else { return }
    device.stopForIdle()
    heardClock.restart()
    stoppedIdle.store(true, ordering: .relaxed)
    // A scheduled command wakes it in time to be rendered and heard at its sample.
    let deadline = scheduled.firstSample.map { first in
      heardClock.known
        ? heardClock.nanoseconds(of: first) - lead
        : HeardClock.clamped(Double(lastHeard) + Double(first - state.engine.now) * nanosecondsPerFrame) - lead
    }
    // True only once the deadline has passed; false when a command came (or shutdown).
    let scheduledWake = sleepIdle(until: deadline)
    stoppedIdle.store(false, ordering: .relaxed)
    let wake = monotonicNanoseconds()
    var heardFrom = wake + resumeNanoseconds
    // Woken for a scheduled command, with time to spare: the device starts at a set moment
    // (after the two blocks it starts with are rendered), so its sample clock is where the
    // mapping says, whatever this wake-up's latency.
    let startMargin: Int64 = 5_000_000
    let timed = scheduledWake && device.start(at: wake + startMargin)
    if timed { heardFrom = wake + startMargin }
    let behind =
      heardClock.known
      ? heardClock.sample(at: heardFrom) - Double(state.engine.now)
      : Double(heardFrom - lastHeard) / nanosecondsPerFrame
    if behind >= 1 { state.engine.advance(by: Int(min(behind, 1e18))) }
    // A timed start says nothing of the latency of a command's wake-up.
    resumed = timed ? nil : (wake, state.engine.now)
    batchStart = nil
  }

  /// Sleeps on the command bell until `deadline` (monotonic nanoseconds; nil: none). False when
  /// a command came first (or the player stops), true once the deadline has passed.
  private func sleepIdle(until deadline: Int64?) -> Bool {
    while running.load(ordering: .relaxed) {
      if !commands.isEmpty { return false }
      var milliseconds: Int32 = -1
      if let deadline {
        let left = deadline - monotonicNanoseconds()
        if left <= 0 { return true }
        milliseconds = pollMilliseconds(Double(left) / 1e9)
      }
      _ = commandBell.wait(milliseconds: milliseconds)
    }
    return false
  }

  /// The output sample heard at `wallClock` (seconds since the epoch, CLOCK_REALTIME): by the
  /// device's own delay and timestamps and its clock rate as measured (`status.output`'s
  /// `delay` and `drift`), kept current at every block. Before the device has said anything (or
  /// without one), the sample clock counted from the next block at the nominal rate. A time
  /// too far off to count in samples gives a sample that never comes.
  /// Renders to a sink on a virtual clock (``init(sink:rate:channels:blockFrames:declick:maxGain:scheduledCapacity:animationsPerKeyPath:eventCapacity:)``).
  public var isOffline: Bool { sink != nil }

  public func sample(heardAt wallClock: Double) -> Int64 {
    let monotonic = monotonicNanoseconds()
    let seconds = wallClock - realtimeSeconds()
    let frames: Double
    if let mapping = heard.load() {
      frames = mapping.sample + (Double(monotonic - mapping.nanoseconds) + seconds * 1e9) * mapping.rate
    } else {
      frames = Double(currentSample) + seconds * Double(output.rate)
    }
    return Int64(min(frames.rounded(), 1e18))
  }

  /// The output's delay (seconds from a sample written to its being heard, measured right after
  /// the last write) and its clock's drift against the system's (parts per million, 0 until
  /// measured); nil before the device has said.
  public var measuredOutput: (delay: Double, driftPPM: Double)? {
    guard let mapping = heard.load(), mapping.delay >= 0 else { return nil }
    return (Double(mapping.delay) / Double(output.rate), (mapping.rate * 1e9 / Double(output.rate) - 1) * 1e6)
  }

  /// Gives the device to the recovery thread: `deadDevices` (lost) or `retiredDevices` (healthy,
  /// reopened on schedule), to be closed and opened again. Time follows the clock meanwhile.
  private func handOver(_ device: AlsaPCMOutput, to queue: SPSCQueue<AlsaPCMOutput>) {
    underrunsOfLostDevices += device.underruns
    underrunsObserved = 0
    heardClock.restart()
    self.device = nil
    idleClock.reset()
    batchStart = nil
    _ = queue.push(device)
    recoveryBell.ring()
  }

  /// With clock pacing, until the next block may be written, sleeps on the command pipe: a
  /// command arriving meanwhile is applied at once (to the next block, whose first sample is the
  /// engine's now) and its reply leaves, instead of waiting for the next block start. Blocks go
  /// out back to back while they fit in the buffer ahead of the clock; once it is full, the
  /// sleep lasts until only the margin is left ahead (`refillLead`), so one wake-up serves
  /// (buffer − margin) of audio. With device pacing the write itself blocks; commands then wait
  /// for the block boundary. Returns true when it waited (a new batch of blocks starts).
  private func takeCommandsWhileWaiting(for device: AlsaPCMOutput, frames: Int) -> Bool {
    var waited = false
    while running.load(ordering: .relaxed) {
      let wait = device.secondsUntilWritable(frames: frames, refillAt: refillLead)
      if wait <= 0 { break }
      waited = true
      // Rounded up to whole milliseconds: the block then fits when poll returns.
      guard commandBell.wait(milliseconds: pollMilliseconds(wait)) else { continue }
      takeCommands()
      flushEvents()
    }
    return waited
  }

  /// With device pacing, a stream whose decoder is behind is waited for instead of played as
  /// silence while the device has audio queued to cover the wait (less a period, the margin), and
  /// without limit on a device that has no clock: it takes audio as fast as it comes, so nothing
  /// is late for it, and what it records is the whole file. Commands are taken meanwhile.
  private func waitForStreams(on device: AlsaPCMOutput, frames: Int) {
    if device.hasNoClock {
      waitForEveryStream(frames: frames)
      return
    }
    // Monotonic nanoseconds the wait may last until (nil: no limit), reckoned at the first wait.
    var deadline: Int64?
    var reckoned = device.hasNoClock
    while running.load(ordering: .relaxed), let decoder = firstDecoderBehind(frames: frames) {
      // A decoder woken once per half ring, not once per block, when nothing limits the wait.
      let enough = (frames + declickFrames) * output.channels
      guard decoder.awaitSamples(device.hasNoClock ? max(decoder.lowWater, enough) : enough) else { continue }
      if !reckoned {
        reckoned = true
        let covered = device.delayFrames - output.periodFrames
        guard covered > 0 else { return }
        deadline = monotonicNanoseconds() + Int64(covered) * 1_000_000_000 / Int64(output.rate)
      }
      // Without a limit, it still looks again now and then (a decoder stuck on a slow disk).
      let left = deadline.map { $0 - monotonicNanoseconds() } ?? 100_000_000
      guard left > 0 else { return }
      if commandBell.wait(milliseconds: pollMilliseconds(Double(left) / 1e9)) {
        takeCommands()
        flushEvents()
      }
    }
  }

  /// Without a clock (a sink, or a device that takes audio as fast as it comes) nothing is ever
  /// late, so before a block the render thread waits until every stream can play it as if its
  /// decoder were infinitely fast: the ring holds the block and the ramp after it (a starved
  /// stream: the refill it waits for), and a seek asked for has landed. What is rendered then does
  /// not depend on the decoders' timing: an offline render, or the recording of rampd on such a
  /// device, is the same every time. Commands are taken meanwhile.
  private func waitForEveryStream(frames: Int) {
    while running.load(ordering: .relaxed) {
      var index = 0
      var behind: StreamDecoder?
      var needed = 0
      var installing = false
      while index < state.streams.count && behind == nil {
        let stream = state.streams[index]
        index += 1
        let decoder = stream.decoder
        if decoder.hasFailed { continue }
        if stream.pendingSeek != nil {
          if stream.seekRequested && decoder.seekIsPending {
            behind = decoder
            needed = 0
          }
          continue
        }
        let ahead = stream.starved ? max(refillFrames, frames + declickFrames) : frames + declickFrames
        if let queue = stream.queue, let wait = queue.behind(stream, frames: frames, ahead: ahead) {
          // A queue's next item the daemon has yet to install: commands are taken until it is.
          guard let decoder = wait.decoder else {
            if commandBell.wait(milliseconds: 10) { takeCommands() }
            flushEvents()
            installing = true
            break
          }
          behind = decoder
          needed = wait.needed
          break
        }
        if decoder.isFinished { continue }
        needed = min(ahead * output.channels, decoder.ring.capacity)
        if decoder.ring.available < needed { behind = decoder }
      }
      if installing { continue }
      guard let decoder = behind else { return }
      if needed == 0 {
        // A seek lands within a read of the file: polled, there is no bell for it.
        usleep(100)
        continue
      }
      guard decoder.awaitSamples(max(decoder.lowWater, needed)) else { continue }
      if commandBell.wait(milliseconds: 100) {
        takeCommands()
        flushEvents()
      }
    }
  }

  /// The first stream that plays (not paused, not seeking) and whose decoder has less than a
  /// block and the ramp out after it ready while still decoding (less would start an underrun).
  /// `playingOnly: false`: any stream, paused or seeking too.
  private func firstDecoderBehind(frames: Int, playingOnly: Bool = true) -> StreamDecoder? {
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if playingOnly && (stream.paused || stream.pendingSeek != nil) { continue }
      let decoder = stream.decoder
      if !decoder.isFinished && decoder.ring.available < (frames + declickFrames) * output.channels { return decoder }
    }
    return nil
  }

  /// Without a device to block on, waits until the block just rendered is due on the clock (one
  /// block ahead of it); after an outage of the render thread itself the clock re-anchors.
  private func keepTime(frames: Int) {
    idleClock.wait(toWrite: frames, lead: frames)
    idleClock.advance(by: frames)
  }

  /// Whether a stream plays (or ramps towards a pause): time then follows the streams.
  private var streamsPlaying: Bool {
    var index = 0
    while index < state.streams.count {
      if !state.streams[index].paused { return true }
      index += 1
    }
    return false
  }

  /// Frames left ahead of the clock when a render thread paced by the clock wakes to refill the
  /// buffer, the margin against a late wake-up: `OutputConfiguration.marginTime`, by default the
  /// buffer less one period (in the buffer as negotiated, never less than a period unless the
  /// buffer holds under two).
  private var refillLead: Int {
    let most = max(output.bufferFrames - output.periodFrames, 0)
    guard let margin = configuration.marginTime else { return most }
    return min(max(Int((margin * Double(output.rate)).rounded()), output.periodFrames), most)
  }

  /// Closes dead devices and opens new ones, off the render thread: opening a device allocates
  /// and may block.
  private func recoveryLoop() {
    nameThisThread("rampd-recovery")
    defer { recoveryFinished.store(true, ordering: .releasing) }
    var wanted = false
    /// Reopening a device retired on schedule, which the render thread still counts as healthy.
    var reopening = false
    var reopenedAt = -Double.infinity
    var delay = recoveryBackoff.first
    var nextAttempt = 0.0
    while running.load(ordering: .acquiring) {
      // What the render thread let go of is freed here.
      reapRetired()
      // A lost device is given a moment before the first attempt; a retired one none.
      for (queue, retired) in [(deadDevices, false), (retiredDevices, true)] {
        guard let device = queue.pop() else { continue }
        device.close()
        wanted = true
        reopening = retired
        // A device that fails again soon after it was reopened (one that opens but cannot play)
        // keeps the backoff growing rather than be reopened ten times a second.
        let soon = monotonicSeconds() - reopenedAt < 2 * recoveryBackoff.last
        delay = retired || !soon ? recoveryBackoff.first : min(delay * 2, recoveryBackoff.last)
        nextAttempt = monotonicSeconds() + (retired ? 0 : delay)
      }
      if wanted, monotonicSeconds() >= nextAttempt {
        switch openAgain() {
        case .success(let fresh):
          _ = freshDevices.push(fresh)
          wanted = false
          reopening = false
          reopenedAt = monotonicSeconds()
        case .failure(let problem):
          if reopening {
            _ = failedReopenings.push("reopening \(configuration.device) on schedule: \(problem)")
            reopening = false
          }
          delay = min(delay * 2, recoveryBackoff.last)
          nextAttempt = monotonicSeconds() + delay
        }
      }
      // Healthy, it sleeps until the render thread hands a dead device over (or shutdown);
      // reopening, until the next attempt.
      recoveryBell.wait(milliseconds: wanted ? pollMilliseconds(nextAttempt - monotonicSeconds()) : -1)
    }
  }

  /// The configured device, opened again at the rate and channels the render thread works in.
  private func openAgain() -> Result<AlsaPCMOutput, AudioError> {
    do throws(AudioError) {
      let fresh = try AlsaPCMOutput(configuration)
      guard fresh.negotiated.rate == output.rate, fresh.negotiated.channels == output.channels else {
        fresh.close()
        return .failure(
          AudioError(
            .invalidParameter,
            "it now gives \(fresh.negotiated.rate) Hz, \(fresh.negotiated.channels) channels instead of "
              + "\(output.rate) Hz, \(output.channels)"))
      }
      return .success(fresh)
    } catch {
      return .failure(error)
    }
  }

  /// One block into `buffers.mix`. Allocation-free: the render thread's hot path.
  func renderBlock(_ buffers: RenderBuffers) {
    renderSpan(buffers, offset: 0, frames: buffers.frames)
  }

  /// Frames [offset, offset + frames) of the block. Allocation-free.
  func renderSpan(_ buffers: RenderBuffers, offset: Int, frames: Int) {
    let channels = buffers.channels
    let mix = buffers.mix + offset * channels
    let audio = buffers.audio
    let gain = buffers.gain
    let ramp = buffers.ramp
    let engine = state.engine
    let now = engine.now
    let ducks = state.ducks
    ducks.begin(state, now: now)
    mix.update(repeating: 0, count: frames * channels)
    // Index loop, not for-in: an unspecialised iterator allocates in a debug build.
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if let frame = stream.pendingSeek {
        // Seeking: the stream's envelope ramps out over the declick ramp (mixed below), or at
        // once when the stream is silent anyway (paused). Once silent, ask the decoder; once it
        // has sought, drop the stale audio; the stream then waits for its ring to refill and
        // ramps back in (as after an underrun). Until then it holds its place, silent. No engine
        // call: nothing is allocated or freed here.
        if stream.supply > 0 {
          engine.render(stream.transport, start: now, count: 1, into: ramp)
          if ramp[0] == 0 && engine.restingValue(stream.transport) == 0 { stream.supply = 0 }
        }
        if stream.supply == 0 {
          if !stream.seekRequested {
            stream.decoder.requestSeek(toOutputFrame: frame)
            stream.seekRequested = true
          } else if offset == 0, let mark = stream.decoder.takeSeekMark() {
            // Taken at a block's start only (where a render thread without a clock has waited
            // for it), so where the stream comes back does not depend on the decoder's speed.
            stream.decoder.ring.discard(upTo: mark)
            stream.pendingSeek = nil
            stream.seekRequested = false
            stream.position = frame
            // The ring holds little of the new position yet: the stream waits for it to refill
            // (no underrun: nothing was cut) and ramps in.
            stream.starved = true
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
      let decoder = stream.decoder
      let available = decoder.ring.available
      let finished = decoder.isFinished
      if stream.starved {
        // Holding, silent and in place, until the ring has refilled (judged at a block's start,
        // for the same reason as a seek's mark).
        guard offset == 0, finished || available >= min(refillFrames * channels, decoder.ring.capacity) else {
          continue
        }
        stream.starved = false
      }
      // The ring cannot cover this span and a ramp out after it: ramp out now, at the declick
      // ramp's pace (faster only if the audio runs out first), rather than cut to silence
      // mid-waveform when it runs dry.
      let starving = !finished && available < (frames + declickFrames) * channels
      let seeking = stream.pendingSeek != nil
      let got: Int
      let centred = channels != 2 || engine.restingValue(stream.pan) == 0
      if centred, !starving, !seeking, stream.supply == 1,
        stream.queue?.isQuiet(stream, frames: frames, now: now) ?? true,
        let level = engine.restingValue(stream.gain),
        let transport = engine.restingValue(stream.transport),
        let duck = ducks.restingFactor(stream: stream.id, from: now)
      {
        // At rest, the usual case between fades: one gain for the block, mixed straight from the
        // ring (a missing sample would add 0 × gain, nothing).
        let constant = Float(level) * Float(transport)
        got = stream.decoder.consume(count: wanted) { samples, offset, count in
          ducks.listen(stream.id, samples, offset: offset, count: count, gain: constant)
          GainKernel.accumulate(samples, gain: constant * duck, count: count, into: mix + offset)
        }
      } else {
        var taken = wanted
        var envelope = SupplyRamp.in
        if starving {
          // Only the audio the ramp needs is taken: the rest stays for when the stream resumes.
          let have = min(available / channels, frames)
          let needed = Int((stream.supply * Float(declickFrames)).rounded(.up))
          envelope = have < needed && have < frames ? .outOverAudio : .out
          taken = min(have, needed) * channels
        } else if seeking {
          envelope = .out
        }
        got =
          stream.queue?.read(stream, into: audio, count: taken, now: now, state: state) { retire(.object($0)) }
          ?? decoder.read(into: audio, count: taken)
        if got < wanted { (audio + got).update(repeating: 0, count: wanted - got) }
        if starving || seeking || stream.supply < 1 {
          applySupply(stream, to: audio, frames: got / channels, channels: channels, ramp: envelope)
        }
        engine.render(stream.gain, start: now, count: frames, into: gain)
        engine.render(stream.transport, start: now, count: frames, into: ramp)
        GainKernel.multiply(gain, by: ramp, count: frames)
        ducks.listen(stream.id, audio, gain: gain, frames: frames)
        ducks.apply(stream: stream.id, start: now, count: frames, to: gain)
        if centred {
          GainKernel.accumulate(audio, gain: gain, frames: frames, channels: channels, into: mix)
        } else {
          engine.render(stream.pan, start: now, count: frames, into: ramp)
          GainKernel.accumulateBalanced(audio, gain: gain, balance: ramp, frames: frames, into: mix)
        }
      }
      stream.position += got / channels
      if got > 0 && finished && decoder.ring.available == 0 {
        // Where the stream's last audio ends: how long a render of the whole show lasts.
        state.audioEnd = max(state.audioEnd, now + Int64(got / channels))
      }
      if starving && stream.supply == 0 {
        // One event per shortfall, not one per block: a starved stream must not flood the queue
        // that carries replies.
        state.post(.underrun(stream: stream.id))
        stream.starved = true
      }
    }
    engine.render(state.master, start: now, count: frames, into: gain)
    ducks.applyToMaster(start: now, count: frames, to: gain)
    GainKernel.apply(mix, gain: gain, frames: frames, channels: channels, into: mix)
    GainKernel.clamp(mix, count: frames * channels)
    ducks.end(frames: frames) { retire(.object($0)) }
    engine.advance(by: frames)
    engine.drainCompletions(retiring: { retire(.object($0)) }) { report in state.post(.animationFinished(report)) }
  }

  enum SupplyRamp {
    /// Down to 0 over the frames given: the last audio before an underrun.
    case outOverAudio
    /// Down towards 0 at the declick ramp's pace: before a seek.
    case out
    /// Up towards 1 at the declick ramp's pace.
    case `in`
  }

  /// Applies a stream's envelope to `frames` frames of its audio. Allocation-free.
  private func applySupply(
    _ stream: PlayingStream, to audio: UnsafeMutablePointer<Float>, frames: Int, channels: Int, ramp: SupplyRamp
  ) {
    var level = stream.supply
    let step = ramp == .outOverAudio ? level / Float(max(frames, 1)) : 1 / Float(declickFrames)
    var frame = 0
    while frame < frames {
      switch ramp {
      case .outOverAudio: level = frame == frames - 1 ? 0 : max(level - step, 0)
      case .out: level = max(level - step, 0)
      case .in: level = min(level + step, 1)
      }
      var channel = 0
      while channel < channels {
        audio[frame * channels + channel] *= level
        channel += 1
      }
      frame += 1
    }
    // A ramp out that ends within a rounding error of silence ends in silence.
    stream.supply = ramp == .outOverAudio || (ramp == .out && level < 1e-5) ? 0 : level
  }

  /// Streams whose file ended (ring empty) or whose stop ramp is over leave the mix.
  func finishStreams() {
    let engine = state.engine
    var index = state.streams.count - 1
    while index >= 0 {
      let stream = state.streams[index]
      let drained =
        stream.decoder.isFinished && stream.decoder.ring.available == 0 && stream.pendingSeek == nil
        && !(stream.queue?.continues ?? false)
      var stopped = false
      if stream.stopping {
        var level: Float = 1
        engine.render(stream.transport, start: engine.now, count: 1, into: &level)
        stopped = level == 0
      }
      if drained || stopped {
        stream.cancelDecoders()
        let reason: StreamEndReason = stopped ? .stopped : (stream.decoder.hasFailed ? .failed : .finished)
        let itemReason: ItemEndReason = stopped ? .stopped : (reason == .failed ? .failed : .finished)
        stream.queue?.streamEnded(stream, reason: itemReason, at: engine.now, state: state)
        state.post(.streamEnded(id: stream.id, reason: reason))
        // By handle: no key path is built or matched.
        engine.undefine(stream.gain)
        engine.undefine(stream.transport)
        engine.undefine(stream.pan)
        // The decoder (its ring, soxr state, file) is freed off this thread.
        retire(.object(stream))
        state.streams.remove(at: index)
        publishedHandlesStale = true
      }
      index -= 1
    }
  }
}

/// A decoder `prepare` started, until its stream joins the mix. Its thread holds it until
/// cancelled, so a stream that never joins (its command refused, a batch refused, a request
/// dropped before it ran) must stop it: that happens when the last reference to the prepared
/// stream goes (off the render thread: a committed command is let go of on the recovery thread).
final class UnstartedDecoder: @unchecked Sendable {
  let decoder: StreamDecoder
  /// Set on the render thread when the stream joins the mix.
  var joined = false

  init(_ decoder: StreamDecoder) { self.decoder = decoder }

  deinit { if !joined { decoder.cancel() } }
}

func realtimeSeconds() -> Double {
  var time = timespec()
  clock_gettime(CLOCK_REALTIME, &time)
  return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// A stream made ready off the render thread (`Player.prepare`): its file open, its decoder
/// prefilled, its properties, its first ramp and its place in the mix built. Joining the mix
/// allocates nothing.
public final class PreparedStream: RenderCommand, @unchecked Sendable {
  public let id: String
  public let path: String
  private let unstarted: UnstartedDecoder
  private let stream: PlayingStream
  /// The fade-in (on the gain) or the declick ramp (on the transport level), if any.
  private let ramp: (animation: PreparedAnimation, on: PropertyHandle)?
  private let fadesIn: Bool
  /// Set when it joined: the fade-in's id and begin sample (nil: none).
  public private(set) var fadeIn: (id: UInt64, sample: Int64)?

  init(
    id: String, path: String, unstarted: UnstartedDecoder, stream: PlayingStream,
    ramp: (animation: PreparedAnimation, on: PropertyHandle)?, fadesIn: Bool
  ) {
    self.id = id
    self.path = path
    self.unstarted = unstarted
    self.stream = stream
    self.ramp = ramp
    self.fadesIn = fadesIn
  }

  public func commit(_ state: RenderState) { _ = join(state) }

  /// Joins the mix (render thread), or fails if a stream `id` plays already.
  public func callAsFunction(_ state: RenderState) -> Result<Void, EngineError> { join(state) }

  private func join(_ state: RenderState) -> Result<Void, EngineError> {
    if state.contains(stream: id) {
      unstarted.decoder.cancel()
      return .failure(EngineError(.invalidValue, field: "stream", "a stream '\(id)' is already playing"))
    }
    let engine = state.engine
    engine.define(stream.gain)
    engine.define(stream.transport)
    engine.define(stream.pan)
    if let ramp {
      do throws(EngineError) {
        let id = try engine.commit(ramp.animation, to: ramp.on)
        if fadesIn { fadeIn = (id, engine.now) }
      } catch {
        engine.undefine(stream.gain)
        engine.undefine(stream.transport)
        engine.undefine(stream.pan)
        unstarted.decoder.cancel()
        return .failure(error)
      }
    }
    state.streams.append(stream)
    unstarted.joined = true
    state.post(.streamStarted(id: id, path: path))
    if let queue = stream.queue { state.post(.itemStarted(stream: id, item: queue.item, sample: engine.now)) }
    return .success(())
  }
}

/// A pause, resume or stop made ready off the render thread (`Player.prepareTransport`): a ramp
/// prepared for each stream it may act on, and room for what it did.
public final class PreparedTransport: RenderCommand, @unchecked Sendable {
  public enum Kind: Sendable {
    case pause, resume, stop
  }

  public let kind: Kind
  /// The stream (nil: every stream).
  public let stream: String?
  private let transaction: Transaction
  private let sampleRate: Double
  /// One ramp per stream it may act on (none if the transaction was refused: the streams then
  /// change state without one).
  private let ramps: ContiguousArray<PreparedAnimation>
  private let refused: Bool
  /// The streams it acted on, with their ramps' ids (written by the commit).
  public private(set) var changes: ContiguousArray<TransportChange> = []

  init(_ kind: Kind, _ stream: String?, transaction: Transaction, sampleRate: Double, capacity: Int) {
    self.kind = kind
    self.stream = stream
    self.transaction = transaction
    self.sampleRate = sampleRate
    var ramps = ContiguousArray<PreparedAnimation>()
    var refused = false
    do throws(EngineError) {
      for _ in 0..<capacity {
        guard
          let ramp = try PreparedAnimation.implicitAction(
            to: kind == .resume ? 1 : 0, on: "", transaction: transaction, sampleRate: sampleRate)
        else { break }
        ramps.append(ramp)
      }
    } catch {
      refused = true
    }
    self.ramps = ramps
    self.refused = refused
    changes.reserveCapacity(capacity)
  }

  /// Changes the streams it names (render thread). Allocation-free for as many streams as ramps
  /// were prepared.
  public func commit(_ state: RenderState) {
    let level: Double = kind == .resume ? 1 : 0
    var used = 0
    var index = 0
    while index < state.streams.count {
      let playing = state.streams[index]
      index += 1
      guard stream == nil || playing.id == stream else { continue }
      switch kind {
      case .pause: guard !playing.stopping && !playing.paused else { continue }
      case .resume: guard playing.paused && !playing.stopping else { continue }
      case .stop: guard !playing.stopping else { continue }
      }
      var animation: UInt64?
      if !refused {
        if used < ramps.count {
          animation = (try? state.engine.set(playing.transport, to: level, action: ramps[used])) ?? nil
          used += 1
        } else {
          // More streams than ramps prepared: one more, made here.
          animation = (try? state.engine.set(playing.transport.keyPath, to: level, transaction: transaction)) ?? nil
        }
      }
      switch kind {
      case .pause: playing.paused = true
      case .resume: playing.paused = false
      case .stop: playing.stopping = true
      }
      changes.append(TransportChange(stream: playing.id, animation: animation))
    }
  }
}

func monotonicSeconds() -> Double {
  var time = timespec()
  clock_gettime(CLOCK_MONOTONIC, &time)
  return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
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
