import Foundation
import Testing

@testable import RampProtocol

/// `ProtocolSchema` is the one description of the fields: the parser takes what it lists and
/// refuses what it does not, and PROTOCOL.md documents every field it lists.
@Suite struct ProtocolSchemaTests {
  /// The error a field alone gets, if it is `unknown-field` for that field.
  private func unknown(_ object: JSONObject) -> ProtocolError? {
    guard case .failure(let error) = Request.parse(line: JSONValue.object(object).serialized()).result,
      error.code == .unknownField
    else { return nil }
    return error
  }

  @Test func everyListedCommandFieldIsTakenAndNoOther() {
    for (name, fields) in ProtocolSchema.commands {
      for field in fields {
        let error = unknown(["cmd": .string(name), field.name: .string("x")])
        #expect(error == nil, "\(name).\(field.name): \(error?.message ?? "")")
      }
      #expect(unknown(["cmd": .string(name), "notAField": 1]) != nil, "\(name) took an unlisted field")
    }
  }

  @Test func everyListedAnimationFieldIsTakenAndNoOther() {
    for type in ProtocolSchema.animationTypes {
      let fields = ProtocolSchema.commonAnimationFields + (ProtocolSchema.animationFields[type] ?? [])
      for field in fields where field.name != "type" {
        let animation: JSONObject = ["type": .string(type), field.name: .string("x")]
        let error = unknown(["cmd": "animate", "key": "master.gain", "animation": .object(animation)])
        #expect(error == nil, "\(type).\(field.name): \(error?.message ?? "")")
      }
      let stray: JSONObject = ["type": .string(type), "notAField": 1]
      #expect(unknown(["cmd": "animate", "key": "master.gain", "animation": .object(stray)]) != nil)
    }
  }

  @Test func everyListedFieldIsDocumented() throws {
    let root = String(#filePath.split(separator: "/").dropLast(3).joined(separator: "/"))
    let text = try readFile("/" + root + "/PROTOCOL.md")
    let fields =
      ProtocolSchema.commands.flatMap(\.fields) + ProtocolSchema.commonAnimationFields
      + ProtocolSchema.animationFields.values.flatMap { $0 } + ProtocolSchema.perceptualSpringFields
    for field in fields {
      #expect(text.contains("`\(field.name)`"), "\(field.name) is not in PROTOCOL.md")
    }
  }

  /// The fuzzer's dictionary (Fuzz/rampd.dict) knows every command and every field, so libFuzzer
  /// builds requests that reach each command's own checks.
  @Test func theFuzzDictionaryNamesEveryCommandAndField() throws {
    let root = String(#filePath.split(separator: "/").dropLast(3).joined(separator: "/"))
    let dictionary = try readFile("/" + root + "/Fuzz/rampd.dict")
    for (name, _) in ProtocolSchema.commands {
      #expect(dictionary.contains("=\"\\\"\(name)\\\"\""), "command \(name) is not in Fuzz/rampd.dict")
    }
    let fields =
      ProtocolSchema.requestFields + ProtocolSchema.commands.flatMap(\.fields) + ProtocolSchema.commonAnimationFields
      + ProtocolSchema.animationFields.values.flatMap { $0 } + ProtocolSchema.perceptualSpringFields
    for field in fields {
      #expect(dictionary.contains("=\"\\\"\(field.name)\\\":\""), "field \(field.name) is not in Fuzz/rampd.dict")
    }
  }
}
