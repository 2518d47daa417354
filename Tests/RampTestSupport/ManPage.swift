import Foundation
import RampProtocol
import Testing

/// The man pages in docs/ (written by script/man from the argument parsers), as man(1) and groff
/// read them, and the help texts they must hold.
enum ManPage {
  /// The page as man(1) prints it to a pipe: plain text, one line per paragraph.
  static func rendered(_ tool: String) throws -> String {
    let outcome = try runProcess(
      "/usr/bin/env", ["man", "-l", "\(Repository.root)/docs/\(tool).1"],
      environment: [
        "PATH": "/usr/bin:/bin", "MANWIDTH": "10000", "MANPAGER": "cat", "PAGER": "cat", "LC_ALL": "C",
        "HOME": NSTemporaryDirectory(),
      ])
    guard outcome.status == 0 else { throw HarnessError("man -l \(tool).1: \(outcome)") }
    return outcome.stdout
  }

  static func collapsed(_ text: String) -> String {
    text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
  }

  /// Every help text of a tool and its subcommands: abstracts, discussions, arguments' help.
  static func helpTexts(_ tool: String, binary: String) throws -> [String] {
    let outcome = try runProcess(binary, ["--experimental-dump-help"])
    guard outcome.status == 0 else { throw HarnessError("\(tool) --experimental-dump-help: \(outcome)") }
    var texts: [String] = []
    func collect(_ value: JSONValue) {
      switch value {
      case .object(let object):
        // ArgumentParser's implicit `help` subcommand: rampd(1) leaves it out (rampd has no subcommands).
        if object["commandName"] == .string("help") { return }
        for (key, member) in object {
          if ["abstract", "discussion"].contains(key), let text = member.stringValue, !text.isEmpty {
            texts.append(text)
          } else {
            collect(member)
          }
        }
      case .array(let elements): elements.forEach(collect)
      default: break
      }
    }
    collect(try JSON.parse(outcome.stdout)["command"] ?? .null)
    return texts
  }

  /// Every help text of `binary` is in its page, whole, and the page has no trace of a character
  /// lost on the way.
  static func checkEveryHelpText(_ tool: String, binary: String, atLeast minimum: Int) throws {
    let page = Self.collapsed(try Self.rendered(tool))
    let texts = try Self.helpTexts(tool, binary: binary)
    #expect(texts.count > minimum)
    for text in texts where !page.contains(Self.collapsed(text)) {
      Issue.record("docs/\(tool).1 lacks (run script/man): \(text)")
    }
    // Traces of characters lost on the way: a list or a parenthesis left open at its end.
    for trace in [", )", ",)", "()", "( )"] {
      #expect(!page.contains(trace), "docs/\(tool).1 has \"\(trace)\"")
    }
  }

  /// groff reads the page without a warning (a blank line in a help text, a character outside
  /// ASCII, an empty list were warnings), at every level groff has and through man(1).
  static func checkRendersWithoutWarnings(_ tool: String) throws {
    let page = "\(Repository.root)/docs/\(tool).1"
    let groff = try runProcess(
      "/usr/bin/env", ["groff", "-ww", "-mandoc", "-Tutf8", "-z", page], environment: ["PATH": "/usr/bin:/bin"])
    #expect(groff.status == 0 && groff.stderr.isEmpty, "groff on docs/\(tool).1: \(groff)")
    let man = try runProcess(
      "/usr/bin/env", ["man", "--warnings", "-l", page],
      environment: [
        "PATH": "/usr/bin:/bin", "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat", "HOME": NSTemporaryDirectory(),
      ])
    #expect(man.status == 0 && man.stderr.isEmpty, "man --warnings on docs/\(tool).1: \(man)")
  }
}
