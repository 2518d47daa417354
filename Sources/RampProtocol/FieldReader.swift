import RampEngine

/// Limits on what one request may carry, so a client cannot make the daemon allocate without
/// bound. Exceeding one is `limit-exceeded`, naming the field.
public enum ProtocolLimits {
  /// Bytes in a file path.
  public static let pathBytes = 4096
  /// Bytes in any other string (key paths, names, ids).
  public static let stringBytes = 256
  /// Entries in `values`, `keyTimes` and the other keyframe arrays, and in `wait`'s `animations`.
  public static let arrayCount = 4096
  /// Commands in one batch.
  public static let batchCount = 256
  /// Children of one group animation.
  public static let groupCount = 256
  /// Files in one stream's queue (and in one `queue-add`).
  public static let queueCount = 1024
  /// Stream ids and animation names: `[A-Za-z0-9_-]{1,64}`, so a stream id is a key-path component.
  public static let identifierBytes = 64
  /// Bytes in a line, unless the daemon's configuration says otherwise.
  public static let defaultLineBytes = 65_536
}

/// Reads the fields of one JSON object, naming every error by the field's full path (`prefix`
/// is what leads to the object: `""`, `"animation."`, `"commands[2]."`).
///
/// A null member counts as absent, so clients that serialise unset options as null work.
struct FieldReader {
  let object: JSONObject
  let prefix: String
  let options: ParseOptions

  /// Refuses any key outside `allowed` first, so a typo is reported as the typo rather than as
  /// the required field it failed to supply.
  init(_ object: JSONObject, prefix: String, allowed: [String], context: String, options: ParseOptions)
    throws(ProtocolError)
  {
    self.object = object
    self.prefix = prefix
    self.options = options
    // Lengths first: a full comparison of two different strings costs far more.
    for (key, _) in object where !allowed.contains(where: { $0.utf8.count == key.utf8.count && $0 == key }) {
      var message = "\(context) takes no field \"\(key)\""
      if let match = Suggestion.closest(to: key, among: allowed) { message += "; did you mean \(match)?" }
      throw .at(prefix + key, .unknownField, message)
    }
  }

  /// A reader that refuses no key: for fields the request's own reader has admitted already.
  init(unchecked object: JSONObject, prefix: String, options: ParseOptions) {
    self.object = object
    self.prefix = prefix
    self.options = options
  }

  func path(_ key: String) -> String { prefix + key }

  func value(_ key: String) -> JSONValue? {
    guard let value = object[key], value != .null else { return nil }
    return value
  }

  func has(_ key: String) -> Bool { value(key) != nil }

  func invalid(_ key: String, _ message: String) -> ProtocolError { .at(path(key), .invalidField, message) }

  func required<T>(_ value: T?, _ key: String) throws(ProtocolError) -> T {
    guard let value else { throw .at(path(key), .missingField, "missing; this field is required") }
    return value
  }

  func string(_ key: String, limit: Int = ProtocolLimits.stringBytes) throws(ProtocolError) -> String? {
    guard let value = value(key) else { return nil }
    guard case .string(let text) = value else { throw invalid(key, "expected a string, got \(describe(value))") }
    guard text.utf8.count <= limit else {
      throw .at(path(key), .limitExceeded, "at most \(limit) bytes, got \(text.utf8.count)")
    }
    return text
  }

  func number(_ key: String) throws(ProtocolError) -> Double? {
    guard let value = value(key) else { return nil }
    return try Self.finite(value, path(key), what: "a number")
  }

  /// A duration: a finite number of seconds, not negative, within the horizon.
  func seconds(_ key: String) throws(ProtocolError) -> Double? {
    guard let value = value(key) else { return nil }
    return try Self.seconds(value, path(key))
  }

  /// A moment or offset in seconds, of either sign, within the horizon.
  func time(_ key: String) throws(ProtocolError) -> Double? {
    guard let value = value(key) else { return nil }
    let number = try Self.finite(value, path(key), what: "a number of seconds")
    try Self.withinHorizon(number, path(key))
    return number
  }

  /// Times beyond the engine's horizon (`MediaTiming.horizon`, PROTOCOL.md §1) are `out-of-range`.
  static func withinHorizon(_ seconds: Double, _ field: String) throws(ProtocolError) {
    guard abs(seconds) <= MediaTiming.horizon else {
      throw .at(
        field, .outOfRange,
        "\(short(seconds)) s is beyond the horizon of \(JSONValue.format(MediaTiming.horizon)) s (about 31 years)")
    }
  }

  /// A large number as people write it: 1e14 rather than 100000000000000, 1e300 rather than 1e+300.
  static func short(_ number: Double) -> String {
    let magnitude = abs(number)
    guard magnitude >= 1e6, magnitude == magnitude.rounded() else { return JSONValue.format(number) }
    let sign = number < 0 ? "-" : ""
    guard magnitude < 9e18 else { return sign + magnitude.description.split(separator: "+").joined() }
    let digits = String(Int64(magnitude))
    let significant = digits.reversed().drop { $0 == "0" }.reversed()
    guard digits.count - significant.count >= 3 else { return JSONValue.format(number) }
    let rest = significant.dropFirst()
    return sign + String(significant.first!) + (rest.isEmpty ? "" : "." + String(rest)) + "e\(digits.count - 1)"
  }

  static func finite(_ value: JSONValue, _ field: String, what: String) throws(ProtocolError) -> Double {
    guard case .number(let number) = value else {
      throw .at(field, .invalidField, "expected \(what), got \(describe(value))")
    }
    guard number.isFinite else { throw .at(field, .invalidField, "must be a finite number, got \(number)") }
    return number
  }

  static func seconds(_ value: JSONValue, _ field: String) throws(ProtocolError) -> Double {
    let number = try finite(value, field, what: "a number of seconds")
    guard number >= 0 else { throw .at(field, .invalidField, "must not be negative, got \(JSONValue.format(number))") }
    try withinHorizon(number, field)
    return number
  }

  func bool(_ key: String) throws(ProtocolError) -> Bool? {
    guard let value = value(key) else { return nil }
    guard case .bool(let flag) = value else { throw invalid(key, "expected true or false, got \(describe(value))") }
    return flag
  }

  func choice<Choice: RawRepresentable & CaseIterable>(_ key: String, _: Choice.Type) throws(ProtocolError) -> Choice?
  where Choice.RawValue == String {
    guard let value = value(key) else { return nil }
    let names = Choice.allCases.map(\.rawValue)
    guard case .string(let text) = value, let choice = Choice(rawValue: text) else {
      throw invalid(key, "expected one of \(names.joined(separator: ", ")), got \(describe(value))")
    }
    return choice
  }

  /// A key path, checked by the engine's rules.
  func keyPath(_ key: String) throws(ProtocolError) -> String? {
    guard let text = try string(key) else { return nil }
    do { try KeyPath.validate(text) } catch { throw engineError(error, field: path(key)) }
    return text
  }

  /// A stream id or an animation name: `[A-Za-z0-9_-]{1,64}`.
  func identifier(_ key: String) throws(ProtocolError) -> String? {
    guard let text = try string(key) else { return nil }
    try Self.checkIdentifier(text, path(key))
    return text
  }

  static func checkIdentifier(_ text: String, _ field: String) throws(ProtocolError) {
    let bytes = text.utf8
    guard (1...ProtocolLimits.identifierBytes).contains(bytes.count), bytes.allSatisfy(KeyPath.isNameByte) else {
      throw .at(
        field, .invalidField,
        "expected 1 to \(ProtocolLimits.identifierBytes) letters, digits, '_' or '-', got \(describe(.string(text)))")
    }
  }

  /// A curve string, parsed by the engine (`ease-in`, `cubic-bezier(…)`, `steps(4)`, `qsin`).
  func curve(_ key: String) throws(ProtocolError) -> TimingFunction? {
    guard let value = value(key) else { return nil }
    return try Self.curve(value, path(key))
  }

  static func curve(_ value: JSONValue, _ field: String) throws(ProtocolError) -> TimingFunction {
    guard case .string(let text) = value else {
      throw .at(field, .invalidField, "expected a curve name such as \"ease-in\", got \(describe(value))")
    }
    guard text.utf8.count <= ProtocolLimits.stringBytes else {
      throw .at(field, .limitExceeded, "at most \(ProtocolLimits.stringBytes) bytes, got \(text.utf8.count)")
    }
    do { return try TimingFunction(parsing: text) } catch { throw engineError(error, field: field) }
  }

  /// A value space from `spaceKey` ("amplitude", "power", "db"), with the dB floor from
  /// `floorKey` when the space is dB.
  func space(_ spaceKey: String, floorKey: String = "dbFloor") throws(ProtocolError) -> ValueSpace? {
    let floor = try number(floorKey)
    guard let text = try string(spaceKey) else {
      if floor != nil { throw invalid(floorKey, "needs \(spaceKey) \"db\"") }
      return nil
    }
    let space: ValueSpace
    do { space = try ValueSpace(parsing: text) } catch { throw engineError(error, field: path(spaceKey)) }
    // "db" names no floor, "db(-80)" does.
    let namesNoFloor = space == .decibels(floor: nil)
    guard let floor else { return namesNoFloor ? .decibels(floor: options.decibelFloor) : space }
    guard case .decibels = space else { throw invalid(floorKey, "needs \(spaceKey) \"db\"") }
    guard namesNoFloor else {
      throw invalid(floorKey, "the floor is already given in \(spaceKey) \(describe(.string(text)))")
    }
    guard floor < 0 else { throw invalid(floorKey, "must be a negative number of dB, got \(JSONValue.format(floor))") }
    return .decibels(floor: floor)
  }

  /// An array of finite numbers, at most `ProtocolLimits.arrayCount` of them.
  func numbers(_ key: String) throws(ProtocolError) -> [Double]? {
    guard let elements = try array(key) else { return nil }
    var numbers: [Double] = []
    numbers.reserveCapacity(elements.count)
    for (index, element) in elements.enumerated() {
      numbers.append(try Self.finite(element, "\(path(key))[\(index)]", what: "a number"))
    }
    return numbers
  }

  func array(_ key: String, limit: Int = ProtocolLimits.arrayCount) throws(ProtocolError) -> [JSONValue]? {
    guard let value = value(key) else { return nil }
    guard case .array(let elements) = value else { throw invalid(key, "expected an array, got \(describe(value))") }
    guard elements.count <= limit else {
      throw .at(path(key), .limitExceeded, "at most \(limit) entries, got \(elements.count)")
    }
    return elements
  }

  func object(_ key: String) throws(ProtocolError) -> JSONObject? {
    guard let value = value(key) else { return nil }
    guard case .object(let object) = value else { throw invalid(key, "expected an object, got \(describe(value))") }
    return object
  }
}

/// An engine refusal met while a request is read, as an error on `field`, its code from the one
/// mapping (`ErrorCode(_:)`). When the engine names a finer field than the one read
/// (`cubic-bezier x1` inside `curve`), it stays in the message.
func engineError(_ error: EngineError, field: String) -> ProtocolError {
  let last = field.split(separator: ".").last.map(String.init) ?? field
  if let inner = error.field, inner != last, inner != "key", inner != "space", inner != "curve" {
    return .at(field, ErrorCode(error.code), "\(inner): \(error.message)")
  }
  return .at(field, ErrorCode(error.code), error.message)
}

/// A JSON value as an error message quotes it: strings in quotes and cut short, containers by kind.
func describe(_ value: JSONValue) -> String {
  switch value {
  case .null: return "null"
  case .bool(let flag): return flag ? "true" : "false"
  case .number(let number): return JSONValue.format(number)
  case .string(let text):
    let limit = 40
    let shown = text.count > limit ? String(text.prefix(limit)) + "…" : text
    return JSONValue.string(shown).serialized()
  case .array: return "an array"
  case .object: return "an object"
  }
}

/// "Did you mean …?" for misspelt names: commands and fields here, configuration keys in the
/// daemon, subcommands in rampctl. The one implementation of it.
public enum Suggestion {
  /// The candidate nearest to `word` by edit distance, if it is near enough to be a typo: one
  /// edit in a short word, two in a word of eight characters or more. Case and the separators
  /// `-` and `_` do not count.
  public static func closest(to word: String, among candidates: [String]) -> String? {
    let folded = fold(word)
    var best: (candidate: String, distance: Int)?
    for candidate in candidates {
      let distance = editDistance(folded, fold(candidate))
      if distance < (best?.distance ?? Int.max) { best = (candidate, distance) }
    }
    guard let best else { return nil }
    let allowed = max(1, min(2, word.count / 4))
    return best.distance <= allowed ? best.candidate : nil
  }

  /// Case and the separators `-` and `_` are not worth a suggestion's cost.
  private static func fold(_ text: String) -> [Character] {
    Array(text.lowercased().filter { $0 != "-" && $0 != "_" })
  }

  /// Edits from `a` to `b`: insertions, deletions, substitutions and swaps of two neighbours
  /// (`stauts` is one edit from `status`), each counting one.
  private static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
    if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
    var beforePrevious = [Int](repeating: 0, count: b.count + 1)
    var previous = Array(0...b.count)
    var current = previous
    for i in 1...a.count {
      current[0] = i
      for j in 1...b.count {
        let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
        current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
        if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
          current[j] = min(current[j], beforePrevious[j - 2] + 1)
        }
      }
      (beforePrevious, previous, current) = (previous, current, beforePrevious)
    }
    return previous[b.count]
  }
}
