/// Replies: `{"id":7,"ok":true,"result":{…}}` or
/// `{"id":7,"ok":false,"error":{"code":"invalid-field","field":"duration","message":"…"}}`.
/// The id is left out when the request had none; the field when the error names none.
public enum Reply {
  public static func success(id: JSONValue?, result: JSONValue) -> JSONValue {
    var object = JSONObject()
    object.reserveCapacity(3)
    if let id { object["id"] = id }
    object["ok"] = true
    object["result"] = result
    return .object(object)
  }

  public static func failure(id: JSONValue?, error: ProtocolError) -> JSONValue {
    var object = JSONObject()
    object.reserveCapacity(3)
    if let id { object["id"] = id }
    object["ok"] = false
    object["error"] = error.json
    return .object(object)
  }
}

extension ProtocolError {
  public var json: JSONValue {
    var object: JSONObject = ["code": .string(code.rawValue)]
    if let field { object["field"] = .string(field) }
    object["message"] = .string(message)
    if let bound { object["bound"] = .string(bound.rawValue) }
    if let value { object["value"] = .number(value) }
    if let detail { object["detail"] = .string(detail) }
    return .object(object)
  }

  /// Sent before the server closes a connection whose line grew past the limit.
  public static func lineTooLong(limit: Int) -> ProtocolError {
    ProtocolError(.lineTooLong, "a line may have at most \(limit) bytes; closing the connection")
  }
}

/// The first line on every connection: `{"hello":"rampd","version":"0.2.0","protocol":1}`.
public enum Greeting {
  public static let server = "rampd"

  public static func line(version: String) -> JSONValue {
    ["hello": .string(server), "version": .string(version), "protocol": .integer(ProtocolVersion.current)]
  }
}

/// Why an animation ended (`animation-finished`'s `reason`).
public enum AnimationEnding: String, Sendable, CaseIterable {
  /// It ran to its end (`finished` true).
  case completed
  /// A later command on its key path took over: under the same name, or, for one that is not
  /// additive, any later non-additive animation or model change (`by` names the animation).
  case superseded
  /// `remove` or `cancel` ended it, or its key path went (a stream ended).
  case removed
}

public enum StreamEndReason: String, Sendable, CaseIterable {
  /// The file played to its end (and did not loop).
  case finished
  /// A `stop` (after its fade).
  case stopped
  /// Decoding failed mid-stream; the event carries a message.
  case failed
}

/// Lines the server sends on its own: events of the kinds a client subscribed to, and the
/// values of the key paths it observes.
public enum Event: Sendable, Equatable {
  case animationStarted(id: UInt64, key: String, name: String, sample: Int64)
  /// `finished` false: removed, replaced or cancelled before its end.
  /// `ending`: why it ended; `by`: the animation that superseded it, when one did.
  case animationFinished(
    id: UInt64, key: String, name: String, finished: Bool, sample: Int64, ending: AnimationEnding, by: UInt64?)
  case streamStarted(stream: String, path: String)
  case streamEnded(stream: String, reason: StreamEndReason, message: String? = nil)
  case deviceFailed(message: String)
  case deviceRecovered(device: String)
  /// `applied`: the keys whose new values took effect; `restartRequired`: changed keys that take
  /// effect only when rampd restarts.
  case configReloaded(applied: [String], restartRequired: [String])
  /// `stream` nil: the output device itself ran dry.
  case underrun(stream: String?)
  /// The daemon's event queue was full: `count` events were dropped since the last `events-lost`.
  case eventsLost(count: Int)
  /// A saved schedule took effect; `next`: when it comes again (Unix seconds), nil when it does not.
  case scheduleApplied(schedule: UInt64, cmd: String, tag: String?, next: Double?)
  /// A saved schedule was refused when its time came (`error`: why, as a reply would say it);
  /// `next`: when a repeating one comes again, nil when it does not.
  case scheduleFailed(schedule: UInt64, cmd: String, tag: String?, error: ProtocolError, next: Double?)
  /// A duck rule began its attack (`sample`: its first sample).
  case duckStarted(rule: String, sample: Int64)
  /// A duck rule's release ended (`sample`: the first sample back at the model values).
  case duckEnded(rule: String, sample: Int64)
  /// Queue item `item` (its id in `queue-list`) of stream `stream` began at `sample`.
  case itemStarted(stream: String, item: UInt64, path: String, sample: Int64)
  /// Queue item `item` was last heard before `sample`: `finished` (played to its end, or faded
  /// out by the crossfade at its end), `skipped` (faded out by a skip), `stopped` (its stream
  /// was stopped) or `failed` (its stream's decoding failed).
  case itemEnded(stream: String, item: UInt64, path: String, reason: String, sample: Int64)
  /// The master limiter lowered the gain from `sample`, by up to `reduction` dB in that block,
  /// after a second or more of leaving the signal alone.
  case limiterEngaged(reduction: Double, sample: Int64)
  /// An observed key path's presentation value (`observe`), not a subscription kind.
  case value(key: String, value: Double, sample: Int64)

  /// The subscription kind; nil for observed values, which `observe` asks for instead.
  public var kind: EventKind? {
    switch self {
    case .animationStarted: return .animationStarted
    case .animationFinished: return .animationFinished
    case .streamStarted: return .streamStarted
    case .streamEnded: return .streamEnded
    case .deviceFailed: return .deviceFailed
    case .deviceRecovered: return .deviceRecovered
    case .configReloaded: return .configReloaded
    case .underrun: return .underrun
    case .eventsLost: return .eventsLost
    case .scheduleApplied: return .scheduleApplied
    case .scheduleFailed: return .scheduleFailed
    case .duckStarted: return .duckStarted
    case .duckEnded: return .duckEnded
    case .itemStarted: return .itemStarted
    case .itemEnded: return .itemEnded
    case .limiterEngaged: return .limiterEngaged
    case .value: return nil
    }
  }

  /// The `"event"` name on the wire.
  public var name: String { kind?.rawValue ?? "value" }

  public var json: JSONValue {
    var object: JSONObject = ["event": .string(name)]
    switch self {
    case .animationStarted(let id, let key, let name, let sample):
      object["id"] = .integer(id)
      object["key"] = .string(key)
      object["name"] = .string(name)
      object["sample"] = .integer(sample)
    case .animationFinished(let id, let key, let name, let finished, let sample, let ending, let by):
      object["id"] = .integer(id)
      object["key"] = .string(key)
      object["name"] = .string(name)
      object["finished"] = .bool(finished)
      object["sample"] = .integer(sample)
      object["reason"] = .string(ending.rawValue)
      if let by { object["by"] = .integer(by) }
    case .streamStarted(let stream, let path):
      object["stream"] = .string(stream)
      object["path"] = .string(path)
    case .streamEnded(let stream, let reason, let message):
      object["stream"] = .string(stream)
      object["reason"] = .string(reason.rawValue)
      object["message"] = message.map(JSONValue.string)
    case .deviceFailed(let message):
      object["message"] = .string(message)
    case .deviceRecovered(let device):
      object["device"] = .string(device)
    case .configReloaded(let applied, let restartRequired):
      object["applied"] = .array(applied.map(JSONValue.string))
      object["restartRequired"] = .array(restartRequired.map(JSONValue.string))
    case .underrun(let stream):
      object["stream"] = stream.map(JSONValue.string)
    case .eventsLost(let count):
      object["count"] = .integer(Int64(count))
    case .scheduleApplied(let schedule, let cmd, let tag, let next):
      object["schedule"] = .integer(schedule)
      object["command"] = .string(cmd)
      object["tag"] = tag.map(JSONValue.string)
      object["next"] = next.map { .string(RFC3339.format($0)) } ?? .null
    case .scheduleFailed(let schedule, let cmd, let tag, let error, let next):
      object["schedule"] = .integer(schedule)
      object["command"] = .string(cmd)
      object["tag"] = tag.map(JSONValue.string)
      object["error"] = error.json
      object["next"] = next.map { .string(RFC3339.format($0)) } ?? .null
    case .duckStarted(let rule, let sample), .duckEnded(let rule, let sample):
      object["rule"] = .string(rule)
      object["sample"] = .integer(sample)
    case .itemStarted(let stream, let item, let path, let sample):
      object["stream"] = .string(stream)
      object["item"] = .integer(item)
      object["path"] = .string(path)
      object["sample"] = .integer(sample)
    case .itemEnded(let stream, let item, let path, let reason, let sample):
      object["stream"] = .string(stream)
      object["item"] = .integer(item)
      object["path"] = .string(path)
      object["reason"] = .string(reason)
      object["sample"] = .integer(sample)
    case .limiterEngaged(let reduction, let sample):
      object["reduction"] = .number(reduction)
      object["sample"] = .integer(sample)
    case .value(let key, let value, let sample):
      object["key"] = .string(key)
      object["value"] = .number(value)
      object["sample"] = .integer(sample)
    }
    return .object(object)
  }

  /// Reads an event line, as a client does. Extra members are ignored, so a newer server may
  /// add some.
  public static func parse(_ value: JSONValue) throws(ProtocolError) -> Event {
    let fields = try ServerFields(value, what: "an event")
    let name = try fields.string("event")
    switch name {
    case "animation-started":
      return .animationStarted(
        id: try fields.unsigned("id"), key: try fields.string("key"), name: try fields.string("name"),
        sample: try fields.integer("sample"))
    case "animation-finished":
      let finished = try fields.bool("finished")
      // A daemon before the reason says only whether it finished; a reason this client does not
      // know (a newer daemon's) reads the same way.
      let ending =
        fields.optionalString("reason").flatMap(AnimationEnding.init(rawValue:)) ?? (finished ? .completed : .removed)
      return .animationFinished(
        id: try fields.unsigned("id"), key: try fields.string("key"), name: try fields.string("name"),
        finished: finished, sample: try fields.integer("sample"), ending: ending,
        by: try fields.optionalUnsigned("by"))
    case "stream-started":
      return .streamStarted(stream: try fields.string("stream"), path: try fields.string("path"))
    case "stream-ended":
      guard let reason = StreamEndReason(rawValue: try fields.string("reason")) else {
        throw ProtocolError(.badRequest, field: "reason", "reason: not one of finished, stopped, failed")
      }
      return .streamEnded(
        stream: try fields.string("stream"), reason: reason, message: fields.optionalString("message"))
    case "device-failed": return .deviceFailed(message: try fields.string("message"))
    case "device-recovered": return .deviceRecovered(device: try fields.string("device"))
    case "config-reloaded":
      // A server that leaves the lists out named nothing.
      return .configReloaded(
        applied: try fields.optionalStrings("applied"), restartRequired: try fields.optionalStrings("restartRequired"))
    case "underrun": return .underrun(stream: fields.optionalString("stream"))
    case "events-lost": return .eventsLost(count: Int(try fields.integer("count")))
    case "schedule-applied":
      return .scheduleApplied(
        schedule: try fields.unsigned("schedule"), cmd: try fields.string("command"), tag: fields.optionalString("tag"),
        next: fields.optionalString("next").flatMap(RFC3339.parse))
    case "schedule-failed":
      return .scheduleFailed(
        schedule: try fields.unsigned("schedule"), cmd: try fields.string("command"), tag: fields.optionalString("tag"),
        error: try ProtocolError(parsing: fields.object["error"]),
        next: fields.optionalString("next").flatMap(RFC3339.parse))
    case "duck-started": return .duckStarted(rule: try fields.string("rule"), sample: try fields.integer("sample"))
    case "duck-ended": return .duckEnded(rule: try fields.string("rule"), sample: try fields.integer("sample"))
    case "item-started":
      return .itemStarted(
        stream: try fields.string("stream"), item: try fields.unsigned("item"), path: try fields.string("path"),
        sample: try fields.integer("sample"))
    case "item-ended":
      return .itemEnded(
        stream: try fields.string("stream"), item: try fields.unsigned("item"), path: try fields.string("path"),
        reason: try fields.string("reason"), sample: try fields.integer("sample"))
    case "limiter-engaged":
      return .limiterEngaged(reduction: try fields.number("reduction"), sample: try fields.integer("sample"))
    case "value":
      return .value(
        key: try fields.string("key"), value: try fields.number("value"), sample: try fields.integer("sample"))
    default:
      throw ProtocolError(.badRequest, field: "event", "event: unknown kind \(describe(.string(name)))")
    }
  }
}

/// Any line a server sends, for clients.
public enum ServerLine: Sendable, Equatable {
  case greeting(server: String, version: String, protocolVersion: Int)
  case reply(id: JSONValue?, result: Result<JSONValue, ProtocolError>)
  case event(Event)
  /// An event this client does not know (from a newer server), kept whole.
  case unknownEvent(JSONObject)

  /// Reads one line. An error code this client does not know becomes `internal-error`, with
  /// the server's message kept.
  public static func parse(_ line: some StringProtocol) throws(ProtocolError) -> ServerLine {
    let value = try JSON.parse(line)
    let fields = try ServerFields(value, what: "a server line")
    if fields.object.contains("hello") {
      return .greeting(
        server: try fields.string("hello"), version: try fields.string("version"),
        protocolVersion: Int(try fields.integer("protocol")))
    }
    if fields.object.contains("event") {
      do { return .event(try Event.parse(value)) } catch {
        let known = EventKind.allCases.map(\.rawValue) + ["value"]
        if let name = fields.optionalString("event"), !known.contains(name) { return .unknownEvent(fields.object) }
        throw error
      }
    }
    let id = fields.object["id"]
    if try fields.bool("ok") {
      return .reply(id: id, result: .success(fields.object["result"] ?? .null))
    }
    return .reply(id: id, result: .failure(try ProtocolError(parsing: fields.object["error"])))
  }
}

extension ProtocolError {
  /// Reads an error object as a server sends it (a failed reply's `error`, a `schedule-failed`
  /// event's). A code this client does not know becomes `internal-error`, with the message kept.
  public init(parsing value: JSONValue?) throws(ProtocolError) {
    guard case .object(let error)? = value else {
      throw ProtocolError(.badRequest, field: "error", "error: expected an error object")
    }
    let details = try ServerFields(.object(error), what: "an error")
    let code = ErrorCode(rawValue: try details.string("code")) ?? .internalError
    self.init(code, field: details.optionalString("field"), try details.string("message"))
    bound = details.optionalString("bound").flatMap(ProtocolError.Bound.init(rawValue:))
    self.value = details.object["value"]?.numberValue
    detail = details.optionalString("detail")
  }
}

/// Lenient reading of server lines (clients accept members they do not know).
private struct ServerFields {
  let object: JSONObject

  init(_ value: JSONValue, what: String) throws(ProtocolError) {
    guard case .object(let object) = value else {
      throw ProtocolError(.badRequest, "\(what) must be a JSON object, got \(describe(value))")
    }
    self.object = object
  }

  private func missing(_ key: String, _ what: String) -> ProtocolError {
    .at(key, .badRequest, "expected \(what), got \(object[key].map(describe) ?? "nothing")")
  }

  func string(_ key: String) throws(ProtocolError) -> String {
    guard case .string(let text)? = object[key] else { throw missing(key, "a string") }
    return text
  }

  func optionalString(_ key: String) -> String? { object[key]?.stringValue }

  /// An array of strings, or empty when absent.
  func optionalStrings(_ key: String) throws(ProtocolError) -> [String] {
    guard let value = object[key] else { return [] }
    guard case .array(let items) = value else { throw missing(key, "an array of strings") }
    var names: [String] = []
    for item in items {
      guard case .string(let name) = item else { throw missing(key, "an array of strings") }
      names.append(name)
    }
    return names
  }

  func bool(_ key: String) throws(ProtocolError) -> Bool {
    guard case .bool(let flag)? = object[key] else { throw missing(key, "true or false") }
    return flag
  }

  func number(_ key: String) throws(ProtocolError) -> Double {
    guard case .number(let number)? = object[key] else { throw missing(key, "a number") }
    return number
  }

  func integer(_ key: String) throws(ProtocolError) -> Int64 {
    let number = try number(key)
    guard number == number.rounded(), abs(number) < 9.2e18 else { throw missing(key, "a whole number") }
    return Int64(number)
  }

  func unsigned(_ key: String) throws(ProtocolError) -> UInt64 {
    let number = try integer(key)
    guard number >= 0 else { throw missing(key, "a whole number, not negative") }
    return UInt64(number)
  }

  func optionalUnsigned(_ key: String) throws(ProtocolError) -> UInt64? {
    guard let value = object[key], value != .null else { return nil }
    return try unsigned(key)
  }
}

/// Splits a byte stream into lines of at most `maxLineBytes` bytes (not counting the newline;
/// a CR before it is dropped too). A longer line yields `.tooLong` once and nothing after it:
/// the server answers `line-too-long` and closes the connection, since it cannot know where
/// the next request would begin.
public struct LineFramer: Sendable {
  public enum Frame: Sendable, Equatable {
    case line([UInt8])
    case tooLong
  }

  public let maxLineBytes: Int
  private var pending: [UInt8] = []
  private var failed = false

  public init(maxLineBytes: Int = ProtocolLimits.defaultLineBytes) {
    self.maxLineBytes = maxLineBytes
  }

  /// Bytes received after the last complete line.
  public var pendingByteCount: Int { pending.count }

  public mutating func push(_ bytes: some Sequence<UInt8>) -> [Frame] {
    guard !failed else { return [] }
    var frames: [Frame] = []
    for byte in bytes {
      if byte == UInt8(ascii: "\n") {
        if pending.last == UInt8(ascii: "\r") { pending.removeLast() }
        frames.append(.line(pending))
        pending.removeAll(keepingCapacity: true)
        continue
      }
      pending.append(byte)
      // One byte of slack for a CR that a newline would then drop.
      if pending.count > maxLineBytes + (byte == UInt8(ascii: "\r") ? 1 : 0) {
        failed = true
        pending = []
        frames.append(.tooLong)
        return frames
      }
    }
    return frames
  }
}
