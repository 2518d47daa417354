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

/// Who hears what: event subscriptions, `wait`s for animations to end, and the render thread's
/// events and returned tickets, handed out as replies and broadcasts. Its state is the control
/// loop's (`ControlLoop`): every method runs there.
final class EventHub: Sendable {
  let player: Player
  let preparation: Preparation
  let logger: Logger
  let control: ControlLoop
  private let state: NIOLoopBoundBox<State>

  private struct State {
    var subscribers: [ObjectIdentifier: Subscription] = [:]
    var waits = WaitRegistry()
    /// The streams playing (or paused), in the order they started, as the events told.
    var playing: [String] = []
  }

  struct Subscription {
    weak var client: (any Client)?
    var kinds: Set<EventKind>
  }

  init(player: Player, preparation: Preparation, control: ControlLoop, logger: Logger) {
    self.player = player
    self.preparation = preparation
    self.control = control
    self.logger = logger
    state = .makeBoxSendingValue(State(), eventLoop: control.eventLoop)
  }

  /// The streams playing (or paused), in the order they started, as the events told.
  var playingStreams: [String] { state.value.playing }

  /// How many clients receive some kind of event.
  var subscriberCount: Int { state.value.subscribers.values.count { !$0.kinds.isEmpty } }

  // MARK: Wait

  func wait(_ wait: Wait, respond: @escaping @Sendable (Result<JSONValue, ProtocolError>) -> Void) {
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
    let token = state.value.waits.add(Set(awaited), respond: respond)
    if let timeout {
      control.after(timeout) { [self] in
        if let waiter = state.value.waits.remove(token) {
          waiter.respond(
            .failure(
              ProtocolError(
                .timeout, field: "timeout",
                "\(waiter.pending.count) animation(s) still running after \(timeout) s: \(waiter.pending.sorted())")))
        }
      }
    }
  }

  // MARK: Events

  /// Whether `client` receives events of some kind.
  func isSubscribed(_ client: any Client) -> Bool {
    state.value.subscribers[ObjectIdentifier(client)]?.kinds.isEmpty == false
  }

  func subscribe(_ client: any Client, to kinds: [EventKind]?) -> JSONValue {
    let wanted = Set(kinds ?? EventKind.allCases)
    let now = state.withValue { state in
      let key = ObjectIdentifier(client)
      var subscription = state.subscribers[key] ?? Subscription(client: client, kinds: [])
      subscription.kinds.formUnion(wanted)
      state.subscribers[key] = subscription
      return subscription.kinds
    }
    return ["events": .array(EventKind.allCases.filter(now.contains).map { .string($0.rawValue) })]
  }

  func unsubscribe(_ client: any Client, from kinds: [EventKind]?) -> JSONValue {
    let now = state.withValue { state in
      let key = ObjectIdentifier(client)
      guard var subscription = state.subscribers[key] else { return Set<EventKind>() }
      if let kinds { subscription.kinds.subtract(kinds) } else { subscription.kinds = [] }
      state.subscribers[key] = subscription
      return subscription.kinds
    }
    return ["events": .array(EventKind.allCases.filter(now.contains).map { .string($0.rawValue) })]
  }

  /// Forgets a client that disconnected.
  func disconnected(_ client: any Client) {
    state.value.subscribers[ObjectIdentifier(client)] = nil
  }

  func broadcast(_ event: Event) {
    guard let kind = event.kind else { return }
    let targets = state.value.subscribers.values.compactMap { $0.kinds.contains(kind) ? $0.client : nil }
    guard !targets.isEmpty else { return }
    let line = event.json.serializedLine()
    for client in targets { client.event(line) }
  }

  /// Hands out every reply and event the render thread has posted. The server calls it on its
  /// event loop whenever `player.eventDescriptor` becomes readable.
  func deliverEvents() {
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
        let (ending, by): (AnimationEnding, UInt64?) =
          switch report.ending {
          case .completed: (.completed, nil)
          case .superseded(let by): (.superseded, by)
          case .removed: (.removed, nil)
          }
        broadcast(
          .animationFinished(
            id: report.id, key: report.keyPath, name: report.key, finished: report.finished, sample: report.sample,
            ending: ending, by: by))
      }
      let finished = state.value.waits.finish(report.id, finished: report.finished)
      for waiter in finished { waiter.answer() }
    case .streamStarted(let id, let path):
      state.value.playing.append(id)
      logger.info("stream started", metadata: ["stream": "\(id)", "path": "\(path)"])
      broadcast(.streamStarted(stream: id, path: path))
    case .streamEnded(let id, let reason):
      state.value.playing.removeAll { $0 == id }
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
    let awaited = state.value.waits.pendingIDs
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
      for waiter in state.value.waits.lose(gone) { waiter.answer() }
    }
    player.submit(ticket)
  }
}

/// Clients waiting for animations to end: the event hub's, on the control loop.
struct WaitRegistry {
  final class Waiter {
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
