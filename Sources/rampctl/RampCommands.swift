import ArgumentParser
import RampCLI
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The wire fields of `fade` requests by the option that sets them, for local refusals.
private let fadeOptions = [
  "key": "<key>", "to": "--to", "from": "--from", "duration": "--duration", "curve": "--curve", "space": "--space",
  "name": "--name", "then": "--then",
]

extension RampOptions {
  func fade(_ kind: Fade.Kind, key: String, to: Double?, then: Fade.Then? = nil, waiting: Bool) throws -> Request {
    let fade = Fade(
      kind: kind, key: Parse.keyPath(key), from: try Parse.gain(from, "--from"), to: to,
      duration: try Parse.duration(duration, "--duration"), curve: try Parse.curve(curve),
      space: try Parse.space(space), continuity: slope ? .slope : .value, name: name, then: then)
    return try scheduled(Parse.checked(Request(.fade(fade)), options: fadeOptions), waiting: waiting)
  }

  /// `master.gain → 0.5 (-6.02 dB) over 2s (#4)`, or the streams a `then` ramp acts on.
  static func summary(of result: JSONValue) -> String {
    if result["streams"] != nil { return TransportArguments.summary("fading out", result) }
    let key = result["key"]?.stringValue ?? "?"
    let target = result["to"]?.numberValue.map { ReplyText.level($0, key: key) } ?? "?"
    guard let id = result["animation"]?.numberValue else { return "\(key) = \(target)" }
    let over = result["duration"]?.numberValue.map { " over \(HumanUnits.format(duration: $0))" } ?? ""
    return "\(key) → \(target)\(over) (#\(ReplyText.number(.number(id))))"
  }

  /// The gains as typed, by wire field.
  func typed(to: String?) -> [String: String] {
    ["to": to, "from": from].compactMapValues { $0.map(Arguments.restoringMinus) }
  }

  func rampWait(for result: JSONValue, key: String) -> RampWait {
    if result["streams"] != nil {
      // A fade-out with `then` runs on the streams' transports.
      let first = streams(in: result).first
      return RampWait(
        animations: animationIDs(in: result), observe: first.map { "streams.\($0).transport" },
        duration: try? Parse.duration(duration, "--duration"), streams: streams(in: result))
    }
    return RampWait(
      animations: animationIDs(in: result), observe: Parse.keyPath(key),
      duration: result["duration"]?.numberValue ?? (try? Parse.duration(duration, "--duration")))
  }
}

/// `fade`, `fade-in` and `fade-out`: one ramp request, its summary and its `--wait`.
protocol FadeRequestCommand: DaemonCommand {
  var ramp: RampOptions { get }
  var waiting: WaitFlag { get }
  var key: String { get }
  /// `--to` (or the target argument) as typed.
  var typedTarget: String? { get }
}

extension FadeRequestCommand {
  func summary(of result: JSONValue) -> String { RampOptions.summary(of: result) }

  func rampWait(for result: JSONValue) -> RampWait? { waiting.wait ? ramp.rampWait(for: result, key: key) : nil }

  var atText: String? { ramp.at }

  var typed: [String: String] { ramp.typed(to: typedTarget) }
}

struct FadeCommand: FadeRequestCommand {
  static let configuration = CommandConfiguration(
    commandName: "fade",
    abstract: "Ramp a key path from its audible value to a target.",
    discussion: """
      The ramp starts from whatever is audible when it takes effect (or --from), so a fade sent \
      while another ramp runs never jumps; --slope keeps the slope continuous too. It supersedes \
      every animation running on the key path that is not additive (another fade, a set's ramp, \
      a fade-in, an animate), which ends and is not heard again; an additive one (a tremolo) \
      keeps adding on top. The model value becomes the target at once, so `get` shows where the \
      ramp is going. A bare stream id (s1) stands for streams.s1.gain.

      Examples:
        rampctl fade master.gain -12dB --duration 2s
        rampctl fade s1 0.2 --duration 500ms --curve ease-out --space db
        rampctl fade streams.music.gain 0 --duration 30m --curve exp --wait
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(
    help: ArgumentHelp(
      "The key path: master.gain, streams.<id>.gain (or just <id>), mixers.<name>.volume.", valueName: "key"),
    completion: Completions.keyPaths)
  var key: String

  @Argument(help: ArgumentHelp("The target: 0.5, 50%, -6dB.", valueName: "to"))
  var to: String

  @OptionGroup var ramp: RampOptions
  @OptionGroup var waiting: WaitFlag

  func request() throws -> Request {
    let target: Double = try Parse.gain(to, "<to>")
    return try ramp.fade(.fade, key: key, to: target, waiting: waiting.wait)
  }

  var typedTarget: String? { to }
}

struct FadeInCommand: FadeRequestCommand {
  static let configuration = CommandConfiguration(
    commandName: "fade-in",
    abstract: "Ramp a key path (default master.gain) up to 1, or to --to.",
    discussion: """
      Like fade: from what is audible, superseding every animation running on the key path that \
      is not additive.

      Examples:
        rampctl fade-in
        rampctl fade-in --duration 3s --curve qsin
        rampctl fade-in s1 --from 0 --to -6dB --duration 2s --wait
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String = Fade.defaultKey

  @Option(parsing: .unconditional, help: ArgumentHelp("The target (default 1).", valueName: "gain"))
  var to: String?

  @OptionGroup var ramp: RampOptions
  @OptionGroup var waiting: WaitFlag

  func request() throws -> Request {
    try ramp.fade(.fadeIn, key: key, to: try Parse.gain(to, "--to"), waiting: waiting.wait)
  }

  var typedTarget: String? { to }
}

struct FadeOutCommand: FadeRequestCommand {
  static let configuration = CommandConfiguration(
    commandName: "fade-out",
    abstract: "Ramp a key path (default master.gain) down to silence, then maybe stop or pause.",
    discussion: """
      With --then stop (or pause) the ramp runs on the streams' own levels (every stream for \
      master.gain, one for streams.<id>.gain) and rampd stops or pauses them when it ends, so \
      the gains keep their values for the next play. With --wait and --then stop, rampctl \
      returns once the streams have ended. Without --then it is a fade: from what is audible, \
      superseding every animation running on the key path that is not additive.

      Examples:
        rampctl fade-out --duration 10s --then stop
        rampctl fade-out s1 --duration 3s --curve ease-in --then pause --wait
        rampctl fade-out --to -20dB --duration 500ms
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String = Fade.defaultKey

  @Option(parsing: .unconditional, help: ArgumentHelp("The target (default 0).", valueName: "gain"))
  var to: String?

  @Option(help: ArgumentHelp("What to do to the streams when the fade ends: stop or pause.", valueName: "action"))
  var then: ThenAction?

  enum ThenAction: String, ExpressibleByArgument, CaseIterable {
    case stop, pause
    var wire: Fade.Then { self == .stop ? .stop : .pause }
  }

  @OptionGroup var ramp: RampOptions
  @OptionGroup var waiting: WaitFlag

  func request() throws -> Request {
    try ramp.fade(.fadeOut, key: key, to: try Parse.gain(to, "--to"), then: then?.wire, waiting: waiting.wait)
  }

  var waitsForStreamsToEnd: Bool { waiting.wait && then == .stop }

  var typedTarget: String? { to }
}

struct SetCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "set",
    abstract: "Change a key path's value through an implicit animation.",
    discussion: """
      Like setting a layer property in Core Animation: the value ramps from what is audible now \
      over rampd's default transaction ([implicit] in its configuration), or over --duration \
      with --curve, or jumps with --instant. The later command wins: a set supersedes every \
      animation running on the key path that is not additive (a fade, an animate, a fade-in), \
      which ends and is not heard again; an additive one (a tremolo) keeps adding on top of the \
      new value.

      Examples:
        rampctl set master.gain -6dB --duration 500ms
        rampctl set s1 50% --instant
        rampctl set master.gain 0.8 --duration 2s --curve ease-in-out --space db --wait
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String

  @Argument(help: ArgumentHelp("The new value: 0.5, 50%, -6dB.", valueName: "value"))
  var value: String

  @Option(parsing: .unconditional, help: ArgumentHelp("Animate over this long: 500ms, 2s.", valueName: "duration"))
  var duration: String?

  @Flag(help: "Change at once, with no animation (the same as --duration 0).")
  var instant = false

  @Option(help: ArgumentHelp("Timing curve of the animation.", valueName: "curve"), completion: Completions.curves)
  var curve: String?

  @Option(
    help: ArgumentHelp("Value space: amplitude, db, db(<floor>) or power.", valueName: "space"),
    completion: Completions.spaces)
  var space: String?

  @Flag(help: "Keep the slope continuous too when this replaces a ramp in flight.")
  var slope = false

  @OptionGroup var when: ScheduleOptions
  @OptionGroup var waiting: WaitFlag

  var atText: String? { when.at }

  func request() throws -> Request {
    if instant && duration != nil { throw ValidationError("--instant and --duration contradict each other") }
    let seconds = try Parse.duration(duration, "--duration")
    if waiting.wait, instant || seconds == 0 {
      throw ValidationError("--wait: an --instant change has nothing to wait for")
    }
    let set = SetValue(
      key: Parse.keyPath(key), value: try Parse.gain(value, "<value>"),
      duration: instant ? 0 : try Parse.duration(duration, "--duration"), curve: try Parse.curve(curve),
      space: try Parse.space(space), continuity: slope ? .slope : nil)
    return try when.scheduled(
      Parse.checked(
        Request(.set(set)),
        options: ["key": "<key>", "value": "<value>", "duration": "--duration", "curve": "--curve", "space": "--space"]),
      waiting: waiting.wait)
  }

  func summary(of result: JSONValue) -> String {
    let key = result["key"]?.stringValue ?? key
    let value = result["value"]?.numberValue.map { ReplyText.level($0, key: key) } ?? value
    let animation = result["animation"]?.numberValue.map { " (#\(ReplyText.number(.number($0))))" } ?? ""
    return "\(key) = \(value)\(animation)"
  }

  func rampWait(for result: JSONValue) -> RampWait? {
    guard waiting.wait else { return nil }
    return RampWait(
      animations: animationIDs(in: result), observe: Parse.keyPath(key),
      duration: instant ? 0 : try? Parse.duration(duration, "--duration"))
  }

  var typed: [String: String] { ["value": Arguments.restoringMinus(value)] }
}
