import FoundationEssentials
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// Why a message gets `/rampd/error` instead of a request to rampd.
struct Refusal: Error, Equatable, Sendable {
  /// `unknown-address`, `invalid-arguments`, `invalid-value`, or one of rampd's own codes.
  let code: String
  let message: String

  static func arguments(_ message: OSCMessage, expected: String) -> Refusal {
    Refusal(
      code: "invalid-arguments",
      message:
        "\(message.address) takes \(expected); got \(message.typeTags == "," ? "no arguments" : message.typeTags)")
  }
}

/// A fader of a fixed controller layout mapped onto a key path: `/1/fader1=master.gain`, with a
/// range and a curve: `/1/fader1=streams.bed.gain:0..0.5:square`.
struct Mapping: Equatable, Sendable {
  enum Curve: String, CaseIterable, Sendable {
    /// minimum + x · (maximum − minimum)
    case linear
    /// minimum + x² · (maximum − minimum): a fader law close to an audio taper.
    case square
    /// Equal steps of dB from minimum (above 0) to maximum; 0 is silence.
    case db
  }

  let address: String
  let key: String
  let minimum: Double
  let maximum: Double
  let curve: Curve

  static let forms = "ADDRESS=KEY[:MIN..MAX[:linear|square|db]], e.g. /1/fader1=master.gain:0..1:db"

  /// Reads `ADDRESS=KEY[:MIN..MAX[:CURVE]]`.
  init(parsing text: String) throws(Refusal) {
    func fail(_ why: String) -> Refusal {
      Refusal(code: "invalid-map", message: "--map '\(text)': \(why); expected \(Self.forms)")
    }
    guard let equals = text.firstIndex(of: "=") else { throw fail("no '='") }
    address = String(text[..<equals])
    guard address.hasPrefix("/"), address.count > 1, address.utf8.allSatisfy({ (0x21...0x7e).contains($0) }),
      !address.contains(where: { "*?[]{},#".contains($0) })
    else { throw fail("the address must start with / and hold no space, pattern character, ',' or '#'") }
    let parts = text[text.index(after: equals)...].split(separator: ":", omittingEmptySubsequences: false)
    key = String(parts[0])
    guard KeyPathText.isWellFormed(key) else { throw fail("'\(key)' is not a key path such as master.gain") }
    guard parts.count <= 3 else { throw fail("too many ':'") }
    if parts.count >= 2 {
      let bounds = parts[1].components(separatedBy: "..")
      guard bounds.count == 2, let low = Self.number(bounds[0]), let high = Self.number(bounds[1]) else {
        throw fail("'\(parts[1])' is not a range MIN..MAX of numbers (0.5, 50%, -6dB)")
      }
      minimum = low
      maximum = high
    } else {
      minimum = 0
      maximum = 1
    }
    if parts.count == 3 {
      guard let curve = Curve(rawValue: String(parts[2]).lowercased()) else {
        throw fail("no curve '\(parts[2])' (linear, square or db)")
      }
      self.curve = curve
    } else {
      curve = .linear
    }
    if curve == .db && !(minimum > 0 && maximum > 0) {
      throw fail("the db curve needs a range above 0, such as -60dB..0dB")
    }
  }

  /// A number, else a gain as rampctl reads it (`50%`, `-6dB`).
  private static func number(_ text: String) -> Double? {
    if let value = Double(text), value.isFinite { return value }
    return try? HumanUnits.gain(text)
  }

  /// The value for a fader position `x` in 0…1.
  func value(at x: Double) -> Double {
    switch curve {
    case .linear: return minimum + x * (maximum - minimum)
    case .square: return minimum + x * x * (maximum - minimum)
    case .db:
      guard x > 0 else { return 0 }
      let low = 20 * log10(minimum)
      let high = 20 * log10(maximum)
      return pow(10, (low + x * (high - low)) / 20)
    }
  }
}

/// Key paths as rampd writes them: names of letters, digits, `_` and `-`, joined by dots.
enum KeyPathText {
  static func isWellFormed(_ text: String) -> Bool {
    let names = text.split(separator: ".", omittingEmptySubsequences: false)
    return text.utf8.count <= 256 && names.count >= 2
      && names.allSatisfy { name in
        !name.isEmpty
          && name.utf8.allSatisfy { isalnum(Int32($0)) != 0 || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
      }
  }
}

/// rampd-osc's address space: what each message asks of rampd (docs/OSC.md).
struct AddressSpace: Sendable {
  static let root = "/rampd"
  var mappings: [String: Mapping] = [:]

  /// The commands under /rampd, with the type tags each takes.
  static let commands: [(name: String, forms: String)] = [
    ("set", ",sf or ,sff (key path, value[, duration])"),
    ("fade", ",sf or ,sff (key path, to[, duration])"),
    ("play", ",s or ,ss (path[, stream])"),
    ("stop", ", ,s or ,sf ([stream[, fade]])"),
    ("pause", ", ,s or ,sf ([stream[, fade]])"),
    ("resume", ", ,s or ,sf ([stream[, fade]])"),
    ("duck", ",s (rule)"),
    ("unduck", ",s (rule)"),
    ("get", ",s (key path)"),
    ("ping", "no arguments"),
  ]

  /// rampd applies at most this many commands together (a `batch`'s bound).
  static let maxTogether = 256

  /// The request (without id) for messages that take effect together, all with one time (a
  /// bundle's): one message's own request, or a `batch` of them, which rampd applies on one sample
  /// or not at all; `at` from the bundle's timetag. A message that cannot be translated refuses
  /// the whole group: `failed` is its index in `messages`.
  func request(for messages: [OSCMessage]) throws(GroupRefusal) -> JSONObject {
    guard messages.count <= Self.maxTogether else {
      throw GroupRefusal(
        failed: nil,
        Refusal(
          code: "limit-exceeded",
          message:
            "a bundle of \(messages.count) messages with one timetag; rampd applies at most \(Self.maxTogether) together"
        ))
    }
    var commands: [JSONObject] = []
    for (index, message) in messages.enumerated() {
      do {
        commands.append(try command(for: message))
      } catch {
        throw GroupRefusal(failed: index, error)
      }
    }
    var request =
      commands.count == 1 ? commands[0] : ["cmd": "batch", "commands": .array(commands.map(JSONValue.object))]
    if case .at(let seconds) = messages.first?.time {
      request["at"] = .string(RFC3339.format(seconds))
    }
    return request
  }

  private func command(for message: OSCMessage) throws(Refusal) -> JSONObject {
    let address = message.address
    if address.contains(where: { "*?[]{}".contains($0) }) {
      throw Refusal(
        code: "unknown-address",
        message: "\(address): address patterns (* ? [ ] { }) are not supported; name one address")
    }
    if let mapping = mappings[address] {
      let x = try Arguments(message).number(1, "a fader position")
      try Arguments(message).end(after: 1, expected: ",f (a fader position 0…1)")
      guard (0...1).contains(x) else {
        throw Refusal(code: "invalid-value", message: "\(address): the fader position \(x) is outside 0…1")
      }
      return ["cmd": "set", "key": .string(mapping.key), "value": .number(mapping.value(at: x))]
    }
    guard address.hasPrefix(Self.root + "/") else {
      throw Refusal(code: "unknown-address", message: "\(address): not under \(Self.root)/ nor mapped (--map)")
    }
    let path = address.dropFirst(Self.root.count + 1).split(separator: "/", omittingEmptySubsequences: false)
    let arguments = Arguments(message)
    if path.count >= 2 {
      // /rampd/master/gain ,f 0.5: the key path in the address.
      let key = path.joined(separator: ".")
      guard KeyPathText.isWellFormed(key) else {
        throw Refusal(code: "unknown-address", message: "\(address): '\(key)' is not a key path")
      }
      let value = try arguments.number(1, "a value", expected: ",f or ,ff (value[, duration])")
      var request: JSONObject = ["cmd": "set", "key": .string(key), "value": .number(value)]
      if message.arguments.count >= 2 {
        request["duration"] = .number(try arguments.number(2, "a duration", expected: ",f or ,ff (value[, duration])"))
      }
      try arguments.end(after: 2, expected: ",f or ,ff (value[, duration])")
      return request
    }
    let name = String(path[0])
    guard let forms = Self.commands.first(where: { $0.name == name })?.forms else {
      throw Refusal(
        code: "unknown-address",
        message:
          "\(address): no such address; \(Self.root)/<key path with / for .> or \(Self.root)/ with one of \(Self.commands.map(\.name).joined(separator: ", "))"
      )
    }
    let count = message.arguments.count
    switch name {
    case "set", "fade":
      let key = try arguments.keyPath(1, expected: forms)
      let value = try arguments.number(2, "a value", expected: forms)
      try arguments.end(after: 3, expected: forms)
      var request: JSONObject = [
        "cmd": .string(name), "key": .string(key), (name == "set" ? "value" : "to"): .number(value),
      ]
      if count >= 3 { request["duration"] = .number(try arguments.number(3, "a duration", expected: forms)) }
      return request
    case "play":
      var request: JSONObject = ["cmd": "play", "path": .string(try arguments.string(1, "a path", expected: forms))]
      if count >= 2 { request["stream"] = .string(try arguments.string(2, "a stream id", expected: forms)) }
      try arguments.end(after: 2, expected: forms)
      return request
    case "stop", "pause", "resume":
      var request: JSONObject = ["cmd": .string(name)]
      if count >= 1 { request["stream"] = .string(try arguments.string(1, "a stream id", expected: forms)) }
      if count >= 2 { request["fade"] = .number(try arguments.number(2, "a fade duration", expected: forms)) }
      try arguments.end(after: 2, expected: forms)
      return request
    case "duck", "unduck":
      let rule = try arguments.string(1, "a duck rule's name", expected: forms)
      try arguments.end(after: 1, expected: forms)
      return ["cmd": .string(name), "name": .string(rule)]
    case "get":
      let key = try arguments.keyPath(1, expected: forms)
      try arguments.end(after: 1, expected: forms)
      return ["cmd": "get", "key": .string(key)]
    default:
      try arguments.end(after: 0, expected: forms)
      return ["cmd": "ping"]
    }
  }
}

/// Why messages that take effect together are not sent: `failed` is the index of the one
/// refused, nil when the group itself is.
struct GroupRefusal: Error {
  let failed: Int?
  let refusal: Refusal
  init(failed: Int?, _ refusal: Refusal) {
    self.failed = failed
    self.refusal = refusal
  }
}

/// A message's arguments, read by position (1-based, as the errors name them).
private struct Arguments {
  let message: OSCMessage

  init(_ message: OSCMessage) { self.message = message }

  func number(_ position: Int, _ what: String, expected: String? = nil) throws(Refusal) -> Double {
    guard position <= message.arguments.count else {
      throw Refusal.arguments(message, expected: expected ?? ",f (\(what))")
    }
    guard case .number(let value, _) = message.arguments[position - 1] else {
      throw Refusal(
        code: "invalid-arguments",
        message:
          "\(message.address): argument \(position) (\(what)) must be a number (f, d, i or h); got type \(message.arguments[position - 1].tag)"
      )
    }
    guard value.isFinite else {
      throw Refusal(
        code: "invalid-value",
        message: "\(message.address): argument \(position) (\(what)) is \(value), not a finite number")
    }
    return value
  }

  func string(_ position: Int, _ what: String, expected: String) throws(Refusal) -> String {
    guard position <= message.arguments.count else { throw Refusal.arguments(message, expected: expected) }
    guard case .string(let value) = message.arguments[position - 1] else {
      throw Refusal(
        code: "invalid-arguments",
        message:
          "\(message.address): argument \(position) (\(what)) must be a string (s); got type \(message.arguments[position - 1].tag)"
      )
    }
    return value
  }

  /// A key path given as a string: `master.gain`, or `master/gain` as in an address.
  func keyPath(_ position: Int, expected: String) throws(Refusal) -> String {
    let text = try string(position, "a key path", expected: expected)
    let key = text.replacing("/", with: ".").trimming(while: { $0 == "." })
    guard KeyPathText.isWellFormed(key) else {
      throw Refusal(
        code: "invalid-value",
        message: "\(message.address): argument \(position) '\(text)' is not a key path such as master.gain")
    }
    return key
  }

  /// Refuses more than `count` arguments.
  func end(after count: Int, expected: String) throws(Refusal) {
    guard message.arguments.count <= count else { throw Refusal.arguments(message, expected: expected) }
  }
}
