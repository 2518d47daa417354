import Foundation
import RampEngine
import RampProtocol

/// The structure-aware fuzzer (`RampFuzz --structured REQUESTS [SEED]`): well-formed requests of
/// every command and every animation type, written from the protocol's own description
/// (`ProtocolSchema`), with extreme values in every numeric field, sent to a real rampd in this
/// process over its socket, as any client sends them. Random bytes rarely make a valid request
/// with extreme numbers; these are all valid in form, so they reach the checks, the engine and
/// the render thread.
///
/// After every request a `ping`, and after every chunk of requests a `status`, must be answered:
/// the daemon still answers. A reply that the client's parser cannot read, an `internal-error`,
/// a closed connection or no answer within the reply timeout fails the run (as does a crash,
/// caught by the sanitizers and the process's exit status).
struct StructuredFuzzer {
  var random: SplitMix
  let directory: String
  let replyTimeout: Double
  /// Requests sent so far.
  private(set) var sent = 0
  /// The replies to the generated requests read so far: "ok", or the error code.
  private(set) var outcomes: [String: Int] = [:]

  static let chunk = 128
  /// Longest line the daemon takes here: arrays of 4096 numbers and deep groups fit.
  static let lineLength = 1 << 20

  init(seed: UInt64, directory: String, replyTimeout: Double) {
    random = SplitMix(seed: seed)
    self.directory = directory
    self.replyTimeout = replyTimeout
  }

  /// Sends `requests` requests (each followed by a ping) in chunks over one connection per daemon.
  mutating func run(requests: Int) {
    var number = 0
    var generation: Generation?
    var connection: Connection?
    var chunks = 0
    while sent < requests {
      if generation == nil {
        number += 1
        let fresh = Generation(directory: directory, number: 1000 + number, lineLength: Self.lineLength)
        generation = fresh
        connection = open(fresh)
      }
      let count = min(Self.chunk, requests - sent)
      var lines = [
        #"{"cmd":"unobserve"}"#, #"{"cmd":"play","path":"\#(directory)/media/tone.wav","stream":"s1","loop":true}"#,
      ]
      for index in 0..<count {
        // A batch of big groups can outgrow the line limit: such a line is only `line-too-long`.
        var line = request(inBatch: false).serialized()
        while line.utf8.count > Self.lineLength { line = request(inBatch: false).serialized() }
        lines.append(line)
        lines.append(#"{"id":"alive-\#(index)","cmd":"ping"}"#)
      }
      lines.append(#"{"id":"alive-status","cmd":"status"}"#)
      converse(lines, expecting: count + 1, over: connection!)
      sent += count
      chunks += 1
      generation!.reset(timeout: replyTimeout, input: Array(lines.joined(separator: "\n").utf8))
      // Schedules far ahead pile up: a fresh daemon when half the allowance is taken. (Leaks are
      // not looked for here, so the old one goes.)
      if chunks % 8 == 0, generation!.pendingSchedules(timeout: replyTimeout) > Generation.pendingLimit / 2 {
        connection = nil
        generation!.daemon.shutdown()
        generation = nil
      }
    }
  }

  private func open(_ generation: Generation) -> Connection {
    guard let connection = Connection(path: generation.socketPath),
      let greeting = connection.line(before: Clock.now + replyTimeout),
      case .greeting? = try? ServerLine.parse(String(decoding: greeting, as: UTF8.self))
    else { Failure.report("cannot connect to \(generation.socketPath) or no greeting", input: []) }
    return connection
  }

  /// Sends the chunk, then reads until every `alive-` request is answered.
  private mutating func converse(_ lines: [String], expecting alive: Int, over connection: Connection) {
    let input = Array((lines.joined(separator: "\n") + "\n").utf8)
    connection.send(input)
    let deadline = Clock.now + replyTimeout
    var answered = 0
    var last = ""
    while answered < alive {
      guard let bytes = connection.line(before: deadline) else {
        let longest = lines.map(\.utf8.count).max() ?? 0
        Failure.report(
          connection.closed
            ? "the server closed the connection after \(answered) of \(alive) liveness replies (the last line"
              + " read: \(last.prefix(300)); the longest request: \(longest) bytes)"
            : "\(answered) of \(alive) liveness replies within \(replyTimeout) s: the daemon stopped answering",
          input: input)
      }
      let text = String(decoding: bytes, as: UTF8.self)
      last = text
      let line: ServerLine
      do { line = try ServerLine.parse(text) } catch {
        Failure.report("the server wrote a line a client cannot read (\(error.message)): \(text)", input: input)
      }
      guard case .reply(let id, let result) = line else { continue }
      if case .failure(let error) = result, error.code == .internalError {
        Failure.report("internal-error: \(text)", input: input)
      }
      if case .string(let name)? = id, name.hasPrefix("alive-") {
        guard case .success = result else { Failure.report("a liveness check was refused: \(text)", input: input) }
        answered += 1
      } else {
        switch result {
        case .success: outcomes["ok", default: 0] += 1
        case .failure(let error): outcomes[error.code.rawValue, default: 0] += 1
        }
      }
    }
  }

  // MARK: Requests from the description

  mutating func request(inBatch: Bool) -> JSONValue {
    var names = Command.names
    if inBatch { names.removeAll { Command.notInBatch.contains($0) } }
    var name = names[random.below(names.count)]
    // Opening a file (a decoder thread, a read) costs more than all the rest: plays come rarer.
    if name == "play" && !random.chance(0.15) { name = names[random.below(names.count)] }
    var object: JSONObject = ["cmd": .string(name)]
    if !inBatch {
      for field in ProtocolSchema.requestFields where field.name != "cmd" && random.chance(0.15) {
        // A schedule far ahead waits without a reply; "scheduled" answers at once.
        object[field.name] = value(field.kind, depth: 0)
      }
      if object["at"] == nil { object["ack"] = nil }
      if object["at"] != nil, random.chance(0.5) { object["ack"] = "scheduled" }
    }
    fill(&object, with: ProtocolSchema.fields(of: name), depth: 0)
    return .object(object)
  }

  /// Required fields always, the others now and then.
  private mutating func fill(_ object: inout JSONObject, with fields: [ProtocolSchema.Field], depth: Int) {
    let keyframes = fields.contains { $0.name == "keyTimes" }
    let count = keyframes ? arrayLength() : 0
    for field in fields where field.required || random.chance(0.4) {
      if keyframes, case .array(of: let element, limit: _) = field.kind {
        object[field.name] = keyframeArray(field.name, element: element, count: count)
      } else {
        object[field.name] = value(field.kind, depth: depth)
      }
    }
  }

  /// Keyframe arrays agree in length, and key times run from 0 to 1, so that most are accepted.
  private mutating func keyframeArray(_ name: String, element: ProtocolSchema.Kind, count: Int) -> JSONValue {
    switch name {
    case "keyTimes" where !random.chance(0.1):
      return .array((0..<count).map { .number(count > 1 ? Double($0) / Double(count - 1) : 0) })
    case "timingFunctions":
      return .array((0..<max(count - 1, 0)).map { _ in value(element, depth: 0) })
    default:
      return .array((0..<count).map { _ in value(element, depth: 0) })
    }
  }

  private mutating func arrayLength() -> Int {
    random.chance(0.02) ? ProtocolLimits.arrayCount : random.chance(0.05) ? 0 : 1 + random.below(5)
  }

  private mutating func value(_ kind: ProtocolSchema.Kind, depth: Int) -> JSONValue {
    switch kind {
    case .seconds: return .number(random.chance(0.4) ? extreme() : random.unit() * 0.2)
    case .time: return .number(random.chance(0.4) ? extreme() : random.unit() * 0.4 - 0.1)
    case .number: return .number(random.chance(0.4) ? extreme() : random.unit() * 2 - 0.5)
    case .countOrInfinity:
      return random.chance(0.1) ? "inf" : .number(random.chance(0.4) ? extreme() : Double(random.below(4)))
    case .bool: return .bool(random.chance(0.5))
    case .text(let bytes):
      let texts = [
        "\(directory)/media/tone.wav", "\(directory)/media/mono22k.wav", "\(directory)/media/click.wav",
        "\(directory)/media/sub/deep.wav", "streams", "master", "", String(repeating: "x", count: bytes),
      ]
      return .string(pick(texts))
    case .identifier: return .string(pick(["s1", "s2", "fade", "animation", String(repeating: "z", count: 64)]))
    case .keyPath:
      let long = String(repeating: "k", count: 60)
      return .string(
        pick([
          "master.gain", "master.gain", "streams.s1.gain", "streams.s1.pan", "streams.s2.gain",
          "streams.s1.transport", "streams.\(long).gain", (0..<40).map { _ in "ab" }.joined(separator: "."),
        ]))
    case .curve: return .string(curve())
    case .space: return .string(pick(["amplitude", "power", "db", "db(-80)"]))
    case .choice(let names): return .string(pick(names))
    case .scalar: return random.chance(0.5) ? .number(extreme()) : "client-id"
    case .schedule:
      if random.chance(0.1) { return .string(pick(["2020-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])) }
      return .number(random.chance(0.15) ? abs(extreme()) : random.unit() * 0.05)
    case .array(let element, let limit):
      let count = random.chance(0.02) ? limit : 1 + random.below(3)
      return .array((0..<count).map { _ in value(element, depth: depth + 1) })
    case .animation: return animation(depth: depth, isChild: depth > 0)
    case .command: return request(inBatch: true)
    case .animationID: return .number(random.chance(0.3) ? abs(extreme()) : Double(random.below(64)))
    case .eventKind: return .string(pick(EventKind.allCases.map(\.rawValue)))
    case .scheduleID: return .number(random.chance(0.3) ? abs(extreme()) : Double(random.below(64)))
    case .recurrence:
      // A time of day with days, or an interval: each is valid on its own, and now and then both.
      var object: JSONObject = [:]
      if random.chance(0.5) {
        object["time"] = .string(pick(["07:00", "23:59:59", "00:00", "24:00", "7", ""]))
        if random.chance(0.6) {
          let days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun", "weekdays", "holiday"]
          object["days"] = .array((0..<(1 + random.below(3))).map { _ in .string(pick(days)) })
        }
      }
      if object.isEmpty || random.chance(0.1) {
        object["every"] = .number(random.chance(0.4) ? extreme() : 0.05 + random.unit())
      }
      return .object(object)
    }
  }

  /// An animation of any type; groups nest, now and then deeply.
  private mutating func animation(depth: Int, isChild: Bool) -> JSONValue {
    var types = ProtocolSchema.animationTypes
    // Deep nesting is rare; beyond 24 levels a group holds leaves only.
    if depth > 24 || (depth > 2 && !random.chance(0.7)) { types.removeAll { $0 == "group" } }
    let type = pick(types)
    var object: JSONObject = ["type": .string(type)]
    var fields = ProtocolSchema.commonAnimationFields.filter { $0.name != "type" }
    let perceptual = type == "spring" && random.chance(0.3)
    fields += perceptual ? ProtocolSchema.perceptualSpringFields : ProtocolSchema.animationFields[type] ?? []
    if isChild { fields.append(ProtocolSchema.childField) }
    if perceptual { object["duration"] = value(.seconds, depth: depth) }
    // The timing fields that make repeats, reversals and accumulation come more often.
    for name in ["repeatCount", "autoreverses", "additive", "cumulative", "beginTime", "duration"]
    where random.chance(0.3) {
      if let field = fields.first(where: { $0.name == name }) { object[name] = value(field.kind, depth: depth) }
    }
    if type == "group" {
      let children = random.chance(0.05) ? 64 : 1 + random.below(3)
      object["animations"] = .array((0..<children).map { _ in animation(depth: depth + 1, isChild: true) })
      fields.removeAll { $0.name == "animations" }
    }
    // "dbFloor" is taken only with a dB space, and at most two of from, to and by.
    fill(&object, with: fields.filter { object[$0.name] == nil }, depth: depth + 1)
    if object["dbFloor"] != nil && random.chance(0.8) { object["valueSpace"] = "db" }
    if object["from"] != nil && object["to"] != nil && random.chance(0.9) { object["by"] = nil }
    return .object(object)
  }

  private mutating func curve() -> String {
    let simple = TimingFunction.names.filter { !$0.contains("(") }
    switch random.below(4) {
    case 0:
      let p = (0..<4).map { index in
        JSONValue.format(random.chance(0.3) ? extreme() : index % 2 == 0 ? random.unit() : random.unit() * 3 - 1)
      }
      return "cubic-bezier(\(p.joined(separator: ",")))"
    case 1:
      let steps = random.chance(0.3) ? JSONValue.format(abs(extreme())) : "\(1 + random.below(8))"
      return "steps(\(steps)\(random.chance(0.5) ? ",start" : ""))"
    default: return pick(simple)
    }
  }

  /// The numbers where arithmetic breaks: zeros, subnormals, the edges of exact integers in a
  /// Double and of Int64, the horizon and just past it, and the largest magnitudes.
  static let extremes: [Double] = [
    0, -0.0, .leastNonzeroMagnitude, -.leastNonzeroMagnitude, Double.leastNormalMagnitude.nextDown, 1e-300, 1e-9, 1,
    -1, 0.5, 9_007_199_254_740_991, 9_007_199_254_740_992, 9_007_199_254_740_994, -9_007_199_254_740_992,
    9.223372036854775807e18, -9.223372036854775808e18, 1.8446744073709552e19, 1e14, -1e14, 4.8e18,
    MediaTiming.horizon, MediaTiming.horizon.nextUp, -MediaTiming.horizon, 1e10, 1e300, -1e300,
    Double.greatestFiniteMagnitude, -Double.greatestFiniteMagnitude, 48_000, 1e-7, 4096, 65_536,
  ]

  private mutating func extreme() -> Double { pick(Self.extremes) }

  private mutating func pick<T>(_ choices: [T]) -> T { choices[random.below(choices.count)] }
}
