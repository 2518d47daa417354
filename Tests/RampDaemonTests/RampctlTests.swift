import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// The real `rampctl` binary against the real `rampd` (on an ALSA file PCM): exit statuses,
/// what it prints, and the samples its commands made rampd play.
@Suite struct RampctlTests {
  typealias Outcome = ProcessOutcome

  /// Runs rampctl with `arguments`, finding the daemon through `RAMPD_SOCKET` as a user would.
  func rampctl(_ arguments: [String], socket: String, stdin: String? = nil, directory: String? = nil) throws -> Outcome
  {
    var environment = childEnvironment
    environment["RAMPD_SOCKET"] = socket
    return try runProcess(
      Executables.rampctl, arguments, environment: environment, stdin: stdin, directory: directory)
  }

  /// `play --fade-in`, `wait --key` for the fade-in, then `fade-out --then stop --wait`: the
  /// waits exit 0 once their ramps are over, the fade-in is the linear curve at every sample, and
  /// the stream has ended.
  @Test func playWithFadeInThenFadeOutAndStop() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let file = try daemon.constantFile("one", seconds: 10)
    let started = Date()
    let play = try rampctl(
      ["play", "one.wav", "--stream", "a", "--fade-in", "200ms", "--curve", "linear"],
      socket: daemon.socket, directory: daemon.directory)
    #expect(play.status == 0, "\(play)")
    #expect(play.stdout.contains("playing a: \(file)"), "the relative path was made absolute: \(play)")
    // The fade-in may be over before rampctl starts: then the wait returns at once.
    let fadeIn = try rampctl(["wait", "--key", "a"], socket: daemon.socket)
    #expect(fadeIn.status == 0, "\(fadeIn)")
    #expect(Date().timeIntervalSince(started) >= 0.2, "returned only after the fade-in")
    let level = try daemon.client().request(["cmd": "get", "key": "streams.a.gain"]).result["presentation"]
    #expect(level == 1, "the fade-in was over when the wait returned")

    let stop = try rampctl(["fade-out", "--duration", "300ms", "--then", "stop", "--wait"], socket: daemon.socket)
    #expect(stop.status == 0, "\(stop)")
    #expect(stop.stdout.contains("stream a ended (stopped)"), "\(stop)")
    let client = try daemon.client()
    #expect(try client.request(["cmd": "status"]).result["streams"] == [], "released before rampctl returned")
    daemon.stop()

    let left = try daemon.played(channel: 0)
    let start = try #require(left.firstIndex { $0 > 0 }) - 1
    var worst = 0.0
    for k in 0...9_600 { worst = max(worst, abs(Double(left[start + k]) - Double(k) / 9_600)) }
    #expect(worst < 1e-6, "fade-in off the linear curve by \(worst)")
    let last = try #require(left.lastIndex { $0 > 0 })
    #expect(last > start + 9_600 && left[(last + 1)...].allSatisfy { $0 == 0 }, "silent once stopped")
  }

  /// rampd's executable run by the name `rampctl` (the package installs rampctl as a link to
  /// rampd) is rampctl: its version line, its help, and a command that changes what is played.
  @Test func rampdRunAsRampctlIsRampctl() throws {
    let daemon = try DaemonProcess(limiter: "off")
    _ = try daemon.constantFile("one", seconds: 10)
    let link = "\(daemon.directory)/bin/rampctl"
    try FileManager.default.createDirectory(atPath: "\(daemon.directory)/bin", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: Executables.rampd)
    var environment = childEnvironment
    environment["RAMPD_SOCKET"] = daemon.socket
    let run = { (arguments: [String]) throws -> Outcome in
      try runProcess(link, arguments, environment: environment, directory: daemon.directory)
    }
    let help = try run(["--help"])
    #expect(help.status == 0 && help.stdout.hasPrefix("OVERVIEW: Control rampd"), "\(help)")
    let own = try rampctl(["--help"], socket: daemon.socket)
    #expect(help.stdout == own.stdout, "the link's help is rampctl's")
    let play = try run(["play", "one.wav", "--stream", "a"])
    #expect(play.status == 0, "\(play)")
    let set = try run(["set", "master.gain", "0.25", "--duration", "0"])
    #expect(set.status == 0 && set.stdout.contains("master.gain = 0.25"), "\(set)")
    usleep(300_000)
    daemon.stop()
    let left = try daemon.played(channel: 0)
    // The file is at 1: held at 0.25 for the 0.3 s before the stop.
    let held = left.count { abs($0 - 0.25) < 1e-6 }
    #expect(held > 9_600, "the set was heard: \(held) samples at 0.25")
  }

  /// `--space 'db(-60)'` is a floor of -60 dB, played as such by a rampd configured with another
  /// floor (`fade.db-floor = -50`): the fade runs in equal dB steps from 0 to -60 dB.
  @Test func anExplicitFloorIsPlayedUnderAnotherConfiguredOne() throws {
    let daemon = try DaemonProcess(limiter: "off", environment: ["RAMPD_FADE_DB_FLOOR": "-50"])
    _ = try daemon.constantFile("one", seconds: 3)
    #expect(
      try rampctl(["play", "one.wav", "--stream", "a"], socket: daemon.socket, directory: daemon.directory).status
        == 0)
    usleep(100_000)
    let fade = try rampctl(
      ["fade", "master.gain", "0", "--duration", "1s", "--curve", "linear", "--space", "db(-60)", "--wait"],
      socket: daemon.socket)
    #expect(fade.status == 0, "\(fade)")
    daemon.stop()
    let left = try daemon.played(channel: 0)
    // The first sample below 1 once the stream's start ramp is over: the fade's sample 1 of 48,000.
    let playing = try #require(left.firstIndex(of: 1))
    let begin = try #require(left[playing...].firstIndex { $0 < 1 })
    try #require(left.count >= begin + 47_990, "the fade was not played whole: \(left.count - begin) frames")
    var worst = 0.0
    for k in stride(from: 1, to: 47_990, by: 7) {
      let expected = pow(10, -60 * Double(k) / 48_000 / 20)
      worst = max(worst, abs(Double(left[begin + k - 1]) - expected) / expected)
    }
    #expect(worst < 1e-4, "off the -60 dB line by \(worst) (relative)")
    #expect(left[(begin + 48_000)...].allSatisfy { $0 == 0 }, "silent at the floor")
  }

  /// `set -6dB --duration --wait` leaves the model at exactly -6 dB; `get --json` is one reply line.
  @Test func setInDecibelsThenGetAsJSON() throws {
    let daemon = try DaemonProcess()
    let set = try rampctl(["set", "master.gain", "-6dB", "--duration", "100ms", "--wait"], socket: daemon.socket)
    #expect(set.status == 0, "\(set)")
    let get = try rampctl(["get", "master.gain", "--json"], socket: daemon.socket)
    #expect(get.status == 0, "\(get)")
    let lines = get.stdout.split(separator: "\n")
    #expect(lines.count == 1, "\(get)")
    let reply = try JSON.parse(String(try #require(lines.first)))
    #expect(reply["ok"] == true && reply["id"] != nil)
    let model = try #require(reply["result"]?["model"]?.numberValue)
    #expect(abs(model - 0.501_187_233_627_272_2) < 1e-12, "model \(model)")
    #expect(reply["result"]?["presentation"]?.numberValue == model, "the ramp is over")
  }

  /// `--at` schedules the ramp in rampd, which saves it; rampctl returns at once.
  @Test func fadeOutAtATimeIsScheduledAndSaved() throws {
    let daemon = try DaemonProcess()
    let later = try rampctl(
      ["fade-out", "--at", "23:00", "--duration", "20m", "--then", "stop"], socket: daemon.socket)
    #expect(later.status == 0 && later.stdout.contains("scheduled (#1): takes effect at "), "\(later)")
    let soon = try rampctl(
      ["fade", "master.gain", "0.5", "--at", "300ms", "--duration", "100ms"], socket: daemon.socket)
    #expect(soon.status == 0 && soon.stdout.contains("scheduled (#2)"), "\(soon)")
    let client = try daemon.client()
    let scheduled = try #require(client.request(["cmd": "status"]).result["scheduled"]?.arrayValue)
    #expect(scheduled.compactMap { $0["cmd"]?.stringValue }.sorted() == ["fade", "fade-out"])
    // 23:00 is the next 23:00 to come, in local time.
    let due = try #require(scheduled.first { $0["cmd"] == "fade-out" }?["due"]?.stringValue.flatMap(RFC3339.parse))
    let parts = Calendar.current.dateComponents([.hour, .minute], from: Date(timeIntervalSince1970: due))
    #expect(parts.hour == 23 && parts.minute == 0 && due > Date().timeIntervalSince1970)
    #expect(due - Date().timeIntervalSince1970 <= 86_400)
    usleep(600_000)
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["presentation"]?.numberValue == 0.5)
    let bad = try rampctl(["fade-out", "--at", "25:00"], socket: daemon.socket)
    #expect(bad.status == 64 && bad.stderr.contains("--at"), "\(bad)")
  }

  /// An endless keyframe animation replies with its id (and cannot be waited for).
  @Test func animateKeyframesForEver() throws {
    let daemon = try DaemonProcess()
    _ = try daemon.constantFile("one", seconds: 10)
    #expect(try rampctl(["play", "\(daemon.directory)/one.wav", "--stream", "s1"], socket: daemon.socket).status == 0)
    let animate = try rampctl(
      ["animate", "streams.s1.gain", "--keyframes", "1,0.5,1", "--duration", "200ms", "--repeat", "inf", "--json"],
      socket: daemon.socket)
    #expect(animate.status == 0, "\(animate)")
    let reply = try JSON.parse(animate.stdout.trimmingCharacters(in: .newlines))
    #expect(reply["result"]?["animation"]?.numberValue != nil, "\(animate)")
    let list = try rampctl(["list", "streams.s1"], socket: daemon.socket)
    #expect(list.stdout.contains("animation (keyframe) endless"), "\(list)")
  }

  @Test func badUsageExits64NamingTheOption() throws {
    let daemon = try DaemonProcess()
    let units = try rampctl(["fade-in", "--duration", "fast"], socket: daemon.socket)
    #expect(units.status == 64 && units.stderr.contains("--duration"), "\(units)")
    let unknown = try rampctl(["set", "master.gain", "1", "--durration", "1s"], socket: daemon.socket)
    #expect(unknown.status == 64 && unknown.stderr.contains("--durration"), "\(unknown)")
    #expect(unknown.stderr.contains("did you mean --duration?"), "\(unknown)")
    // fade's target is an argument, not a --to (which fade-in and fade-out have).
    let target = try rampctl(["fade", "master.gain", "--to", "0.5"], socket: daemon.socket)
    #expect(target.status == 64, "\(target)")
    #expect(
      target.stderr.hasPrefix("rampctl: '--to' is not an option of fade: <to> is an argument")
        && !target.stderr.contains("--at"), "\(target)")
  }

  @Test func refusedCommandExits65WithTheCode() throws {
    let daemon = try DaemonProcess()
    let refused = try rampctl(["set", "nope.gain", "0.5"], socket: daemon.socket)
    #expect(refused.status == 65, "\(refused)")
    #expect(refused.stderr.hasPrefix("rampctl: unknown-key-path: "), "\(refused)")
    let high = try rampctl(["fade", "master.gain", "+6dB"], socket: daemon.socket)
    #expect(high.status == 65 && high.stderr.contains("out-of-range") && high.stderr.contains("to"), "\(high)")
  }

  @Test func noDaemonExits69NamingTheSocket() throws {
    let path = NSTemporaryDirectory() + "rampctl-nothing-\(getpid()).sock"
    let outcome = try rampctl(["ping"], socket: path)
    #expect(outcome.status == 69, "\(outcome)")
    #expect(outcome.stderr.contains(path) && outcome.stderr.contains("Start it with"), "\(outcome)")
  }

  @Test func aTimedOutWaitExits75() throws {
    let daemon = try DaemonProcess()
    #expect(try rampctl(["fade", "master.gain", "0", "--duration", "20s"], socket: daemon.socket).status == 0)
    let wait = try rampctl(["wait", "--key", "master.gain", "--timeout", "200ms"], socket: daemon.socket)
    #expect(wait.status == 75 && wait.stderr.contains("timeout"), "\(wait)")
  }

  /// A timeline: lines are applied at their `at`, a relative path is taken from the script's
  /// directory (not rampctl's), and a script with an invalid line runs nothing.
  @Test func timelineBatch() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let file = try daemon.constantFile("one", seconds: 10)
    let script = "\(daemon.directory)/show.jsonl"
    try """
    # two changes after the start
    {"cmd": "play", "path": "one.wav", "stream": "m"}
    {"at": 0.4, "cmd": "set", "key": "master.gain", "value": "-12dB", "duration": 0}
    {"at": "600ms", "cmd": "stop", "stream": "m", "fade": "50ms"}
    """.write(toFile: script, atomically: true, encoding: .utf8)
    let before = try #require(try daemon.client().request(["cmd": "status"]).result["sample"]?.int)
    let started = Date()
    let run = try rampctl(["batch", script], socket: daemon.socket, directory: "/")
    #expect(run.status == 0, "\(run)")
    #expect(run.stdout.contains("\(script):2: play: ") && run.stdout.contains(file), "played \(file): \(run)")
    #expect(run.stdout.contains("\(script):3: set") && run.stdout.contains("\(script):4: stop"), "\(run)")
    #expect(Date().timeIntervalSince(started) >= 0.6, "returned after the last line took effect")
    daemon.stop()
    let left = try daemon.played(channel: 0)
    let playing = try #require(left.firstIndex { $0 == 1 })
    let lowered = try #require(left[playing...].firstIndex { abs(Double($0) - pow(10, -12.0 / 20)) < 1e-6 })
    // 0.4 s after the script started, which is after `before` by rampctl's start-up time. An `at`
    // counts from the sample heard at the time, which is up to a buffer and a period (20 + 5 ms)
    // behind `before`, the sample rendering has reached: a quick start-up lands that much early.
    let late = lowered - before - 19_200
    #expect(late >= -1_200 && late < 24_000, "the set at 0.4 s landed \(late) samples after 0.4 s from the status")

    try """
    {"cmd": "set", "key": "master.gain", "value": 0.5}
    {"at": 1, "cmd": "set", "key": "master.gain", "valu": 0.5}
    """.write(toFile: script, atomically: true, encoding: .utf8)
    let bad = try rampctl(["batch", script], socket: daemon.socket)
    #expect(bad.status == 65 && bad.stderr.contains("\(script):2: unknown-field: valu"), "\(bad)")
  }

  /// The first line rampd refuses stops a timeline: reported with the file, line and rampd's
  /// error, exit 65, and no line after it applied. Here the refused `play` is followed by a
  /// `stop` of its stream name, which another stream, already playing, has: it plays on, at the
  /// level it had, to the end of the recording.
  @Test func aRefusedLineStopsTheTimeline() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let file = try daemon.constantFile("one", seconds: 10)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "bed"]).isOK)
    let script = "\(daemon.directory)/show.jsonl"
    try """
    {"cmd": "play", "path": "missing.flac", "stream": "bed"}
    {"at": 0.2, "cmd": "stop", "stream": "bed"}
    {"at": 0.3, "cmd": "set", "key": "master.gain", "value": 0.5}
    """.write(toFile: script, atomically: true, encoding: .utf8)
    let run = try rampctl(["batch", script], socket: daemon.socket)
    #expect(run.status == 65, "\(run)")
    #expect(run.stderr.contains("\(script):1: ") && run.stderr.contains("missing.flac"), "line and error: \(run)")
    #expect(run.stderr.contains("batch stopped at \(script):1"), "\(run)")
    #expect(!run.stdout.contains("\(script):2") && !run.stdout.contains("\(script):3"), "\(run)")
    usleep(800_000)
    let status = try client.request(["cmd": "status"])
    #expect(status.result["streams"]?.arrayValue?.map { $0["stream"] } == ["bed"], "bed plays on: \(status)")
    #expect(status.result["master"]?["model"] == 1, "the set after the refused line was not sent")
    daemon.stop()
    let left = try daemon.played(channel: 0)
    let playing = try #require(left.firstIndex { $0 == 1 })
    // Up to the status, well after the lines' times: nothing of bed changed.
    let reached = try #require(status.result["sample"]?.int)
    #expect(reached - playing > 36_000, "bed played past the lines' times before the status")
    #expect(left[playing..<min(reached, left.count)].allSatisfy { $0 == 1 }, "bed was never stopped nor lowered")

    // Lines sharing a time go as one batch: the refused one keeps the others of its time out too.
    try """
    {"at": 0.1, "cmd": "set", "key": "master.gain", "value": 0.25}
    {"at": 0.1, "cmd": "stop", "stream": "nope"}
    {"at": 0.2, "cmd": "set", "key": "master.gain", "value": 0.5}
    """.write(toFile: script, atomically: true, encoding: .utf8)
    let daemon2 = try DaemonProcess(limiter: "off")
    let together = try rampctl(["batch", script], socket: daemon2.socket)
    #expect(together.status == 65, "\(together)")
    #expect(together.stderr.contains("\(script):2: unknown-stream"), "\(together)")
    #expect(together.stderr.contains("\(script):1"), "names the line sent with it: \(together)")
    let master = try daemon2.client().request(["cmd": "get", "key": "master.gain"])
    #expect(master.result["model"] == 1, "neither line of that time, nor the one after, applied: \(master)")
    daemon2.stop()
  }

  /// `rampctl render --script` takes a timeline's relative paths from the timeline's directory,
  /// wherever rampctl runs: the file plays.
  @Test func renderTakesRelativePathsFromTheTimelinesDirectory() throws {
    let bench = try ShowBench()
    try bench.file("half.wav", frames: 4_800, channels: 2) { _, _ in 0.5 }
    try """
    {"cmd": "play", "path": "half.wav", "stream": "a"}
    {"at": 0.05, "cmd": "batch", "commands": [{"cmd": "play", "path": "./half.wav", "stream": "b"}]}
    """.write(toFile: bench.path("show.jsonl"), atomically: true, encoding: .utf8)
    let run = try runProcess(
      Executables.rampctl, ["render", bench.path("out.wav"), "--script", bench.path("show.jsonl"), "--no-limiter"],
      directory: "/")
    #expect(run.status == 0, "\(run)")
    let reader = try SoundFileReader(path: bench.path("out.wav"))
    var samples = [Float](repeating: 0, count: Int(reader.frames) * reader.channels)
    _ = try samples.withUnsafeMutableBufferPointer {
      try reader.read(into: $0.baseAddress!, frames: Int(reader.frames))
    }
    #expect(reader.frames == 4_800 + 2_400, "b starts 50 ms after a and plays to its end")
    #expect(samples[2 * 1_000] == 0.5 && samples[2 * 3_000] == 1 && samples[2 * 6_000] == 0.5, "a, a + b, b")
  }

  /// Units are converted at every depth of a timeline line: inside a `batch`'s commands and an
  /// `animate`'s animation (and its group's children), `"-6dB"` and `"2s"` render exactly as the
  /// numbers they stand for.
  @Test func unitsInsideBatchesAndAnimationsRenderAsTheirNumbers() throws {
    let bench = try ShowBench()
    try bench.file("one.wav", frames: 48_000, channels: 2) { _, _ in 1 }
    func render(_ name: String, _ timeline: String) throws -> [Float] {
      try timeline.write(toFile: bench.path("\(name).jsonl"), atomically: true, encoding: .utf8)
      let run = try runProcess(
        Executables.rampctl,
        ["render", bench.path("\(name).wav"), "--script", bench.path("\(name).jsonl"), "--no-limiter"])
      #expect(run.status == 0, "\(run)")
      return try readSamples(bench.path("\(name).wav"))
    }
    let minus6 = pow(10, -6.0 / 20)
    let units = try render(
      "units",
      #"""
      {"cmd": "play", "path": "one.wav", "stream": "a"}
      {"at": 0.1, "cmd": "batch", "commands": [{"cmd": "set", "key": "master.gain", "value": "-6dB", "duration": "200ms"}]}
      {"at": 0.4, "cmd": "animate", "key": "streams.a.gain", "animation": {"type": "group", "duration": "300ms", "animations": [{"type": "basic", "from": "-6dB", "to": "50%", "duration": "250ms"}]}}
      {"at": 0.7, "cmd": "animate", "key": "master.gain", "animation": {"type": "basic", "to": "-12dB", "duration": "100ms"}}
      """#)
    let numbers = try render(
      "numbers",
      #"""
      {"cmd": "play", "path": "one.wav", "stream": "a"}
      {"at": 0.1, "cmd": "batch", "commands": [{"cmd": "set", "key": "master.gain", "value": \#(minus6), "duration": 0.2}]}
      {"at": 0.4, "cmd": "animate", "key": "streams.a.gain", "animation": {"type": "group", "duration": 0.3, "animations": [{"type": "basic", "from": \#(minus6), "to": 0.5, "duration": 0.25}]}}
      {"at": 0.7, "cmd": "animate", "key": "master.gain", "animation": {"type": "basic", "to": \#(pow(10, -12.0 / 20)), "duration": 0.1}}
      """#)
    #expect(units.count == 96_000 && units == numbers, "the unit form rendered otherwise")
    // Not the same by doing nothing: the set ramps from 0 dB over 200 ms (from 4,800) to -6 dB.
    let ramp = [4_800, 7_200, 14_400].map { Double(numbers[2 * $0]) }
    #expect(ramp[0] == 1 && ramp[1] > minus6 + 0.1 && ramp[1] < 0.9 && abs(ramp[2] - minus6) < 1e-6, "\(ramp)")
  }

  /// Plain `status` shows each stream's position in its file and the file's duration, and a
  /// queue stream's queue with the playing item marked; a looping file's position stays within
  /// the file (it starts again from 0 at each loop), in the reply and in the text.
  @Test func statusShowsPositionsDurationsAndQueues() throws {
    let daemon = try DaemonProcess()
    let short = try daemon.constantFile("short", seconds: 0.5)
    let long = try daemon.constantFile("long", seconds: 10)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(short), "stream": "looped", "loop": true]).isOK)
    #expect(
      try client.request(["cmd": "play", "path": .string(long), "stream": "list", "queue": [.string(short)]]).isOK)
    usleep(1_300_000)
    let status = try client.request(["cmd": "status"])
    let streams = try #require(status.result["streams"]?.arrayValue)
    let looped = try #require(streams.first { $0["stream"] == "looped" })
    let position = try #require(looped["position"]?.numberValue)
    #expect(looped["duration"]?.numberValue == 0.5, "\(looped)")
    #expect(position >= 0 && position < 0.5, "a looping file's position within it: \(looped)")
    let list = try #require(streams.first { $0["stream"] == "list" })
    #expect(list["duration"]?.numberValue == 10 && list["queue"]?["items"]?.arrayValue?.count == 2, "\(list)")

    let text = try rampctl(["status"], socket: daemon.socket)
    #expect(text.status == 0, "\(text)")
    let rows = text.stdout.split(separator: "\n").map(String.init)
    let loopRow = try #require(rows.first { $0.hasPrefix("looped") }, "\(text)")
    #expect(loopRow.contains(" / 500ms"), "position / duration: \(loopRow)")
    let listRow = try #require(rows.first { $0.hasPrefix("list") }, "\(text)")
    #expect(listRow.contains(" / 10s"), "\(listRow)")
    let heading = try #require(rows.firstIndex { $0.hasPrefix("queue of list") }, "the queue is shown: \(text)")
    #expect(rows[heading + 2].hasPrefix(">") && rows[heading + 2].hasSuffix("long.wav"), "\(text)")
    #expect(rows[heading + 3].hasSuffix("short.wav"), "\(text)")
    daemon.stop()
  }

  /// `watch` prints events one per line; `--count` ends it.
  @Test func watchPrintsEvents() throws {
    let daemon = try DaemonProcess()
    let file = try daemon.constantFile("one", seconds: 10)
    nonisolated(unsafe) var watched: Outcome?
    let done = DispatchSemaphore(value: 0)
    let socket = daemon.socket
    DispatchQueue.global().async {
      watched = try? rampctl(["watch", "--events", "stream-started,stream-ended", "--count", "2"], socket: socket)
      done.signal()
    }
    // Play only once rampctl has subscribed (status counts subscribers), or it could miss the start.
    let client = try daemon.client()
    let deadline = Date().addingTimeInterval(10)
    while try client.request(["cmd": "status"]).result["subscribers"] == 0, Date() < deadline { usleep(20_000) }
    // Looped: on a machine so busy that the stop comes after the file's ten seconds, the stream
    // is still there to be stopped.
    #expect(try rampctl(["play", file, "--stream", "w", "--loop"], socket: daemon.socket).status == 0)
    #expect(try rampctl(["stop", "w", "--fade", "50ms", "--wait"], socket: daemon.socket).status == 0)
    #expect(done.wait(timeout: .now() + 10) == .success)
    let outcome = try #require(watched)
    #expect(outcome.status == 0)
    #expect(outcome.stdout == "stream-started w \(file)\nstream-ended w (stopped)\n", "\(outcome)")
  }
}

extension RampctlTests {
  /// `tone` writes the sine it says (level and frequency read back from the file); `envelope`
  /// plots it; a file that cannot be written or read exits 65, a bad size 64.
  @Test func toneWritesItsSineAndEnvelopePlotsIt() throws {
    let directory = NSTemporaryDirectory() + "rampctl-tone-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = "\(directory)/a.wav"
    let made = try rampctl(["tone", path, "--frequency", "100", "--duration", "1s", "--level", "50%"], socket: "/none")
    #expect(made.status == 0, "\(made)")
    let reader = try RampAudio.SoundFileReader(path: path)
    var samples = [Float](repeating: 0, count: 2 * 48_000)
    let frames = try samples.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 48_000) }
    #expect(frames == 48_000 && reader.channels == 2)
    let left = stride(from: 0, to: 2 * frames, by: 2).map { samples[$0] }
    #expect(abs(Double(left.max()!) - 0.5) < 1e-3, "peak \(left.max()!)")
    let rising = zip(left, left.dropFirst()).filter { $0 < 0 && $1 >= 0 }.count
    #expect((99...101).contains(rising), "\(rising) cycles in a second")
    let plotted = try rampctl(["envelope", path, "--ascii", "--height", "4"], socket: "/none")
    #expect(plotted.status == 0 && plotted.stdout.contains("0.5"), "\(plotted)")
    #expect(try rampctl(["tone", "\(directory)/a.xyz"], socket: "/none").status == 65)
    #expect(try rampctl(["envelope", "\(directory)/missing.wav"], socket: "/none").status == 65)
    #expect(try rampctl(["envelope", path, "--width", "0"], socket: "/none").status == 64)
  }

  /// `envelope --from --to` plots only that part of the file, over the whole width, and `--db` in
  /// dBFS: two seconds of silence then a -6 dB tone, seen from 1 s to 3 s, are silence at the
  /// bottom over the left half and the tone in the top row over the right half. A window outside
  /// the file, or one that ends before it starts, is a usage error naming the option.
  @Test func envelopeTimeWindowAndDecibels() throws {
    let directory = NSTemporaryDirectory() + "rampctl-envelope-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = "\(directory)/late.wav"
    let made = try runProcess(
      "/usr/bin/env",
      ["sox", "-n", "-r", "48000", "-c", "2", path, "synth", "2", "sine", "100", "gain", "-6", "pad", "2", "0"])
    #expect(made.status == 0, "\(made)")
    let plotted = try rampctl(
      ["envelope", path, "--ascii", "--height", "4", "--width", "20", "--from", "1s", "--to", "3s", "--db"],
      socket: "/none")
    #expect(plotted.status == 0, "\(plotted)")
    let lines = plotted.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    #expect(lines.first?.hasPrefix("Peak level in dBFS of \(path) (48000 Hz, 2 ch, 1s to 3s)") == true, "\(plotted)")
    // The plotting area of each row: what follows the y axis (the column of the x axis' corner).
    let corner = try #require(lines.count > 5 ? lines[5].firstIndex(of: "+") : nil, "\(plotted)")
    let offset = lines[5].distance(from: lines[5].startIndex, to: corner) + 1
    let area = { (row: Int) in String(lines[row].dropFirst(offset)).padding(toLength: 20, withPad: " ", startingAt: 0) }
    let (top, bottom) = (area(1), area(4))
    #expect(
      top.prefix(10).allSatisfy { $0 == " " } && top.dropFirst(11).contains("-"), "top row: \(top)\n\(plotted.stdout)")
    #expect(
      bottom.prefix(10).allSatisfy { $0 == "." } && lines[4].hasPrefix("-50 "),
      "bottom row: \(bottom)\n\(plotted.stdout)")

    let refusals: [([String], String)] = [
      (["--from", "5s"], "rampctl envelope: --from 5s is not before the end of \(path) (4s long)"),
      (["--to", "4.5s"], "rampctl envelope: --to 4.5s is past the end of \(path) (4s long)"),
      (["--from", "2s", "--to", "1s"], "--to 1s must come after --from 2s"),
      (["--from", "soon"], "--from: 'soon' is not valid"),
    ]
    for (arguments, message) in refusals {
      let refused = try rampctl(["envelope", path] + arguments, socket: "/none")
      #expect(refused.status == 64 && refused.stderr.contains(message), "\(arguments): \(refused)")
    }
  }
}
