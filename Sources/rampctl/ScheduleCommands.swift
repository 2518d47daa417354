import ArgumentParser
import RampCLI
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct SchedulesCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "schedules",
    abstract: "List the saved schedules with the next time each takes effect.",
    discussion: """
      Every command given --at (and every alarm and sleep timer, which are scheduled commands) \
      is listed with its id, its next time in local time, how it repeats and its tag.

      Examples:
        rampctl schedules
        rampctl schedules --json | jq '.result.schedules[].due'
      """)

  @OptionGroup var connection: ConnectionOptions

  func request() throws -> Request { Request(.schedules) }

  func summary(of result: JSONValue) -> String {
    let entries = result["schedules"]?.arrayValue ?? []
    return entries.isEmpty ? "nothing is scheduled" : entries.map(ReplyText.schedule).joined(separator: "\n")
  }
}

struct UnscheduleCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "unschedule",
    abstract: "Remove a saved schedule (by id), or every one with a tag.",
    discussion: """
      A schedule due within a second is already queued for its sample and can no longer be \
      removed. A ramp already under way runs on (hold it with `rampctl cancel`).

      Examples:
        rampctl unschedule 3
        rampctl unschedule --tag alarm
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The schedule's id (see `rampctl schedules`).", valueName: "id"))
  var schedule: UInt64?

  @Option(help: ArgumentHelp("Every schedule with this tag instead (alarm, sleep).", valueName: "tag"))
  var tag: String?

  func request() throws -> Request {
    guard (schedule == nil) != (tag == nil) else { throw ValidationError("give a schedule id or --tag, not both") }
    return try Parse.checked(Request(.unschedule(schedule: schedule, tag: tag)), options: ["tag": "--tag"])
  }

  func summary(of result: JSONValue) -> String {
    let removed = result["unscheduled"]?.arrayValue ?? []
    let lines = removed.map {
      "unscheduled #\($0["schedule"].map(ReplyText.number) ?? "?") \($0["cmd"]?.stringValue ?? "?")"
    }
    return lines.isEmpty ? "nothing tagged \(tag ?? "?") is scheduled" : lines.joined(separator: "\n")
  }
}

struct AlarmCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "alarm",
    abstract: "Play a file at a time of day, fading in from silence to a capped level.",
    discussion: """
      A scheduled `play` (tagged alarm, listed by `rampctl schedules` and `status`): at TIME \
      (local time; the next to come) the file starts as stream --stream, looping, its gain \
      ramping from silence to --to over --fade-in, in dB by default (a perceptual ramp: equal \
      steps of loudness). --daily, --weekdays or --days make it repeat. Stop it ringing with \
      `rampctl stop alarm`; remove it with `rampctl unschedule --tag alarm`.

      Examples:
        rampctl alarm 07:00 wake.flac --weekdays --fade-in 10m --to -6dB
        rampctl alarm 06:30 birds.ogg --days sat,sun --fade-in 20m --to -12dB --space power
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The time of day: 07:00, 06:45:30 (local time).", valueName: "time"))
  var time: String

  @Argument(help: ArgumentHelp("The file to play.", valueName: "file"), completion: .file())
  var file: String

  @OptionGroup var repeating: DayOptions

  @Option(parsing: .unconditional, help: ArgumentHelp("Fade in over this long.", valueName: "duration"))
  var fadeIn: String = "1m"

  @Option(parsing: .unconditional, help: ArgumentHelp("The level it ends at: -6dB, 0.5.", valueName: "gain"))
  var to: String = "0dB"

  @Option(help: ArgumentHelp("Curve of the fade-in.", valueName: "curve"), completion: Completions.curves)
  var curve: String = "linear"

  @Option(
    help: ArgumentHelp("Value space of the fade-in: db, db(<floor>), power or amplitude.", valueName: "space"),
    completion: Completions.spaces)
  var space: String = "db"

  @Option(help: ArgumentHelp("The stream id.", valueName: "id"))
  var stream: String = "alarm"

  @Flag(inversion: .prefixedNo, help: "Loop the file until it is stopped.")
  var loop = true

  func request() throws -> Request {
    guard let seconds = Recurrence.clockSeconds(Arguments.restoringMinus(time)) else {
      throw ValidationError("<time>: expected a time of day HH:MM or HH:MM:SS, got '\(time)'")
    }
    let level: Double = try Parse.gain(to, "--to")
    let fadeSeconds: Double = try Parse.spokenDuration(fadeIn, "--fade-in")
    let play = Play(
      path: Parse.absolutePath(Arguments.restoringMinus(file)), stream: stream, gain: level,
      fadeIn: fadeSeconds, curve: try Parse.curve(curve), space: try Parse.space(space),
      loop: loop)
    var request = try Parse.checked(
      Request(.play(play)), options: ["stream": "--stream", "gain": "--to", "path": "<file>", "fadeIn": "--fade-in"])
    request.tag = "alarm"
    request.ack = .scheduled
    if let repeats = try repeating.recurrence(time: { seconds }) {
      request.repeats = repeats
    } else {
      request.at = try Parse.when(time, "<time>")
    }
    return request
  }

  func summary(of result: JSONValue) -> String { "" }

  var typed: [String: String] { ["gain": Arguments.restoringMinus(to)] }
}

struct SleepCommand: ParsableCommand, TalksToRampd {
  static let configuration = CommandConfiguration(
    commandName: "sleep",
    abstract: "Fade everything out over the last part of a time, then stop.",
    discussion: """
      Three scheduled commands, tagged sleep (see `rampctl schedules`): at TIME minus --fade, \
      master.gain fades to silence over --fade (in dB by default), ending at TIME; a quarter \
      second later (so the stop cannot cut the fade's tail) every stream stops; a second after \
      that master.gain is set back to the level it had, for the next play. Each yields \
      to master.gain: any newer command that changes master.gain (set, fade, fade-in, fade-out, \
      animate, cancel, remove) cancels the sleep timer, and a fade already under way is held \
      where it is, from where the newer command takes over. One timer at a time: a new sleep \
      replaces the old one, and `rampctl sleep --cancel` removes it; either way a fade that had \
      begun stops where it is and master.gain fades back to its level before the timer over 2 s. \
      TIME and --fade need their unit (30m, 90s). TIME must be more than 0s; --fade is 5m when not \
      given (the whole of a shorter TIME), and may not be longer than TIME.

      Examples:
        rampctl sleep 30m
        rampctl sleep 1h --fade 10m
        rampctl sleep --cancel
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("How long until everything stops: 30m, 1h, 90s.", valueName: "time"))
  var time: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Fade out over the last this long of it, at most the whole time (default 5m, or the whole of a shorter time).",
      valueName: "duration"))
  var fade: String?

  @Option(help: ArgumentHelp("Curve of the fade.", valueName: "curve"), completion: Completions.curves)
  var curve: String = "linear"

  @Option(
    help: ArgumentHelp("Value space of the fade: db, db(<floor>), power or amplitude.", valueName: "space"),
    completion: Completions.spaces)
  var space: String = "db"

  @Flag(help: "Cancel the sleep timer.")
  var cancel = false

  static let tag = "sleep"
  /// The fade's length when --fade is not given (the whole time when that is shorter).
  static let defaultFade = 300.0
  /// How long after the fade's end the streams stop: more than a sample-clock conversion may be
  /// off by, so the stop never cuts the end of the fade.
  static let stopAfterFade = 0.25

  mutating func validate() throws {
    if cancel {
      if time != nil { throw ValidationError("--cancel takes no time") }
      return
    }
    _ = try requests(level: 1)
  }

  /// What a sleep timer of `time` is, for a master.gain of `level` now.
  func requests(level: Double) throws -> [Request] {
    guard let time else { throw ValidationError("give how long until everything stops (30m), or --cancel") }
    let total = try Parse.spokenDuration(time, "<time>")
    guard total > 0 else { throw ValidationError("<time>: must be more than 0s, got '\(time)'") }
    let fadeSeconds: Double
    if let fade {
      fadeSeconds = try Parse.spokenDuration(fade, "--fade")
      guard fadeSeconds <= total else {
        throw ValidationError("--fade: '\(fade)' is longer than the time, '\(time)'; give at most \(time)")
      }
    } else {
      fadeSeconds = min(Self.defaultFade, total)
    }
    func sleeping(_ command: Command, at seconds: Double) -> Request {
      Request(at: .delay(seconds), ack: .scheduled, tag: Self.tag, yield: Fade.defaultKey, command)
    }
    let out = Fade(
      kind: .fade, key: Fade.defaultKey, to: 0, duration: fadeSeconds, curve: try Parse.curve(curve),
      space: try Parse.space(space))
    return try [
      sleeping(.fade(out), at: total - fadeSeconds),
      sleeping(.stop(Transport(stream: nil)), at: total + Self.stopAfterFade),
      sleeping(.set(SetValue(key: Fade.defaultKey, value: level, duration: 0)), at: total + Self.stopAfterFade + 1),
    ].map { try Parse.checked($0, options: ["duration": "--fade", "space": "--space", "curve": "--curve"]) }
  }

  func run() throws {
    do {
      let daemon = try ClientRun(options: connection).connect()
      // One timer at a time: the old one is taken back whole, its fade too if it had begun.
      let replaced = try daemon.call(Request(.unschedule(schedule: nil, tag: Self.tag))).result
      let removed = replaced["unscheduled"]?.arrayValue ?? []
      let level =
        try Self.levelBefore(removed) ?? daemon.call(Request(.get(key: Fade.defaultKey))).result["model"]?
        .numberValue ?? 1
      // The fade had begun (or even ended, its step gone, the set back not yet come): master.gain
      // is to come back to its level.
      let fadeWaits = removed.contains { $0["cmd"]?.stringValue == "fade" && $0["started"] == false }
      let fadeBegun = !fadeWaits && removed.contains { $0["cmd"]?.stringValue == "set" }
      if fadeBegun {
        let back = Fade(kind: .fade, key: Fade.defaultKey, to: level, duration: Self.fadeBack, space: .decibels)
        // Part of the timer, it yields to master.gain as the timer did: a newer command takes
        // over from where it is.
        _ = try daemon.call(Request(at: .delay(0), yield: Fade.defaultKey, .fade(back)))
      }
      if cancel {
        cancelled(replaced, removed: removed, fadeBegun: fadeBegun)
        return
      }
      var lines: [String] = []
      for request in try requests(level: level) {
        let reply = try daemon.call(request)
        lines.append(connection.json ? reply.text : scheduledLine(request, reply.result))
      }
      Output.print(lines.joined(separator: "\n"))
    } catch let failure as ClientFailure {
      throw ClientRun.exit(failure)
    }
  }

  /// How long master.gain takes to come back when a timer whose fade had begun is cancelled or
  /// replaced.
  static let fadeBack = 2.0

  /// The level master.gain had before the timer taken back: what its last step would have set.
  private static func levelBefore(_ removed: [JSONValue]) -> Double? {
    removed.lazy.filter { $0["cmd"]?.stringValue == "set" }.compactMap { $0["request"]?["value"]?.numberValue }.first
  }

  private func scheduledLine(_ request: Request, _ result: JSONValue) -> String {
    let due = result["due"]?.stringValue.flatMap(RFC3339.parse).map { HumanUnits.format(localTime: $0) } ?? "?"
    let what: String
    switch request.command {
    case .fade: what = "master.gain fades to silence"
    case .stop: what = "every stream stops"
    default: what = "master.gain is set back"
    }
    return "sleep (#\(result["scheduled"].map(ReplyText.number) ?? "?")): \(what) at \(due)"
  }

  private func cancelled(_ result: JSONValue, removed: [JSONValue], fadeBegun: Bool) {
    guard !removed.isEmpty else {
      Output.print(connection.json ? "{\"sleep\":null}" : "no sleep timer is set")
      return
    }
    Output.print(
      connection.json ? result.serialized() : "sleep timer cancelled" + (fadeBegun ? "; master.gain fades back" : ""))
  }
}
