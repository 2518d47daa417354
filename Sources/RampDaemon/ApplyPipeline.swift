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

/// How prepared commands reach the render thread: prepared together, journaled and saved where a
/// change must outlive a kill, converted to the sample they apply at, queued with a ticket whose
/// return settles what waits on it (the reply, the journal, a saved schedule's book).
///
/// Runs on the control loop; what waits for the disk (opening files, saving duck rules) is done
/// off it first (`ControlLoop.offload`).
final class ApplyPipeline: Sendable {
  let player: Player
  let preparation: Preparation
  let live: LiveConfiguration
  let persistence: Persistence?
  /// The key paths whose model values are persisted.
  let persistedKeys: [String]
  /// Unix seconds now: what a request's `at` delay counts from (an offline show's clock stands
  /// at 0, so a delay is exactly its sample).
  let clock: @Sendable () -> Double
  let logger: Logger
  let control: ControlLoop
  /// Commands queued for a sample of their own and not yet back.
  private let scheduled: NIOLoopBoundBox<Int>

  init(
    player: Player, preparation: Preparation, live: LiveConfiguration, persistence: Persistence?,
    persistedKeys: [String], clock: @escaping @Sendable () -> Double, control: ControlLoop, logger: Logger
  ) {
    self.control = control
    scheduled = .makeBoxSendingValue(0, eventLoop: control.eventLoop)
    self.player = player
    self.preparation = preparation
    self.live = live
    self.persistence = persistence
    self.persistedKeys = persistedKeys
    self.clock = clock
    self.logger = logger
  }

  private var configuration: DaemonConfiguration { live.current }

  /// How many commands wait on the render thread for their sample.
  var scheduledCount: Int { scheduled.value }

  /// What is done before a command reaches the loop's part of the pipeline, off the loop when it
  /// waits for the disk: the commands prepared, and duck rules saved.
  private struct Prepared: Sendable {
    let operations: [Operation]
    let duckUndo: Persistence.DuckUndo?
  }

  /// Prepares `commands`, then applies them all at one sample on the render thread, or none.
  /// `handedOver` is called once they are queued there or refused: the connection's next request
  /// may go then.
  func submit(
    _ commands: [Command], at schedule: Schedule?,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void,
    fieldPrefix: String? = nil, answerEarly: Bool = false, saved: SavedRun? = nil, elapsed: Double = 0,
    confined: Bool = false, handedOver: HandOver = .none, combine: @escaping @Sendable ([JSONValue]) -> JSONValue
  ) {
    // A change of the duck rules is saved before it is queued, as a schedule is: the reply that
    // follows is for rules that survive a kill. What the render thread refuses is put back. One
    // for a sample of its own is saved once it applied instead (its schedule is saved meanwhile):
    // saved now, it would be in force after a restart before its time, and out of order with
    // changes made meanwhile.
    let changesDuckRules = commands.contains(where: \.changesDuckRules)
    let savesDucks = persistence != nil && schedule == nil && changesDuckRules
    // Most commands open nothing: prepared here, at once (no closure to allocate on the way).
    guard commands.contains(where: \.opensFiles) else {
      proceed(
        Self.prepare(
          commands, preparation: preparation, elapsed: elapsed, confined: confined, fieldPrefix: fieldPrefix),
        commands: commands, at: schedule, respond: respond, fieldPrefix: fieldPrefix, answerEarly: answerEarly,
        saved: saved, savesDucks: savesDucks, handedOver: handedOver, combine: combine)
      return
    }
    let preparation = preparation
    control.offload(.files) {
      Self.prepare(commands, preparation: preparation, elapsed: elapsed, confined: confined, fieldPrefix: fieldPrefix)
    } then: { [self] prepared in
      proceed(
        prepared, commands: commands, at: schedule, respond: respond, fieldPrefix: fieldPrefix,
        answerEarly: answerEarly,
        saved: saved, savesDucks: savesDucks, handedOver: handedOver, combine: combine)
    }
  }

  /// Prepares every command, or says why one cannot be.
  private static func prepare(
    _ commands: [Command], preparation: Preparation, elapsed: Double, confined: Bool, fieldPrefix: String?
  ) -> Result<[Operation], ProtocolError> {
    var operations: [Operation] = []
    operations.reserveCapacity(commands.count)
    for (index, command) in commands.enumerated() {
      do throws(ProtocolError) {
        operations.append(try preparation.prepare(command, elapsed: elapsed, confined: confined))
      } catch {
        return .failure(fieldPrefix.map { error.prefixed("\($0)[\(index)]") } ?? error)
      }
    }
    return .success(operations)
  }

  /// Back on the loop with the commands prepared: duck rules saved first (on the disk's one lane,
  /// so rules are saved, and then applied, in the order they came), then applied.
  private func proceed(
    _ prepared: Result<[Operation], ProtocolError>, commands: [Command], at schedule: Schedule?,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void, fieldPrefix: String?,
    answerEarly: Bool, saved: SavedRun?, savesDucks: Bool, handedOver: HandOver,
    combine: @escaping @Sendable ([JSONValue]) -> JSONValue
  ) {
    guard case .success(let operations) = prepared, savesDucks, let persistence else {
      finish(
        prepared.map { Prepared(operations: $0, duckUndo: nil) }, commands: commands, at: schedule, respond: respond,
        fieldPrefix: fieldPrefix, answerEarly: answerEarly, saved: saved, handedOver: handedOver, combine: combine)
      return
    }
    control.offload(.disk) { () -> Result<Prepared, ProtocolError> in
      guard let undo = persistence.record(ducks: commands) else {
        return .failure(
          ProtocolError(.internalError, "the duck rules could not be saved (see rampd's log); nothing was changed"))
      }
      return .success(Prepared(operations: operations, duckUndo: undo))
    } then: { [self] prepared in
      finish(
        prepared, commands: commands, at: schedule, respond: respond, fieldPrefix: fieldPrefix,
        answerEarly: answerEarly, saved: saved, handedOver: handedOver, combine: combine)
    }
  }

  /// Applies what was prepared, or refuses; then the request is handed on.
  private func finish(
    _ prepared: Result<Prepared, ProtocolError>, commands: [Command], at schedule: Schedule?,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void, fieldPrefix: String?,
    answerEarly: Bool, saved: SavedRun?, handedOver: HandOver, combine: @escaping @Sendable ([JSONValue]) -> JSONValue
  ) {
    defer { handedOver.done() }
    switch prepared {
    case .failure(let error):
      saved?.settle()
      respond(.failure(error))
    case .success(let prepared):
      apply(
        prepared, commands: commands, at: schedule, respond: respond, fieldPrefix: fieldPrefix,
        answerEarly: answerEarly, saved: saved, combine: combine)
    }
  }

  /// The loop's part: the sample, the journal, the ticket, the queue.
  private func apply(
    _ prepared: Prepared, commands: [Command], at schedule: Schedule?,
    respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void, fieldPrefix: String?,
    answerEarly: Bool, saved: SavedRun?, combine: @escaping @Sendable ([JSONValue]) -> JSONValue
  ) {
    let operations = prepared.operations
    let duckUndo = prepared.duckUndo
    let changesDuckRules = commands.contains(where: \.changesDuckRules)
    let changesModels = commands.contains { $0.mayChangeModels }
    let persistedKeys = persistence == nil ? [] : persistedKeys
    let rampKey = saved?.rampSeconds != nil ? commands.first?.rampKey : nil
    /// Refuses it once it is counted among the scheduled ones (if it has a schedule).
    func refuse(_ error: ProtocolError) {
      if schedule != nil { scheduled.value -= 1 }
      saved?.settle()
      respond(.failure(error))
    }
    var sample: Int64?
    if let schedule {
      let limit = configuration.limits.pendingScheduled
      scheduled.value += 1
      guard scheduled.value <= limit else {
        refuse(.pendingScheduledLimit(limit))
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
    let logger = logger
    let atSample = sample != nil
    // Model values are read after the command only when it may have changed them (an early answer
    // recorded its change already: the ticket only settles it).
    let ticket = DaemonTicket(
      all, player: player, fieldPrefix: fieldPrefix, rampKey: rampKey,
      persistedKeys: changesModels && early == nil ? persistedKeys : [], keepsResults: foregone == nil,
      scheduled: atSample
    ) { [self] ticket in
      if schedule != nil { scheduled.value -= 1 }
      if !ticket.models.isEmpty || early != nil { persistence?.record(values: ticket.models, settling: early?.key) }
      /// The schedule's book hears how it ended, then the request is answered.
      @Sendable func settle() {
        if let saved {
          if case .success = ticket.result { saved.applied(from: ticket.rampFrom) } else { saved.settle() }
        }
        guard foregone == nil else {
          if case .failure(let error) = ticket.result {
            logger.error("an acknowledged command failed", metadata: ["error": "\(error.message)"])
          }
          return
        }
        respond(ticket.result.map { combine($0.arrayValue ?? []) })
      }
      if case .failure = ticket.result, let duckUndo {
        // Those before the refused one applied (a batch whose commands changed things for each other).
        undo(duckUndo, from: ticket.applied)
      } else if case .success = ticket.result, atSample, changesDuckRules, let persistence {
        // Saved once it applied, and answered once saved (on the disk's lane, after the saves
        // before it): an acknowledged rule change outlives a kill.
        control.offload(.disk) {
          if persistence.record(ducks: commands) == nil {
            logger.error("a scheduled duck rule change applied but could not be saved (see above)")
          }
        } then: { _ in
          settle()
        }
        return
      }
      settle()
    }
    // A saved schedule withdrawn on its way here is not queued (`HandedSchedules`).
    if let saved, !saved.hand(ticket) {
      if let duckUndo { undo(duckUndo, from: 0) }
      refuse(CommandRefusal.withdrawn.error(defined: nil))
      return
    }
    if let early { persistence?.acknowledgeEarly(early.key, value: early.value) }
    // An acknowledged change lands on the next block's first sample whether or not the render
    // thread is woken for it now.
    let accepted = player.submit(ticket, at: sample, wake: foregone == nil)
    if !accepted {
      if let duckUndo { undo(duckUndo, from: 0) }
      // Refused after all: the key path's value is recorded again from the next command.
      if let early { persistence?.record(values: [:], settling: early.key) }
      refuse(.commandQueueFull)
    } else if let foregone {
      respond(.success(combine([foregone])))
    }
  }

  /// Puts back saved duck rules the render thread refused, on the disk's lane (after the save).
  private func undo(_ undo: Persistence.DuckUndo, from index: Int) {
    guard let persistence else { return }
    control.offload(.disk) { persistence.undo(undo, from: index) }
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
  func countsInSamples(_ schedule: Schedule?) -> Bool {
    guard case .delay = schedule else { return false }
    return player.deviceHasNoClock
  }

  /// Holds `key` at its audible value, dropping its animations (`cancel`): a ramp whose
  /// schedule gave way stops where it is, and the newer command takes over from there.
  func hold(_ key: String) {
    submit([.cancel(key: key)], at: nil, respond: { _ in }, combine: { $0[0] })
  }
}

/// Called once a request has been handed on (queued for the render thread, kept on the wall
/// clock, or refused): a connection hands on its requests one after another, so they take effect
/// in the order they came even when one waited for the disk.
public struct HandOver: Sendable {
  private let target: (any HandOverTarget)?

  /// Nobody waits.
  public static let none = HandOver(nil)

  public init(_ target: (any HandOverTarget)?) {
    self.target = target
  }

  public func done() { target?.handedOn() }
}

/// What waits for a request to be handed on (a connection, to hand on its next).
public protocol HandOverTarget: AnyObject, Sendable {
  /// On the control loop.
  func handedOn()
}

/// A saved schedule on its way through the pipeline: its book hears how it ended.
struct SavedRun: Sendable {
  let record: ScheduleBook.SavedSchedule
  let book: ScheduleBook

  var rampSeconds: Double? { record.rampSeconds }
  /// False when the schedule was withdrawn on its way (its ticket is then not queued).
  func hand(_ ticket: DaemonTicket) -> Bool { book.handed.hand(record.id, ticket) }
  /// It did not take effect.
  func settle() { book.settle(record) }
  /// It took effect (what it started, recorded first: a withdrawal that no longer finds it reads that).
  func applied(from: Double?) {
    book.applied(record, from: from)
    book.handed.settled(record.id)
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
