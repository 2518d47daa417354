import ArgumentParser
import RampCLI
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `rampctl queue add|list|clear|remove`: a queue stream's files.
struct QueueCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "queue",
    abstract: "Show or change the queue of a stream started with play --queue.",
    discussion: """
      A queue stream plays its files one after another: gapless (the next file's first sample \
      follows the last) unless it crossfades (play --crossfade). `rampctl next` and `rampctl \
      previous` skip, crossfading over play's --skip-crossfade.

      Examples:
        rampctl play one.flac --stream music --queue two.flac three.flac --crossfade 4s
        rampctl queue add music four.flac five.flac
        rampctl queue list music
        rampctl queue remove music 3
        rampctl queue clear music
      """,
    subcommands: [QueueAddCommand.self, QueueListCommand.self, QueueRemoveCommand.self, QueueClearCommand.self])
}

struct QueueAddCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "add",
    abstract: "Add files to the end of a stream's queue.",
    discussion: """
      Examples:
        rampctl queue add music four.flac five.flac
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The queue stream.", valueName: "stream"))
  var stream: String

  @Argument(help: ArgumentHelp("The files to add.", valueName: "file"), completion: .file())
  var files: [String] = []

  @OptionGroup var when: ScheduleOptions

  var atText: String? { when.at }

  func request() throws -> Request {
    guard !files.isEmpty else { throw ValidationError("give at least one file to add") }
    let paths = files.map { Parse.absolutePath(Arguments.restoringMinus($0)) }
    return try when.scheduled(
      Parse.checked(Request(.queueAdd(stream: stream, paths: paths)), options: ["stream": "<stream>"]),
      waiting: false)
  }

  func summary(of result: JSONValue) -> String { ReplyText.queue(stream, result["queue"]) }
}

struct QueueListCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "list",
    abstract: "List a stream's queue (every queue stream's without one).",
    discussion: """
      The playing item is marked >, an item still fading out (a crossfade, a skip) <.

      Examples:
        rampctl queue list music
        rampctl queue list --json | jq '.result.queues[].queue.current'
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The queue stream.", valueName: "stream"))
  var stream: String?

  func request() throws -> Request {
    try Parse.checked(Request(.queueList(stream: stream)), options: ["stream": "<stream>"])
  }

  func summary(of result: JSONValue) -> String {
    if let stream { return ReplyText.queue(stream, result["queue"]) }
    let queues = result["queues"]?.arrayValue ?? []
    guard !queues.isEmpty else { return "no stream plays a queue" }
    return queues.map { ReplyText.queue($0["stream"]?.stringValue ?? "?", $0["queue"]) }.joined(separator: "\n")
  }
}

struct QueueRemoveCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "remove",
    abstract: "Remove an item from a stream's queue (not the playing one).",
    discussion: """
      Examples:
        rampctl queue remove music 2        the third file
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The queue stream.", valueName: "stream"))
  var stream: String

  @Argument(help: ArgumentHelp("The item's index in the queue, from 0 (queue list shows it).", valueName: "index"))
  var index: Int

  @OptionGroup var when: ScheduleOptions

  var atText: String? { when.at }

  func request() throws -> Request {
    guard index >= 0 else { throw ValidationError("<index>: an index from 0, got \(index)") }
    return try when.scheduled(
      Parse.checked(
        Request(.queueRemove(stream: stream, index: index)), options: ["stream": "<stream>", "index": "<index>"]),
      waiting: false)
  }

  func summary(of result: JSONValue) -> String { ReplyText.queue(stream, result["queue"]) }
}

struct QueueClearCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "clear",
    abstract: "Remove every item of a stream's queue but the playing one (the stream ends after it).",
    discussion: """
      Examples:
        rampctl queue clear music
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The queue stream.", valueName: "stream"))
  var stream: String

  @OptionGroup var when: ScheduleOptions

  var atText: String? { when.at }

  func request() throws -> Request {
    try when.scheduled(
      Parse.checked(Request(.queueClear(stream: stream)), options: ["stream": "<stream>"]), waiting: false)
  }

  func summary(of result: JSONValue) -> String { ReplyText.queue(stream, result["queue"]) }
}

/// What `next` and `previous` share.
struct SkipArguments: ParsableArguments {
  @Argument(help: ArgumentHelp("The queue stream.", valueName: "stream"))
  var stream: String

  @OptionGroup var when: ScheduleOptions

  func request(forward: Bool) throws -> Request {
    try when.scheduled(
      Parse.checked(Request(.skip(stream: stream, forward: forward)), options: ["stream": "<stream>"]),
      waiting: false)
  }

  func summary(of result: JSONValue) -> String {
    "\(stream): item \(ReplyText.number(result["index"] ?? .null)), \(result["path"]?.stringValue ?? "?")"
  }
}

struct NextCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "next",
    abstract: "Skip to the next item of a stream's queue, crossfading.",
    discussion: """
      The playing item fades out and the next fades in over the stream's skip crossfade (play \
      --skip-crossfade, else [queue] skip-crossfade; at least the declick ramp). A skip during a \
      crossfade takes every ramp on from where it is: nothing jumps. After the last item: the \
      first when the queue loops, else refused.

      Examples:
        rampctl next music
        rampctl next music --at +30s
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var skip: SkipArguments

  var atText: String? { skip.when.at }

  func request() throws -> Request { try skip.request(forward: true) }

  func summary(of result: JSONValue) -> String { skip.summary(of: result) }
}

struct PreviousCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "previous",
    abstract: "Skip back to the previous item of a stream's queue, crossfading.",
    discussion: """
      As `rampctl next`, backwards. From the first item: the first again, from its start (the \
      last, when the queue loops).

      Examples:
        rampctl previous music
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var skip: SkipArguments

  var atText: String? { skip.when.at }

  func request() throws -> Request { try skip.request(forward: false) }

  func summary(of result: JSONValue) -> String { skip.summary(of: result) }
}
