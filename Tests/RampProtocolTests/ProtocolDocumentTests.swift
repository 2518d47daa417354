import Foundation
import RampSystem
import Testing

@testable import RampProtocol

/// PROTOCOL.md is the contract: every example line in it must be what the code reads and writes.
@Suite struct ProtocolDocumentTests {
  /// The JSON lines of PROTOCOL.md: those in ```json blocks and those quoted `{...}` in tables.
  static func exampleLines() throws -> [String] {
    let root = String(#filePath.split(separator: "/").dropLast(3).joined(separator: "/"))
    let text = try readFile("/" + root + "/PROTOCOL.md")
    var lines: [String] = []
    var inJSON = false
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
      let trimmed = String(line).trimmingWhitespace()
      if trimmed.hasPrefix("```") {
        inJSON = trimmed == "```json"
        continue
      }
      if inJSON && !trimmed.isEmpty { lines.append(trimmed) }
      // Table cells quote event lines as `{"event":…}`.
      for cell in line.split(separator: "`") where cell.hasPrefix("{\"event\"") { lines.append(String(cell)) }
    }
    return lines
  }

  @Test func everyExampleLineIsValid() throws {
    let lines = try Self.exampleLines()
    #expect(lines.count > 40)
    var commands = Set<String>()
    var events = 0
    for (index, line) in lines.enumerated() {
      let value = try JSON.parse(line)
      if value["cmd"] != nil {
        // A request documented as refused on sight is followed by its error reply.
        let next = index + 1 < lines.count ? try JSON.parse(lines[index + 1]) : .null
        let refusal = next["ok"] == .bool(false) && next["id"] == value["id"] ? next["error"]?["code"] : nil
        switch Request.parse(line: line).result {
        case .success(let request):
          commands.insert(request.command.name)
        case .failure(let error) where refusal == .string(error.code.rawValue):
          #expect(next["error"]?["field"] == error.field.map(JSONValue.string), "\(line): field \(error)")
        case .failure(let error): Issue.record("\(line): \(error)")
        }
      } else {
        let parsed = try ServerLine.parse(line)
        if case .event = parsed { events += 1 }
      }
    }
    // Every command has an example, and every event kind plus observed values.
    #expect(commands == Set(Command.names))
    #expect(events >= EventKind.allCases.count + 1)
  }

  @Test func everyCommandAndErrorCodeIsDocumented() throws {
    let root = String(#filePath.split(separator: "/").dropLast(3).joined(separator: "/"))
    let text = try readFile("/" + root + "/PROTOCOL.md")
    // Headings such as "### stop, pause, resume".
    let headed = Set(
      text.split(separator: "\n").filter { $0.hasPrefix("### ") }.flatMap {
        $0.dropFirst(4).split(separator: ",").map { String($0).trimmingWhitespace() }
      })
    #expect(Set(Command.names).isSubset(of: headed), "\(Set(Command.names).subtracting(headed))")
    for code in ErrorCode.allCases { #expect(text.contains("| `\(code.rawValue)` |"), "\(code.rawValue)") }
    for kind in EventKind.allCases { #expect(text.contains("| `\(kind.rawValue)` |"), "\(kind.rawValue)") }
  }
}

func readFile(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }
