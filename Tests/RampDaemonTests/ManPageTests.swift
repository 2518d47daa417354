import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

/// docs/rampd.1 and docs/rampctl.1 (written by script/man from the argument parsers) say what
/// `--help` says: rendered by man(1), every help text of every command is there, whole (the
/// generator once dropped every character outside ASCII, leaving "MP3, )"), and rampd's synopsis
/// is its usage line.
@Suite struct ManPageTests {
  @Test(arguments: ["rampd", "rampctl"])
  func everyHelpTextIsInTheManPage(_ tool: String) throws {
    try ManPage.checkEveryHelpText(tool, binary: "\(Executables.tools)/\(tool)", atLeast: tool == "rampd" ? 8 : 100)
  }

  @Test(arguments: ["rampd", "rampctl"])
  func pagesRenderWithoutWarnings(_ tool: String) throws {
    try ManPage.checkRendersWithoutWarnings(tool)
  }

  /// The options every command takes (the global --socket and --json, --version, --help) are
  /// described once, in rampctl's own list, not again under each subcommand.
  @Test func rampctlDescribesTheGlobalOptionsOnce() throws {
    let page = ManPage.collapsed(try ManPage.rendered("rampctl"))
    for help in [
      "rampd's socket (default:", "Print rampd's reply lines as they are", "Show the version.",
      "Show help information.",
    ] {
      #expect(page.components(separatedBy: help).count - 1 == 1, "docs/rampctl.1 has \"\(help)\" more than once")
    }
  }

  @Test func rampdSynopsisIsItsUsage() throws {
    let page = try ManPage.rendered("rampd")
    let lines = page.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let start = try #require(lines.firstIndex(of: "SYNOPSIS"))
    let synopsis = ManPage.collapsed(lines[(start + 1)...].prefix { !$0.isEmpty }.joined(separator: " "))
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
