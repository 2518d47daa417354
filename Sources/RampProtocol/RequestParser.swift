import RampEngine

extension Request {
  /// Parses one line. The id comes back even when the request is refused, as long as the line
  /// was an object with a scalar `"id"`, so that the error reply can echo it.
  public static func parse(line: some StringProtocol, options: ParseOptions = ParseOptions()) -> (
    id: JSONValue?, result: Result<Request, ProtocolError>
  ) {
    let value: JSONValue
    do { value = try JSON.parse(line) } catch { return (nil, .failure(error)) }
    return parse(document: value, options: options)
  }

  /// Parses one line of raw bytes, refusing bytes that are not UTF-8 as `bad-json`.
  public static func parse(utf8 line: some Collection<UInt8>, options: ParseOptions = ParseOptions()) -> (
    id: JSONValue?, result: Result<Request, ProtocolError>
  ) {
    let value: JSONValue
    do { value = try JSON.parse(utf8: line) } catch { return (nil, .failure(error)) }
    return parse(document: value, options: options)
  }

  private static func parse(document value: JSONValue, options: ParseOptions) -> (
    id: JSONValue?, result: Result<Request, ProtocolError>
  ) {
    var id: JSONValue?
    if case .object(let object) = value, let recovered = try? RequestParser.id(object) { id = recovered }
    do { return (id, .success(try parse(value, options: options))) } catch { return (id, .failure(error)) }
  }

  public static func parse(_ value: JSONValue, options: ParseOptions = ParseOptions()) throws(ProtocolError)
    -> Request
  {
    guard case .object(let object) = value else {
      throw ProtocolError(.badRequest, "a request must be a JSON object, got \(describe(value))")
    }
    return try RequestParser(prefix: "", options: options).request(object, inBatch: false)
  }
}

/// What parsing takes from the daemon's configuration.
public struct ParseOptions: Sendable, Equatable {
  /// The floor of a dB value space given as "db" without "dbFloor" (the configured db-floor;
  /// nil: none, left for the reader of the request to choose, as a client does). A floor given
  /// in the request is kept, so `Request.json` writes it and reads back the same.
  public var decibelFloor: Double?

  public init(decibelFloor: Double? = nil) {
    self.decibelFloor = decibelFloor
  }
}

/// Turns request objects into `Request`s. `prefix` leads to the object being read, so that an
/// error inside a batch names `commands[2].duration`.
struct RequestParser {
  let prefix: String
  let options: ParseOptions

  static let commonKeys = ProtocolSchema.requestFields.map(\.name)
  /// Looked for in every request: kept, not built each time.
  private static let schedulingKeys = ["at", "repeat"]
  private static let scheduleOnlyKeys = ["tag", "yield"]
  private static let commandNames = Set(Command.names)

  static func id(_ object: JSONObject) throws(ProtocolError) -> JSONValue? {
    guard let id = object["id"], id != .null else { return nil }
    guard id.isScalar else {
      throw ProtocolError(.badRequest, field: "id", "id: expected a number or a string, got \(describe(id))")
    }
    if case .string(let text) = id, text.utf8.count > ProtocolLimits.stringBytes {
      throw ProtocolError(
        .badRequest, field: "id", "id: at most \(ProtocolLimits.stringBytes) bytes, got \(text.utf8.count)")
    }
    return id
  }

  func request(_ object: JSONObject, inBatch: Bool) throws(ProtocolError) -> Request {
    let name = try commandName(object)
    if inBatch {
      for key in ["id", "at", "ack", "repeat", "tag", "yield"] where object[key].map({ $0 != .null }) == true {
        throw .at(prefix + key, .invalidField, "commands in a batch take no \(key); give it to the batch")
      }
      if Command.notInBatch.contains(name) {
        throw .at(prefix + "cmd", .invalidField, "\(name) cannot be part of a batch")
      }
    }
    for key in Self.schedulingKeys
    where !inBatch && name != "batch" && object[key].map({ $0 != .null }) == true && Command.notInBatch.contains(name) {
      throw .at(prefix + key, .invalidField, "'\(name)' takes effect at once; it cannot be scheduled")
    }
    let id = inBatch ? nil : try Self.id(object)
    let at = try object["at"].flatMap { $0 == .null ? nil : $0 }.map { value throws(ProtocolError) in
      try Schedule.parse(value, field: prefix + "at")
    }
    var ack = Acknowledgement.applied
    if let value = object["ack"], value != .null {
      guard case .string(let text) = value, let chosen = Acknowledgement(rawValue: text) else {
        throw .at(prefix + "ack", .invalidField, "expected \"applied\" or \"scheduled\", got \(describe(value))")
      }
      if chosen == .scheduled && at == nil && object["repeat"].map({ $0 != .null }) != true {
        throw .at(prefix + "ack", .invalidField, "\"scheduled\" needs \"at\"")
      }
      ack = chosen
    }
    var request = Request(id: id, at: at, ack: ack, try command(name, object))
    if !inBatch && name != "unschedule" { try scheduling(object, into: &request) }
    return request
  }

  /// `repeat`, `tag` and `yield`: how a schedule repeats, is named and gives way.
  private func scheduling(_ object: JSONObject, into request: inout Request) throws(ProtocolError) {
    let r = FieldReader(unchecked: object, prefix: prefix, options: options)
    if let value = r.value("repeat") {
      let recurrence = try Recurrence.parse(value, field: r.path("repeat"))
      if case .daily = recurrence, request.at != nil {
        throw r.invalid("at", "a repeat with time finds its own first time; leave at out")
      }
      if r.has("ack") && request.ack == .applied {
        throw r.invalid("ack", "a repeating schedule is answered at once: leave ack out or give \"scheduled\"")
      }
      request.repeats = recurrence
      request.ack = .scheduled
    }
    for key in Self.scheduleOnlyKeys where r.has(key) && !request.isScheduled {
      throw r.invalid(key, "only a scheduled request (with at or repeat) takes \(key)")
    }
    request.tag = try r.identifier("tag")
    request.yield = try r.keyPath("yield")
  }

  private func commandName(_ object: JSONObject) throws(ProtocolError) -> String {
    let field = prefix + "cmd"
    guard let value = object["cmd"] else {
      throw .at(field, .badRequest, "missing; every request names its command")
    }
    guard case .string(let name) = value else {
      throw .at(field, .badRequest, "expected a command name, got \(describe(value))")
    }
    guard Self.commandNames.contains(name) else {
      var message = "\(field): unknown command \(describe(value))"
      if let match = Suggestion.closest(to: name, among: Command.names) { message += "; did you mean \(match)?" }
      throw ProtocolError(.unknownCommand, field: field, message)
    }
    return name
  }

  /// A reader of command `name`'s object, which takes the keys `ProtocolSchema` gives it.
  private func reader(_ object: JSONObject, _ name: String) throws(ProtocolError) -> FieldReader {
    try FieldReader(
      object, prefix: prefix, allowed: Self.allowedKeys[name] ?? Self.commonKeys, context: name, options: options)
  }

  /// Each command's keys (`commonKeys` and its own), worked out once rather than for every request.
  private static let allowedKeys = [String: [String]](
    uniqueKeysWithValues: ProtocolSchema.commands.map { ($0.name, commonKeys + $0.fields.map(\.name)) })

  private func command(_ name: String, _ object: JSONObject) throws(ProtocolError) -> Command {
    switch name {
    case "ping", "version", "status":
      _ = try reader(object, name)
      return name == "ping" ? .ping : name == "version" ? .version : .status
    case "play": return .play(try play(object))
    case "stop": return .stop(try transport(object, name))
    case "pause": return .pause(try transport(object, name))
    case "resume": return .resume(try transport(object, name))
    case "seek":
      let r = try reader(object, name)
      return .seek(
        Seek(
          stream: try r.required(try r.identifier("stream"), "stream"),
          position: try r.required(try r.seconds("position"), "position")))
    case "fade", "fade-in", "fade-out": return .fade(try fade(object, Fade.Kind(rawValue: name)!))
    case "set": return .set(try set(object))
    case "get":
      let r = try reader(object, name)
      return .get(key: try r.required(try r.keyPath("key"), "key"))
    case "animate": return .animate(try animate(object))
    case "cancel":
      let r = try reader(object, name)
      return .cancel(key: try r.required(try r.keyPath("key"), "key"))
    case "remove":
      let r = try reader(object, name)
      return .remove(key: try r.required(try r.keyPath("key"), "key"), name: try r.identifier("name"))
    case "list":
      let r = try reader(object, name)
      return .list(prefix: try r.string("prefix"))
    case "subscribe": return .subscribe(events: try events(object, name))
    case "unsubscribe": return .unsubscribe(events: try events(object, name))
    case "observe":
      let r = try reader(object, name)
      let key = try r.required(try r.keyPath("key"), "key")
      let rate = try r.number("rate") ?? Self.defaultObserveRate
      guard rate >= Self.minimumObserveRate, rate <= Self.maximumObserveRate else {
        throw .at(
          r.path("rate"), .outOfRange,
          "must be at least \(JSONValue.format(Self.minimumObserveRate)) Hz (a look every"
            + " \(JSONValue.format(1 / Self.minimumObserveRate)) s) and at most"
            + " \(JSONValue.format(Self.maximumObserveRate)) Hz, got \(JSONValue.format(rate))")
      }
      return .observe(key: key, rate: rate)
    case "unobserve":
      let r = try reader(object, name)
      return .unobserve(key: try r.keyPath("key"))
    case "batch": return .batch(try batch(object))
    case "wait": return .wait(try wait(object))
    case "schedules":
      _ = try reader(object, name)
      return .schedules
    case "unschedule":
      let r = try reader(object, name)
      var schedule: UInt64?
      if let value = r.value("schedule") {
        guard case .number(let number) = value, number >= 0, number < 9_007_199_254_740_992,
          number == number.rounded()
        else {
          throw r.invalid("schedule", "expected a schedule id (a whole number, not negative), got \(describe(value))")
        }
        schedule = UInt64(number)
      }
      let tag = try r.identifier("tag")
      guard (schedule == nil) != (tag == nil) else {
        throw r.invalid("schedule", "give exactly one of schedule (an id) and tag")
      }
      return .unschedule(schedule: schedule, tag: tag)
    case "duck-add": return .duckAdd(try duckRule(object))
    case "duck-list":
      _ = try reader(object, name)
      return .duckList
    case "duck-remove", "duck", "unduck":
      let r = try reader(object, name)
      let rule = try r.required(try r.identifier("name"), "name")
      return name == "duck-remove" ? .duckRemove(name: rule) : .duck(name: rule, on: name == "duck")
    case "queue-add":
      let r = try reader(object, name)
      let stream = try r.required(try r.identifier("stream"), "stream")
      _ = try r.required(r.value("paths"), "paths")
      let paths = try self.paths(r, "paths")
      guard !paths.isEmpty else { throw r.invalid("paths", "give at least one file") }
      return .queueAdd(stream: stream, paths: paths)
    case "queue-remove":
      let r = try reader(object, name)
      let stream = try r.required(try r.identifier("stream"), "stream")
      let index = try r.required(try r.number("index"), "index")
      guard index >= 0, index == index.rounded(), index < Double(ProtocolLimits.queueCount) else {
        throw .at(
          r.path("index"), .outOfRange,
          "expected an item's index in the queue (a whole number from 0), got \(JSONValue.format(index))")
      }
      return .queueRemove(stream: stream, index: Int(index))
    case "queue-clear", "next", "previous":
      let r = try reader(object, name)
      let stream = try r.required(try r.identifier("stream"), "stream")
      return name == "queue-clear" ? .queueClear(stream: stream) : .skip(stream: stream, forward: name == "next")
    case "queue-list":
      let r = try reader(object, name)
      return .queueList(stream: try r.identifier("stream"))
    default:
      // `commandName` admits only the names above.
      throw .at(prefix + "cmd", .internalError, "\(name) has no parser")
    }
  }

  static let defaultObserveRate = 20.0
  static let maximumObserveRate = 1000.0
  /// Each observation costs the render thread a published value every block, whatever its rate:
  /// a rate so low that it costs the budget nothing would let observations escape it.
  static let minimumObserveRate = 0.001

  private func play(_ object: JSONObject) throws(ProtocolError) -> Play {
    let r = try reader(object, "play")
    let path = try r.required(try r.string("path", limit: ProtocolLimits.pathBytes), "path")
    guard !path.isEmpty else { throw r.invalid("path", "must not be empty") }
    // The C calls that open it would stop at the NUL, opening a path other than the one checked
    // and reported.
    guard !path.utf8.contains(0) else { throw r.invalid("path", "must not contain a NUL character (\\u0000)") }
    let queue = r.has("queue") ? try paths(r, "queue") : nil
    let crossfade = Crossfade(
      duration: try r.seconds("crossfade"), curve: try r.curve("crossfadeCurve"),
      skipDuration: try r.seconds("skipCrossfade"), skipCurve: try r.curve("skipCurve"),
      level: try r.number("crossfadeLevel"), window: try r.seconds("crossfadeWindow"))
    if let level = crossfade.level, !Crossfade.levelRange.contains(level) {
      throw .at(
        r.path("crossfadeLevel"), .outOfRange,
        "expected a level from -120 to 0 dBFS, got \(JSONValue.format(level))")
    }
    if let window = crossfade.window, !(window > 0 && window <= Crossfade.maximumWindow) {
      throw .at(
        r.path("crossfadeWindow"), .outOfRange,
        "expected above 0 and at most 60 seconds, got \(JSONValue.format(window))")
    }
    if queue == nil {
      for key in ["crossfade", "crossfadeCurve", "skipCrossfade", "skipCurve", "crossfadeLevel", "crossfadeWindow"]
      where r.has(key) {
        throw r.invalid(key, "only a queue stream takes \(key); give queue (an array of files, [] for none yet)")
      }
    }
    return Play(
      path: path, stream: try r.identifier("stream"), gain: try r.number("gain"), fadeIn: try r.seconds("fadeIn"),
      curve: try r.curve("curve"), space: try r.space("space"), loop: try r.bool("loop") ?? false,
      paused: try r.bool("paused") ?? false, queue: queue, crossfade: crossfade, loudness: try loudness(r))
  }

  /// `loudness`: a number of LUFS, a string with its unit (`"-18LUFS"`, read as `--loudness` reads
  /// it), or `"off"`.
  private func loudness(_ r: FieldReader) throws(ProtocolError) -> LoudnessChoice? {
    guard let value = r.value("loudness") else { return nil }
    let field = r.path("loudness")
    func refusal(_ error: UnitError) -> ProtocolError {
      if case .outOfRange = error.problem { return ProtocolError(.outOfRange, field: field, error.description) }
      return ProtocolError(.invalidField, field: field, error.description)
    }
    switch value {
    case .string("off"):
      return .off
    case .string(let text):
      do { return .target(try HumanUnits.loudness(text, option: field)) } catch { throw refusal(error) }
    case .number(let lufs):
      do throws(UnitError) {
        try HumanUnits.checkLoudness(lufs) { problem in
          UnitError(
            option: field, input: JSONValue.format(lufs), problem: problem, expected: HumanUnits.loudnessForms)
        }
      } catch {
        throw refusal(error)
      }
      return .target(lufs == 0 ? 0 : lufs)
    default:
      throw r.invalid(
        "loudness",
        "expected a loudness in LUFS (a number, or a string such as \"-18LUFS\") or \"off\", got \(describe(value))")
    }
  }

  /// An array of file paths (`queue`, `paths`): each not empty, without NUL.
  private func paths(_ r: FieldReader, _ key: String) throws(ProtocolError) -> [String] {
    let values = try r.array(key, limit: ProtocolLimits.queueCount) ?? []
    var paths: [String] = []
    for (index, value) in values.enumerated() {
      let field = "\(key)[\(index)]"
      guard case .string(let path) = value else {
        throw r.invalid(field, "expected a file path, got \(describe(value))")
      }
      guard !path.isEmpty, path.utf8.count <= ProtocolLimits.pathBytes else {
        throw r.invalid(field, "expected a file path of 1 to \(ProtocolLimits.pathBytes) bytes")
      }
      guard !path.utf8.contains(0) else { throw r.invalid(field, "must not contain a NUL character (\\u0000)") }
      paths.append(path)
    }
    return paths
  }

  private func transport(_ object: JSONObject, _ name: String) throws(ProtocolError) -> Transport {
    let r = try reader(object, name)
    return Transport(stream: try r.identifier("stream"), fade: try r.seconds("fade"), curve: try r.curve("curve"))
  }

  private func fade(_ object: JSONObject, _ kind: Fade.Kind) throws(ProtocolError) -> Fade {
    let r = try reader(object, kind.rawValue)
    let to = try r.number("to") ?? kind.defaultTarget
    let then = try r.choice("then", Fade.Then.self)
    if then != nil && kind != .fadeOut {
      throw r.invalid("then", "only fade-out takes then (stop or pause when the fade ends)")
    }
    let key = try r.keyPath("key") ?? Fade.defaultKey
    if then != nil && !Self.isTransportKey(key) {
      throw r.invalid("then", "needs key master.gain (every stream) or streams.<id>.gain (one stream), not \(key)")
    }
    return Fade(
      kind: kind, key: key, from: try r.number("from"),
      to: try r.required(to, "to"), duration: try r.seconds("duration"), curve: try r.curve("curve"),
      space: try r.space("space"), continuity: try r.choice("continuity", Continuity.self) ?? .value,
      name: try r.identifier("name"), then: then)
  }

  /// The keys whose streams a fade-out with `then` can stop or pause.
  static func isTransportKey(_ key: String) -> Bool {
    let parts = key.split(separator: ".", omittingEmptySubsequences: false)
    return key == Fade.defaultKey || (parts.count == 3 && parts[0] == "streams" && parts[2] == "gain")
  }

  private func set(_ object: JSONObject) throws(ProtocolError) -> SetValue {
    // "to" is accepted for "value", as timeline scripts write it.
    let r = try reader(object, "set")
    if r.has("value") && r.has("to") { throw r.invalid("to", "give value or to, not both") }
    let to = try r.number("to")
    let value = try r.number("value") ?? to
    return SetValue(
      key: try r.required(try r.keyPath("key"), "key"), value: try r.required(value, "value"),
      duration: try r.seconds("duration"), curve: try r.curve("curve"), space: try r.space("space"),
      continuity: try r.choice("continuity", Continuity.self), valueField: to != nil ? "to" : "value")
  }

  private func animate(_ object: JSONObject) throws(ProtocolError) -> Animate {
    let r = try reader(object, "animate")
    let key = try r.required(try r.keyPath("key"), "key")
    let description = try r.required(try r.object("animation"), "animation")
    let animation = try AnimationWire.parse(
      description, prefix: r.path("animation."), isChild: false, options: options)
    try AnimationWire.checkWithEngine(animation, field: r.path("animation"))
    return Animate(
      key: key, name: try r.identifier("name") ?? Animate.defaultName, animation: animation,
      continuity: try r.choice("continuity", Continuity.self) ?? .value)
  }

  private func events(_ object: JSONObject, _ name: String) throws(ProtocolError) -> [EventKind]? {
    let r = try reader(object, name)
    guard let elements = try r.array("events") else { return nil }
    guard !elements.isEmpty else {
      throw r.invalid("events", "name at least one event kind, or leave events out for all")
    }
    var kinds: [EventKind] = []
    for (index, element) in elements.enumerated() {
      guard case .string(let text) = element, let kind = EventKind(rawValue: text) else {
        let names = EventKind.allCases.map(\.rawValue).joined(separator: ", ")
        throw .at(r.path("events[\(index)]"), .invalidField, "expected one of \(names), got \(describe(element))")
      }
      kinds.append(kind)
    }
    return kinds
  }

  private func batch(_ object: JSONObject) throws(ProtocolError) -> [Request] {
    let r = try reader(object, "batch")
    let elements = try r.required(try r.array("commands", limit: ProtocolLimits.batchCount), "commands")
    guard !elements.isEmpty else { throw r.invalid("commands", "a batch needs at least one command") }
    var requests: [Request] = []
    for (index, element) in elements.enumerated() {
      let inner = r.path("commands[\(index)]")
      guard case .object(let innerObject) = element else {
        throw .at(inner, .invalidField, "expected a command object, got \(describe(element))")
      }
      requests.append(try RequestParser(prefix: inner + ".", options: options).request(innerObject, inBatch: true))
    }
    return requests
  }

  /// `duck-add`, and a `[[duck]]` table of the configuration read as one.
  func duckRule(_ object: JSONObject) throws(ProtocolError) -> DuckRule {
    let r = try reader(object, "duck-add")
    let name = try r.required(try r.identifier("name"), "name")
    let elements = try r.required(try r.array("targets", limit: DuckRule.maximumTargets), "targets")
    var targets: [String] = []
    for (index, element) in elements.enumerated() {
      let field = r.path("targets[\(index)]")
      guard case .string(let text) = element else {
        throw .at(field, .invalidField, "expected a key path such as streams.bed.gain, got \(describe(element))")
      }
      do { try KeyPath.validate(text) } catch { throw engineError(error, field: field) }
      targets.append(text)
    }
    var sidechain: DuckRule.Sidechain?
    if let threshold = try r.number("threshold") {
      sidechain = DuckRule.Sidechain(
        threshold: threshold, detector: try r.choice("detector", DuckRule.Sidechain.Detector.self) ?? .rms,
        window: try r.seconds("window") ?? DuckRule.Sidechain.defaultWindow,
        hysteresis: try r.number("hysteresis") ?? DuckRule.Sidechain.defaultHysteresis)
    } else {
      for key in ["detector", "window", "hysteresis"] where r.has(key) {
        throw r.invalid(key, "belongs to a sidechain: give threshold (dBFS) too")
      }
    }
    let rule = DuckRule(
      name: name, targets: targets, trigger: try r.string("trigger", limit: ProtocolLimits.identifierBytes + 1),
      sidechain: sidechain, depth: try r.number("depth") ?? DuckRule.defaultDepth,
      attack: try r.seconds("attack") ?? DuckRule.defaultAttack,
      attackCurve: try r.curve("attackCurve") ?? DuckRule.defaultCurve,
      hold: try r.seconds("hold") ?? DuckRule.defaultHold,
      release: try r.seconds("release") ?? DuckRule.defaultRelease,
      releaseCurve: try r.curve("releaseCurve") ?? DuckRule.defaultCurve)
    do { try rule.validate() } catch { throw engineError(error, field: r.path(error.field ?? "name")) }
    return rule
  }

  private func wait(_ object: JSONObject) throws(ProtocolError) -> Wait {
    let r = try reader(object, "wait")
    var ids: [UInt64]?
    if let elements = try r.array("animations") {
      guard !elements.isEmpty else { throw r.invalid("animations", "name at least one animation id") }
      ids = []
      for (index, element) in elements.enumerated() {
        guard case .number(let number) = element, number >= 0, number < 9_007_199_254_740_992,
          number == number.rounded()
        else {
          throw .at(
            r.path("animations[\(index)]"), .invalidField,
            "expected an animation id (a whole number, not negative), got \(describe(element))")
        }
        ids?.append(UInt64(number))
      }
    }
    let key = try r.keyPath("key")
    guard (ids == nil) != (key == nil) else {
      throw r.invalid("animations", "give exactly one of animations (ids) and key")
    }
    return Wait(animations: ids, key: key, timeout: try r.seconds("timeout"))
  }
}

extension DuckRule {
  /// A duck rule from `duck-add`'s fields (a `[[duck]]` table of the configuration, say).
  public static func parse(_ object: JSONObject) throws(ProtocolError) -> DuckRule {
    try RequestParser(prefix: "", options: ParseOptions()).duckRule(object)
  }
}
