import ArgumentParser
import RampCLI
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct DuckAddCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "duck-add",
    abstract: "Add a duck rule: lower gains while a trigger is active.",
    discussion: """
      While the trigger is active, each target gain is lowered by --depth over --attack; once \
      the trigger has been inactive for --hold, it comes back over --release. The duck is a \
      layer of its own: it never changes a target's model value, so a set or fade on the target \
      goes on under it, and the release returns to the value the target has then. Where rules \
      overlap on a target, the deepest wins.

      Triggers: --trigger alone, a stream playing (voice, or voice* for every stream whose id \
      starts voice); --trigger with --threshold, the level of those streams (a sidechain: \
      --detector peak or rms over --window, ending --hysteresis below the threshold); and, for \
      any rule, `rampctl duck NAME` until `rampctl unduck NAME`. A rule of the same name is \
      replaced. rampd keeps the rule in its state file until duck-remove, so it is back after \
      a restart (a [[duck]] rule of the same name in its configuration wins over it).

      Examples:
        rampctl duck-add talk --target bed --trigger 'voice*' --depth 12dB --attack 300ms --release 2s
        rampctl duck-add mic --target master.gain --trigger mic --threshold -35dB --detector rms --window 50ms
        rampctl duck-add announce --target bed --target jingles --depth 20dB
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The rule's name (letters, digits, '_' and '-').", valueName: "name"))
  var name: String

  @Option(
    name: .customLong("target"),
    help: ArgumentHelp(
      "A gain to lower: master.gain, streams.<id>.gain or a stream id (repeatable).", valueName: "key"),
    completion: Completions.keyPaths)
  var targets: [String] = []

  @Option(help: ArgumentHelp("The stream that triggers it, or a prefix followed by * (voice*).", valueName: "stream"))
  var trigger: String?

  @Option(help: ArgumentHelp("Trigger on the streams' level above this (dBFS, -30dB): a sidechain.", valueName: "dB"))
  var threshold: String?

  @Option(help: ArgumentHelp("The sidechain's detector: peak or rms (default rms).", valueName: "detector"))
  var detector: String?

  @Option(help: ArgumentHelp("The detector's window (default 50ms).", valueName: "duration"))
  var window: String?

  @Option(help: ArgumentHelp("How far below the threshold the level must fall (default 6dB).", valueName: "dB"))
  var hysteresis: String?

  @Option(help: ArgumentHelp("How far down, in dB (default 12dB).", valueName: "dB"))
  var depth: String?

  @Option(help: ArgumentHelp("The ramp down (default 200ms).", valueName: "duration"))
  var attack: String?

  @Option(help: ArgumentHelp("The ramp down's curve (default ease-in-out).", valueName: "curve"))
  var attackCurve: String?

  @Option(help: ArgumentHelp("How long it stays down after the trigger ends (default 500ms).", valueName: "duration"))
  var hold: String?

  @Option(help: ArgumentHelp("The ramp back (default 1s).", valueName: "duration"))
  var release: String?

  @Option(help: ArgumentHelp("The ramp back's curve (default ease-in-out).", valueName: "curve"))
  var releaseCurve: String?

  func request() throws -> Request {
    var sidechain: DuckRule.Sidechain?
    if let threshold {
      var chain = DuckRule.Sidechain(threshold: try Parse.decibels(threshold, "--threshold"))
      if let detector {
        guard let chosen = DuckRule.Sidechain.Detector(rawValue: detector) else {
          throw ValidationError("--detector: expected peak or rms, got '\(detector)'")
        }
        chain.detector = chosen
      }
      chain.window = try Parse.duration(window, "--window") ?? chain.window
      chain.hysteresis = try hysteresis.map { try Parse.decibels($0, "--hysteresis") } ?? chain.hysteresis
      sidechain = chain
    } else if let option = [("--detector", detector), ("--window", window), ("--hysteresis", hysteresis)]
      .first(where: { $0.1 != nil })?.0
    {
      throw ValidationError("\(option) belongs to a sidechain: give --threshold too")
    }
    let rule = DuckRule(
      name: name, targets: targets.map(Parse.keyPath), trigger: trigger, sidechain: sidechain,
      depth: try depth.map { try Parse.decibels($0, "--depth") } ?? DuckRule.defaultDepth,
      attack: try Parse.duration(attack, "--attack") ?? DuckRule.defaultAttack,
      attackCurve: try Parse.curve(attackCurve, "--attack-curve") ?? DuckRule.defaultCurve,
      hold: try Parse.duration(hold, "--hold") ?? DuckRule.defaultHold,
      release: try Parse.duration(release, "--release") ?? DuckRule.defaultRelease,
      releaseCurve: try Parse.curve(releaseCurve, "--release-curve") ?? DuckRule.defaultCurve)
    return try Parse.checked(
      Request(.duckAdd(rule)),
      options: [
        "name": "<name>", "targets": "--target", "trigger": "--trigger", "threshold": "--threshold",
        "window": "--window", "hysteresis": "--hysteresis", "depth": "--depth", "attack": "--attack",
        "hold": "--hold", "release": "--release",
      ])
  }

  func summary(of result: JSONValue) -> String {
    "duck rule \(name) \(result["replaced"] == true ? "replaced" : "added")"
  }
}

struct DuckRemoveCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "duck-remove",
    abstract: "Remove a duck rule (what it lowers comes back over its release).",
    discussion: """
      Examples:
        rampctl duck-remove talk
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The rule's name.", valueName: "name"))
  var name: String

  func request() throws -> Request { try Parse.checked(Request(.duckRemove(name: name)), options: ["name": "<name>"]) }

  func summary(of result: JSONValue) -> String { "duck rule \(name) removed" }
}

struct DuckListCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "duck-list",
    abstract: "List the duck rules and what each is doing now.",
    discussion: """
      Each rule's phase: idle, ducked (attacking or held down while its trigger is active), \
      holding (its trigger ended; waiting out --hold) or releasing; and the factor its targets \
      are multiplied by now.

      Examples:
        rampctl duck-list
        rampctl duck-list --json | jq '.result.ducks[].phase'
      """)

  @OptionGroup var connection: ConnectionOptions

  func request() throws -> Request { try Parse.checked(Request(.duckList)) }

  func summary(of result: JSONValue) -> String {
    let ducks = result["ducks"]?.arrayValue ?? []
    guard !ducks.isEmpty else { return "no duck rules" }
    return ReplyText.ducks(ducks)
  }
}

struct DuckCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "duck",
    abstract: "Trigger a duck rule by hand, until unduck.",
    discussion: """
      The rule's targets go down over its attack, whatever its own trigger is doing; `rampctl \
      unduck NAME` lets them come back (after its hold, over its release). Repeating it does \
      nothing more: the duck never goes deeper than the rule's depth.

      Examples:
        rampctl duck talk
        rampctl duck talk --at +10s
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var rule: ManualDuckOptions

  var atText: String? { rule.at }

  func request() throws -> Request { try rule.request(on: true) }

  func summary(of result: JSONValue) -> String { "ducking with \(rule.name)" }
}

struct UnduckCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "unduck",
    abstract: "Stop triggering a duck rule by hand.",
    discussion: """
      Its targets come back after the rule's hold, over its release, unless its own trigger is \
      still active.

      Examples:
        rampctl unduck talk
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var rule: ManualDuckOptions

  var atText: String? { rule.at }

  func request() throws -> Request { try rule.request(on: false) }

  func summary(of result: JSONValue) -> String { "\(rule.name) released by hand" }
}

/// What `duck` and `unduck` take: the rule, and when.
struct ManualDuckOptions: ParsableArguments {
  @Argument(help: ArgumentHelp("The rule's name.", valueName: "name"))
  var name: String

  @Option(help: ArgumentHelp("When: 23:00, 2026-11-21T07:30:00Z or +20m.", valueName: "time"))
  var at: String?

  func request(on: Bool) throws -> Request {
    try Parse.checked(
      Request(at: try at.map { try Parse.when($0, "--at") }, .duck(name: name, on: on)), options: ["name": "<name>"])
  }
}
