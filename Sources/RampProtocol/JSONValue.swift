/// A JSON value. Numbers are doubles, as in JSON itself; objects keep their keys in order so
/// that replies read the way they were written.
public enum JSONValue: Sendable, Equatable {
  case null
  case bool(Bool)
  case number(Double)
  case string(String)
  case array([JSONValue])
  case object(JSONObject)

  public var stringValue: String? {
    if case .string(let value) = self { return value }
    return nil
  }

  public var numberValue: Double? {
    if case .number(let value) = self { return value }
    return nil
  }

  public var boolValue: Bool? {
    if case .bool(let value) = self { return value }
    return nil
  }

  public var arrayValue: [JSONValue]? {
    if case .array(let value) = self { return value }
    return nil
  }

  public var objectValue: JSONObject? {
    if case .object(let value) = self { return value }
    return nil
  }

  public var isNull: Bool { self == .null }

  /// True for null, booleans, numbers and strings.
  public var isScalar: Bool {
    switch self {
    case .null, .bool, .number, .string: return true
    case .array, .object: return false
    }
  }

  /// The member `key` of an object (nil for anything else, or when the key is absent).
  public subscript(key: String) -> JSONValue? { objectValue?[key] }

  /// A whole number as a JSON number (exact up to 2^53, as JSON numbers are doubles).
  public static func integer(_ value: some BinaryInteger) -> JSONValue { .number(Double(value)) }
}

// Not ExpressibleByNilLiteral: with `JSONValue?` everywhere, a bare `nil` would silently become
// `.null` wherever the compiler can make it so.
extension JSONValue: ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
  ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
  public init(booleanLiteral value: Bool) { self = .bool(value) }
  public init(integerLiteral value: Int) { self = .number(Double(value)) }
  public init(floatLiteral value: Double) { self = .number(value) }
  public init(stringLiteral value: String) { self = .string(value) }
  public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
  public init(dictionaryLiteral elements: (String, JSONValue)...) {
    var object = JSONObject()
    object.reserveCapacity(elements.count)
    for (key, value) in elements { object[key] = value }
    self = .object(object)
  }
}

/// A JSON object: keys in the order they were added, each key once.
///
/// Equality ignores the order, as JSON does: `{"a":1,"b":2}` equals `{"b":2,"a":1}`.
public struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral, Sequence {
  public typealias Element = (key: String, value: JSONValue)

  private var members: [Element] = []

  public init() {}

  public init(dictionaryLiteral elements: (String, JSONValue)...) {
    members.reserveCapacity(elements.count)
    for (key, value) in elements { self[key] = value }
  }

  /// Room for `capacity` members before the storage grows.
  mutating func reserveCapacity(_ capacity: Int) { members.reserveCapacity(capacity) }

  public var keys: [String] { members.map(\.key) }
  public var count: Int { members.count }
  public var isEmpty: Bool { members.isEmpty }

  /// Setting nil removes the key; setting an existing key keeps its position.
  public subscript(key: String) -> JSONValue? {
    get {
      // By index: `first(where:)` would copy (retain and release) every member it passes.
      for index in members.indices where Self.same(members[index].key, key) { return members[index].value }
      return nil
    }
    set {
      let index = members.firstIndex { Self.same($0.key, key) }
      switch (index, newValue) {
      case (let index?, let value?): members[index].value = value
      case (let index?, nil): members.remove(at: index)
      case (nil, let value?): members.append((key, value))
      case (nil, nil): break
      }
    }
  }

  public func contains(_ key: String) -> Bool { members.contains { Self.same($0.key, key) } }

  /// Key equality, with the lengths compared first: most keys looked up (`at`, `ack`, `repeat`…)
  /// are absent, and a length differs far sooner than a full comparison does.
  private static func same(_ a: String, _ b: String) -> Bool { a.utf8.count == b.utf8.count && a == b }

  public func makeIterator() -> IndexingIterator<[Element]> { members.makeIterator() }

  public static func == (a: JSONObject, b: JSONObject) -> Bool {
    guard a.count == b.count else { return false }
    return a.members.allSatisfy { member in b[member.key] == member.value }
  }

  /// Appends without looking for the key first: for the parser, which checks duplicates itself.
  mutating func appendUnchecked(_ key: String, _ value: JSONValue) { members.append((key, value)) }
}
