import ArgumentParser
import RampCLI
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct PlayCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "play",
    abstract: "Play a file as a new stream.",
    discussion: """
      rampd opens the file itself (anything libsndfile reads: WAV, FLAC, Ogg, Opus, MP3, ...), so a \
      relative path is made absolute against rampctl's current directory first. The stream's \
      gain is the key path streams.<id>.gain: --fade-in ramps it from silence to --gain. \
      With --wait, rampctl returns when the stream ends: at the end of the file, or when it is \
      stopped (a --loop stream plays until `rampctl stop`).

      Examples:
        rampctl play song.flac --fade-in 3s
        rampctl play alarm.flac --stream alarm --gain -12dB --fade-in 30s --curve ease-in --loop
        rampctl play jingle.wav --paused          then: rampctl resume
        rampctl play intro.wav --fade-in 2s --wait     returns when intro.wav has played to its end
        rampctl play one.flac --stream music --queue two.flac three.flac --crossfade 4s --loop
        rampctl play jingle.wav --loudness -18LUFS

      With --queue the stream plays a queue: the file, then each --queue file in turn, gapless \
      unless --crossfade is given; --loop then loops the queue. With --crossfade-level the \
      crossfade at an item's end starts where the item's tail falls below that level for good \
      (looked for in its last --crossfade-window), when that is earlier. See `rampctl queue`, \
      `rampctl next` and `rampctl previous`.

      With --loudness the file plays at that loudness (EBU R 128): it is measured when it is \
      opened (once: the measurement is cached, as `rampctl loudness` caches it), and a fixed \
      trim brings it to the target, lowered so that its true peak stays under rampd's \
      playback.loudness-ceiling (-1 dBTP). The trim is applied under the stream's gain, which \
      keeps its value: fades and ducks work on top of it. A long file not measured yet delays \
      the reply (about 2.5 s for 10 minutes of audio).
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The file to play.", valueName: "file"), completion: .file())
  var file: String

  @Option(
    help: ArgumentHelp("The stream id: letters, digits, _ and - (default: rampd picks s1, s2, ...).", valueName: "id"))
  var stream: String?

  @Option(
    parsing: .unconditional, help: ArgumentHelp("The stream's gain: 0.5, 50%, -6dB (default 1).", valueName: "gain"))
  var gain: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Fade in over this long: 3s, 500ms.", valueName: "duration"))
  var fadeIn: String?

  @Option(
    help: ArgumentHelp("Curve of the fade-in (default: rampd's fade.curve).", valueName: "curve"),
    completion: Completions.curves)
  var curve: String?

  @Flag(help: "Start again from the beginning at the end of the file.")
  var loop = false

  @Flag(help: "Load and hold at the start until `rampctl resume`.")
  var paused = false

  @Option(
    name: .customLong("queue"), parsing: .upToNextOption,
    help: ArgumentHelp("Files to play after the file, one after another (a queue stream).", valueName: "file"),
    completion: .file())
  var queue: [String] = []

  @Option(
    help: ArgumentHelp(
      "A queue's crossfade at each item's end: 4s (default: rampd's queue.crossfade, 0 = gapless).",
      valueName: "duration"))
  var crossfade: String?

  @Option(
    help: ArgumentHelp("The crossfade's curve (default: rampd's queue.crossfade-curve, qsin).", valueName: "curve"),
    completion: Completions.curves)
  var crossfadeCurve: String?

  @Option(
    help: ArgumentHelp(
      "A queue's crossfade on next and previous (default: rampd's queue.skip-crossfade).", valueName: "duration"))
  var skipCrossfade: String?

  @Option(
    help: ArgumentHelp("The skip crossfade's curve (default: rampd's queue.skip-curve, qsin).", valueName: "curve"),
    completion: Completions.curves)
  var skipCurve: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Level-triggered crossfade: start it where an item's tail stays below this level: -35dB "
        + "(default: rampd's queue.crossfade-level, off).", valueName: "dB"))
  var crossfadeLevel: String?

  @Option(
    help: ArgumentHelp(
      "How much of each item's end --crossfade-level looks at: 10s (default: rampd's queue.crossfade-window).",
      valueName: "duration"))
  var crossfadeWindow: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Play at this loudness: -18LUFS, trimmed by the file's measured loudness and held under its true-peak "
        + "ceiling; each queue item is trimmed on its own; off: at its own level (default: rampd's "
        + "playback.loudness, queue.loudness for a queue).", valueName: "LUFS"))
  var loudness: String?

  @OptionGroup var when: ScheduleOptions
  @OptionGroup var waiting: WaitFlag

  var atText: String? { when.at }

  func request() throws -> Request {
    let queued = queue.isEmpty ? nil : queue.map { Parse.absolutePath(Arguments.restoringMinus($0)) }
    if queued == nil,
      let option = [
        ("--crossfade", crossfade), ("--crossfade-curve", crossfadeCurve), ("--skip-crossfade", skipCrossfade),
        ("--skip-curve", skipCurve), ("--crossfade-level", crossfadeLevel), ("--crossfade-window", crossfadeWindow),
      ].first(where: { $0.1 != nil })?.0
    {
      throw ValidationError("\(option) belongs to a queue: give --queue too")
    }
    let crossfade = Crossfade(
      duration: try Parse.duration(crossfade, "--crossfade"),
      curve: try Parse.curve(crossfadeCurve, "--crossfade-curve"),
      skipDuration: try Parse.duration(skipCrossfade, "--skip-crossfade"),
      skipCurve: try Parse.curve(skipCurve, "--skip-curve"),
      level: try crossfadeLevel.map { try Parse.decibels($0, "--crossfade-level") },
      window: try Parse.duration(crossfadeWindow, "--crossfade-window"))
    let play = Play(
      path: Parse.absolutePath(Arguments.restoringMinus(file)), stream: stream, gain: try Parse.gain(gain, "--gain"),
      fadeIn: try Parse.duration(fadeIn, "--fade-in"), curve: try Parse.curve(curve), loop: loop, paused: paused,
      queue: queued, crossfade: crossfade, loudness: try Parse.loudness(loudness, "--loudness"))
    return try when.scheduled(
      Parse.checked(
        Request(.play(play)),
        options: [
          "stream": "--stream", "gain": "--gain", "path": "<file>", "queue": "--queue", "crossfade": "--crossfade",
          "crossfadeCurve": "--crossfade-curve", "skipCrossfade": "--skip-crossfade", "skipCurve": "--skip-curve",
          "crossfadeLevel": "--crossfade-level", "crossfadeWindow": "--crossfade-window", "loudness": "--loudness",
        ]),
      waiting: waiting.wait)
  }

  func summary(of result: JSONValue) -> String {
    let stream = result["stream"]?.stringValue ?? "?"
    var text = "\(paused ? "loaded" : "playing") \(stream): \(result["path"]?.stringValue ?? file)"
    if let id = result["animation"]?.numberValue { text += " (fade-in #\(ReplyText.number(.number(id))))" }
    if let loudness = result["loudness"], let target = loudness["target"]?.numberValue {
      text += "; at \(HumanUnits.format(loudness: target)): \(ReplyText.loudness(loudness))"
    }
    return text
  }

  /// `--wait` on a play waits for the stream to end (and for its fade-in, if any).
  func rampWait(for result: JSONValue) -> RampWait? {
    guard waiting.wait, let stream = result["stream"]?.stringValue else { return nil }
    return RampWait(
      animations: animationIDs(in: result), observe: "streams.\(stream).gain", duration: nil, streams: [stream])
  }

  var waitsForStreamsToEnd: Bool { waiting.wait }

  var typed: [String: String] { gain.map { ["gain": Arguments.restoringMinus($0)] } ?? [:] }
}

/// What `stop`, `pause` and `resume` share.
struct TransportArguments: ParsableArguments {
  @Argument(
    help: ArgumentHelp("The stream (default: every stream).", valueName: "stream"), completion: Completions.streams)
  var stream: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Ramp the stream's level over this long first: 2s, 500ms (default: a short declick).", valueName: "duration"))
  var fade: String?

  @Option(
    help: ArgumentHelp("Curve of the fade (default: linear).", valueName: "curve"), completion: Completions.curves)
  var curve: String?

  func transport() throws -> Transport {
    Transport(stream: stream, fade: try Parse.duration(fade, "--fade"), curve: try Parse.curve(curve))
  }

  static let options = ["stream": "<stream>", "fade": "--fade", "curve": "--curve"]

  /// `stopping: s1, s2` from the reply's `streams`; `idle` when it names none.
  static func summary(_ verb: String, _ result: JSONValue, idle: String = "nothing is playing") -> String {
    let names = streams(in: result)
    return names.isEmpty ? idle : "\(verb): \(names.joined(separator: ", "))"
  }

  func rampWait(for result: JSONValue, waiting: Bool) -> RampWait? {
    guard waiting else { return nil }
    let first = streams(in: result).first
    return RampWait(
      animations: animationIDs(in: result), observe: first.map { "streams.\($0).transport" },
      duration: try? Parse.duration(fade, "--fade") ?? 0, streams: streams(in: result))
  }
}

struct StopCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "stop",
    abstract: "Stop a stream (or every stream), after a fade.",
    discussion: """
      The stream's level ramps to silence over --fade, then the stream is released. Without \
      --fade the ramp is a few milliseconds long: enough not to click. With --wait, rampctl \
      returns once the streams have ended.

      Examples:
        rampctl stop
        rampctl stop s1 --fade 2s --curve ease-out
        rampctl stop --fade 5s --wait
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var transport: TransportArguments
  @OptionGroup var when: ScheduleOptions
  @OptionGroup var waiting: WaitFlag

  var atText: String? { when.at }

  func request() throws -> Request {
    try when.scheduled(
      Parse.checked(Request(.stop(try transport.transport())), options: TransportArguments.options),
      waiting: waiting.wait)
  }

  func summary(of result: JSONValue) -> String { TransportArguments.summary("stopping", result) }

  func rampWait(for result: JSONValue) -> RampWait? { transport.rampWait(for: result, waiting: waiting.wait) }

  var waitsForStreamsToEnd: Bool { waiting.wait }
}

struct PauseCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "pause",
    abstract: "Pause a stream (or every stream), after a fade.",
    discussion: """
      Examples:
        rampctl pause
        rampctl pause s1 --fade 1s --wait
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var transport: TransportArguments
  @OptionGroup var when: ScheduleOptions
  @OptionGroup var waiting: WaitFlag

  var atText: String? { when.at }

  func request() throws -> Request {
    try when.scheduled(
      Parse.checked(Request(.pause(try transport.transport())), options: TransportArguments.options),
      waiting: waiting.wait)
  }

  func summary(of result: JSONValue) -> String { TransportArguments.summary("pausing", result) }

  func rampWait(for result: JSONValue) -> RampWait? { transport.rampWait(for: result, waiting: waiting.wait) }
}

struct ResumeCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "resume",
    abstract: "Resume a paused stream (or every paused stream), fading back in.",
    discussion: """
      Examples:
        rampctl resume
        rampctl resume s1 --fade 2s --wait
      """)

  @OptionGroup var connection: ConnectionOptions
  @OptionGroup var transport: TransportArguments
  @OptionGroup var when: ScheduleOptions
  @OptionGroup var waiting: WaitFlag

  var atText: String? { when.at }

  func request() throws -> Request {
    try when.scheduled(
      Parse.checked(Request(.resume(try transport.transport())), options: TransportArguments.options),
      waiting: waiting.wait)
  }

  func summary(of result: JSONValue) -> String {
    TransportArguments.summary("resuming", result, idle: "nothing is paused")
  }

  func rampWait(for result: JSONValue) -> RampWait? { transport.rampWait(for: result, waiting: waiting.wait) }
}

struct SeekCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "seek",
    abstract: "Move a stream to a position, ramping out and back in.",
    discussion: """
      Examples:
        rampctl seek s1 1m30s
        rampctl seek alarm 0
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The stream.", valueName: "stream"), completion: Completions.streams)
  var stream: String

  @Argument(help: ArgumentHelp("Time from the start of the file: 1m30s, 90, 500ms.", valueName: "position"))
  var position: String

  @OptionGroup var when: ScheduleOptions

  var atText: String? { when.at }

  func request() throws -> Request {
    let seek = Seek(stream: stream, position: try Parse.duration(position, "<position>"))
    return try when.scheduled(
      Parse.checked(Request(.seek(seek)), options: ["stream": "<stream>", "position": "<position>"]), waiting: false)
  }

  func summary(of result: JSONValue) -> String {
    let position = result["position"]?.numberValue.map { HumanUnits.format(duration: $0) } ?? position
    return "\(result["stream"]?.stringValue ?? stream) at \(position)"
  }
}
