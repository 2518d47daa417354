import FoundationEssentials
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A timeline: a list of protocol requests, one JSON object per line, each with an optional
/// `"at"`. Blank lines and lines starting with `#` are skipped. The one reader of timeline files,
/// for `rampctl batch` (against rampd) and `rampctl render --script` (offline): the same fields,
/// units and errors (`file:line: field: problem`) everywhere.
///
/// A line is a request exactly as PROTOCOL.md defines it, with two conveniences that every reader
/// of timelines accepts: gains may be written `"-6dB"` or `"50%"` and durations `"2s"` or
/// `"1m30s"` (converted, at every depth, before the line is checked as a request); `"at"` is seconds from the
/// start of the timeline (a number or a duration such as `"+10s"`), or, against a live daemon
/// only, a time of day (`"23:00"`) or a date and time, as `--at` reads them (`HumanUnits.when`).
/// A relative file path (`play`'s `path` and `queue`, `queue-add`'s `paths`, in `batch` lines
/// too) is made absolute against the timeline file's directory, as `rampctl play` makes one
/// absolute against the current directory.
public enum Timeline {
  /// One request of the timeline, with where it came from.
  public struct Entry: Sendable, Equatable {
    /// `file:line`, for messages.
    public var label: String
    public var line: Int
    /// When to apply it: `.delay` counts from the start of the timeline. Nil: at the start.
    public var at: Schedule?
    /// The request without its `at` and id.
    public var request: Request

    /// Seconds after the start at which the line is due (dates count as due at once: rampd
    /// holds them until their time).
    public var offset: Double {
      if case .delay(let seconds)? = at { return seconds }
      return 0
    }

    /// An error about this line.
    public func error(_ message: String) -> LineError { LineError(label: label, message: message) }
  }

  /// A timeline line that is not a valid request (or cannot run where it was given).
  public struct LineError: Error, Equatable, Sendable, CustomStringConvertible {
    public var label: String
    public var message: String
    public var description: String { "\(label): \(message)" }

    public init(label: String, message: String) {
      self.label = label
      self.message = message
    }
  }

  /// Fields that hold a gain, converted from `"-6dB"`, `"50%"`.
  static let gainFields: Set<String> = ["to", "from", "value", "gain"]
  /// Fields that hold seconds, converted from `"2s"`, `"500ms"`, `"1m30s"`.
  static let durationFields: Set<String> = ["duration", "fadeIn", "fade", "position", "timeout"]

  /// `song.flac` → `/directory/song.flac` (standardized); an absolute path as it is. The one rule
  /// by which clients make a relative file path absolute before sending it to rampd, which
  /// resolves paths against its own directory or media roots, not the client's.
  public static func absolutePath(_ path: String, directory: String) -> String {
    if path.hasPrefix("/") { return path }
    return URL(fileURLWithPath: directory + "/" + path).standardized.path
  }

  /// The directory of the timeline file at `path` (`-`, standard input: the current directory),
  /// against which its relative file paths are resolved.
  public static func directory(of path: String) -> String {
    let current = FileManager.default.currentDirectoryPath
    guard path != "-" else { return current }
    return URL(fileURLWithPath: absolutePath(path, directory: current)).deletingLastPathComponent().path
  }

  /// Every valid line's entry and every invalid line's error (all of them, so one run shows
  /// every mistake). Relative file paths are resolved against `directory` (by default the
  /// current directory). `options` are the daemon's, for a reader that plays the timeline
  /// itself (`rampctl render --config`: a plain `db` takes its `fade.db-floor`); by default a
  /// plain `db` names no floor, left to the daemon that receives the line.
  public static func parse(
    _ text: String, file: String, directory: String = FileManager.default.currentDirectoryPath,
    options: ParseOptions = ParseOptions()
  ) -> (entries: [Entry], errors: [LineError]) {
    var entries: [Entry] = []
    var errors: [LineError] = []
    for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
      let line = rawLine.trimmingWhitespace()
      if line.isEmpty || line.hasPrefix("#") { continue }
      let label = "\(file):\(index + 1)"
      do {
        var parsed = try entry(line, label: label, line: index + 1, options: options)
        parsed.request.command = resolvingPaths(parsed.request.command, against: directory)
        entries.append(parsed)
      } catch {
        errors.append(error)
      }
    }
    return (entries, errors)
  }

  /// Reads and parses the file at `path` (`-`: standard input, labelled `<stdin>`). Throws the
  /// errors of every bad line, or one saying the file cannot be read.
  public static func load(_ path: String, options: ParseOptions = ParseOptions()) throws(Failure) -> [Entry] {
    let text: String
    let label = path == "-" ? "<stdin>" : path
    if path == "-" {
      text = String(decoding: readToEnd(0), as: UTF8.self)
    } else {
      do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
        throw Failure(messages: ["cannot read \(path): \(failureReason(error))"])
      }
    }
    let timeline = parse(text, file: label, directory: directory(of: path), options: options)
    guard timeline.errors.isEmpty else { throw Failure(messages: timeline.errors.map(\.description)) }
    return timeline.entries
  }

  /// A timeline that cannot be used: one message per problem, each naming its line.
  public struct Failure: Error, Sendable, CustomStringConvertible {
    public var messages: [String]
    public var description: String { messages.joined(separator: "\n") }

    public init(messages: [String]) { self.messages = messages }
  }

  static func entry(
    _ text: String, label: String, line: Int, options: ParseOptions = ParseOptions()
  ) throws(LineError) -> Entry {
    func fail(_ message: String) -> LineError { LineError(label: label, message: message) }
    let value: JSONValue
    do { value = try JSON.parse(text) } catch { throw fail(error.message) }
    guard case .object(var object) = value else { throw fail("expected a request object, got \(text)") }
    var at: Schedule?
    if let written = object["at"], written != .null {
      at = try schedule(written, fail)
    }
    object["at"] = nil
    object["id"] = nil
    // A line's at is when the timeline sends or renders it, not a schedule the daemon keeps.
    if object["repeat"] == nil, let key = ["ack", "tag", "yield"].first(where: { object[$0] != nil }) {
      throw fail(
        "\(key): a timeline line's at counts from the timeline's start and makes no schedule on the daemon;"
          + " \(key) is for a request scheduled there (rampctl --at, or with repeat)")
    }
    do { object = try convertingUnits(object, at: "") } catch { throw fail(error.description) }
    do {
      return Entry(label: label, line: line, at: at, request: try Request.parse(.object(object), options: options))
    } catch {
      throw fail(error.summary)
    }
  }

  /// `object` with its gains and durations written with units made numbers, at every depth a
  /// request nests: a `batch`'s `commands`, an `animate`'s `animation` and a group's
  /// `animations`. `prefix` is the path to `object`, so an error names `commands[1].duration`.
  static func convertingUnits(_ object: JSONObject, at prefix: String) throws(UnitError) -> JSONObject {
    var object = object
    for (key, member) in object {
      switch member {
      case .string(let text):
        if gainFields.contains(key) { object[key] = .number(try HumanUnits.gain(text, option: prefix + key)) }
        if durationFields.contains(key) {
          object[key] = .number(try HumanUnits.duration(text, option: prefix + key))
        }
      case .object(let inner) where key == "animation":
        object[key] = .object(try convertingUnits(inner, at: prefix + key + "."))
      case .array(let elements) where key == "commands" || key == "animations":
        var converted: [JSONValue] = []
        for (index, element) in elements.enumerated() {
          guard case .object(let inner) = element else {
            converted.append(element)
            continue
          }
          converted.append(.object(try convertingUnits(inner, at: "\(prefix)\(key)[\(index)].")))
        }
        object[key] = .array(converted)
      default:
        continue
      }
    }
    return object
  }

  /// `command` with its relative file paths made absolute against `directory`: `play`'s `path`
  /// and `queue`, `queue-add`'s `paths`, and those of the commands of a `batch`.
  static func resolvingPaths(_ command: Command, against directory: String) -> Command {
    switch command {
    case .play(var play):
      play.path = absolutePath(play.path, directory: directory)
      play.queue = play.queue?.map { absolutePath($0, directory: directory) }
      return .play(play)
    case .queueAdd(let stream, let paths):
      return .queueAdd(stream: stream, paths: paths.map { absolutePath($0, directory: directory) })
    case .batch(let requests):
      return .batch(
        requests.map { request in
          var request = request
          request.command = resolvingPaths(request.command, against: directory)
          return request
        })
    default:
      return command
    }
  }

  /// `"at"`: a number is seconds from the start of the timeline; a string is any form `--at`
  /// takes (`"+10s"`, `"1m30s"`, `"23:00"`, an ISO 8601 date), a delay counting from the start.
  private static func schedule(_ value: JSONValue, _ fail: (String) -> LineError) throws(LineError) -> Schedule {
    switch value {
    case .number(let seconds):
      guard seconds.isFinite, seconds >= 0 else { throw fail("at: expected seconds >= 0, got \(value.serialized())") }
      return .delay(seconds)
    case .string(let text):
      do { return try HumanUnits.when(text, option: "at") } catch { throw fail(error.description) }
    default:
      throw fail("at: expected seconds from the start, or \(HumanUnits.whenForms), got \(value.serialized())")
    }
  }
}
