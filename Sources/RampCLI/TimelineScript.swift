import Foundation
import RampAudio
import RampEngine
import RampProtocol

/// A timeline script: one request object per line (blank lines and lines starting with `#`
/// are skipped), each with an optional `"at"` in seconds from the start. Offline rendering
/// understands the ramping commands:
///
///     {"at": 0,   "cmd": "set",      "key": "master.gain", "to": "-6dB", "duration": 0}
///     {"at": 5,   "cmd": "fade",     "key": "streams.main.gain", "to": 0.2, "duration": "2s", "curve": "ease-in", "space": "db"}
///     {"at": 9,   "cmd": "fade-in",  "duration": 1}
///     {"at": 12,  "cmd": "fade-out", "duration": "3s", "curve": "qsin"}
///
/// `key` defaults to `master.gain`; `to` and `duration` take numbers or the CLI's units.
public enum TimelineScript {
  static let commands = ["set", "fade", "fade-in", "fade-out"]
  static let fields: Set<String> = ["at", "id", "cmd", "key", "to", "duration", "curve", "space", "continuity"]

  public static func load(_ path: String) throws -> [ScheduledChange] {
    let text: String
    do {
      text = try String(contentsOfFile: path, encoding: .utf8)
    } catch {
      throw ScriptError("cannot read '\(path)': \(error.localizedDescription)")
    }
    var changes: [ScheduledChange] = []
    for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
      let trimmed = line.trimmingCharacters(in: .whitespaces)
      if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
      changes.append(try parse(trimmed, label: "\(path):\(index + 1)"))
    }
    return changes
  }

  public static func parse(_ line: String, label: String) throws -> ScheduledChange {
    func fail(_ message: String) -> ScriptError { ScriptError("\(label): \(message)") }
    guard let data = line.data(using: .utf8),
      let object = try? JSONDecoder().decode([String: ScriptValue].self, from: data)
    else { throw fail("not a JSON object") }
    // The command first: a `play` line's fields are not the mistake, the `play` is.
    guard case .string(let command)? = object["cmd"] else { throw fail("cmd: missing, expected one of \(commands)") }
    guard commands.contains(command) else {
      throw fail("cmd: '\(command)' cannot be rendered offline; expected one of \(commands.joined(separator: ", "))")
    }
    if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
      throw fail("unknown field '\(unknown)'")
    }
    let at = try offset(object["at"], label: label) ?? 0
    let key = try string(object["key"], field: "key", label: label) ?? OfflineRenderer.masterGain
    let duration = try seconds(object["duration"], field: "duration", label: label)
    let curveText = try string(object["curve"], field: "curve", label: label)
    let spaceText = try string(object["space"], field: "space", label: label)
    let continuityText = try string(object["continuity"], field: "continuity", label: label)
    let target: Double
    switch command {
    case "fade-in": target = try gain(object["to"], label: label) ?? 1
    case "fade-out": target = try gain(object["to"], label: label) ?? 0
    default:
      guard let value = try gain(object["to"], label: label) else { throw fail("to: missing") }
      target = value
    }
    var transaction = Transaction(
      duration: duration ?? (command == "set" ? 0 : 1), timingFunction: command == "set" ? .default : .linear)
    do {
      if let curveText { transaction.timingFunction = try TimingFunction(parsing: curveText) }
      if let spaceText { transaction.valueSpace = try ValueSpace(parsing: spaceText) }
    } catch { throw fail(error.description) }
    if let continuityText {
      guard let continuity = Continuity(rawValue: continuityText) else {
        throw fail("continuity: '\(continuityText)' is not value or slope")
      }
      transaction.continuity = continuity
    }
    if transaction.duration == 0 { transaction.disableActions = true }
    let change = transaction
    return ScheduledChange(at: at, label: "\(label): \(command)") { engine in
      try engine.set(key, to: target, transaction: change)
    }
  }

  private static func seconds(_ value: ScriptValue?, field: String, label: String) throws -> Double? {
    switch value {
    case nil: return nil
    case .number(let seconds)?:
      guard seconds.isFinite, seconds >= 0 else {
        throw ScriptError("\(label): \(field): must be a finite number of seconds >= 0, got \(seconds)")
      }
      return seconds
    case .string(let text)?:
      do { return try HumanUnits.duration(text, option: field) } catch {
        throw ScriptError("\(label): \(error.description)")
      }
    default:
      throw ScriptError("\(label): \(field): expected seconds (a number or a string such as \"2s\")")
    }
  }

  /// `"at"`, read as `--at` and `rampctl batch` read it (`HumanUnits.when`); a render has no
  /// clock time, so only seconds from its start (`12`, `"12s"`, `"+1m30s"`) mean something.
  private static func offset(_ value: ScriptValue?, label: String) throws -> Double? {
    guard case .string(let text)? = value else { return try seconds(value, field: "at", label: label) }
    let when: Schedule
    do { when = try HumanUnits.when(text, option: "at") } catch { throw ScriptError("\(label): \(error.description)") }
    guard case .delay(let seconds) = when else {
      throw ScriptError(
        "\(label): at: '\(text)' is a clock time; a render counts seconds from its start (12, \"12s\", \"+1m30s\")")
    }
    return seconds
  }

  private static func gain(_ value: ScriptValue?, label: String) throws -> Double? {
    switch value {
    case nil: return nil
    case .number(let gain)?:
      guard gain.isFinite, gain >= 0 else {
        throw ScriptError("\(label): to: must be a finite gain >= 0, got \(gain)")
      }
      return gain
    case .string(let text)?:
      do { return try HumanUnits.gain(text, option: "to") } catch {
        throw ScriptError("\(label): \(error.description)")
      }
    default:
      throw ScriptError("\(label): to: expected a gain (a number or a string such as \"-6dB\")")
    }
  }

  private static func string(_ value: ScriptValue?, field: String, label: String) throws -> String? {
    switch value {
    case nil: return nil
    case .string(let text)?: return text
    default: throw ScriptError("\(label): \(field): expected a string")
    }
  }
}

/// A timeline script that cannot be used, with the file, line and field at fault.
public struct ScriptError: Error, CustomStringConvertible {
  public let description: String
  init(_ description: String) { self.description = description }
}

/// A JSON value as a script line may hold it; numbers and strings are what fields take.
enum ScriptValue: Decodable {
  case number(Double)
  case string(String)
  case other

  init(from decoder: Decoder) throws {
    let container = try decoder.singleValueContainer()
    if let number = try? container.decode(Double.self) {
      self = .number(number)
    } else if let text = try? container.decode(String.self) {
      self = .string(text)
    } else {
      self = .other
    }
  }
}
