import CLinux
import Glibc
import RampEngine
import RampSystem
import Synchronization

/// The render side of a `Player`: the render thread's loop and everything only it touches (the
/// device, the schedule of commands waiting for their sample, the clocks that pace it, the
/// render state with its engine and streams). Owned by the render thread from `Player.start` to
/// the end of `Player.shutdown` (an offline player's: by whoever calls `renderOffline`); the
/// control side touches it only before the thread starts and after it has finished. What
/// crosses threads goes through `link`.
///
/// Each period it takes the commands the control side queued, publishes the values others
/// observe, renders the block (`RenderLoop+Mix.swift`) split at the samples of scheduled
/// commands, writes it, lets finished streams go and rings whoever waits for events. How it waits
/// (for the clock, the device, the decoders, or idle) is in `RenderLoop+Pacing.swift`.
final class RenderLoop: PulledRender, @unchecked Sendable {
  let link: RenderLink
  let state: RenderState
  let output: NegotiatedOutput
  let configuration: OutputConfiguration
  /// The declick ramp in frames: also how an underrun ramps out and back in.
  let declickFrames: Int
  /// Frames a starved stream's ring must hold again before it ramps back in.
  let refillFrames: Int
  /// What a rewind needs to render again what the device holds (`Rewind.swift`).
  let rewindHistory: RewindHistory
  /// The master's true-peak limiter (nil: the mix is only clamped), and the frames it delays
  /// what is heard by: sample `s` of the engine goes out as the output's sample `s + latency`.
  let limiter: TruePeakLimiter?
  let outputLatency: Int
  /// The sample at which a command that changes what is heard last ran: a decision point of the
  /// mix (`renderSpan`), as the decision-grid's samples are.
  var changedAt: Int64 = -1
  /// The last sample at which the limiter lowered the gain (`limiterEngaged`).
  var limiterLastLowered: Int64?
  /// The output written to (nil while it is lost and reopened): an ALSA device, the fallback, or
  /// an offline player's sink (``SinkOutput``). What it can do it says in its `capabilities`.
  private(set) var device: (any AudioOutput)?
  /// `device` is the fallback, played into while the configured device is waited for.
  var onFallback = false
  /// The configured device has not yet played since start (`link.waiting`, the render thread's copy).
  var waiting = false
  /// An offline player: no render thread, no recovery thread; its owner drives each block
  /// (`renderOffline`, or its output's pulls).
  let offline: Bool
  /// The block the render step renders into.
  let blockBuffers: RenderBuffers
  /// What the outputs' libraries need of the render thread before it delivers anything (ALSA:
  /// its messages dropped there, where putting one in words would allocate and lock).
  let prepareThread: @Sendable () -> Void
  /// When and at which sample the render thread last woke to render a batch of blocks (when
  /// published values become due).
  var batchStart: (nanoseconds: Int64, sample: Int64)?
  /// A command ran or a stream left since the published values' handles were looked up.
  var publishedHandlesStale = true
  /// Commands waiting for their sample, soonest first.
  var scheduled: CommandSchedule
  /// Blocks of silence written in a row while nothing is left to render (`idleIfNothingToRender`).
  var silentBlocksWritten = 0
  /// The render step runs with allocations guarded (`rampd_guard_this_thread`), on the render
  /// thread or on a pulled output's.
  var guarded = false
  /// A live pulled step: the output's thread hands the step home after this one (to idle).
  var pullHandsBack = false
  /// A live pulled step: the output's thread was made ready (denormals flushed) since the step
  /// was lent.
  var pullThreadPrepared = false
  /// `configuration.reopenAfter` in frames (nil: never), the fallback's, and the frames written to
  /// the device since it was opened.
  let reopenAfterFrames: Int?
  let fallbackReopenAfterFrames: Int?
  var framesSinceOpen = 0
  /// Keeps time while there is no device to block on (lost, or without a clock and idle).
  var idleClock: ClockPacer
  /// Underruns counted by devices since lost, so the total survives a reconnection.
  var underrunsOfLostDevices = 0
  /// Which sample is heard when (its copy for other threads is `link.heard`).
  var heardClock: HeardClock
  /// Nanoseconds from waking up idle to the first sample heard, as last measured (one period
  /// until measured; `link.measuredResume` adds how late the wake-up came, for status).
  var resumeNanoseconds: Int64
  /// Nanoseconds a device let go of while idle takes to open again, as last measured (an
  /// estimate until then).
  var reopenNanoseconds: Int64 = 50_000_000
  /// When the render thread last woke up idle, the sample it resumed at, and how late it woke
  /// after the command that ended the idle, until the device says when that sample is heard.
  var resumed: (nanoseconds: Int64, sample: Int64, wakeLateness: Int64)?
  /// The device's underruns at the last observation: one more means the device stopped and
  /// started again.
  var underrunsObserved = 0
  /// With device pacing on a device that rewinds: frames the device had room for when last asked,
  /// less those written since. A lower bound (the device only makes room as it plays), so the
  /// blocks of one wake-up are written without asking the device before each.
  var roomAhead = 0
  /// Whether the device is asked where it plays after the next write: after the first block of a
  /// wake-up (the mapping needs no more: the blocks after it follow on the sample clock), and
  /// after every block of a device whose write blocks.
  var observeAfterWrite = true

  init(
    link: RenderLink, state: RenderState, device: (any AudioOutput)?, offline: Bool = false,
    output: NegotiatedOutput, configuration: OutputConfiguration, fallback: OutputConfiguration? = nil,
    waiting: Bool = false, declickFrames: Int, rewindHistory: RewindHistory, scheduledCapacity: Int,
    prepareThread: @escaping @Sendable () -> Void = {}
  ) {
    self.prepareThread = prepareThread
    limiter = configuration.limiter.limiter(
      rate: output.rate, channels: output.channels, checkpoints: rewindHistory.capacity)
    outputLatency = limiter?.latencyFrames ?? 0
    self.link = link
    self.state = state
    self.device = device
    self.offline = offline
    self.output = output
    self.configuration = configuration
    self.declickFrames = declickFrames
    refillFrames = declickFrames + 4 * output.periodFrames
    self.rewindHistory = rewindHistory
    let rate = Double(output.rate)
    reopenAfterFrames = configuration.reopenAfter.map { max(Int(($0 * rate).rounded()), 1) }
    fallbackReopenAfterFrames = fallback?.reopenAfter.map { max(Int(($0 * rate).rounded()), 1) }
    self.waiting = waiting
    onFallback = waiting && device != nil
    idleClock = ClockPacer(rate: output.rate)
    heardClock = HeardClock(rate: output.rate)
    heardClock.boundsDrift = device?.capabilities.boundsHeardDrift ?? false
    resumeNanoseconds = Int64(output.periodFrames) * 1_000_000_000 / Int64(output.rate)
    scheduled = CommandSchedule(capacity: max(scheduledCapacity, 16))
    blockBuffers = RenderBuffers(frames: output.periodFrames, channels: output.channels)
  }

  deinit { blockBuffers.deallocate() }

  /// Real time for the render thread where the process may have it without privilege: up to its
  /// RLIMIT_RTPRIO (systemd's LimitRTPRIO=), capped at 50 to stay below the kernel's own
  /// threads. Without that limit (or when refused) it stays at normal priority; the limit and the
  /// kernel's answer are kept for `status` to say why.
  func raisePriority() {
    var limit = rlimit()
    guard getrlimit(__rlimit_resource_t(__RLIMIT_RTPRIO.rawValue), &limit) == 0 else {
      link.realtimeError.store(errno, ordering: .relaxed)
      return
    }
    link.realtimeLimit.store(limit.rlim_cur == rlim_t.max ? Int.max : Int(limit.rlim_cur), ordering: .relaxed)
    guard limit.rlim_cur > 0 else { return }
    let wanted = Int32(min(limit.rlim_cur, 50))
    // Never lower a thread already in real time (PipeWire's own module may have raised it).
    var current = sched_param()
    let policy = sched_getscheduler(0) & ~0x4000_0000
    if (policy == SCHED_FIFO || policy == SCHED_RR) && sched_getparam(0, &current) == 0
      && current.sched_priority >= wanted
    {
      return
    }
    // The system call itself, for the calling thread: pthread_setschedparam takes the thread's lock.
    var parameters = sched_param(sched_priority: wanted)
    let refused = sched_setscheduler(0, SCHED_FIFO, &parameters) == 0 ? 0 : errno
    link.realtimeError.store(refused, ordering: .relaxed)
  }

  /// The render thread's body, from `Player.start` until `running` goes false.
  func run() {
    nameThisThread("rampd-render")
    prepareThread()
    flushSubnormalsOnThisThread()
    raisePriority()
    link.renderThread.store(currentThreadID(), ordering: .releasing)
    let buffers = blockBuffers
    // Where allocations are guarded (a debug build, the tests), one from here on traps.
    guarded = true
    rampd_guard_this_thread(true)
    defer {
      rampd_guard_this_thread(false)
      guarded = false
      device?.drain()
      // Closing finishes what the device writes (the file plugin fixes its WAV header here).
      device?.close()
      // The decoders' threads end with the streams.
      for stream in state.streams { stream.cancelDecoders() }
      link.finished.store(true, ordering: .releasing)
    }
    var driver = DeviceBlocks()
    while link.running.load(ordering: .acquiring) {
      // A pulled output runs the step on its own thread until it hands it back
      // (`RenderLoop+Pulled.swift`).
      if device?.capabilities.delivery == .pull {
        playPulled(buffers)
        continue
      }
      // A live block cannot fail: a device error is recovered from (`writeOrKeepTime`).
      try? step(&driver, buffers)
    }
  }

  /// One block, whichever drives it: what comes before it (the wait for the device or the clock,
  /// the commands, the decoders) and where it goes are `driver`'s; the rest is the same live and
  /// offline, so a render is the live output, sample for sample.
  func step<Driver: BlockDriver>(_ driver: inout Driver, _ buffers: RenderBuffers) throws(AudioError) {
    let due = driver.beforeBlock(self, buffers)
    publishValues(due: due)
    beginRewindableBlock()
    renderScheduled(buffers)
    // Published before the write (with device pacing, the wait for the device), so commands
    // taken meanwhile count from here.
    link.published.store(state.engine.now, ordering: .releasing)
    try driver.deliver(self, buffers)
    endRewindableBlock()
    link.blockCount.add(1, ordering: .relaxed)
    finishStreams()
    flushEvents()
    driver.afterBlock(self)
  }

  /// Renders one block of an offline player into its output, on the calling thread (which is its
  /// render thread): the live loop's step, driven by the sink (`SinkBlocks`). Before the block it
  /// waits for every stream to have its audio (``waitForEveryStream(frames:)``), so the render does
  /// not depend on how fast the decoders run. The caller takes the events between blocks.
  public func renderOffline() throws(AudioError) {
    guard offline, device?.capabilities.delivery == .push else {
      throw AudioError(.invalidParameter, "renderOffline needs an offline player whose output is pushed")
    }
    var virtual = SinkBlocks()
    try step(&virtual, blockBuffers)
  }

  /// The render step of a pulled output (``PulledRender``), on the thread it asks from: the
  /// buffer rendered a block at a time (blocks of at most a period, split at the scheduled
  /// commands' samples as the pushed render's are), so the samples are the pushed render's, at
  /// any number of frames per pull. Allocation-free.
  /// Live, only while the render loop lends its step to the output (``PullHandOver``), silence
  /// otherwise.
  func renderPulled(into buffer: UnsafeMutablePointer<Float>, frames: Int, timing: PullTiming?) throws(AudioError) {
    guard offline else {
      renderPulledLive(into: buffer, frames: frames, timing: timing)
      return
    }
    try renderPulledBlocks(into: buffer, frames: frames, timing: timing)
  }

  func renderPulledBlocks(
    into buffer: UnsafeMutablePointer<Float>, frames: Int, timing: PullTiming?
  ) throws(AudioError) {
    var offset = 0
    while offset < frames {
      // Mixed straight into the output's buffer: no block of the loop's own to copy from.
      let block = RenderBuffers(
        prefixOf: blockBuffers, frames: frames - offset, mixingInto: buffer + offset * output.channels)
      var driver = PulledBlocks(
        destination: buffer + offset * output.channels, offset: offset, timing: timing,
        last: offset + block.frames == frames)
      try step(&driver, block)
      offset += block.frames
    }
  }

  /// After a pulled buffer is rendered: the output's bookkeeping as after a pushed write (frames
  /// since it opened, its underruns, whether it has a clock), and the heard clock fed from the
  /// timing it handed over.
  func pulledDelivered(_ timing: PullTiming?) {
    guard let device else { return }
    let capabilities = device.capabilities
    link.noClock.store(capabilities.clock == .none, ordering: .relaxed)
    if device.underruns != underrunsObserved || timing?.discontinuity == true {
      underrunsObserved = device.underruns
      heardClock.restart()
    }
    link.underrunCount.store(underrunsOfLostDevices + device.underruns, ordering: .relaxed)
    guard let timing else { return }
    observeHeard((timing.delay, timing.nanoseconds))
  }

  /// Takes every command submitted so far, not a block's share (none may land late), on an
  /// offline player: before each block, and between blocks for a caller that submits more than
  /// the command queue holds before the next one.
  func takeEveryCommand() {
    repeat {
      takeCommands()
    } while link.commands.freeSlots < link.commands.capacity && link.events.freeSlots > link.eventReserve
    flushEvents()
  }

  /// Runs `body` with the render state between blocks of an offline player (whose caller is its
  /// render thread): what plays, what is in flight.
  func inspectOffline<T>(_ body: (RenderState) throws -> T) rethrows -> T {
    precondition(offline, "only an offline player's state can be inspected")
    return try body(state)
  }

  /// Ends an offline player: its streams' decoders stop, what waits to run is dropped.
  func finishOffline() {
    for stream in state.streams { stream.cancelDecoders() }
    link.running.store(false, ordering: .releasing)
    discardPending()
  }

  /// Drops what waits to run (a scheduled play's decoder, its thread) and what was retired:
  /// once the render thread has finished, or offline.
  func discardPending() {
    scheduled.removeAll()
    while link.commands.pop() != nil {}
    link.reapRetired()
  }

  /// Runs the queued commands now, on the calling thread: for tests that drive `renderBlock`
  /// themselves instead of starting the render thread.
  func applyPendingCommands() {
    while let command = link.commands.pop() { run(command) }
  }

  /// Runs a command's body. It may define or undefine key paths, so the published values'
  /// handles are looked up again before the next block.
  func run(_ command: PlayerCommand) {
    let irreversible = state.irreversible
    if command.changesSound { changedAt = state.engine.now }
    switch command.work {
    case .command(let prepared): prepared.commit(state)
    case .closure(let body):
      // A test's closure may allocate.
      if guarded { rampd_guard_this_thread(false) }
      body(state)
      if guarded { rampd_guard_this_thread(true) }
    }
    // What it ended is reported now, so the next command finds the engine's room to report
    // what it ends (`completionCapacity`) empty again.
    drainCompletions()
    publishedHandlesStale = true
    retire(.command(command))
    // A query changed nothing that rendering again from an earlier sample would undo or post
    // twice (its reply is not posted again): a rewind may go back past it.
    if !command.changesSound { state.irreversible = irreversible }
  }

  /// Hands `object` to the recovery thread, which frees it. Only a full queue (thousands retired
  /// in one block) lets go of it here.
  func retire(_ object: Retired) { state.retire(object) }

  /// True while a stream's ring holds less than a block (tests pace themselves with it).
  func streamsBehind(frames: Int) -> Bool {
    firstDecoderBehind(frames: frames, playingOnly: false) != nil
  }

  /// Writes one rendered block to the device, as the render loop does (and reads where the
  /// device is, as it does after a write).
  func writeToDevice(_ mix: UnsafePointer<Float>, frames: Int) throws(AudioError) {
    guard let device else { throw AudioError(.device, "no device") }
    guard device.writeBlock(mix, frames: frames, clamped: true) else { throw device.failure }
    observeHeard(device)
  }

  /// When the block about to be rendered becomes `latest` for the published values (monotonic
  /// nanoseconds): the blocks of one wake-up (`waited`: the first of them) one period apart, from
  /// the wake-up on. A writer that never waits, always behind, starts a batch every buffer.
  func dueOfBlock(waited: Bool, on device: any AudioOutput) -> Int64 {
    let buffer = Int64(device.negotiated.bufferFrames)
    if waited || state.engine.now - (batchStart?.sample ?? Int64.min / 2) > buffer {
      batchStart = (monotonicNanoseconds(), state.engine.now)
    }
    guard let batchStart else { return 0 }
    return batchStart.nanoseconds + (state.engine.now - batchStart.sample) * 1_000_000_000 / Int64(output.rate)
  }

  /// Rings the doorbell once if anything was posted since the last time.
  func flushEvents() {
    if state.retiredInBlock {
      state.retiredInBlock = false
      link.recoveryBell.ring()
    }
    state.announceLostEvents()
    guard state.posted else { return }
    state.posted = false
    link.doorbell.ring()
  }

  /// Stores each published key path's value at the block's first sample, due at `due`
  /// (monotonic nanoseconds). Allocation-free.
  func publishValues(due: Int64) {
    // Nothing published and nothing to look up: the usual block, which need not touch the engine.
    if !publishedHandlesStale && state.published.isEmpty { return }
    let engine = state.engine
    // Key paths are looked up (hashed) only after something may have defined or undefined one.
    let lookUp = publishedHandlesStale
    publishedHandlesStale = false
    if lookUp { switchMetering() }
    var index = 0
    while index < state.published.count {
      let published = state.published[index]
      index += 1
      var value = Double.nan
      if published.readsLimiter {
        published.store(limiter?.reductionDecibels ?? .nan, sample: engine.now, due: due)
        continue
      }
      if let level = published.level {
        if lookUp {
          let meter = level.stream.map { state.stream($0)?.level } ?? state.masterLevel
          published.meter = meter.map { Unmanaged.passUnretained($0) }
        }
        if let meter = published.meter?.takeUnretainedValue() {
          value = level.reading == .peak ? meter.peakDecibels : meter.momentary
        }
        published.store(value, sample: engine.now, due: due)
        continue
      }
      if lookUp {
        let handle = engine.handleIfDefined(published.keyPath)
        // A property undefined since (its stream gone) may be held by this handle alone.
        if let old = published.handle, handle.map({ $0.isSame(as: old) }) != true { state.retire(old.object) }
        published.handle = handle
      }
      if let handle = published.handle {
        engine.render(handle, start: engine.now, count: 1, into: &value)
      }
      published.store(value, sample: engine.now, due: due)
    }
  }

  /// Meters while some level is published (what is published changes only by a command, after
  /// which every handle is looked up): before the values are read, so the first one published
  /// after the meters start is already theirs, not what they held when they last stopped.
  /// Allocation-free.
  private func switchMetering() {
    var levels = false
    var index = 0
    while index < state.published.count && !levels {
      levels = state.published[index].level != nil
      index += 1
    }
    guard levels != state.metersLevels else { return }
    state.metersLevels = levels
    link.meteringSince.store(levels ? state.engine.now : -1, ordering: .releasing)
    guard levels else { return }
    state.masterLevel.reset()
    var stream = 0
    while stream < state.streams.count {
      state.streams[stream].level.reset()
      stream += 1
    }
  }

  /// Moves submitted commands into the schedule (soonest first) or runs them now: at most
  /// `commandsPerBlock`, the rest stay queued for the next block.
  func takeCommands() {
    let now = state.engine.now
    var taken = 0
    var rewound = false
    // Half the retired queue is kept free too: what the commands end goes there, and a full
    // queue would let go of it here. The command queue first: most blocks find it empty, and
    // need not read where the other queues stand.
    while taken < Player.commandsPerBlock, !link.commands.isEmpty, link.events.freeSlots > link.eventReserve,
      link.retired.freeSlots > link.retired.capacity / 2, let command = link.commands.pop()
    {
      taken += 1
      guard let sample = command.sample, sample > now else {
        if !rewound && command.changesSound {
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
  func renderScheduled(_ buffers: RenderBuffers) {
    var offset = 0
    while offset < buffers.frames {
      let now = state.engine.now
      while let first = scheduled.firstSample, first <= now {
        run(scheduled.removeFirst())
      }
      if landSeeks(buffers.ramp) && waitsForDecoders { waitForDecisions() }
      var span = buffers.frames - offset
      if let sample = scheduled.firstSample { span = min(span, Int(sample - now)) }
      if let landing = nextSeekLanding(after: now) { span = min(span, Int(landing - now)) }
      if decisionsPending {
        // Split at the decision points too, so each is taken at its sample whatever the blocks.
        let grid = Int64(Self.decisionFrames)
        let intoGrid = Int(now % grid)
        span = min(span, Self.decisionFrames - intoGrid)
        if (intoGrid == 0 || changedAt == now) && waitsForDecoders { waitForDecisions() }
      }
      renderSpan(buffers, offset: offset, frames: span)
      offset += span
    }
  }

  /// Frames between the samples at which the mix decides what waits for a condition rather than
  /// for a sample of its own (a duck rule's trigger, hold and release; where a seek lands; when a
  /// starved stream has refilled): multiples of it on the output's clock, whatever the blocks, so
  /// that the same show renders the same samples at any block size.
  static let decisionFrames = 64

  /// Whether a decision point may decide something: a duck rule is in force, or a stream seeks,
  /// waits to refill or ramps to its pause. Otherwise blocks are not split at them.
  var decisionsPending: Bool {
    if state.ducks.count > 0 { return true }
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      if stream.pendingSeek != nil || stream.starved || stream.paused && !stream.holding { return true }
      index += 1
    }
    return false
  }

  /// Without a clock, nothing is late: the render waits for decoders rather than depend on their
  /// speed (``waitForEveryStream(frames:)``).
  var waitsForDecoders: Bool { device?.capabilities.clock == OutputCapabilities.Clock.none }

  /// At a decision point, without a clock: waits until each stream's seek asked for has landed
  /// and each starved stream has refilled (or its file ended), so that where they come back does
  /// not depend on the decoders' speed. Polled, as `waitForEveryStream` polls a seek.
  func waitForDecisions() {
    var index = 0
    while index < state.streams.count && link.running.load(ordering: .relaxed) {
      let stream = state.streams[index]
      let decoder = stream.decoder
      if decoder.hasFailed {
        index += 1
        continue
      }
      if stream.pendingSeek != nil && stream.seekRequested && decoder.seekIsPending {
        usleep(100)
        continue
      }
      if stream.starved && stream.pendingSeek == nil && !decoder.isFinished
        && decoder.ring.available < min(refillFrames * output.channels, decoder.ring.capacity)
      {
        // The decoder rings the command bell once it has them.
        if decoder.awaitSamples(min(refillFrames * output.channels, decoder.ring.capacity)) {
          _ = link.commandBell.wait(seconds: 0.1)
        }
        continue
      }
      index += 1
    }
  }

  func writeOrKeepTime(_ buffers: RenderBuffers) {
    // Why the device was lost, in words the recovery thread wrote (also a device reopened on
    // schedule that would not open again: lost like any other).
    if device == nil, let failure = link.deviceFailures.pop() {
      link.healthy.store(false, ordering: .relaxed)
      state.post(.deviceFailed(failure))
    }
    if device == nil || onFallback, let fresh = link.freshDevices.pop() { use(fresh) }
    // A pulled output takes no block: the loop lends it the step from the next block on.
    guard let device, device.capabilities.delivery == .push else {
      keepTime(frames: buffers.frames)
      return
    }
    // The mix is clamped (GainKernel.clamp): a float device takes it as it is.
    guard device.writeBlock(buffers.mix, frames: buffers.frames, clamped: true) else {
      handOverLost(device)
      return
    }
    framesSinceOpen += buffers.frames
    roomAhead = max(roomAhead - buffers.frames, 0)
    // Asked after the write: a device knows whether it has a clock once it has taken audio.
    let capabilities = device.capabilities
    link.noClock.store(capabilities.clock == .none, ordering: .relaxed)
    // Until a run of the device has been observed, after every block (a device that starts only
    // once it holds two blocks says nothing before).
    if observeAfterWrite || !heardClock.running || device.underruns != underrunsObserved { observeHeard(device) }
    devicePlays(device)
    link.underrunCount.store(underrunsOfLostDevices + device.underruns, ordering: .relaxed)
    // A device without a clock goes as fast as the streams decode; with none playing, time
    // would race (a ten-second fade over in microseconds, a core spinning): the clock keeps it.
    if capabilities.clock == .none && !streamsPlaying {
      keepTime(frames: buffers.frames)
    } else {
      idleClock.reset()
    }
    if let reopenAfter = onFallback ? fallbackReopenAfterFrames : reopenAfterFrames, framesSinceOpen >= reopenAfter {
      handOver(device, to: link.retiredDevices)
    }
  }

  /// After `device` took audio: once it has taken two buffers, a configured device waited for
  /// has arrived, a lost one recovered (not when it opens: a `file` plugin opens its file at the
  /// first write and writes it once its own buffer fills; a device reopened on schedule was
  /// never lost).
  func devicePlays(_ device: any AudioOutput) {
    // Each block: the flags first, so a device that plays as it should costs no copy of its
    // `negotiated` (a String with it) through the existential.
    guard (waiting && !onFallback) || !link.healthy.load(ordering: .relaxed) else { return }
    if framesSinceOpen >= 2 * device.negotiated.bufferFrames {
      if waiting && !onFallback {
        waiting = false
        link.waiting.store(false, ordering: .releasing)
        link.healthy.store(true, ordering: .relaxed)
        state.post(.deviceArrived(device.negotiated.device))
      } else if !link.healthy.load(ordering: .relaxed) {
        link.healthy.store(true, ordering: .relaxed)
        state.post(.deviceRecovered(device.negotiated.device))
      }
    }
  }

  /// Feeds the sample-to-time mapping what the device says right after a write: the block's
  /// last sample is heard `delay` frames later than the device's timestamp.
  func observeHeard(_ device: any AudioOutput) {
    if device.underruns != underrunsObserved {
      underrunsObserved = device.underruns
      heardClock.restart()
    }
    guard let position = device.heardPosition() else { return }
    observeHeard(position)
  }

  /// Feeds the sample-to-time mapping a position the output gave: the block's last sample is
  /// heard `delay` frames later than `nanoseconds`.
  func observeHeard(_ position: (delay: Int, nanoseconds: Int64)) {
    // The limiter's latency is part of the delay: what is written now left the mix that many
    // samples ago.
    let delay = Int64(position.delay + outputLatency)
    heardClock.observe(sample: state.engine.now - delay, at: position.nanoseconds)
    link.heard.store(heardClock, delay: delay)
    if let resumed {
      self.resumed = nil
      resumeNanoseconds = max(heardClock.nanoseconds(of: resumed.sample) - resumed.nanoseconds, 0)
      link.measuredResume.store(resumeNanoseconds + resumed.wakeLateness, ordering: .relaxed)
    }
  }

  /// Takes a device the recovery thread opened: in place of none, or of the fallback when it is
  /// the configured device (the fallback then goes to the recovery thread, which closes it).
  func use(_ fresh: HeldDevice) {
    // A fallback plays only while the configured device is waited for, and never displaces it.
    if fresh.fallback && (device != nil || !waiting) {
      retire(.object(fresh.device))
      return
    }
    if let device {
      letGo(device, lost: false)
      retire(.object(device))
    }
    device = fresh.device
    onFallback = fresh.fallback
    framesSinceOpen = 0
    roomAhead = 0
    heardClock.boundsDrift = fresh.device.capabilities.boundsHeardDrift
    link.usingFallback.store(onFallback, ordering: .relaxed)
    if !onFallback && waiting { link.usingLateDevice.store(true, ordering: .relaxed) }
  }

  /// Gives the device to the recovery thread: `deadDevices` (lost) or `retiredDevices` (healthy,
  /// reopened on schedule), to be closed and opened again, or `parkedDevices` (idle), to be
  /// closed and opened again when asked. Time follows the clock meanwhile.
  /// Hands a device that failed (a write, or a pulled output that stopped asking) to the recovery
  /// thread. Unhealthy at once, so whoever takes the event (once the recovery thread has put the
  /// failure in words) sees the device as lost. A reopened device that fails before it played
  /// was never back: no second event. The configured device while it is still waited for (it
  /// opened, and failed before it played) was never there: no event, and the wait goes on.
  func handOverLost(_ device: any AudioOutput) {
    let awaited = waiting && !onFallback
    device.announcesFailure = link.healthy.load(ordering: .relaxed) && !awaited
    if !awaited { link.healthy.store(false, ordering: .relaxed) }
    handOver(device, to: link.deadDevices)
  }

  func handOver(_ device: any AudioOutput, to queue: SPSCQueue<HeldDevice>) {
    letGo(device, lost: queue === link.deadDevices)
    _ = queue.push(HeldDevice(device: device, fallback: onFallback))
    link.recoveryBell.ring()
  }

  /// Stops writing to `device`: its underruns are kept, the clocks start afresh.
  private func letGo(_ device: any AudioOutput, lost: Bool) {
    underrunsOfLostDevices += device.underruns
    underrunsObserved = 0
    // A lost device may come back as another (an audio server restarted with another graph).
    if lost { heardClock.forgetRate() } else { heardClock.restart() }
    roomAhead = 0
    self.device = nil
    link.pullThread.store(0, ordering: .releasing)
    idleClock.reset()
    batchStart = nil
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

  /// The first `frames` frames of `buffers` (at most theirs), in the same memory but mixed into
  /// `mix` (room for as many frames: a pulled output's own buffer): a shorter block without
  /// allocating one. Never deallocated itself.
  init(prefixOf buffers: RenderBuffers, frames: Int, mixingInto mix: UnsafeMutablePointer<Float>) {
    self.frames = min(frames, buffers.frames)
    channels = buffers.channels
    self.mix = mix
    audio = buffers.audio
    gain = buffers.gain
    ramp = buffers.ramp
  }

  func deallocate() {
    mix.deallocate()
    audio.deallocate()
    gain.deallocate()
    ramp.deallocate()
  }
}
