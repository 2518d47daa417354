import ArgumentParser
import RampCLI
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct GetCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "get",
    abstract: "Show a key path's model value and the value audible now.",
    discussion: """
      The model value is where the property is going (a fade sets it to its target at once); \
      the audible (presentation) value is what plays at this sample. `rampctl list KEY` shows the \
      animations that move it.

      Examples:
        rampctl get
        rampctl get streams.s1.gain
        rampctl get master.gain --json | jq .result.presentation
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String = Fade.defaultKey

  func request() throws -> Request {
    try Parse.checked(Request(.get(key: Parse.keyPath(key))), options: ["key": "<key>"])
  }

  func summary(of result: JSONValue) -> String { ReplyText.property(result) }
}

struct CancelCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "cancel",
    abstract: "Hold a key path at its audible value and drop its animations.",
    discussion: """
      Stops every ramp on the key path where it is now: the audible value becomes the model \
      value (Web Audio's cancelAndHoldAtTime).

      Examples:
        rampctl cancel master.gain
        rampctl cancel s1
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String

  @OptionGroup var when: ScheduleOptions

  var atText: String? { when.at }

  func request() throws -> Request {
    try when.scheduled(
      Parse.checked(Request(.cancel(key: Parse.keyPath(key))), options: ["key": "<key>"]), waiting: false)
  }

  func summary(of result: JSONValue) -> String {
    let key = result["key"]?.stringValue ?? key
    return "\(key) held at \(result["value"]?.numberValue.map { ReplyText.level($0, key: key) } ?? "?")"
  }
}

struct RemoveCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "remove",
    abstract: "Remove animations from a key path, the Core Animation way.",
    discussion: """
      The value returns to the model value, with a short declick ramp instead of a jump. \
      --name removes only that animation.

      Examples:
        rampctl remove streams.s1.gain
        rampctl remove master.gain --name duck
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String

  @Option(help: ArgumentHelp("Only the animation with this name (default: all of them).", valueName: "name"))
  var name: String?

  @OptionGroup var when: ScheduleOptions

  var atText: String? { when.at }

  func request() throws -> Request {
    try when.scheduled(
      Parse.checked(
        Request(.remove(key: Parse.keyPath(key), name: name)), options: ["key": "<key>", "name": "--name"]),
      waiting: false)
  }

  func summary(of result: JSONValue) -> String {
    let key = result["key"]?.stringValue ?? key
    let what = name.map { "'\($0)'" } ?? "animations"
    return
      "removed \(what) from \(key); back to \(result["value"]?.numberValue.map { ReplyText.level($0, key: key) } ?? "?")"
  }
}

struct ListCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "list",
    abstract: "List the key paths, their values and the animations in flight.",
    discussion: """
      Examples:
        rampctl list
        rampctl list streams
        rampctl list s1                  a stream id: the same as streams.s1
        rampctl list streams.s1 --json
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(
    help: ArgumentHelp(
      "Only key paths under this prefix (master, streams, mixers, streams.s1), or of this stream (s1).",
      valueName: "prefix"))
  var prefix: String?

  func request() throws -> Request { try Parse.checked(Request(.list(prefix: prefix.map(Parse.listPrefix)))) }

  func summary(of result: JSONValue) -> String { ReplyText.list(result) }
}
