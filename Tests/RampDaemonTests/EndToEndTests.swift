import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// The real `rampd` binary on an ALSA `file` PCM, driven over its socket by a plain client; every
/// check reads back the samples that were played. Inputs are constant 1.0 signals, so the samples
/// are the gains themselves.
@Suite struct EndToEndTests {
  /// A fade-in then a fade-out with `then: stop`: each ramp is the curve at every sample, and the
  /// stream is released when the fade-out is over.
  @Test func fadeInThenFadeOutAndStopIsTheCurveAtEverySample() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    #expect(client.greeting["hello"] == "rampd" && client.greeting["protocol"] == 1)
    try client.request(["cmd": "subscribe"])
    let file = try daemon.constantFile("one", seconds: 3)
    let play = try client.request([
      "cmd": "play", "path": .string(file), "stream": "a", "fadeIn": 0.2, "curve": "linear",
    ])
    #expect(play.isOK, "\(play.serialized())")
    usleep(400_000)
    let fadeOut = try client.request([
      "cmd": "fade-out", "duration": 0.3, "curve": "ease-in-out", "then": "stop",
    ])
    #expect(fadeOut.isOK && fadeOut.result["streams"] == ["a"], "\(fadeOut.serialized())")
    let ended = try client.waitForEvent { $0["event"] == "stream-ended" }
    #expect(ended["reason"] == "stopped" && ended["stream"] == "a")
    let status = try client.request(["cmd": "status"])
    #expect(status.result["streams"] == [], "the stream is released")
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1, "master untouched")
    daemon.stop()

    let left = try daemon.played(channel: 0)
    let start = try #require(left.firstIndex { $0 > 0 }) - 1
    var worst = 0.0
    for k in 0...9_600 { worst = max(worst, abs(Double(left[start + k]) - Double(k) / 9_600)) }
    #expect(worst < 1e-6, "fade-in off the linear curve by \(worst)")
    // The fade-out, the time-mirrored curve. Its first steps are too small for a float to show,
    // so its start is found as the best fit just before the first sample below 1.
    let visible = try #require(left[(start + 9_601)...].firstIndex { $0 < 1 })
    func misfit(_ fall: Int) -> Double {
      (0...14_400).reduce(0.0) { worst, k in
        max(worst, abs(Double(left[fall + k]) - (1 - TimingFunction.easeInEaseOut.value(at: Double(k) / 14_400))))
      }
    }
    let fall = try #require(((visible - 400)..<visible).min { misfit($0) < misfit($1) })
    #expect(misfit(fall) < 1e-6, "fade-out off the ease-in-out curve by \(misfit(fall))")
    #expect(left[(fall + 14_400)...].allSatisfy { $0 == 0 }, "silent once stopped")
  }

  /// A fade retargeted mid-flight: the audible value is continuous (no step larger than either
  /// ramp's slope) and ends at the new target.
  @Test func aFadeRetargetedMidFlightDoesNotJump() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 3)
    #expect(try client.request(["cmd": "play", "path": .string(file)]).isOK)
    usleep(100_000)
    #expect(try client.request(["cmd": "fade", "to": 0, "duration": 1]).isOK)
    usleep(300_000)
    let retarget = try client.request(["cmd": "fade", "to": 0.8, "duration": 0.5])
    let id = try #require(retarget.result["animation"]?.int)
    let waited = try client.request(["cmd": "wait", "animations": [.integer(id)]])
    #expect(waited.result["animations"] == [["id": .integer(id), "finished": true]])
    usleep(100_000)
    daemon.stop()
    let left = try daemon.played(channel: 0).map(Double.init)
    let first = try #require(left.firstIndex { $0 > 0 })
    // The end is the shutdown fade ([shutdown] fade, 300 ms): left out.
    let end = try #require(left.lastIndex { $0 > 0 }) - 15_000
    let playing = Array(left[(first + 480)..<end])
    let steepest = zip(playing, playing.dropFirst()).map { abs($1 - $0) }.max() ?? 1
    // Down at 1/48000 per sample, back up at (0.8 - ~0.7)/24000: never more than 1/24000.
    #expect(steepest < 1.0 / 24_000, "largest step \(steepest)")
    let lowest = try #require(playing.min())
    #expect(lowest > 0.6 && lowest < 0.75, "turned around near 0.7, at \(lowest)")
    #expect(abs(playing[playing.count - 100] - 0.8) < 1e-6, "settled at the new target")
  }

  /// A batch crossfade: the fade-out of one stream and the fade-in of the other start on the same
  /// sample (one plays on the left channel only, the other on the right).
  @Test func aBatchCrossfadeStartsBothRampsOnTheSameSample() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    let left = try daemon.constantFile("left", seconds: 2, left: 1, right: 0)
    let right = try daemon.constantFile("right", seconds: 2, left: 0, right: 1)
    #expect(try client.request(["cmd": "play", "path": .string(left), "stream": "l"]).isOK)
    #expect(try client.request(["cmd": "play", "path": .string(right), "stream": "r", "gain": 0]).isOK)
    usleep(200_000)
    let batch = try client.request([
      "cmd": "batch",
      "commands": [
        ["cmd": "fade", "key": "streams.l.gain", "to": 0, "duration": 0.25],
        ["cmd": "fade", "key": "streams.r.gain", "to": 1, "duration": 0.25],
      ],
    ])
    #expect(batch.isOK, "\(batch.serialized())")
    usleep(400_000)
    daemon.stop()
    let l = try daemon.played(channel: 0)
    let r = try daemon.played(channel: 1)
    let lStart = try #require(l.firstIndex { $0 > 0 })
    let lFalls = try #require(l[(lStart + 480)...].firstIndex { $0 < 1 })
    let rRises = try #require(r.firstIndex { $0 > 0 })
    #expect(lFalls == rRises, "fade-out starts at \(lFalls), fade-in at \(rRises)")
    for k in stride(from: 0, to: 12_000, by: 97) {
      #expect(abs(Double(l[lFalls + k]) + Double(r[rRises + k]) - 1) < 1e-6, "equal-sum crossfade at \(k)")
    }
  }

  /// A batch with one bad command applies nothing and names the command at fault.
  @Test func aBatchWithABadCommandAppliesNothing() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let reply = try client.request([
      "cmd": "batch",
      "commands": [
        ["cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0],
        ["cmd": "fade", "key": "streams.nope.gain", "to": 1],
      ],
    ])
    #expect(reply.errorCode == "unknown-key-path" && reply.errorField == "commands[1].key", "\(reply.serialized())")
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1, "the set did not apply")
  }

  /// `wait` replies after the animation-finished event, and events come in the order things
  /// happened: started, then finished.
  @Test func waitAndEventsArriveInOrder() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["animation-started", "animation-finished"]])
    let fade = try client.request(["cmd": "fade", "to": 0.5, "duration": 0.2])
    let id = try #require(fade.result["animation"])
    let waited = try client.request(["cmd": "wait", "key": "master.gain"])
    #expect(waited.isOK)
    let names = client.events.map { $0["event"]?.stringValue ?? "" }
    #expect(names == ["animation-started", "animation-finished"], "\(names)")
    #expect(client.events.allSatisfy { $0["id"] == id })
    #expect(client.events.last?["finished"] == true)
    let started = try #require(client.events.first?["sample"]?.int)
    let finished = try #require(client.events.last?["sample"]?.int)
    #expect(finished - started == 9_600, "0.2 s at 48 kHz")
  }

  /// A later command on a key path supersedes what runs there, whatever its kind, and says so:
  /// `list` shows what moves the key path, the earlier animation's `animation-finished` says
  /// `superseded` and by which, and a `wait` on it is answered finished: false. An additive one
  /// goes on; `remove` says `removed`; a completed one says `completed`.
  @Test func aLaterCommandSupersedesAndSaysSo() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["animation-finished"]])
    let fade = try client.request(["cmd": "fade-out", "duration": 3])
    let fadeID = try #require(fade.result["animation"])
    let tremolo = try client.request([
      "cmd": "animate", "key": "master.gain", "name": "tremolo",
      "animation": [
        "type": "keyframe", "values": [0, -0.1, 0], "duration": 0.2, "additive": true, "repeatCount": "inf",
      ],
    ])
    let tremoloID = try #require(tremolo.result["animation"])
    let listed = try client.request(["cmd": "list", "prefix": "master.gain"])
    let names = listed.result["properties"]?.arrayValue?.first?["animations"]?.arrayValue?.compactMap {
      $0["name"]?.stringValue
    }
    #expect(names == ["fade", "tremolo"], "\(listed.serialized())")
    usleep(300_000)
    let set = try client.request(["cmd": "set", "key": "master.gain", "value": 0.8, "duration": 0.1])
    let setID = try #require(set.result["animation"])
    let superseded = try client.waitForEvent(timeout: 5) { $0["event"] == "animation-finished" && $0["id"] == fadeID }
    #expect(superseded["finished"] == false && superseded["reason"] == "superseded", "\(superseded.serialized())")
    #expect(superseded["by"] == setID, "\(superseded.serialized())")
    let waited = try client.request(["cmd": "wait", "animations": [fadeID], "timeout": 2])
    #expect(waited.isOK, "\(waited.serialized())")
    let done = try client.waitForEvent(timeout: 5) { $0["event"] == "animation-finished" && $0["id"] == setID }
    #expect(done["reason"] == "completed" && done["finished"] == true, "\(done.serialized())")
    // Held at 0.8 under the tremolo, which still runs: the fade did not come back.
    usleep(3_000_000)
    let after = try client.request(["cmd": "list", "prefix": "master.gain"])
    #expect(after.result["properties"]?.arrayValue?.first?["model"] == 0.8, "\(after.serialized())")
    #expect(
      after.result["properties"]?.arrayValue?.first?["animations"]?.arrayValue?.map { $0["id"] } == [tremoloID],
      "\(after.serialized())")
    #expect(try client.request(["cmd": "remove", "key": "master.gain", "name": "tremolo"]).isOK)
    let removed = try client.waitForEvent(timeout: 5) { $0["event"] == "animation-finished" && $0["id"] == tremoloID }
    #expect(removed["reason"] == "removed", "\(removed.serialized())")
  }

  /// A play with the id of a stream still in its stop ramp is refused as such, not as "already
  /// playing"; once the stream has ended the id is free.
  @Test func aPlayOverAStreamBeingStoppedSaysSo() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let file = try daemon.constantFile("tone", seconds: 10)
    try client.request(["cmd": "subscribe", "events": ["stream-ended"]])
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "x"]).isOK)
    let playing = try client.request(["cmd": "play", "path": .string(file), "stream": "x"])
    #expect(playing.errorCode == "stream-exists" && playing.errorMessage?.contains("already playing") == true)
    // Stopped only once it is heard: a stream stopped before its first sample is heard has no
    // level to ramp down from and ends at once, which a loaded machine made happen here.
    let deadline = Date().addingTimeInterval(10)
    while Date() < deadline {
      let streams = try client.request(["cmd": "status"]).result["streams"]?.arrayValue ?? []
      if let position = streams.first(where: { $0["stream"] == "x" })?["position"]?.numberValue, position > 0.1 {
        break
      }
      usleep(20_000)
    }
    // A stop ramp long enough that a descheduled test thread still sends the next play inside it.
    #expect(try client.request(["cmd": "stop", "stream": "x", "fade": 3]).isOK)
    let stopping = try client.request(["cmd": "play", "path": .string(file), "stream": "x"])
    #expect(stopping.errorCode == "stream-exists", "\(stopping.serialized())")
    #expect(stopping.errorMessage?.contains("still stopping") == true, "\(stopping.serialized())")
    _ = try client.waitForEvent(timeout: 10) { $0["event"] == "stream-ended" && $0["stream"] == "x" }
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "x"]).isOK)
  }

  /// A client's animation is a client's whatever its name: one named like the daemon's own
  /// smoothing ramps ends with its animation-finished event, as any other does.
  @Test func anAnimationNamedDeclickFinishesLikeAnyOther() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["animation-finished"]])
    for name in ["declickX", "declick", "declick-1"] {
      let animate = try client.request([
        "cmd": "animate", "key": "master.gain", "name": .string(name),
        "animation": ["type": "basic", "to": 0.5, "duration": 0.05],
      ])
      let id = try #require(animate.result["animation"], "\(animate.serialized())")
      let finished = try client.waitForEvent(timeout: 5) { $0["event"] == "animation-finished" && $0["id"] == id }
      #expect(finished["name"]?.stringValue == name && finished["finished"] == true, "\(finished.serialized())")
      let waited = try client.request(["cmd": "wait", "animations": [id], "timeout": 2])
      #expect(waited.isOK && waited.result["animations"] == [], "\(waited.serialized())")
    }
  }

  /// Observed values are the values that were played, at the samples they name.
  @Test func observedValuesMatchWhatWasPlayed() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 2)
    #expect(try client.request(["cmd": "play", "path": .string(file)]).isOK)
    #expect(try client.request(["cmd": "observe", "key": "master.gain", "rate": 100]).isOK)
    usleep(100_000)
    #expect(try client.request(["cmd": "fade", "to": 0.2, "duration": 0.5, "curve": "ease-in"]).isOK)
    usleep(700_000)
    #expect(try client.request(["cmd": "unobserve"]).isOK)
    daemon.stop()
    let values = client.events.filter { $0["event"] == "value" }
    #expect(values.count >= 20, "\(values.count) values observed")
    let left = try daemon.played(channel: 0)
    // The stream itself ramps in over the 480-sample declick: compare once it is at full level.
    let full = try #require(left.firstIndex { $0 > 0 }) + 480
    var worst = 0.0
    var inTheFade = 0
    for value in values {
      let sample = try #require(value["sample"]?.int)
      let observed = try #require(value["value"]?.numberValue)
      guard sample >= full, sample < left.count else { continue }
      worst = max(worst, abs(Double(left[sample]) - observed))
      if observed > 0.2 && observed < 1 { inTheFade += 1 }
    }
    #expect(worst < 1e-6, "observed values off the played samples by \(worst)")
    #expect(inTheFade >= 10, "values during the fade: \(inTheFade)")
  }

  /// A command scheduled with `at` takes effect at the sample it names, relative to when it was
  /// received: the reply comes when it applies.
  /// An instant set of master.gain is answered before the render thread runs it; pipelined
  /// behind and ahead of commands that wait for the render thread, replies still come in request
  /// order, and each `get` sees the set before it.
  @Test func earlyAnswersKeepRequestOrder() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    var lines: [String] = []
    var expected: [Int: Double] = [:]
    for round in 0..<50 {
      let value = Double(round % 10) / 10
      lines.append(#"{"id":\#(3 * round),"cmd":"set","key":"master.gain","value":\#(value),"duration":0}"#)
      lines.append(#"{"id":\#(3 * round + 1),"cmd":"get","key":"master.gain"}"#)
      lines.append(#"{"id":\#(3 * round + 2),"cmd":"set","key":"master.gain","value":\#(1 - value),"duration":0}"#)
      expected[3 * round + 1] = value
    }
    try client.send(raw: lines.joined(separator: "\n"))
    for id in 0..<150 {
      let reply = try client.readLine()
      #expect(reply["id"] == .integer(id) && reply.isOK, "reply \(id): \(reply.serialized())")
      if let value = expected[id] { #expect(reply.result["model"]?.numberValue == value, "\(reply.serialized())") }
    }
    let final = try client.request(["cmd": "get", "key": "master.gain"])
    #expect(final.result["model"]?.numberValue == 1 - 0.9 && final.result["presentation"]?.numberValue == 1 - 0.9)
  }

  @Test func aScheduledSetLandsLater() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 2)
    #expect(try client.request(["cmd": "play", "path": .string(file)]).isOK)
    let before = try #require(try client.request(["cmd": "status"]).result["sample"]?.int)
    let sent = Date()
    let reply = try client.request(["cmd": "set", "key": "master.gain", "value": 0.25, "duration": 0, "at": 0.3])
    let elapsed = Date().timeIntervalSince(sent)
    #expect(reply.isOK && elapsed > 0.25, "replied after \(elapsed) s")
    usleep(100_000)
    daemon.stop()
    let left = try daemon.played(channel: 0)
    let playing = try #require(left.firstIndex { $0 == 1 })
    let changed = try #require(left[playing...].firstIndex { $0 == 0.25 })
    #expect(left[changed - 1] == 1)
    // `at` is when the change is heard: the status sample is the next block to be rendered, up
    // to a buffer (2400 frames) ahead of the sample heard then.
    let late = changed - before - 14_400
    #expect(late > -2_400 && late < 2_400, "applied \(late) samples after 0.3 s from the status sample")
  }
}

/// Every kind of bad input gets its documented error code, names the field at fault, and loses
/// nothing: the stream playing throughout is never interrupted and the daemon keeps serving.
@Suite struct BadInputTests {
  @Test func badRequestsAreRefusedWhileAudioPlaysOn() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 3)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "keep"]).isOK)
    usleep(100_000)
    let raw: [(String, String, String?)] = [
      ("{\"cmd\": \"ping\"", "bad-json", nil),
      ("{\"cmd\": \"fade\", \"to\": NaN}", "bad-json", nil),
      ("[1, 2]", "bad-request", nil),
      ("{\"id\": 1}", "bad-request", "cmd"),
    ]
    for (line, code, field) in raw {
      try client.send(raw: line)
      let reply = try client.readLine()
      #expect(reply.errorCode == code && reply.errorField == field, "\(line) → \(reply.serialized())")
    }
    let cases: [(JSONObject, String, String)] = [
      (["cmd": "fadee"], "unknown-command", "cmd"),
      (["cmd": "fade", "duration": 1], "missing-field", "to"),
      (["cmd": "fade", "to": "loud"], "invalid-field", "to"),
      (["cmd": "fade", "to": 0.5, "duration": -1], "invalid-field", "duration"),
      (["cmd": "fade", "to": 0.5, "durration": 1], "unknown-field", "durration"),
      (["cmd": "fade", "to": 0.5, "curve": "cubic-bezier(2,0,1,1)"], "invalid-field", "curve"),
      (["cmd": "fade", "to": 2], "out-of-range", "to"),
      (["cmd": "set", "key": "master.gain", "value": 1.5], "out-of-range", "value"),
      (["cmd": "play", "path": .string(file), "gain": 4], "out-of-range", "gain"),
      (["cmd": "fade", "key": "streams.nope.gain", "to": 0], "unknown-key-path", "key"),
      (["cmd": "fade", "key": "master..gain", "to": 0], "invalid-field", "key"),
      (["cmd": "get", "key": "streams.keep.transport"], "unknown-key-path", "key"),
      (["cmd": "play", "path": "/nonexistent/song.flac"], "file-error", "path"),
      (["cmd": "play", "path": "relative.wav"], "forbidden-path", "path"),
      (["cmd": "play", "path": .string(file), "stream": "keep"], "stream-exists", "stream"),
      (["cmd": "seek", "stream": "ghost", "position": 1], "unknown-stream", "stream"),
      (["cmd": "remove", "key": "master.gain", "name": "nothing"], "unknown-animation", "name"),
      (["cmd": "observe", "key": "master.gain", "rate": 5000], "out-of-range", "rate"),
      (["cmd": "wait"], "invalid-field", "animations"),
      (["cmd": "subscribe", "at": 1], "invalid-field", "at"),
      (["cmd": "observe", "key": "master.gain", "at": 1], "invalid-field", "at"),
      (["cmd": "observe", "key": "streams.keep.transport"], "unknown-key-path", "key"),
      (["cmd": "fade", "key": "streams.keep.pan", "from": -5, "to": 0], "out-of-range", "from"),
      (
        ["cmd": "animate", "key": "master.gain", "animation": ["type": "keyframe", "values": []]], "invalid-field",
        "animation.values"
      ),
    ]
    for (request, code, field) in cases {
      let reply = try client.request(request)
      #expect(reply.errorCode == code, "\(JSONValue.object(request).serialized()) → \(reply.serialized())")
      #expect(reply.errorField == field, "\(JSONValue.object(request).serialized()) → \(reply.serialized())")
      let message = reply["error"]?["message"]?.stringValue ?? ""
      #expect(message.count > 5, "a message that says what is wrong")
    }
    // Still serving, still playing.
    #expect(try client.request(["cmd": "ping"]).isOK)
    let status = try client.request(["cmd": "status"])
    #expect(status.result["streams"]?.arrayValue?.count == 1)
    // Not `underruns`: with clock pacing it counts late wake-ups too, which a loaded machine
    // causes whatever the requests; what was played is the check.
    daemon.stop()
    let left = try daemon.played(channel: 0)
    let first = try #require(left.firstIndex { $0 == 1 })
    let last = try #require(left.lastIndex { $0 == 1 })
    #expect(left[first...last].allSatisfy { $0 == 1 }, "the stream played on, unbroken")
  }

  /// A gain above `gain.max` by no more than a rounding error (a level in dB converted on another
  /// path) is the maximum: `play`, `fade` and `set` take it, and the model reads the maximum. The
  /// engine, which holds a property to its range, refused the `play`.
  @Test func aGainARoundingErrorAboveTheMaximumIsTheMaximum() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let file = try daemon.constantFile("hair", seconds: 1, left: 0.5, right: 0.5)
    let hair = JSONValue.number(1.000_000_000_000_1)
    let requests: [(JSONObject, String)] = [
      (["cmd": "play", "path": .string(file), "stream": "s", "gain": hair, "loop": true], "streams.s.gain"),
      (["cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0], "master.gain"),
      (["cmd": "set", "key": "master.gain", "value": hair, "duration": 0], "master.gain"),
      (["cmd": "fade", "key": "streams.s.gain", "to": 0.5, "duration": 0], "streams.s.gain"),
      (["cmd": "fade", "key": "streams.s.gain", "from": hair, "to": hair, "duration": 0.05], "streams.s.gain"),
    ]
    for (request, key) in requests {
      let reply = try client.request(request)
      #expect(reply.isOK, "\(JSONValue.object(request).serialized()) → \(reply.serialized())")
      guard request["to"] != 0.5 && request["value"] != 0.5 else { continue }
      usleep(100_000)
      let model = try client.request(["cmd": "get", "key": .string(key)]).result["model"]
      #expect(model == 1, "\(JSONValue.object(request).serialized()) → \(key) \(model?.serialized() ?? "")")
    }
    #expect(daemon.stop() == 0)
  }

  /// A line longer than limits.line-length gets `line-too-long` and the connection is closed; other
  /// clients are unaffected.
  @Test func anOverlongLineClosesOnlyThatConnection() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[limits]\nline-length = 1024")
    let greedy = try daemon.client()
    let other = try daemon.client()
    try greedy.send(raw: String(repeating: "x", count: 5_000))
    let reply = try greedy.readLine()
    #expect(reply.errorCode == "line-too-long", "\(reply.serialized())")
    #expect(greedy.isClosedByPeer())
    #expect(try other.request(["cmd": "ping"]).isOK)
  }

  /// Beyond limits.clients a new connection gets `limit-exceeded` and is closed.
  @Test func connectionsBeyondTheLimitAreTurnedAway() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[limits]\nclients = 2")
    let first = try daemon.client()
    let second = try daemon.client()
    let refusal = try #require(throws: HarnessError.self) { _ = try daemon.client() }
    #expect(refusal.description.contains("limit-exceeded"), "\(refusal)")
    #expect(try first.request(["cmd": "ping"]).isOK && second.request(["cmd": "ping"]).isOK)
  }

  /// A subscriber that never reads does not hold up the daemon or other clients.
  @Test func aStuckSubscriberDoesNotBlockOthers() throws {
    let daemon = try DaemonProcess()
    let stuck = try daemon.client()
    try stuck.request(["cmd": "subscribe"])
    _ = try stuck.request(["cmd": "observe", "key": "master.gain", "rate": 200])
    let busy = try daemon.client()
    let started = Date()
    // Many events for the stuck client to ignore: every fade starts and replaces one.
    for index in 0..<400 {
      let reply = try busy.request(["cmd": "fade", "to": .number(Double(index % 2)), "duration": 0.05])
      #expect(reply.isOK)
    }
    #expect(Date().timeIntervalSince(started) < 20, "the busy client was not held up")
    #expect(try busy.request(["cmd": "ping"]).isOK)
  }
}

/// A `[[mixer]]` binding: `mixers.<name>.volume` ramps drive a real ALSA control (the recording
/// control plugin in Tests/Fixtures) at the binding's control rate, in dB steps.
@Suite struct MixerBindingEndToEndTests {
  @Test func aFadeOnAMixerKeyPathWritesTheElementAtControlRate() throws {
    let scratch = NSTemporaryDirectory() + "rampd-e2e-mixer-\(getpid())"
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    let library = "\(scratch)/libasound_module_ctl_recorder.so"
    try Fixture.compile("ctl_recorder.c", to: library)
    let log = "\(scratch)/writes.log"
    try? FileManager.default.removeItem(atPath: log)
    let daemon = try DaemonProcess(
      extraConfiguration: """
        [[mixer]]
        name = "amp"
        card = "rampd_e2e_ctl"
        element = "Master"
        rate = 50
        """,
      extraALSA: """
        ctl_type.recorder { lib "\(library)" }
        ctl.rampd_e2e_ctl { type recorder; log "\(log)" }
        """)
    let client = try daemon.client()
    let list = try client.request(["cmd": "list", "prefix": "mixers"])
    #expect(list.result["properties"]?.arrayValue?.first?["key"] == "mixers.amp.volume", "\(list.serialized())")
    let fade = try client.request(["cmd": "fade", "key": "mixers.amp.volume", "to": 0.1, "duration": 0.4])
    #expect(fade.isOK, "\(fade.serialized())")
    try client.request(["cmd": "wait", "key": "mixers.amp.volume"])
    usleep(100_000)
    daemon.stop()
    let writes = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").compactMap { Int($0) }
    // 0.4 s at 50 Hz: about 20 writes, each lower than the last, ending at -20 dB (0.1): raw 155 of
    // 0...255 over -51...0 dB.
    #expect((12...24).contains(writes.count), "\(writes)")
    #expect(zip(writes, writes.dropFirst()).allSatisfy { $0 > $1 }, "\(writes)")
    #expect(writes.last == 155, "\(writes)")
  }
}

/// Edge cases of time: seeking to the end ends the stream (past it is refused); waiting on an
/// animation held past its end by fillMode forwards replies at once.
@Suite struct TimeEdgeTests {
  @Test func seekingToTheEndFinishesTheStream() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["stream-ended"]])
    let file = try daemon.constantFile("one", seconds: 1)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "x"]).isOK)
    #expect(try client.request(["cmd": "seek", "stream": "x", "position": 99]).errorCode == "out-of-range")
    #expect(try client.request(["cmd": "seek", "stream": "x", "position": 1]).isOK)
    let ended = try client.waitForEvent(timeout: 3) { $0["event"] == "stream-ended" }
    #expect(ended["reason"] == "finished")
  }

  @Test func waitingOnAHeldAnimationRepliesAtOnce() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let animate = try client.request([
      "cmd": "animate", "key": "master.gain",
      "animation": [
        "type": "basic", "to": 0.5, "duration": 0.05, "fillMode": "forwards", "removedOnCompletion": false,
      ],
    ])
    let id = try #require(animate.result["animation"])
    usleep(200_000)
    let waited = try client.request(["cmd": "wait", "animations": [id], "timeout": 2])
    #expect(waited.isOK && waited.result["animations"] == [], "\(waited.serialized())")
  }
}

/// The rampd executable's own interface: configuration checking and the embedded output.
@Suite struct RampdExecutableTests {
  func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: Executables.rampd)
    process.arguments = arguments
    var merged = childEnvironment
    merged.merge(environment) { $1 }
    process.environment = merged
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
  }

  @Test func checkConfigNamesTheFileLineAndKeyOfAnError() throws {
    let path = NSTemporaryDirectory() + "rampd-check-\(getpid()).toml"
    try "[output]\nrate = 48000\nchannels = 99\n".write(toFile: path, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: path) }
    let bad = try run(["--config", path, "--check-config"])
    #expect(bad.status == 78, "EX_CONFIG")
    #expect(bad.output.contains("\(path):3: output.channels:"), "\(bad.output)")
    let flag = try run(["--check-config", "--device", ""])
    #expect(flag.status == 78 && flag.output.contains("--device"), "\(flag.output)")
    let good = try run(["--check-config", "--print", "--device", "hw:1"])
    #expect(good.status == 0 && good.output.contains("device = \"hw:1\""), "\(good.output)")
    let help = try run(["--help"])
    #expect(help.status == 0 && help.output.contains("--check-config"))
  }

  /// rampd on the embedded output (there is no device `rampd_no_such_device`), its socket in
  /// `directory`, with these `RAMPD_` variables and no others; returns once the socket is there.
  func startWithoutADevice(in directory: String, file: String, environment extra: [String: String] = [:]) throws
    -> Process
  {
    try startRampdWithoutADevice(in: directory, file: file, environment: extra)
  }

  /// The tests' own knobs (`RAMPD_FUZZ=0 script/test`, `RAMPD_TEST_SEED`, `RAMPD_TEST_BINARY`)
  /// never reach a rampd the harness starts: rampd refuses a `RAMPD_` variable it does not own
  /// (exit 78), so the harness starts it without them. (`RAMPD_FUZZ=0 swift test --filter
  /// DuckTests` is the case as run.)
  @Test func theTestsOwnVariablesDoNotReachRampd() throws {
    let knobs = ["RAMPD_FUZZ": "0", "RAMPD_TEST_SEED": "7", "RAMPD_TEST_BINARY": Executables.rampd]
    let tests = ProcessInfo.processInfo.environment.merging(knobs) { $1 }
    for (name, value) in knobs {
      let leaked = try runProcess(
        Executables.rampd, ["--check-config"], environment: childEnvironment.merging([name: value]) { $1 })
      #expect(leaked.status == 78 && (leaked.stdout + leaked.stderr).contains(name), "rampd refuses \(name): \(leaked)")
    }
    let started = try runProcess(Executables.rampd, ["--check-config"], environment: withoutRampdVariables(tests))
    #expect(started.status == 0, "\(started)")
    #expect(!childEnvironment.keys.contains { $0.hasPrefix("RAMPD_") })
  }

  /// Two daemons of one user, each on a socket of its own: each writes its embedded WAV file
  /// beside its socket, not both into the runtime directory (where the second found the first's
  /// file locked and did not start).
  @Test func aDaemonOnItsOwnSocketKeepsItsEmbeddedFileBesideIt() throws {
    let directory = NSTemporaryDirectory() + "rampd-own-socket-\(getpid())"
    let runtime = "\(directory)/runtime"
    try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var daemons: [Process] = []
    defer { for process in daemons where process.isRunning { process.terminate() } }
    for name in ["one", "two"] {
      let own = "\(directory)/\(name)"
      try FileManager.default.createDirectory(atPath: own, withIntermediateDirectories: true)
      let process = try startRampdWithoutADevice(in: own, file: nil, environment: ["XDG_RUNTIME_DIR": runtime])
      daemons.append(process)
      #expect(process.isRunning, "\(name) started")
      let output = try LineClient(path: "\(own)/s.sock").request(["cmd": "status"]).result["output"]
      #expect(output?["file"] == .string("\(own)/output.wav"), "\(output ?? .null)")
    }
    #expect(!FileManager.default.fileExists(atPath: "\(runtime)/rampd/output.wav"))
  }

  /// The default device on a machine without a sound card: alsa-lib's own error lines (`ALSA lib
  /// confmisc.c:855:(parse_card) cannot find card '0'`, eight of them) do not reach standard
  /// error; rampd's warning does, and at debug level the log holds alsa-lib's messages.
  @Test func withoutACardOnlyRampdsOwnWarningIsPrinted() throws {
    let directory = NSTemporaryDirectory() + "rampd-no-card-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    // ALSA's configuration as on a machine without a card: alsa.conf without the files its hooks
    // load (a desktop's PipeWire or PulseAudio default), and a card that no machine has.
    try AlsaConfiguration.withoutHooks().write(toFile: "\(directory)/alsa.conf", atomically: true, encoding: .utf8)
    for level in ["info", "debug"] {
      let log = "\(directory)/\(level).log"
      let process = Process()
      process.executableURL = URL(fileURLWithPath: Executables.rampd)
      process.arguments = [
        "--socket", "\(directory)/s.sock", "--embedded-file", "\(directory)/out.wav", "--log-level", level,
      ]
      process.environment = childEnvironment.merging([
        "RAMPD_STATE_PATH": "\(directory)/state.json", "ALSA_CONFIG_PATH": "\(directory)/alsa.conf",
        "ALSA_CARD": "rampd_no_such_card",
      ]) { $1 }
      _ = FileManager.default.createFile(atPath: log, contents: nil)
      process.standardError = FileHandle(forWritingAtPath: log)
      try process.run()
      for _ in 0..<400 where process.isRunning && (try? LineClient(path: "\(directory)/s.sock")) == nil {
        usleep(10_000)
      }
      process.terminate()
      process.waitUntilExit()
      let text = try String(contentsOfFile: log, encoding: .utf8)
      #expect(!text.contains("ALSA lib"), "\(level):\n\(text)")
      #expect(
        text.contains("output device unavailable; waiting for it, retrying with backoff; playing into a WAV file"),
        "\(level):\n\(text)")
      #expect(
        text.contains("debug alsa-lib: confmisc.c:") == (level == "debug")
          && text.contains("cannot find card 'rampd_no_such_card'") == (level == "debug"), "\(level):\n\(text)")
    }
  }

  /// With no usable device, rampd plays into a WAV file through ALSA's file plugin, in real
  /// time, and says so in `status`. Idle, it writes nothing and its render thread sleeps: a
  /// `status` is answered without waking the output (`idle` stays true), and the file holds
  /// what was played, each idle spell cut short.
  @Test func withoutADeviceItPlaysIntoTheEmbeddedWAVFile() throws {
    let directory = NSTemporaryDirectory() + "rampd-embedded-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let tone = "\(directory)/tone.wav"
    let level: Float = 0.5
    let writer = try SoundFileWriter(path: tone, sampleRate: 48_000, channels: 2, encoding: .float)
    try [Float](repeating: level, count: 48_000).withUnsafeBufferPointer {
      try writer.write($0.baseAddress!, frames: 24_000)
    }
    try writer.close()
    let started = Date()
    let process = try startWithoutADevice(in: directory, file: "\(directory)/out.wav")
    defer { if process.isRunning { process.terminate() } }
    let client = try LineClient(path: "\(directory)/s.sock")
    var output = try client.request(["cmd": "status"]).result["output"]
    #expect(output?["embedded"] == true && output?["file"] == .string("\(directory)/out.wav"), "\(output ?? .null)")
    #expect(output?["requestedDevice"] == "rampd_no_such_device")
    // Waited for all along: attempts made, the next one planned, the reason ALSA's.
    #expect(output?["state"] == "waiting" && output?["waiting"]?["device"] == "rampd_no_such_device")
    #expect((output?["waiting"]?["attempts"]?.int ?? 0) >= 1 && output?["waiting"]?["nextAttempt"] != nil)
    #expect(output?["waiting"]?["error"]?.stringValue?.contains("cannot open for playback") == true)
    // Asked again and again while it goes idle: each answer leaves it idle.
    let deadline = Date().addingTimeInterval(5)
    while output?["idle"] != true && Date() < deadline {
      usleep(50_000)
      output = try client.request(["cmd": "status"]).result["output"]
    }
    #expect(output?["idle"] == true, "\(output ?? .null)")
    let thread = try #require(renderThreadID(of: process.processIdentifier))
    let before = try voluntarySwitches(pid: process.processIdentifier, thread: thread)
    // (The file plugin writes its file in chunks of its own: the size, not the frames, is read.)
    func size() -> Int {
      (try? FileManager.default.attributesOfItem(atPath: "\(directory)/out.wav")[.size] as? Int) ?? 0
    }
    let written = size()
    var attemptsBefore = 0
    for _ in 0..<10 {
      let answer = try client.request(["cmd": "status"]).result["output"]
      #expect(answer?["idle"] == true)
      attemptsBefore = answer?["waiting"]?["attempts"]?.int ?? -1
      usleep(100_000)
    }
    let answering = try voluntarySwitches(pid: process.processIdentifier, thread: thread) - before
    // (The header keeper brings the header up to date within a second of the last write, and
    // sees its own write once.)
    usleep(1_500_000)
    // The thread that tries the configured device again wakes for its attempts only, which
    // `status` counts (nothing that may be the device appears).
    let pid = process.processIdentifier
    let recovery = try #require(threadID(named: "rampd-recovery", of: pid))
    let recoveryBefore = try voluntarySwitches(pid: pid, thread: recovery)
    let everyThread = try voluntarySwitches(pid: pid) - recoveryBefore
    usleep(2_500_000)
    let after = try voluntarySwitches(pid: pid, thread: thread) - before
    #expect(answering <= 10 * 2, "\(answering) wake-ups of the render thread for 10 status requests")
    #expect(after == answering, "\(after - answering) wake-ups in 4 s idle after them")
    // Nor any other thread: the header keeper sleeps while the file does not change.
    let recoveryWoken = try voluntarySwitches(pid: pid, thread: recovery) - recoveryBefore
    let woken = try voluntarySwitches(pid: pid) - recoveryWoken - recoveryBefore - everyThread
    #expect(woken == 0, "\(woken) wake-ups of rampd's threads in 2.5 s idle")
    let attemptsNow = try client.request(["cmd": "status"]).result["output"]?["waiting"]?["attempts"]?.int ?? -1
    let attemptsMade = attemptsNow - attemptsBefore
    #expect(recoveryWoken <= 2 * attemptsMade, "\(recoveryWoken) wake-ups for \(attemptsMade) attempts")
    #expect(size() == written, "\(size() - written) bytes written while idle")
    #expect(try client.request(["cmd": "play", "path": .string(tone), "stream": "t", "fadeIn": 0]).isOK)
    try client.request(["cmd": "subscribe", "events": ["stream-ended"]])
    _ = try client.waitForEvent(timeout: 5) { $0["event"] == "stream-ended" }
    // Its header brought up to date while rampd runs (within a second of the last write).
    usleep(1_300_000)
    let growing = try RampAudio.SoundFileReader(path: "\(directory)/out.wav").frames
    #expect(growing >= 24_000, "the header says \(growing) frames while rampd runs")
    process.terminate()
    process.waitUntilExit()
    let elapsed = Date().timeIntervalSince(started)
    let reader = try RampAudio.SoundFileReader(path: "\(directory)/out.wav")
    let frames = Int(reader.frames)
    let seconds = Double(frames) / Double(reader.sampleRate)
    #expect(reader.sampleRate == 48_000 && reader.channels == 2)
    // The half second played, the silence before the stop and the stop's, not the seconds idle.
    #expect(seconds > 0.5 && seconds < 1.2 && seconds < elapsed - 2, "\(seconds) s written in \(elapsed) s")
    var recorded = [Float](repeating: 0, count: frames * 2)
    let read = try recorded.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: frames) }
    // The tone, sample for sample after its declick ramp (16-bit: within a step). It starts
    // where the recording rises above the dither of the silence before it (±1 step).
    let first = try #require((0..<read).first { abs(recorded[2 * $0]) > 1.5 / 32_768 })
    let steady = (first + 480)..<(first + 24_000 - 1_440)
    #expect(steady.upperBound <= read, "\(read) frames, the tone from \(first)")
    let off = steady.filter { $0 < read && abs(recorded[2 * $0] - level) > 1.0 / 32_768 }
    #expect(off.isEmpty, "\(off.count) frames of the tone are not at \(level), first at \(off.first ?? -1)")
  }

  /// Without a device and with the embedded output disabled, nothing plays and nothing is
  /// written: the render thread sleeps (no wake-up while idle, `status` says idle) and still keeps
  /// time, so a change scheduled across the idle spell ends when it should.
  @Test func withoutADeviceOrEmbeddedOutputIdleSleepsAndKeepsTime() throws {
    let directory = NSTemporaryDirectory() + "rampd-no-output-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try """
    [embedded-output]
    enabled = false
    """.write(toFile: "\(directory)/rampd.toml", atomically: true, encoding: .utf8)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: Executables.rampd)
    process.arguments = [
      "--config", "\(directory)/rampd.toml", "--socket", "\(directory)/s.sock", "--device", "rampd_no_such_device",
    ]
    process.environment = childEnvironment.merging([
      "RAMPD_STATE_PATH": "\(directory)/state.json"
    ]) { $1 }
    process.standardError = FileHandle.nullDevice
    try process.run()
    defer { if process.isRunning { process.terminate() } }
    for _ in 0..<400 where process.isRunning && (try? LineClient(path: "\(directory)/s.sock")) == nil { usleep(10_000) }
    let client = try LineClient(path: "\(directory)/s.sock")
    var output = try client.request(["cmd": "status"]).result["output"]
    #expect(output?["state"] == "waiting" && output?["embedded"] != true, "\(output ?? .null)")
    let deadline = Date().addingTimeInterval(5)
    while output?["idle"] != true && Date() < deadline {
      usleep(50_000)
      output = try client.request(["cmd": "status"]).result["output"]
    }
    #expect(output?["idle"] == true, "\(output ?? .null)")
    let pid = process.processIdentifier
    let thread = try #require(renderThreadID(of: pid))
    // The last `status` woke the render thread to answer it.
    let before = try voluntarySwitchesOnceAsleep(pid: pid, thread: thread)
    usleep(2_000_000)
    let woken = try voluntarySwitches(pid: pid, thread: thread) - before
    #expect(woken == 0, "\(woken) wake-ups of the render thread in 2 s idle")
    // Scheduled 1.5 s ahead after 2 s asleep, a half-second fade ends 2 s after it was asked for
    // (a block or a buffer early or late at most).
    try client.request(["cmd": "subscribe", "events": ["animation-finished"]])
    let asked = Date()
    #expect(try client.request(["cmd": "fade", "to": 0.5, "duration": 0.5, "at": 1.5]).isOK)
    let finished = try client.waitForEvent(timeout: 5) { $0["event"] == "animation-finished" }
    let took = Date().timeIntervalSince(asked)
    #expect(finished["finished"] == true && abs(took - 2) < 0.2, "finished after \(took) s: \(finished.serialized())")
    // Idle again once it has ended, and asleep again.
    output = try client.request(["cmd": "status"]).result["output"]
    for _ in 0..<100 where output?["idle"] != true {
      usleep(50_000)
      output = try client.request(["cmd": "status"]).result["output"]
    }
    #expect(output?["idle"] == true, "\(output ?? .null)")
  }

  /// A file that cannot be written again when its time comes (its directory removed) is a device
  /// failure like any other: events and `status` say so, and it recovers once it can be written.
  @Test func anEmbeddedFileThatCannotBeStartedAfreshIsALostDevice() throws {
    let directory = NSTemporaryDirectory() + "rampd-embedded-lost-\(getpid())"
    let wavDirectory = "\(directory)/wav"
    try FileManager.default.createDirectory(atPath: wavDirectory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let process = try startWithoutADevice(
      in: directory, file: "\(wavDirectory)/out.wav",
      environment: ["RAMPD_EMBEDDED_OUTPUT_MAX_DURATION": "1s", "RAMPD_STATE_PATH": "\(directory)/state.json"])
    defer { if process.isRunning { process.terminate() } }
    let client = try LineClient(path: "\(directory)/s.sock")
    try client.request(["cmd": "subscribe"])
    // Something plays (an idle output writes nothing, and would never start a file afresh).
    let tone = "\(directory)/tone.wav"
    let writer = try SoundFileWriter(path: tone, sampleRate: 48_000, channels: 2, encoding: .float)
    try [Float](repeating: 0.5, count: 9_600).withUnsafeBufferPointer {
      try writer.write($0.baseAddress!, frames: 4_800)
    }
    try writer.close()
    #expect(try client.request(["cmd": "play", "path": .string(tone), "stream": "t", "loop": true]).isOK)
    try FileManager.default.removeItem(atPath: wavDirectory)
    _ = try client.waitForEvent(timeout: 5) { $0["event"] == "device-failed" }
    // The file plugin opens its file at the first write: reopening succeeds, playing does not. That
    // is one failure, not a failure and a recovery ten times a second.
    usleep(1_500_000)
    #expect(try client.request(["cmd": "status"]).result["output"]?["state"] == "failed")
    let deviceEvents = client.events.compactMap { $0["event"]?.stringValue }.filter { $0.hasPrefix("device") }
    #expect(deviceEvents == ["device-failed"], "\(deviceEvents)")
    try FileManager.default.createDirectory(atPath: wavDirectory, withIntermediateDirectories: true)
    // Reopened within the backoff's longest wait (2 s), then two buffers later recovered; the
    // device it stands in for is still waited for.
    _ = try client.waitForEvent(timeout: 5) { $0["event"] == "device-recovered" }
    let output = try client.request(["cmd": "status"]).result["output"]
    #expect(output?["state"] == "waiting" && output?["embedded"] == true, "\(output ?? .null)")
    let after = client.events.compactMap { $0["event"]?.stringValue }.filter { $0.hasPrefix("device") }
    #expect(after == ["device-failed", "device-recovered"], "\(after)")
    #expect(FileManager.default.fileExists(atPath: "\(wavDirectory)/out.wav"), "the file is written again")
  }

  /// The embedded WAV holds at most `embedded-output.max-duration` of audio: the device is
  /// reopened then, which starts the file afresh, and a stream plays on into the new file with no
  /// device event. Without it, a daemon left running fills its tmpfs (memory) at 11.5 MB a minute.
  @Test func theEmbeddedWAVFileStartsAfreshAtItsMaximumDuration() throws {
    let directory = NSTemporaryDirectory() + "rampd-embedded-max-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let tone = "\(directory)/tone.wav"
    let writer = try SoundFileWriter(path: tone, sampleRate: 48_000, channels: 2, encoding: .float)
    let level: Float = 0.5
    let toneSamples = [Float](repeating: level, count: 48_000 * 2)
    try toneSamples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 48_000) }
    try writer.close()
    let process = try startWithoutADevice(
      in: directory, file: "\(directory)/out.wav",
      environment: [
        "RAMPD_EMBEDDED_OUTPUT_MAX_DURATION": "1s", "RAMPD_STATE_PATH": "\(directory)/state.json",
        "RAMPD_SHUTDOWN_FADE": "0",
      ])
    defer { if process.isRunning { process.terminate() } }
    let client = try LineClient(path: "\(directory)/s.sock")
    let output = try client.request(["cmd": "status"]).result["output"]
    #expect(output?["maxDuration"] == 1, "\(output ?? .null)")
    try client.request(["cmd": "subscribe"])
    let played = try client.request([
      "cmd": "play", "path": .string(tone), "stream": "t", "loop": true, "fadeIn": 0,
    ])
    #expect(played.isOK, "\(played.serialized())")
    // Half a second into the third file: past two restarts, well before the next. (The files
    // count what was written, from the stream's start: an idle output writes nothing.)
    var status = try client.request(["cmd": "status"]).result
    let start = status["sample"]?.numberValue ?? 0
    let deadline = Date().addingTimeInterval(10)
    while (status["sample"]?.numberValue ?? 0) < start + 2.5 * 48_000 && Date() < deadline {
      usleep(20_000)
      status = try client.request(["cmd": "status"]).result
    }
    #expect(status["output"]?["state"] == "waiting", "\(status.serialized())")
    process.terminate()
    process.waitUntilExit()
    let deviceEvents = client.events.filter { ($0["event"]?.stringValue ?? "").hasPrefix("device") }
    #expect(deviceEvents.isEmpty, "a restart is no device failure: \(deviceEvents.map { $0.serialized() })")

    let reader = try RampAudio.SoundFileReader(path: "\(directory)/out.wav")
    let frames = Int(reader.frames)
    #expect(frames <= 48_000 * 8 / 10, "\(frames) frames: more than the half second since the restart")
    #expect(frames >= 48_000 * 4 / 10, "\(frames) frames: less than the half second since the restart")
    var recorded = [Float](repeating: 0, count: frames * 2)
    let read = try recorded.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: frames) }
    // The stream plays from the file's first sample (it started over a second before) until the
    // shutdown's declick, with a buffer's worth of slack.
    let steady = recorded[..<max(0, (read - 48_000 / 10) * 2)]
    let off = steady.indices.filter { abs(steady[$0] - level) > 1e-3 }
    #expect(
      !steady.isEmpty && off.isEmpty,
      "\(off.count) of \(steady.count) samples are not \(level); first at \(off.first ?? -1)")
  }
}
