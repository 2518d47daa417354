import ArgumentParser
import Foundation
import RampCLI
import RampProtocol

/// Not a `DaemonCommand`: it sends many requests, read from a file when it runs.
struct BatchCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "batch",
    abstract: "Run a timeline script against rampd: one request per line, each at its time.",
    discussion: """
      Each line is a request object as in PROTOCOL.md, with an optional "at": seconds from the \
      start of the script (2.5, "1m30s" or "+10s"), or any time --at takes ("23:00", the next \
      23:00; "2026-11-21T07:30:00Z"; "2026-11-21 07:30" in local time). Gains may be written \
      "-6dB" or "50%" and durations "2s", as in `rampctl render --script`. Blank lines and \
      lines starting with # are skipped.

      The whole script is checked before anything is sent; bad lines are reported as \
      file:line and nothing runs (exit 65). Then rampctl sends each line shortly before its \
      time, scheduled for the exact moment (rampd applies it at that sample), and prints each \
      reply as it arrives; a line rampd refuses is reported as file:line and the rest go on \
      (exit 65 at the end). Lines sharing an "at" take effect on the same sample.

      --atomic sends the lines as one protocol batch instead: all applied at the same sample, \
      or none if one is refused (the lines may not have "at").

      Example script (ducks.jsonl):
        {"cmd": "play", "path": "/srv/show.wav", "stream": "show"}
        {"at": 5, "cmd": "fade", "key": "streams.show.gain", "to": "-12dB", "duration": "2s"}
        {"at": 20, "cmd": "fade-out", "duration": "3s", "then": "stop"}

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
      Interruption.catchSignals()
      let refused = atomic ? try runAtomically(entries, on: daemon) : try runTimeline(entries, on: daemon)
      if refused > 0 { throw ExitCode(ClientFailure.ExitStatus.refused) }
    } catch let failure as Timeline.Failure {
      for message in failure.messages { Output.error(message) }
      throw ExitCode(ClientFailure.ExitStatus.refused)
    } catch let failure as ClientFailure {
      if failure == .interrupted { Output.error("interrupted; lines already sent stay scheduled in rampd") }
      throw ClientRun.exit(failure)
    }
  }

  /// Sends each line `lead` seconds before it is due, for its exact time, and collects replies.
  /// Returns how many lines rampd refused.
  private func runTimeline(_ entries: [Timeline.Entry], on daemon: DaemonConnection) throws(ClientFailure)
    -> Int
  {
    let start = Date()
    let queue = entries.enumerated().sorted { ($0.element.offset, $0.offset) < ($1.element.offset, $1.offset) }
      .map(\.element)
    var next = 0
    // By the id's JSON text: ids are numbers rampctl chose.
    var waiting: [String: Timeline.Entry] = [:]
    var refused = 0
    while next < queue.count || !waiting.isEmpty {
      let now = Date().timeIntervalSince(start)
      while next < queue.count, queue[next].offset <= now + Self.lead {
        let entry = queue[next]
        var request = entry.request
        switch entry.at {
        case .delay(let seconds)? where seconds > 0:
          request.at = .date(start.timeIntervalSince1970 + seconds)
        case .date?: request.at = entry.at
        default: request.at = nil
        }
        waiting[try daemon.send(request).serialized()] = entry
        next += 1
      }
      let dueNext = next < queue.count ? start.addingTimeInterval(queue[next].offset - Self.lead) : nil
      guard let received = try daemon.nextLine(until: dueNext) else { continue }
      guard case .reply(let id?, let result) = received.line, let entry = waiting.removeValue(forKey: id.serialized())
      else {
        continue
      }
      refused += report(entry, result, text: received.text)
    }
    return refused
  }

  /// One protocol `batch` of every line; a refusal names the line through `commands[i]`.
  private func runAtomically(_ entries: [Timeline.Entry], on daemon: DaemonConnection) throws(ClientFailure)
    -> Int
  {
    let id = try daemon.send(Request(.batch(entries.map(\.request))))
    do {
      let reply = try daemon.reply(to: id, deadline: Date().addingTimeInterval(ClientRun.replyTimeout))
      if connection.json {
        Output.print(reply.text)
      } else {
        for (entry, result) in zip(entries, reply.result["results"]?.arrayValue ?? []) {
          Output.print("\(entry.label): \(entry.request.command.name): \(result.serialized())")
        }
      }
      return 0
    } catch .refused(let error) {
      var label = "batch"
      if let field = error.field, field.hasPrefix("commands["),
        let index = Int(field.dropFirst("commands[".count).prefix { $0.isNumber }), entries.indices.contains(index)
      {
        label = entries[index].label
      }
      Output.error("\(label): \(ClientFailure.describe(error)); nothing was applied")
      return 1
    }
  }

  /// Prints one line's reply; 1 when it was refused.
  private func report(_ entry: Timeline.Entry, _ result: Result<JSONValue, ProtocolError>, text: String) -> Int {
    switch result {
    case .success(let value):
      Output.print(connection.json ? text : "\(entry.label): \(entry.request.command.name): \(value.serialized())")
      return 0
    case .failure(let error):
      if connection.json { Output.print(text) }
      Output.error("\(entry.label): \(ClientFailure.describe(error))")
      return 1
    }
  }
}
