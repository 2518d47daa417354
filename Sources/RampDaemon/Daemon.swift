import FoundationEssentials
import Logging
import NIOCore
import NIOPosix
import RampAudio
import RampEngine
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The whole daemon: output (the configured device; while it is waited for, the embedded WAV file),
/// player, controller, mixer bindings and socket server, started and stopped together.
public final class Daemon: @unchecked Sendable {
  public let configuration: DaemonConfiguration
  public let player: Player
  public let controller: Controller
  public let server: Server
  /// Where the embedded output writes, when the configured device did not open at start.
  public let embeddedFile: String?
  private let logger: Logger
  private var mixers: [MixerDriver] = []
  /// The service manager (systemd), when it started us.
  public let notifier: ServiceNotifier
  private var watchdog: RepeatedTask?
  /// master.gain for the status line, published only for a service manager to read.
  private let master: PublishedValue?
  /// What the state file held at start.
  private let restored: PersistentState
  /// This daemon's claim on its state file (and on the embedded WAV file when it plays into one).
  private let locks: [InstanceLock]
  /// Keeps the embedded WAV file's header true while it grows.
  private let headerKeeper: WavHeaderKeeper?
  /// The control loop's thread (`ControlLoop`): it serves the socket and runs the controller.
  private let loopGroup: MultiThreadedEventLoopGroup
  /// Where the control side's blocking work runs (opening and measuring files, syncing the state
  /// file), in lanes that do not wait for each other.
  private let blocking = BlockingLanes()

  /// Decides that this daemon may run, then opens the output and prepares the server; nothing
  /// plays or listens until `start`.
  ///
  /// A daemon that may not run touches nothing: before a device, the embedded WAV file, the
  /// state file or a schedule is opened, it makes sure that no rampd listens on its socket and
  /// locks `<socket>.lock` (unless systemd passed the socket: `inheritedSocket`), and takes an
  /// exclusive lock on `<state.path>.lock`, which catches two daemons on different sockets sharing
  /// one state file.
  public init(
    configuration: DaemonConfiguration, environment: [String: String], logger: Logger, inheritedSocket: CInt? = nil
  ) throws {
    self.configuration = configuration
    self.logger = logger
    let isRoot = geteuid() == 0
    let socketPath = configuration.socket.resolvedPath(environment: environment, isRoot: isRoot)
    let statePath = configuration.state.resolvedPath(environment: environment, isRoot: isRoot)
    var locks = try InstanceLock.claim(
      socket: inheritedSocket == nil ? socketPath : nil, state: statePath, record: socketPath, logger: logger)
    var headerKeeper: WavHeaderKeeper?
    notifier = ServiceNotifier(environment: environment)
    let memoryLock = MemoryLock.lockAll()
    let memoryStatus = RealtimeStatus.memory(memoryLock)
    if memoryLock.granted {
      logger.info("memory locked")
    } else {
      logger.info("memory not locked: \(memoryStatus["message"]?.stringValue ?? "")")
    }
    var notes: JSONObject = ["embedded": false]
    var fallbackNotes: JSONObject = [:]
    let requested = configuration.output
    do {
      player = try Player(
        output: requested, declick: configuration.declick, maxGain: configuration.maxGain,
        scheduledCapacity: configuration.limits.pendingScheduled,
        animationsPerKeyPath: configuration.limits.animationsPerKeyPath,
        eventCapacity: configuration.limits.eventQueue)
      embeddedFile = nil
    } catch {
      // A configuration key at fault is the user's to fix: waiting for the device, or a WAV file
      // instead, would hide it.
      guard configuration.embeddedOutput.enabled || configuration.waitForDevice, (error as? AudioError)?.field == nil
      else { throw error }
      var embedded: OutputConfiguration?
      var file: String?
      let limit = configuration.embeddedOutput.maxDuration
      if configuration.embeddedOutput.enabled {
        let path = configuration.embeddedOutput.resolvedPath(socket: socketPath)
        embedded = try Self.embeddedOutput(requested, file: path, maxDuration: limit)
        let lock = try InstanceLock.claim(embeddedFile: path)
        locks.append(lock)
        headerKeeper = WavHeaderKeeper(descriptor: lock.descriptor, path: path)
        file = path
        let facts: JSONObject = [
          "embedded": true, "file": .string(path), "requestedDevice": .string(requested.device),
          "maxDuration": .number(limit),
        ]
        if configuration.waitForDevice { fallbackNotes = facts } else { notes = facts }
      }
      let keeps = limit > 0 ? "the last \(ConfigText.duration(limit)) at most" : "everything"
      if configuration.waitForDevice {
        // Said once: the attempts that follow are in `status` (output.waiting), not the log.
        let meanwhile =
          file.map { _ in "playing into a WAV file meanwhile (embedded output, keeps \(keeps))" }
          ?? "keeping time without output meanwhile (embedded-output.enabled = false)"
        logger.warning(
          "output device unavailable; waiting for it, retrying with backoff; \(meanwhile)",
          metadata: ["device": "\(requested.device)", "reason": "\(error)", "file": "\(file ?? "")"])
        player = try Player(
          waitingFor: requested, failure: error, fallback: embedded, declick: configuration.declick,
          maxGain: configuration.maxGain, scheduledCapacity: configuration.limits.pendingScheduled,
          animationsPerKeyPath: configuration.limits.animationsPerKeyPath,
          eventCapacity: configuration.limits.eventQueue)
      } else {
        logger.warning(
          "output device unusable; playing into a WAV file instead (embedded output)",
          metadata: [
            "device": "\(requested.device)", "reason": "\(error)", "file": "\(file ?? "")", "keeps": "\(keeps)",
          ])
        player = try Player(
          output: embedded ?? requested, declick: configuration.declick, maxGain: configuration.maxGain,
          scheduledCapacity: configuration.limits.pendingScheduled,
          animationsPerKeyPath: configuration.limits.animationsPerKeyPath,
          eventCapacity: configuration.limits.eventQueue)
      }
      embeddedFile = file
    }
    // Whichever device plays: it is the process's.
    notes["memoryLock"] = .object(memoryStatus)
    fallbackNotes["memoryLock"] = .object(memoryStatus)
    self.locks = locks
    self.headerKeeper = headerKeeper
    let store = StateStore(path: statePath, logger: logger)
    restored = store.load()
    let saver = StateSaver(store: store, logger: logger)
    // A state file from the start: the levels journal only refines one (see StateStore.journal).
    saver.update(restored)
    saver.flush()
    let connections = ConnectionCount()
    // Made last: nothing after it throws, so a daemon that may not run leaves no thread behind.
    loopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    controller = Controller(
      player: player, configuration: configuration, outputNotes: notes, fallbackNotes: fallbackNotes,
      persistence: Persistence(saver: saver, restored: restored),
      persistedKeys: ["master.gain"] + configuration.mixers.map(\.keyPath),
      connectedClients: { connections.value.load(ordering: .relaxed) },
      control: ControlLoop(eventLoop: loopGroup.next(), blocking: blocking), logger: logger)
    server = Server(path: socketPath, controller: controller, connections: connections, logger: logger)
    master = notifier.isActive ? try? player.publish("master.gain") : nil
  }

  /// ALSA's `file` plugin over `null`, paced by the clock: a real ALSA PCM that needs no card, and
  /// a WAV file anyone can listen to afterwards.
  /// It starts the file afresh after `maxDuration` seconds (0: never).
  static func embeddedOutput(_ requested: OutputConfiguration, file: String, maxDuration: Double) throws
    -> OutputConfiguration
  {
    guard !file.contains("\""), !file.contains("'"), !file.contains("\\") else {
      throw ServerError("embedded-output.path: quotes and backslashes are not allowed in \(file)")
    }
    try Server.prepareDirectory(for: file)
    var output = requested
    output.device = "file:FILE=\"\(file)\",FORMAT=wav"
    // The file plugin writes a correct WAV header for integer samples only.
    output.format = .s16
    output.pacing = .clock
    // Idle spells are cut out: a machine without a sound card is not woken a hundred times a
    // second to write silence into a file.
    output.writesIdleSilence = false
    output.reopenAfter = maxDuration > 0 ? maxDuration : nil
    return output
  }

  /// Starts rendering, the event thread, the mixer bindings and the socket (or serves on an
  /// inherited, already listening socket).
  public func start(inheritedSocket: CInt? = nil) throws {
    blocking.start()
    headerKeeper?.start()
    configuration.setUp(player, savedDucks: savedDucks())
    player.start()
    startMixers()
    restoreState()
    if let inheritedSocket {
      try server.start(inheritedDescriptor: inheritedSocket)
    } else {
      try server.start()
    }
    let output = player.outputInUse
    logger.notice(
      "rampd \(RampdVersion.current) listening",
      metadata: [
        "socket": "\(inheritedSocket.map { "fd \($0)" } ?? server.path)", "device": "\(output.device)",
        "rate": "\(output.rate)", "format": "\(output.format.rawValue)", "period": "\(output.periodFrames)",
        "buffer": "\(output.bufferFrames)", "pacing": "\(output.pacing.rawValue)",
      ])
    notifier.ready(status: statusLine)
    startWatchdog()
  }

  /// The duck rules an earlier run added (`duck-add`), to add after the configuration's. A saved
  /// rule named like a configured one is dropped (logged): the configuration wins, so editing
  /// `[[duck]]` and restarting always takes effect.
  private func savedDucks() -> [DuckRule] {
    guard let persistence = controller.persistence else { return [] }
    let (kept, shadowed, over) = persistence.restoreDucks(configured: configuration.ducks, capacity: DuckLayer.capacity)
    for rule in shadowed {
      logger.notice(
        "saved duck rule dropped: the configuration has a rule of that name, which is kept",
        metadata: ["rule": "\(rule.name)"])
    }
    for rule in over {
      logger.warning(
        "saved duck rule dropped: \(DuckLayer.capacity) rules exist, the most allowed",
        metadata: ["rule": "\(rule.name)"])
    }
    if !kept.isEmpty {
      logger.notice(
        "duck rules restored: \(kept.map(\.name).joined(separator: ", "))", metadata: ["ducks": "\(kept.count)"])
    }
    return kept
  }

  /// The saved model values (applied at once, before anything plays) and schedules.
  private func restoreState() {
    let keys = controller.pipeline.persistedKeys
    let values = restored.values.filter { keys.contains($0.key) }
    if !values.isEmpty {
      player.submit(player.prepareLevels(values.map { (keyPath: $0.key, value: $0.value) }))
    }
    controller.restore(restored.schedules)
    if !values.isEmpty || !restored.schedules.isEmpty {
      // Each level by name: a master.gain restored at 0 is silence that `status` must not hide.
      let levels = values.sorted { $0.key < $1.key }.map { key, value in
        let decibels = value > 0 ? NumberText.fixed(20 * log10(value), decimals: 2) + " dB" : "-inf dB"
        return "\(key) = \(NumberText.general(value)) (\(decibels))"
      }
      logger.notice(
        "state restored: \(levels.isEmpty ? "no levels" : levels.joined(separator: ", ")); \(restored.schedules.count) schedule(s)",
        metadata: ["values": "\(values.count)", "schedules": "\(restored.schedules.count)"])
    }
  }

  /// What `systemctl status` shows: what plays, the master gain, where it goes.
  public var statusLine: String {
    let streams = controller.playingStreams
    let playing =
      streams.isEmpty
      ? "idle" : "playing \(streams.count) stream\(streams.count == 1 ? "" : "s"): \(streams.joined(separator: ", "))"
    let gain = master?.latest.value ?? .nan
    let level = gain.isNaN ? "" : "; master.gain " + NumberText.fixed(gain, decimals: 3)
    let embedded = player.playsIntoFallback || player.fallback == nil ? embeddedFile : nil
    let output = embedded.map { "embedded WAV \($0)" } ?? player.outputInUse.device
    let waiting = player.deviceWait.map { "; waiting for \($0.device)" } ?? ""
    return playing + level + "; output " + output + waiting
  }

  /// Feeds systemd's watchdog from the event loop, and only while the render loop has rendered
  /// since the last time (or sleeps idle, nothing to render): a stalled render thread or event
  /// loop gets the service restarted.
  private func startWatchdog() {
    guard notifier.isActive else { return }
    let every = min((notifier.watchdogInterval ?? 10) / 2, 5)
    let feeder = WatchdogFeeder(loop: server.eventLoop)
    watchdog = server.eventLoop.scheduleRepeatedTask(
      initialDelay: .zero, delay: .milliseconds(Int64(every * 1000))
    ) { [weak self] _ in
      guard let self else { return }
      feeder.tick(
        blocks: player.blocksRendered, idle: player.isIdle, status: statusLine, notifier: notifier, logger: logger)
    }
  }

  /// Applies what can change while running (see config/README.md, "Reloading") and says which
  /// changed keys need a restart. Subscribers get a `config-reloaded` event.
  @discardableResult
  public func reload(_ new: DaemonConfiguration) -> (applied: [String], restartRequired: [String]) {
    let old = controller.configuration
    var merged = old
    merged.fades = new.fades
    merged.queue = new.queue
    merged.playback = new.playback
    merged.transaction = new.transaction
    merged.limits = new.limits
    merged.limits.pendingScheduled = old.limits.pendingScheduled
    merged.limits.animationsPerKeyPath = old.limits.animationsPerKeyPath
    merged.limits.eventQueue = old.limits.eventQueue
    merged.media = new.media
    merged.access = new.access
    merged.log = new.log
    merged.shutdown = new.shutdown
    var applied: [String] = []
    var restartRequired: [String] = []
    for key in ConfigSchema.keys where key.render(old) != key.render(new) {
      if key.render(merged) == key.render(new) { applied.append(key.path) } else { restartRequired.append(key.path) }
    }
    if old.mixers != new.mixers { restartRequired.append("mixer") }
    if old.ducks != new.ducks { restartRequired.append("duck") }
    controller.live.replace(with: merged)
    player.submit(PreparedDefaultTransaction(merged.transaction))
    logger.notice(
      "configuration reloaded",
      metadata: [
        "applied": "\(applied.isEmpty ? "nothing changed" : applied.joined(separator: ","))",
        "restart-required": "\(restartRequired.joined(separator: ","))",
      ])
    controller.broadcast(.configReloaded(applied: applied, restartRequired: restartRequired))
    return (applied, restartRequired)
  }

  /// SIGTERM's way out: refuse requests, fade every stream out (`[shutdown] fade`), let the
  /// output play what it holds, then stop.
  public func stopGracefully() {
    notifier.stopping(status: "stopping: fading out")
    controller.shutdown()
    let configuration = controller.configuration
    if !controller.playingStreams.isEmpty {
      let fade = max(configuration.shutdown.fade, configuration.declick)
      logger.notice("stopping: fading out", metadata: ["fade": "\(fade)"])
      player.stop(nil, fade: fade, curve: configuration.fades.curve)
      // The streams end when their fade has been rendered; the output then drains in `shutdown`.
      let deadline = Date().addingTimeInterval(fade + 1)
      while !controller.playingStreams.isEmpty && Date() < deadline { usleep(5_000) }
    }
    shutdown()
  }

  /// Stops accepting, lets the output drain, and stops every thread.
  public func shutdown() {
    watchdog?.cancel()
    server.shutdown()
    controller.shutdown()
    // The control side first: the blocking work under way ends (its result comes back to the
    // loop), then the loop closes the connections and drops its timers, so nothing reaches the
    // player or the state file once they are stopped.
    blocking.shutdown()
    try? loopGroup.syncShutdownGracefully()
    for mixer in mixers { mixer.stop() }
    player.shutdown()
    headerKeeper?.stop()
    controller.persistence?.saver.close()
    for lock in locks { lock.release() }
    logger.notice("rampd stopped")
  }

  private func startMixers() {
    for binding in configuration.mixers {
      do {
        let mixer = try MixerDriver(binding, player: player, logger: logger)
        mixer.start()
        mixers.append(mixer)
      } catch {
        logger.error("mixer binding unusable; skipped", metadata: ["mixer": "\(binding.name)", "error": "\(error)"])
      }
    }
  }
}

/// The watchdog's memory between ticks (event loop only).
final class WatchdogFeeder: Sendable {
  private struct State {
    var lastBlocks = -1
    var lastStatus = ""
    var stalled = false
  }
  /// The loop's that feeds the watchdog.
  private let state: NIOLoopBoundBox<State>

  init(loop: EventLoop) {
    state = .makeBoxSendingValue(State(), eventLoop: loop)
  }

  func tick(blocks: Int, idle: Bool, status: String, notifier: ServiceNotifier, logger: Logger) {
    state.withValue { state in
      if blocks != state.lastBlocks || idle {
        if notifier.watchdogInterval != nil { notifier.watchdog() }
        if state.stalled { logger.notice("render loop running again") }
        state.stalled = false
      } else if !state.stalled {
        state.stalled = true
        logger.error("render loop stalled: not feeding the watchdog")
      }
      state.lastBlocks = blocks
      if status != state.lastStatus {
        notifier.status(status)
        state.lastStatus = status
      }
    }
  }
}

/// Drives one ALSA mixer element from `mixers.<name>.volume` at the binding's control rate, on a
/// thread of its own: the render thread only publishes the value. While the value holds still the
/// thread sleeps until the render thread publishes a different one.
final class MixerDriver: @unchecked Sendable {
  private let binding: AlsaMixerBinding
  private let published: PublishedValue
  private let running = Atomic<Bool>(true)
  private let finished = Atomic<Bool>(false)
  private let logger: Logger
  private let player: Player

  init(_ configuration: MixerBindingConfiguration, player: Player, logger: Logger) throws {
    binding = try AlsaMixerBinding(configuration)
    self.player = player
    self.logger = logger
    let keyPath = configuration.keyPath
    player.submit(try player.prepareDefinition(keyPath, value: 1, range: 0...1))
    published = try player.publish(keyPath, wakesOnChange: true)
  }

  func start() {
    startThread(named: "rampd-mixer") { [self] in run() }
  }

  func stop() {
    running.store(false, ordering: .releasing)
    published.wake()
    while !finished.load(ordering: .acquiring) { usleep(1_000) }
    player.unpublish(published)
  }

  private func run() {
    nameThisThread("rampd-mixer")
    defer { finished.store(true, ordering: .releasing) }
    let interval = 1 / binding.configuration.controlRate
    var last: Double?
    var failing = false
    /// The value read one control interval ago (bit pattern: NaN counts as a value).
    var previousBits: UInt64?
    while running.load(ordering: .acquiring) {
      let (value, _) = published.latest
      // The first value is the binding's starting point: the element keeps its level until a
      // ramp moves it.
      if !value.isNaN, let previous = last, value != previous {
        do {
          try binding.set(volume: value)
          failing = false
        } catch {
          if !failing { logger.error("mixer write failed", metadata: ["error": "\(error)"]) }
          failing = true
        }
      }
      if !value.isNaN { last = value }
      if value.bitPattern == previousBits {
        // At rest for a whole interval: sleep until it moves (or `stop`).
        published.waitForChange(from: value)
        previousBits = nil
      } else {
        previousBits = value.bitPattern
        usleep(UInt32(interval * 1e6))
      }
    }
  }
}
