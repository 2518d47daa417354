import CEbur128
import Foundation
import RampAudio
import RampProtocol
import Testing

@testable import RampTestSupport

/// `observe streams.<id>.level.*` and `master.level.*` on the real daemon, checked against the
/// recording of what it played.
@Suite struct ObservedLevelTests {
  /// libebur128's momentary loudness (EBUR128_MODE_M) of the 400 ms of stereo `samples` before
  /// frame `end`, its filters run over the second before.
  static func momentary(_ samples: [Float], end: Int) throws -> Double {
    let state = try #require(ebur128_init(2, 48_000, Int32(EBUR128_MODE_M.rawValue)))
    var handle: UnsafeMutablePointer<ebur128_state>? = state
    defer { ebur128_destroy(&handle) }
    let start = max(end - 67_200, 0)
    _ = samples[(2 * start)..<(2 * end)].withUnsafeBufferPointer {
      ebur128_add_frames_float(state, $0.baseAddress, end - start)
    }
    var loudness = 0.0
    _ = ebur128_loudness_momentary(state, &loudness)
    return loudness
  }

  /// The highest |sample| of the 400 ms of stereo `samples` before frame `end`, dBFS.
  /// A level read at `sample` (heard at `heard`) is what the recording reads there: within what
  /// the window 10 ms earlier or ending there reads, ± 0.1 dB for a peak, ± 0.2 LU for loudness.
  static func expectRecordingReads(
    _ value: Double, key: String, sample: Int, heard: Int, in played: [Float],
    sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    if key.hasSuffix(".peak") {
      let bounds = [peak(played, end: heard - 480), peak(played, end: heard)]
      #expect(
        value >= bounds.min()! - 0.1 && value <= bounds.max()! + 0.1,
        "\(key) at \(sample): \(value) dB, the recording \(bounds)", sourceLocation: sourceLocation)
    } else {
      let bounds = [try momentary(played, end: heard - 480), try momentary(played, end: heard)]
      #expect(
        value >= bounds.min()! - 0.2 && value <= bounds.max()! + 0.2,
        "\(key) at \(sample): \(value) LUFS, libebur128 on the recording \(bounds)", sourceLocation: sourceLocation)
    }
  }

  static func peak(_ samples: [Float], end: Int) -> Double {
    let window = samples[(2 * max(end - 19_200, 0))..<(2 * end)]
    return 20 * log10(Double(window.map { abs($0) }.max() ?? 0))
  }

  /// A −20 dBFS sine (1 kHz, so samples fall on its crests): every observed peak and momentary
  /// loudness is the recording's over the 400 ms before the sample the value names (the meter
  /// moves in 10 ms steps: within what the window 10 ms earlier or at that sample reads, ± 0.1 dB,
  /// ± 0.2 LU), −20 dB before the fade; the fade of `streams.tone.gain` to −20 dB shows in the
  /// level, which ends at −40 dB.
  @Test func observedLevelsAreTheRecordings() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let path = "\(daemon.directory)/sine.wav"
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    let sine = (0..<(48_000 * 3)).flatMap { frame -> [Float] in
      let value = 0.1 * Float(sin(2 * Double.pi * 1000 * Double(frame) / 48_000))
      return [value, value]
    }
    try sine.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: sine.count / 2) }
    try writer.close()
    let keys = [
      "streams.tone.level.peak", "streams.tone.level.momentary", "master.level.peak", "master.level.momentary",
    ]
    for key in keys + ["master.limiter"] {
      // Measured, not set: `set` and animations name the commands that read it.
      let refused = try client.request(["cmd": "set", "key": .string(key), "value": 1])
      #expect(refused["error"]?["code"] == "unknown-key-path", "\(refused.serialized())")
      #expect(
        refused["error"]?["message"]?.stringValue?.contains("measured from what is heard") == true,
        "\(refused.serialized())")
    }
    for key in keys { #expect(try client.request(["cmd": "observe", "key": .string(key), "rate": 50]).isOK) }
    // A stream's level is its audio as it goes into the mix: heard the limiter's latency later.
    // The master's is what goes out, after the limiter.
    let status = try client.request(["cmd": "status"]).result["output"]?["limiter"]
    let latency = Int(((status?["latency"]?.numberValue ?? 0) * 48_000).rounded())
    #expect(latency == 58)
    #expect(try client.request(["cmd": "play", "path": .string(path), "stream": "tone"]).isOK)
    usleep(1_000_000)
    #expect(try client.request(["cmd": "fade", "key": "streams.tone.gain", "to": 0.1, "duration": 0.5]).isOK)
    usleep(1_200_000)
    #expect(try client.request(["cmd": "unobserve"]).isOK)
    daemon.stop()
    let played = try daemon.played()
    let values = client.events.filter { $0["event"] == "value" }
    var checked = 0
    var peaks: [(sample: Int, value: Double)] = []
    for value in values {
      let key = try #require(value["key"]?.stringValue)
      let sample = try #require(value["sample"]?.int)
      let observed = try #require(value["value"]?.numberValue)
      if key == "streams.tone.level.peak" { peaks.append((sample, observed)) }
      // Values are sent when they change: a steady level is one value.
      let heard = key.hasPrefix("streams.") ? sample + latency : sample
      guard heard >= 19_200 + 480, heard <= played.count / 2 else { continue }
      try Self.expectRecordingReads(observed, key: key, sample: sample, heard: heard, in: played)
      checked += 1
    }
    #expect(checked >= 20, "\(checked) values checked of \(values.count)")
    let after = try #require(peaks.last, "no peak observed")
    #expect(peaks.contains { abs($0.value - -20) <= 0.1 }, "never -20 dB before the fade: \(peaks)")
    #expect(abs(after.value - -40) <= 0.1, "after the fade: \(after)")
    #expect(peaks.contains { $0.value < -22 && $0.value > -38 }, "no level during the fade: \(peaks)")
  }

  /// `get` of a level reads what an observer reads: the recording's level over the 400 ms before
  /// the sample it names (a −20 dBFS sine: −20 ± 0.1 dB peak, libebur128's momentary loudness
  /// ± 0.2 LU), a whole window even when no level was observed before (the meters start from
  /// silence: what they read at once would be far below), and the same as an observer that
  /// runs alongside. `master.limiter` reads the limiter's reduction; bad keys get their errors.
  @Test func getReadsTheLevelAnObserverReads() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let path = "\(daemon.directory)/sine.wav"
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    let sine = (0..<48_000).flatMap { frame -> [Float] in
      let value = 0.1 * Float(sin(2 * Double.pi * 1000 * Double(frame) / 48_000))
      return [value, value]
    }
    try sine.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: sine.count / 2) }
    try writer.close()
    let latency = Int(
      ((try client.request(["cmd": "status"]).result["output"]?["limiter"]?["latency"]?.numberValue ?? 0) * 48_000)
        .rounded())
    #expect(try client.request(["cmd": "play", "path": .string(path), "stream": "tone", "loop": true]).isOK)
    usleep(600_000)
    let keys = [
      "master.level.momentary", "streams.tone.level.momentary", "master.level.peak", "streams.tone.level.peak",
    ]
    var read: [(key: String, sample: Int, value: Double)] = []
    for key in keys {
      // No level observed: each get starts the meters afresh (a get that follows another within
      // a block may find them still running).
      usleep(50_000)
      let reply = try client.request(["cmd": "get", "key": .string(key)])
      #expect(reply.result["key"]?.stringValue == key, "\(reply.serialized())")
      read.append((key, try #require(reply.result["sample"]?.int), try #require(reply.result["value"]?.numberValue)))
    }
    // With an observer running, a get reads what it reports.
    #expect(try client.request(["cmd": "observe", "key": "master.level.momentary", "rate": 100]).isOK)
    usleep(600_000)
    let alongside = try client.request(["cmd": "get", "key": "master.level.momentary"])
    let observedBefore = client.events.last { $0["event"] == "value" && $0["key"] == "master.level.momentary" }
    read.append(
      (
        "master.level.momentary", try #require(alongside.result["sample"]?.int),
        try #require(alongside.result["value"]?.numberValue)
      ))
    let limiter = try client.request(["cmd": "get", "key": "master.limiter"])
    #expect(limiter.result["value"]?.numberValue == 0, "a sine at -20 dBFS is not limited: \(limiter.serialized())")

    // Bad keys: each its own error, naming the field.
    let noStream = try client.request(["cmd": "get", "key": "streams.nosuch.level.peak"])
    #expect(noStream["error"]?["code"] == "unknown-key-path", "\(noStream.serialized())")
    #expect(noStream["error"]?["field"] == "key")
    #expect(noStream["error"]?["message"]?.stringValue?.contains("no stream 'nosuch'") == true)
    let noReading = try client.request(["cmd": "get", "key": "master.level.loudness"])
    #expect(noReading["error"]?["code"] == "unknown-key-path", "\(noReading.serialized())")
    #expect(noReading["error"]?["message"]?.stringValue?.contains("no property 'master.level.loudness'") == true)
    let batched = try client.request([
      "cmd": "batch", "commands": [["cmd": "get", "key": "master.level.peak"]],
    ])
    #expect(batched["error"]?["code"] == "unknown-key-path", "\(batched.serialized())")
    #expect(batched["error"]?["message"]?.stringValue?.contains("get of its own") == true)
    #expect(try client.request(["cmd": "stop", "stream": "tone"]).isOK)
    usleep(200_000)
    daemon.stop()
    let played = try daemon.played()

    for (key, sample, value) in read {
      let heard = key.hasPrefix("streams.") ? sample + latency : sample
      try #require(heard <= played.count / 2, "\(key) at \(sample): past the recording")
      if key.hasSuffix(".peak") { #expect(abs(value - -20) <= 0.1, "\(key) at \(sample): \(value) dB") }
      try Self.expectRecordingReads(value, key: key, sample: sample, heard: heard, in: played)
    }
    let observed = try #require(observedBefore?["value"]?.numberValue, "no value observed")
    let got = try #require(alongside.result["value"]?.numberValue)
    #expect(abs(got - observed) <= 0.05, "get \(got) LUFS, the observer \(observed) LUFS")
  }

  /// With nothing playing, the device stopped: `get` reads silence at once (no block comes to
  /// fill a window), not a timeout.
  @Test func getWhileNothingPlays() throws {
    // The embedded WAV output stops while nothing plays (the harness's device keeps writing).
    let output = NSTemporaryDirectory() + "rampd-level-idle-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).wav"
    defer { unlink(output) }
    let daemon = try DaemonProcess(environment: [
      "RAMPD_OUTPUT_DEVICE": "rampd_no_such_device", "RAMPD_EMBEDDED_OUTPUT_ENABLED": "true",
      "RAMPD_EMBEDDED_OUTPUT_PATH": output,
    ])
    let client = try daemon.client()
    var idle = false
    for _ in 0..<200 where !idle {
      idle = try client.request(["cmd": "status"]).result["output"]?["idle"] == true
      if !idle { usleep(10_000) }
    }
    try #require(idle, "the output never stopped for idle")
    for key in ["master.level.peak", "master.level.momentary"] {
      let reply = try client.request(["cmd": "get", "key": .string(key)])
      #expect(reply.result["value"]?.numberValue == -150, "\(reply.serialized())")
    }
  }
}
