import FoundationEssentials
import Logging
import NIOCore
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
  /// The key paths it observes; nil: it cannot observe (an offline show's lines).
  var observers: ConnectionObservers? { get }
}

extension Client {
  public var observers: ConnectionObservers? { nil }
}

/// The daemon's middle, and its router: every request comes here and goes where it belongs.
///
/// - The apply pipeline (`ApplyPipeline`) takes commands to the render thread: prepared here
///   (validation, opening files), applied there at the sample their `at` names or at the next
///   block.
/// - The schedule book (`ScheduleBook`) keeps saved schedules until they are due.
/// - The event hub (`EventHub`) keeps subscriptions and waits, and hands out what the render
///   thread posts: replies and events come back through the player's event queue and
///   `deliverEvents`, so the render thread never touches a socket.
/// - Observing is the connection's (`ConnectionObservers`), checked and published here.
///
/// All of it runs on one executor, the control loop (`ControlLoop`): requests, replies, events,
/// timers and saved schedules. What waits for the disk is done off it and comes back to it.
public final class Controller: Sendable {
  public let player: Player
  /// The `observe` rates taken over every connection (`[limits] observe-budget`).
  let observeBudget: ObserveBudget
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
  /// Where model values and acknowledged schedules are kept across restarts.
  public let persistence: Persistence?
  let pipeline: ApplyPipeline
  let schedules: ScheduleBook
  let hub: EventHub
  /// Where the control side runs.
  public let control: ControlLoop
  /// Set by `shutdown`, from any thread.
  private let stopping = Atomic<Bool>(false)
  /// How many clients are connected.
  private let connectedClients: @Sendable () -> Int

  /// - Parameters:
  ///   - persistence: where model values and schedules are kept; nil: nowhere (schedules are
  ///     then refused).
  ///   - persistedKeys: the key paths whose model values are persisted.
  ///   - clock: Unix seconds now, what a request's `at` delay counts from (an offline show's
  ///     clock stands at 0, so a delay is exactly its sample).
  ///   - connectedClients: how many clients are connected, for `status`.
  ///   - control: the loop the control side runs on.
  public init(
    player: Player, configuration: DaemonConfiguration, outputNotes: JSONObject = [:], fallbackNotes: JSONObject = [:],
    persistence: Persistence? = nil, persistedKeys: [String] = ["master.gain"],
    clock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 },
    connectedClients: @escaping @Sendable () -> Int = { 0 }, control: ControlLoop, logger: Logger
  ) {
    self.control = control
    observeBudget = ObserveBudget(control: control)
    self.player = player
    live = LiveConfiguration(configuration)
    self.outputNotes = outputNotes
    self.fallbackNotes = fallbackNotes
    self.logger = logger
    self.persistence = persistence
    self.connectedClients = connectedClients
    preparation = Preparation(
      live: live, player: player, streamNames: StreamNames(),
      loudnessMeter: LoudnessMeter(
        cachePath: directoryPart(of: configuration.state.resolvedPath()) + "/loudness.cache"))
    hub = EventHub(player: player, preparation: preparation, control: control, logger: logger)
    pipeline = ApplyPipeline(
      player: player, preparation: preparation, live: live, persistence: persistence, persistedKeys: persistedKeys,
      clock: clock, control: control, logger: logger)
    schedules = ScheduleBook(
      persistence: persistence, preparation: preparation, pipeline: pipeline, hub: hub, live: live, control: control,
      logger: logger)
  }

  /// The streams playing (or paused), in the order they started, as the events told. Off the
  /// loop (shutdown, a test) it waits for the loop to answer.
  public var playingStreams: [String] {
    (try? control.run { [hub] in hub.playingStreams }) ?? []
  }

  /// Refuses further requests.
  public func shutdown() {
    stopping.store(true, ordering: .releasing)
  }

  /// Re-arms the schedules saved by an earlier run (`ScheduleBook.restore`), on the loop.
  public func restore(_ saved: [PersistedSchedule]) {
    control.execute { [schedules] in schedules.restore(saved) }
  }

  /// Sends `event` to every client subscribed to its kind (from any thread: on the loop).
  public func broadcast(_ event: Event) {
    control.execute { [hub] in hub.broadcast(event) }
  }

  /// Hands out every reply and event the render thread has posted. On the loop: the server calls
  /// it whenever `player.eventDescriptor` becomes readable.
  public func deliverEvents() { hub.deliverEvents() }

  /// Forgets a client that disconnected.
  public func disconnected(_ client: any Client) { hub.disconnected(client) }

  /// Whether `client` receives events of some kind.
  func isSubscribed(_ client: any Client) -> Bool { hub.isSubscribed(client) }

  // MARK: Requests

  /// Runs `request` for `client`, on the loop; the reply arrives through `client.reply`, possibly
  /// later (a scheduled command replies when it takes effect, `wait` when the animations end).
  /// `handedOver` is called once it is handed on (queued for the render thread, kept for its
  /// time, answered or refused); a request that waits for the disk is handed on later, and a
  /// connection's next request waits for that, so its requests take effect in order.
  public func handle(_ request: Request, from client: any Client, sequence: Int, handedOver: HandOver = .none) {
    control.eventLoop.preconditionInEventLoop()
    // Handed on when this returns, unless a branch below passes it on.
    var handsOverLater = false
    defer { if !handsOverLater { handedOver.done() } }
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
    if request.yield == nil { schedules.giveWay(to: request.command) }
    if request.ack == .scheduled {
      handsOverLater = true
      schedules.acknowledgeSchedule(request, confined: confined, respond: respond, handedOver: handedOver)
      return
    }
    switch request.command {
    case .version:
      respond(.success(Preparation.versionResult))
    case .subscribe(let kinds):
      respond(.success(hub.subscribe(client, to: kinds)))
    case .unsubscribe(let kinds):
      respond(.success(hub.unsubscribe(client, from: kinds)))
    case .observe(let key, let rate):
      respond(observe(key, rate: rate, for: client))
    case .unobserve(let key):
      respond(unobserve(key, for: client))
    case .wait(let wait):
      hub.wait(wait, respond: respond)
    case .get(let key) where request.at == nil && Query.isMeasured(key):
      readMeasured(key, respond: respond)
    case .schedules:
      respond(.success(["schedules": .array(schedules.scheduleList(withRequests: true))]))
    case .unschedule(let schedule, let tag):
      respond(schedules.unschedule(schedule: schedule, tag: tag))
    case .status:
      pipeline.submit([.status], at: request.at, respond: respond) { [self] results in
        var status = results[0].objectValue ?? JSONObject()
        status["version"] = .string(RampdVersion.current)
        status["uptime"] = .number(Date().timeIntervalSince(startedAt))
        status["output"] = .object(outputStatus)
        status["clients"] = .integer(connectedClients())
        status["subscribers"] = .integer(hub.subscriberCount)
        status["scheduled"] = .array(schedules.scheduleList(withRequests: false))
        status["streams"] = preparation.queues.annotate(status["streams"])
        return .object(status)
      }
    case .batch(let requests):
      handsOverLater = true
      schedules.save(request, confined: confined, respond: respond, handedOver: handedOver) { [self] record in
        let respond = record.map { schedules.announcing($0, respond) } ?? respond
        schedules.whenDue(record, at: request.at, respond: respond, handedOver: handedOver) { [self] at, handedOver in
          pipeline.submit(
            requests.map(\.command), at: at, respond: respond, fieldPrefix: "commands",
            saved: record.map { SavedRun(record: $0, book: schedules) }, confined: confined, handedOver: handedOver
          ) { results in
            ["results": .array(results)]
          }
        }
      }
    default:
      handsOverLater = true
      let answerEarly = client.awaitsNoOtherReply
      // Not kept as a schedule (no `at`, or nowhere to keep it): straight on.
      guard request.isScheduled, persistence != nil else {
        pipeline.submit(
          [request.command], at: request.at, respond: respond, answerEarly: answerEarly, confined: confined,
          handedOver: handedOver
        ) { $0[0] }
        return
      }
      schedules.save(request, confined: confined, respond: respond, handedOver: handedOver) { [self] record in
        let respond = record.map { schedules.announcing($0, respond) } ?? respond
        schedules.whenDue(record, at: request.at, respond: respond, handedOver: handedOver) { [self] at, handedOver in
          pipeline.submit(
            [request.command], at: at, respond: respond, answerEarly: answerEarly,
            saved: record.map { SavedRun(record: $0, book: schedules) }, confined: confined, handedOver: handedOver
          ) { $0[0] }
        }
      }
    }
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

  // MARK: Observe

  /// Starts observing `key` for `client` at `rate` Hz, within the limits and the budget. Called on
  /// the client's event loop.
  private func observe(_ key: String, rate: Double, for client: any Client) -> Result<JSONValue, ProtocolError> {
    guard let observers = client.observers else {
      return .failure(ProtocolError(.invalidField, field: "cmd", "observe needs a connection to send values to"))
    }
    do {
      try Preparation.checkAddressable(key)
    } catch {
      return .failure(error)
    }
    let limits = configuration.limits
    guard rate <= limits.maxObserveRate else {
      return .failure(
        ProtocolError(
          .outOfRange, field: "rate", "\(rate) Hz is above limits.max-observe-rate (\(limits.maxObserveRate) Hz)"))
    }
    let replaced = observers.rate(of: key)
    if replaced == nil && observers.count >= limits.observersPerClient {
      return .failure(
        ProtocolError(
          .limitExceeded, field: "key", "\(limits.observersPerClient) key paths are observed, the most allowed"))
    }
    if let total = observeBudget.take(rate, replacing: replaced ?? 0, limit: limits.observeBudget) {
      return .failure(
        ProtocolError(
          .limitExceeded, field: "rate",
          "rate: \(JSONValue.format(rate)) Hz would bring the observe rates of every connection to"
            + " \(JSONValue.format(total)) Hz, above limits.observe-budget (\(JSONValue.format(limits.observeBudget)) Hz)"
        ))
    }
    let published: PublishedValue
    do {
      published = try player.publish(key)
    } catch {
      observeBudget.release(rate)
      return .failure(Self.refusal(error))
    }
    observers.start(key, published: published, rate: rate)
    return .success(["key": .string(key), "rate": .number(rate)])
  }

  /// Stops observing `key` (nil: every key path) for `client`.
  private func unobserve(_ key: String?, for client: any Client) -> Result<JSONValue, ProtocolError> {
    guard let observers = client.observers else {
      return .failure(ProtocolError(.invalidField, field: "cmd", "observe needs a connection to send values to"))
    }
    let keys = key.map { [$0] } ?? observers.keys
    if let key, observers.rate(of: key) == nil {
      return .failure(ProtocolError(.invalidField, field: "key", "key: '\(key)' is not observed"))
    }
    for key in keys { _ = observers.stop(key) }
    return .success(["keys": .array(keys.sorted().map { .string($0) })])
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
      published, deadline: .now() + ControlLoop.timeAmount(Player.levelWindow + Self.measuredTimeout), respond: respond)
  }

  /// Beyond the window, how long a level may take to be read before the reply says why it was not.
  static let measuredTimeout = 2.0

  private func pollMeasured(
    _ published: PublishedValue, deadline: NIODeadline,
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
    guard NIODeadline.now() < deadline, !stopping.load(ordering: .acquiring) else {
      player.unpublish(published)
      respond(
        .failure(
          ProtocolError(
            .timeout, field: "key",
            "'\(key)' was not measured within \(JSONValue.format(Player.levelWindow + Self.measuredTimeout)) s:"
              + " the output renders no audio (see status)")))
      return
    }
    control.after(Self.measuredPoll) { [self] in
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

}
