import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// Ducking through the real `rampd` on an ALSA `file` PCM. The bed is a constant 1.0 on the left
/// channel, so the left samples are its gain × the duck factor; trigger streams play on the right
/// channel only.
@Suite struct DuckTests {
  static let rate = 48_000.0
  /// The output's period (DaemonProcess's default 5 ms): a trigger acts at the next block.
  static let period = 240

  /// A stereo float WAV: `left` and `right` give each frame's samples.
  static func file(
    _ daemon: DaemonProcess, _ name: String, seconds: Double, left: (Int) -> Float, right: (Int) -> Float
  ) throws -> String {
    try file(daemon, name, frames: Int(seconds * rate), left: left, right: right)
  }

  /// The same, `frames` frames long.
  static func file(
    _ daemon: DaemonProcess, _ name: String, frames: Int, left: (Int) -> Float, right: (Int) -> Float
  ) throws -> String {
    let path = "\(daemon.directory)/\(name).wav"
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    var buffer = [Float](repeating: 0, count: frames * 2)
    for frame in 0..<frames {
      buffer[2 * frame] = left(frame)
      buffer[2 * frame + 1] = right(frame)
    }
    try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
    return path
  }

  /// The worst distance from `curve` of samples [start, start + frames] going `from` → `to`.
  static func misfit(_ left: [Float], start: Int, frames: Int, from: Double, to: Double, curve: TimingFunction)
    -> Double
  {
    let shape = curve.forRamp(falling: to < from)
    var worst = 0.0
    for k in 0...frames {
      let expected = from + (to - from) * shape.value(at: Double(k) / Double(frames))
      worst = max(worst, abs(Double(left[start + k]) - expected))
    }
    return worst
  }

  static func sample(_ event: JSONValue) -> Int { event["sample"]?.int ?? -1 }

  /// Attack, hold and release, each on its curve at every sample, from the events' samples; the
  /// bed sits at exactly the depth between them and exactly at its model value after.
  @Test func attackHoldAndReleaseFollowTheirCurves() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-started", "duck-ended"]])
    let bed = try daemon.constantFile("bed", seconds: 4, left: 1, right: 0)
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    let add = try client.request([
      "cmd": "duck-add", "name": "talk", "targets": ["streams.bed.gain"], "depth": 12, "attack": 0.25,
      "attackCurve": "ease-in", "hold": 0.3, "release": 0.5, "releaseCurve": "qsin",
    ])
    #expect(add.isOK && add.result["replaced"] == false, "\(add.serialized())")
    usleep(200_000)
    #expect(try client.request(["cmd": "duck", "name": "talk"]).isOK)
    usleep(500_000)
    let unduck = try client.request(["cmd": "unduck", "name": "talk"])
    let released = try #require(unduck.result["sample"]?.int)
    let started = Self.sample(try client.waitForEvent { $0["event"] == "duck-started" })
    let ended = Self.sample(try client.waitForEvent { $0["event"] == "duck-ended" })
    #expect(started >= 0 && ended > released)
    let list = try client.request(["cmd": "duck-list"])
    #expect(
      list.result["ducks"]?.arrayValue?.first?["phase"] == "idle"
        && list.result["ducks"]?.arrayValue?.first?["level"] == 1)
    usleep(400_000)
    daemon.stop()

    let left = try daemon.played(channel: 0)
    try #require(started > 0 && ended + 4_800 < left.count, "\(started) … \(ended) in \(left.count) samples")
    let depth = pow(10, -12.0 / 20)
    #expect(left[started - 1] == 1, "untouched before the attack")
    let attack = Self.misfit(left, start: started, frames: 12_000, from: 1, to: depth, curve: .easeIn)
    #expect(attack < 1e-6, "attack off its curve by \(attack)")
    let releaseStart = ended - 24_000
    // The hold: from the unduck to the release, at least 0.3 s, at most a block more.
    #expect(releaseStart - released >= 14_400 && releaseStart - released < 14_400 + Self.period)
    let held = left[(started + 12_000)...releaseStart].map { abs(Double($0) - depth) }.max() ?? 1
    #expect(held < 1e-6, "held off the depth by \(held)")
    let release = Self.misfit(left, start: releaseStart, frames: 24_000, from: depth, to: 1, curve: .fade(.qsin))
    #expect(release < 1e-6, "release off its curve by \(release)")
    #expect(left[ended..<(ended + 4_800)].allSatisfy { $0 == 1 }, "exactly the model value after")
  }

  /// A fade on the bed during a duck is heard under it (the fade's curve × the depth), and its
  /// end value is kept after the release: the duck never touched the model value.
  @Test func aFadeOnTheBedDuringADuckIsHeardUnderItAndKept() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-ended", "animation-started"]])
    let bed = try daemon.constantFile("bed", seconds: 4, left: 1, right: 0)
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    #expect(
      try client.request([
        "cmd": "duck-add", "name": "talk", "targets": ["streams.bed.gain"], "depth": 6, "attack": 0.1, "hold": 0,
        "release": 0.2, "releaseCurve": "linear",
      ]).isOK)
    usleep(100_000)
    #expect(try client.request(["cmd": "duck", "name": "talk"]).isOK)
    usleep(300_000)
    let fade = try client.request([
      "cmd": "fade", "key": "streams.bed.gain", "to": 0.5, "duration": 0.4, "curve": "linear",
    ])
    #expect(fade.isOK, "\(fade.serialized())")
    let fadeStart = Self.sample(try client.waitForEvent { $0["event"] == "animation-started" })
    usleep(200_000)
    // Released mid-fade: the release and the fade multiply.
    #expect(try client.request(["cmd": "unduck", "name": "talk"]).isOK)
    let ended = Self.sample(try client.waitForEvent { $0["event"] == "duck-ended" })
    let get = try client.request(["cmd": "get", "key": "streams.bed.gain"])
    #expect(get.result["model"] == 0.5 && get.result["presentation"] == 0.5, "\(get.serialized())")
    usleep(600_000)
    daemon.stop()

    let left = try daemon.played(channel: 0).map(Double.init)
    try #require(fadeStart > 0 && fadeStart + 19_200 < left.count, "\(fadeStart) in \(left.count) samples")
    let depth = pow(10, -6.0 / 20)
    let releaseStart = ended - 9_600
    #expect(releaseStart > fadeStart && releaseStart < fadeStart + 19_200, "released during the fade")
    var worst = 0.0
    for k in 0...19_200 {
      let fadeGain = 1 - 0.5 * Double(k) / 19_200
      let sample = fadeStart + k
      let duck = sample < releaseStart ? depth : min(1, depth + (1 - depth) * Double(sample - releaseStart) / 9_600)
      worst = max(worst, abs(left[sample] - fadeGain * duck))
    }
    #expect(worst < 1e-6, "the fade under the duck is off by \(worst)")
    let after = max(fadeStart + 19_200, ended)
    try #require(after + 9_600 < left.count)
    let off = left[after...(after + 9_600)].firstIndex { $0 != 0.5 }
    #expect(off == nil, "the fade's end value kept; \(off.map { "\($0 - fadeStart): \(left[$0])" } ?? "")")
  }

  /// The ratchet: a thousand duck/unduck pairs sent as fast as the socket takes them, mid-ramp,
  /// with a set on the bed among them; once the last release ends the bed is exactly its model
  /// value, sample for sample.
  @Test func aThousandRapidTriggersLeaveTheBedAtItsModelValue() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-started", "duck-ended"]])
    let bed = try daemon.constantFile("bed", seconds: 6, left: 1, right: 0)
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    #expect(
      try client.request([
        "cmd": "duck-add", "name": "talk", "targets": ["streams.bed.gain", "master.gain"], "depth": 20,
        "attack": 0.03, "hold": 0, "release": 0.03,
      ]).isOK)
    #expect(
      try client.request([
        "cmd": "duck-add", "name": "also", "targets": ["streams.bed.gain"], "depth": 3, "attack": 0.05, "hold": 0.01,
        "release": 0.04,
      ]).isOK)
    usleep(100_000)
    var lines: [String] = []
    for index in 0..<1_000 {
      let rule = index % 3 == 0 ? "also" : "talk"
      lines.append(#"{"id":\#(10_000 + 2 * index),"cmd":"duck","name":"\#(rule)"}"#)
      if index == 500 { lines.append(#"{"id":9999,"cmd":"set","key":"streams.bed.gain","value":0.7,"duration":0}"#) }
      lines.append(#"{"id":\#(10_001 + 2 * index),"cmd":"unduck","name":"\#(rule)"}"#)
      if index % 50 == 49 {
        // In bursts, some mid-ramp (whether a duck and its unduck fall in one block or not).
        try client.send(raw: lines.joined(separator: "\n"))
        lines = []
        usleep(7_000)
      }
      if index == 499 {
        // Once, mid-run, both rules released, a duck held past its attack: it starts and ends
        // whatever the machine's pace.
        usleep(300_000)
        try client.send(raw: #"{"id":8000,"cmd":"duck","name":"also"}"#)
        usleep(150_000)
        try client.send(raw: #"{"id":8001,"cmd":"unduck","name":"also"}"#)
        usleep(50_000)
      }
    }
    var replies = 0
    var events: [JSONValue] = []
    while replies < 2_003 {
      let line = try client.readLine()
      if line["event"] != nil {
        events.append(line)
        continue
      }
      #expect(line.isOK, "\(line.serialized())")
      replies += 1
    }
    // Both rules idle again.
    for _ in 0..<100 {
      let list = try client.request(["cmd": "duck-list"])
      if (list.result["ducks"]?.arrayValue ?? []).allSatisfy({ $0["phase"] == "idle" }) { break }
      usleep(20_000)
    }
    let list = try client.request(["cmd": "duck-list"])
    #expect((list.result["ducks"]?.arrayValue ?? []).allSatisfy { $0["phase"] == "idle" && $0["level"] == 1 })
    let quiet = try client.request(["cmd": "get", "key": "streams.bed.gain"])
    #expect(quiet.result["model"] == 0.7 && quiet.result["presentation"] == 0.7)
    usleep(300_000)
    let status = try client.request(["cmd": "status"])
    let now = try #require(status.result["sample"]?.int)
    daemon.stop()
    let left = try daemon.played(channel: 0)
    events += client.events
    try #require(now - 4_800 < left.count)
    let lastEnd = events.filter { $0["event"] == "duck-ended" }.map(Self.sample).max() ?? 0
    #expect(lastEnd > 0 && lastEnd < now - 9_600)
    #expect(left[lastEnd..<(now - 4_800)].allSatisfy { $0 == Float(0.7) }, "not exactly 0.7 after the last release")
    let started = events.count { $0["event"] == "duck-started" }
    let ended = events.count { $0["event"] == "duck-ended" }
    #expect(started == ended && started >= 1, "\(started) started, \(ended) ended")
    #expect(events.contains { $0["event"] == "duck-started" && $0["rule"] == "also" }, "the held duck started")
  }

  /// A sidechain on the voice stream: silence, then a tone burst. The duck starts within the
  /// detector's delay (RMS: window × (threshold / level)²) plus one block of the burst's first
  /// sample, follows its attack, and releases once the burst is over and the hold has passed.
  @Test func aToneBurstStartsASidechainDuckInTime() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-started", "duck-ended"]])
    let bed = try daemon.constantFile("bed", seconds: 4, left: 1, right: 0)
    // 0.3 s of silence, a 1 kHz burst of amplitude 0.5 for 0.5 s (RMS over both channels 0.25,
    // −12 dBFS), silence.
    let voice = try Self.file(
      daemon, "voice", seconds: 1.5, left: { _ in 0 },
      right: { f in f >= 14_400 && f < 38_400 ? Float(0.5 * cos(2 * Double.pi * 1_000 * Double(f) / 48_000)) : 0 })
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    let add = try client.request([
      "cmd": "duck-add", "name": "mic", "targets": ["streams.bed.gain"], "trigger": "voice", "threshold": -20,
      "detector": "rms", "window": 0.05, "hysteresis": 6, "depth": 10, "attack": 0.1, "attackCurve": "linear",
      "hold": 0.2, "release": 0.3,
    ])
    #expect(add.isOK, "\(add.serialized())")
    usleep(100_000)
    #expect(try client.request(["cmd": "play", "path": .string(voice), "stream": "voice"]).isOK)
    let started = Self.sample(try client.waitForEvent { $0["event"] == "duck-started" })
    let ended = Self.sample(try client.waitForEvent { $0["event"] == "duck-ended" })
    usleep(400_000)
    daemon.stop()

    let left = try daemon.played(channel: 0)
    let right = try daemon.played(channel: 1)
    try #require(started > 0 && ended + 4_800 < left.count, "\(started) … \(ended) in \(left.count) samples")
    let burst = try #require(right.firstIndex { $0 != 0 })
    let burstEnd = try #require(right.lastIndex { $0 != 0 }) + 1
    // RMS 0.25 against a threshold of 0.1: 0.05 s × 0.16 = 384 samples, plus a block at most.
    let delay = started - burst
    #expect(delay >= 383 && delay <= 384 + Self.period, "the duck started \(delay) samples after the burst")
    let depth = pow(10, -10.0 / 20)
    #expect(left[started - 1] == 1)
    let attack = Self.misfit(left, start: started, frames: 4_800, from: 1, to: depth, curve: .linear)
    #expect(attack < 1e-6, "attack off its curve by \(attack)")
    // Released after the burst, its detector's fall and the hold.
    let releaseStart = ended - 14_400
    #expect(releaseStart > burstEnd + 9_600, "released \(releaseStart - burstEnd) samples after the burst")
    #expect(left[ended..<(ended + 4_800)].allSatisfy { $0 == 1 })
  }

  /// A group trigger (`voice*`): any stream whose id starts `voice` ducks the master while it
  /// plays, and the master comes back once none does.
  @Test func aStreamOfTheTriggerGroupDucksWhileItPlays() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-started", "duck-ended", "stream-started"]])
    let bed = try daemon.constantFile("bed", seconds: 3, left: 1, right: 0)
    let voice = try daemon.constantFile("voice", seconds: 0.3, left: 0, right: 0.5)
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    // Past the bed's own declick ramp in.
    usleep(200_000)
    #expect(
      try client.request([
        "cmd": "duck-add", "name": "talk", "targets": ["master.gain"], "trigger": "voice*", "depth": 6,
        "attack": 0.05, "hold": 0.1, "release": 0.1,
      ]).isOK)
    #expect(try client.request(["cmd": "play", "path": .string(voice), "stream": "voice-2"]).isOK)
    let started = Self.sample(try client.waitForEvent { $0["event"] == "duck-started" })
    let ended = Self.sample(try client.waitForEvent { $0["event"] == "duck-ended" })
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1)
    usleep(400_000)
    daemon.stop()
    let left = try daemon.played(channel: 0)
    let right = try daemon.played(channel: 1)
    try #require(started > 0 && ended + 4_800 < left.count, "\(started) … \(ended) in \(left.count) samples")
    let voiceStart = try #require(right.firstIndex { $0 != 0 })
    // The voice's own declick ramp starts at 0: its first audible sample is the next one.
    #expect(started == voiceStart - 1, "the duck started at \(started), the voice at \(voiceStart)")
    let depth = pow(10, -6.0 / 20)
    let attack = Self.misfit(left, start: started, frames: 2_400, from: 1, to: depth, curve: .easeInEaseOut)
    #expect(attack < 1e-6, "attack off its curve by \(attack)")
    #expect(left[ended..<(ended + 4_800)].allSatisfy { $0 == 1 })
  }

  /// `status` shows each duck rule's state as `duck-list` does (under `ducks`), and `rampctl
  /// status` prints it: a rule held down by `duck`, past its attack, is `ducked` at its depth.
  @Test func statusShowsTheDuckRulesWhileTheyDuck() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-started"]])
    let bed = try daemon.constantFile("bed", seconds: 3, left: 1, right: 0)
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    #expect(
      try client.request([
        "cmd": "duck-add", "name": "talk", "targets": ["streams.bed.gain"], "depth": 6, "attack": 0.05,
      ]).isOK)
    #expect(try client.request(["cmd": "duck", "name": "talk"]).isOK)
    let started = Self.sample(try client.waitForEvent { $0["event"] == "duck-started" })
    // Past the attack (2 400 samples) as the output's clock counts.
    var status = try client.request(["cmd": "status"])
    while (status.result["sample"]?.int ?? 0) < started + 4_800 {
      usleep(20_000)
      status = try client.request(["cmd": "status"])
    }
    let ducks = try #require(status.result["ducks"]?.arrayValue, "\(status.serialized())")
    #expect(ducks.count == 1, "\(ducks)")
    let talk = try #require(ducks.first)
    #expect(talk["name"] == "talk" && talk["phase"] == "ducked" && talk["manual"] == true, "\(talk)")
    let level = try #require(talk["level"]?.numberValue)
    #expect(abs(level - pow(10, -6.0 / 20)) < 1e-9, "level \(level)")
    // The same as duck-list shows, but for the level (the clock moved on).
    let listed = try #require(try client.request(["cmd": "duck-list"]).result["ducks"]?.arrayValue?.first)
    #expect(listed == talk, "\(listed) vs \(talk)")

    var environment = childEnvironment
    environment["RAMPD_SOCKET"] = daemon.socket
    let printed = try runProcess(Executables.rampctl, ["status"], environment: environment)
    let row = printed.stdout.split(separator: "\n").first { $0.hasPrefix("talk ") }
    #expect(
      printed.status == 0 && row?.contains("streams.bed.gain") == true && row?.contains("ducked") == true
        && row?.contains("(duck)") == true,
      "\(printed)")
    #expect(try client.request(["cmd": "duck-remove", "name": "talk"]).isOK)
  }

  /// Bad duck requests are refused with the field named, and the daemon plays on.
  @Test func badDuckRequestsAreRefusedWithTheFieldNamed() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let bed = try daemon.constantFile("bed", seconds: 3)
    #expect(try client.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    let cases: [(JSONObject, String, String)] = [
      (["cmd": "duck-add", "targets": ["master.gain"]], "missing-field", "name"),
      (["cmd": "duck-add", "name": "a"], "missing-field", "targets"),
      (["cmd": "duck-add", "name": "a", "targets": []], "invalid-field", "targets"),
      (["cmd": "duck-add", "name": "a", "targets": ["streams.bed.pan"]], "invalid-field", "targets[0]"),
      (["cmd": "duck-add", "name": "a", "targets": [3]], "invalid-field", "targets[0]"),
      (["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "depth": -6], "out-of-range", "depth"),
      (["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "attack": -1], "invalid-field", "attack"),
      (["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "trigger": "a b"], "invalid-field", "trigger"),
      (["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "threshold": -20], "invalid-field", "threshold"),
      (
        ["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "trigger": "v", "window": 0.1], "invalid-field",
        "window"
      ),
      (
        ["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "trigger": "v", "threshold": 3], "out-of-range",
        "threshold"
      ),
      (
        ["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "trigger": "v", "threshold": -20, "window": 9],
        "out-of-range", "window"
      ),
      (
        [
          "cmd": "duck-add", "name": "a", "targets": ["master.gain"], "trigger": "v", "threshold": -20,
          "detector": "avg",
        ], "invalid-field", "detector"
      ),
      (
        ["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "attackCurve": "wobbly"], "invalid-field",
        "attackCurve"
      ),
      (["cmd": "duck-add", "name": "a", "targets": ["master.gain"], "deph": 3], "unknown-field", "deph"),
      (["cmd": "duck", "name": "nope"], "unknown-duck", "name"),
      (["cmd": "unduck"], "missing-field", "name"),
      (["cmd": "duck-remove", "name": "nope"], "unknown-duck", "name"),
    ]
    for (request, code, field) in cases {
      let reply = try client.request(request)
      #expect(
        reply.errorCode == code && reply.errorField == field,
        "\(JSONValue.object(request).serialized()) → \(reply.serialized())")
    }
    let status = try client.request(["cmd": "status"])
    #expect(status.result["streams"]?.arrayValue?.first?["stream"] == "bed", "still playing")
    #expect(try client.request(["cmd": "duck-list"]).result["ducks"] == [])
  }

  /// `[[duck]]` tables are in force from the start; a bad one is refused naming its key.
  @Test func rulesFromTheConfigurationAreInForceFromTheStart() throws {
    let daemon = try DaemonProcess(
      extraConfiguration: """
        [[duck]]
        name = "talk"
        targets = ["streams.bed.gain"]
        trigger = "voice*"
        threshold = -30
        detector = "peak"
        window = "80ms"
        depth = 9
        attack-curve = "ease-out"
        release = "2s"
        """)
    let client = try daemon.client()
    let list = try client.request(["cmd": "duck-list"])
    let rule = try #require(list.result["ducks"]?.arrayValue?.first)
    #expect(rule["name"] == "talk" && rule["trigger"] == "voice*" && rule["detector"] == "peak")
    #expect(rule["window"] == 0.08 && rule["depth"] == 9 && rule["release"] == 2 && rule["attackCurve"] == "ease-out")
    #expect(rule["phase"] == "idle")
    daemon.stop()

    // The effective configuration prints the table, and what it prints reads back the same.
    let printed = try runProcess(
      Executables.rampd, ["--config", "\(daemon.directory)/rampd.toml", "--check-config", "--print"])
    #expect(printed.status == 0 && printed.stdout.contains("[[duck]]"), "\(printed)")
    #expect(printed.stdout.contains(#"attack-curve = "ease-out""#) && printed.stdout.contains("window = 0.08"))
    try printed.stdout.write(toFile: "\(daemon.directory)/printed.toml", atomically: true, encoding: .utf8)
    let reprinted = try runProcess(
      Executables.rampd, ["--config", "\(daemon.directory)/printed.toml", "--check-config", "--print"])
    #expect(reprinted.stdout == printed.stdout, "\(reprinted)")
    try """
    [[duck]]
    name = "talk"
    targets = ["streams.bed.gain"]
    depht = 3
    """.write(toFile: "\(daemon.directory)/bad.toml", atomically: true, encoding: .utf8)
    let checked = try runProcess(Executables.rampd, ["--config", "\(daemon.directory)/bad.toml", "--check-config"])
    let text = checked.stdout + checked.stderr
    #expect(checked.status == 78, "EX_CONFIG")
    #expect(text.contains("bad.toml:4: duck.talk.depht:") && text.contains("did you mean depth"), "\(text)")
  }
}
