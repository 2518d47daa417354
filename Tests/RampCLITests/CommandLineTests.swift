import Foundation
import RampCLI
import RampDaemon
import RampProtocol
import Testing

@testable import RampCtlCommands

/// The command line before ArgumentParser: global options in front of the subcommand, `rampctl`
/// alone, unknown subcommands; then times (`--at` and a timeline's `"at"`), and refusals retold
/// with what the user typed.
@Suite struct CommandLineTests {
  // MARK: Routing

  @Test func globalOptionsMayComeBeforeTheSubcommand() {
    #expect(CommandLineRoute.route(["--socket", "/s", "status"]) == .run(["status", "--socket", "/s"]))
    #expect(
      CommandLineRoute.route(["--socket=/s", "--json", "get", "k"]) == .run(["get", "--socket=/s", "--json", "k"]))
    #expect(
      CommandLineRoute.route(["--json", "set", "master.gain", "-6dB"])
        == .run(["set", "--json", "master.gain", "-6dB"]))
    // After the subcommand they were always accepted; nothing moves.
    #expect(CommandLineRoute.route(["status", "--json"]) == .run(["status", "--json"]))
    #expect(CommandLineRoute.route(["--socket"]) == .refuse("missing value for '--socket <path>'"))
  }

  @Test func globalOptionsParseWhereverTheyStand() throws {
    for words in [["--socket", "/s", "--json", "status"], ["status", "--socket", "/s", "--json"]] {
      guard case .run(let routed) = CommandLineRoute.route(words) else {
        Issue.record("refused \(words)")
        continue
      }
      let status = try #require(try RampCtl.parseAsRoot(Arguments.prepared(routed)) as? StatusCommand)
      #expect(status.connection.socket == "/s" && status.connection.json, "\(words)")
      #expect(!status.hint)
    }
  }

  @Test func globalOptionsOnACommandThatDoesNotTalkToRampd() {
    guard case .refuse(let message) = CommandLineRoute.route(["--json", "tone", "/tmp/a.wav"]) else {
      Issue.record("accepted")
      return
    }
    #expect(message == "--json: 'tone' does not talk to rampd, so it takes no --json")
  }

  /// `loudness` does not talk to rampd but prints JSON: `--json` may come before it, `--socket` may not.
  @Test func loudnessTakesTheGlobalJSONOnly() throws {
    #expect(CommandLineRoute.route(["--json", "loudness", "a.wav"]) == .run(["loudness", "--json", "a.wav"]))
    let command = try #require(try RampCtl.parseAsRoot(["loudness", "--json", "a.wav"]) as? LoudnessCommand)
    #expect(command.json && command.files == ["a.wav"])
    #expect(
      CommandLineRoute.route(["--socket", "/s", "loudness", "a.wav"])
        == .refuse("--socket: 'loudness' does not talk to rampd, so it takes no --socket"))
    #expect(
      CommandLineRoute.route(["--json", "--socket=/s", "loudness", "a.wav"])
        == .refuse("--socket: 'loudness' does not talk to rampd, so it takes no --socket"))
    #expect(throws: (any Error).self) { try RampCtl.parseAsRoot(["loudness", "--socket", "/s", "a.wav"]) }
  }

  @Test func aloneItIsStatusWithAHint() throws {
    #expect(CommandLineRoute.route([]) == .run(["status", StatusCommand.hintFlag]))
    #expect(CommandLineRoute.route(["--json"]) == .run(["status", "--json", StatusCommand.hintFlag]))
    let status = try #require(try RampCtl.parseAsRoot(["status", StatusCommand.hintFlag]) as? StatusCommand)
    #expect(status.hint)
    #expect(status.summary(of: ["version": "1"]).hasSuffix("\n" + StatusCommand.hintText))
    // Help and version are ArgumentParser's, untouched.
    #expect(CommandLineRoute.route(["--help"]) == .run(["--help"]))
    #expect(CommandLineRoute.route(["--version"]) == .run(["--version"]))
    #expect(CommandLineRoute.route(["help", "fade"]) == .run(["help", "fade"]))
  }

  @Test func unknownSubcommandsGetASuggestion() {
    #expect(
      CommandLineRoute.route(["fadeout", "--duration", "3s"])
        == .refuse("unknown command 'fadeout' (did you mean fade-out?); `rampctl --help` lists the commands"))
    #expect(
      CommandLineRoute.route(["--json", "stauts"])
        == .refuse("unknown command 'stauts' (did you mean status?); `rampctl --help` lists the commands"))
    #expect(
      CommandLineRoute.route(["frobnicate"])
        == .refuse("unknown command 'frobnicate'; `rampctl --help` lists the commands"))
  }

  /// A flag the command does not take is refused before ArgumentParser sees it, pointing at what
  /// was meant: an argument written as a flag (`fade --to`: the target is `<to>`), else the
  /// nearest option, else nothing; a value that starts with `--`, and what follows `--`, are not
  /// flags.
  @Test func unknownOptionsPointAtWhatWasMeant() {
    #expect(
      CommandLineRoute.route(["fade", "master.gain", "--to", "0.5"])
        == .refuse(
          "'--to' is not an option of fade: <to> is an argument, given without a flag: "
            + "rampctl fade [<options>] <key> <to>"))
    #expect(
      CommandLineRoute.route(["--json", "set", "master.gain", "1", "--durration", "1s"])
        == .refuse(
          "'--durration' is not an option of set (did you mean --duration?); `rampctl set --help` lists its options"))
    #expect(
      CommandLineRoute.route(["queue", "add", "radio", "a.wav", "--ta", "23:00"])
        == .refuse(
          "'--ta' is not an option of queue add (did you mean --at?); `rampctl queue add --help` lists its options"))
    #expect(
      CommandLineRoute.route(["fade", "s1", "0", "--zzz"])
        == .refuse("'--zzz' is not an option of fade; `rampctl fade --help` lists its options"))
    // Real options, their values and what follows `--` pass through.
    #expect(
      CommandLineRoute.route(["fade-in", "s1", "--to", "-6dB", "--duration=2s"])
        == .run(["fade-in", "s1", "--to", "-6dB", "--duration=2s"]))
    #expect(
      CommandLineRoute.route(["play", "--stream", "--odd", "a.wav"]) == .run(["play", "--stream", "--odd", "a.wav"]))
    #expect(CommandLineRoute.route(["play", "--", "--file.wav"]) == .run(["play", "--", "--file.wav"]))
    #expect(CommandLineRoute.route(["fade", "--help"]) == .run(["fade", "--help"]))
  }

  /// `rampctl watch --help` lists every kind of event the protocol has, in its order, each once.
  @Test func watchHelpListsEveryEventKind() throws {
    let discussion = WatchCommand.configuration.discussion
    let start = try #require(discussion.range(of: "Event kinds: "))
    let paragraph = discussion[start.upperBound...].prefix { $0 != "\n" }.dropLast()  // the final "."
    // The names: the paragraph without its parentheses, split at its commas.
    var depth = 0
    let bare = paragraph.filter { character in
      if character == "(" { depth += 1 }
      defer { if character == ")" { depth -= 1 } }
      return depth == 0 && character != ")"
    }
    let listed = bare.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    #expect(listed == EventKind.allCases.map(\.rawValue))
    let help = Self.collapsed(WatchCommand.helpMessage(columns: 1000))
    for kind in EventKind.allCases { #expect(help.contains(kind.helpEntry), "\(kind)") }
  }

  static func collapsed(_ text: String) -> String { text.split(whereSeparator: \.isWhitespace).joined(separator: " ") }

  // MARK: Times

  /// 2026-11-25 10:00:00 in the local time zone.
  static let morning: Date = {
    var parts = DateComponents()
    (parts.year, parts.month, parts.day, parts.hour) = (2026, 11, 25, 10)
    return Calendar.current.date(from: parts)!
  }()

  @Test func timesOfDayDatesAndDelays() throws {
    let now = Self.morning
    let base = now.timeIntervalSince1970
    #expect(try HumanUnits.when("23:00", option: "--at", now: now) == .date(base + 13 * 3600))
    #expect(try HumanUnits.when("07:30:15", option: "--at", now: now) == .date(base + 21.5 * 3600 + 15))
    #expect(try HumanUnits.when("10:00", option: "--at", now: now) == .date(base + 86_400), "now is not to come")
    #expect(try HumanUnits.when("+10s", option: "--at", now: now) == .delay(10))
    #expect(try HumanUnits.when("10s", option: "--at", now: now) == .delay(10))
    #expect(try HumanUnits.when("1m30s", option: "--at", now: now) == .delay(90))
    #expect(try HumanUnits.when("90", option: "--at", now: now) == .delay(90))
    #expect(
      try HumanUnits.when("2026-11-21T07:30:00Z", option: "--at", now: now)
        == .date(RFC3339.parse("2026-11-21T07:30:00Z")!))
    #expect(try HumanUnits.when("2026-11-25 12:00", option: "--at", now: now) == .date(base + 2 * 3600))
    #expect(try HumanUnits.when("2026-11-25T12:00:01.5", option: "--at", now: now) == .date(base + 7201.5))
    for bad in ["25:00", "12:5", "2026-13-01T00:00:00Z", "-10s", "soon", ""] {
      do {
        _ = try HumanUnits.when(bad, option: "--at", now: now)
        Issue.record("accepted '\(bad)'")
      } catch {
        #expect(error.description.hasPrefix("--at: "), "\(error)")
        #expect(error.description.contains("a time of day (23:00"), "\(error)")
      }
    }
  }

  @Test func localTimeToTheMillisecond() throws {
    let paris = try #require(TimeZone(identifier: "Europe/Paris"))
    let due = try #require(RFC3339.parse("2026-11-25T11:30:02.5993633270263672Z"))
    let inParis = { paris.secondsFromGMT(for: Date(timeIntervalSince1970: $0)) }
    #expect(HumanUnits.format(localTime: due, offset: inParis) == "2026-11-25 12:30:02.599 +01:00")
    #expect(HumanUnits.format(localTime: 0.9996, offset: { _ in 0 }) == "1970-01-01 00:00:01.000 +00:00")
    // Half-hour zones, west of UTC, and summer time.
    let newfoundland = try #require(TimeZone(identifier: "America/St_Johns"))
    #expect(
      HumanUnits.format(localTime: due, offset: { newfoundland.secondsFromGMT(for: Date(timeIntervalSince1970: $0)) })
        == "2026-11-25 08:00:02.599 -03:30")
    let summer = try #require(RFC3339.parse("2026-07-01T22:15:00Z"))
    #expect(HumanUnits.format(localTime: summer, offset: inParis) == "2026-07-02 00:15:00.000 +02:00")
  }

  @Test func aDateAlreadyPastIsNotScheduled() throws {
    let past = try #require(RampCtl.parseAsRoot(["fade-out", "--at", "2020-01-01T00:00:00Z"]) as? FadeOutCommand)
    #expect(try past.request().at == nil, "applied at once")
    #expect(past.atText == "2020-01-01T00:00:00Z")
    let later = try #require(RampCtl.parseAsRoot(["fade-out", "--at", "+1h"]) as? FadeOutCommand)
    #expect(try later.request().at == .delay(3600) && later.request().ack == .scheduled)
    // With --wait rampd answers when it takes effect, so the ramp can be waited for.
    let waited = try #require(RampCtl.parseAsRoot(["fade-out", "--at", "+1h", "--wait"]) as? FadeOutCommand)
    #expect(try waited.request().at == .delay(3600) && waited.request().ack == .applied)
  }

  @Test func timelinesReadAtAsTheCommandLineDoes() throws {
    let script = Timeline.parse(
      """
      {"at": "+10s", "cmd": "stop"}
      {"at": "23:00", "cmd": "stop"}
      {"at": "2026-11-21 07:30", "cmd": "stop"}
      {"at": 12, "cmd": "stop"}
      {"at": "25:00", "cmd": "stop"}
      """, file: "t.jsonl")
    #expect(script.entries.map(\.at?.isDelay) == [true, false, false, true])
    #expect(script.entries[0].offset == 10 && script.entries[3].offset == 12)
    #expect(script.errors.map(\.description).first?.hasPrefix("t.jsonl:5: at: '25:00'") == true, "\(script.errors)")
    // An offline render counts from its start: a clock time means nothing there.
    let render = Timeline.parse(
      """
      {"at": "+1m30s", "cmd": "fade", "to": 0}
      {"at": "23:00", "cmd": "fade", "to": 0}
      """, file: "r")
    #expect(render.entries[0].offset == 90)
    try OfflineShow.check([render.entries[0]])
    do {
      try OfflineShow.check(render.entries)
      Issue.record("a clock time was accepted")
    } catch {
      #expect(
        error.messages == [
          #"r:2: at: a clock time means nothing in a render, which counts seconds from its start (12, "12s", "+1m30s")"#
        ])
    }
  }

  // MARK: Refusals

  @Test func gainRefusalsEchoWhatWasTyped() {
    let above = ProtocolError(
      outOfRange: .gainMaximum, value: 50, field: "value",
      detail: "is above the maximum gain 1 (0 dB; raise gain.max to allow more)")
    #expect(above.message == "50 is above the maximum gain 1 (0 dB; raise gain.max to allow more)")
    #expect(
      RefusalText.explained(above, typed: ["value": "50"]).message
        == "50 is above the maximum gain 1 (0 dB; raise gain.max to allow more); did you mean 50%?")
    let two = ProtocolError(
      outOfRange: .gainMaximum, value: 2, field: "value", detail: "is above the maximum gain 1 (0 dB)")
    #expect(RefusalText.explained(two, typed: ["value": "2"]).message == "2 is above the maximum gain 1 (0 dB)")
    let decibels = ProtocolError(
      outOfRange: .gainMaximum, value: 1.4125375446227544, field: "to",
      detail: "is above the maximum gain 1 (0 dB; raise gain.max to allow more)")
    let told = RefusalText.explained(decibels, typed: ["to": "+3dB"]).message
    #expect(told == "+3dB (1.412538) is above the maximum gain 1 (0 dB; raise gain.max to allow more)", "\(told)")
    let other = ProtocolError(.unknownKeyPath, field: "key", "no property 'x'")
    #expect(RefusalText.explained(other, typed: ["key": "x"]) == other)
  }

  /// The hint follows the refusal's typed bound, not its words: a pan of 50 is no percentage,
  /// whatever its message says, and a gain maximum worded otherwise still gets the hint.
  @Test func gainRefusalsRouteOnTheirBound() {
    let pan = ProtocolError(
      outOfRange: .propertyRange, value: 50, field: "value", detail: "is above the maximum gain of nothing")
    #expect(!RefusalText.explained(pan, typed: ["value": "50"]).message.contains("did you mean"))
    let reworded = ProtocolError(outOfRange: .gainMaximum, value: 50, field: "value", detail: "exceeds gain.max")
    #expect(RefusalText.explained(reworded, typed: ["value": "50"]).message == "50 exceeds gain.max; did you mean 50%?")
  }

  /// The typed value goes in front of the refusal's `detail`, never in place of the message's
  /// first word: a message that starts with the number but comes with no detail (as a daemon that
  /// sends none writes it) is kept whole, and one with a detail is retold from it, whatever words
  /// its message starts with.
  @Test func refusalsAreRetoldFromTheirDataNotTheirWords() throws {
    func retold(_ line: String, typed: String) throws -> String {
      guard case .reply(_, .failure(let refusal)) = try ServerLine.parse(line) else {
        Issue.record("not a failed reply: \(line)")
        return ""
      }
      return RefusalText.explained(refusal, typed: ["value": typed]).message
    }
    #expect(
      try retold(
        #"{"id":1,"ok":false,"error":{"code":"out-of-range","field":"value","message":"2 is too far","#
          + #""bound":"property-range","value":2}}"#, typed: "200%") == "2 is too far")
    #expect(
      try retold(
        #"{"id":1,"ok":false,"error":{"code":"out-of-range","field":"value","message":"pan 2 is too far","#
          + #""bound":"property-range","value":2,"detail":"is too far"}}"#, typed: "200%") == "200% (2) is too far")

    let refused = ProtocolError.outsideRange(2, keyPath: "streams.a.pan", range: -1...1, field: "value")
    #expect(refused.message == "2 is outside streams.a.pan's range -1...1")
    #expect(
      try retold(Reply.failure(id: 1, error: refused).serialized(), typed: "200%")
        == "200% (2) is outside streams.a.pan's range -1...1")
  }

  @Test func nothingToStopSaysSo() throws {
    #expect(TransportArguments.summary("stopping", ["streams": []]) == "nothing is playing")
    #expect(TransportArguments.summary("stopping", ["streams": ["a", "b"]]) == "stopping: a, b")
    let resume = try #require(RampCtl.parseAsRoot(["resume"]) as? ResumeCommand)
    #expect(resume.summary(of: ["streams": []]) == "nothing is paused")
  }

  @Test func waitIsRefusedWhereItMeansNothing() {
    for words in [["--instant"], ["--duration", "0"]] {
      do {
        _ = try RampCtl.parseAsRoot(["set", "master.gain", "1", "--wait"] + words)
        Issue.record("accepted \(words)")
      } catch {
        #expect(RampCtl.message(for: error).contains("--wait: an --instant change has nothing to wait for"))
      }
    }
    #expect(throws: Never.self) { try RampCtl.parseAsRoot(["set", "master.gain", "1", "--wait", "--duration", "1s"]) }
  }

  @Test func playWaitsForTheStreamToEnd() throws {
    let play = try #require(RampCtl.parseAsRoot(["play", "/a.wav", "--wait"]) as? PlayCommand)
    #expect(play.waitsForStreamsToEnd)
    let wait = try #require(play.rampWait(for: ["stream": "s1", "animation": .null]))
    #expect(wait.streams == ["s1"] && wait.animations.isEmpty)
    let quiet = try #require(RampCtl.parseAsRoot(["play", "/a.wav"]) as? PlayCommand)
    #expect(!quiet.waitsForStreamsToEnd && quiet.rampWait(for: ["stream": "s1"]) == nil)
  }

  @Test func statusShowsMasterGainStreamGainsAndSchedules() {
    let text = ReplyText.status([
      "version": "0.2.0", "master": ["model": 0, "audible": 0],
      "streams": [
        [
          "stream": "a", "path": "/x.wav", "paused": false, "stopping": false, "loop": false, "position": 1.25,
          "gain": ["model": 0.5, "audible": 0.25],
        ]
      ],
      "scheduled": [
        ["schedule": 3, "due": "2026-11-25T11:30:02.5993633270263672Z", "cmd": "fade-out", "started": false]
      ],
    ])
    #expect(text.contains("master gain 0 (-inf dB)"), "\(text)")
    #expect(text.contains("0.5 (-6.02 dB), audible 0.25 (-12.04 dB)"), "\(text)")
    #expect(text.contains("1 scheduled, next at 2026-11-25 "), "\(text)")
    #expect(text.contains("#3 fade-out at 2026-11-25 ") && text.contains(":02.599 "), "\(text)")
    #expect(!text.contains("5993633270263672"))
  }
}

extension Schedule {
  fileprivate var isDelay: Bool {
    if case .delay = self { return true }
    return false
  }
}
