import FoundationEssentials
import RampClient
import RampProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// What the bridge needs besides the broker's settings.
struct BridgeSettings: Sendable {
  var box: String
  var socket: String
  /// How often (Hz) rampd is asked to report an observed value: the most state messages a
  /// second per key path.
  var stateRate: Double
  var discoveryPrefix: String
  var maximumPercent: Double
}

/// rampd-mqtt itself: command messages from the broker become requests on rampd's socket, and
/// rampd's observed values and events become retained state messages.
///
/// Two threads do the work: libmosquitto's network thread calls `received` for each message and
/// sends the request at once; the rampd thread connects to rampd (again, with back-off, when it
/// goes away) and reads its replies and events. What they share is behind `lock`. A command
/// that arrives while rampd cannot be reached waits (up to `maximumWaiting`) and is sent when it
/// comes back; one sent and not answered when rampd went away is sent again, so a command the
/// broker delivered is not lost with rampd.
final class Bridge: @unchecked Sendable {
  /// A command received, and the message it came from (to say which one an error is about).
  struct Submitted {
    var topic: String
    var payload: String
    var request: Request
  }

  private enum Pending {
    case command(Submitted)
    /// The bridge's own requests (subscribe, observe, status): a refusal is only logged.
    case own(String)
    case status
    /// `duck-list`, for the duck switches.
    case ducks
    /// `queue-list` of a stream that started: answered for a queue stream, refused for another.
    case queueProbe(String)
  }

  static let maximumWaiting = 1024
  static let maximumInFlight = 1024
  /// Errors published a second at most; beyond that they are counted and logged.
  static let errorsPerSecond = 20.0
  /// How often (seconds) duck-list is asked without news: rules added or held by other clients
  /// show up within that. A duck event, or a duck command through the bridge, asks at once.
  static let duckRefresh = 5.0

  let settings: BridgeSettings
  let prefix: String
  private let discovery: Discovery
  private var mqtt: MQTTClient?

  private let lock = Mutex<Void>(())
  private var connection: DaemonConnection?
  private var serverVersion = ""
  private var brokerConnected = false
  private var nextID = 1
  private var pending: [Int: Pending] = [:]
  private var waiting: [Submitted] = []
  /// Commands with `at` rampd has saved, by schedule id, until they take effect.
  private var schedules: [Int: Submitted] = [:]
  /// The last state published for each key path, published again when the broker comes back.
  private var states: [String: String] = [:]
  private var streams: Set<String> = []
  /// The playing streams that play a queue (their skip buttons).
  private var queues: Set<String> = []
  /// The duck rules rampd has, and whether each is held down by `duck` (duck-list's `manual`).
  private var ducks: [String: Bool] = [:]
  /// A duck-list asked and not yet answered (one at a time).
  private var duckListPending = false
  private var stopping = false
  private var errorTokens = Bridge.errorsPerSecond
  private var errorRefill = Date()
  private var errorsDropped = 0

  init(settings: BridgeSettings) {
    self.settings = settings
    prefix = "rampd/\(settings.box)"
    discovery = Discovery(
      box: settings.box, prefix: "rampd/\(settings.box)", discoveryPrefix: settings.discoveryPrefix,
      maximumPercent: settings.maximumPercent)
  }

  func attach(_ client: MQTTClient) { mqtt = client }

  /// Whether Home Assistant discovery configs are published (`--no-discovery` says not).
  private var discovers: Bool { !settings.discoveryPrefix.isEmpty }

  var isStopping: Bool { lock.withLock { _ in stopping } }

  // MARK: The broker's side (its network thread)

  func brokerConnected(_ code: Int32) {
    guard code == 0 else {
      log("the broker refused the connection: \(MQTTClient.describe(connack: code))")
      return
    }
    let (version, states, streams, queues, ducks) = lock.withLock { _ in
      brokerConnected = true
      return (serverVersion, self.states, self.streams, self.queues, self.ducks)
    }
    log("connected to the broker as \(settings.box)")
    mqtt?.subscribe(CommandTopics.subscriptions(prefix: prefix) + CommandTopics.subscriptions(prefix: "rampd/all"))
    for (topic, payload) in discovery.boxConfigs(version: version) where discovers {
      mqtt?.publish(topic, payload, retain: true)
    }
    for stream in streams.sorted() where discovers {
      let (topic, payload) = discovery.streamConfig(stream: stream, version: version)
      mqtt?.publish(topic, payload, retain: true)
    }
    for stream in queues.sorted() where discovers {
      for (topic, payload) in discovery.queueConfigs(stream: stream, version: version) {
        mqtt?.publish(topic, payload, retain: true)
      }
    }
    for rule in ducks.keys.sorted() where discovers {
      let (topic, payload) = discovery.duckConfig(rule: rule, version: version)
      mqtt?.publish(topic, payload, retain: true)
    }
    for (key, value) in states.sorted(by: { $0.key < $1.key }) {
      mqtt?.publish("\(prefix)/state/\(key)", value, retain: true)
    }
    publishAvailability()
  }

  func brokerDisconnected(_ code: Int32) {
    lock.withLock { _ in brokerConnected = false }
    if !isStopping { log("lost the broker (\(MQTTClient.describe(code))); reconnecting") }
  }

  func received(_ message: MQTTMessage) {
    let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
    guard levels.count >= 3, levels[0] == "rampd", levels[1] == settings.box || levels[1] == "all" else { return }
    let payload = String(decoding: message.payload.prefix(256), as: UTF8.self)
    if message.retained {
      // It would run again at every connection.
      publishError(
        topic: message.topic, payload: payload,
        ProtocolError(.badRequest, "a retained command is not applied; publish commands without retain"))
      return
    }
    do {
      let request = try CommandTopics.request(levels: Array(levels.dropFirst(2)), payload: message.payload)
      submit(Submitted(topic: message.topic, payload: payload, request: request))
    } catch {
      publishError(topic: message.topic, payload: payload, error)
    }
  }

  private func submit(_ command: Submitted) {
    let refusal: ProtocolError? = lock.withLock { _ in
      guard connection != nil else {
        guard waiting.count < Self.maximumWaiting else {
          return ProtocolError(
            .limitExceeded, "rampd cannot be reached and \(Self.maximumWaiting) commands already wait for it")
        }
        waiting.append(command)
        return nil
      }
      guard pending.count < Self.maximumInFlight else {
        return ProtocolError(.limitExceeded, "\(Self.maximumInFlight) commands already wait for rampd's reply")
      }
      sendLocked(command.request, .command(command))
      return nil
    }
    if let refusal { publishError(topic: command.topic, payload: command.payload, refusal) }
  }

  /// Sends `request` with a fresh id, remembered with what it is for. A failed send leaves it
  /// pending: the rampd thread finds the connection gone and sends it again later.
  private func sendLocked(_ request: Request, _ purpose: Pending) {
    guard let connection else { return }
    var request = request
    if case .command = purpose, request.at != nil {
      // Saved by rampd and answered at once: it takes effect at its time even if the bridge or
      // rampd is restarted meanwhile (a refusal then comes as a schedule-failed event).
      request.ack = .scheduled
    }
    let id = nextID
    nextID += 1
    request.id = .integer(id)
    pending[id] = purpose
    try? connection.send(line: request.json.serialized())
  }

  // MARK: rampd's side (a thread of its own)

  func runRampdLink() {
    var delay = 0.25
    var reported = false
    while !isStopping {
      let connection: DaemonConnection
      do {
        connection = try DaemonConnection(path: settings.socket)
      } catch {
        if !reported { log("cannot reach rampd at \(settings.socket) (\(error)); trying again") }
        reported = true
        sleep(seconds: delay)
        delay = min(delay * 2, 8)
        continue
      }
      connection.isInterrupted = { [weak self] in self?.isStopping ?? true }
      delay = 0.25
      reported = false
      let version = connection.serverVersion
      lock.withLock { _ in
        self.connection = connection
        serverVersion = version
        sendLocked(
          Request(
            .subscribe(events: [
              .streamStarted, .streamEnded, .scheduleApplied, .scheduleFailed, .duckStarted, .duckEnded,
            ])),
          .own("subscribe"))
        sendLocked(Request(.observe(key: "master.gain", rate: settings.stateRate)), .own("observe master.gain"))
        sendLocked(Request(.status), .status)
        duckListPending = false
        askDuckListLocked()
        let queued = waiting
        waiting = []
        for command in queued { sendLocked(command.request, .command(command)) }
      }
      log("connected to rampd \(version) at \(settings.socket)")
      publishAvailability()
      do {
        var refresh = Date().addingTimeInterval(Self.duckRefresh)
        while true {
          let line = try connection.nextLine(until: refresh)
          if line == nil || Date() >= refresh {
            lock.withLock { _ in askDuckListLocked() }
            refresh = Date().addingTimeInterval(Self.duckRefresh)
          }
          if let line { handle(line.line) }
        }
      } catch {
        if !isStopping { log("lost rampd (\(error)); reconnecting") }
      }
      let ended: [String] = lock.withLock { _ in
        self.connection = nil
        // Sent but not answered: sent again, first, once rampd is back.
        let unanswered = pending.sorted { $0.key < $1.key }.compactMap { entry -> Submitted? in
          if case .command(let command) = entry.value { return command }
          return nil
        }
        pending = [:]
        duckListPending = false
        waiting = unanswered + waiting
        let ended = streams.sorted()
        streams = []
        return ended
      }
      if isStopping { return }
      for stream in ended { streamEnded(stream) }
      publishAvailability()
    }
  }

  private func handle(_ line: ServerLine) {
    switch line {
    case .reply(let id, let result):
      guard case .number(let number) = id ?? .null else { return }
      let purpose = lock.withLock { _ in pending.removeValue(forKey: Int(number)) }
      switch (purpose, result) {
      case (.command(let command), .failure(let error)):
        publishError(topic: command.topic, payload: command.payload, error)
      case (.command(let command), .success(let result)):
        if let schedule = result["scheduled"]?.numberValue {
          lock.withLock { _ in
            if schedules.count >= Self.maximumInFlight { schedules.removeAll() }
            schedules[Int(schedule)] = command
          }
        }
        // A duck or unduck taken effect: its switch's state, now.
        if case .duck = command.request.command { lock.withLock { _ in askDuckListLocked() } }
      case (.ducks, .success(let result)):
        lock.withLock { _ in duckListPending = false }
        ducksListed(result["ducks"]?.arrayValue ?? [])
      case (.ducks, .failure(let error)):
        lock.withLock { _ in duckListPending = false }
        log("rampd refused the bridge's duck-list: \(error.summary)")
      case (.queueProbe(let stream), .success):
        queueFound(stream)
      case (.own(let what), .failure(let error)):
        log("rampd refused the bridge's \(what): \(error.summary)")
      case (.status, .success(let status)):
        for stream in status["streams"]?.arrayValue ?? [] {
          if let name = stream["stream"]?.stringValue { streamStarted(name, isQueue: stream["queue"] != nil) }
        }
      default: break
      }
    case .event(.value(let key, let value, _)):
      let text = HumanUnits.trimmed(value, decimals: 6)
      let changed = lock.withLock { _ in
        // A stream's gain reported after its end is not published.
        if key.hasPrefix("streams."), !streams.contains(where: { key == "streams.\($0).gain" }) { return false }
        guard states[key] != text else { return false }
        states[key] = text
        return true
      }
      if changed { mqtt?.publish("\(prefix)/state/\(key)", text, retain: true) }
    case .event(.scheduleApplied(let schedule, let command, _, let next)):
      lock.withLock { _ in
        if next == nil { _ = schedules.removeValue(forKey: Int(schedule)) }
        if command == "duck" || command == "unduck" { askDuckListLocked() }
      }
    case .event(.duckStarted), .event(.duckEnded):
      lock.withLock { _ in askDuckListLocked() }
    case .event(.scheduleFailed(let schedule, let command, _, let error, let next)):
      let submitted = lock.withLock { _ in
        next == nil ? schedules.removeValue(forKey: Int(schedule)) : schedules[Int(schedule)]
      }
      publishError(
        topic: submitted?.topic ?? "schedule \(schedule) (\(command))", payload: submitted?.payload ?? "", error)
    case .event(.streamStarted(let stream, _)):
      streamStarted(stream, isQueue: nil)
    case .event(.streamEnded(let stream, _, _)):
      let known = lock.withLock { _ in streams.remove(stream) != nil }
      if known { streamEnded(stream) }
    default:
      break
    }
  }

  /// `isQueue`: whether it plays a queue, when known (status says); nil asks rampd (queue-list).
  private func streamStarted(_ stream: String, isQueue: Bool?) {
    let (isNew, version) = lock.withLock { _ in
      let isNew = streams.insert(stream).inserted
      if isNew {
        sendLocked(
          Request(.observe(key: "streams.\(stream).gain", rate: settings.stateRate)), .own("observe of \(stream)"))
        if isQueue == nil { sendLocked(Request(.queueList(stream: stream)), .queueProbe(stream)) }
      }
      return (isNew, serverVersion)
    }
    guard isNew else { return }
    if discovers {
      let (topic, payload) = discovery.streamConfig(stream: stream, version: version)
      mqtt?.publish(topic, payload, retain: true)
    }
    if isQueue == true { queueFound(stream) }
  }

  /// A playing stream plays a queue: its next and previous buttons.
  private func queueFound(_ stream: String) {
    let (isNew, version) = lock.withLock { _ in
      guard streams.contains(stream) else { return (false, serverVersion) }
      return (queues.insert(stream).inserted, serverVersion)
    }
    guard isNew, discovers else { return }
    for (topic, payload) in discovery.queueConfigs(stream: stream, version: version) {
      mqtt?.publish(topic, payload, retain: true)
    }
  }

  /// Asks rampd for its duck rules, unless that is already asked.
  private func askDuckListLocked() {
    guard connection != nil, !duckListPending else { return }
    duckListPending = true
    sendLocked(Request(.duckList), .ducks)
  }

  /// duck-list's answer: a switch for each rule that is new, none for a rule that is gone, the
  /// state (ON: held down by `duck`) of each that changed, retained on state/duck/<rule>.
  private func ducksListed(_ rules: [JSONValue]) {
    var listed: [String: Bool] = [:]
    for rule in rules {
      if let name = rule["name"]?.stringValue { listed[name] = rule["manual"]?.boolValue ?? false }
    }
    let (added, removed, changed, version): ([String], [String], [String], String) = lock.withLock { _ in
      let added = listed.keys.filter { ducks[$0] == nil }.sorted()
      let removed = ducks.keys.filter { listed[$0] == nil }.sorted()
      var changed: [String] = []
      for (rule, held) in listed where states["duck/\(rule)"] != (held ? "ON" : "OFF") {
        states["duck/\(rule)"] = held ? "ON" : "OFF"
        changed.append(rule)
      }
      for rule in removed { states.removeValue(forKey: "duck/\(rule)") }
      ducks = listed
      return (added, removed, changed.sorted(), serverVersion)
    }
    for rule in added where discovers {
      let (topic, payload) = discovery.duckConfig(rule: rule, version: version)
      mqtt?.publish(topic, payload, retain: true)
    }
    for rule in changed {
      mqtt?.publish("\(prefix)/state/duck/\(rule)", listed[rule] == true ? "ON" : "OFF", retain: true)
    }
    for rule in removed {
      mqtt?.publish("\(prefix)/state/duck/\(rule)", "", retain: true)
      if discovers { mqtt?.publish(discovery.duckConfig(rule: rule, version: "").topic, "", retain: true) }
    }
  }

  /// Clears what was retained for a stream that is gone: its state and its entity.
  private func streamEnded(_ stream: String) {
    let key = "streams.\(stream).gain"
    let wasQueue = lock.withLock { _ in
      _ = states.removeValue(forKey: key)
      return queues.remove(stream) != nil
    }
    mqtt?.publish("\(prefix)/state/\(key)", "", retain: true)
    guard discovers else { return }
    mqtt?.publish(discovery.streamConfig(stream: stream, version: "").topic, "", retain: true)
    if wasQueue {
      for (topic, _) in discovery.queueConfigs(stream: stream, version: "") { mqtt?.publish(topic, "", retain: true) }
    }
  }

  // MARK: Availability and errors

  /// `online` while both the broker and rampd are reached, else `offline`; the Last Will says
  /// `offline` for a bridge that vanished. Decided and published under the lock, so that the two
  /// threads' news (broker back, rampd gone) reach the broker in the order they happened.
  func publishAvailability() {
    lock.withLock { _ in
      guard brokerConnected else { return }
      let online = connection != nil && !stopping
      mqtt?.publish("\(prefix)/availability", online ? "online" : "offline", retain: true)
    }
  }

  /// Logs a refused command and publishes it on `rampd/<box>/error` (not retained), at most
  /// `errorsPerSecond` a second.
  func publishError(topic: String, payload: String, _ error: ProtocolError) {
    log("refused \(topic) '\(payload)': \(error.summary)")
    let (allowed, dropped): (Bool, Int) = lock.withLock { _ in
      let now = Date()
      errorTokens = min(Self.errorsPerSecond, errorTokens + now.timeIntervalSince(errorRefill) * Self.errorsPerSecond)
      errorRefill = now
      guard errorTokens >= 1 else {
        errorsDropped += 1
        return (false, 0)
      }
      errorTokens -= 1
      let dropped = errorsDropped
      errorsDropped = 0
      return (true, dropped)
    }
    guard allowed else { return }
    var object: JSONObject = [
      "topic": .string(topic), "payload": .string(payload), "code": .string(error.code.rawValue),
      "message": .string(error.message),
    ]
    if let field = error.field { object["field"] = .string(field) }
    if dropped > 0 { object["unpublished"] = .integer(dropped) }
    mqtt?.publish("\(prefix)/error", JSONValue.object(object).serialized())
  }

  // MARK: Ending

  /// Says `offline` and leaves the broker (a clean exit sends no Last Will, so it is said here).
  func stop() {
    lock.withLock { _ in stopping = true }
    publishAvailability()
    // The offline message leaves before the disconnect: libmosquitto sends in order.
    usleep(100_000)
    mqtt?.stop()
  }

  private func sleep(seconds: Double) {
    let deadline = Date().addingTimeInterval(seconds)
    while !isStopping, Date() < deadline { usleep(50_000) }
  }
}
