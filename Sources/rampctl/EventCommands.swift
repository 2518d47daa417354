import ArgumentParser
import RampAudio
import RampCLI
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Reads lines until Ctrl-C (or `count` printed), printing the events `wanted` accepts.
/// Ctrl-C is how these commands are meant to end, so it exits 0.
private func printEvents(
  on connection: DaemonConnection, json: Bool, count: Int?, wanted: (ServerLine) -> Bool
) throws(ClientFailure) {
  var printed = 0
  do throws(ClientFailure) {
    while count.map({ printed < $0 }) ?? true {
      guard let received = try connection.nextLine(until: nil) else { continue }
      guard wanted(received.line) else { continue }
      switch received.line {
      case .event(let event) where !json: Output.print(ReplyText.event(event))
      default: Output.print(received.text)
      }
      printed += 1
    }
  } catch .interrupted {
    return
  }
}

struct WatchCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "watch",
    abstract: "Print rampd's events as they happen, one per line, until Ctrl-C.",
    discussion: """
      Event kinds: \(EventKind.allCases.map(\.helpEntry).joined(separator: ", ")).

      Examples:
        rampctl watch
        rampctl watch --events stream-started,stream-ended
        rampctl watch --json | jq -c 'select(.event == "animation-finished")'
        rampctl watch --events stream-ended --count 1     returns after the next stream ends
      """)

  @OptionGroup var connection: ConnectionOptions

  @Option(help: ArgumentHelp("Only these kinds, comma-separated (default: all).", valueName: "kinds"))
  var events: String?

  @Option(help: ArgumentHelp("Stop after this many events.", valueName: "n"))
  var count: Int?

  func kinds() throws -> [EventKind]? {
    guard let events else { return nil }
    return try events.split(separator: ",").map { name in
      guard let kind = EventKind(rawValue: name.trimmingWhitespace()) else {
        let names = EventKind.allCases.map(\.rawValue).joined(separator: ", ")
        throw ValidationError("--events: '\(name)' is not one of \(names)")
      }
      return kind
    }
  }

  func request() throws -> Request {
    if let count, count < 1 { throw ValidationError("--count: must be at least 1, got \(count)") }
    return Request(.subscribe(events: try kinds()))
  }

  func summary(of result: JSONValue) -> String { "" }

  func run() throws {
    do {
      let daemon = try ClientRun(options: connection).connect()
      Interruption.catchSignals()
      _ = try daemon.call(try request())
      try printEvents(on: daemon, json: connection.json, count: count) { line in
        switch line {
        case .event, .unknownEvent: return true
        default: return false
        }
      }
    } catch let failure as ClientFailure {
      throw ClientRun.exit(failure)
    }
  }
}

extension EventKind {
  /// The kind's name, with what it carries where the name alone does not say it. The list of
  /// kinds is the protocol's (`EventKind.allCases`); the switch makes a new kind say something.
  var helpEntry: String {
    let note: String? =
      switch self {
      case .animationFinished: "with whether it finished or was removed"
      case .streamEnded: "finished, stopped or failed"
      case .scheduleApplied: "a saved schedule took effect"
      case .scheduleFailed: "a saved schedule was refused when its time came, and why"
      case .eventsLost: "how many were dropped"
      case .duckStarted: "a duck rule began lowering its targets"
      case .duckEnded: "its targets are back"
      case .itemStarted: "an item of a stream's queue began"
      case .itemEnded: "finished, skipped, stopped or failed"
      case .underrun: "a stream's decoder fell behind"
      case .limiterEngaged: "the master limiter lowered the gain, after a second or more at rest"
      case .animationStarted, .streamStarted, .deviceFailed, .deviceRecovered, .configReloaded: nil
      }
    return note.map { "\(rawValue) (\($0))" } ?? rawValue
  }
}

struct ObserveCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "observe",
    abstract: "Print a key path's audible value as it changes, until Ctrl-C.",
    discussion: """
      rampd samples the value at --rate and sends it when it changed, with the sample it was \
      audible at (like mpv's observe_property). Signal levels are observed the same way: \
      streams.<id>.level.peak and master.level.peak (dBFS), streams.<id>.level.momentary and \
      master.level.momentary (LUFS), over the last 400 ms of what is heard; master.limiter is the \
      master limiter's gain reduction (dB).

      Examples:
        rampctl observe
        rampctl observe streams.s1.gain --rate 50
        rampctl observe master.gain --json --count 10
        rampctl observe master.level.momentary
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The key path (or a stream id).", valueName: "key"), completion: Completions.keyPaths)
  var key: String = Fade.defaultKey

  @Option(help: ArgumentHelp("Reports per second, up to rampd's limit.", valueName: "hz"))
  var rate: Double = 20

  @Option(help: ArgumentHelp("Stop after this many values.", valueName: "n"))
  var count: Int?

  func request() throws -> Request {
    if let count, count < 1 { throw ValidationError("--count: must be at least 1, got \(count)") }
    return try Parse.checked(
      Request(.observe(key: Parse.keyPath(key), rate: rate)), options: ["key": "<key>", "rate": "--rate"])
  }

  func summary(of result: JSONValue) -> String { "" }

  func run() throws {
    do {
      let daemon = try ClientRun(options: connection).connect()
      Interruption.catchSignals()
      let request = try request()
      // A key path that does not exist yet is not an error to `observe`, so check it first; a
      // level is no property, but the gain of what it measures says whether that is there.
      let keyPath = Parse.keyPath(key)
      if keyPath == PublishedValue.limiterKeyPath {
        // No property either: the limiter is there when status says so.
        let output = try daemon.call(Request(.status)).result["output"]
        guard output?["limiter"]?["ceiling"] != nil else {
          throw ClientFailure.refused(
            ProtocolError(.unknownKeyPath, field: "key", "master.limiter: the limiter is off ([output] limiter)"))
        }
      } else {
        _ = try daemon.call(Request(.get(key: LevelKey(keyPath)?.gainKeyPath ?? keyPath)))
      }
      _ = try daemon.call(request)
      try printEvents(on: daemon, json: connection.json, count: count) { line in
        if case .event(.value(let observed, _, _)) = line { return observed == Parse.keyPath(key) }
        return false
      }
    } catch let failure as ClientFailure {
      throw ClientRun.exit(failure)
    }
  }
}

struct WaitCommand: DaemonCommand {
  static let configuration = CommandConfiguration(
    commandName: "wait",
    abstract: "Wait until animations end.",
    discussion: """
      Give the animation ids from earlier replies (--animation, repeatable or comma-separated), \
      or --key to wait for whatever is animating that key path now. Animations that are \
      already over count as ended. Exit status 75 when --timeout passes or on Ctrl-C.

      Examples:
        rampctl wait --key master.gain
        rampctl wait --animation 12 --animation 13 --timeout 1m
        id=$(rampctl fade master.gain 0 --duration 5s --json | jq .result.animation)
        rampctl wait --animation "$id"
      """)

  @OptionGroup var connection: ConnectionOptions

  @Option(
    name: .customLong("animation"), help: ArgumentHelp("An animation id (repeatable, or 3,4,5).", valueName: "id"))
  var animations: [String] = []

  @Option(
    help: ArgumentHelp("Wait for every animation on this key path (or stream id).", valueName: "key"),
    completion: Completions.keyPaths)
  var key: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Give up after this long: 30s, 5m.", valueName: "duration"))
  var timeout: String?

  func ids() throws -> [UInt64]? {
    guard !animations.isEmpty else { return nil }
    return try animations.flatMap { $0.split(separator: ",") }.map { text in
      guard let id = UInt64(text.trimmingWhitespace()) else {
        throw ValidationError("--animation: '\(text)' is not an animation id (a whole number)")
      }
      return id
    }
  }

  func request() throws -> Request {
    let ids = try ids()
    guard (ids == nil) != (key == nil) else {
      throw ValidationError("give --animation ids or --key, not both nor neither")
    }
    let wait = Wait(animations: ids, key: key.map(Parse.keyPath), timeout: try Parse.duration(timeout, "--timeout"))
    return try Parse.checked(
      Request(.wait(wait)), options: ["key": "--key", "animations": "--animation", "timeout": "--timeout"])
  }

  func summary(of result: JSONValue) -> String { "" }

  func run() throws {
    do {
      guard case .wait(let wait) = try request().command else { return }
      let daemon = try ClientRun(options: connection).connect()
      let ramp = RampWait(
        animations: wait.animations ?? [], key: wait.key, timeout: wait.timeout, observe: wait.key, duration: nil)
      try RampWaiter(connection: daemon, json: connection.json).wait(for: ramp)
    } catch let failure as ClientFailure {
      throw ClientRun.exit(failure)
    }
  }
}
