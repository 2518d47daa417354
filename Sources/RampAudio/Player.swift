import RampEngine
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Plays files through ALSA with per-sample gain from the animation engine. A real OS thread
/// renders one period at a time: it applies queued commands, pulls each stream's decoded audio
/// from its ring, multiplies by `streams.<id>.gain` × the stream's transport ramp, sums, applies
/// `master.gain`, clamps, and writes to the device; completions and stream ends go back as
/// events, and a doorbell (an eventfd) wakes whoever waits for them.
///
/// Paced by the clock, the render thread writes blocks back to back until the buffer is full (one
/// buffer ahead of the clock), then sleeps until only the margin is left ahead
/// (`OutputConfiguration.marginTime`: by default half the buffer in whole periods, so a wake-up
/// may be that late without an underrun, and one wake-up serves the other half). A command
/// arriving meanwhile wakes it and is applied at once, to the next block, so it is heard within
/// one buffer. A device that rewinds is filled the same way, by timer (`waitForRoomTakingCommands`):
/// a command then rewinds what the device holds and is heard within the rewind margin.
///
/// Commands run on the render thread between blocks (the engine belongs to that thread); a
/// command scheduled for a sample splits the block there, so it lands on that exact sample. The
/// block rendering itself does not allocate, lock or log, nor does committing a command prepared
/// off the render thread (`RenderCommand`: `prepare`, `prepareTransport`, the setup commands of
/// SetupCommands.swift, a daemon's ticket), the only kind rampd submits.
///
/// A stream whose decoder falls behind ramps out over the audio it has left (at the declick
/// ramp's pace) rather than cut to silence, holds its place silent until its ring has refilled,
/// and ramps back in: it resumes where it stopped, late against the timeline by the gap. A seek
/// ramps out and in the same way, around the jump.
///
/// When the device fails, rendering goes on against the wall clock (animations and streams keep
/// time) while a recovery thread closes the dead device and reopens the configured one with
/// backoff; `deviceFailed` and `deviceRecovered` events say so.
///
/// The player is the control side's front: it prepares commands (opening files, compiling
/// animations) on the calling thread and queues them for the render thread, and reads what the
/// render thread publishes. The render thread's own state and loop are a `RenderLoop`, the
/// device's recovery a `DeviceRecovery`; all three share only a `RenderLink`.
public final class Player: Sendable {
  /// What the render thread works in: the rate, the channels and the block (the period) are
  /// fixed at start. The device written to may be another (``outputInUse``).
  public let output: NegotiatedOutput
  public let configuration: OutputConfiguration
  /// Played into while the configured device is waited for (``init(waitingFor:failure:fallback:declick:maxGain:scheduledCapacity:animationsPerKeyPath:eventCapacity:)``).
  public let fallback: OutputConfiguration?
  /// Why the configured device did not open at start, when it did not.
  let startFailure: String?
  /// Opens the configured device and the fallback again (the device recovery's).
  let openOutput: OutputOpener
  /// Seconds of the ramp that starts, pauses, resumes and stops a stream.
  public let declick: Double
  /// The declick ramp in frames: also how an underrun ramps out and back in.
  let declickFrames: Int
  /// The render state: prepared commands (and tests' closures) get it on the render thread; off
  /// it, only what was made to be shared (the engine's property preparation).
  let state: RenderState
  let link: RenderLink
  /// The render side: the render thread's, once started.
  let renderer: RenderLoop
  /// What a rewind needs to render again what the device holds (`Rewind.swift`).
  let rewindHistory: RewindHistory
  /// Between `start` and `shutdown`: the render and recovery threads run.
  private let started = Atomic<Bool>(false)
  /// Values published or on their way to be (`publish`), held to `publishedCapacity`.
  private let publishedCount = Atomic<Int>(0)
  public static let maximumScheduled = 4096
  /// Streams the render thread has room for without growing its tables: the most
  /// `limits.streams` allows.
  public static let streamCapacity = 256
  /// Mixer bindings (`[[mixer]]`), each a key path of its own.
  public static let mixerCapacity = 64
  /// Properties the engine has room for without growing its tables: master.gain, three per
  /// stream, and the mixer bindings' key paths.
  public static let propertyCapacity = 1 + 3 * streamCapacity + mixerCapacity
  /// Commands taken from the queue per block (per wake-up while waiting for the clock): a flood
  /// of them delays a block by no more than this many; the rest are taken at the next.
  static let commandsPerBlock = 256
  /// Events (and command tickets) the render thread may post before the control side takes them.
  public static let defaultEventCapacity = 16_384
  /// Seconds between reopen attempts: doubling from the first to the last.
  public var recoveryBackoff: (first: Double, last: Double) {
    get { backoff.withLock { $0 } }
    set { backoff.withLock { $0 = newValue } }
  }
  private let backoff = Mutex<(first: Double, last: Double)>((0.1, 2))

  /// The render thread's kernel id once it runs (tests read its `schedstat`).
  var renderThreadID: Int32 { link.renderThread.load(ordering: .acquiring) }
  /// Blocks rendered, for status and tests.
  public var blocksRendered: Int { link.blockCount.load(ordering: .relaxed) }
  /// The sample the next block starts at, published after each block: what `at` times count from.
  public var currentSample: Int64 { link.published.load(ordering: .acquiring) }
  /// Device underruns recovered so far.
  public var deviceUnderruns: Int { link.underrunCount.load(ordering: .relaxed) }
  /// False while the device is lost and being reopened.
  public var deviceIsHealthy: Bool { link.healthy.load(ordering: .relaxed) }
  /// The fallback plays (or was lost and is reopened) while the configured device is waited for.
  public var playsIntoFallback: Bool { link.usingFallback.load(ordering: .relaxed) }

  /// The wait for a configured device that did not open at start.
  public struct DeviceWait: Sendable, Equatable {
    /// The ALSA device waited for.
    public var device: String
    /// Attempts to open it so far, the one at start included.
    public var attempts: Int
    /// Seconds until the next attempt (nil: it opened, and is about to play).
    public var nextAttempt: Double?
    /// Why the last attempt failed.
    public var failure: String
  }

  /// While the configured device is waited for, how the wait goes; nil once it plays (or when
  /// it opened at start).
  public var deviceWait: DeviceWait? {
    guard link.waiting.load(ordering: .acquiring) else { return nil }
    let report = link.waitReport.withLock { $0 }
    return DeviceWait(
      device: configuration.device, attempts: max(report.attempts, 1),
      nextAttempt: report.nextAttempt.map { max($0 - monotonicSeconds(), 0) },
      failure: report.attempts == 0 ? startFailure ?? "" : report.failure)
  }

  /// False while no device has opened since start: the configured device is waited for and
  /// there is no fallback (``outputInUse`` then holds the configuration's values, no device's).
  public var hasOpenedADevice: Bool {
    fallback != nil || !link.waiting.load(ordering: .acquiring) || link.usingLateDevice.load(ordering: .relaxed)
  }

  /// The output written to now: `output`, or the configured device's once it opened after start.
  public var outputInUse: NegotiatedOutput {
    guard link.usingLateDevice.load(ordering: .relaxed), !playsIntoFallback else { return output }
    return link.waitReport.withLock { $0.opened } ?? output
  }
  /// True once the device is known to have no clock (device pacing over ALSA's `null`, a `file`
  /// plugin over it): its samples go as fast as it takes them, not at the wall clock's pace.
  public var deviceHasNoClock: Bool { link.noClock.load(ordering: .relaxed) }
  /// The render thread's real-time priority, or 0 when it runs at normal priority.
  public var realtimePriority: Int { realtime.priority }
  /// Whether the render thread runs in real time (as the kernel says now, whoever set it), and
  /// what it asked for and was answered.
  /// With a pulled output, the thread that renders is the output's: its scheduling is said.
  public var realtime: RealtimeScheduling {
    let pulling = link.pullThread.load(ordering: .acquiring)
    return RealtimeScheduling(
      thread: pulling != 0 ? pulling : renderThreadID, limit: link.realtimeLimit.load(ordering: .relaxed),
      error: link.realtimeError.load(ordering: .relaxed))
  }
  /// Renders to a sink on a virtual clock (``init(sink:rate:channels:blockFrames:declick:maxGain:scheduledCapacity:animationsPerKeyPath:eventCapacity:)``).
  public var isOffline: Bool { renderer.offline }

  /// Opens an ALSA output.
  public static let alsaOpener: OutputOpener = { configuration throws(AudioError) in
    try AlsaPCMOutput(configuration)
  }

  /// What a player opens unless told otherwise: the native PipeWire output for `pipewire-native`,
  /// and for `default` where ALSA's default is PipeWire's plugin (``PipeWireOutput/servesDefault()``);
  /// ALSA otherwise (`pipewire` names ALSA's plugin).
  public static let outputOpener: OutputOpener = { configuration throws(AudioError) in
    if configuration.device == PipeWireOutput.deviceName
      || configuration.device == "default" && PipeWireOutput.servesDefault()
    {
      return try PipeWireOutput(configuration)
    }
    return try AlsaPCMOutput(configuration)
  }

  /// `scheduledCapacity`: how many commands may wait for their sample at once (reserved here, so
  /// the render thread never grows the schedule). `animationsPerKeyPath`: reserved per property
  /// for the same reason.
  public convenience init(
    output configuration: OutputConfiguration, declick: Double = 0.010, maxGain: Double = 1,
    scheduledCapacity: Int = Player.maximumScheduled, animationsPerKeyPath: Int = 64,
    eventCapacity: Int = Player.defaultEventCapacity, opener: @escaping OutputOpener = Player.outputOpener
  ) throws {
    let device = try opener(configuration)
    try self.init(
      device: device, negotiated: device.negotiated, configuration: configuration, opener: opener,
      declick: declick, maxGain: maxGain, scheduledCapacity: scheduledCapacity,
      animationsPerKeyPath: animationsPerKeyPath, eventCapacity: eventCapacity)
  }

  /// A player whose configured device did not open at start (`failure` says why): the recovery
  /// thread opens it with backoff until it does, as it reopens a lost device, and the player
  /// plays there from then on. Meanwhile it plays into `fallback` (opened here; what it cannot
  /// open throws), or, without one, keeps time with no output, as while a device is lost. The
  /// rate and channels are the fallback's, or the configuration's: a device that then opens at
  /// others is refused, and ``deviceWait`` says so.
  public convenience init(
    waitingFor configuration: OutputConfiguration, failure: any Error, fallback: OutputConfiguration?,
    declick: Double = 0.010, maxGain: Double = 1, scheduledCapacity: Int = Player.maximumScheduled,
    animationsPerKeyPath: Int = 64, eventCapacity: Int = Player.defaultEventCapacity,
    opener: @escaping OutputOpener = Player.outputOpener
  ) throws {
    try configuration.validate()
    let device = try fallback.map { configuration throws(AudioError) in try opener(configuration) }
    try self.init(
      device: device, negotiated: device?.negotiated ?? Self.unopened(configuration),
      configuration: configuration, opener: opener, fallback: fallback, startFailure: "\(failure)", declick: declick,
      maxGain: maxGain, scheduledCapacity: scheduledCapacity, animationsPerKeyPath: animationsPerKeyPath,
      eventCapacity: eventCapacity)
  }

  /// What the render thread works in when no device opened: the configuration's values, paced
  /// by the device that will come (most do their own).
  static func unopened(_ configuration: OutputConfiguration) -> NegotiatedOutput {
    let rate = Double(configuration.sampleRate)
    return NegotiatedOutput(
      device: configuration.device, format: configuration.format == .auto ? .float32 : configuration.format,
      rate: configuration.sampleRate, channels: configuration.channels,
      periodFrames: max(Int((configuration.periodTime * rate).rounded()), 1),
      bufferFrames: max(Int((configuration.bufferTime * rate).rounded()), 2),
      pacing: configuration.pacing == .clock ? .clock : .device, kind: .other)
  }

  /// A player whose blocks go to `sink`, `blockFrames` at a time, on a virtual clock: no render
  /// thread, no pacing, no device to recover. Whoever owns it is its render thread and calls
  /// ``renderOffline()`` for each block; commands, streams and the mix are the live player's own.
  public convenience init(
    sink: any BlockSink, rate: Int, channels: Int, blockFrames: Int, declick: Double = 0.010, maxGain: Double = 1,
    limiter: LimiterSettings = LimiterSettings(enabled: false), scheduledCapacity: Int = Player.maximumScheduled,
    animationsPerKeyPath: Int = 64,
    eventCapacity: Int = Player.defaultEventCapacity
  ) throws {
    try self.init(
      offline: SinkOutput(sink: sink, rate: rate, channels: channels, blockFrames: blockFrames), declick: declick,
      maxGain: maxGain, limiter: limiter, scheduledCapacity: scheduledCapacity,
      animationsPerKeyPath: animationsPerKeyPath, eventCapacity: eventCapacity)
  }

  /// A player that renders into `output` on a virtual clock, a block of its period at a time: no
  /// render thread, no pacing, no device to recover. Whoever owns it is its render thread: it
  /// calls ``renderOffline()`` for each block of an output that is pushed, or the output's
  /// ``SinkOutput/pull(frames:)`` for the frames it wants of one that is pulled.
  public convenience init(
    offline output: SinkOutput, declick: Double = 0.010, maxGain: Double = 1,
    limiter: LimiterSettings = LimiterSettings(enabled: false), scheduledCapacity: Int = Player.maximumScheduled,
    animationsPerKeyPath: Int = 64, eventCapacity: Int = Player.defaultEventCapacity
  ) throws {
    let negotiated = output.negotiated
    let blockTime = Double(negotiated.periodFrames) / Double(negotiated.rate)
    var configuration = OutputConfiguration(
      device: negotiated.device, sampleRate: negotiated.rate, channels: negotiated.channels, format: .float32,
      periodTime: blockTime, bufferTime: blockTime, pacing: .device)
    configuration.limiter = limiter
    try self.init(
      device: output, offline: true, negotiated: negotiated, configuration: configuration, opener: Self.alsaOpener,
      declick: declick, maxGain: maxGain, scheduledCapacity: scheduledCapacity,
      animationsPerKeyPath: animationsPerKeyPath, eventCapacity: eventCapacity)
    // The sink's first sample is the show's first: what the limiter's delay line holds before it
    // is not written (its owner renders on until the sink has the show's last sample).
    output.skipFrames = renderer.outputLatency
    link.running.store(true, ordering: .releasing)
    _ = output.startPulling(renderer)
  }

  private init(
    device: (any AudioOutput)?, offline: Bool = false, negotiated: NegotiatedOutput,
    configuration: OutputConfiguration, opener: @escaping OutputOpener, fallback: OutputConfiguration? = nil,
    startFailure: String? = nil,
    declick: Double, maxGain: Double, scheduledCapacity: Int, animationsPerKeyPath: Int, eventCapacity: Int
  ) throws {
    link = try RenderLink(eventCapacity: eventCapacity)
    self.configuration = configuration
    self.fallback = fallback
    self.startFailure = startFailure
    openOutput = opener
    let waiting = startFailure != nil
    link.waiting.store(waiting, ordering: .releasing)
    link.usingFallback.store(waiting && device != nil, ordering: .relaxed)
    output = negotiated
    self.declick = declick
    declickFrames = max(Int((declick * Double(negotiated.rate)).rounded()), 1)
    rewindHistory = RewindHistory(
      enabled: device?.capabilities.mayRewind ?? false, blockFrames: negotiated.periodFrames,
      bufferFrames: negotiated.bufferFrames, channels: negotiated.channels)
    let engine = try AnimationEngine(
      sampleRate: Double(output.rate), maxBlockSize: max(output.periodFrames, 64),
      maxAnimationsPerKeyPath: animationsPerKeyPath, propertyCapacity: Self.propertyCapacity)
    state = try RenderState(
      engine: engine, sampleRate: output.rate, channels: output.channels, maxGain: maxGain, events: link.events,
      retired: link.retired)
    renderer = RenderLoop(
      link: link, state: state, device: device, offline: offline, output: negotiated, configuration: configuration,
      fallback: fallback, waiting: waiting, declickFrames: declickFrames, rewindHistory: rewindHistory,
      scheduledCapacity: scheduledCapacity, prepareThread: { AlsaMessages.quietOnThisThread() })
  }

  /// Starts the render thread (and the thread that reopens a lost device).
  public func start() {
    guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
      return
    }
    link.running.store(true, ordering: .releasing)
    let renderer = renderer
    let recovery = DeviceRecovery(
      link: link, configuration: configuration, fallback: fallback, output: output, open: openOutput,
      recoveryBackoff: recoveryBackoff, startFailure: startFailure)
    startThread(named: "rampd-recovery") { recovery.run() }
    startThread(named: "rampd-render") { renderer.run() }
  }

  /// Stops rendering after the current block and waits for the threads; the device is drained.
  public func shutdown() {
    guard started.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged else {
      return
    }
    link.running.store(false, ordering: .releasing)
    link.commandBell.ring()
    link.recoveryBell.ring()
    link.pull.bell.ring()
    while !link.finished.load(ordering: .acquiring) || !link.recoveryFinished.load(ordering: .acquiring) {
      usleep(1_000)
    }
    // Never to run now: what they hold goes with them (a scheduled play's decoder, its thread).
    renderer.discardPending()
  }

  /// Runs `body` on the render thread: at output sample `sample` exactly (the block is split
  /// there), or before the next block when nil or already past. False when the queue is full.
  /// `wake` false leaves a render thread that waits for the clock asleep: the command still lands
  /// on the next block's first sample, but whoever waits for its outcome waits for that block (on
  /// a device that rewinds the render thread is woken anyway: the command is then heard now).
  ///
  /// For tests only: a closure may allocate or free on the render thread, which rampd's own
  /// commands never do (they are prepared, and submitted with `submit`).
  @discardableResult
  func perform(
    at sample: Int64? = nil, wake: Bool = true, _ body: @escaping @Sendable (RenderState) -> Void
  ) -> Bool {
    push(PlayerCommand(sample: sample, work: .closure(body)), wake: wake)
  }

  /// Commits `command` on the render thread: at output sample `sample` exactly (the block is
  /// split there), or before the next block when nil or already past. False when the queue is
  /// full. `wake` false leaves a render thread that waits for the clock asleep: the command still
  /// lands on the next block's first sample, but whoever waits for its outcome waits for that
  /// block (on a device that rewinds the render thread is woken anyway: the command is then heard
  /// now).
  @discardableResult
  public func submit(_ command: any RenderCommand, at sample: Int64? = nil, wake: Bool = true) -> Bool {
    push(PlayerCommand(sample: sample, work: .command(command)), wake: wake)
  }

  private func push(_ command: PlayerCommand, wake: Bool) -> Bool {
    // When a command that ends an idle spell came (a read is answered without ending it): stamped
    // before the render thread can see the command.
    if command.changesSound && link.idling.load(ordering: .sequentiallyConsistent) {
      _ = link.idleEndedAt.compareExchange(expected: 0, desired: monotonicNanoseconds(), ordering: .relaxed)
    }
    let accepted = link.submitLock.withLock { held in
      handOn(&held)
      return link.commands.push(command)
    }
    // Only a render thread waiting for the clock listens for it; one waiting for room in a device
    // that rewinds always takes a command at once (then heard within the rewind margin). More than
    // a block's share waiting wakes it too, so a flood of commands answered early is taken while
    // it waits rather than a block's share per block, which would fill the queue.
    let flooding = link.commands.freeSlots < link.commands.capacity - Self.commandsPerBlock
    let idling = link.idling.load(ordering: .sequentiallyConsistent)
    if rewindHistory.enabled || (wake || flooding) && (output.pacing == .clock || idling) {
      link.commandBell.ring()
    }
    return accepted
  }

  /// Values published at once, at most: room for them is reserved, so publishing one never grows
  /// the render thread's list. Enough for 1024 observations (`[limits]` clients × observers per
  /// client, by default 64 × 16), every mixer binding and the service's status line.
  public static let publishedCapacity = 1024 + mixerCapacity + 1

  /// Why a value was not published.
  public enum PublishRefusal: Error, Equatable {
    /// `publishedCapacity` values are published.
    case full
    /// The render thread's command queue is full: try again.
    case queueFull
  }

  /// Starts publishing `keyPath`'s presentation value at every block (NaN while it does not
  /// exist); with `wakesOnChange`, for a reader that sleeps in `PublishedValue.waitForChange`
  /// while the value holds still.
  public func publish(_ keyPath: String, wakesOnChange: Bool = false) throws(PublishRefusal) -> PublishedValue {
    let value = PublishedValue(keyPath: keyPath, wakesOnChange: wakesOnChange)
    // Held removals free their slots first.
    link.submitLock.withLock { handOn(&$0) }
    let taken = publishedCount.add(1, ordering: .relaxed).newValue
    guard taken <= Self.publishedCapacity else {
      publishedCount.subtract(1, ordering: .relaxed)
      throw .full
    }
    guard submit(PreparedPublication(value, adds: true)) else {
      publishedCount.subtract(1, ordering: .relaxed)
      throw .queueFull
    }
    value.isPublished.store(true, ordering: .relaxed)
    return value
  }

  /// Stops publishing `value`. Never waits (the caller may be the control loop): on a full
  /// command queue the removal is held and handed on with the next command or publication, as
  /// soon as the queue has room; its slot is taken, and the value still published, until then.
  public func unpublish(_ value: PublishedValue) {
    guard value.isPublished.exchange(false, ordering: .relaxed) else { return }
    let removal = PreparedPublication(value, adds: false)
    if submit(removal) {
      publishedCount.subtract(1, ordering: .relaxed)
    } else {
      link.submitLock.withLock { $0.append(removal) }
    }
  }

  /// Under the submit lock: hands on the removals `unpublish` held (`held`), as many as the
  /// queue takes, and frees their slots.
  private func handOn(_ held: inout [PreparedPublication]) {
    var handed = 0
    while let removal = held.first, link.commands.push(PlayerCommand(sample: nil, work: .command(removal))) {
      held.removeFirst()
      handed += 1
    }
    if handed > 0 { publishedCount.subtract(handed, ordering: .relaxed) }
  }

  /// Values published now (the commands that publish them may still wait in the queue).
  public var publishedValues: Int { publishedCount.load(ordering: .relaxed) }

  /// Seconds a level is measured over (its window): `streams.<id>.level.*`, `master.level.*`.
  public static let levelWindow = Double(SignalLevel.steps) / 100

  /// `value`'s latest reading once it is what an observer would read now, nil until then: a
  /// level once the meters have measured a whole window (`levelWindow` after they started from
  /// silence, when no level was published before; at once when they were running already), or
  /// as it stands when the device is stopped because nothing plays (no block comes to fill the
  /// window); any other value once it has been published. NaN: the key path has nothing to read.
  public func measuredReading(of value: PublishedValue) -> (value: Double, sample: Int64)? {
    let latest = value.latest
    guard latest.sample >= 0 else { return nil }
    guard value.level != nil, !latest.value.isNaN else { return latest }
    let since = link.meteringSince.load(ordering: .acquiring)
    guard since >= 0 else { return nil }
    let window = Int64(SignalLevel.windowFrames(sampleRate: output.rate))
    return latest.sample >= since + window || (isIdle && latest.sample >= since) ? latest : nil
  }

  /// The next event from the render thread, if any.
  public func nextEvent() -> PlayerEvent? { link.events.pop() }

  /// Blocks until the render thread posts an event or `timeout` seconds pass. True when rung.
  @discardableResult
  public func waitForEvents(timeout: Double) -> Bool {
    link.doorbell.wait(milliseconds: Int32(min(max(timeout, 0), 3600) * 1000))
  }

  /// The doorbell's read end, for an event loop that waits for events itself (readable when the
  /// render thread has posted some; whoever watches it reads the bytes, then drains `nextEvent`).
  public var eventDescriptor: Int32 { link.doorbell.descriptor }

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
    loudness: LoudnessNormalisation? = nil, admit: (_ openedPath: String) throws -> Void = { _ in }
  ) throws -> PreparedStream {
    // Offline, the render runs as fast as it can: a longer ring lets the decoder run further
    // ahead, so the two threads wait for each other a few times a minute of audio, not every second.
    let decoder = try StreamDecoder(
      path: path, outputRate: output.rate, outputChannels: output.channels,
      bufferSeconds: (isOffline ? 4 : 1) + heldSeconds, loops: loop, start: false)
    try admit(decoder.openedPath)
    if let loudness { decoder.normalise(try loudness.trim(for: decoder.openedPath)) }
    decoder.consumerBell = link.commandBell
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
          .basic(from: 0, to: 1, duration: declick), forKey: "declick", to: transport.keyPath, isInternal: true,
          sampleRate: rate, defaultDuration: 0), transport
      )
    }
    let stream = PlayingStream(
      id: id, decoder: decoder, gain: gainHandle, transport: transport, pan: pan, paused: paused,
      level: SignalLevel(sampleRate: output.rate, channels: output.channels))
    stream.queue = queue
    return PreparedStream(
      id: id, path: path, unstarted: unstarted, stream: stream, ramp: ramp, fadesIn: fadeIn > 0, trim: decoder.trim)
  }

  /// The properties and the animations per key path the render thread holds without growing its
  /// tables: what a read of them reserves. Any thread may read it.
  public var renderCapacity: (properties: Int, animationsPerKeyPath: Int) {
    (state.engine.propertyCapacity, state.engine.maxAnimationsPerKeyPath)
  }

  /// A duck rule made ready for the render thread (`DuckLayer.add`); its storage is allocated here.
  public func prepareDuck(_ rule: DuckRule) -> DuckState {
    DuckState(rule, sampleRate: Double(output.rate), channels: output.channels, maxFrames: state.ducks.maxFrames)
  }

  /// The same, as a command that adds it.
  public func prepareDuckAddition(_ rule: DuckRule) -> PreparedDuckRule { PreparedDuckRule(prepareDuck(rule)) }

  /// A property to define at `keyPath` on the render thread (unless one is defined there), its
  /// storage allocated here.
  public func prepareDefinition(_ keyPath: String, value: Double, range: ClosedRange<Double>) throws(EngineError)
    -> PreparedDefinition
  {
    PreparedDefinition(try state.engine.prepareProperty(keyPath, value: value, range: range))
  }

  /// Model values to set at once on the render thread (each clamped to its property's range).
  public func prepareLevels(_ levels: [(keyPath: String, value: Double)]) -> PreparedLevels { PreparedLevels(levels) }

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

  /// Moves stream `id` to `seconds` into its file: a ramp to silence, the jump, a ramp back. For
  /// tests (the daemon seeks in its own commands, with `seek(_:to:in:)`).
  func seek(_ id: String, to seconds: Double, at sample: Int64? = nil) {
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
    stream.seekLanding = nil
    return true
  }

  // MARK: Offline

  /// Renders one block of an offline player into its sink, on the calling thread (which is its
  /// render thread): the live loop's step (`RenderLoop.step`), driven by the sink instead of the
  /// device (`SinkBlocks`).
  public func renderOffline() throws(AudioError) { try renderer.renderOffline() }

  /// Takes every command submitted so far into an offline player, as its next block would: a
  /// caller with more commands than the queue holds (a long timeline) submits them in parts.
  public func takeCommandsOffline() { renderer.takeEveryCommand() }

  /// Runs `body` with the render state between blocks of an offline player (whose caller is its
  /// render thread): what plays, what is in flight.
  public func inspectOffline<T>(_ body: (RenderState) throws -> T) rethrows -> T {
    try renderer.inspectOffline(body)
  }

  /// Ends an offline player: its streams' decoders stop, what waits to run is dropped.
  public func finishOffline() { renderer.finishOffline() }

  // MARK: What the render thread measured

  /// True while the device is stopped because nothing plays and nothing moves: the render thread
  /// sleeps until a command comes (or a scheduled one is due) and makes no wake-up meanwhile.
  public var isIdle: Bool { link.stoppedIdle.load(ordering: .relaxed) }

  /// The master limiter, when there is one: what it keeps to, the frames it delays the output
  /// by, its gain reduction at the last block's end (dB, 0 when it leaves the signal alone) and
  /// the times it engaged after a second or more without lowering anything.
  public var limiter: LimiterReport? {
    guard let latency = renderer.limiter?.latencyFrames else { return nil }
    return LimiterReport(
      settings: configuration.limiter, latencyFrames: latency,
      reductionDecibels: Double(bitPattern: link.limiterReduction.load(ordering: .relaxed)),
      engagements: link.limiterEngagements.load(ordering: .relaxed))
  }

  /// Seconds from a command that ends the idle to its first sample heard, as last measured
  /// (nil before the first time).
  public var resumeLatency: Double? {
    let nanoseconds = link.measuredResume.load(ordering: .relaxed)
    return nanoseconds < 0 ? nil : Double(nanoseconds) / 1e9
  }

  /// Seconds a device let go of while idle (an audio server's) took to open again, as last
  /// measured (nil before the first time). A command that ends the idle is heard this plus
  /// ``resumeLatency`` after it came.
  public var reopenLatency: Double? {
    let nanoseconds = link.measuredReopen.load(ordering: .relaxed)
    return nanoseconds < 0 ? nil : Double(nanoseconds) / 1e9
  }

  /// The output sample heard at `wallClock` (seconds since the epoch, CLOCK_REALTIME): by the
  /// device's own delay and timestamps and its clock rate as measured (`status.output`'s
  /// `delay` and `drift`), kept current at every block. Before the device has said anything (or
  /// without one), the sample clock counted from the next block at the nominal rate. A time
  /// too far off to count in samples gives a sample that never comes.
  public func sample(heardAt wallClock: Double) -> Int64 {
    let monotonic = monotonicNanoseconds()
    let seconds = wallClock - realtimeSeconds()
    let frames: Double
    if let mapping = link.heard.load() {
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
    guard let mapping = link.heard.load(), mapping.delay >= 0 else { return nil }
    return (Double(mapping.delay) / Double(output.rate), (mapping.rate * 1e9 / Double(output.rate) - 1) * 1e6)
  }
}
