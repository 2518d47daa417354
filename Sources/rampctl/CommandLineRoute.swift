import ArgumentParser
import RampEngine
import RampProtocol
import RampSystem

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
      // The option to name: the first one the command does not take.
      let names = globals.filter { $0.hasPrefix("--") }.map { String($0.prefix { $0 != "=" }) }
      if let refused = names.first(where: { !(command is any PrintsJSON.Type) || $0 != "--json" }) {
        return .refuse("\(refused): '\(first)' does not talk to rampd, so it takes no \(refused)")
      }
    }
    if let message = unknownOption(in: Array(rest.dropFirst()), of: command) { return .refuse(message) }
    return .run([first] + globals + rest.dropFirst())
  }

  /// What to say about the first `--name` in `words` that `command` (or the subcommand of it the
  /// words name) does not take, or nil. ArgumentParser's own guess can be far off (`fade --to`
  /// got "did you mean '--at'?"): an option named like one of the command's arguments (`<to>`)
  /// is told that it is an argument, with the usage; any other gets the nearest option, if one
  /// is near, else the nearest argument.
  static func unknownOption(in words: [String], of command: ParsableCommand.Type) -> String? {
    var command = command
    var title = command.configuration.commandName ?? ""
    var words = words[...]
    // `queue add …`: the options are the subcommand's.
    while let next = words.first,
      let sub = command.configuration.subcommands.first(where: { $0.configuration.commandName == next })
    {
      command = sub
      title += " " + next
      words = words.dropFirst()
    }
    guard words.contains(where: { $0.hasPrefix("--") && $0 != "--" }) else { return nil }
    let arguments = CommandArguments(command)
    var index = words.startIndex
    while index < words.endIndex {
      let word = words[index]
      index += 1
      if word == "--" { return nil }
      guard word.hasPrefix("--") else { continue }
      let name = String(word.dropFirst(2).prefix { $0 != "=" })
      if let takesValue = arguments.options[name] {
        if takesValue && !word.contains("=") { index += 1 }
        continue
      }
      if arguments.options.isEmpty || ignoredOptions.contains(name) { return nil }
      let exact = arguments.positionals.first { $0.lowercased() == name.lowercased() }
      let option = Suggestion.closest(to: name, among: arguments.options.keys.sorted())
      if let argument = exact ?? (option == nil ? Suggestion.closest(to: name, among: arguments.positionals) : nil) {
        return "'--\(name)' is not an option of \(title): <\(argument)> is an argument, given without a flag: "
          + RampCtl.usageString(for: command).trimmingWhitespace()
      }
      let guess = option.map { " (did you mean --\($0)?)" } ?? ""
      return "'--\(name)' is not an option of \(title)\(guess); `rampctl \(title) --help` lists its options"
    }
    return nil
  }

  /// Options ArgumentParser answers itself, which no command declares.
  static let ignoredOptions: Set<String> = ["experimental-dump-help", "generate-completion-script"]

  /// Every subcommand by the name it is typed as.
  static var subcommands: [String: ParsableCommand.Type] {
    Dictionary(
      uniqueKeysWithValues: RampCtl.configuration.subcommands.map {
        ($0.configuration.commandName ?? "", $0)
      })
  }
}

/// A command's long options and arguments, as ArgumentParser describes them (its
/// `--experimental-dump-help` JSON, the description the man pages are made from).
struct CommandArguments {
  /// Each long option's name (no dashes), and whether it takes a value (false: a flag).
  var options: [String: Bool] = [:]
  /// The arguments' value names (`to` for `<to>`), in order.
  var positionals: [String] = []

  init(_ command: ParsableCommand.Type) {
    guard let dump = try? JSON.parse(command._dumpHelp()),
      case .array(let arguments)? = dump["command"]?["arguments"]
    else { return }
    for argument in arguments {
      let kind = argument["kind"]?.stringValue
      if kind == "positional" {
        if let name = argument["valueName"]?.stringValue { positionals.append(name) }
        continue
      }
      for name in argument["names"]?.arrayValue ?? [] where name["kind"]?.stringValue == "long" {
        if let text = name["name"]?.stringValue { options[text] = kind == "option" }
      }
    }
  }
}

/// A subcommand that connects to rampd, and so takes `--socket` and `--json`.
protocol TalksToRampd {}

extension BatchCommand: TalksToRampd {}

/// A subcommand that does not talk to rampd but prints JSON with `--json`, which may then come
/// before it too.
protocol PrintsJSON {}

extension LoudnessCommand: PrintsJSON {}
