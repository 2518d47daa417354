/// Strict RFC 8259 JSON, parsed by hand.
///
/// Foundation's `JSONSerialization` is not used: on Linux it hands back `NSNumber`s that answer
/// both `as? Bool` and `as? Double`, so `true` and `1` cannot be told apart, and it accepts
/// what the RFC does not. Here every deviation is refused as `bad-json`: NaN and Infinity tokens,
/// numbers that overflow to infinity, trailing commas and garbage, raw control characters in
/// strings, unpaired surrogate escapes, duplicate keys (which would otherwise make "which value
/// wins" an accident of the parser), and nesting deeper than `maxDepth`.
public enum JSON {
  public static let defaultMaxDepth = 32

  /// `end` is what messages call the end of the text: a request is one line, a file is a file.
  public static func parse(
    _ text: some StringProtocol, maxDepth: Int = defaultMaxDepth, end: String = "end of line"
  ) throws(ProtocolError) -> JSONValue {
    let bytes = Array(text.utf8)
    return try bytes.withUnsafeBufferPointer { bytes throws(ProtocolError) in
      var parser = JSONParser(bytes: bytes, maxDepth: maxDepth, end: end)
      return try parser.parseDocument()
    }
  }

  /// Parses raw bytes, refusing any that are not valid UTF-8 (a `String` would have replaced them).
  public static func parse(utf8 bytes: some Collection<UInt8>, maxDepth: Int = defaultMaxDepth) throws(ProtocolError)
    -> JSONValue
  {
    // Requests arrive at tens of thousands a second: read where they lie (a connection's buffer)
    // when the bytes are contiguous, copied once otherwise.
    let parsed = bytes.withContiguousStorageIfAvailable { buffer in
      Result { () throws(ProtocolError) in try parse(contiguous: buffer, maxDepth: maxDepth) }
    }
    if let parsed { return try parsed.get() }
    return try Array(bytes).withUnsafeBufferPointer { buffer throws(ProtocolError) in
      try parse(contiguous: buffer, maxDepth: maxDepth)
    }
  }

  private static func parse(contiguous bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) throws(ProtocolError)
    -> JSONValue
  {
    // Nearly always ASCII, which needs no further check.
    if !bytes.allSatisfy({ $0 < 0x80 }), String(validating: bytes, as: UTF8.self) == nil {
      throw ProtocolError(.badJSON, "the line is not valid UTF-8")
    }
    var parser = JSONParser(bytes: bytes, maxDepth: maxDepth)
    return try parser.parseDocument()
  }
}

/// Reads bytes that outlive it (the caller's buffer, for the length of one parse).
private struct JSONParser {
  let bytes: UnsafeBufferPointer<UInt8>
  let maxDepth: Int
  let end: String
  var index = 0
  var depth = 0

  init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int, end: String = "end of line") {
    self.bytes = bytes
    self.maxDepth = maxDepth
    self.end = end
  }

  mutating func parseDocument() throws(ProtocolError) -> JSONValue {
    skipWhitespace()
    guard index < bytes.count else { throw ProtocolError(.badJSON, "the line is empty") }
    let value = try parseValue()
    skipWhitespace()
    guard index == bytes.count else { throw failure("unexpected \(found) after the JSON value") }
    return value
  }

  private func failure(_ message: String) -> ProtocolError {
    ProtocolError(badJSONAt: index, message)
  }

  /// The byte at the cursor, for messages.
  private var found: String {
    guard index < bytes.count else { return end }
    let byte = bytes[index]
    if byte >= 0x20 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
    return "byte 0x\(String(byte, radix: 16))"
  }

  private mutating func skipWhitespace() {
    while index < bytes.count {
      switch bytes[index] {
      case 0x20, 0x09, 0x0A, 0x0D: index += 1
      default: return
      }
    }
  }

  private mutating func parseValue() throws(ProtocolError) -> JSONValue {
    guard index < bytes.count else { throw failure("expected a value, got \(end)") }
    switch bytes[index] {
    case UInt8(ascii: "{"): return try parseObject()
    case UInt8(ascii: "["): return try parseArray()
    case UInt8(ascii: "\""): return .string(try parseString())
    case UInt8(ascii: "t"): return try parseLiteral("true", .bool(true))
    case UInt8(ascii: "f"): return try parseLiteral("false", .bool(false))
    case UInt8(ascii: "n"): return try parseLiteral("null", .null)
    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
    default:
      if bytes[index] == UInt8(ascii: "N") || bytes[index] == UInt8(ascii: "I") {
        throw failure("NaN and Infinity are not JSON; numbers must be finite")
      }
      throw failure("expected a value, got \(found)")
    }
  }

  private mutating func parseLiteral(_ word: String, _ value: JSONValue) throws(ProtocolError) -> JSONValue {
    let start = index
    for byte in word.utf8 {
      guard index < bytes.count, bytes[index] == byte else {
        index = start
        throw failure("expected '\(word)'")
      }
      index += 1
    }
    return value
  }

  private mutating func enter() throws(ProtocolError) {
    depth += 1
    guard depth <= maxDepth else { throw failure("nested deeper than \(maxDepth) levels") }
  }

  private mutating func parseArray() throws(ProtocolError) -> JSONValue {
    try enter()
    index += 1
    var elements: [JSONValue] = []
    skipWhitespace()
    if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
      index += 1
      depth -= 1
      return .array(elements)
    }
    while true {
      skipWhitespace()
      elements.append(try parseValue())
      skipWhitespace()
      guard index < bytes.count else { throw failure("expected ',' or ']', got \(end)") }
      if bytes[index] == UInt8(ascii: ",") {
        index += 1
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") { throw failure("trailing comma in array") }
        continue
      }
      guard bytes[index] == UInt8(ascii: "]") else { throw failure("expected ',' or ']', got \(found)") }
      index += 1
      depth -= 1
      return .array(elements)
    }
  }

  private mutating func parseObject() throws(ProtocolError) -> JSONValue {
    try enter()
    index += 1
    var object = JSONObject()
    // A request's handful of members fit without the storage growing member by member.
    object.reserveCapacity(8)
    // Requests have a handful of keys, found faster by looking than by hashing; a set takes over
    // for long objects, so that a line of thousands of keys costs no quadratic time.
    var seen: Set<String>?
    skipWhitespace()
    if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
      index += 1
      depth -= 1
      return .object(object)
    }
    while true {
      skipWhitespace()
      guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
        throw failure("expected a key in double quotes, got \(found)")
      }
      let keyStart = index
      let key = try parseString()
      if seen == nil && object.count == Self.keysCheckedByLooking { seen = Set(object.keys) }
      let isNew = seen == nil ? !object.contains(key) : seen!.insert(key).inserted
      guard isNew else {
        index = keyStart
        throw failure("duplicate key \"\(key)\"")
      }
      skipWhitespace()
      guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
        throw failure("expected ':' after the key, got \(found)")
      }
      index += 1
      skipWhitespace()
      object.appendUnchecked(key, try parseValue())
      skipWhitespace()
      guard index < bytes.count else { throw failure("expected ',' or '}', got \(end)") }
      if bytes[index] == UInt8(ascii: ",") {
        index += 1
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") { throw failure("trailing comma in object") }
        continue
      }
      guard bytes[index] == UInt8(ascii: "}") else { throw failure("expected ',' or '}', got \(found)") }
      index += 1
      depth -= 1
      return .object(object)
    }
  }

  private static let keysCheckedByLooking = 16

  private mutating func parseString() throws(ProtocolError) -> String {
    index += 1  // the opening quote
    // Most strings have no escape: taken whole, without building them byte by byte.
    var end = index
    while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20 {
      end += 1
    }
    if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
      defer { index = end + 1 }
      return String(decoding: UnsafeBufferPointer(rebasing: bytes[index..<end]), as: UTF8.self)
    }
    var utf8 = Array(bytes[index..<end])
    index = end
    while true {
      guard index < bytes.count else { throw failure("unterminated string") }
      let byte = bytes[index]
      switch byte {
      case UInt8(ascii: "\""):
        index += 1
        return String(decoding: utf8, as: UTF8.self)
      case UInt8(ascii: "\\"):
        index += 1
        try parseEscape(into: &utf8)
      case 0x00..<0x20:
        throw failure("raw control character 0x\(String(byte, radix: 16)) in a string; escape it")
      default:
        utf8.append(byte)
        index += 1
      }
    }
  }

  private mutating func parseEscape(into utf8: inout [UInt8]) throws(ProtocolError) {
    guard index < bytes.count else { throw failure("unterminated escape") }
    let byte = bytes[index]
    index += 1
    let simple: UInt8
    switch byte {
    case UInt8(ascii: "\""): simple = 0x22
    case UInt8(ascii: "\\"): simple = 0x5C
    case UInt8(ascii: "/"): simple = 0x2F
    case UInt8(ascii: "b"): simple = 0x08
    case UInt8(ascii: "f"): simple = 0x0C
    case UInt8(ascii: "n"): simple = 0x0A
    case UInt8(ascii: "r"): simple = 0x0D
    case UInt8(ascii: "t"): simple = 0x09
    case UInt8(ascii: "u"):
      let unit = try parseHex4()
      var scalarValue = UInt32(unit)
      if (0xD800...0xDBFF).contains(unit) {
        // A high surrogate is only half a character: the low half must follow at once.
        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
        else { throw failure("unpaired surrogate \\u\(hex(unit))") }
        index += 2
        let low = try parseHex4()
        guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired surrogate \\u\(hex(unit))") }
        scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
      } else if (0xDC00...0xDFFF).contains(unit) {
        throw failure("unpaired surrogate \\u\(hex(unit))")
      }
      // Every value left is a valid scalar: surrogates were paired or refused above.
      utf8.append(contentsOf: Array(String(Character(Unicode.Scalar(scalarValue)!)).utf8))
      return
    default:
      index -= 1
      throw failure("invalid escape \\\(found.trimmingQuotes)")
    }
    utf8.append(simple)
  }

  private func hex(_ unit: UInt16) -> String {
    let digits = String(unit, radix: 16, uppercase: false)
    return String(repeating: "0", count: 4 - digits.count) + digits
  }

  private mutating func parseHex4() throws(ProtocolError) -> UInt16 {
    var value: UInt16 = 0
    for _ in 0..<4 {
      guard index < bytes.count else { throw failure("\\u needs four hex digits") }
      let byte = bytes[index]
      let digit: UInt8
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
      case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
      default: throw failure("\\u needs four hex digits, got \(found)")
      }
      value = value << 4 | UInt16(digit)
      index += 1
    }
    return value
  }

  /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, checked here because the
  /// standard library's conversion also accepts hex floats, "inf" and "nan".
  private mutating func parseNumber() throws(ProtocolError) -> JSONValue {
    let start = index
    if bytes[index] == UInt8(ascii: "-") { index += 1 }
    guard index < bytes.count, isDigit(bytes[index]) else {
      if index < bytes.count && bytes[index] == UInt8(ascii: "I") {
        throw failure("NaN and Infinity are not JSON; numbers must be finite")
      }
      throw failure("expected a digit, got \(found)")
    }
    if bytes[index] == UInt8(ascii: "0") {
      index += 1
      if index < bytes.count && isDigit(bytes[index]) { throw failure("numbers must not have leading zeros") }
    } else {
      skipDigits()
    }
    if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
      index += 1
      guard index < bytes.count, isDigit(bytes[index]) else { throw failure("expected a digit after '.'") }
      skipDigits()
    }
    if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
      index += 1
      if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
        index += 1
      }
      guard index < bytes.count, isDigit(bytes[index]) else { throw failure("expected a digit in the exponent") }
      skipDigits()
    }
    if let number = exactDecimal(start..<index) { return .number(number) }
    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
    guard let number = Double(text), number.isFinite else {
      index = start
      throw failure("the number \(text) is too large for a double")
    }
    return .number(number)
  }

  /// A number such as `12`, `-0.25` or `0.6` read without text: at most 15 significant digits and
  /// 22 decimals, so the digits and the power of ten are exact doubles and one division rounds
  /// correctly, the same double `Double(String)` gives. Nil for anything else (exponents, long
  /// digit strings), which takes the general conversion.
  private func exactDecimal(_ range: Range<Int>) -> Double? {
    var position = range.lowerBound
    let negative = bytes[position] == UInt8(ascii: "-")
    if negative { position += 1 }
    var digits: Int64 = 0
    var count = 0
    var decimals = 0
    var fraction = false
    while position < range.upperBound {
      let byte = bytes[position]
      position += 1
      if byte == UInt8(ascii: ".") {
        fraction = true
        continue
      }
      guard isDigit(byte) else { return nil }
      digits = digits * 10 + Int64(byte - UInt8(ascii: "0"))
      if digits > 0 { count += 1 }
      if fraction { decimals += 1 }
      guard count <= 15, decimals <= 22 else { return nil }
    }
    let magnitude = decimals == 0 ? Double(digits) : Double(digits) / Self.powersOfTen[decimals]
    return negative ? -magnitude : magnitude
  }

  private static let powersOfTen: [Double] = (0...22).map { exponent in
    var value = 1.0
    for _ in 0..<exponent { value *= 10 }
    return value
  }

  private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

  private mutating func skipDigits() {
    while index < bytes.count && isDigit(bytes[index]) { index += 1 }
  }
}

extension String {
  fileprivate var trimmingQuotes: String {
    hasPrefix("'") && hasSuffix("'") && count >= 2 ? String(dropFirst().dropLast()) : self
  }
}
