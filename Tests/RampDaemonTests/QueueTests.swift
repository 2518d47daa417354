import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// Queue streams through the real `rampd` on an ALSA `file` PCM, sample by sample: gapless
/// items, crossfades on their curve's law, a skip mid-crossfade, a looping queue, the item
/// events and `status`.
@Suite struct QueueTests {
  static let declick = 480

  /// A stereo float WAV of `frames` frames.
  static func file(
    _ daemon: DaemonProcess, _ name: String, frames: Int, left: (Int) -> Float, right: (Int) -> Float
  ) throws -> String {
    try DuckTests.file(daemon, name, frames: frames, left: left, right: right)
  }

  static func sample(_ event: JSONValue) -> Int { event["sample"]?.int ?? -1 }

  /// The item events of `stream` the client has seen, in order.
  static func itemEvents(_ client: LineClient, _ stream: String, _ kind: String) -> [JSONValue] {
    client.events.filter { $0["event"] == .string(kind) && $0["stream"] == .string(stream) }
  }

  /// Three files of odd lengths play one after another: every sample of each, in order, the
  /// next one's first frame right after the last one's last; `status` shows the queue and the
  /// playing item's duration; each item starts and ends with an event at its sample.
  @Test func threeFilesPlayGapless() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "item-ended", "stream-ended"]])
    let lengths = [24_007, 14_413, 19_201]
    let marks: [Float] = [0.125, 0.25, 0.375]
    var paths: [String] = []
    for (index, length) in lengths.enumerated() {
      paths.append(
        try Self.file(
          daemon, "item\(index)", frames: length, left: { Float($0 + 1) / Float(length) }, right: { _ in marks[index] })
      )
    }
    let play = try client.request([
      "cmd": "play", "path": .string(paths[0]), "stream": "music",
      "queue": .array(paths.dropFirst().map(JSONValue.string)),
    ])
    #expect(play.isOK, "\(play.serialized())")
    let status = try client.request(["cmd": "status"])
    let row = status.result["streams"]?.arrayValue?.first { $0["stream"] == "music" }
    #expect(row?["queue"]?["items"]?.arrayValue?.count == 3, "\(status.serialized())")
    #expect(row?["queue"]?["current"] == 0)
    #expect(abs((row?["duration"]?.numberValue ?? 0) - Double(lengths[0]) / 48_000) < 1e-9)
    let list = try client.request(["cmd": "queue-list", "stream": "music"])
    #expect(list.result["queue"]?["items"]?.arrayValue?.last?["path"] == .string(paths[2]), "\(list.serialized())")
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    usleep(100_000)
    daemon.stop()

    let started = Self.itemEvents(client, "music", "item-started")
    let ended = Self.itemEvents(client, "music", "item-ended")
    try #require(started.count == 3 && ended.count == 3, "\(client.events.map { $0.serialized() })")
    #expect(started.map { $0["path"] } == paths.map(JSONValue.string))
    #expect(ended.allSatisfy { $0["reason"] == "finished" })
    let left = try daemon.played(channel: 0)
    let right = try daemon.played(channel: 1)
    var start = Self.sample(started[0])
    for (index, length) in lengths.enumerated() {
      #expect(Self.sample(started[index]) == start, "item \(index) starts right after the one before")
      #expect(Self.sample(ended[index]) == start + length, "item \(index) ends after its last frame")
      try #require(start + length <= left.count)
      // The stream's first frames ramp in (the declick); after that, every sample as in the file.
      let first = index == 0 ? Self.declick : 0
      let wrong = (first..<length).first { frame in
        left[start + frame] != Float(frame + 1) / Float(length) || right[start + frame] != marks[index]
      }
      #expect(
        wrong == nil, "item \(index) frame \(wrong ?? -1): \(wrong.map { (left[start + $0], right[start + $0]) })")
      start += length
    }
    #expect(left[start..<min(start + 4_800, left.count)].allSatisfy { $0 == 0 }, "silence after the last item")
  }

  /// A daemon, a client that hears each item start and each stream end, and two 0.6 s files,
  /// `a` and `b`, each constant at its (left, right) levels.
  static func twoItems(a: (Float, Float), b: (Float, Float)) throws -> (DaemonProcess, LineClient, String, String) {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "stream-ended"]])
    let first = try daemon.constantFile("a", seconds: 0.6, left: a.0, right: a.1)
    let second = try daemon.constantFile("b", seconds: 0.6, left: b.0, right: b.1)
    return (daemon, client, first, second)
  }

  /// A crossfade's two ramps follow the curve's law at every sample: with the default (qsin,
  /// equal-power) their squares sum to 1, with `linear` they sum to 1.
  @Test func crossfadeRampsSumToTheirLaw() throws {
    let (daemon, client, a, b) = try Self.twoItems(a: (0.5, 0), b: (0, 0.5))
    let frames = 12_000
    var starts: [(curve: String, sample: Int)] = []
    for (stream, curve) in [("power", nil), ("straight", "linear")] as [(String, String?)] {
      var request: JSONObject = [
        "cmd": "play", "path": .string(a), "stream": .string(stream), "queue": [.string(b)], "crossfade": 0.25,
      ]
      request["crossfadeCurve"] = curve.map(JSONValue.string)
      #expect(try client.request(request).isOK)
      let second = try client.waitForEvent {
        $0["event"] == "item-started" && $0["stream"] == .string(stream) && $0["path"] == .string(b)
      }
      starts.append((curve ?? "qsin", Self.sample(second)))
      _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == .string(stream) }
    }
    daemon.stop()

    let left = try daemon.played(channel: 0).map(Double.init)
    let right = try daemon.played(channel: 1).map(Double.init)
    for (curve, start) in starts {
      try #require(start > 0 && start + frames < left.count)
      #expect(left[start - 1] == 0.5 && right[start - 1] == 0, "the outgoing item alone before")
      var lawError = 0.0
      var curveError = 0.0
      for k in 0...frames {
        let outgoing = left[start + k] / 0.5
        let incoming = right[start + k] / 0.5
        let x = Double(k) / Double(frames)
        if curve == "qsin" {
          lawError = max(lawError, abs(outgoing * outgoing + incoming * incoming - 1))
          curveError = max(curveError, abs(incoming - sin(x * .pi / 2)))
        } else {
          lawError = max(lawError, abs(outgoing + incoming - 1))
          curveError = max(curveError, abs(incoming - x))
        }
      }
      #expect(lawError < 1e-6, "\(curve): off its law by \(lawError)")
      #expect(curveError < 1e-6, "\(curve): off its curve by \(curveError)")
      #expect(left[start + frames] == 0 && right[start + frames] == 0.5, "the incoming item alone after")
    }
  }

  /// `next` during a crossfade takes both ramps on from where they are, over the skip crossfade:
  /// no step between two samples larger than the ramps' steepest slopes allow, and the third
  /// item alone once it is over; the first item ends as finished (its crossfade began at its
  /// end), the second as skipped.
  @Test func aSkipMidCrossfadeRetargetsWithoutAJump() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "item-ended"]])
    let a = try daemon.constantFile("a", seconds: 1.5, left: 0.5, right: 0)
    let b = try daemon.constantFile("b", seconds: 1.5, left: 0, right: 0.5)
    let c = try daemon.constantFile("c", seconds: 1.5, left: 0.25, right: 0.25)
    let play = try client.request([
      "cmd": "play", "path": .string(a), "stream": "music", "queue": [.string(b), .string(c)], "crossfade": 1,
      "crossfadeCurve": "linear", "skipCrossfade": 0.2, "skipCurve": "linear",
    ])
    #expect(play.isOK, "\(play.serialized())")
    let crossfade = Self.sample(try client.waitForEvent { $0["event"] == "item-started" && $0["path"] == .string(b) })
    usleep(300_000)
    let skip = try client.request(["cmd": "next", "stream": "music"])
    #expect(skip.isOK && skip.result["path"] == .string(c), "\(skip.serialized())")
    let skipped = try #require(skip.result["sample"]?.int)
    _ = try client.waitForEvent { $0["event"] == "item-ended" && $0["path"] == .string(b) }
    usleep(300_000)
    daemon.stop()

    let ended = Self.itemEvents(client, "music", "item-ended")
    #expect(
      ended.map { $0["reason"] } == ["finished", "skipped"] && ended.map { $0["path"] } == [.string(a), .string(b)],
      "\(ended.map { $0.serialized() })")
    let left = try daemon.played(channel: 0).map(Double.init)
    let right = try daemon.played(channel: 1).map(Double.init)
    let skipFrames = 9_600
    try #require(skipped > crossfade && skipped < crossfade + 48_000, "the skip lands mid-crossfade")
    try #require(skipped + skipFrames + 4_800 < left.count)
    // Each ramp moves at most its level over its length per sample: 0.5 and 0.25 over the skip.
    let bound = 0.75 / Double(skipFrames) + 1e-6
    var steepest = 0.0
    for index in (crossfade - 100)...(skipped + skipFrames + 100) {
      steepest = max(steepest, abs(left[index] - left[index - 1]), abs(right[index] - right[index - 1]))
    }
    #expect(steepest <= bound, "a step of \(steepest), above \(bound)")
    let progress = Double(skipped - crossfade) / 48_000
    #expect(abs(left[skipped] - 0.5 * (1 - progress)) < 1e-4 && abs(right[skipped] - 0.5 * progress) < 1e-4)
    let after = (skipped + skipFrames)..<(skipped + skipFrames + 4_800)
    #expect(after.allSatisfy { left[$0] == 0.25 && right[$0] == 0.25 }, "the third item alone after the skip")
  }

  /// A looping queue starts again from its first item after the last, gapless, until stopped.
  @Test func aLoopingQueueStartsAgain() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started"]])
    // Long enough (1 s and 0.7 s) for the next item to be opened and installed in time on a
    // loaded machine: the device plays in real time.
    let lengths = (a: 48_001, b: 33_613)
    let a = try Self.file(daemon, "a", frames: lengths.a, left: { _ in 0 }, right: { _ in 0.125 })
    let b = try Self.file(daemon, "b", frames: lengths.b, left: { _ in 0 }, right: { _ in 0.25 })
    #expect(
      try client.request([
        "cmd": "play", "path": .string(a), "stream": "music", "queue": [.string(b)], "loop": true,
      ]).isOK)
    for _ in 0..<400 where Self.itemEvents(client, "music", "item-started").count < 5 {
      _ = try? client.waitForEvent(timeout: 0.05) { _ in false }
    }
    #expect(try client.request(["cmd": "stop", "stream": "music"]).isOK)
    usleep(100_000)
    daemon.stop()

    let started = Self.itemEvents(client, "music", "item-started")
    try #require(started.count >= 5, "\(started.map { $0.serialized() })")
    #expect(started.prefix(5).map { $0["path"] } == [a, b, a, b, a].map(JSONValue.string))
    let right = try daemon.played(channel: 1)
    for index in 1..<5 {
      let length = index % 2 == 1 ? lengths.a : lengths.b
      let sample = Self.sample(started[index])
      #expect(sample - Self.sample(started[index - 1]) == length, "start \(index) right after the item before")
      #expect(right[sample - 1] == (index % 2 == 1 ? 0.125 : 0.25) && right[sample] == (index % 2 == 1 ? 0.25 : 0.125))
    }
  }

  /// queue-clear on a looping queue ends the loop too: the playing item plays to its end, once,
  /// and the stream ends there (queue-list says `loop` false); what was played is that item's
  /// audio, then silence.
  @Test func clearingALoopingQueueEndsTheStreamAfterThePlayingItem() throws {
    let (daemon, client, a, b) = try Self.twoItems(a: (0.125, 0), b: (0.25, 0))
    #expect(
      try client.request([
        "cmd": "play", "path": .string(a), "stream": "music", "queue": [.string(b)], "loop": true,
      ]).isOK)
    let cleared = try client.request(["cmd": "queue-clear", "stream": "music"])
    #expect(cleared.result["queue"]?["items"]?.arrayValue?.count == 1, "\(cleared.serialized())")
    #expect(cleared.result["queue"]?["loop"] == false, "\(cleared.serialized())")
    let listed = try client.request(["cmd": "queue-list", "stream": "music"])
    #expect(listed.result["queue"]?["loop"] == false, "\(listed.serialized())")
    let ended = try client.waitForEvent(timeout: 5) { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    #expect(ended["reason"] == "finished", "\(ended.serialized())")
    #expect(try client.request(["cmd": "status"]).result["streams"] == [], "the stream is gone")
    daemon.stop()

    let started = Self.itemEvents(client, "music", "item-started")
    #expect(started.map { $0["path"] } == [.string(a)], "a once, nothing after: \(started.map { $0.serialized() })")
    let left = try daemon.played(channel: 0)
    let first = try #require(left.firstIndex { $0 != 0 })
    let last = try #require(left.lastIndex { $0 != 0 })
    #expect(last - first < 28_800 + 480, "one item's length of audio, not a loop: \(last - first) frames")
    #expect(left[first...last].allSatisfy { $0 <= 0.125 }, "only a's level was played")
  }

  /// queue-add, queue-remove and queue-clear change what follows; the playing item cannot be
  /// removed; bad input names its field and the stream plays on.
  @Test func queueCommandsChangeWhatFollows() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "stream-ended"]])
    let a = try daemon.constantFile("a", seconds: 1, left: 0.125, right: 0)
    let b = try daemon.constantFile("b", seconds: 0.3, left: 0.25, right: 0)
    let c = try daemon.constantFile("c", seconds: 0.3, left: 0.375, right: 0)
    #expect(try client.request(["cmd": "play", "path": .string(a), "stream": "music", "queue": []]).isOK)
    let added = try client.request(["cmd": "queue-add", "stream": "music", "paths": [.string(b), .string(c)]])
    #expect(added.result["queue"]?["items"]?.arrayValue?.count == 3, "\(added.serialized())")
    let playing = try client.request(["cmd": "queue-remove", "stream": "music", "index": 0])
    #expect(playing.errorCode == "invalid-field" && playing.errorField == "index", "\(playing.serialized())")
    let beyond = try client.request(["cmd": "queue-remove", "stream": "music", "index": 3])
    #expect(beyond.errorCode == "out-of-range" && beyond.errorField == "index")
    let missing = try client.request(["cmd": "queue-add", "stream": "music", "paths": [.string(b), "/nope.wav"]])
    #expect(missing.errorCode == "file-error" && missing.errorField == "paths[1]", "\(missing.serialized())")
    let removed = try client.request(["cmd": "queue-remove", "stream": "music", "index": 1])
    #expect(removed.result["queue"]?["items"]?.arrayValue?.map { $0["path"] } == [.string(a), .string(c)])
    _ = try client.waitForEvent { $0["event"] == "stream-ended" }
    let started = Self.itemEvents(client, "music", "item-started").map { $0["path"] }
    #expect(started == [.string(a), .string(c)], "b was removed before its turn")

    #expect(try client.request(["cmd": "play", "path": .string(a), "stream": "again", "queue": [.string(b)]]).isOK)
    let cleared = try client.request(["cmd": "queue-clear", "stream": "again"])
    #expect(cleared.result["queue"]?["items"]?.arrayValue?.count == 1, "\(cleared.serialized())")
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "again" }
    #expect(Self.itemEvents(client, "again", "item-started").count == 1, "nothing after a cleared queue")
    #expect(try client.request(["cmd": "ping"]).isOK)
    daemon.stop()
  }

  /// A queue stream stopped mid-crossfade ends both items, `stopped`, at the sample its stop's
  /// fade left the mix (nothing of either is heard from there), before its `stream-ended`; one
  /// stopped while a single item plays ends that item likewise.
  @Test func stoppingAQueueStreamEndsItsItems() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    let (a, b) = try playCrossfadingPair(daemon, client, seconds: 1.5)
    _ = try client.waitForEvent { $0["event"] == "item-started" && $0["path"] == .string(b) }
    usleep(200_000)
    #expect(try client.request(["cmd": "stop", "stream": "music", "fade": 0.05]).isOK)
    let gone = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    #expect(gone["reason"] == "stopped")
    // Past what a rewindable device could still rewrite: the next stream starts after.
    usleep(100_000)
    #expect(try client.request(["cmd": "play", "path": .string(a), "stream": "single", "queue": []]).isOK)
    usleep(300_000)
    #expect(try client.request(["cmd": "stop", "stream": "single"]).isOK)
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "single" }
    daemon.stop()

    // Both items of the crossfade, then the stream.
    let events = client.events.filter { $0["stream"] == "music" && $0["event"] != "item-started" }
    #expect(events.map { $0["event"] } == ["item-ended", "item-ended", "stream-ended"], "\(events)")
    let ended = Self.itemEvents(client, "music", "item-ended")
    #expect(Set(ended.compactMap { $0["path"]?.stringValue }) == [a, b], "\(ended)")
    #expect(ended.allSatisfy { $0["reason"] == "stopped" }, "\(ended)")
    let sample = Self.sample(ended[0])
    #expect(ended.allSatisfy { Self.sample($0) == sample })
    let left = try daemon.played(channel: 0)
    let right = try daemon.played(channel: 1)
    try #require(sample > 0 && sample < left.count)
    let lastHeard = try #require((0..<sample).last { left[$0] != 0 || right[$0] != 0 })
    // Both were heard until the stop's fade reached silence, in the block before `sample`.
    #expect(left[lastHeard] != 0 && right[lastHeard] != 0)
    #expect(sample - lastHeard <= DuckTests.period + 1, "last heard at \(lastHeard), ended at \(sample)")
    // Until the next stream starts.
    let next = try #require(Self.itemEvents(client, "single", "item-started").first.map(Self.sample))
    #expect(next > sample + 2_400)
    let heardAfter = (sample..<next).first { left[$0] != 0 || right[$0] != 0 }
    #expect(heardAfter == nil, "heard at \(heardAfter ?? -1), after its item-ended")

    let single = Self.itemEvents(client, "single", "item-ended")
    #expect(single.count == 1 && single.first?["reason"] == "stopped" && single.first?["path"] == .string(a))
  }
}

/// Subscribes `client` to the items' and the stream's events and plays a constant 0.5 on the left
/// (`a`) then on the right (`b`), `seconds` each, as queue stream `music` crossfading linearly
/// over 1 s: the recording's left channel over 0.5 is a's level, its right b's.
func playCrossfadingPair(_ daemon: DaemonProcess, _ client: LineClient, seconds: Double) throws -> (
  a: String, b: String
) {
  try client.request(["cmd": "subscribe", "events": ["item-started", "item-ended", "stream-ended"]])
  let a = try daemon.constantFile("a", seconds: seconds, left: 0.5, right: 0)
  let b = try daemon.constantFile("b", seconds: seconds, left: 0, right: 0.5)
  let play = try client.request([
    "cmd": "play", "path": .string(a), "stream": "music", "queue": [.string(b)], "crossfade": 1,
    "crossfadeCurve": "linear",
  ])
  #expect(play.isOK, "\(play.serialized())")
  return (a, b)
}
