import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

/// What rampctl says, through the real binaries: replies where the user looks for them, messages
/// that point at the mistake, options where mpc and systemctl users put them.
extension RampctlTests {
  /// The only line on standard output, as JSON.
  func jsonLine(_ outcome: Outcome) throws -> JSONValue {
    let lines = outcome.stdout.split(separator: "\n")
    #expect(lines.count == 1, "\(outcome)")
    return try JSON.parse(String(try #require(lines.first)))
  }

  /// `--json` prints refusals on standard output too (before or after the subcommand), and the
  /// exit status still says it failed.
  @Test func jsonPrintsRefusalsOnStandardOutput() throws {
    let daemon = try DaemonProcess()
    let high = try rampctl(["set", "master.gain", "2", "--json"], socket: daemon.socket)
    #expect(high.status == 65, "\(high)")
    let reply = try jsonLine(high)
    #expect(reply["ok"] == false && reply["error"]?["code"] == "out-of-range", "\(high)")
    let unknown = try rampctl(["--json", "get", "nope.gain"], socket: daemon.socket)
    let unknownReply = try jsonLine(unknown)
    #expect(unknown.status == 65 && unknownReply["error"]?["code"] == "unknown-key-path", "\(unknown)")
    #expect(try rampctl(["fade", "master.gain", "0", "--duration", "20s"], socket: daemon.socket).status == 0)
    let wait = try rampctl(["wait", "--key", "master.gain", "--timeout", "200ms", "--json"], socket: daemon.socket)
    let waitReply = try jsonLine(wait)
    #expect(wait.status == 75 && waitReply["error"]?["code"] == "timeout", "\(wait)")
  }

  /// `status` shows the master gain (a restored 0 cannot hide), each stream's gain and position,
  /// the schedules in local time to the millisecond, and the output; the log names the levels
  /// restored at start-up.
  @Test func statusShowsLevelsAndSchedules() throws {
    let first = try DaemonProcess()
    let file = try first.constantFile("one", seconds: 30)
    #expect(try rampctl(["set", "master.gain", "0", "--instant"], socket: first.socket).status == 0)
    usleep(300_000)
    first.stop()
    let daemon = try DaemonProcess(reusing: first.directory)
    // The log is read as it comes: give the line a moment to arrive.
    let restored = "state restored: master.gain = 0 (-inf dB)"
    let deadline = Date().addingTimeInterval(5)
    while !daemon.log.contains(restored), Date() < deadline { usleep(20_000) }
    #expect(daemon.log.contains(restored), "\(daemon.log)")
    #expect(try rampctl(["play", file, "--stream", "a", "--gain", "50%"], socket: daemon.socket).status == 0)
    #expect(try rampctl(["fade-out", "--at", "23:00", "--duration", "1m"], socket: daemon.socket).status == 0)
    let status = try rampctl(["status"], socket: daemon.socket)
    #expect(status.status == 0, "\(status)")
    #expect(status.stdout.contains("\nmaster gain 0 (-inf dB)\n"), "\(status)")
    #expect(status.stdout.contains("output rampd_e2e (file), 48000 Hz"), "\(status)")
    let row = try #require(status.stdout.split(separator: "\n").first { $0.hasPrefix("a ") }, "\(status)")
    #expect(row.contains("playing") && row.contains("0.5 (-6.02 dB)") && row.contains(file), "\(row)")
    let scheduled = #/1 scheduled, next at \d{4}-\d\d-\d\d 23:00:00\.000 [+-]\d\d:\d\d:/#
    #expect(status.stdout.contains(scheduled), "\(status)")
    #expect(status.stdout.contains(#/#1 fade-out at \d{4}-\d\d-\d\d 23:00:00\.000/#), "\(status)")
    // `rampctl` alone is the same status, with a hint.
    let bare = try rampctl([], socket: daemon.socket)
    #expect(bare.status == 0 && bare.stdout.contains("master gain 0 (-inf dB)"), "\(bare)")
    #expect(bare.stdout.hasSuffix("(rampctl --help lists every command)\n"), "\(bare)")
  }

  /// `play --wait` returns when the stream ends; `fade --at … --wait` when the ramp has run.
  @Test func waitWaitsForWhatTheCommandStarted() throws {
    let daemon = try DaemonProcess()
    let file = try daemon.constantFile("short", seconds: 0.6)
    let started = Date()
    let play = try rampctl(["play", file, "--wait"], socket: daemon.socket)
    #expect(play.status == 0, "\(play)")
    #expect(Date().timeIntervalSince(started) >= 0.6, "returned only once the file had played")
    #expect(play.stdout.contains("stream s1 ended (finished)"), "\(play)")
    #expect(try daemon.client().request(["cmd": "status"]).result["streams"] == [])

    let fadeStarted = Date()
    let fade = try rampctl(
      ["fade", "master.gain", "0.5", "--at", "+300ms", "--duration", "200ms", "--wait"], socket: daemon.socket)
    #expect(fade.status == 0, "\(fade)")
    #expect(Date().timeIntervalSince(fadeStarted) >= 0.5, "waited for the start, then the ramp")
    #expect(fade.stdout.contains(#/scheduled: takes effect at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} /#), "\(fade)")
    #expect(fade.stdout.contains("finished"), "\(fade)")
    let gain = try daemon.client().request(["cmd": "get", "key": "master.gain"]).result
    #expect(gain["presentation"]?.numberValue == 0.5, "the ramp was over when rampctl returned")

    let instant = try rampctl(["set", "master.gain", "1", "--instant", "--wait"], socket: daemon.socket)
    #expect(instant.status == 64 && instant.stderr.contains("--wait: an --instant change"), "\(instant)")
  }

  /// A date already past runs at once, and rampctl says so; future times print in local time.
  @Test func atInThePastRunsAtOnce() throws {
    let daemon = try DaemonProcess()
    let past = try rampctl(
      ["fade", "master.gain", "0.25", "--at", "2020-01-01T00:00:00Z", "--duration", "0"], socket: daemon.socket)
    #expect(past.status == 0, "\(past)")
    #expect(past.stdout.hasPrefix("--at 2020-01-01T00:00:00Z has passed: applied at once\n"), "\(past)")
    let client = try daemon.client()
    #expect(try client.request(["cmd": "status"]).result["scheduled"] == [])
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"]?.numberValue == 0.25)
    let later = try rampctl(["fade-out", "--at", "23:00"], socket: daemon.socket)
    #expect(
      later.stdout.contains(#/scheduled \(#\d+\): takes effect at \d{4}-\d\d-\d\d 23:00:00\.000 [+-]\d\d:\d\d/#),
      "\(later)")
  }

  /// Unknown subcommands, gain mistakes and stopping nothing get messages that say what happened.
  @Test func messagesPointAtTheMistake() throws {
    let daemon = try DaemonProcess()
    let typo = try rampctl(["fadeout", "--duration", "3s"], socket: daemon.socket)
    #expect(typo.status == 64, "\(typo)")
    #expect(typo.stderr.hasPrefix("rampctl: unknown command 'fadeout' (did you mean fade-out?)"), "\(typo)")
    let percent = try rampctl(["set", "master.gain", "50"], socket: daemon.socket)
    #expect(percent.status == 65 && percent.stderr.contains("did you mean 50%?"), "\(percent)")
    let decibels = try rampctl(["set", "master.gain", "+3dB"], socket: daemon.socket)
    #expect(decibels.status == 65 && decibels.stderr.contains("+3dB"), "\(decibels)")
    #expect(!decibels.stderr.contains("1.4125375446227544"), "\(decibels)")
    let master = try rampctl(["set", "master", "0.5"], socket: daemon.socket)
    #expect(master.status == 65 && master.stderr.contains("did you mean master.gain?"), "\(master)")
    let misspelt = try rampctl(["get", "master.gian"], socket: daemon.socket)
    #expect(misspelt.status == 65 && misspelt.stderr.contains("(did you mean master.gain?)"), "\(misspelt)")
    let stop = try rampctl(["stop"], socket: daemon.socket)
    #expect(stop.status == 0 && stop.stdout == "nothing is playing\n", "\(stop)")
  }

  /// A timeline's `at` takes `--at`'s forms: a relative `+300ms`, a local date and time.
  @Test func timelineAtTakesTheCommandLineForms() throws {
    let daemon = try DaemonProcess()
    let script = "\(daemon.directory)/times.jsonl"
    let soon = Date().addingTimeInterval(4).timeIntervalSince1970
    let local = localStamp(soon)
    try """
    {"at": "+300ms", "cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0}
    {"at": "\(local)", "cmd": "set", "key": "master.gain", "value": 0.25, "duration": 0}
    """.write(toFile: script, atomically: true, encoding: .utf8)
    let run = try rampctl(["batch", script], socket: daemon.socket)
    #expect(run.status == 0, "\(run)")
    #expect(try daemon.client().request(["cmd": "get", "key": "master.gain"]).result["model"]?.numberValue == 0.25)
    try #"{"at": "25:00", "cmd": "stop"}"#.write(toFile: script, atomically: true, encoding: .utf8)
    let bad = try rampctl(["batch", script], socket: daemon.socket)
    #expect(bad.status == 65 && bad.stderr.contains("\(script):1: at: '25:00'"), "\(bad)")
  }

  /// `--socket` and `--json` before the subcommand, as mpc and systemctl users type them.
  @Test func globalOptionsBeforeTheSubcommand() throws {
    let daemon = try DaemonProcess()
    let status = try rampctl(["--socket", daemon.socket, "status"], socket: "/nonexistent/rampd.sock")
    #expect(status.status == 0 && status.stdout.hasPrefix("rampd "), "\(status)")
    let get = try rampctl(["--socket=\(daemon.socket)", "--json", "get"], socket: "/nonexistent/rampd.sock")
    let getReply = try jsonLine(get)
    #expect(get.status == 0 && getReply["result"]?["key"] == "master.gain", "\(get)")
    let nowhere = try rampctl(["--socket", "/nonexistent/rampd.sock", "status"], socket: daemon.socket)
    #expect(nowhere.status == 69 && nowhere.stderr.contains("/nonexistent/rampd.sock"), "\(nowhere)")
    // Alone: the status as JSON with --json (no hint), the hint after the failure without a daemon.
    let bare = try rampctl(["--json"], socket: daemon.socket)
    let bareReply = try jsonLine(bare)
    #expect(bare.status == 0 && bareReply["result"]?["master"]?["model"] == 1, "\(bare)")
    let alone = try rampctl([], socket: "/nonexistent/rampd.sock")
    #expect(alone.status == 69 && alone.stderr.hasSuffix("(rampctl --help lists every command)\n"), "\(alone)")
  }

  /// `2026-11-25T23:00:00.000` in local time, without a zone.
  private func localStamp(_ seconds: Double) -> String {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ss.SSS"
    return formatter.string(from: Date(timeIntervalSince1970: seconds))
  }
}
