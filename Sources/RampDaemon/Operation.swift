import RampAudio
import RampEngine
import RampProtocol
import Synchronization

/// A command made ready on a control thread: validated, its files opened, its animations
/// compiled, its key paths built. On the render thread `check` looks at the state without
/// changing it (so a batch can refuse everything before applying anything) and `apply` commits
/// it, recording what happened in an `Outcome`; the reply and the events are built from that
/// outcome afterwards, off the render thread (`reply`, `event`).
enum Operation: Sendable {
  /// Known without the render thread (ping, version).
  case answer(JSONValue)
  /// Reads the render thread's state (get, list, status) or changes its duck rules, into storage
  /// reserved for it (Readout.swift).
  case query(Query)
  case play(PreparedStream, limit: Int)
  /// `field`: what named the stream (a fade-out's `key`).
  case transport(PreparedTransport, field: String)
  case seek(Seek)
  case fade(FadePlan)
  case set(SetPlan)
  case animate(AnimatePlan)
  case cancel(key: String)
  case remove(key: String, name: String?, declick: PreparedAnimation?)
  /// `queue-add`, `queue-remove`, `queue-clear`, `next`, `previous` (QueuePreparation.swift).
  case queue(QueueStep)

  /// A fade made ready: the animation compiled, its start (when it gives none) taken from the
  /// value audible at the commit.
  struct FadePlan: Sendable {
    let key: String
    let to: Double
    let from: Double?
    let duration: Double
    let name: String
    let animation: PreparedAnimation
  }

  struct SetPlan: Sendable {
    let key: String
    let value: Double
    let field: String
    /// The implicit animation (nil: the change is instant).
    let action: PreparedAnimation?
  }

  struct AnimatePlan: Sendable {
    let key: String
    let name: String
    let animation: PreparedAnimation
  }

  /// What applying it did, as plain values: written on the render thread into storage the
  /// ticket reserved, read on the control side.
  struct Outcome {
    /// The animation it started, and the sample it begins at.
    var animation: UInt64?
    var sample: Int64 = 0
    /// A key path's model value afterwards (cancel, remove).
    var value = 0.0
  }

  /// The result, when it is known before the render thread applies the change because nothing
  /// there can make it fail (an instant `set` of master.gain): the reply need not wait for it.
  var foregoneResult: JSONValue? {
    guard case .set(let plan) = self, plan.key == "master.gain", plan.action == nil else { return nil }
    return plan.instantResult
  }

  /// Whether it names a key path the render thread may not know (and refuse with a suggestion).
  var namesKeyPath: Bool {
    switch self {
    case .fade, .set, .animate, .cancel, .remove: return true
    case .query(let query): return query.namesKeyPath
    default: return false
    }
  }

  /// Whether applying it may change what is heard (`RenderCommand.changesSound`): not a reply
  /// known beforehand, nor a query that reads.
  var changesSound: Bool {
    switch self {
    case .answer: return false
    case .query(let query): return query.changesSound
    default: return true
    }
  }

  /// The objects its payload holds (`DaemonTicket.held`).
  var heldObjects: [AnyObject] {
    switch self {
    case .answer, .seek, .cancel: return []
    case .query(let query): return query.heldObjects
    case .play(let stream, _): return [stream]
    case .transport(let transport, _): return [transport]
    case .fade(let plan): return [plan.animation]
    case .set(let plan): return plan.action.map { [$0] } ?? []
    case .animate(let plan): return [plan.animation]
    case .remove(_, _, let declick): return declick.map { [$0] } ?? []
    case .queue(.install(let install, _)): return [install]
    case .queue(.skip(let skip, _)): return [skip]
    }
  }

  /// Render thread: why it cannot be applied now, if it cannot.
  func check(_ state: RenderState) -> CommandRefusal? {
    switch self {
    case .answer: return nil
    case .query(let query): return query.check(state)
    case .play(let stream, let limit):
      if state.contains(stream: stream.id) {
        return .streamExists(stream.id, stopping: state.isStopping(stream: stream.id))
      }
      if state.streamCount >= limit { return .streamLimit(limit) }
      return nil
    case .transport(let transport, let field):
      return transport.stream.flatMap { Preparation.checkStream($0, field: field, in: state) }
    case .seek(let seek):
      return Preparation.checkStream(seek.stream, in: state)
        ?? Preparation.checkPosition(seek.position, of: seek.stream, in: state)
    case .fade(let plan):
      return Preparation.checkKey(plan.key, value: plan.to, field: "to", in: state)
        ?? plan.from.flatMap { Preparation.checkKey(plan.key, value: $0, field: "from", in: state) }
        ?? Self.engineRefusal { () throws(EngineError) in
          try state.engine.check(plan.animation, model: plan.to)
        }
    case .set(let plan):
      return Preparation.checkKey(plan.key, value: plan.value, field: plan.field, in: state)
        ?? Self.engineRefusal { () throws(EngineError) in
          guard let action = plan.action, let handle = state.engine.handleIfDefined(plan.key) else { return }
          try state.engine.check(set: action, on: handle, to: plan.value)
        }
    case .animate(let plan):
      return Preparation.checkKey(plan.key, in: state)
        ?? Self.engineRefusal(underAnimation: true) { () throws(EngineError) in
          try state.engine.check(plan.animation)
        }
    case .cancel(let key), .remove(let key, nil, _):
      return Preparation.checkKey(key, in: state)
    case .remove(let key, let name?, _):
      return Preparation.checkKey(key, in: state)
        ?? Self.engineRefusal { () throws(EngineError) in
          guard let handle = state.engine.handleIfDefined(key) else { return }
          try state.engine.checkRemoval(forKey: name, on: handle)
        }
    case .queue(let step):
      return state.playsQueue(step.stream) ? nil : .noQueue(step.stream)
    }
  }

  /// Render thread: what the engine would refuse when `body`'s command is committed.
  private static func engineRefusal(underAnimation: Bool = false, _ body: () throws(EngineError) -> Void)
    -> CommandRefusal?
  {
    do throws(EngineError) {
      try body()
      return nil
    } catch {
      return .engine(error, underAnimation: underAnimation)
    }
  }

  /// Render thread: commits it, or says why the engine refused it. A check passed leaves that
  /// only for what an earlier command of the same batch changed (the animations on a key path,
  /// the value a fade resolves its start to). Allocation-free either way.
  func apply(_ state: RenderState, _ outcome: inout Outcome, player: Player) throws(CommandRefusal) {
    let engine = state.engine
    switch self {
    case .answer:
      return
    case .query(let query):
      query.apply(state)
    case .play(let stream, _):
      switch stream(state) {
      case .success: break
      case .failure(.alreadyPlaying):
        throw .streamExists(stream.id, stopping: state.isStopping(stream: stream.id))
      case .failure(.refused(let error)): throw .engine(error)
      }
      if let fadeIn = stream.fadeIn {
        outcome.animation = fadeIn.id
        outcome.sample = fadeIn.sample
      }
    case .transport(let transport, _):
      transport.commit(state)
    case .seek(let seek):
      player.seek(seek.stream, to: seek.position, in: state)
    case .fade(let plan):
      do throws(EngineError) {
        // The model becomes the target, so the value stays there when the fade is over; the
        // fade starts from the value audible now (beneath the additive layers, which go on), so
        // nothing jumps.
        outcome.animation = try engine.commit(plan.animation, model: plan.to)
        outcome.sample = engine.now
      } catch {
        throw .engine(error)
      }
    case .set(let plan):
      do throws(EngineError) {
        outcome.animation = try engine.set(plan.key, to: plan.value, action: plan.action)
        outcome.sample = engine.now
      } catch {
        throw .engine(error)
      }
    case .animate(let plan):
      do throws(EngineError) {
        outcome.animation = try engine.commit(plan.animation)
        outcome.sample = plan.animation.beginOnOwnProperty ?? engine.now
      } catch {
        throw .engine(error, underAnimation: true)
      }
    case .cancel(let key):
      do throws(EngineError) {
        try engine.cancel(key)
        outcome.value = try engine.model(key)
      } catch {
        throw .engine(error)
      }
    case .remove(let key, let name, let declick):
      do throws(EngineError) {
        if let name {
          try engine.removeAnimation(forKey: name, from: key, declick: declick)
        } else {
          try engine.removeAllAnimations(from: key, declick: declick)
        }
        outcome.value = try engine.model(key)
      } catch {
        throw .engine(error)
      }
    case .queue(let step):
      step.apply(state, &outcome)
    }
  }

  /// Control side, after it applied: its reply.
  func reply(_ outcome: Outcome) -> JSONValue {
    switch self {
    case .answer(let result): return result
    case .query(let query): return query.reply()
    case .play(let stream, _):
      var reply: JSONObject = [
        "stream": .string(stream.id), "path": .string(stream.path),
        "animation": outcome.animation.map { .integer($0) } ?? .null,
      ]
      if let trim = stream.trim { reply["loudness"] = Preparation.describe(trim) }
      return .object(reply)
    case .transport(let transport, _):
      return [
        "streams": .array(transport.changes.map { .string($0.stream) }),
        "animations": .array(transport.changes.compactMap { $0.animation.map { .integer($0) } }),
      ]
    case .seek(let seek):
      return ["stream": .string(seek.stream), "position": .number(seek.position)]
    case .fade(let plan):
      return [
        "key": .string(plan.key), "animation": outcome.animation.map { .integer($0) } ?? .null,
        "to": .number(plan.to), "duration": .number(plan.duration),
      ]
    case .set(let plan):
      guard let id = outcome.animation else { return plan.instantResult }
      return ["key": .string(plan.key), "animation": .integer(id), "value": .number(plan.value)]
    case .animate(let plan):
      return ["key": .string(plan.key), "animation": outcome.animation.map { .integer($0) } ?? .null]
    case .cancel(let key), .remove(let key, _, _):
      return ["key": .string(key), "value": .number(outcome.value)]
    case .queue(let step):
      return step.reply(outcome)
    }
  }

  /// Control side, after it applied: the animation it started, as an event.
  func event(_ outcome: Outcome) -> Event? {
    guard let id = outcome.animation else { return nil }
    switch self {
    case .play(let stream, _):
      return .animationStarted(id: id, key: "streams.\(stream.id).gain", name: "fade-in", sample: outcome.sample)
    case .fade(let plan):
      return .animationStarted(id: id, key: plan.key, name: plan.name, sample: outcome.sample)
    case .set(let plan):
      return .animationStarted(
        id: id, key: plan.key, name: AnimationEngine.implicitActionKey, sample: outcome.sample)
    case .animate(let plan):
      return .animationStarted(id: id, key: plan.key, name: plan.name, sample: outcome.sample)
    default:
      return nil
    }
  }
}

extension Operation.SetPlan {
  var instantResult: JSONValue { ["key": .string(key), "animation": .null, "value": .number(value)] }
}

/// A request's commands on their way to the render thread and back: the operations prepared,
/// room for what each did, and the reply and events built from that once it is back.
final class DaemonTicket: CommandTicket, RenderCommand, @unchecked Sendable {
  private(set) var result: Result<JSONValue, ProtocolError> = .failure(
    ProtocolError(.internalError, "the command did not run"))
  /// The events the command caused (built by `settle`).
  private(set) var events: [Event] = []
  /// A ramp's key path value just before the command applied (for a saved schedule).
  private(set) var rampFrom: Double?
  let deliver: @Sendable (DaemonTicket) -> Void

  private let operations: [Operation]
  /// The objects the operations hold, by plain reference too. Swift keeps an enum's case in the
  /// spare bits of its payload's pointer (a fade's animation), where LeakSanitizer's scan does not
  /// recognise the pointer: without these, a command waiting for its sample is reported leaked.
  private let held: [AnyObject]
  private let player: Player
  private var outcomes: ContiguousArray<Operation.Outcome>
  /// How many operations applied (set on the render thread; the events of those that did go out
  /// even when a later one was refused).
  private(set) var applied = 0
  /// Why operation `refused` was refused (set on the render thread; the error is built in `settle`).
  private var refusal: CommandRefusal?
  private var refused = 0
  /// Room for the key paths defined when one named is not (for operations that name one).
  private let defined: KeyPathNames?
  /// A refusal's field goes under `fieldPrefix[index]` (a batch's `commands`).
  private let fieldPrefix: String?
  /// The key path of the ramp it starts, for a saved schedule's ramp (nil: none).
  let rampKey: String?
  /// The persisted key paths whose model values are read after the command (empty: none).
  private let persistedKeys: [String]
  private var modelValues: ContiguousArray<Double>
  /// False when the request was answered before it applied: `settle` builds no reply.
  private let keepsResults: Bool
  /// Some operation may change what is heard; a ticket of reads only rewinds nothing.
  let changesSound: Bool
  /// Times a ticket of reads only was queued again with more room (`growReadouts`).
  private var regrown = 0
  /// Reads only, at no sample of their own: read again when cut short.
  private let rereads: Bool
  /// Whether it committed or was withdrawn first (`Fate`): decided once, by whichever comes first.
  private let fate = Atomic<UInt8>(Fate.pending.rawValue)

  private enum Fate: UInt8 {
    case pending, committed, withdrawn
  }

  init(
    _ operations: [Operation], player: Player, fieldPrefix: String?, rampKey: String?, persistedKeys: [String],
    keepsResults: Bool = true, scheduled: Bool = false, deliver: @escaping @Sendable (DaemonTicket) -> Void
  ) {
    self.keepsResults = keepsResults
    self.deliver = deliver
    self.operations = operations
    held = operations.flatMap(\.heldObjects)
    changesSound = operations.contains(where: \.changesSound)
    // Applied with a change, or at a sample of its own, a read cannot be made again: it has room
    // for everything at once.
    rereads = !changesSound && !scheduled
    if !rereads {
      for case .query(let query) in operations { query.reserveForAll(player: player) }
    }
    self.player = player
    defined =
      operations.contains(where: \.namesKeyPath) ? KeyPathNames(capacity: player.renderCapacity.properties) : nil
    outcomes = ContiguousArray(repeating: Operation.Outcome(), count: operations.count)
    self.fieldPrefix = fieldPrefix
    self.rampKey = rampKey
    self.persistedKeys = persistedKeys
    modelValues = ContiguousArray(repeating: .nan, count: persistedKeys.count)
  }

  /// Render thread: checks every operation, then applies them all, or none (but for what one
  /// operation changes for a later one, which the checks before cannot see: those before the
  /// refused one stay applied); the ticket then goes back with the events, and what refused one,
  /// as plain values. Allocation-free.
  func commit(_ state: RenderState) {
    defer { state.complete(self) }
    guard
      fate.compareExchange(
        expected: Fate.pending.rawValue, desired: Fate.committed.rawValue, ordering: .acquiringAndReleasing
      ).exchanged
    else {
      refusal = .withdrawn
      return
    }
    var index = 0
    while index < operations.count {
      if let refusal = operations[index].check(state) {
        if case .unknownKey = refusal { defined?.read(state.engine) }
        self.refusal = refusal
        refused = index
        return
      }
      index += 1
    }
    if let rampKey { rampFrom = try? state.engine.presentation(rampKey) }
    // Read even after a refusal part-way: what applied before it stays applied.
    defer {
      var key = 0
      while key < persistedKeys.count {
        modelValues[key] = (try? state.engine.model(persistedKeys[key])) ?? .nan
        key += 1
      }
    }
    while applied < operations.count {
      do throws(CommandRefusal) {
        try operations[applied].apply(state, &outcomes[applied], player: player)
      } catch {
        refusal = error
        refused = applied
        return
      }
      applied += 1
    }
  }

  /// Any thread: takes it back before the render thread commits it (it then applies nothing and
  /// is refused as withdrawn); false when it had already committed.
  func withdraw() -> Bool {
    fate.compareExchange(
      expected: Fate.pending.rawValue, desired: Fate.withdrawn.rawValue, ordering: .acquiringAndReleasing
    ).exchanged
  }

  /// Control side, once back: for a ticket of reads only that found more than it had room for,
  /// room for what it found, and true: it is to be queued again (reading twice changes nothing).
  func growReadouts() -> Bool {
    guard rereads, regrown < 3 else { return false }
    var grew = false
    for case .query(let query) in operations where query.grow(attempt: regrown + 1, player: player) { grew = true }
    guard grew else { return false }
    regrown += 1
    // The others read again too: empty, as they were queued.
    for case .query(let query) in operations { query.readout.clear() }
    applied = 0
    fate.store(Fate.pending.rawValue, ordering: .releasing)
    refusal = nil
    refused = 0
    events = []
    return true
  }

  /// Control side: it could not be queued again; its reply says so.
  func refuseAsQueueFull() {
    result = .failure(.commandQueueFull)
  }

  private func prefixed(_ error: ProtocolError, _ index: Int) -> ProtocolError {
    fieldPrefix.map { error.prefixed("\($0)[\(index)]") } ?? error
  }

  /// Control side, once back: builds the reply (one result per operation), or the error that
  /// refused it, and the events.
  func settle() {
    for index in 0..<applied {
      if let event = operations[index].event(outcomes[index]) { events.append(event) }
    }
    if let refusal {
      result = .failure(prefixed(refusal.error(defined: defined), refused))
      return
    }
    guard applied == operations.count else { return }
    result = .success(keepsResults ? .array(zip(operations, outcomes).map { $0.reply($1) }) : .null)
  }

  /// Model values of the persisted key paths after the command, when it may have changed them.
  var models: [String: Double] {
    var models: [String: Double] = [:]
    for (key, value) in zip(persistedKeys, modelValues) where !value.isNaN { models[key] = value }
    return models
  }
}

extension ProtocolError {
  /// The render thread's command queue had no room for a command.
  static let commandQueueFull = ProtocolError(.limitExceeded, "the render thread's command queue is full; try again")

  /// `limit` commands wait for their time already (`[limits] pending-scheduled`).
  static func pendingScheduledLimit(_ limit: Int) -> ProtocolError {
    ProtocolError(.limitExceeded, field: "at", "\(limit) commands are already scheduled (limits.pending-scheduled)")
  }
}

/// Key paths the daemon keeps for itself: the transport ramps that start, pause and stop streams.
enum InternalKeyPath {
  static func isInternal(_ keyPath: String) -> Bool { keyPath.hasSuffix(".transport") }

  /// Gains are bounded by `gain.max`; other properties by their own range.
  static func isGain(_ keyPath: String) -> Bool { keyPath == "master.gain" || keyPath.hasSuffix(".gain") }

  /// The stream a `streams.<id>.…` key path belongs to.
  static func stream(of keyPath: String) -> String? {
    let parts = keyPath.split(separator: ".")
    guard parts.count == 3, parts[0] == "streams" else { return nil }
    return String(parts[1])
  }
}
