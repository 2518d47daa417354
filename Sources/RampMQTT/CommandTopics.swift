import FoundationEssentials
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// The command topics under `rampd/<box>/` and `rampd/all/`, and how a message's payload becomes
/// one of rampd's requests (PROTOCOL.md). A payload is either plain text, read as rampctl reads
/// its arguments (`0.5`, `50%`, `-6dB`, `2s`), or a JSON object of the command's fields, whose
/// `value`/`to`, `duration` and `at` may also be written in those units. The request is checked
/// with rampd's own parser before it is sent, so a bad field is refused here, named as rampd
/// names it.
enum CommandTopics {
  /// The topic levels after `rampd/<box>/` that are commands; `set` and `fade` take a key path,
  /// `duck` a duck rule's name.
  static let commands = ["set", "fade", "fade-out", "stop", "play", "next", "previous", "duck"]
  /// The longest payload read (a JSON object of a few fields fits many times over).
  static let maximumPayload = 4096

  /// The subscriptions for one target (`<box>` or `all`).
  static func subscriptions(prefix: String) -> [String] {
    [
      "\(prefix)/set/#", "\(prefix)/fade/#", "\(prefix)/fade-out", "\(prefix)/stop", "\(prefix)/play",
      "\(prefix)/next", "\(prefix)/previous", "\(prefix)/duck/+",
    ]
  }

  /// The request for `levels` (the topic after `rampd/<target>/`) and `payload`.
  static func request(levels: [Substring], payload bytes: [UInt8], now: Date = Date()) throws(ProtocolError)
    -> Request
  {
    guard bytes.count <= maximumPayload else {
      throw ProtocolError(.lineTooLong, "the payload has \(bytes.count) bytes; at most \(maximumPayload) are read")
    }
    guard let text = String(validating: bytes, as: UTF8.self) else {
      throw ProtocolError(.badRequest, "the payload is not UTF-8 text")
    }
    guard let command = levels.first.map(String.init) else {
      throw ProtocolError(.unknownCommand, "no command in the topic")
    }
    let rest = levels.dropFirst()
    let payload = text.trimmingWhitespace()
    var fields: JSONObject
    if payload.hasPrefix("{") {
      guard case .object(let object) = try JSON.parse(payload) else {
        throw ProtocolError(.badRequest, "the payload is not a JSON object")
      }
      for name in ["cmd", "key", "id"] where object[name] != nil {
        throw ProtocolError(.invalidField, field: name, "\(name): the topic says it; leave it out of the payload")
      }
      fields = object
    } else {
      fields = [:]
    }
    switch command {
    case "set", "fade":
      guard !rest.isEmpty else {
        throw ProtocolError(
          .invalidField, field: "key", "key: the topic names the key path, as \(command)/master.gain")
      }
      let key = rest.joined(separator: ".")
      fields["cmd"] = .string(command)
      fields["key"] = .string(key)
      let valueName = command == "set" ? "value" : "to"
      if payload.hasPrefix("{") {
        // Either name is taken for the value, in the units of the plain payload too.
        for name in ["value", "to"] {
          if case .string(let written) = fields[name] { fields[name] = .number(try number(written, key: key, name)) }
        }
        if command == "fade", let value = fields["value"] {
          guard fields["to"] == nil else {
            throw ProtocolError(.invalidField, field: "value", "value: give value or to, not both")
          }
          fields["value"] = nil
          fields["to"] = value
        }
      } else {
        fields[valueName] = .number(try number(payload, key: key, valueName))
      }
    case "duck":
      // A switch: ON holds the rule down (`duck`), OFF lets it go (`unduck`).
      guard rest.count == 1, let name = rest.first, !name.isEmpty else {
        throw ProtocolError(.invalidField, field: "name", "name: the topic names one duck rule, as duck/talk")
      }
      var state = payload
      if payload.hasPrefix("{") {
        guard case .string(let written) = fields["state"] ?? .null else {
          throw ProtocolError(.missingField, field: "state", "state: give \"ON\" or \"OFF\"")
        }
        state = written
        fields["state"] = nil
      }
      let on: Bool
      switch state.uppercased() {
      case "ON": on = true
      case "OFF": on = false
      default: throw ProtocolError(.invalidField, field: "state", "state: '\(state)' is neither ON nor OFF")
      }
      fields["cmd"] = .string(on ? "duck" : "unduck")
      fields["name"] = .string(String(name))
    case "fade-out", "stop", "play", "next", "previous":
      guard rest.isEmpty else {
        throw ProtocolError(.unknownCommand, "\(command) takes no key path in its topic")
      }
      fields["cmd"] = .string(command)
      if !payload.hasPrefix("{") { try plainFields(command, payload, &fields) }
      // A button's fade-out fades every stream out and stops them, unless told otherwise.
      if command == "fade-out", fields["key"] == nil, fields["then"] == nil {
        fields["then"] = .string("stop")
      }
    default:
      throw ProtocolError(
        .unknownCommand,
        "'\(command)' is not a command topic; the commands are \(commands.joined(separator: ", "))")
    }
    if case .string(let written) = fields["duration"] {
      do { fields["duration"] = .number(try HumanUnits.duration(written, option: "duration")) } catch {
        throw ProtocolError(.invalidField, field: "duration", error.description)
      }
    }
    // `at` in rampctl's forms (`+10s`, `23:00`, an RFC 3339 time), set once the rest is checked.
    var at: Schedule?
    if case .string(let written) = fields["at"] {
      do { at = try HumanUnits.when(written, option: "at", now: now) } catch {
        throw ProtocolError(.invalidField, field: "at", error.description)
      }
      fields["at"] = nil
    }
    var request = try Request.parse(.object(fields))
    if let at { request.at = at }
    return request
  }

  /// A plain payload of a command without a key path: nothing (or a button's `PRESS`), or its
  /// one argument.
  private static func plainFields(_ command: String, _ payload: String, _ fields: inout JSONObject)
    throws(ProtocolError)
  {
    if payload.isEmpty || payload == "PRESS" {
      if command == "play" { throw ProtocolError(.missingField, field: "path", "path: play needs a file") }
      if command == "next" || command == "previous" {
        throw ProtocolError(.missingField, field: "stream", "stream: \(command) needs a stream")
      }
      return
    }
    switch command {
    case "fade-out":
      do { fields["duration"] = .number(try HumanUnits.duration(payload, option: "duration")) } catch {
        throw ProtocolError(.invalidField, field: "duration", error.description)
      }
    case "play": fields["path"] = .string(payload)
    default: fields["stream"] = .string(payload)
    }
  }

  /// A value in rampctl's units: a gain (`0.5`, `50%`, `-6dB`) for a key path ending in `.gain`,
  /// else a plain number (a pan of `-0.5`).
  static func number(_ text: String, key: String, _ field: String) throws(ProtocolError) -> Double {
    if key.hasSuffix(".gain") {
      do { return try HumanUnits.gain(text, option: field) } catch {
        throw ProtocolError(.invalidField, field: field, error.description)
      }
    }
    guard let value = HumanUnits.plainNumber(text.trimming(while: { $0 == " " || $0 == "\t" })), value.isFinite else {
      throw ProtocolError(.invalidField, field: field, "\(field): '\(text)' is not a number")
    }
    return value
  }
}
