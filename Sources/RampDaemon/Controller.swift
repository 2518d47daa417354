import Foundation
import Logging
import RampAudio
import RampEngine
import RampProtocol
import Synchronization

/// Something that receives lines from the controller: a client connection.
public protocol Client: AnyObject, Sendable {
  /// The reply to this client's request `sequence` (the number `handle` was given with it), from
  /// any thread. Always delivered.
  func reply(_ line: JSONValue, sequence: Int)
  /// An event, as the whole line to send (newline included): serialised once, however many
  /// clients receive it. A client that cannot keep up drops it rather than hold anyone up.
  func event(_ line: String)
  /// Whether the request being handled is the only one of this client's still without a reply,
  /// so a reply sent before the render thread has run it cannot overtake another.
  var awaitsNoOtherReply: Bool { get }
  /// Neither root nor rampd's user: `play` may open only files under the media roots.
  var confinedToMediaRoots: Bool { get }
}

/// Runs commands against the player and sends replies and events back: the daemon's middle.
///
/// Commands are prepared on the calling thread (validation, opening files) and applied on the
/// render thread, at the sample their `at` names or at the next block. Replies and events come
/// back through the player's event queue and `deliverEvents`, so the render thread never touches
/// a socket.
public final class Controller: @unchecked Sendable {
  public let player: Player
  /// The `observe` rates taken over every connection (`[limits] observe-budget`).
  let observeBudget = ObserveBudget()
  /// The running configuration, replaced whole by `reload`.
  public let live: LiveConfiguration
  public var configuration: DaemonConfiguration { live.current }
  public let startedAt = Date()
  /// Extra facts `status` reports about the output (embedded file, …).
  public let outputNotes: JSONObject
  /// Those reported instead while the player plays into its fallback (`Player.playsIntoFallback`).
  public let fallbackNotes: JSONObject
  let preparation: Preparation
  let logger: Logger
  private let subscribers = Mutex<[ObjectIdentifier: Subscription]>([:])
  private let waits = Mutex<WaitRegistry>(WaitRegistry())
  private let scheduled = Atomic<Int>(0)
  /// Saved schedules not yet handed to the render thread.
  let wallClock = WallClockSchedules()
  /// Saved schedules on their way to it or handed to it, and not yet applied.
  let handed = HandedSchedules()
  /// Taken while a schedule is withdrawn: two at once (an `unschedule` and a newer command it
  /// yields to, on two connections) would each see the other's half.
  let withdrawals = Mutex<Void>(())
  private let playing = Mutex<[String]>([])
  /// Where model values and acknowledged schedules are kept across restarts (set before start).
  public var persistence: Persistence?
  /// The key paths whose model values are persisted.
  public var persistedKeys: [String] = ["master.gain"]
  private let stopping = Atomic<Bool>(false)
  /// How many clients are connected (the server sets it).
  public var connectedClients: @Sendable () -> Int = { 0 }
  /// Unix seconds now: what a request's `at` delay counts from (an offline show's clock stands
  /// at 0, so a delay is exactly its sample).
  public var clock: @Sendable () -> Double = { Date().timeIntervalSince1970 }

  struct Subscription {
    weak var client: (any Client)?
    var kinds: Set<EventKind>
  }

  public init(
    player: Player, configuration: DaemonConfiguration, outputNotes: JSONObject = [:], fallbackNotes: JSONObject = [:],
    logger: Logger
  ) {
    self.player = player
    live = LiveConfiguration(configuration)
    self.outputNotes = outputNotes
    self.fallbackNotes = fallbackNotes
    self.logger = logger
    preparation = Preparation(
      live: live, player: player, streamNames: StreamNames(),
      loudnessMeter: LoudnessMeter(
        cachePath: (configuration.state.resolvedPath() as NSString).deletingLastPathComponent + "/loudness.cache"))
  }

  /// The streams playing (or paused), in the order they started, as the events told.
  public var playingStreams: [String] { playing.withLock { $0 } }

  /// Refuses further requests.
  public func shutdown() {
    stopping.store(true, ordering: .releasing)
  }

  // MARK: Requests

  /// Runs `request` for `client`; the reply arrives through `client.reply`, possibly later (a
  /// scheduled command replies when it takes effect, `wait` when the animations end).
  public func handle(_ request: Request, from client: any Client, sequence: Int) {
    let id = request.id
    let respond: @Sendable (Result<JSONValue, ProtocolError>) -> Void = { [weak client] result in
      switch result {
      case .success(let value): client?.reply(Reply.success(id: id, result: value), sequence: sequence)
      case .failure(let error): client?.reply(Reply.failure(id: id, error: error), sequence: sequence)
      }
    }
    if stopping.load(ordering: .acquiring) {
      respond(.failure(ProtocolError(.shuttingDown, "rampd is shutting down")))
      return
    }
    let confined = client.confinedToMediaRoots
    if request.yield == nil { giveWay(to: request.command) }
    if request.ack == .scheduled {
      acknowledgeSchedule(request, confined: confined, respond: respond)
      return
    }
    switch request.command {
    case .version:
      respond(.success(Preparation.versionResult))
    case .subscribe(let kinds):
      respond(.success(subscribe(client, to: kinds)))
    case .unsubscribe(let kinds):
      respond(.success(unsubscribe(client, from: kinds)))
    case .observe, .unobserve:
      respond(.failure(ProtocolError(.internalError, field: "cmd", "observe is handled by the connection")))
    case .wait(let wait):
      self.wait(wait, respond: respond)
    case .get(let key) where request.at == nil && Query.isMeasured(key):
      readMeasured(key, respond: respond)
    case .schedules:
      respond(.success(["schedules": .array(scheduleList(withRequests: true))]))
    case .unschedule(let schedule, let tag):
      respond(unschedule(schedule: schedule, tag: tag))
    case .status:
      submit([.status], at: request.at, respond: respond) { [self] results in
        var status = results[0].objectValue ?? JSONObject()
        status["version"] = .string(RampdVersion.current)
        status["uptime"] = .number(Date().timeIntervalSince(startedAt))
        status["output"] = .object(outputStatus)
        status["clients"] = .integer(connectedClients())
        status["subscribers"] = .integer(subscribers.withLock { $0.values.count { !$0.kinds.isEmpty } })
        status["scheduled"] = .array(scheduleList(withRequests: false))
        status["streams"] = preparation.queues.annotate(status["streams"])
        return .object(status)
      }
    case .batch(let requests):
      guard case .kept(let record) = save(request, confined: confined, respond: respond) else { return }
      let respond = record.map { announcing($0, respond) } ?? respond
      whenDue(record, at: request.at, respond: respond) { [self] at in
        submit(
          requests.map(\.command), at: at, respond: respond, fieldPrefix: "commands", record: record,
          confined: confined
        ) { results in
          ["results": .array(results)]
        }
      }
    default:
      guard case .kept(let record) = save(request, confined: confined, respond: respond) else { return }
      let respond = record.map { announcing($0, respond) } ?? respond
      let answerEarly = client.awaitsNoOtherReply
      whenDue(record, at: request.at, respond: respond) { [self] at in
        submit(
          [request.command], at: at, respond: respond, answerEarly: answerEarly, record: record, confined: confined
        ) { $0[0] }
      }
    }
  }

  /// What `save` did: kept the schedule (nil: nothing to keep, no `at`), or refused the request.
  private enum Saving {
    case kept(SavedSchedule?)
    case refused
  }

  /// A scheduled request is saved before it is queued, so it outlives a restart even though its
  /// reply waits for its time (a timeline script's lines, say).
  private func save(
    _ request: Request, field: String = "at", confined: Bool,
    respond: @Sendable (Result<JSONValue, ProtocolError>) -> Void
  ) -> Saving {
    guard request.isScheduled, let persistence else { return .kept(nil) }
    let due = Self.firstDue(request)
    guard let id = persistence.add(Self.unscheduled(request).json.objectValue ?? [:], due: due, confined: confined)
    else {
      respond(
        .failure(
          ProtocolError(
            .internalError, field: field, "the schedule could not be saved (see rampd's log); nothing was scheduled")))
      return .refused
    }
    return .kept(SavedSchedule(request, id: id, due: due, rampSeconds: rampSeconds(of: request.command)))
  }

  /// When a schedule first takes effect, in Unix seconds: at `at`; a repeat at a time of day at
  /// its next; a repeat every interval at `at`, else one interval from now.
  private static func firstDue(_ request: Request) -> Double {
    let now = Date().timeIntervalSince1970
    switch request.repeats {
    case .daily?: return request.repeats?.next(after: now, start: now, offset: localOffset) ?? now
    case .every(let seconds)?: return request.at?.due(receivedAt: now) ?? now + seconds
    case nil: return request.at?.due(receivedAt: now) ?? now
    }
  }

  /// The local time zone's offset from UTC at an instant (Unix seconds): rampd's `TZ`.
  static func localOffset(_ instant: Double) -> Int {
    TimeZone.current.secondsFromGMT(for: Date(timeIntervalSince1970: instant))
  }

  /// The request as a saved schedule keeps it: no id, no `at`, answered when applied.
  private static func unscheduled(_ request: Request) -> Request {
    var kept = request
    kept.id = nil
    kept.at = nil
    kept.ack = .applied
    return kept
  }

  private var outputStatus: JSONObject {
    let output = player.outputInUse
    let wait = player.deviceWait
    let state = !player.deviceIsHealthy ? "failed" : wait != nil ? "waiting" : "playing"
    var object: JSONObject = [
      "device": .string(output.device), "rate": .integer(output.rate), "channels": .integer(output.channels),
      "format": .string(output.format.rawValue), "periodFrames": .integer(output.periodFrames),
      "bufferFrames": .integer(output.bufferFrames), "pacing": .string(output.pacing.rawValue),
      "state": .string(state),
      "underruns": .integer(player.deviceUnderruns),
    ]
    let realtime = player.realtime
    object["realtimePriority"] = .integer(realtime.priority)
    object["realtime"] = .object(RealtimeStatus.scheduling(realtime))
    if let measured = player.measuredOutput {
      object["delay"] = .number(measured.delay)
      object["drift"] = .number(measured.driftPPM)
    }
    object["idle"] = .bool(player.isIdle)
    let rewind = player.outputRewind
    object["rewind"] = .bool(rewind.active)
    object["rewindMargin"] = .number(rewind.margin)
    object["rewinds"] = .integer(rewind.rewinds)
    if let latency = player.resumeLatency { object["resumeLatency"] = .number(latency) }
    object["limiter"] =
      player.limiter.map { limiter in
        .object([
          "ceiling": .number(limiter.settings.ceilingDecibels), "lookAhead": .number(limiter.settings.lookAhead),
          "release": .number(limiter.settings.release),
          "latency": .number((Double(limiter.latencyFrames) / Double(output.rate) * 1e6).rounded() / 1e6),
          "reduction": .number((limiter.reductionDecibels * 100).rounded() / 100),
          "engagements": .integer(limiter.engagements),
        ])
      } ?? .bool(false)
    if player.hasOpenedADevice { object["kind"] = .string(output.kind.rawValue) }
    if let latency = player.reopenLatency { object["reopenLatency"] = .number(latency) }
    for (key, value) in player.playsIntoFallback ? fallbackNotes : outputNotes { object[key] = value }
    if let wait {
      var waiting: JSONObject = [
        "device": .string(wait.device), "attempts": .integer(wait.attempts), "error": .string(wait.failure),
      ]
      if let next = wait.nextAttempt { waiting["nextAttempt"] = .number((next * 1000).rounded() / 1000) }
      object["waiting"] = .object(waiting)
    }
    return object
  }

  /// Prepares `commands`, then applies them all at one sample on the render thread, or none.
  // MARK: Saved schedules

  /// A schedule kept in the state file: its id, and how long its ramp lasts once it starts.
  struct SavedSchedule {
    let id: UInt64
    let due: Double
    let rampSeconds: Double?
    let repeats: Recurrence?
    let tag: String?
    let cmd: String

    init(_ request: Request, id: UInt64, due: Double, rampSeconds: Double?) {
      self.id = id
      self.due = due
      self.rampSeconds = rampSeconds
      repeats = request.repeats
      tag = request.tag
      cmd = request.command.name
    }
  }

  /// `"ack": "scheduled"`: checked, saved to disk, answered at once; it takes effect at its time
  /// even if rampd restarts meanwhile.
  private func acknowledgeSchedule(
    _ request: Request, confined: Bool, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void
  ) {
    guard persistence != nil else {
      respond(.failure(ProtocolError(.internalError, field: "ack", "schedules cannot be saved")))
      return
    }
    let commands: [Command]
    if case .batch(let requests) = request.command {
      commands = requests.map(\.command)
    } else {
      commands = [request.command]
    }
    // Checked before it is saved, so a bad request is refused now rather than at its time.
    for (index, command) in commands.enumerated() {
      do {
        _ = try preparation.prepare(command, confined: confined)
      } catch {
        respond(.failure(commands.count > 1 ? error.prefixed("commands[\(index)]") : error))
        return
      }
    }
    guard case .kept(let record?) = save(request, field: "ack", confined: confined, respond: respond) else { return }
    run(Self.unscheduled(request), record: record, at: .date(record.due), elapsed: 0, confined: confined)
    respond(.success(["scheduled": .integer(record.id), "due": .string(RFC3339.format(record.due))]))
  }

  /// Re-arms the schedules saved by an earlier run. One whose time passed while rampd was down
  /// takes effect now; a ramp among them starts as far along as it would be now (from the value
  /// it started from, when it had started), and one that would be over lands on its end value.
  public func restore(_ schedules: [PersistedSchedule]) {
    let now = Date().timeIntervalSince1970
    for entry in schedules {
      guard case .success(var request) = Self.request(of: entry) else {
        logger.error("a saved schedule no longer parses; dropped", metadata: ["schedule": "\(entry.id)"])
        persistence?.finish(entry.id)
        continue
      }
      let ramp = rampSeconds(of: request.command)
      let record = SavedSchedule(request, id: entry.id, due: entry.due, rampSeconds: ramp)
      let late = now - entry.due
      if let repeats = request.repeats, late > 0 {
        // A repeating schedule does not catch up: it comes at its next time.
        let next = repeats.next(after: now, start: entry.due, offset: Self.localOffset)
        logger.notice(
          "a repeating schedule's time passed while rampd was down; it comes at its next time",
          metadata: ["schedule": "\(entry.id)", "next": "\(RFC3339.format(next))"])
        persistence?.reschedule(entry.id, due: next)
        let again = SavedSchedule(request, id: entry.id, due: next, rampSeconds: ramp)
        run(request, record: again, at: .date(next), elapsed: 0, confined: entry.confined)
        continue
      }
      if late <= 0 {
        run(request, record: record, at: .date(entry.due), elapsed: 0, confined: entry.confined)
        continue
      }
      logger.notice(
        "a saved schedule's time passed while rampd was down; applying it now",
        metadata: ["schedule": "\(entry.id)", "cmd": "\(request.command.name)", "late": "\(late)"])
      if case .fade(var fade) = request.command, let ramp {
        if entry.from != nil, fade.from == nil { fade.from = entry.from }
        if late >= ramp { fade.duration = 0 }
        request.command = .fade(fade)
      }
      run(request, record: record, at: nil, elapsed: ramp.map { min(late, $0) } ?? 0, confined: entry.confined)
    }
  }

  /// How long a command's ramp lasts once applied, when it has one.
  private func rampSeconds(of command: Command) -> Double? {
    switch command {
    case .fade(let fade): return preparation.duration(of: fade)
    default: return nil
    }
  }

  /// Applies a saved schedule; its outcome goes to the log, since whoever asked is not waiting.
  /// A repeating one is then armed for its next time.
  private func run(_ request: Request, record: SavedSchedule, at: Schedule?, elapsed: Double, confined: Bool) {
    let logger = logger
    let name = request.command.name
    let logged: @Sendable (Result<JSONValue, ProtocolError>) -> Void = { [self] result in
      switch result {
      case .success: logger.info("schedule applied", metadata: ["schedule": "\(record.id)", "cmd": "\(name)"])
      case .failure(let error):
        logger.error(
          "schedule refused when its time came", metadata: ["schedule": "\(record.id)", "error": "\(error.message)"])
      }
      guard let repeats = record.repeats, let persistence else { return }
      let next = repeats.next(
        after: max(Date().timeIntervalSince1970, record.due), start: record.due, offset: Self.localOffset)
      guard persistence.reschedule(record.id, due: next) else { return }
      let again = SavedSchedule(request, id: record.id, due: next, rampSeconds: record.rampSeconds)
      run(request, record: again, at: .date(next), elapsed: 0, confined: confined)
    }
    let respond = announcing(record, logged)
    whenDue(record, at: at, respond: respond) { [self] at in
      if case .batch(let requests) = request.command {
        submit(
          requests.map(\.command), at: at, respond: respond, fieldPrefix: "commands", record: record,
          confined: confined
        ) { _ in .null }
      } else {
        submit([request.command], at: at, respond: respond, record: record, elapsed: elapsed, confined: confined) {
          $0[0]
        }
      }
    }
  }

  /// `respond`, after a `schedule-applied` event when the schedule took effect.
  private func announcing(
    _ record: SavedSchedule, _ respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void
  ) -> @Sendable (Result<JSONValue, ProtocolError>) -> Void {
    { [self] result in
      if case .success = result {
        let next = record.repeats?.next(
          after: max(Date().timeIntervalSince1970, record.due), start: record.due, offset: Self.localOffset)
        broadcast(.scheduleApplied(schedule: record.id, cmd: record.cmd, tag: record.tag, next: next))
      }
      respond(result)
    }
  }

  /// Runs `submit` with the schedule's time once it is near: a saved schedule waits on the wall
  /// clock (`WallClockSchedules`) and is turned into a sample only shortly before it is due.
  private func whenDue(
    _ record: SavedSchedule?, at: Schedule?, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void,
    submit: @escaping @Sendable (Schedule?) -> Void
  ) {
    // On a device without a clock a delay counts in samples from the request's arrival: it goes
    // to the render thread at once (the wall clock says nothing of where the samples are).
    guard let record else {
      submit(at)
      return
    }
    // From here until its ticket is back it can be withdrawn (`HandedSchedules`).
    handed.depart(record.id)
    guard !countsInSamples(at) else {
      submit(at)
      return
    }
    let limit = configuration.limits.pendingScheduled
    if wallClock.holds(due: record.due), scheduled.load(ordering: .relaxed) + wallClock.count >= limit {
      settle(record)
      respond(
        .failure(
          ProtocolError(
            .limitExceeded, field: "at", "\(limit) commands are already scheduled (limits.pending-scheduled)")))
      return
    }
    wallClock.add(record.id, due: record.due) { submit(at.map { _ in .date(record.due) }) }
  }

  /// Holds `key` at its audible value, dropping its animations (`cancel`): a ramp whose
  /// schedule gave way stops where it is, and the newer command takes over from there.
  func hold(_ key: String) {
    submit([.cancel(key: key)], at: nil, respond: { _ in }) { $0[0] }
  }

  /// A schedule that did not take effect: forgotten, unless it repeats (it then comes again).
  private func settle(_ record: SavedSchedule) {
    handed.settled(record.id)
    if record.repeats == nil { persistence?.finish(record.id) }
  }

  /// After a saved schedule applied: a ramp keeps its entry until it ends. A repeating one keeps
  /// its entry for its next time.
  private func applied(_ record: SavedSchedule, from: Double?) {
    guard let persistence, record.repeats == nil else { return }
    let ends = record.due + (record.rampSeconds ?? 0)
    let left = ends - Date().timeIntervalSince1970
    guard let from, left > 0 else {
      persistence.finish(record.id)
      return
    }
    persistence.started(record.id, from: from)
    DispatchQueue.global().asyncAfter(deadline: .now() + left) { persistence.finish(record.id) }
  }

  // MARK: Applying

  private func submit(
    _ commands: [Command], at schedule: Schedule?,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void,
    fieldPrefix: String? = nil, answerEarly: Bool = false, record: SavedSchedule? = nil, elapsed: Double = 0,
    confined: Bool = false, combine: @escaping @Sendable ([JSONValue]) -> JSONValue
  ) {
    var operations: [Operation] = []
    for (index, command) in commands.enumerated() {
      do {
        operations.append(try preparation.prepare(command, elapsed: elapsed, confined: confined))
      } catch {
        if let record { settle(record) }
        respond(.failure(fieldPrefix.map { error.prefixed("\($0)[\(index)]") } ?? error))
        return
      }
    }
    let changesModels = commands.contains { $0.mayChangeModels }
    let persistedKeys = persistence == nil ? [] : persistedKeys
    let rampKey = record?.rampSeconds != nil ? commands.first?.rampKey : nil
    /// Refuses it once it is counted among the scheduled ones (if it has a schedule).
    func refuse(_ error: ProtocolError) {
      if schedule != nil { scheduled.subtract(1, ordering: .relaxed) }
      if let record { settle(record) }
      respond(.failure(error))
    }
    var sample: Int64?
    if let schedule {
      let limit = configuration.limits.pendingScheduled
      guard scheduled.add(1, ordering: .relaxed).newValue <= limit else {
        refuse(
          ProtocolError(
            .limitExceeded, field: "at", "\(limit) commands are already scheduled (limits.pending-scheduled)"))
        return
      }
      sample = targetSample(for: schedule)
    }
    let all = operations
    // A change that cannot fail on the render thread is acknowledged once queued, as MPD's
    // setvol is: the round trip does not wait for the render thread.
    let foregone = schedule == nil && all.count == 1 && answerEarly ? all[0].foregoneResult : nil
    // Journaled before it is acknowledged, like every other change of a persisted value.
    let early: (key: String, value: Double)? = foregone.flatMap { result in
      guard let key = result["key"]?.stringValue, persistedKeys.contains(key), let value = result["value"]?.numberValue
      else { return nil }
      return (key, value)
    }
    // A change of the duck rules is saved before it is queued, as a schedule is: the reply that
    // follows is for rules that survive a kill. What the render thread refuses is put back. One
    // for a sample of its own is saved once it applied instead (its schedule is saved meanwhile):
    // saved now, it would be in force after a restart before its time, and out of order with
    // changes made meanwhile.
    let changesDuckRules = commands.contains(where: \.changesDuckRules)
    let duckUndo: Persistence.DuckUndo?
    if let persistence, sample == nil, changesDuckRules {
      guard let undo = persistence.record(ducks: commands) else {
        refuse(
          ProtocolError(.internalError, "the duck rules could not be saved (see rampd's log); nothing was changed"))
        return
      }
      duckUndo = undo
    } else {
      duckUndo = nil
    }
    let logger = logger
    let atSample = sample != nil
    // Model values are read after the command only when it may have changed them (an early answer
    // recorded its change already: the ticket only settles it).
    let ticket = DaemonTicket(
      all, player: player, fieldPrefix: fieldPrefix, rampKey: rampKey,
      persistedKeys: changesModels && early == nil ? persistedKeys : [], keepsResults: foregone == nil,
      scheduled: atSample
    ) { [self] ticket in
      if schedule != nil { scheduled.subtract(1, ordering: .relaxed) }
      if !ticket.models.isEmpty || early != nil { persistence?.record(values: ticket.models, settling: early?.key) }
      if case .failure = ticket.result, let duckUndo {
        // Those before the refused one applied (a batch whose commands changed things for each other).
        persistence?.undo(duckUndo, from: ticket.applied)
      } else if case .success = ticket.result, atSample, changesDuckRules, let persistence,
        persistence.record(ducks: commands) == nil
      {
        logger.error("a scheduled duck rule change applied but could not be saved (see above)")
      }
      if let record {
        if case .success = ticket.result {
          // After what it started is recorded: a withdrawal that no longer finds it reads that.
          applied(record, from: ticket.rampFrom)
          handed.settled(record.id)
        } else {
          settle(record)
        }
      }
      guard foregone == nil else {
        if case .failure(let error) = ticket.result {
          logger.error("an acknowledged command failed", metadata: ["error": "\(error.message)"])
        }
        return
      }
      respond(ticket.result.map { combine($0.arrayValue ?? []) })
    }
    // A saved schedule withdrawn on its way here is not queued (`HandedSchedules`).
    if let record, !handed.hand(record.id, ticket) {
      if let duckUndo { persistence?.undo(duckUndo, from: 0) }
      refuse(CommandRefusal.withdrawn.error(defined: nil))
      return
    }
    if let early { persistence?.acknowledgeEarly(early.key, value: early.value) }
    // An acknowledged change lands on the next block's first sample whether or not the render
    // thread is woken for it now.
    let accepted = player.submit(ticket, at: sample, wake: foregone == nil)
    if !accepted {
      if let duckUndo { persistence?.undo(duckUndo, from: 0) }
      // Refused after all: the key path's value is recorded again from the next command.
      if let early { persistence?.record(values: [:], settling: early.key) }
      refuse(.commandQueueFull)
    } else if let foregone {
      respond(.success(combine([foregone])))
    }
  }

  /// The one conversion of a wall-clock time to the output's sample clock, made when a schedule
  /// is handed to the render thread (for a saved one, `WallClockSchedules.lead` before it is due).
  private func targetSample(for schedule: Schedule) -> Int64 {
    let now = clock()
    let seconds = schedule.secondsUntilDue(from: now)
    // Offline, the clock is the show's own and the sample is exact; live, it is the sample the
    // device will play at the due time. A saved schedule may be due later than the clock can
    // count (a state file from before delays were bounded): it then never comes.
    if countsInSamples(schedule), case .delay(let delay) = schedule {
      return player.currentSample + Int64(min((delay * Double(player.output.rate)).rounded(), 1e18))
    }
    guard !player.isOffline else {
      return player.currentSample + Int64(min((seconds * Double(player.output.rate)).rounded(), 1e18))
    }
    return player.sample(heardAt: now + seconds)
  }

  /// A delay on an output without a clock (device pacing over `null`): the render thread runs as
  /// fast as the device takes audio, not at the wall clock's pace, so the delay is counted in
  /// samples from the next block's first one, as an offline render counts it. Converted through
  /// the wall clock, or held there until it is nearly due, it would land wherever the samples had
  /// raced to meanwhile.
  private func countsInSamples(_ schedule: Schedule?) -> Bool {
    guard case .delay = schedule else { return false }
    return player.deviceHasNoClock
  }

  // MARK: Wait

  private func wait(_ wait: Wait, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void) {
    let ids = wait.animations
    let key = wait.key
    if let key {
      do {
        try Preparation.checkAddressable(key)
      } catch {
        respond(.failure(error))
        return
      }
    }
    // What is in flight, read on the render thread as plain values; looked at here.
    let query = Query(.animations(key: key, ids: ids.map(Set.init)), player: player)
    let ticket = DaemonTicket(
      [.query(query)], player: player, fieldPrefix: nil, rampKey: nil, persistedKeys: [], keepsResults: false
    ) { [self] ticket in
      if case .failure = ticket.result {
        respond(ticket.result)
        return
      }
      let now = query.readout.sample
      let inFlight = query.readout.animations
      let wanted = ids.map(Set.init) ?? Set(inFlight.map(\.id))
      // One held by fillMode forwards after its end is over, though it stays on its key path.
      let alive = inFlight.filter { wanted.contains($0.id) && ($0.endSample.map { $0 > now } ?? true) }
      if let endless = alive.first(where: { $0.endSample == nil }) {
        respond(
          .failure(
            ProtocolError(
              .invalidField, field: key == nil ? "animations" : "key",
              "animation \(endless.id) ('\(endless.key)' on \(endless.keyPath)) never ends; cancel or remove it instead"
            )))
        return
      }
      // Animations already over (or unknown) count as finished: they are not in flight.
      register(awaited: alive.map(\.id), timeout: wait.timeout, respond: respond)
    }
    player.submit(ticket)
  }

  private func register(
    awaited: [UInt64], timeout: Double?, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void
  ) {
    if awaited.isEmpty {
      respond(.success(["animations": []]))
      return
    }
    let token = waits.withLock { $0.add(Set(awaited), respond: respond) }
    if let timeout {
      DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
        if let waiter = waits.withLock({ $0.remove(token) }) {
          waiter.respond(
            .failure(
              ProtocolError(
                .timeout, field: "timeout",
                "\(waiter.pending.count) animation(s) still running after \(timeout) s: \(waiter.pending.sorted())")))
        }
      }
    }
  }

  // MARK: Measured values

  /// `get` of a level or of `master.limiter`: published as an observer's value is, read once it
  /// is what an observer would read now (``Player/measuredReading(of:)``), then unpublished.
  private func readMeasured(_ key: String, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void) {
    let published: PublishedValue
    do {
      published = try player.publish(key)
    } catch {
      respond(.failure(Self.refusal(error)))
      return
    }
    pollMeasured(
      published, deadline: DispatchTime.now() + Player.levelWindow + Self.measuredTimeout, respond: respond)
  }

  /// Beyond the window, how long a level may take to be read before the reply says why it was not.
  static let measuredTimeout = 2.0

  private func pollMeasured(
    _ published: PublishedValue, deadline: DispatchTime,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void
  ) {
    let key = published.keyPath
    if let reading = player.measuredReading(of: published) {
      player.unpublish(published)
      guard !reading.value.isNaN else {
        respond(.failure(Self.nothingMeasured(key)))
        return
      }
      respond(.success(["key": .string(key), "value": .number(reading.value), "sample": .integer(reading.sample)]))
      return
    }
    guard DispatchTime.now() < deadline, !stopping.load(ordering: .acquiring) else {
      player.unpublish(published)
      respond(
        .failure(
          ProtocolError(
            .timeout, field: "key",
            "'\(key)' was not measured within \(JSONValue.format(Player.levelWindow + Self.measuredTimeout)) s:"
              + " the output renders no audio (see status)")))
      return
    }
    DispatchQueue.global().asyncAfter(deadline: .now() + Self.measuredPoll) { [self] in
      pollMeasured(published, deadline: deadline, respond: respond)
    }
  }

  /// Well under a period: a level whose meters already run is read as soon as it is published.
  static let measuredPoll = 0.005

  /// Why a measured key path read nothing: its stream is not playing, or the limiter is off.
  static func nothingMeasured(_ key: String) -> ProtocolError {
    if key == PublishedValue.limiterKeyPath {
      return ProtocolError(.unknownKeyPath, field: "key", "master.limiter: the limiter is off ([output] limiter)")
    }
    let stream = LevelKey(key)?.stream ?? ""
    return ProtocolError(.unknownKeyPath, field: "key", "no property '\(key)' (no stream '\(stream)' is playing)")
  }

  /// Why a value could not be published for `observe` or `get`.
  static func refusal(_ error: Player.PublishRefusal) -> ProtocolError {
    switch error {
    case .full:
      ProtocolError(
        .limitExceeded, field: "key",
        "\(Player.publishedCapacity) values are observed or published over every connection, the most the render"
          + " thread has room for")
    case .queueFull: .commandQueueFull
    }
  }

  // MARK: Events

  /// Whether `client` receives events of some kind.
  func isSubscribed(_ client: any Client) -> Bool {
    subscribers.withLock { $0[ObjectIdentifier(client)]?.kinds.isEmpty == false }
  }

  private func subscribe(_ client: any Client, to kinds: [EventKind]?) -> JSONValue {
    let wanted = Set(kinds ?? EventKind.allCases)
    let now = subscribers.withLock { table in
      let key = ObjectIdentifier(client)
      var subscription = table[key] ?? Subscription(client: client, kinds: [])
      subscription.kinds.formUnion(wanted)
      table[key] = subscription
      return subscription.kinds
    }
    return ["events": .array(EventKind.allCases.filter(now.contains).map { .string($0.rawValue) })]
  }

  private func unsubscribe(_ client: any Client, from kinds: [EventKind]?) -> JSONValue {
    let now = subscribers.withLock { table in
      let key = ObjectIdentifier(client)
      guard var subscription = table[key] else { return Set<EventKind>() }
      if let kinds { subscription.kinds.subtract(kinds) } else { subscription.kinds = [] }
      table[key] = subscription
      return subscription.kinds
    }
    return ["events": .array(EventKind.allCases.filter(now.contains).map { .string($0.rawValue) })]
  }

  /// Forgets a client that disconnected.
  public func disconnected(_ client: any Client) {
    _ = subscribers.withLock { $0.removeValue(forKey: ObjectIdentifier(client)) }
  }

  public func broadcast(_ event: Event) {
    guard let kind = event.kind else { return }
    let targets = subscribers.withLock { table in
      table.values.compactMap { $0.kinds.contains(kind) ? $0.client : nil }
    }
    guard !targets.isEmpty else { return }
    let line = event.json.serializedLine()
    for client in targets { client.event(line) }
  }

  /// Hands out every reply and event the render thread has posted. The server calls it on its
  /// event loop whenever `player.eventDescriptor` becomes readable.
  public func deliverEvents() {
    while let event = player.nextEvent() { dispatch(event) }
  }

  private func dispatch(_ event: PlayerEvent) {
    switch event {
    case .commandCompleted(let ticket):
      guard let ticket = ticket as? DaemonTicket else { return }
      // A read that found more than it had room for reads again, with room for what it found.
      if ticket.growReadouts() {
        if player.submit(ticket) { return }
        ticket.refuseAsQueueFull()
      }
      ticket.settle()
      ticket.deliver(ticket)
      for event in ticket.events { broadcast(event) }
    case .animationFinished(let report):
      // The event first, then the replies to waits it ends: a client sees them in that order.
      if !InternalKeyPath.isInternal(report.keyPath), !report.isInternal {
        broadcast(
          .animationFinished(
            id: report.id, key: report.keyPath, name: report.key, finished: report.finished, sample: report.sample))
      }
      let finished = waits.withLock { $0.finish(report.id, finished: report.finished) }
      for waiter in finished { waiter.answer() }
    case .streamStarted(let id, let path):
      playing.withLock { $0.append(id) }
      logger.info("stream started", metadata: ["stream": "\(id)", "path": "\(path)"])
      broadcast(.streamStarted(stream: id, path: path))
    case .streamEnded(let id, let reason):
      playing.withLock { $0.removeAll { $0 == id } }
      preparation.queues.ended(id)
      logger.info("stream ended", metadata: ["stream": "\(id)", "reason": "\(reason.rawValue)"])
      broadcast(.streamEnded(stream: id, reason: RampProtocol.StreamEndReason(rawValue: reason.rawValue) ?? .failed))
    case .underrun(let stream):
      logger.debug("underrun", metadata: ["stream": "\(stream)"])
      broadcast(.underrun(stream: stream))
    case .deviceFailed(let message):
      logger.error("output device failed; reopening with backoff", metadata: ["error": "\(message)"])
      broadcast(.deviceFailed(message: message))
    case .deviceRecovered(let device):
      logger.notice("output device recovered", metadata: ["device": "\(device)"])
      broadcast(.deviceRecovered(device: device))
    case .deviceArrived(let device):
      logger.notice("output device opened at last; playing into it", metadata: ["device": "\(device)"])
      broadcast(.deviceRecovered(device: device))
    case .duckStarted(let rule, let sample):
      logger.info("duck started", metadata: ["rule": "\(rule)"])
      broadcast(.duckStarted(rule: rule, sample: sample))
    case .duckEnded(let rule, let sample):
      logger.info("duck ended", metadata: ["rule": "\(rule)"])
      broadcast(.duckEnded(rule: rule, sample: sample))
    case .itemStarted, .itemEnded:
      queueEvent(event)
    case .limiterEngaged(let sample, let reduction):
      logger.info("limiter engaged", metadata: ["reduction": "\(reduction) dB"])
      broadcast(.limiterEngaged(reduction: reduction, sample: sample))
    case .eventsLost(let count):
      logger.warning("events lost: the event queue was full", metadata: ["count": "\(count)"])
      broadcast(.eventsLost(count: count))
      recheckWaits()
    }
  }

  /// Events were lost, perhaps the end of an animation a `wait` waits for: asks the engine which
  /// awaited animations are still in flight. A wait whose animations have all ended is answered
  /// (with `events-lost` if it missed an end), never left hanging.
  private func recheckWaits() {
    let awaited = waits.withLock { $0.pendingIDs }
    guard !awaited.isEmpty else { return }
    let query = Query(.animations(key: nil, ids: awaited), player: player)
    let ticket = DaemonTicket(
      [.query(query)], player: player, fieldPrefix: nil, rampKey: nil, persistedKeys: [], keepsResults: false
    ) { [self] _ in
      let now = query.readout.sample
      let alive = query.readout.animations.filter { animation in
        awaited.contains(animation.id) && (animation.endSample.map { $0 > now } ?? true)
      }
      let gone = awaited.subtracting(alive.map(\.id))
      for waiter in waits.withLock({ $0.lose(gone) }) { waiter.answer() }
    }
    player.submit(ticket)
  }
}

/// Clients waiting for animations to end. Guarded by the controller's mutex.
struct WaitRegistry {
  final class Waiter: @unchecked Sendable {
    var pending: Set<UInt64>
    var outcomes: [(UInt64, Bool)] = []
    /// Animations that ended while their `animation-finished` was lost.
    var lost: [UInt64] = []
    let respond: @Sendable (Result<JSONValue, ProtocolError>) -> Void

    init(pending: Set<UInt64>, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void) {
      self.pending = pending
      self.respond = respond
    }

    var describe: [JSONValue] {
      outcomes.map { ["id": .integer($0.0), "finished": .bool($0.1)] }
    }

    /// The reply once nothing is pending.
    func answer() {
      guard lost.isEmpty else {
        respond(
          .failure(
            ProtocolError(
              .eventsLost,
              "animation(s) \(lost.sorted()) ended while events were lost (the event queue was full): whether "
                + "they finished or were removed is unknown")))
        return
      }
      respond(.success(["animations": .array(describe)]))
    }
  }

  private var waiters: [Int: Waiter] = [:]
  private var nextToken = 0

  mutating func add(_ ids: Set<UInt64>, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void) -> Int
  {
    nextToken += 1
    waiters[nextToken] = Waiter(pending: ids, respond: respond)
    return nextToken
  }

  mutating func remove(_ token: Int) -> Waiter? { waiters.removeValue(forKey: token) }

  /// Every animation some waiter waits for.
  var pendingIDs: Set<UInt64> { waiters.values.reduce(into: Set()) { $0.formUnion($1.pending) } }

  /// Records that animations `ids` ended unseen; returns the waiters that have nothing left to
  /// wait for.
  mutating func lose(_ ids: Set<UInt64>) -> [Waiter] {
    var done: [Waiter] = []
    for (token, waiter) in waiters where !waiter.pending.isDisjoint(with: ids) {
      let gone = waiter.pending.intersection(ids)
      waiter.pending.subtract(gone)
      waiter.lost += gone
      if waiter.pending.isEmpty {
        done.append(waiter)
        waiters[token] = nil
      }
    }
    return done
  }

  /// Records that animation `id` ended; returns the waiters that have nothing left to wait for.
  mutating func finish(_ id: UInt64, finished: Bool) -> [Waiter] {
    var done: [Waiter] = []
    for (token, waiter) in waiters where waiter.pending.contains(id) {
      waiter.pending.remove(id)
      waiter.outcomes.append((id, finished))
      if waiter.pending.isEmpty {
        done.append(waiter)
        waiters[token] = nil
      }
    }
    return done
  }
}

extension Command {
  /// Whether applying it may change a model value (what is persisted).
  var mayChangeModels: Bool {
    switch self {
    case .set, .fade, .cancel: true
    case .batch(let requests): requests.contains { $0.command.mayChangeModels }
    default: false
    }
  }
}
