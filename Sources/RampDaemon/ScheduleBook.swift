import FoundationEssentials
import Logging
import NIOCore
import RampAudio
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The saved schedules: kept on disk before they are acknowledged, on the wall clock until shortly
/// before they are due, then handed to the apply pipeline; restored after a restart, listed,
/// withdrawn, and given way by the rule of `yield`.
///
/// Runs on the control loop, so a withdrawal (an `unschedule`, a newer command it yields to) is
/// never half-way when another looks; saving to the disk is done off it (`ControlLoop.offload`).
final class ScheduleBook: Sendable {
  let persistence: Persistence?
  let preparation: Preparation
  let pipeline: ApplyPipeline
  let hub: EventHub
  let live: LiveConfiguration
  let logger: Logger
  let control: ControlLoop
  /// Saved schedules not yet handed to the render thread.
  let wallClock: WallClockSchedules
  /// Saved schedules on their way to it or handed to it, and not yet applied.
  let handed: HandedSchedules

  init(
    persistence: Persistence?, preparation: Preparation, pipeline: ApplyPipeline, hub: EventHub,
    live: LiveConfiguration, control: ControlLoop, logger: Logger
  ) {
    self.control = control
    wallClock = WallClockSchedules(control: control)
    handed = HandedSchedules(control: control)
    self.persistence = persistence
    self.preparation = preparation
    self.pipeline = pipeline
    self.hub = hub
    self.live = live
    self.logger = logger
  }

  private var configuration: DaemonConfiguration { live.current }

  /// A scheduled request is saved before it is queued, so it outlives a restart even though its
  /// reply waits for its time (a timeline script's lines, say). Saving waits for the disk: it is
  /// done off the loop, and `then` is called back on it with the schedule kept (nil: nothing to
  /// keep, no `at`). A schedule that could not be saved is refused, and `handedOver` called.
  func save(
    _ request: Request, field: String = "at", confined: Bool,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void, handedOver: HandOver = .none,
    then: @escaping @Sendable (SavedSchedule?) -> Void
  ) {
    guard request.isScheduled, let persistence else {
      then(nil)
      return
    }
    let due = Self.firstDue(request)
    let entry = Self.unscheduled(request).json.objectValue ?? [:]
    let rampSeconds = rampSeconds(of: request.command)
    control.offload(.disk) {
      persistence.add(entry, due: due, confined: confined)
    } then: { id in
      guard let id else {
        respond(
          .failure(
            ProtocolError(
              .internalError, field: field, "the schedule could not be saved (see rampd's log); nothing was scheduled")
          ))
        handedOver.done()
        return
      }
      // Listed from the moment it was kept: an `unschedule` (or a newer command it yields to)
      // may have taken it back while it was being synced.
      guard persistence.isKept(id) else {
        respond(.failure(CommandRefusal.withdrawn.error(defined: nil)))
        handedOver.done()
        return
      }
      then(SavedSchedule(request, id: id, due: due, rampSeconds: rampSeconds))
    }
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
    LocalClock.offset(instant)
  }

  /// The request as a saved schedule keeps it: no id, no `at`, answered when applied.
  private static func unscheduled(_ request: Request) -> Request {
    var kept = request
    kept.id = nil
    kept.at = nil
    kept.ack = .applied
    return kept
  }

  /// A schedule kept in the state file: its id, and how long its ramp lasts once it starts.
  struct SavedSchedule: Sendable {
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
  func acknowledgeSchedule(
    _ request: Request, confined: Bool, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void,
    handedOver: HandOver = .none
  ) {
    guard persistence != nil else {
      respond(.failure(ProtocolError(.internalError, field: "ack", "schedules cannot be saved")))
      handedOver.done()
      return
    }
    let commands: [Command]
    if case .batch(let requests) = request.command {
      commands = requests.map(\.command)
    } else {
      commands = [request.command]
    }
    // Checked before it is saved, so a bad request is refused now rather than at its time
    // (preparing may open files: off the loop).
    let preparation = preparation
    control.offload(.files) { () -> ProtocolError? in
      for (index, command) in commands.enumerated() {
        do throws(ProtocolError) {
          _ = try preparation.prepare(command, confined: confined)
        } catch {
          return commands.count > 1 ? error.prefixed("commands[\(index)]") : error
        }
      }
      return nil
    } then: { [self] refusal in
      if let refusal {
        respond(.failure(refusal))
        handedOver.done()
        return
      }
      save(request, field: "ack", confined: confined, respond: respond, handedOver: handedOver) { [self] record in
        defer { handedOver.done() }
        guard let record else { return }
        run(Self.unscheduled(request), record: record, at: .date(record.due), elapsed: 0, confined: confined)
        respond(.success(["scheduled": .integer(record.id), "due": .string(RFC3339.format(record.due))]))
      }
    }
  }

  /// Re-arms the schedules saved by an earlier run. One whose time passed while rampd was down
  /// takes effect now; a ramp among them starts as far along as it would be now (from the value
  /// it started from, when it had started), and one that would be over lands on its end value.
  func restore(_ schedules: [PersistedSchedule]) {
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

  /// Applies a saved schedule; its outcome goes to the log and to subscribers (`announcing`),
  /// since whoever asked is not waiting. A repeating one is then armed for its next time.
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
    whenDue(record, at: at, respond: respond) { [self] at, _ in
      if case .batch(let requests) = request.command {
        pipeline.submit(
          requests.map(\.command), at: at, respond: respond, fieldPrefix: "commands",
          saved: SavedRun(record: record, book: self),
          confined: confined
        ) { _ in .null }
      } else {
        pipeline.submit(
          [request.command], at: at, respond: respond, saved: SavedRun(record: record, book: self), elapsed: elapsed,
          confined: confined
        ) {
          $0[0]
        }
      }
    }
  }

  /// `respond`, after a `schedule-applied` event when the schedule took effect, or a
  /// `schedule-failed` one when it was refused (not when it was withdrawn: `unschedule`, or given
  /// way). A repeating one keeps its last refusal, which `schedules` and `status` show.
  func announcing(
    _ record: SavedSchedule, _ respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void
  ) -> @Sendable (Result<JSONValue, ProtocolError>) -> Void {
    { [self] result in
      let now = Date().timeIntervalSince1970
      let next = record.repeats?.next(after: max(now, record.due), start: record.due, offset: Self.localOffset)
      switch result {
      case .success:
        hub.broadcast(.scheduleApplied(schedule: record.id, cmd: record.cmd, tag: record.tag, next: next))
      case .failure(let error) where error != CommandRefusal.withdrawn.error(defined: nil):
        if record.repeats != nil { persistence?.failed(record.id, .init(at: now, error: error)) }
        hub.broadcast(
          .scheduleFailed(schedule: record.id, cmd: record.cmd, tag: record.tag, error: error, next: next))
      case .failure: break
      }
      respond(result)
    }
  }

  /// Runs `submit` with the schedule's time once it is near: a saved schedule waits on the wall
  /// clock (`WallClockSchedules`) and is turned into a sample only shortly before it is due.
  ///
  /// `submit` is given `handedOver` when it runs now; one that waits on the wall clock is handed
  /// over once it is kept there.
  func whenDue(
    _ record: SavedSchedule?, at: Schedule?, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void,
    handedOver: HandOver = .none, submit: @escaping @Sendable (Schedule?, HandOver) -> Void
  ) {
    // On a device without a clock a delay counts in samples from the request's arrival: it goes
    // to the render thread at once (the wall clock says nothing of where the samples are).
    guard let record else {
      submit(at, handedOver)
      return
    }
    // From here until its ticket is back it can be withdrawn (`HandedSchedules`).
    handed.depart(record.id)
    guard !pipeline.countsInSamples(at) else {
      submit(at, handedOver)
      return
    }
    defer { handedOver.done() }
    let limit = configuration.limits.pendingScheduled
    if wallClock.holds(due: record.due), pipeline.scheduledCount + wallClock.count >= limit {
      settle(record)
      respond(.failure(.pendingScheduledLimit(limit)))
      return
    }
    wallClock.add(record.id, due: record.due) { submit(at.map { _ in .date(record.due) }, .none) }
  }

  /// A schedule that did not take effect: forgotten, unless it repeats (it then comes again).
  func settle(_ record: SavedSchedule) {
    handed.settled(record.id)
    if record.repeats == nil { persistence?.finish(record.id) }
  }

  /// After a saved schedule applied: a ramp keeps its entry until it ends. A repeating one keeps
  /// its entry for its next time.
  func applied(_ record: SavedSchedule, from: Double?) {
    guard let persistence, record.repeats == nil else { return }
    let ends = record.due + (record.rampSeconds ?? 0)
    let left = ends - Date().timeIntervalSince1970
    guard let from, left > 0 else {
      persistence.finish(record.id)
      return
    }
    persistence.started(record.id, from: from)
    control.after(left) { persistence.finish(record.id) }
  }

  /// The saved schedules, soonest first, as `status` and `schedules` list them; `due` is the next
  /// time each takes effect.
  func scheduleList(withRequests: Bool) -> [JSONValue] {
    (persistence?.snapshot.schedules ?? []).map { entry in
      var object: JSONObject = [
        "schedule": .integer(entry.id), "due": .string(RFC3339.format(entry.due)),
        "cmd": entry.request["cmd"] ?? .null, "started": .bool(entry.from != nil),
      ]
      for key in ["repeat", "tag", "yield"] { object[key] = entry.request[key] }
      if let failure = entry.lastFailure, case .object(var error) = failure.error.json {
        error["at"] = .string(RFC3339.format(failure.at))
        object["lastFailure"] = .object(error)
      }
      if withRequests { object["request"] = .object(entry.request) }
      return .object(object)
    }
  }

  /// Removes the schedule `schedule`, or every one tagged `tag`, wherever it is: waiting on the
  /// wall clock, or already handed to the render thread for its sample (it then never applies).
  /// A ramp under way is forgotten (it is no longer resumed after a restart); one of a schedule
  /// that yields to a key path is held where it is, any other runs to its end.
  func unschedule(schedule: UInt64?, tag: String?) -> Result<JSONValue, ProtocolError> {
    guard let persistence else {
      return .failure(ProtocolError(.internalError, field: "schedule", "schedules cannot be saved"))
    }
    let entries = persistence.snapshot.schedules.filter { entry in
      schedule.map { entry.id == $0 } ?? (entry.request["tag"]?.stringValue == tag)
    }
    if let schedule, entries.isEmpty {
      return .failure(
        ProtocolError(.invalidField, field: "schedule", "schedule: no schedule \(schedule) is kept (see schedules)"))
    }
    let removed: [JSONValue] = entries.map { entry in
      [
        "schedule": .integer(entry.id), "cmd": entry.request["cmd"] ?? .null,
        "started": .bool(withdraw(entry) ?? false),
        "request": .object(entry.request),
      ]
    }
    return .success(["unscheduled": .array(removed)])
  }

  /// A request that changes a key path makes every schedule that yields to it give way: removed
  /// before it takes effect (even if already handed on for its sample); a ramp of one under way is
  /// held where it is (`cancel`), so the newer command takes over from the audible value.
  func giveWay(to command: Command) {
    // Most requests find no schedule at all: the keys are worked out only when one is kept.
    guard let schedules = persistence?.snapshot.schedules, !schedules.isEmpty,
      let keys = command.changedKeys, !keys.isEmpty
    else { return }
    for entry in schedules {
      guard let key = entry.request["yield"]?.stringValue, keys.contains(key) else { continue }
      guard withdraw(entry) != nil else { continue }
      logger.info("a schedule gave way to a newer command", metadata: ["schedule": "\(entry.id)", "key": "\(key)"])
    }
  }

  /// Takes schedule `entry` back wherever it is: whether it had applied already, or nil when it
  /// was no longer kept (withdrawn by another, or over). A ramp of one that yields to a key path
  /// is held where it is (on its own key path), before anything sent after this applies. Only
  /// the one withdrawal that removes the entry acts on it.
  private func withdraw(_ entry: PersistedSchedule) -> Bool? {
    guard let persistence else { return nil }
    // On the loop: a withdrawal is over before another (an `unschedule` and a newer command it
    // yields to, on two connections) looks.
    let withdrawal: HandedSchedules.Withdrawal?
    if wallClock.remove(entry.id) {
      handed.settled(entry.id)
      withdrawal = .beforeApplying
    } else {
      withdrawal = handed.withdraw(entry.id)
    }
    guard let removed = persistence.finish(entry.id) else { return nil }
    let rampKey: String?
    switch withdrawal {
    case .beforeApplying: return false
    case .afterApplying(let key): rampKey = key
    case nil:
      // Applied and back: a ramp keeps its entry, with where it started, while it is under way.
      guard removed.from != nil else { return false }
      rampKey = (try? Self.request(of: removed).get())?.command.rampKey
    }
    if removed.request["yield"] != nil, let rampKey { pipeline.hold(rampKey) }
    return true
  }

  /// The request a saved schedule keeps, parsed as it was received. Its `at` is not kept (the
  /// entry's `due` says when), but a `tag` or `yield` is only taken with one: one is given back
  /// (any: what counts is `due`), unless it repeats.
  static func request(of entry: PersistedSchedule) -> Result<Request, ProtocolError> {
    var object = entry.request
    if object["repeat"] == nil { object["at"] = .integer(0) }
    let (_, parsed) = Request.parse(utf8: Array(JSONValue.object(object).serialized().utf8))
    return parsed.map { request in
      var request = request
      request.at = nil
      return request
    }
  }
}

extension Command {
  /// The key path a saved schedule's ramp moves: a fade's (fade-in and fade-out too) that does
  /// nothing after it; nil for anything else.
  var rampKey: String? {
    guard case .fade(let fade) = self, fade.then == nil else { return nil }
    return fade.key
  }

  /// The key paths applying it changes (a transport fade-out counts for its key); nil for none.
  var changedKeys: Set<String>? {
    switch self {
    case .fade(let fade): return [fade.key]
    case .set(let set): return [set.key]
    case .animate(let animate): return [animate.key]
    case .cancel(let key), .remove(let key, _): return [key]
    case .batch(let requests):
      let keys = requests.reduce(into: Set<String>()) { $0.formUnion($1.command.changedKeys ?? []) }
      return keys.isEmpty ? nil : keys
    default: return nil
    }
  }
}
