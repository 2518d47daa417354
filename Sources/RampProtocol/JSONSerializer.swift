extension JSONValue {
  /// Compact JSON on one line, without a trailing newline: every newline in a string is escaped,
  /// so the result can be sent as a protocol line as it is.
  ///
  /// Whole numbers below 2^53 print without a fraction (`7`, not `7.0`); other numbers print in
  /// the shortest form that reads back to the same double. NaN and infinity have no JSON form
  /// and print as `null` (the parser never produces them).
  public func serialized() -> String {
    var output = ""
    output.reserveCapacity(128)
    write(into: &output)
    return output
  }

  /// `serialized()` with the newline that ends a protocol line, built in one string.
  public func serializedLine() -> String {
    var output = serialized()
    output += "\n"
    return output
  }

  private func write(into output: inout String) {
    switch self {
    case .null: output += "null"
    case .bool(let value): output += value ? "true" : "false"
    case .number(let value): output += Self.format(value)
    case .string(let value): Self.writeString(value, into: &output)
    case .array(let elements):
      output += "["
      for (index, element) in elements.enumerated() {
        if index > 0 { output += "," }
        element.write(into: &output)
      }
      output += "]"
    case .object(let object):
      output += "{"
      for (index, member) in object.enumerated() {
        if index > 0 { output += "," }
        Self.writeString(member.key, into: &output)
        output += ":"
        member.value.write(into: &output)
      }
      output += "}"
    }
  }

  public static func format(_ number: Double) -> String {
    guard number.isFinite else { return "null" }
    if number == number.rounded(), abs(number) < 9_007_199_254_740_992 { return String(Int64(number)) }
    // Swift prints the shortest digits that read back exactly, in a form JSON accepts
    // ("0.1", "1e-05", "1.5e+300").
    return number.description
  }

  private static func writeString(_ text: String, into output: inout String) {
    output += "\""
    // Nearly every string (keys, ids, codes) needs no escape: appended whole.
    if !text.utf8.contains(where: needsEscapeCheck) {
      output += text
      output += "\""
      return
    }
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": output += "\\\""
      case "\\": output += "\\\\"
      case "\n": output += "\\n"
      case "\r": output += "\\r"
      case "\t": output += "\\t"
      case "\u{08}": output += "\\b"
      case "\u{0C}": output += "\\f"
      // Control characters must be escaped; U+2028 and U+2029 are too, because some
      // line-splitting clients (JavaScript's among them) treat them as line ends.
      case "\u{00}"..."\u{1F}", "\u{7F}", "\u{2028}", "\u{2029}":
        let digits = String(scalar.value, radix: 16)
        output += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
      default: output.unicodeScalars.append(scalar)
      }
    }
    output += "\""
  }

  /// A byte that is, or may begin, a character written escaped: controls, quote, backslash, DEL,
  /// and 0xE2, which begins U+2028 and U+2029.
  private static func needsEscapeCheck(_ byte: UInt8) -> Bool {
    byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xE2
  }
}
