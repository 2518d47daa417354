import ArgumentParser
import RampProtocol

/// Where a command line goes before ArgumentParser reads it: the options every command that talks
/// to rampd shares (`--socket`, `--json`) may come before the subcommand, as with mpc, git and
/// systemctl; no subcommand at all means `status` (as `mpc` alone does); a subcommand that does
/// not exist is refused the way rampd refuses an unknown command, with a suggestion.
enum CommandLineRoute: Equatable {
  /// Run these arguments.
  case run([String])
  /// A usage error (exit 64), with its message.
  case refuse(String)

  /// The options rampctl accepts before the subcommand, and whether each takes a value.
  static let globalOptions = ["--socket": true, "--json": false]

  /// Words ArgumentParser answers itself at the top level.
  static let rootWords: Set<String> = ["-h", "--help", "--version", "--generate-completion-script", "help"]

  static func route(_ words: [String]) -> CommandLineRoute {
    var globals: [String] = []
    var index = 0
    while index < words.count {
      let word = words[index]
      let name = String(word.prefix { $0 != "=" })
      guard let takesValue = globalOptions[name] else { break }
      globals.append(word)
      if takesValue && !word.contains("=") {
        guard index + 1 < words.count else { return .refuse("missing value for '\(word) <path>'") }
        globals.append(words[index + 1])
        index += 1
      }
      index += 1
    }
    let rest = Array(words[index...])
    guard let first = rest.first else { return .run(["status"] + globals + [StatusCommand.hintFlag]) }
    if first.hasPrefix("-") || rootWords.contains(first) {
      return .run(globals.isEmpty ? words : rest + globals)
    }
    guard let command = subcommands[first] else {
      var message = "unknown command '\(first)'"
      if let match = Suggestion.closest(to: first, among: subcommands.keys.sorted()) {
        message += " (did you mean \(match)?)"
      }
      return .refuse(message + "; `rampctl --help` lists the commands")
    }
    if !globals.isEmpty, !(command is any TalksToRampd.Type) {
      return .refuse("\(globals[0]): '\(first)' does not talk to rampd, so it takes no \(globals[0])")
    }
    return .run([first] + globals + rest.dropFirst())
  }

  /// Every subcommand by the name it is typed as.
  static var subcommands: [String: ParsableCommand.Type] {
    Dictionary(
      uniqueKeysWithValues: RampCtl.configuration.subcommands.map {
        ($0.configuration.commandName ?? "", $0)
      })
  }
}

/// A subcommand that connects to rampd, and so takes `--socket` and `--json`.
protocol TalksToRampd {}

extension BatchCommand: TalksToRampd {}
