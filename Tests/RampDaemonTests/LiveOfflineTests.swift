import Foundation
import RampAudio
import RampDaemon
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Live equals offline: one timeline played by a real rampd into ALSA's `file` plugin (raw float,
/// device pacing over `null`, which has no clock) and rendered by `OfflineShow` gives the same
/// samples, from the first sample the timeline touches on.
///
/// How the live run is made exact: the recording is a named pipe, so rampd's render thread waits
/// at the write that finds it full until the test reads it. Every line is sent meanwhile; on a
/// device without a clock rampd counts an `at` delay in samples from the request's arrival (not
/// through the wall clock, which says nothing of where such a device is), so each `at` counts
/// from the same sample (the one after the block that waits); then the test starts reading.
/// Without a clock, the render thread waits for every stream's audio before each block, as the
/// offline render does, so decoding speed changes nothing.
@Suite(.serialized) struct LiveOfflineTests {
  /// Reads a pipe to its end on a thread of its own.
  final class PipeReader: @unchecked Sendable {
    private let thread: Thread

    init(descriptor: CInt) {
      let collected = Collected()
      // Blocking reads from here on.
      _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
      thread = Thread {
        guard descriptor >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
          let count = read(descriptor, &buffer, buffer.count)
          if count <= 0 { break }
          collected.append(buffer[..<count])
        }
        close(descriptor)
      }
      self.collected = collected
      thread.start()
    }

    private let collected: Collected

    final class Collected: @unchecked Sendable {
      private let lock = NSLock()
      private var data = Data()
      func append(_ bytes: ArraySlice<UInt8>) { lock.withLock { data.append(contentsOf: bytes) } }
      var snapshot: Data { lock.withLock { data } }
    }

    /// Stereo float frames read so far.
    var frames: Int { collected.snapshot.count / 8 }

    var samples: [Float] {
      let data = collected.snapshot
      return data.prefix(data.count / 8 * 8).withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }
  }

  @Test func aTimelinePlayedLiveIsTheTimelineRenderedOffline() throws {
    let daemon = try DaemonProcess(periodMs: 20, bufferMs: 80, pacing: "device", recordingIsPipe: true)
    // A stereo bed and a mono voice at 44.1 kHz (resampled, its channel mapped), both moving.
    let bed = "\(daemon.directory)/bed.wav"
    let voice = "\(daemon.directory)/voice.wav"
    try writeFile(bed, seconds: 4, channels: 2, rate: 48_000) { f, c in
      Float(sin(Double(f) * (c == 0 ? 0.031 : 0.047)) * 0.4 + Double(f % 97) / 970)
    }
    try writeFile(voice, seconds: 3, channels: 1, rate: 44_100) { f, _ in
      Float(sin(Double(f) * 0.11) * 0.5)
    }
    let text = """
      {"cmd": "play", "path": "\(bed)", "stream": "bed", "gain": 0.5}
      {"at": 0.25, "cmd": "play", "path": "\(voice)", "stream": "voice", "gain": 0}
      {"at": 0.3, "cmd": "animate", "key": "master.gain", "name": "swell", "animation": {"type": "keyframe", "values": [0.6, 1, 0.8], "keyTimes": [0, 0.4, 1], "timingFunctions": ["ease-out", "ease-in"], "duration": 1}}
      {"at": 0.5, "cmd": "animate", "key": "streams.voice.gain", "animation": {"type": "spring", "from": 0, "to": 0.8, "duration": 0.4, "bounce": 0.2}}
      {"at": 0.8, "cmd": "set", "key": "streams.bed.pan", "value": -0.5, "duration": 0.3}
      {"at": 1, "cmd": "animate", "key": "master.gain", "name": "wobble", "animation": {"type": "keyframe", "values": [0, -0.15, 0], "duration": 0.1, "additive": true, "repeatCount": 4}}
      {"at": 1.2, "cmd": "pause", "stream": "voice", "fade": 0.1}
      {"at": 1.6, "cmd": "resume", "stream": "voice", "fade": 0.05}
      {"at": 1.8, "cmd": "seek", "stream": "bed", "position": 0.5}
      {"at": 2, "cmd": "animate", "key": "streams.bed.gain", "animation": {"type": "group", "duration": 0.5, "animations": [{"type": "basic", "to": 0.2}, {"type": "basic", "keyPath": "streams.voice.gain", "to": 1}]}}
      {"at": 2.6, "cmd": "batch", "commands": [{"cmd": "fade", "key": "streams.bed.gain", "to": 0.6, "duration": 0.4}, {"cmd": "fade", "key": "streams.voice.gain", "to": 0, "duration": 0.4}]}
      {"at": 3.2, "cmd": "stop", "fade": 0.2}
      """
    _ = try playedLiveAndRendered(text, daemon: daemon)
  }

  /// A later command over a running one of another kind, live and offline: the later one is
  /// heard from the level reached, nothing jumps, and its value is reached and held (the earlier
  /// fade does not come back when it ends). A constant 0.5 is played, so output / 0.5 is the gain
  /// heard. Each pair runs in a window of its own after an instant reset, which supersedes
  /// whatever the pair before left running (an endless repeat among them).
  @Test func aLaterCommandOverAnotherKindIsHeardLiveAndOffline() throws {
    let daemon = try DaemonProcess(periodMs: 20, bufferMs: 80, pacing: "device", recordingIsPipe: true)
    let level = "\(daemon.directory)/level.wav"
    try writeFile(level, seconds: 40, channels: 2, rate: 48_000) { _, _ in 0.5 }
    // Earlier command, later command, when the later one comes (s after the earlier), the gain
    // it leaves (master × stream).
    let pairs: [(earlier: String, later: String, after: Double, held: Double)] = [
      (
        #""cmd": "fade", "key": "master.gain", "to": 0, "duration": 4"#,
        #""cmd": "set", "key": "master.gain", "value": 1"#, 1, 1
      ),
      (#""cmd": "fade-out", "duration": 4"#, #""cmd": "set", "key": "master.gain", "value": 1"#, 1, 1),
      (
        #""cmd": "animate", "key": "master.gain", "animation": {"type": "basic", "to": 0, "duration": 4}"#,
        #""cmd": "set", "key": "master.gain", "value": 0.8"#, 1, 0.8
      ),
      (
        #""cmd": "fade", "key": "streams.main.gain", "to": 0, "duration": 4"#,
        #""cmd": "set", "key": "streams.main.gain", "value": 0.8, "duration": 0.5"#, 1, 0.8
      ),
      (
        #""cmd": "animate", "key": "master.gain", "animation": {"type": "keyframe", "values": [1, 0, 1, 0], "duration": 4}"#,
        #""cmd": "set", "key": "master.gain", "value": 0.5"#, 1, 0.5
      ),
      (
        #""cmd": "animate", "key": "master.gain", "animation": {"type": "basic", "from": 1, "to": 0.2, "duration": 0.7, "repeatCount": "inf", "autoreverses": true}"#,
        #""cmd": "fade", "key": "master.gain", "to": 0.6, "duration": 0.5"#, 1.3, 0.6
      ),
    ]
    let window = 6.0
    var lines = [#"{"cmd": "play", "path": "\#(level)", "stream": "main"}"#]
    for (index, pair) in pairs.enumerated() {
      let start = 0.5 + window * Double(index)
      lines.append(#"{"at": \#(start), "cmd": "set", "key": "master.gain", "value": 1, "duration": 0}"#)
      lines.append(#"{"at": \#(start), "cmd": "set", "key": "streams.main.gain", "value": 1, "duration": 0}"#)
      lines.append(#"{"at": \#(start + 0.01), \#(pair.earlier)}"#)
      lines.append(#"{"at": \#(start + 0.01 + pair.after), \#(pair.later)}"#)
    }
    let offline = try playedLiveAndRendered(lines.joined(separator: "\n"), daemon: daemon)
    let gain = stride(from: 0, to: offline.count, by: 2).map { Double(offline[$0]) / 0.5 }
    for (index, pair) in pairs.enumerated() {
      let start = 0.5 + window * Double(index)
      let later = Int((start + 0.01 + pair.after) * 48_000)
      let end = min(Int((start + window) * 48_000), gain.count)
      let heard = Array(gain[(later - 1)..<end])
      let step = zip(heard, heard.dropFirst()).map { abs($1 - $0) }.max() ?? 0
      // A 0.25 s default-curve set over a full swing steps under 2e-4 a sample; the jumps this
      // prevents are 0.24 to 1.
      #expect(step < 0.002, "pair \(index): a step of \(step)")
      let tail = gain[(end - 48_000)..<end]
      #expect(
        tail.allSatisfy { abs($0 - pair.held) < 1e-4 },
        "pair \(index): ends at \(tail.last ?? .nan), not \(pair.held)")
    }
  }

  /// Loudness-normalised plays (a bed far too loud, a voice far too quiet, under a fade and
  /// a pan) trim the same samples live and offline; the offline render's bed measures the target.
  @Test func aNormalisedTimelinePlayedLiveIsTheTimelineRenderedOffline() throws {
    let daemon = try DaemonProcess(periodMs: 20, bufferMs: 80, pacing: "device", recordingIsPipe: true)
    let bed = "\(daemon.directory)/bed.wav"
    let voice = "\(daemon.directory)/voice.wav"
    try writeFile(bed, seconds: 3, channels: 2, rate: 48_000) { f, c in
      Float(sin(Double(f) * (c == 0 ? 0.031 : 0.047)) * 0.7)
    }
    try writeFile(voice, seconds: 1, channels: 1, rate: 44_100) { f, _ in Float(sin(Double(f) * 0.11) * 0.05) }
    let bedLoudness = try Loudness.measure(path: bed).integrated
    let text = """
      {"cmd": "play", "path": "\(bed)", "stream": "bed", "loudness": "-18LUFS"}
      {"at": 1.2, "cmd": "play", "path": "\(voice)", "stream": "voice", "loudness": -20}
      {"at": 1.5, "cmd": "fade", "key": "streams.bed.gain", "to": 0.5, "duration": 0.5}
      {"at": 1.6, "cmd": "set", "key": "streams.voice.pan", "value": 0.5, "duration": 0.2}
      """
    let offline = try playedLiveAndRendered(text, daemon: daemon)
    // The bed alone, before the voice: at the target, not at its own loudness.
    let start = try #require(offline.firstIndex { $0 != 0 }) / 2
    let segment = "\(daemon.directory)/segment.wav"
    let writer = try SoundFileWriter(path: segment, sampleRate: 48_000, channels: 2, encoding: .float)
    let frames = 48_000
    try Array(offline[(2 * start)..<(2 * (start + frames))]).withUnsafeBufferPointer {
      try writer.write($0.baseAddress!, frames: frames)
    }
    try writer.close()
    let heard = try Loudness.measure(path: segment).integrated
    try #require(bedLoudness > -10, "the bed is made well above the target: \(bedLoudness) LUFS")
    #expect(abs(heard + 18) <= 0.5, "the bed rendered at \(heard) LUFS")
  }

  /// Plays `text` live on `daemon` (device pacing into a pipe) and renders it offline with the
  /// daemon's configuration, and expects the two the same from the first sample the timeline
  /// touches on: the offline render's samples.
  private func playedLiveAndRendered(_ text: String, daemon: DaemonProcess) throws -> [Float] {
    let parsed = Timeline.parse(text, file: "show.jsonl")
    try #require(parsed.errors.isEmpty, "\(parsed.errors)")

    // Live: every line sent while the render thread waits for the full pipe to be read (no
    // stream plays yet, so it fills it at the clock's pace: well within a second and a half).
    try #require(daemon.pipeReadEnd >= 0)
    usleep(1_500_000)
    let client = try daemon.client()
    for (index, entry) in parsed.entries.enumerated() {
      var request = entry.request
      request.id = .integer(index + 1)
      // Every line scheduled, the first ones at 0 (the sample a line without one lands on): their
      // replies come in any order, so the `version` below is not held behind them.
      request.at = .delay(entry.offset)
      try client.send(raw: request.json.serialized())
    }
    // rampd handles a connection's scheduled lines in order, off the event loop (opening files,
    // saving the schedule): `version`'s reply comes once every line before it is handled, each
    // `at` counted from the same sample. Only then may the render thread go on.
    try client.send(raw: #"{"id":"handled","cmd":"version"}"#)
    var replies: [JSONValue] = []
    while true {
      let line = try client.readLine()
      if line["id"] == "handled" { break }
      // (A line refused as it arrived would be answered already.)
      if line["event"] == nil { replies.append(line) }
    }
    // The others are answered once the render thread runs.
    let recording = PipeReader(descriptor: daemon.pipeReadEnd)
    while replies.count < parsed.entries.count {
      let line = try client.readLine()
      if line["event"] == nil { replies.append(line) }
    }
    for reply in replies { #expect(reply["ok"] == true, "\(reply.serialized())") }
    let status = try client.request(["cmd": "status"])
    let period = Int(try #require(status["result"]?["output"]?["periodFrames"]?.numberValue))
    try #require(status["result"]?["output"]?["pacing"] == "device")
    // The limiter's latency: live, the show is heard that much after the block it starts in
    // (offline, the file starts on the show's first sample).
    let latency = Int(((status["result"]?["output"]?["limiter"]?["latency"]?.numberValue ?? 0) * 48_000).rounded())

    // Offline: the same lines, the same configuration, blocks of the device's period.
    var options = ShowOptions(input: nil, output: "\(daemon.directory)/offline.wav")
    options.encoding = .float
    options.timeline = parsed.entries
    options.blockFrames = period
    options.configuration = try DaemonConfiguration.load(
      file: "\(daemon.directory)/rampd.toml", environment: [:], overrides: [:])
    let summary = try OfflineShow.render(options)
    let offline = try readSamples("\(daemon.directory)/offline.wav")
    #expect(offline.count == Int(summary.frames) * 2)
    // And as `rampctl render` renders it, in blocks of its own size: the same samples.
    options.blockFrames = OfflineShow.defaultBlockFrames
    options.output = "\(daemon.directory)/default-blocks.wav"
    _ = try OfflineShow.render(options)
    let defaultBlocks = try readSamples(options.output)
    let sameAtDefaultBlocks = defaultBlocks == offline
    #expect(
      sameAtDefaultBlocks,
      "blocks of \(options.blockFrames) and of \(period) render different samples: \(defaultBlocks.count) and \(offline.count), first at \(zip(defaultBlocks, offline).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? -1)"
    )

    // The live recording holds the blocks before the lines (a pipe's worth), the show, then silence.
    let wanted = 96_000 + Int(summary.frames) + 48_000
    let deadline = Date().addingTimeInterval(60)
    while recording.frames < wanted && Date() < deadline { usleep(20_000) }
    daemon.stop()
    let live = recording.samples
    try #require(live.count >= wanted * 2, "recorded \(live.count / 2) frames of \(wanted)")

    let liveStart = try #require(live.firstIndex { $0 != 0 })
    let offlineStart = try #require(offline.firstIndex { $0 != 0 })
    // The lines count from the sample at which rampd's render thread stopped: a whole block.
    #expect(
      (liveStart - offlineStart - 2 * latency) % (2 * period) == 0,
      "\(liveStart - offlineStart) samples apart, \(latency) frames of latency")
    let length = offline.count - offlineStart
    var differing = 0
    var first: Int?
    for index in 0..<length where live[liveStart + index] != offline[offlineStart + index] {
      differing += 1
      if first == nil { first = index }
    }
    #expect(
      differing == 0,
      "\(differing) of \(length) samples differ, the first at frame \(first.map { $0 / 2 } ?? -1): live \(first.map { live[liveStart + $0] } ?? 0), offline \(first.map { offline[offlineStart + $0] } ?? 0)"
    )
    // And after the show, silence live too: the stop ended it.
    #expect(live[(liveStart + length)..<(liveStart + length + 2 * 24_000)].allSatisfy { $0 == 0 })
    return offline
  }

  private func writeFile(
    _ path: String, seconds: Double, channels: Int, rate: Int, signal: (Int, Int) -> Float
  ) throws {
    let frames = Int(seconds * Double(rate))
    let writer = try SoundFileWriter(path: path, sampleRate: rate, channels: channels, encoding: .float)
    var buffer = [Float](repeating: 0, count: frames * channels)
    for frame in 0..<frames {
      for channel in 0..<channels { buffer[frame * channels + channel] = signal(frame, channel) }
    }
    try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
  }

}
