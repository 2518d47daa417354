import ArgumentParser
import FoundationEssentials
import RampCLI
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Not a `DaemonCommand`: it sends many requests, read from a file when it runs.
struct BatchCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "batch",
    abstract: "Run a timeline script against rampd: one request per line, each at its time.",
    discussion: """
      Each line is a request object as in PROTOCOL.md, with an optional "at": seconds from the \
      start of the script (2.5, "1m30s" or "+10s"), or any time --at takes ("23:00", the next \
      23:00; "2026-11-21T07:30:00Z"; "2026-11-21 07:30" in local time). Gains may be written \
      "-6dB" or "50%" and durations "2s", as in `rampctl render --script`. A relative file \
      path ("path", "queue", "paths") is taken from the script's directory (standard input: \
      the current directory). Blank lines and lines starting with # are skipped.

      The whole script is checked before anything is sent; bad lines are reported as \
      file:line and nothing runs (exit 65). Then rampctl sends each line shortly before its \
      time, scheduled for the exact moment (rampd applies it at that sample), and prints each \
      reply. Lines sharing an "at" go as one protocol batch: they take effect on the same \
      sample, or none does (batch, wait and the other commands a batch cannot hold go alone). \
      The first line rampd refuses stops the run: it is reported as file:line with rampd's \
      error, the lines after it already sent are taken back (unschedule, by a tag of the run's \
      own) and the rest are not sent, and rampctl exits 65.

      --atomic sends the lines as one protocol batch instead: all applied at the same sample, \
      or none if one is refused (the lines may not have "at").

      --json prints one object per line rampd answered, for programs (the Python client's \
      run_timeline reads it): {"line":"show.jsonl:3","cmd":"fade","ok":true,"result":R} with \
      rampd's result R, or "ok":false with rampd's "error" (for a line sent in a batch with others, its field \
      named within the line: "to", not "commands[1].to"). Lines not applied print nothing.

      Example script (ducks.jsonl):
        {"cmd": "play", "path": "/srv/show.wav", "stream": "show"}
        {"at": 5, "cmd": "fade", "key": "streams.show.gain", "to": "-12dB", "duration": "2s"}
        {"at": 20, "cmd": "fade-out", "key": "streams.show.gain", "duration": "3s", "then": "stop"}

      Examples:
        rampctl batch ducks.jsonl
        printf '%s\\n' '{"cmd":"set","key":"master.gain","value":0.5}' | rampctl batch -
        rampctl batch crossfade.jsonl --atomic
      """)

  @OptionGroup var connection: ConnectionOptions

  @Argument(help: ArgumentHelp("The script, or - for standard input.", valueName: "file"))
  var file: String

  @Flag(help: "Send every line as one batch: applied on one sample, all or nothing.")
  var atomic = false

  /// Lines are sent this long before they are due, so they arrive in time; scheduling them
  /// for their exact moment keeps them on time regardless.
  static let lead = 1.0

  func entries() throws -> [Timeline.Entry] {
    let entries = try Timeline.load(file)
    if atomic, let scheduled = entries.first(where: { $0.at != nil }) {
      throw Timeline.Failure(messages: [
        scheduled.error("--atomic applies every line at once; remove \"at\"").description
      ])
    }
    return entries
  }

  func run() throws {
    do {
      let entries = try entries()
      guard !entries.isEmpty else { return }
      let daemon = try ClientRun(options: connection).connect()
      // With --json a refusal is printed as the line's outcome (`printRefusal`), not as sent.
      daemon.onRefusal = { _ in }
      Interruption.catchSignals()
      let refused = atomic ? try runAtomically(entries, on: daemon) > 0 : try runTimeline(entries, on: daemon)
      if refused { throw ExitCode(ClientFailure.ExitStatus.refused) }
    } catch let failure as Timeline.Failure {
      for message in failure.messages { Output.error(message) }
      throw ExitCode(ClientFailure.ExitStatus.refused)
    } catch let failure as ClientFailure {
      if failure == .interrupted { Output.error("interrupted; lines already sent stay scheduled in rampd") }
      throw ClientRun.exit(failure)
    }
  }

  /// Sends the lines in time order, each `lead` seconds before it is due, for its exact time,
  /// without waiting for the replies of those before (a line with a time is answered only when it
  /// applies), so each lands on its sample however close it follows another. Lines sharing a time
  /// go as one protocol batch (applied on one sample, or none; a line a batch cannot hold goes
  /// alone). A line without a time applies at once: it is sent once everything before it is
  /// answered. Each group sent with a time carries a tag of its own: at the first line refused,
  /// the groups after it already sent are taken back with `unschedule` (rampd withdraws them even
  /// when they wait on the render thread for their sample), nothing after it is sent, and those
  /// before it still apply (their replies are awaited). Returns whether a line was refused.
  private func runTimeline(_ entries: [Timeline.Entry], on daemon: DaemonConnection) throws(ClientFailure)
    -> Bool
  {
    let start = Date()
    let tag = "rampctl-batch-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    let groups = Self.groups(entries, start: start)
    var next = 0
    // Sent and not yet answered, by the id's JSON text (ids are numbers rampctl chose): the
    // group's index, and its tag when it has a time.
    var waiting: [String: Sent] = [:]
    // The first group refused (in the timeline's order), with rampd's error.
    var refused: Refused?
    // The `unschedule` requests that take back what was sent after a refused line, unanswered.
    var withdrawing: Set<String> = []
    while (refused == nil && next < groups.count) || !withdrawing.isEmpty
      || waiting.values.contains(where: { $0.index < refused?.index ?? .max })
    {
      let sendAt =
        refused == nil && next < groups.count
        ? start.addingTimeInterval(Self.due(groups[next][0], start: start) - Self.lead) : nil
      if let sendAt, Date() >= sendAt {
        let group = groups[next]
        var request = group.count == 1 ? group[0].request : Request(.batch(group.map(\.request)))
        switch group[0].at {
        case .delay(let seconds)? where seconds > 0: request.at = .date(start.timeIntervalSince1970 + seconds)
        case .date?: request.at = group[0].at
        default: request.at = nil
        }
        if request.at == nil, !waiting.isEmpty {
          // At once, after what is before it: wait for those replies first.
          if let received = try daemon.nextLine(until: nil) {
            try answer(received, &waiting, &refused, &withdrawing, groups: groups, daemon: daemon)
          }
          continue
        }
        if request.at != nil { request.tag = "\(tag)-\(next)" }
        waiting[try daemon.send(request).serialized()] = Sent(index: next, tag: request.tag)
        next += 1
        continue
      }
      guard let received = try daemon.nextLine(until: sendAt) else { continue }
      try answer(received, &waiting, &refused, &withdrawing, groups: groups, daemon: daemon)
    }
    guard let refused else { return false }
    let group = groups[refused.index]
    let line = group.count == 1 ? group[0] : Self.line(refusedBy: refused.error, in: group) ?? group[0]
    Output.error("\(line.label): \(ClientFailure.describe(refused.error))")
    let others = group.filter { $0.line != line.line }.map(\.label)
    let together =
      others.isEmpty ? "" : " (sent as one batch with \(others.joined(separator: ", ")), which share its time)"
    Output.error("batch stopped at \(line.label)\(together): the lines after it were not applied")
    return true
  }

  /// A group of lines sent: its index among the groups, and its tag when it has a time.
  private struct Sent {
    var index: Int
    var tag: String?
  }

  /// The group a run stops at, and rampd's error.
  private struct Refused {
    var index: Int
    var error: ProtocolError
  }

  /// A line read while running a timeline: a reply to a group sent is printed and the group is
  /// no longer waited for. A refusal of a group earlier than any refused before becomes the one
  /// the run stops at: the groups after it that were sent and wait for their time are taken back.
  private func answer(
    _ received: ReceivedLine, _ waiting: inout [String: Sent], _ refused: inout Refused?,
    _ withdrawing: inout Set<String>, groups: [[Timeline.Entry]], daemon: DaemonConnection
  ) throws(ClientFailure) {
    guard case .reply(let id?, let result) = received.line else { return }
    // Taken back or not (it may have applied already), the group's own reply says what happened.
    if withdrawing.remove(id.serialized()) != nil { return }
    guard let sent = waiting.removeValue(forKey: id.serialized()) else { return }
    let group = groups[sent.index]
    switch result {
    case .success(let value):
      if group.count == 1 {
        printResult(value, of: group[0])
      } else {
        printBatch((received.text, value), group)
      }
    case .failure(let error):
      // A group after the one the run stops at (refused as it is taken back): no outcome of its own.
      if let first = refused, first.index < sent.index { return }
      _ = daemon.refusal(error, line: received.text)
      printRefusal(error, text: received.text, of: group)
      refused = Refused(index: sent.index, error: error)
      // Sent, not awaited: a reply of an earlier group may come first.
      for (key, later) in waiting where later.index > sent.index {
        if let tag = later.tag {
          withdrawing.insert(try daemon.send(Request(.unschedule(schedule: nil, tag: tag))).serialized())
        }
        waiting[key] = nil
      }
    }
  }

  /// Seconds after `start` at which `entry` is due: its delay, or its date's distance from
  /// `start` (without "at": 0).
  static func due(_ entry: Timeline.Entry, start: Date) -> Double {
    if case .date(let time)? = entry.at { return time - start.timeIntervalSince1970 }
    return entry.offset
  }

  /// The lines in the order they are due (file order among lines due together), cut into what is
  /// sent at once: the lines sharing a time (as many as a batch holds); a line a batch
  /// cannot hold (`Command.notInBatch`) alone.
  static func groups(_ entries: [Timeline.Entry], start: Date) -> [[Timeline.Entry]] {
    let ordered = entries.enumerated().sorted {
      (due($0.element, start: start), $0.offset) < (due($1.element, start: start), $1.offset)
    }.map(\.element)
    var groups: [[Timeline.Entry]] = []
    var batchable = false
    for entry in ordered {
      let fits = !Command.notInBatch.contains(entry.request.command.name)
      if let last = groups.last?.last, due(last, start: start) == due(entry, start: start), batchable, fits,
        groups[groups.count - 1].count < ProtocolLimits.batchCount
      {
        groups[groups.count - 1].append(entry)
      } else {
        groups.append([entry])
        batchable = fits
      }
    }
    return groups
  }

  /// One protocol `batch` of every line; a refusal names the line through `commands[i]`.
  private func runAtomically(_ entries: [Timeline.Entry], on daemon: DaemonConnection) throws(ClientFailure)
    -> Int
  {
    let refusal = RefusalLine()
    daemon.onRefusal = { refusal.text = $0 }
    let id = try daemon.send(Request(.batch(entries.map(\.request))))
    do {
      printBatch(try daemon.reply(to: id, deadline: Date().addingTimeInterval(ClientRun.replyTimeout)), entries)
      return 0
    } catch .refused(let error) {
      printRefusal(error, text: refusal.text, of: entries)
      let label = Self.line(refusedBy: error, in: entries)?.label ?? "batch"
      Output.error("\(label): \(ClientFailure.describe(error)); nothing was applied")
      return 1
    }
  }

  /// A protocol batch's reply: each line's result.
  private func printBatch(_ reply: (text: String, result: JSONValue), _ entries: [Timeline.Entry]) {
    for (entry, result) in zip(entries, reply.result["results"]?.arrayValue ?? []) {
      printResult(result, of: entry)
    }
  }

  /// One line's result: after its label, or with --json as an object naming the line.
  private func printResult(_ result: JSONValue, of entry: Timeline.Entry) {
    guard connection.json else {
      Output.print("\(entry.label): \(entry.request.command.name): \(result.serialized())")
      return
    }
    let outcome: JSONValue = [
      "line": .string(entry.label), "cmd": .string(entry.request.command.name), "ok": true, "result": result,
    ]
    Output.print(outcome.serialized())
  }

  /// With --json, the refused line of `group` (sent together) as an object with rampd's error,
  /// its field named within the line. Without, nothing: the refusal goes to standard error.
  private func printRefusal(_ error: ProtocolError, text: String?, of group: [Timeline.Entry]) {
    guard connection.json else { return }
    let line = group.count == 1 ? group[0] : Self.line(refusedBy: error, in: group) ?? group[0]
    var object: JSONObject = [:]
    if let text, case .object(let sent)? = try? JSON.parse(text), case .object(let e)? = sent["error"] {
      object = e
    } else {
      object = ["code": .string(error.code.rawValue), "message": .string(error.message)]
      if let field = error.field { object["field"] = .string(field) }
    }
    if group.count > 1, case .string(let field)? = object["field"], field.hasPrefix("commands["),
      let close = field.firstIndex(of: "]")
    {
      let inner = field[field.index(after: close)...].drop { $0 == "." }
      object["field"] = inner.isEmpty ? nil : .string(String(inner))
    }
    let outcome: JSONValue = [
      "line": .string(line.label), "cmd": .string(line.request.command.name), "ok": false, "error": .object(object),
    ]
    Output.print(outcome.serialized())
  }

  /// The line of a protocol batch of `entries` that a refusal names (its field: `commands[i]…`).
  static func line(refusedBy error: ProtocolError, in entries: [Timeline.Entry]) -> Timeline.Entry? {
    guard let field = error.field, field.hasPrefix("commands["),
      let index = Int(field.dropFirst("commands[".count).prefix { $0.isNumber }), entries.indices.contains(index)
    else { return nil }
    return entries[index]
  }
}

/// The refusal line rampd sent, as `DaemonConnection.onRefusal` sees it.
private final class RefusalLine {
  var text: String?
}
