import ArgumentParser
import FoundationEssentials
import RampCLI
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct AnimateCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "animate",
    abstract: "Add an explicit animation (keyframes, basic, spring, or any as JSON) to a key path.",
    discussion: """
      Core Animation's model, evaluated for every sample. Give exactly one kind:
        --keyframes v1,v2,... a keyframe animation (--key-times, --mode)
        --from/--to/--by      a basic animation (two of them at most)
        --spring              a spring toward --to: --mass --stiffness --damping, or --bounce \
      with --duration as the spring's period
        --animation JSON      the whole animation object as PROTOCOL.md describes it (groups, \
      timing functions per segment, ...); @file reads it from a file
      Timing applies to all kinds but --animation: --duration, --repeat (a count or inf), \
      --autoreverse, --speed, --begin, --fill-mode; --additive adds to the value beneath (its \
      --keyframes, --from and --to are then changes, plain numbers that may be negative), \
      --cumulative carries each cycle on from the last. An animation with the same --name on \
      the key path is replaced; one that is not --additive supersedes every animation running on \
      the key path that is not additive (a fade, a set's ramp, another animate), from what is \
      audible, and when it ends the model value is heard. --wait refuses endless animations \
      (remove them instead).

      Examples:
        rampctl animate streams.s1.gain --keyframes 1,0.5,1 --duration 1s --repeat inf
        rampctl animate master.gain --keyframes 0,1,0.3 --key-times 0,0.2,1 --duration 4s --wait
        rampctl animate s1 --from 1 --to 0.2 --duration 2s --curve ease-in --autoreverse --repeat 3
        rampctl animate master.gain --spring --to 0.5 --bounce 0.3 --duration 800ms
        rampctl animate master.gain --by -0.2 --duration 1s --additive --name duck
        rampctl animate master.gain --keyframes 0,-0.25,0 --additive --duration 1s --repeat inf --name tremolo
        rampctl animate master.gain --animation '{"type":"basic","to":0.5,"duration":2}'
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String

  @Option(
    parsing: .unconditional, help: ArgumentHelp("Keyframe values, comma-separated: 1,0.5,-6dB.", valueName: "values"))
  var keyframes: String?

  @Option(help: ArgumentHelp("Keyframe times, fractions from 0 to 1: 0,0.3,1.", valueName: "times"))
  var keyTimes: String?

  @Option(help: ArgumentHelp("Keyframe interpolation: linear, discrete, paced or cubic.", valueName: "mode"))
  var mode: KeyframeMode?

  @Option(parsing: .unconditional, help: ArgumentHelp("Start value (default: the audible value).", valueName: "gain"))
  var from: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("End value (default: the model value).", valueName: "gain"))
  var to: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Change by this much (may be negative).", valueName: "number"))
  var by: String?

  @Flag(help: "A spring animation (toward --to, from the audible value or --from).")
  var spring = false

  @Option(parsing: .unconditional, help: ArgumentHelp("Spring mass (default 1).", valueName: "number"))
  var mass: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Spring stiffness (default 100).", valueName: "number"))
  var stiffness: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Spring damping (default 10).", valueName: "number"))
  var damping: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Perceptual spring: 0 critically damped, toward 1 bouncier, below 0 slower.", valueName: "number"))
  var bounce: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Spring's initial velocity.", valueName: "number"))
  var initialVelocity: String?

  @Option(help: ArgumentHelp("The whole animation object as JSON, or @file.", valueName: "json"))
  var animation: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Length of one cycle: 1s, 500ms.", valueName: "duration"))
  var duration: String?

  @Option(help: ArgumentHelp("Cycles to play: a number (fractions allowed) or inf.", valueName: "count"))
  var `repeat`: String?

  @Flag(help: "Play each cycle forwards then backwards.")
  var autoreverse = false

  @Option(parsing: .unconditional, help: ArgumentHelp("Playback speed (default 1).", valueName: "number"))
  var speed: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Begin this long after the command: 2s.", valueName: "delay"))
  var begin: String?

  @Option(help: ArgumentHelp("Fill mode: removed, forwards, backwards or both.", valueName: "mode"))
  var fillMode: FillChoice?

  @Option(
    help: ArgumentHelp("Timing curve of each cycle (default linear).", valueName: "curve"),
    completion: Completions.curves)
  var curve: String?

  @Option(
    help: ArgumentHelp("Value space: amplitude, db, db(<floor>) or power.", valueName: "space"),
    completion: Completions.spaces)
  var space: String?

  @Flag(help: "Add to the value beneath instead of replacing it (values are then changes: numbers, maybe negative).")
  var additive = false

  @Flag(help: "Each cycle continues from where the last one ended.")
  var cumulative = false

  @Flag(help: "Keep the slope continuous too when this replaces an animation in flight.")
  var slope = false

  @Option(help: ArgumentHelp("The animation's name on the key path (default: animation).", valueName: "name"))
  var name: String?

  @OptionGroup var when: ScheduleOptions
  @OptionGroup var waiting: WaitFlag

  var atText: String? { when.at }

  enum KeyframeMode: String, ExpressibleByArgument, CaseIterable {
    case linear, discrete, paced, cubic
  }

  enum FillChoice: String, ExpressibleByArgument, CaseIterable {
    case removed, forwards, backwards, both
  }

  static let fieldOptions = [
    "key": "<key>", "values": "--keyframes", "keyTimes": "--key-times", "calculationMode": "--mode",
    "from": "--from", "to": "--to", "by": "--by", "mass": "--mass", "stiffness": "--stiffness",
    "damping": "--damping", "bounce": "--bounce", "initialVelocity": "--initial-velocity", "duration": "--duration",
    "repeatCount": "--repeat", "speed": "--speed", "beginTime": "--begin", "fillMode": "--fill-mode",
    "timingFunction": "--curve", "valueSpace": "--space", "name": "--name",
  ]

  func request() throws -> Request {
    let request = try animation.map(requestFromJSON) ?? requestFromOptions()
    if waiting.wait, case .animate(let animate) = request.command,
      Self.expectedLength(of: animate.animation) == .infinity
    {
      throw ValidationError("--wait: this animation never ends (--repeat inf); remove it with `rampctl remove` instead")
    }
    return try when.scheduled(request, waiting: waiting.wait)
  }

  private func requestFromOptions() throws -> Request {
    let kinds = [keyframes != nil, spring, !spring && (from != nil || to != nil || by != nil)].filter { $0 }.count
    guard kinds == 1 else {
      throw ValidationError("give one kind of animation: --keyframes, --from/--to/--by, --spring or --animation")
    }
    var built = Animation(try content(), timing: try timing())
    built.timingFunction = try Parse.curve(curve) ?? .linear
    built.valueSpace = try Parse.space(space) ?? .amplitude
    built.isAdditive = additive
    built.isCumulative = cumulative
    // In the perceptual form --duration is the spring's period; the animation lasts until it settles.
    if spring, bounce != nil { built.timing.duration = 0 }
    let animate = Animate(
      key: Parse.keyPath(key), name: name ?? Animate.defaultName, animation: built, continuity: slope ? .slope : .value)
    return try Parse.checked(Request(.animate(animate)), options: Self.fieldOptions)
  }

  private func content() throws -> Animation.Content {
    if let keyframes {
      let values = try Self.list(keyframes) { try value($0, "--keyframes") }
      var frames = KeyframeAnimation(values: values, calculationMode: mode.map(\.wire) ?? .linear)
      frames.keyTimes = try keyTimes.map { try Self.list($0) { try Parse.number($0, "--key-times") } }
      return .keyframes(frames)
    }
    if keyTimes != nil || mode != nil { throw ValidationError("--key-times and --mode need --keyframes") }
    let ends = (
      from: try from.map { try value($0, "--from") }, to: try to.map { try value($0, "--to") },
      by: try by.map { try Parse.number($0, "--by") }
    )
    guard spring else {
      if [mass, stiffness, damping, bounce, initialVelocity].contains(where: { $0 != nil }) {
        throw ValidationError("--mass, --stiffness, --damping, --bounce and --initial-velocity need --spring")
      }
      return .basic(BasicAnimation(from: ends.from, to: ends.to, by: ends.by))
    }
    return .spring(SpringAnimation(from: ends.from, to: ends.to, by: ends.by, parameters: try springParameters()))
  }

  /// A value of --keyframes, --from or --to: a gain (`0.5`, `50%`, `-6dB`), or with --additive a
  /// plain number, the change added to the value beneath, which may be negative.
  private func value(_ text: String, _ option: String) throws -> Double {
    additive ? try Parse.number(text, option) : try Parse.gain(text, option)
  }

  private func springParameters() throws -> SpringParameters {
    let velocity = try initialVelocity.map { try Parse.number($0, "--initial-velocity") } ?? 0
    if let bounce {
      guard mass == nil, stiffness == nil, damping == nil else {
        throw ValidationError(
          "--bounce (with --duration) and --mass/--stiffness/--damping are two ways to say the same")
      }
      guard let seconds = try Parse.duration(duration, "--duration"), seconds > 0 else {
        throw ValidationError("--bounce needs --duration, the spring's period")
      }
      do {
        return try SpringParameters.perceptual(
          duration: seconds, bounce: try Parse.number(bounce, "--bounce"), initialVelocity: velocity)
      } catch let error as EngineError {
        throw ValidationError("--\(error.field ?? "bounce"): \(error.message)")
      }
    }
    var parameters = SpringParameters(initialVelocity: velocity)
    if let mass { parameters.mass = try Parse.number(mass, "--mass") }
    if let stiffness { parameters.stiffness = try Parse.number(stiffness, "--stiffness") }
    if let damping { parameters.damping = try Parse.number(damping, "--damping") }
    return parameters
  }

  private func timing() throws -> MediaTiming {
    var timing = MediaTiming()
    timing.duration = try Parse.duration(duration, "--duration") ?? 0
    if let count = `repeat` {
      if count.lowercased() == "inf" || count.lowercased() == "infinity" {
        timing.repeatCount = .infinity
      } else {
        let value = try Parse.number(count, "--repeat")
        guard value >= 0 else { throw ValidationError("--repeat: expected a count >= 0 or inf, got '\(count)'") }
        timing.repeatCount = value
      }
    }
    timing.autoreverses = autoreverse
    if let speed { timing.speed = try Parse.number(speed, "--speed") }
    timing.beginTime = try Parse.duration(begin, "--begin")
    if let fillMode { timing.fillMode = fillMode.wire }
    return timing
  }

  /// `--animation`: the object as typed (or read from @file), checked as rampd would.
  private func requestFromJSON(_ text: String) throws -> Request {
    let shaping: [Any?] = [
      keyframes, keyTimes, mode, from, to, by, mass, stiffness, damping, bounce, initialVelocity,
      duration, `repeat`, speed, begin, fillMode, curve, space,
    ]
    if shaping.contains(where: { $0 != nil }) || spring || autoreverse || additive || cumulative {
      throw ValidationError("--animation holds the whole animation; give its fields in the JSON, not as options")
    }
    var source = text
    if text.hasPrefix("@") {
      let path = String(text.dropFirst())
      do { source = try String(contentsOfFile: path, encoding: .utf8) } catch {
        throw ValidationError("--animation: cannot read \(path): \(failureReason(error))")
      }
    }
    let object: JSONValue
    do { object = try JSON.parse(source.trimmingWhitespace()) } catch {
      throw ValidationError("--animation: \(error.message)")
    }
    var request: JSONObject = ["cmd": "animate", "key": .string(Parse.keyPath(key)), "animation": object]
    if let name { request["name"] = .string(name) }
    if slope { request["continuity"] = "slope" }
    do {
      return try Request.parse(.object(request))
    } catch {
      throw ValidationError("--animation: \(error.message)")
    }
  }

  /// Seconds from start to end (infinity for endless ones), nil when rampd decides (a default duration).
  static func expectedLength(of animation: Animation) -> Double? {
    let timing = animation.timing
    if timing.repeatCount == .infinity || timing.repeatDuration == .infinity { return .infinity }
    var cycle = timing.duration
    if cycle == 0, case .spring(let spring) = animation.content { cycle = spring.parameters.settlingDuration }
    guard cycle > 0, timing.speed > 0 else { return nil }
    let active =
      timing.repeatDuration > 0
      ? timing.repeatDuration : cycle * max(timing.repeatCount, 1) * (timing.autoreverses ? 2 : 1)
    return (timing.beginTime ?? 0) + active / timing.speed
  }

  private static func list<T>(_ text: String, _ parse: (String) throws -> T) throws -> [T] {
    try text.split(separator: ",", omittingEmptySubsequences: false).map { try parse(String($0)) }
  }

  func summary(of result: JSONValue) -> String {
    let id = result["animation"].map(ReplyText.number) ?? "?"
    return "\(result["key"]?.stringValue ?? key): animation #\(id) '\(name ?? Animate.defaultName)'"
  }

  func rampWait(for result: JSONValue) -> RampWait? {
    guard waiting.wait, let request = try? request(), case .animate(let animate) = request.command else { return nil }
    return RampWait(
      animations: animationIDs(in: result), observe: animate.key, duration: Self.expectedLength(of: animate.animation))
  }
}

extension AnimateCommand.KeyframeMode {
  var wire: KeyframeAnimation.CalculationMode { KeyframeAnimation.CalculationMode(rawValue: rawValue) ?? .linear }
}

extension AnimateCommand.FillChoice {
  var wire: FillMode { FillMode(rawValue: rawValue) ?? .removed }
}
