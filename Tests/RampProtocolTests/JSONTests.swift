import PropertyBased
import Testing

@testable import RampProtocol

/// The parser's refusal of `text`, or nil when it accepted it.
func jsonError(_ text: String) -> ProtocolError? {
  do {
    _ = try JSON.parse(text)
    return nil
  } catch { return error }
}

@Suite struct JSONParserTests {
  @Test(arguments: [
    ("{}", JSONValue.object([:])),
    ("[]", .array([])),
    (" \t\r\n{ \"a\" : [ 1 , 2 ] }\n", ["a": [1, 2]] as JSONValue),
    ("0", 0),
    ("-0", .number(-0.0)),
    ("1.5e3", 1500),
    ("1E-2", 0.01),
    ("-12.25E+1", -122.5),
    ("1e308", .number(1e308)),
    ("5e-324", .number(.leastNonzeroMagnitude)),
    ("12345678901234567890", .number(1.2345678901234567e19)),
    ("1e-400", 0),
    ("true", true),
    ("false", false),
    ("null", .null),
    (#""plain""#, "plain"),
    (#""\"\\\/\b\f\n\r\t""#, "\"\\/\u{08}\u{0C}\n\r\t"),
    (#""\u00e9\u00E9""#, "éé"),
    (#""\ud83d\ude00""#, "😀"),
    (#""\u0000""#, "\u{0}"),
    ("\"é😀\u{7F}\"", "é😀\u{7F}"),
    (#"{"a":{"b":{"c":[true,false,null]}}}"#, ["a": ["b": ["c": [true, false, .null]]]] as JSONValue),
    (#"[{"":""}]"#, [["": ""]] as JSONValue),
  ])
  func acceptsValidJSON(text: String, expected: JSONValue) throws {
    let parsed = try JSON.parse(text)
    #expect(parsed == expected)
    if case .number(let number) = expected, number == 0 {
      // -0 and 0 compare equal; the sign must still come through.
      #expect(parsed.numberValue?.sign == number.sign)
    }
  }

  @Test(arguments: [
    ("", "the line is empty"),
    ("   ", "the line is empty"),
    ("NaN", "NaN and Infinity are not JSON"),
    ("Infinity", "NaN and Infinity are not JSON"),
    ("-Infinity", "NaN and Infinity are not JSON"),
    (#"{"a":NaN}"#, "NaN and Infinity are not JSON"),
    ("1e999", "too large for a double"),
    ("-1e999", "too large for a double"),
    ("[1,]", "trailing comma in array"),
    (#"{"a":1,}"#, "trailing comma in object"),
    ("[,1]", "expected a value"),
    (#"{"a":1 "b":2}"#, "expected ',' or '}'"),
    ("[1 2]", "expected ',' or ']'"),
    ("{} x", "after the JSON value"),
    ("{}{}", "after the JSON value"),
    ("01", "leading zeros"),
    ("-01", "leading zeros"),
    ("1.", "expected a digit after '.'"),
    (".5", "expected a value"),
    ("+1", "expected a value"),
    ("-", "expected a digit"),
    ("1e", "expected a digit in the exponent"),
    ("1e+", "expected a digit in the exponent"),
    ("0x10", "after the JSON value"),
    ("'a'", "expected a value"),
    ("{a:1}", "expected a key in double quotes"),
    (#"{"a" 1}"#, "expected ':'"),
    ("[1] // comment", "after the JSON value"),
    ("tru", "expected 'true'"),
    ("nul", "expected 'null'"),
    ("True", "expected a value"),
    ("\"a\u{01}b\"", "raw control character 0x1"),
    ("\"a\nb\"", "raw control character 0xa"),
    ("\"tab\there\"", "raw control character 0x9"),
    (#""\x""#, "invalid escape \\x"),
    (#""\u12""#, "four hex digits"),
    (#""\u12G4""#, "four hex digits"),
    (#""\ud800""#, "unpaired surrogate \\ud800"),
    (#""\udc00""#, "unpaired surrogate \\udc00"),
    (#""\ud800\u0041""#, "unpaired surrogate \\ud800"),
    (#""\ud800x""#, "unpaired surrogate \\ud800"),
    (#""unterminated"#, "unterminated string"),
    (#"{"a":1,"a":2}"#, "duplicate key \"a\""),
    (#"{"a":{"b":1,"b":1}}"#, "duplicate key \"b\""),
    ("[", "expected a value, got end of line"),
    ("]", "expected a value"),
    (#"{"a":"#, "expected a value, got end of line"),
  ])
  func refusesInvalidJSON(text: String, messagePart: String) throws {
    let error = try #require(jsonError(text), "accepted \(text)")
    #expect(error.code == .badJSON)
    #expect(error.field == nil)
    #expect(error.message.contains(messagePart), "\(error.message)")
  }

  @Test func errorsSayWhere() throws {
    let error = try #require(jsonError(#"{"a": tru}"#))
    #expect(error.message == "bad JSON at column 7: expected 'true'")
    let duplicate = try #require(jsonError(#"{"ab":1, "ab":2}"#))
    #expect(duplicate.message == "bad JSON at column 10: duplicate key \"ab\"")
  }

  /// The offset and the problem are data, so a caller that places the error its own way (a
  /// file's line and column) never reads them back out of the message.
  @Test func errorsCarryTheByteOffset() throws {
    let error = try #require(jsonError(#"{"é": tru}"#))
    #expect(error.offset == 7)
    #expect(error.problem == "expected 'true'")
    #expect(error.message == "bad JSON at column 8: expected 'true'")
    #expect(jsonError(#"{"a": {"b": 1}"#)?.offset == 14)
  }

  @Test func theEndOfTheTextIsNamedAsTheCallerSays() throws {
    #expect(throws: ProtocolError(.badJSON, "bad JSON at column 6: expected a value, got end of file")) {
      try JSON.parse(#"{"a":"#, end: "end of file")
    }
    // A key is the caller's text, never reworded.
    #expect(throws: ProtocolError(.badJSON, #"bad JSON at column 18: duplicate key "end of line""#)) {
      try JSON.parse(#"{"end of line":1,"end of line":2}"#, end: "end of file")
    }
  }

  @Test func depthIsLimited() throws {
    let atLimit = String(repeating: "[", count: 32) + String(repeating: "]", count: 32)
    #expect(jsonError(atLimit) == nil)
    let beyond = String(repeating: "[", count: 33) + String(repeating: "]", count: 33)
    #expect(jsonError(beyond)?.message.contains("nested deeper than 32 levels") == true)
    let objects = String(repeating: #"{"a":"#, count: 33) + "1" + String(repeating: "}", count: 33)
    #expect(jsonError(objects)?.message.contains("nested deeper than 32 levels") == true)
    #expect(try JSON.parse("[[[1]]]", maxDepth: 3) == [[[1]]])
    #expect(throws: ProtocolError.self) { try JSON.parse("[[[1]]]", maxDepth: 2) }
  }

  /// A bomb far deeper than the stack could recurse is refused at the limit, not crashed on.
  @Test func depthBombIsRefusedWithoutRecursingIntoIt() {
    let bomb = String(repeating: "[", count: 1_000_000)
    #expect(jsonError(bomb)?.code == .badJSON)
  }

  @Test func rawBytesMustBeUTF8() throws {
    #expect(try JSON.parse(utf8: Array(#"{"é":1}"#.utf8)) == ["é": 1])
    let invalid: [UInt8] = [0x22, 0xC3, 0x28, 0x22]
    let error = try #require(throws: ProtocolError.self) { try JSON.parse(utf8: invalid) }
    #expect(error == ProtocolError(.badJSON, "the line is not valid UTF-8"))
  }

  /// Bytes are read where they lie when they are contiguous (an array, a slice of one, a
  /// connection's buffer), and copied when they are not: the same value and the same errors, with
  /// columns counted from the line's first byte either way.
  @Test func contiguousOrNotTheBytesParseAlike() throws {
    let line = Array(#"{"id":7,"cmd":"set","key":"master.gain","value":0.6,"duration":0}"#.utf8)
    let expected = try JSON.parse(utf8: line)
    let slice = (Array("xx".utf8) + line)[2...]
    #expect(try JSON.parse(utf8: slice) == expected)
    #expect(try JSON.parse(utf8: line.lazy.map { $0 }) == expected, "not contiguous: copied")
    let bad = Array(#"{"a":1,}"#.utf8)
    let error = try #require(throws: ProtocolError.self) { try JSON.parse(utf8: bad) }
    #expect(error.message == "bad JSON at column 8: trailing comma in object")
    #expect(throws: error) { try JSON.parse(utf8: (Array("  ".utf8) + bad)[2...]) }
    #expect(throws: error) { try JSON.parse(utf8: bad.lazy.map { $0 }) }
    let invalid: [UInt8] = [0x22, 0xC3, 0x28, 0x22]
    #expect(throws: ProtocolError(.badJSON, "the line is not valid UTF-8")) {
      try JSON.parse(utf8: invalid.lazy.map { $0 })
    }
  }

  @Test func objectsKeepTheirOrder() throws {
    let parsed = try JSON.parse(#"{"z":1,"a":2,"m":3}"#)
    #expect(parsed.objectValue?.keys == ["z", "a", "m"])
    #expect(parsed.serialized() == #"{"z":1,"a":2,"m":3}"#)
  }
}

@Suite struct JSONObjectTests {
  @Test func subscriptSetsReplacesAndRemoves() {
    var object: JSONObject = ["a": 1, "b": 2]
    object["a"] = "one"
    object["c"] = 3
    #expect(object.keys == ["a", "b", "c"])
    #expect(object["a"] == "one")
    object["b"] = nil
    #expect(object.keys == ["a", "c"])
    #expect(object.count == 2)
    #expect(!object.contains("b"))
  }

  @Test func equalityIgnoresOrderButNotContent() {
    let ab: JSONObject = ["a": 1, "b": 2]
    let ba: JSONObject = ["b": 2, "a": 1]
    #expect(ab == ba)
    #expect(ab != ["a": 1, "b": 3])
    #expect(ab != ["a": 1])
    #expect(ab != ["a": 1, "b": 2, "c": 3])
  }
}

@Suite struct JSONSerializerTests {
  @Test(arguments: [
    (JSONValue.number(7), "7"),
    (.number(-0.0), "0"),
    (.number(-42), "-42"),
    (.number(0.1), "0.1"),
    (.number(2.5), "2.5"),
    (.number(1e-5), "1e-05"),
    (.number(9_007_199_254_740_991), "9007199254740991"),
    (.number(9_007_199_254_740_992), "9007199254740992.0"),
    (.number(1e16), "1e+16"),
    (.number(1e300), "1e+300"),
    (.number(.nan), "null"),
    (.number(.infinity), "null"),
    (.string("line\nbreak\r\t\"q\" \\"), #""line\nbreak\r\t\"q\" \\""#),
    (.string("\u{0}\u{1F}\u{7F}\u{2028}\u{2029}"), #""\u0000\u001f\u007f\u2028\u2029""#),
    (.string("é😀/"), "\"é😀/\""),
    (
      ["id": 7, "ok": true, "result": .null, "list": [1, "x", false]] as JSONValue,
      #"{"id":7,"ok":true,"result":null,"list":[1,"x",false]}"#
    ),
  ])
  func writesCompactJSON(value: JSONValue, expected: String) {
    #expect(value.serialized() == expected)
  }

  /// Bytes are appended after what the buffer already holds, numbers' digits included; the line
  /// form ends in one newline.
  @Test func writesAfterWhatTheBufferHolds() {
    let value: JSONValue = ["id": -1_234_567, "ok": true, "result": ["value": 0.6, "list": [10, -20, 300]]]
    let text = #"{"id":-1234567,"ok":true,"result":{"value":0.6,"list":[10,-20,300]}}"#
    var bytes = Array("ab".utf8)
    value.write(into: &bytes)
    #expect(String(decoding: bytes, as: UTF8.self) == "ab" + text)
    #expect(value.serializedLine() == text + "\n")
    #expect(JSONValue.format(-9_007_199_254_740_991) == "-9007199254740991")
  }

  /// Random documents, written and read back, are the same value, and stay on one line.
  @Test func serializedValuesParseBackToThemselves() async {
    await propertyCheck(count: 500, input: Gen.double(in: 0...1).array(of: 1...60)) { numbers in
      var recipe = Recipe(numbers: numbers)
      let value = recipe.json()
      let text = value.serialized()
      #expect(!text.contains("\n") && !text.contains("\r"))
      let parsed = try JSON.parse(text)
      #expect(parsed == value, "\(text)")
      #expect(parsed.serialized() == text)
    }
  }
}
