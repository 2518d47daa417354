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

/// Options every command that talks to rampd takes.
struct ConnectionOptions: ParsableArguments {
  @Option(
    help: ArgumentHelp(
      "rampd's socket (default: $RAMPD_SOCKET, else $XDG_RUNTIME_DIR/rampd/rampd.sock when not root, else "
        + "/run/rampd/rampd.sock). May also come before the command.", valueName: "path"))
  var socket: String?

  @Flag(
    help: ArgumentHelp(
      "Print rampd's reply lines as they are (one JSON object per line), refusals too, for scripts; the exit "
        + "status still tells a refusal (65). May also come before the command."))
  var json = false

  var socketPath: String {
    SocketLocation.clientPath(option: socket, environment: ProcessInfo.processInfo.environment, isRoot: geteuid() == 0)
  }
}

/// `--wait`, on the commands that start a ramp.
struct WaitFlag: ParsableArguments {
  @Flag(
    help: ArgumentHelp(
      "Block until the ramp ends: a live progress bar on a terminal, with the audible gain and the signal level "
        + "(peak dBFS, momentary LUFS) of the stream or master it acts on; plain lines otherwise. "
        + "Ctrl-C stops waiting (exit 75); the ramp goes on."))
  var wait = false
}

/// The options a ramp shares: `fade`, `fade-in`, `fade-out`.
struct RampOptions: ParsableArguments {
  @Option(
    parsing: .unconditional,
    help: ArgumentHelp("Start here instead of at the audible value: 0.5, 50%, -6dB.", valueName: "gain"))
  var from: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp("Length: 2s, 500ms, 1m30s or seconds (default: rampd's fade.duration).", valueName: "duration"))
  var duration: String?

  @Option(
    help: ArgumentHelp("Timing curve (default: rampd's fade.curve; see `rampctl curve --list`).", valueName: "curve"),
    completion: Completions.curves)
  var curve: String?

  @Option(
    help: ArgumentHelp("Value space: amplitude, db, db(<floor>) or power.", valueName: "space"),
    completion: Completions.spaces)
  var space: String?

  @Flag(help: "Keep the slope continuous too when this replaces a ramp in flight (not only the value).")
  var slope = false

  @Option(help: ArgumentHelp("The animation's name on the key path (default: fade); a new one replaces it."))
  var name: String?

  @OptionGroup var when: ScheduleOptions

  var at: String? { when.at }

  func scheduled(_ request: Request, waiting: Bool, now: Date = Date()) throws -> Request {
    try when.scheduled(request, waiting: waiting, now: now)
  }
}

/// Turning typed text into protocol values; every refusal names the option, as a usage error.
enum Parse {
  /// `--at`: a time of day, a date or a delay (`HumanUnits.when`, as a timeline's `"at"`).
  static func when(_ text: String, _ option: String, now: Date = Date()) throws -> Schedule {
    do { return try HumanUnits.when(Arguments.restoringMinus(text), option: option, now: now) } catch {
      throw usage(error)
    }
  }

  static func gain(_ text: String, _ option: String) throws -> Double {
    do { return try HumanUnits.gain(text, option: option) } catch { throw usage(error) }
  }

  static func gain(_ text: String?, _ option: String) throws -> Double? {
    try text.map { try gain($0, option) }
  }

  static func duration(_ text: String, _ option: String) throws -> Double {
    do { return try HumanUnits.duration(text, option: option) } catch { throw usage(error) }
  }

  /// The unit error as typed: with the ASCII minus `Arguments.prepared` replaced.
  private static func usage(_ error: UnitError) -> ValidationError {
    ValidationError(error.description.replacing("\u{2212}", with: "-"))
  }

  /// A duration that must say its unit, where a bare number is ambiguous (a sleep timer of 30
  /// could be minutes or seconds).
  static func spokenDuration(_ text: String, _ option: String) throws -> Double {
    let source = text.trimmingWhitespace()
    if let number = Double(source), number.isFinite {
      throw ValidationError("\(option): '\(source)' has no unit: \(source)m or \(source)s?")
    }
    return try duration(source, option)
  }

  static func duration(_ text: String?, _ option: String) throws -> Double? {
    try text.map { try duration($0, option) }
  }

  static func curve(_ text: String?, _ option: String = "--curve") throws -> TimingFunction? {
    guard let text else { return nil }
    do { return try TimingFunction(parsing: text) } catch { throw ValidationError("\(option): \(error.message)") }
  }

  static func space(_ text: String?, _ option: String = "--space") throws -> ValueSpace? {
    guard let text else { return nil }
    do { return try ValueSpace(parsing: text) } catch { throw ValidationError("\(option): \(error.message)") }
  }

  /// A level or a depth in dB: -35dB, -35, 6 dB.
  static func decibels(_ text: String, _ option: String) throws -> Double {
    do { return try HumanUnits.decibels(Arguments.restoringMinus(text), option: option) } catch {
      throw ValidationError(error.description)
    }
  }

  /// `--loudness`: a target with its unit (-18LUFS), or `off`.
  static func loudness(_ text: String?, _ option: String) throws -> LoudnessChoice? {
    guard let text else { return nil }
    let source = Arguments.restoringMinus(text)
    if source.trimmingWhitespace().lowercased() == "off" { return .off }
    do { return .target(try HumanUnits.loudness(source, option: option)) } catch { throw usage(error) }
  }

  /// A plain number (any sign), for parameters that are not gains.
  static func number(_ text: String, _ option: String) throws -> Double {
    let source = Arguments.restoringMinus(text).trimmingWhitespace()
    guard let value = Double(source), value.isFinite else {
      throw ValidationError("\(option): '\(source)' is not a finite number")
    }
    return value
  }

  /// Key paths as typed: a bare stream id (`s1`, no dot) means that stream's gain.
  static func keyPath(_ text: String) -> String {
    text.contains(".") ? text : "streams.\(text).gain"
  }

  /// The first parts of key paths: `list`'s prefix that is one of them is kept as it is.
  static let keyPathRoots: Set<String> = ["master", "streams", "mixers"]

  /// A `list` prefix as typed: a key path's first part (`streams`) or a longer prefix
  /// (`streams.s1`) as it is; any other bare word is a stream id, `s1` meaning `streams.s1`.
  static func listPrefix(_ text: String) -> String {
    text.contains(".") || keyPathRoots.contains(text) ? text : "streams.\(text)"
  }

  /// `song.flac` → `/current/directory/song.flac`: rampd resolves paths against its own
  /// directory (or its media roots), not the client's (the rule timelines follow too).
  static func absolutePath(_ path: String, directory: String = FileManager.default.currentDirectoryPath) -> String {
    Timeline.absolutePath(path, directory: directory)
  }

  /// Checks the request as rampd will, so what it would refuse on sight is a usage error here,
  /// named by the option it came from (`--key-times: keyTimes[1]: must be in [0, 1], got 2`).
  static func checked(_ request: Request, options: [String: String] = [:]) throws -> Request {
    do {
      return try Request.parse(request.json)
    } catch {
      guard let field = error.field else { throw ValidationError(error.message) }
      // `animation.keyTimes[1]` → `keyTimes[1]`, looked up as `keyTimes`.
      let local = field.split(separator: ".").last.map(String.init) ?? field
      let base = String(local.prefix { $0 != "[" })
      var message = error.problem.map { "\(local): \($0)" } ?? error.message
      if let option = options[base] { message = "\(option): " + message }
      throw ValidationError(message)
    }
  }
}

/// The command line before ArgumentParser reads it.
enum Arguments {
  /// ArgumentParser reads any word that starts with `-` as an option, so `set master.gain -6dB`
  /// would fail with "unknown option". Words that can only be negative values (a minus then a
  /// digit, a point or `inf`) get a Unicode minus sign (U+2212) instead, which the unit parsers
  /// read as `-`; no option of rampctl starts with a digit, so nothing else changes.
  static func prepared(_ arguments: [String]) -> [String] {
    var afterTerminator = false
    return arguments.map { word in
      if word == "--" { afterTerminator = true }
      guard !afterTerminator, looksNegative(word) else { return word }
      return "\u{2212}" + word.dropFirst()
    }
  }

  static func looksNegative(_ word: String) -> Bool {
    guard word.hasPrefix("-"), !word.hasPrefix("--") else { return false }
    let rest = word.dropFirst()
    guard let first = rest.first else { return false }
    return first.isNumber || (first == "." && rest.dropFirst().first?.isNumber == true)
      || rest.lowercased().hasPrefix("inf")
  }

  /// Undoes `prepared` for text that is not a value (a file name such as `-5.wav`).
  static func restoringMinus(_ text: String) -> String {
    text.hasPrefix("\u{2212}") ? "-" + text.dropFirst() : text
  }
}

/// The animation ids a reply names: `result.animation` (one or null) or `result.animations`.
func animationIDs(in result: JSONValue) -> [UInt64] {
  var ids: [UInt64] = []
  if let id = result["animation"]?.numberValue, id >= 0 { ids.append(UInt64(id)) }
  for value in result["animations"]?.arrayValue ?? [] {
    if let id = value.numberValue, id >= 0 { ids.append(UInt64(id)) }
  }
  return ids
}

func streams(in result: JSONValue) -> [String] {
  (result["streams"]?.arrayValue ?? []).compactMap(\.stringValue)
}
