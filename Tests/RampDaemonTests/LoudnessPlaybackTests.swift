import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// Loudness-normalised playback through the real `rampd` on an ALSA `file` PCM: what was recorded
/// is measured with ``Loudness`` (libebur128) and compared sample by sample with the files, their
/// trims and the ramps on top.
@Suite struct LoudnessPlaybackTests {
  static let rate = 48_000

  /// A stereo float WAV of `frames` frames whose `carrier` channel is `signal` scaled so that
  /// the file measures `lufs`, the other channel the constant `probe` (which BS.1770's K-weighting,
  /// a high-pass, does not count): its samples, interleaved.
  static func file(
    _ path: String, frames: Int, lufs: Double, carrier: Int, probe: Float, signal: (Int) -> Float
  ) throws -> [Float] {
    func made(_ scale: Float) throws -> [Float] {
      var samples = [Float](repeating: 0, count: frames * 2)
      for frame in 0..<frames {
        samples[2 * frame + carrier] = signal(frame) * scale
        samples[2 * frame + 1 - carrier] = probe
      }
      try Self.write(samples, to: path)
      return samples
    }
    // The probe's step at the start counts a little: a second pass takes it in. (libebur128's
    // histogram measures to its bins: within 0.05 LU.)
    var scale = 1.0
    var samples = try made(1)
    for _ in 0..<2 {
      scale *= pow(10, (lufs - (try Loudness.measure(path: path).integrated)) / 20)
      samples = try made(Float(scale))
    }
    let measured = try Loudness.measure(path: path).integrated
    try #require(abs(measured - lufs) <= 0.06, "made at \(measured) LUFS, not \(lufs)")
    return samples
  }

  static func write(_ samples: [Float], to path: String) throws {
    let writer = try SoundFileWriter(path: path, sampleRate: rate, channels: 2, encoding: .float)
    try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: samples.count / 2) }
    try writer.close()
  }

  /// The integrated loudness of frames [start, end) of a stereo recording.
  static func loudness(_ played: [Float], from start: Int, to end: Int, in directory: String) throws -> Double {
    let path = "\(directory)/segment-\(start).wav"
    try write(Array(played[(2 * start)..<(2 * end)]), to: path)
    return try Loudness.measure(path: path).integrated
  }

  /// Pink noise (Paul Kellet's economy filter over white noise from a fixed seed): the same
  /// every run.
  static func pinkNoise(frames: Int) -> [Float] {
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    var b0 = 0.0
    var b1 = 0.0
    var b2 = 0.0
    return (0..<frames).map { _ in
      state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      let white = Double(Int64(bitPattern: state >> 11) - (1 << 52)) / Double(1 << 52)
      b0 = 0.99765 * b0 + white * 0.0990460
      b1 = 0.96300 * b1 + white * 0.2965164
      b2 = 0.57000 * b2 + white * 1.0526913
      return Float((b0 + b1 + b2 + white * 0.1848) * 0.2)
    }
  }

  static func sine(_ frame: Int) -> Float { Float(sin(2 * .pi * 997 * Double(frame) / Double(rate))) }

  /// A trim as the daemon applies it: the factor of its dB.
  static func factor(_ loudness: JSONValue?) -> Float? {
    loudness?["trim"]?.numberValue.map { Float(pow(10, $0 / 20)) }
  }

  /// Queue items mastered 21 LU apart (pink noise at −9 LUFS, a sine at −24 LUFS, noise at −30
  /// LUFS) played at −18 LUFS: each measures −18 ± 0.5 LUFS in the recording, and every recorded
  /// sample is the files' samples times their trims, the linear crossfades between them included.
  /// The second item is opened (and measured) by the `play`, the third while the second plays.
  @Test func queueItemsCrossfadeBetweenTheirNormalisedLevels() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "stream-ended"]])
    let frames = [4 * Self.rate, 3 * Self.rate, 3 * Self.rate]
    let noise = Self.pinkNoise(frames: frames[0])
    let paths = ["loud", "quiet", "quieter"].map { "\(daemon.directory)/\($0).wav" }
    let items = [
      try Self.file(paths[0], frames: frames[0], lufs: -9, carrier: 0, probe: 0.01) { noise[$0] },
      try Self.file(paths[1], frames: frames[1], lufs: -24, carrier: 1, probe: 0.02, signal: Self.sine),
      try Self.file(paths[2], frames: frames[2], lufs: -30, carrier: 0, probe: 0.03) { noise[frames[0] - 1 - $0] },
    ]

    let play = try client.request([
      "cmd": "play", "path": .string(paths[0]), "stream": "music", "queue": [.string(paths[1]), .string(paths[2])],
      "crossfade": 1, "crossfadeCurve": "linear", "loudness": "-18LUFS",
    ])
    #expect(play.isOK, "\(play.serialized())")
    var measured = [play.result["loudness"]]
    #expect(measured[0]?["target"] == -18 && measured[0]?["limited"] == false, "\(play.serialized())")
    var starts: [Int] = []
    for path in paths.dropFirst() {
      starts.append(
        QueueTests.sample(try client.waitForEvent { $0["event"] == "item-started" && $0["path"] == .string(path) }))
      // The playing item's measurement and trim, as status shows them.
      let status = try client.request(["cmd": "status"])
      measured.append(status.result["streams"]?.arrayValue?.first { $0["stream"] == "music" }?["loudness"])
    }
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    daemon.stop()

    for (index, lufs) in [-9.0, -24, -30].enumerated() {
      #expect(abs((measured[index]?["integrated"]?.numberValue ?? 0) - lufs) <= 0.06, "\(measured)")
      #expect(abs((measured[index]?["trim"]?.numberValue ?? 0) - (-18 - lufs)) <= 0.1, "\(measured)")
    }
    let played = try daemon.played()
    let fade = Self.rate
    // Where each item starts in the recording: a crossfade's length before the end of the one before.
    let first = starts[0] - (frames[0] - fade)
    let begins = [first] + starts
    #expect(starts[1] == starts[0] + frames[1] - fade, "the third item starts a crossfade before the second ends")
    let end = begins[2] + frames[2]
    try #require(first > 0 && end <= played.count / 2, "items at \(begins) in \(played.count / 2) frames")
    // Each item alone, away from the stream's declick and the crossfades.
    for index in 0..<3 {
      let from = index == 0 ? first + 4_800 : begins[index] + fade
      let to = index == 2 ? end : begins[index + 1]
      let heard = try Self.loudness(played, from: from, to: to, in: daemon.directory)
      #expect(abs(heard + 18) <= 0.5, "item \(index) heard at \(heard) LUFS")
    }

    let trims = try measured.map { try #require(Self.factor($0)) }
    var worst = 0.0
    var worstFrame = -1
    for frame in (first + 480)..<end {
      for channel in 0..<2 {
        var expected = 0.0
        for index in 0..<3 {
          let k = frame - begins[index]
          guard k >= 0 && k < frames[index] else { continue }
          // Ramps in over the crossfade at its start (not the first), out over the one at its end (not the last).
          var ramp = index > 0 ? min(Double(k) / Double(fade), 1) : 1
          if index < 2 { ramp *= min(max(Double(frames[index] - k) / Double(fade), 0), 1) }
          expected += Double(items[index][2 * k + channel] * trims[index]) * ramp
        }
        let error = abs(Double(played[2 * frame + channel]) - expected)
        if error > worst {
          worst = error
          worstFrame = frame - first
        }
      }
    }
    #expect(worst < 1e-5, "off the trimmed files and their crossfades by \(worst) at frame \(worstFrame)")
  }

  /// With `[playback] loudness` a plain `play` is normalised (a sine at −30 LUFS: +12 dB), and the
  /// trim sits under the gain: `streams.<id>.gain` keeps its value, a duck's attack and release
  /// and a fade keep their curves at every sample, scaled by the trim. A second play of the file
  /// finds its measurement in the cache, next to the state file.
  @Test func aDuckAndAFadeOnANormalisedStreamKeepTheirShapes() throws {
    let daemon = try DaemonProcess(limiter: "off", extraConfiguration: "[playback]\nloudness = \"-18LUFS\"\n")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["duck-started", "duck-ended", "animation-started"]])
    let path = "\(daemon.directory)/tone.wav"
    let probe: Float = 0.01
    _ = try Self.file(path, frames: 12 * Self.rate, lufs: -30, carrier: 0, probe: probe, signal: Self.sine)
    let play = try client.request(["cmd": "play", "path": .string(path), "stream": "tone"])
    #expect(play.isOK, "\(play.serialized())")
    let trim = try #require(Self.factor(play.result["loudness"]), "\(play.serialized())")
    #expect(abs((play.result["loudness"]?["trim"]?.numberValue ?? 0) - 12) < 0.1)
    #expect(play.result["loudness"]?["cached"] == false)
    #expect(try client.request(["cmd": "get", "key": "streams.tone.gain"]).result["model"] == 1)
    #expect(
      try client.request([
        "cmd": "duck-add", "name": "talk", "targets": ["streams.tone.gain"], "depth": 12, "attack": 0.25,
        "attackCurve": "ease-in", "hold": 0, "release": 0.25, "releaseCurve": "qsin",
      ]).isOK)
    usleep(200_000)
    #expect(try client.request(["cmd": "duck", "name": "talk"]).isOK)
    usleep(400_000)
    #expect(try client.request(["cmd": "unduck", "name": "talk"]).isOK)
    let started = DuckTests.sample(try client.waitForEvent { $0["event"] == "duck-started" })
    let ended = DuckTests.sample(try client.waitForEvent { $0["event"] == "duck-ended" })
    usleep(100_000)
    #expect(
      try client.request(["cmd": "fade", "key": "streams.tone.gain", "to": 0.5, "duration": 0.4, "curve": "linear"])
        .isOK)
    let fadeStart = DuckTests.sample(try client.waitForEvent { $0["event"] == "animation-started" })
    usleep(600_000)
    #expect(try client.request(["cmd": "get", "key": "streams.tone.gain"]).result["model"] == 0.5)
    let again = try client.request(["cmd": "play", "path": .string(path), "stream": "again", "gain": 0])
    #expect(again.result["loudness"]?["cached"] == true, "\(again.serialized())")
    #expect(FileManager.default.fileExists(atPath: "\(daemon.directory)/loudness.cache"))
    daemon.stop()

    // The probe channel over the probe × the trim: the gain and the duck alone.
    let level = try daemon.played(channel: 1).map { Float($0) / (probe * trim) }
    try #require(started > 4_800 && fadeStart + 19_200 + 4_800 < level.count)
    let depth = pow(10, -12.0 / 20)
    #expect(abs(level[started - 1] - 1) < 1e-6, "the trimmed level before the duck: \(level[started - 1])")
    let attack = DuckTests.misfit(level, start: started, frames: 12_000, from: 1, to: depth, curve: .easeIn)
    #expect(attack < 1e-5, "attack off its curve by \(attack)")
    let release = DuckTests.misfit(
      level, start: ended - 12_000, frames: 12_000, from: depth, to: 1, curve: .fade(.qsin))
    #expect(release < 1e-5, "release off its curve by \(release)")
    let fade = DuckTests.misfit(level, start: fadeStart, frames: 19_200, from: 1, to: 0.5, curve: .linear)
    #expect(fade < 1e-5, "fade off its curve by \(fade)")
    let after = level[(fadeStart + 19_200)..<(fadeStart + 19_200 + 4_800)].map { abs(Double($0) - 0.5) }.max() ?? 1
    #expect(
      after < 1e-6,
      "the fade's end value, trimmed, after it: off by \(after) (from \(fadeStart), \(level.count) samples recorded)")
  }

  /// A file without an integrated loudness plays at its own level, and says why: one that never
  /// reaches BS.1770's absolute gate (−70 LUFS) and one shorter than a gating block.
  /// `"loudness": "off"` plays a file at its own level whatever the configured default.
  @Test func filesWithoutALoudnessPlayAtTheirOwnLevel() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[playback]\nloudness = \"-18LUFS\"\n")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["stream-ended"]])
    let faint = "\(daemon.directory)/faint.wav"
    let faintProbe: Float = 1e-4
    try Self.write((0..<Self.rate).flatMap { frame in [Self.sine(frame) * 1e-4, faintProbe] }, to: faint)
    let short = "\(daemon.directory)/short.wav"
    try Self.write((0..<(Self.rate / 5)).flatMap { frame in [Self.sine(frame) * 0.1, 0.125] }, to: short)

    let silent = try client.request(["cmd": "play", "path": .string(faint), "stream": "faint"])
    #expect(silent.result["loudness"]?["unmeasured"] == "silent", "\(silent.serialized())")
    #expect(silent.result["loudness"]?["trim"] == 0 && silent.result["loudness"]?["integrated"] == .null)
    let status = try client.request(["cmd": "status"])
    let row = status.result["streams"]?.arrayValue?.first { $0["stream"] == "faint" }
    #expect(row?["loudness"]?["unmeasured"] == "silent", "\(status.serialized())")
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "faint" }
    let tooShort = try client.request(["cmd": "play", "path": .string(short), "stream": "short"])
    #expect(tooShort.result["loudness"]?["unmeasured"] == "too-short", "\(tooShort.serialized())")
    #expect(tooShort.result["loudness"]?["trim"] == 0)
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "short" }
    let off = try client.request(["cmd": "play", "path": .string(short), "stream": "off", "loudness": "off"])
    #expect(off.isOK && off.result["loudness"] == nil, "\(off.serialized())")
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "off" }
    daemon.stop()

    let right = try daemon.played(channel: 1)
    let faintFrames = right.count { $0 == faintProbe }
    let shortFrames = right.count { $0 == 0.125 }
    // Each at its own level after its declick ramp (the short file played twice).
    #expect(faintFrames >= Self.rate - 480, "\(faintFrames) frames at the faint file's own level")
    #expect(shortFrames >= 2 * (Self.rate / 5 - 480), "\(shortFrames) frames at the short file's own level")
  }

  /// Bad targets are refused naming the field, and the daemon goes on.
  @Test func badTargetsAreRefusedNamingTheField() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let path = try daemon.constantFile("c", seconds: 0.5)
    let cases: [(JSONValue, String, String)] = [
      (5, "out-of-range", "above the maximum, -5 LUFS"),
      ("-18", "invalid-field", "no unit: write LUFS after the number"),
      ("+3LUFS", "out-of-range", "above the maximum, -5 LUFS"),
      ("-61LUFS", "out-of-range", "below the minimum, -60 LUFS"),
      ("-18dB", "invalid-field", "no LUFS unit"),
      ("loud", "invalid-field", "no LUFS unit"),
      (true, "invalid-field", "expected a loudness in LUFS"),
    ]
    for (value, code, text) in cases {
      let reply = try client.request(["cmd": "play", "path": .string(path), "loudness": value])
      #expect(reply.errorCode == code && reply.errorField == "loudness", "\(value.serialized()): \(reply.serialized())")
      let message = reply["error"]?["message"]?.stringValue ?? ""
      #expect(message.hasPrefix("loudness: ") && message.contains(text), "\(message)")
    }
    #expect(try client.request(["cmd": "ping"]).isOK)
    #expect(try client.request(["cmd": "play", "path": .string(path), "loudness": -23, "gain": 0]).isOK)
    daemon.stop()
  }
}
