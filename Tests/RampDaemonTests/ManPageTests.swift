import Foundation
import RampProtocol
import Testing

/// doc/rampd.1, doc/rampctl.1 and doc/rampd-web.1 (written by script/man from the argument parsers) say what
/// `--help` says: rendered by man(1), every help text of every command is there, whole (the
/// generator once dropped every character outside ASCII, leaving "MP3, )"), and rampd's synopsis
/// is its usage line.
@Suite struct ManPageTests {
  /// The page as man(1) prints it to a pipe: plain text, one line per paragraph.
  static func rendered(_ tool: String) throws -> String {
    let outcome = try runProcess(
      "/usr/bin/env", ["man", "-l", "\(Markdown.root)/doc/\(tool).1"],
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
  static func helpTexts(_ tool: String) throws -> [String] {
    let outcome = try runProcess("\(Executables.directory)/\(tool)", ["--experimental-dump-help"])
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

  @Test(arguments: ["rampd", "rampctl", "rampd-web"])
  func everyHelpTextIsInTheManPage(_ tool: String) throws {
    let page = Self.collapsed(try Self.rendered(tool))
    let texts = try Self.helpTexts(tool)
    #expect(texts.count > ["rampd": 8, "rampd-web": 5][tool, default: 100])
    for text in texts where !page.contains(Self.collapsed(text)) {
      Issue.record("doc/\(tool).1 lacks (run script/man): \(text)")
    }
    // Traces of characters lost on the way: a list or a parenthesis left open at its end.
    for trace in [", )", ",)", "()", "( )"] {
      #expect(!page.contains(trace), "doc/\(tool).1 has \"\(trace)\"")
    }
  }

  /// groff reads every page without a warning (a blank line in a help text, a character outside
  /// ASCII, an empty list were warnings), at every level groff has and through man(1).
  @Test(arguments: ["rampd", "rampctl", "rampd-web"])
  func pagesRenderWithoutWarnings(_ tool: String) throws {
    let page = "\(Markdown.root)/doc/\(tool).1"
    let groff = try runProcess(
      "/usr/bin/env", ["groff", "-ww", "-mandoc", "-Tutf8", "-z", page], environment: ["PATH": "/usr/bin:/bin"])
    #expect(groff.status == 0 && groff.stderr.isEmpty, "groff on doc/\(tool).1: \(groff)")
    let man = try runProcess(
      "/usr/bin/env", ["man", "--warnings", "-l", page],
      environment: [
        "PATH": "/usr/bin:/bin", "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat", "HOME": NSTemporaryDirectory(),
      ])
    #expect(man.status == 0 && man.stderr.isEmpty, "man --warnings on doc/\(tool).1: \(man)")
  }

  /// The options every command takes (the global --socket and --json, --version, --help) are
  /// described once, in rampctl's own list, not again under each subcommand.
  @Test func rampctlDescribesTheGlobalOptionsOnce() throws {
    let page = Self.collapsed(try Self.rendered("rampctl"))
    for help in [
      "rampd's socket (default:", "Print rampd's reply lines as they are", "Show the version.",
      "Show help information.",
    ] {
      #expect(page.components(separatedBy: help).count - 1 == 1, "doc/rampctl.1 has \"\(help)\" more than once")
    }
  }

  @Test func rampdSynopsisIsItsUsage() throws {
    let page = try Self.rendered("rampd")
    let lines = page.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let start = try #require(lines.firstIndex(of: "SYNOPSIS"))
    let synopsis = Self.collapsed(lines[(start + 1)...].prefix { !$0.isEmpty }.joined(separator: " "))
    let help = try runProcess(Executables.rampd, ["--help"])
    let helpLines = help.stdout.split(separator: "\n", omittingEmptySubsequences: false)
    let usageStart = try #require(helpLines.firstIndex { $0.hasPrefix("USAGE:") })
    // The usage paragraph, wrapped or not.
    let usage = helpLines[usageStart...].prefix { !$0.isEmpty }.joined(separator: " ")
    // The page adds --version and --help, which the usage line leaves to the OPTIONS.
    let words = { (text: String) in
      Set(text.split(whereSeparator: { " []<>|".contains($0) }).map(String.init))
    }
    let expected = words(String(usage.dropFirst("USAGE:".count))).union(["--version", "--help"])
    #expect(words(synopsis) == expected, "SYNOPSIS: \(synopsis)\n--help: \(usage)")
  }
}
