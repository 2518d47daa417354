extension JSONValue {
  /// Compact JSON on one line, without a trailing newline: every newline in a string is escaped,
  /// so the result can be sent as a protocol line as it is.
  ///
  /// Whole numbers below 2^53 print without a fraction (`7`, not `7.0`); other numbers print in
  /// the shortest form that reads back to the same double. NaN and infinity have no JSON form
  /// and print as `null` (the parser never produces them).
  public func serialized() -> String {
    var output: [UInt8] = []
    output.reserveCapacity(128)
    write(into: &output)
    return String(decoding: output, as: UTF8.self)
  }

  /// `serialized()` with the newline that ends a protocol line, built in one go.
  public func serializedLine() -> String {
    var output: [UInt8] = []
    output.reserveCapacity(128)
    write(into: &output)
    output.append(UInt8(ascii: "\n"))
    return String(decoding: output, as: UTF8.self)
  }

  /// Appends the compact JSON text of the value to `output` (a reply goes to the socket as
  /// bytes, without a string in between).
  public func write(into output: inout [UInt8]) {
    switch self {
    case .null: output.append(contentsOf: Self.nullBytes)
    case .bool(let value): output.append(contentsOf: value ? Self.trueBytes : Self.falseBytes)
    case .number(let value): Self.writeNumber(value, into: &output)
    case .string(let value): Self.writeString(value, into: &output)
    case .array(let elements):
      output.append(UInt8(ascii: "["))
      for (index, element) in elements.enumerated() {
        if index > 0 { output.append(UInt8(ascii: ",")) }
        element.write(into: &output)
      }
      output.append(UInt8(ascii: "]"))
    case .object(let object):
      output.append(UInt8(ascii: "{"))
      var first = true
      for member in object {
        if !first { output.append(UInt8(ascii: ",")) }
        first = false
        Self.writeString(member.key, into: &output)
        output.append(UInt8(ascii: ":"))
        member.value.write(into: &output)
      }
      output.append(UInt8(ascii: "}"))
    }
  }

  public static func format(_ number: Double) -> String {
    var output: [UInt8] = []
    writeNumber(number, into: &output)
    return String(decoding: output, as: UTF8.self)
  }

  private static func writeNumber(_ number: Double, into output: inout [UInt8]) {
    guard number.isFinite else {
      output.append(contentsOf: nullBytes)
      return
    }
    if number == number.rounded(), abs(number) < 9_007_199_254_740_992 {
      writeInteger(Int64(number), into: &output)
      return
    }
    // Swift prints the shortest digits that read back exactly, in a form JSON accepts
    // ("0.1", "1e-05", "1.5e+300").
    output.append(contentsOf: number.description.utf8)
  }

  /// Decimal digits, written from the last into a buffer on the stack, then appended at once: no
  /// string in between, and one append rather than one per digit.
  private static func writeInteger(_ value: Int64, into output: inout [UInt8]) {
    if value < 0 { output.append(UInt8(ascii: "-")) }
    var magnitude = value.magnitude
    // 20 digits hold any UInt64.
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
      var start = digits.count
      repeat {
        start -= 1
        digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
        magnitude /= 10
      } while magnitude > 0
      output.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
    }
  }

  private static let nullBytes = Array("null".utf8)
  private static let trueBytes = Array("true".utf8)
  private static let falseBytes = Array("false".utf8)

  private static func writeString(_ text: String, into output: inout [UInt8]) {
    output.append(UInt8(ascii: "\""))
    // Nearly every string (keys, ids, codes) needs no escape: appended whole, scanned and copied
    // as one buffer (a native string's bytes are contiguous; a bridged one is made so).
    var text = text
    let plain = text.withUTF8 { bytes in
      guard !bytes.contains(where: needsEscapeCheck) else { return false }
      output.append(contentsOf: bytes)
      return true
    }
    if plain {
      output.append(UInt8(ascii: "\""))
      return
    }
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": output.append(contentsOf: "\\\"".utf8)
      case "\\": output.append(contentsOf: "\\\\".utf8)
      case "\n": output.append(contentsOf: "\\n".utf8)
      case "\r": output.append(contentsOf: "\\r".utf8)
      case "\t": output.append(contentsOf: "\\t".utf8)
      case "\u{08}": output.append(contentsOf: "\\b".utf8)
      case "\u{0C}": output.append(contentsOf: "\\f".utf8)
      // Control characters must be escaped; U+2028 and U+2029 are too, because some
      // line-splitting clients (JavaScript's among them) treat them as line ends.
      case "\u{00}"..."\u{1F}", "\u{7F}", "\u{2028}", "\u{2029}":
        let digits = String(scalar.value, radix: 16)
        output.append(contentsOf: "\\u".utf8)
        output.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: 4 - digits.utf8.count))
        output.append(contentsOf: digits.utf8)
      default: output.append(contentsOf: UTF8.encode(scalar)!)
      }
    }
    output.append(UInt8(ascii: "\""))
  }

  /// A byte that is, or may begin, a character written escaped: controls, quote, backslash, DEL,
  /// and 0xE2, which begins U+2028 and U+2029.
  private static func needsEscapeCheck(_ byte: UInt8) -> Bool {
    byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xE2
  }
}
