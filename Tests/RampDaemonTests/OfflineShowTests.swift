import Foundation
import RampAudio
import RampDaemon
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// A directory of sound files and timelines for one render, removed with it.
final class ShowBench {
  let directory: String

  init(_ name: String = #function) throws {
    directory =
      NSTemporaryDirectory() + "rampd-show-\(getpid())-\(name.filter(\.isLetter))-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
  }

  deinit { try? FileManager.default.removeItem(atPath: directory) }

  func path(_ name: String) -> String { "\(directory)/\(name)" }

  /// A float WAV of `frames` frames of `signal(frame, channel)`.
  @discardableResult
  func file(
    _ name: String, frames: Int, channels: Int = 1, rate: Int = 48_000, encoding: SampleEncoding = .float,
    signal: (Int, Int) -> Float = { _, _ in 1 }
  ) throws -> String {
    let writer = try SoundFileWriter(path: path(name), sampleRate: rate, channels: channels, encoding: encoding)
    var buffer = [Float](repeating: 0, count: frames * channels)
    for frame in 0..<frames {
      for channel in 0..<channels { buffer[frame * channels + channel] = signal(frame, channel) }
    }
    try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
    return path(name)
  }

  func timeline(_ text: String) throws -> [Timeline.Entry] {
    let parsed = Timeline.parse(text, file: "t.jsonl")
    try #require(parsed.errors.isEmpty, "\(parsed.errors)")
    return parsed.entries
  }

  /// Renders into `out.wav` (float) and reads it back, interleaved. Without the limiter unless
  /// `configure` turns it on: the tests read gains off full-scale constant inputs.
  func render(
    input: String?, _ timeline: String = "", output: String = "out.wav",
    _ configure: (inout ShowOptions) -> Void = { _ in }
  ) throws -> (samples: [Float], channels: Int, summary: RenderSummary) {
    var options = ShowOptions(input: input, output: path(output))
    options.encoding = .float
    options.timeline = try self.timeline(timeline)
    options.configuration.output.limiter.enabled = false
    configure(&options)
    let summary = try OfflineShow.render(options)
    let reader = try SoundFileReader(path: path(output))
    var samples = [Float](repeating: 0, count: Int(reader.frames) * reader.channels)
    let read = try samples.withUnsafeMutableBufferPointer {
      try reader.read(into: $0.baseAddress!, frames: Int(reader.frames))
    }
    #expect(Int64(read) == summary.frames)
    return (samples, reader.channels, summary)
  }
}

/// Every sample of a sound file, interleaved, as floats.
func readSamples(_ path: String) throws -> [Float] {
  let reader = try SoundFileReader(path: path)
  var samples = [Float](repeating: 0, count: Int(reader.frames) * reader.channels)
  _ = try samples.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: Int(reader.frames)) }
  return samples
}

/// `rampctl render`'s engine: a timeline of protocol requests played by rampd's own player into a
/// file. Constant inputs make the output the gain applied, sample by sample.
@Suite struct OfflineShowTests {
  /// A configured duck rule: the voice lowers the main stream by 6 dB.
  static let talkRule = """
    [[duck]]
    name = "talk"
    targets = ["streams.main.gain"]
    trigger = "voice"
    depth = 6
    attack = "100ms"
    hold = "200ms"
    release = "500ms"

    """
  static let rate = 48_000.0
  /// The default declick ramp, in frames.
  static let declick = 480

  @Test(arguments: ["linear", "ease-in-out", "default", "cubic-bezier(0.1,1,1,0.2)", "qsin", "exp", "steps(4)"])
  func fadeInOfConstantInputIsTheCurve(_ curveName: String) throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 30_000, channels: 2)
    let curve = try TimingFunction(parsing: curveName)
    let (samples, channels, summary) = try bench.render(input: input) {
      $0.fadeIn = 0.5
      $0.curve = curve
    }
    #expect(summary.frames == 30_000 && samples.count == 60_000)
    var worst = 0.0
    for f in 0..<30_000 {
      let expected = f < 24_000 ? curve.value(at: Double(f) / 24_000) : 1
      for c in 0..<channels { worst = max(worst, abs(Double(samples[f * channels + c]) - expected)) }
    }
    #expect(worst <= 1e-6, "\(curveName): worst \(worst)")
  }

  /// A falling fade shape is ffmpeg's afade=t=out: g(1 − x), ending in exactly the target.
  @Test func fadeOutMirrorsTheShape() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 48_000)
    let (samples, _, _) = try bench.render(input: input) {
      $0.fadeOut = 0.5
      $0.curve = .fade(.qsin)
    }
    #expect(samples.count == 48_000)
    #expect(samples[0..<24_000].allSatisfy { $0 == 1 }, "the input starts at full level, with no declick")
    var worst = 0.0
    for k in 0..<24_000 {
      worst = max(worst, abs(Double(samples[24_000 + k]) - FadeShape.qsin.gain(1 - Double(k) / 24_000)))
    }
    #expect(worst <= 1e-6)
  }

  @Test func linesLandOnExactSamples() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 48_000)
    let (samples, _, _) = try bench.render(
      input: input,
      """
      {"at": 0.25, "cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0}
      {"at": "500ms", "cmd": "fade", "key": "streams.main.gain", "to": 0, "duration": "250ms", "curve": "linear"}
      """
    ) { $0.blockFrames = 1000 }
    #expect(samples[11_999] == 1)
    #expect(samples[12_000] == 0.5)
    #expect(samples[23_999] == 0.5)
    #expect(abs(Double(samples[24_000 + 6_000]) - 0.5 * 0.5) < 1e-6)  // master 0.5 × stream halfway down
    #expect(samples[36_000] == 0)
  }

  /// A timeline far longer than the render thread's command queue (4096) and schedule: 20,000
  /// lines a few frames apart, after 2,000 more on the first sample, each lands on its sample at
  /// any block size (the lines go to the player as the render reaches them, in parts).
  @Test(arguments: [64, 4096])
  func aTimelineOfTwentyThousandLinesRendersEveryLine(blockFrames: Int) throws {
    let bench = try ShowBench()
    let spacing = 7
    let count = 20_000
    let input = try bench.file("ones.wav", frames: spacing * count + 1_000)
    func value(_ line: Int) -> Double { Double(line % 1000 + 1) / 1024 }
    var lines = (0..<2_000).map { _ in #"{"cmd": "set", "key": "master.gain", "value": 0.25, "duration": 0}"# }
    for line in 0..<count {
      let at = String(format: "%.17g", Double(line * spacing) / Self.rate)
      lines.append(#"{"at": \#(at), "cmd": "set", "key": "master.gain", "value": \#(value(line)), "duration": 0}"#)
    }
    let (samples, _, _) = try bench.render(input: input, lines.joined(separator: "\n")) {
      $0.blockFrames = blockFrames
    }
    var wrong: [(frame: Int, got: Float, wanted: Float)] = []
    for line in 0..<count {
      for frame in line * spacing..<(line + 1) * spacing where samples[frame] != Float(value(line)) {
        wrong.append((frame, samples[frame], Float(value(line))))
      }
    }
    #expect(wrong.isEmpty, "\(wrong.count) samples off, the first: \(wrong.prefix(5))")
  }

  /// The implicit transaction of a `set` without `duration` is the daemon's (`[implicit]`), live and
  /// offline alike: the one timeline language.
  @Test func setWithoutDurationTakesTheImplicitTransaction() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 48_000)
    let (samples, _, _) = try bench.render(
      input: input, #"{"at": 0.25, "cmd": "set", "key": "master.gain", "to": 0.5}"#
    ) {
      $0.configuration.transaction.duration = 0.1
      $0.configuration.transaction.timingFunction = .linear
    }
    #expect(samples[12_000] == 1)
    #expect(abs(samples[12_000 + 2_400] - 0.75) < 1e-6)
    #expect(samples[12_000 + 4_800] == 0.5)
  }

  /// `render --config` sets the player up as a daemon with that file starts: its `[[duck]]`
  /// rules act on the show (`duck-add` needs a live daemon; a configured rule is how a render
  /// ducks).
  @Test func aConfiguredDuckActsOnTheShow() throws {
    let bench = try ShowBench()
    let input = try bench.file("bed.wav", frames: 48_000 * 3) { _, _ in 0.5 }
    let voice = try bench.file("voice.wav", frames: 48_000) { _, _ in 0.25 }
    let play = #"{"at": 1, "cmd": "play", "path": "\#(voice)", "stream": "voice"}"#
    let configuration = try DaemonConfiguration.parse(
      toml: Self.talkRule, source: "test")
    let (ducked, _, _) = try bench.render(input: input, play, output: "ducked.wav") {
      $0.configuration = configuration
    }
    let (plain, _, _) = try bench.render(input: input, play, output: "plain.wav")
    // Before the voice, the bed alone; under it, the bed 6 dB down; after the hold and release,
    // the bed alone again.
    let under = Float(0.5 * pow(10, -6.0 / 20) + 0.25)
    for (at, wanted, unducked) in [(0.5, 0.5, 0.5), (1.5, under, 0.75), (1.9, under, 0.75), (2.9, 0.5, 0.5)] {
      let index = Int(at * Self.rate)
      #expect(abs(ducked[index] - Float(wanted)) < 1e-5, "at \(at) s: \(ducked[index]), not \(wanted)")
      #expect(abs(plain[index] - Float(unducked)) < 1e-5, "at \(at) s without the rule: \(plain[index])")
    }
  }

  /// `rampctl render --config` reads a plain `db` in the timeline with the configuration's
  /// `fade.db-floor`, as rampd with it reads a request: the same bytes as the floor written out,
  /// and not those of the default −60 dB. (The samples: a float WAV's header holds the time it
  /// was written.)
  @Test func aPlainDecibelFadeTakesTheConfiguredFloor() throws {
    let bench = try ShowBench()
    let input = try bench.file("in.wav", frames: 48_000 * 2) { _, _ in 0.5 }
    try "[fade]\ndb-floor = -50\n".write(toFile: bench.path("floor.toml"), atomically: true, encoding: .utf8)
    func render(_ space: String, config: Bool) throws -> [Float] {
      let name = "\(space)-\(config)"
      try #"{"at": 0.5, "cmd": "fade", "key": "master.gain", "to": 0, "duration": 1, "space": "\#(space)"}"#
        .write(toFile: bench.path("\(name).jsonl"), atomically: true, encoding: .utf8)
      let run = try runProcess(
        Executables.rampctl,
        ["render", input, bench.path("\(name).wav"), "--script", bench.path("\(name).jsonl")]
          + (config ? ["--config", bench.path("floor.toml")] : []))
      #expect(run.status == 0, "\(run)")
      return try readSamples(bench.path("\(name).wav"))
    }
    // Compared here, not in #expect: it would diff every sample to describe a failure.
    let configured = try render("db", config: true)
    let sameAsWritten = configured == (try render("db(-50)", config: false))
    let sameAsDefault = configured == (try render("db(-60)", config: false))
    #expect(sameAsWritten, "a plain db with the configured -50 dB floor is not db(-50)")
    #expect(!sameAsDefault, "a plain db with the configured -50 dB floor is db(-60)")
  }

  /// The same show at any block size gives the same bytes: a fade, a configured duck its trigger
  /// stream sets off, a seek, a fade in dB down to the configured floor, each landing between
  /// block starts.
  @Test func theSameShowAtAnyBlockSizeGivesTheSameBytes() throws {
    let bench = try ShowBench()
    let input = try bench.file("bed.wav", frames: 48_000 * 6) { frame, _ in Float(sin(Double(frame) * 0.0288)) * 0.5 }
    let voice = try bench.file("voice.wav", frames: 48_500) { frame, _ in Float(sin(Double(frame) * 0.0863)) * 0.3 }
    let configuration = try DaemonConfiguration.parse(
      toml: "[fade]\ndb-floor = -50\n" + Self.talkRule, source: "test")
    let show = #"""
      {"at": 0.5037, "cmd": "fade", "key": "streams.main.gain", "to": 0.3, "duration": 0.4, "space": "db"}
      {"at": 1.0123, "cmd": "play", "path": "\#(voice)", "stream": "voice"}
      {"at": 2.7771, "cmd": "seek", "stream": "main", "position": 0.3}
      {"at": 3.5, "cmd": "fade", "key": "master.gain", "to": 0, "duration": 1, "space": "db"}
      """#
    var renders: [(blockFrames: Int, samples: [Float])] = []
    for blockFrames in [64, 480, 4096] {
      let (samples, _, _) = try bench.render(input: input, show, output: "\(blockFrames).wav") {
        $0.configuration = configuration
        $0.blockFrames = blockFrames
      }
      renders.append((blockFrames, samples))
    }
    for (blockFrames, samples) in renders.dropFirst() {
      let first = zip(samples, renders[0].samples).enumerated().first { $0.element.0 != $0.element.1 }?.offset
      let lengths = "\(samples.count) samples, and \(renders[0].samples.count) in blocks of 64"
      #expect(samples.count == renders[0].samples.count, "blocks of \(blockFrames): \(lengths)")
      #expect(first == nil, "blocks of \(blockFrames) and of 64 differ from sample \(first ?? -1) on")
    }
  }

  @Test func renderingTwiceGivesTheSameBytes() throws {
    let bench = try ShowBench()
    var seed: UInt32 = 12345
    let input = try bench.file("noise.wav", frames: 96_000, channels: 2, encoding: .pcm16) { _, _ in
      seed = seed &* 1_664_525 &+ 1_013_904_223
      return Float(Int32(bitPattern: seed)) / Float(Int32.max) * 0.9
    }
    let second = try bench.file("second.wav", frames: 30_000, channels: 1, rate: 44_100) { f, _ in
      Float(sin(Double(f) * 0.05) * 0.3)
    }
    let timeline = """
      {"at": 0.7, "cmd": "set", "key": "master.gain", "to": 0.2, "duration": 0.3, "curve": "ease-in-out"}
      {"at": 0.2, "cmd": "play", "path": "\(second)", "stream": "b", "fadeIn": 0.1}
      {"at": 0.4, "cmd": "seek", "stream": "main", "position": 1.5}
      {"at": 0.5, "cmd": "pause", "stream": "b", "fade": 0.05}
      {"at": 0.8, "cmd": "resume", "stream": "b"}
      """
    var outputs: [Data] = []
    for name in ["a.wav", "b.wav"] {
      var options = ShowOptions(input: input, output: bench.path(name))
      options.fadeIn = 0.3
      options.fadeOut = 0.4
      options.curve = .fade(.esin)
      options.timeline = try bench.timeline(timeline)
      _ = try OfflineShow.render(options)
      outputs.append(try Data(contentsOf: URL(fileURLWithPath: bench.path(name))))
    }
    let same = outputs[0] == outputs[1]
    #expect(same)
    #expect(outputs[0].count > 48_000 * 2 * 2, "a second of audio or more")
  }

  /// Every format this machine's libsndfile writes: rendered, read back, fade-in present.
  @Test func rendersIntoEveryWritableFormat() throws {
    let bench = try ShowBench()
    let input = try bench.file("tone.wav", frames: 48_000, channels: 2, encoding: .pcm24) { f, _ in
      Float(sin(Double(f) * 2 * .pi * 440 / 48_000) * 0.5)
    }
    #expect(SoundFileWriter.writableExtensions.count >= 5)
    for ext in SoundFileWriter.writableExtensions {
      var options = ShowOptions(input: input, output: bench.path("out.\(ext)"))
      options.fadeIn = 0.5
      options.fadeOut = 0.2
      options.encoding = .pcm16
      let summary = try OfflineShow.render(options)
      #expect(summary.frames == 48_000)
      let reader = try SoundFileReader(path: bench.path("out.\(ext)"))
      #expect(reader.channels == 2 && reader.sampleRate == 48_000, "\(ext)")
      var samples = [Float](repeating: 0, count: 60_000 * 2)
      let frames = try samples.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 60_000) }
      #expect(abs(frames - 48_000) < 2_000, "\(ext): \(frames) frames")
      let head = samples.prefix(200).map { abs($0) }.max() ?? 1
      let middle = samples[(24_000 * 2)..<(26_000 * 2)].map { abs($0) }.max() ?? 0
      #expect(head < 0.01, "\(ext): fade-in missing (\(head))")
      #expect(middle > 0.4, "\(ext): signal missing (\(middle))")
    }
  }

  @Test func unreadableInputIsNamed() throws {
    let bench = try ShowBench()
    let missing = bench.path("missing.wav")
    do {
      _ = try bench.render(input: missing)
      Issue.record("rendered a missing file")
    } catch let error as AudioError {
      #expect(error.code == .unreadableFile)
      #expect(error.message.contains(missing))
    }
  }

  // MARK: Commands a render now runs

  /// `play` adds a stream on its exact sample (with its declick ramp in), mixed with the input.
  @Test func aSecondFilePlaysOnItsSample() throws {
    let bench = try ShowBench()
    let input = try bench.file("half.wav", frames: 48_000) { _, _ in 0.5 }
    let jingle = try bench.file("jingle.wav", frames: 12_000) { _, _ in 0.25 }
    let (samples, _, summary) = try bench.render(
      input: input, #"{"at": 0.5, "cmd": "play", "path": "\#(jingle)", "stream": "jingle", "gain": 0.5}"#)
    #expect(summary.frames == 48_000)
    #expect(samples[0..<24_000].allSatisfy { $0 == 0.5 })
    // The declick ramp: linear over 10 ms.
    #expect(abs(samples[24_000 + 240] - (0.5 + 0.125 * 0.5)) < 1e-6)
    #expect(samples[(24_000 + Self.declick)..<36_000].allSatisfy { $0 == 0.625 })
    #expect(samples[36_000..<48_000].allSatisfy { $0 == 0.5 }, "the jingle ends after its 12 000 frames")
  }

  /// With no input, the show lasts until its last stream ends: here the second file, played 2 s
  /// in, silence between.
  @Test func withoutAnInputTheWholeShowIsRendered() throws {
    let bench = try ShowBench()
    let a = try bench.file("a.wav", frames: 48_000, channels: 2) { _, _ in 0.5 }
    let b = try bench.file("b.wav", frames: 24_000, channels: 2) { _, _ in 0.25 }
    let (samples, channels, summary) = try bench.render(
      input: nil,
      """
      {"cmd": "play", "path": "\(a)", "stream": "a"}
      {"at": 2, "cmd": "play", "path": "\(b)", "stream": "b"}
      """)
    #expect(channels == 2)
    #expect(summary.frames == 120_000, "until b's last frame: 2 s + 0.5 s")
    #expect(samples[(2 * Self.declick)..<(2 * 48_000)].allSatisfy { $0 == 0.5 })
    #expect(samples[(2 * 48_000)..<(2 * 96_000)].allSatisfy { $0 == 0 })
    #expect(samples[(2 * (96_000 + Self.declick))...].allSatisfy { $0 == 0.25 })
  }

  /// `stop` with a fade ramps the transport to silence; the show ends where the ramp does.
  @Test func stopFadesOutAndEndsTheShow() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 96_000)
    let (samples, _, summary) = try bench.render(
      input: input, #"{"at": 0.5, "cmd": "stop", "stream": "main", "fade": 0.1, "curve": "linear"}"#)
    #expect(summary.frames == 28_800, "0.5 s + the 0.1 s fade")
    #expect(samples[23_999] == 1)
    #expect(abs(samples[24_000 + 2_400] - 0.5) < 1e-6)
  }

  /// `pause` holds the stream's place and `resume` continues from it: the input is a ramp of its
  /// own frame numbers, so what plays says where the stream is.
  @Test func pauseAndResumeContinueWhereTheStreamWas() throws {
    let bench = try ShowBench()
    let input = try bench.file("count.wav", frames: 96_000) { f, _ in Float(f) / 1_000_000 }
    let (samples, _, summary) = try bench.render(
      input: input,
      """
      {"at": 0.5, "cmd": "pause", "stream": "main"}
      {"at": 1, "cmd": "resume", "stream": "main"}
      """
    ) { $0.blockFrames = 1024 }
    #expect(samples[23_999] == Float(23_999) / 1_000_000)
    // Silent while paused, after its ramp out.
    #expect(samples[(24_000 + 2 * 1024)..<48_000].allSatisfy { $0 == 0 })
    // After the ramp in, the stream plays on from where it held: one frame per sample, from a
    // place a little after 0.5 s (the ramp out played through), not from 1 s.
    let resumed = 48_000 + Self.declick
    let position = Int((samples[resumed] * 1_000_000).rounded())
    #expect(position > 24_000 && position < 24_000 + 3 * 1024, "resumed at frame \(position)")
    let continuous = (resumed..<(resumed + 1_000)).allSatisfy { f in
      Int((samples[f] * 1_000_000).rounded()) == position + f - resumed
    }
    #expect(continuous)
    let played = Int64(96_000 - position)
    #expect(summary.frames == Int64(resumed) + played, "played to its end")
  }

  /// `seek` ramps out, jumps, and ramps back in at the new position.
  @Test func seekJumpsToThePosition() throws {
    let bench = try ShowBench()
    let input = try bench.file("count.wav", frames: 144_000) { f, _ in Float(f) / 1_000_000 }
    let (samples, _, _) = try bench.render(
      input: input, #"{"at": 0.5, "cmd": "seek", "stream": "main", "position": 2}"#
    ) { $0.blockFrames = 1024 }
    #expect(samples[23_999] == Float(23_999) / 1_000_000)
    // Some blocks later it plays from 2 s on, one frame per sample.
    let later = 24_000 + 8 * 1024
    let position = Int((samples[later] * 1_000_000).rounded())
    #expect(position > 96_000 && position < 96_000 + 8 * 1024, "at frame \(position)")
    let continuous = (later..<(later + 1_000)).allSatisfy { f in
      Int((samples[f] * 1_000_000).rounded()) == position + f - later
    }
    #expect(continuous)
  }

  /// A seek lands on its own sample, at any block size: the old audio ramps out over the declick
  /// ramp from the seek's sample, and the new position's first frame plays the declick ramp after
  /// it, ramping in. (It used to wait for the 64-sample decision grid: the jump landed 640, 664
  /// and 648 samples after seeks at 1 s, 1 s + 1000 and 1 s + 3000 samples.)
  @Test(arguments: [0, 1000, 3000, 37, 4095])
  func aSeekLandsOnItsOwnSample(offset: Int) throws {
    let bench = try ShowBench()
    let input = try bench.file("count.wav", frames: 192_000) { f, _ in Float(f) / 1_000_000 }
    let at = 48_000 + offset
    let target = 96_000
    let show = #"{"at": \#(Double(at) / Self.rate), "cmd": "seek", "stream": "main", "position": 2}"#
    let declick = Self.declick
    for blockFrames in [64, 100, 1024, 4096] {
      let (samples, _, _) = try bench.render(input: input, show, output: "\(blockFrames).wav") {
        $0.blockFrames = blockFrames
      }
      let context = "seek at \(at), blocks of \(blockFrames)"
      #expect(samples[at - 1] == Float(at - 1) / 1_000_000, "\(context): the old audio up to the seek")
      // The ramp out begins on the seek's sample: the k-th frame of the old audio at 1 − (k + 1)/D.
      let out = (0..<declick).map { k in samples[at + k] / (Float(at + k) / 1_000_000) }
      let outOff = zip(out.indices, out).first { abs($0.1 - (1 - Float($0.0 + 1) / Float(declick))) > 1e-4 }
      #expect(outOff == nil, "\(context): ramp out off at frame \(outOff.map { "\($0.0): \($0.1)" } ?? "")")
      // The declick ramp later the new position plays, ramping in: the k-th frame at (k + 1)/D.
      let landing = at + declick
      let inOff = (0..<declick).first { k in
        abs(samples[landing + k] - Float(target + k) / 1_000_000 * Float(k + 1) / Float(declick)) > 1e-6
      }
      #expect(inOff == nil, "\(context): ramp in off at frame \(inOff ?? -1): \(samples[landing + (inOff ?? 0)])")
      let plays = (landing + declick..<landing + declick + 2_000).allSatisfy { f in
        samples[f] == Float(target + f - landing) / 1_000_000
      }
      #expect(plays, "\(context): the new position from sample \(landing), one frame per sample")
    }
  }

  /// `pan` moves a stereo stream between the channels (a balance: +1 is the right alone).
  @Test func panMovesBetweenChannels() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 48_000, channels: 2)
    let (samples, _, _) = try bench.render(
      input: input, #"{"at": 0.5, "cmd": "set", "key": "streams.main.pan", "value": 0.5, "duration": 0}"#)
    #expect(samples[2 * 23_999] == 1 && samples[2 * 23_999 + 1] == 1)
    #expect(samples[2 * 24_000] == 0.5 && samples[2 * 24_000 + 1] == 1)
    #expect(samples[2 * 47_999] == 0.5 && samples[2 * 47_999 + 1] == 1)
  }

  /// Each kind of `animate`, on a constant input, is the engine's own curve from its sample on:
  /// the same animation added to an engine of its own at that sample renders the same values.
  @Test(arguments: [
    #"{"type":"keyframe","values":[0.2,1,0.6],"keyTimes":[0,0.3,1],"timingFunctions":["ease-out","ease-in"],"duration":0.5}"#,
    #"{"type":"spring","from":0,"to":1,"duration":0.3,"bounce":0.3}"#,
    #"{"type":"spring","from":0.2,"to":0.9,"stiffness":300,"damping":8}"#,
    #"{"type":"basic","from":1,"to":0.2,"duration":0.1,"repeatCount":3,"autoreverses":true,"beginTime":0.05}"#,
    #"{"type":"basic","by":-0.1,"duration":0.1,"repeatCount":4,"cumulative":true}"#,
    #"{"type":"keyframe","values":[0,-0.3,0],"duration":0.1,"additive":true,"repeatCount":5}"#,
    #"{"type":"group","duration":0.4,"animations":[{"type":"basic","from":1,"to":0.3,"duration":0.2},{"type":"keyframe","values":[0,-0.2,0],"additive":true,"duration":0.4}]}"#,
    #"{"type":"basic","from":0.1,"to":0.9,"duration":0.3,"valueSpace":"db","timingFunction":"ease-in"}"#,
  ])
  func animateIsTheEnginesCurve(_ animation: String) throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 72_000)
    let at = 0.25
    let line = #"{"at": \#(at), "cmd": "animate", "key": "master.gain", "animation": \#(animation)}"#
    let (samples, _, _) = try bench.render(input: input, line)
    // The same animation in an engine of its own, added at the same sample.
    guard case .animate(let animate) = try bench.timeline(line)[0].request.command else {
      Issue.record("not an animate")
      return
    }
    // A begin time counts from the command's sample.
    var animation = animate.animation
    if let begin = animation.timing.beginTime { animation.timing.beginTime = at + begin }
    let engine = try AnimationEngine(sampleRate: Self.rate, maxBlockSize: 72_000)
    let master = try engine.define("master.gain", value: 1, range: 0...1)
    // The show lasts until the animation settles, past the input's end (silence there).
    #expect(samples.count >= 72_000)
    var expected = [Float](repeating: 0, count: 72_000)
    let start = Int(at * Self.rate)
    engine.advance(by: start)
    try engine.add(animation, forKey: "animation", to: "master.gain")
    expected.withUnsafeMutableBufferPointer { buffer in
      engine.render(master, start: engine.now, count: 72_000 - start, into: buffer.baseAddress! + start)
    }
    #expect(samples[0..<start].allSatisfy { $0 == 1 })
    var worst: Float = 0
    for f in start..<72_000 { worst = max(worst, abs(samples[f] - expected[f])) }
    #expect(worst == 0, "worst difference \(worst)")
    #expect(Set(samples[start..<72_000]).count > 10, "the curve moves")
  }

  /// A group animates several streams at once; a batch applies its commands on one sample (a
  /// crossfade).
  @Test func aBatchCrossfadesOnOneSample() throws {
    let bench = try ShowBench()
    let a = try bench.file("a.wav", frames: 96_000) { _, _ in 0.5 }
    let b = try bench.file("b.wav", frames: 96_000) { _, _ in 0.25 }
    let (samples, _, _) = try bench.render(
      input: nil,
      """
      {"cmd": "play", "path": "\(a)", "stream": "a"}
      {"cmd": "play", "path": "\(b)", "stream": "b", "gain": 0}
      {"at": 1, "cmd": "batch", "commands": [{"cmd": "fade", "key": "streams.a.gain", "to": 0, "duration": 0.5, "curve": "linear"}, {"cmd": "fade", "key": "streams.b.gain", "to": 1, "duration": 0.5, "curve": "linear"}]}
      """)
    #expect(samples[47_999] == 0.5)
    let halfway: Float = 0.5 * 0.5 + 0.25 * 0.5
    #expect(abs(samples[60_000] - halfway) < 1e-6)
    #expect(samples[72_000..<96_000].allSatisfy { $0 == 0.25 })
  }

  /// `cancel` holds the audible value; `remove` returns to the model value through the declick ramp.
  @Test func cancelHoldsAndRemoveReturns() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 96_000)
    let (samples, _, _) = try bench.render(
      input: input,
      """
      {"cmd": "animate", "key": "master.gain", "name": "down", "animation": {"type": "basic", "from": 1, "to": 0, "duration": 1}}
      {"at": 0.5, "cmd": "cancel", "key": "master.gain"}
      {"at": 1, "cmd": "animate", "key": "streams.main.gain", "name": "dip", "animation": {"type": "basic", "from": 0.2, "to": 0.2, "duration": 10}}
      {"at": 1.5, "cmd": "remove", "key": "streams.main.gain", "name": "dip"}
      """)
    #expect(abs(samples[24_000] - 0.5) < 1e-4)
    #expect(samples[24_001..<48_000].allSatisfy { $0 == samples[24_000] }, "held")
    let held = samples[24_000]
    #expect(abs(samples[60_000] - held * 0.2) < 1e-6)
    #expect(samples[(72_000 + Self.declick)..<96_000].allSatisfy { $0 == held }, "back to the model value")
  }

  /// README's "At a terminal" sequence, rendered as the requests rampctl sends: a 30 s fade-in,
  /// master.gain to -6 dB over 500 ms and the tremolo a few milliseconds apart as typed, then
  /// (later than in the README, so the fade-in has come up) a 5 s fade-out that stops, and the
  /// tremolo removed. On a constant input the output is the gain
  /// itself: no step from one sample to the next is larger than the ramps make (together well
  /// under 1e-4 a sample). The tremolo as the README had it (replacing the fade-in on
  /// streams.s1.gain) jumps, and this check finds it.
  @Test func readmeTerminalSequenceNeverJumps() throws {
    let readme = try Markdown.read("README.md")
    let tremolo =
      "rampctl animate master.gain --keyframes 0,-0.25,0 --additive --duration 1s --repeat inf --name tremolo"
    #expect(readme.contains(tremolo), "README.md's tremolo is the one rendered here")
    let bench = try ShowBench()
    // Longer than the render: the file's own end would be a step.
    let alarm = try bench.file("alarm.wav", frames: 27 * 48_000, channels: 2) { _, _ in 0.25 }
    func largestStep(_ tremolo: String) throws -> Float {
      let (samples, channels, _) = try bench.render(
        input: nil,
        """
        {"cmd": "play", "path": "\(alarm)", "stream": "s1", "fadeIn": 30}
        {"at": 0.05, "cmd": "set", "key": "master.gain", "value": "-6dB", "duration": 0.5}
        {"at": 0.1, \(tremolo)}
        {"at": 20, "cmd": "fade-out", "duration": 5, "then": "stop"}
        \(tremolo.contains("master.gain") ? #"{"at": 25.1, "cmd": "remove", "key": "master.gain", "name": "tremolo"}"# : "")
        """
      ) { $0.duration = 26 }
      var largest: Float = 0
      for index in stride(from: channels, to: samples.count, by: channels) {
        largest = max(largest, abs(samples[index] - samples[index - channels]))
      }
      #expect(samples.contains { $0 > 0.01 }, "it was heard")
      return largest
    }
    let additive = try largestStep(
      #""cmd": "animate", "key": "master.gain", "name": "tremolo", "animation": {"type": "keyframe", "values": [0, -0.25, 0], "duration": 1, "additive": true, "repeatCount": "inf"}"#
    )
    #expect(additive < 1e-4, "the largest step from one sample to the next: \(additive)")
    let replacing = try largestStep(
      #""cmd": "animate", "key": "streams.s1.gain", "name": "tremolo", "animation": {"type": "keyframe", "values": [1, 0.5, 1], "duration": 1, "repeatCount": "inf"}"#
    )
    #expect(replacing > 0.05, "a tremolo that replaces the fade-in jumps: \(replacing)")
  }

  /// A command that needs a live daemon, a clock time, or a schedule that comes back (`repeat`)
  /// is refused before anything is written, naming its line; so are a schedule's `ack`, `tag` and
  /// `yield`, which no timeline line takes.
  @Test func liveOnlyCommandsAreRefusedByLine() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 4_800)
    let timeline = try bench.timeline(
      """
      {"cmd": "status"}
      {"at": 1, "cmd": "set", "key": "master.gain", "value": 0.5}
      {"cmd": "wait", "key": "master.gain"}
      {"cmd": "subscribe"}
      {"at": "23:00", "cmd": "stop"}
      {"cmd": "batch", "commands": [{"cmd": "get", "key": "master.gain"}]}
      {"cmd": "play", "path": "a.wav", "queue": ["b.wav"]}
      {"cmd": "next", "stream": "s1"}
      {"at": 2, "repeat": {"every": 60}, "cmd": "set", "key": "master.gain", "value": 0.5}
      """)
    do {
      var options = ShowOptions(input: input, output: bench.path("out.wav"))
      options.timeline = timeline
      _ = try OfflineShow.render(options)
      Issue.record("rendered")
    } catch let failure as Timeline.Failure {
      #expect(failure.messages.count == 8, "\(failure.messages)")
      #expect(failure.messages[7].hasPrefix("t.jsonl:9: repeat: a render runs each line once"), "\(failure.messages)")
      #expect(failure.messages[0].hasPrefix("t.jsonl:1: cmd: 'status' needs a live daemon"))
      #expect(failure.messages[1].hasPrefix("t.jsonl:3: cmd: 'wait'"))
      #expect(failure.messages[2].hasPrefix("t.jsonl:4: cmd: 'subscribe'"))
      #expect(failure.messages[3].hasPrefix("t.jsonl:5: at: a clock time"))
      #expect(failure.messages[4].hasPrefix("t.jsonl:6: cmd: 'get'"))
      #expect(failure.messages[5].hasPrefix("t.jsonl:7: queue: 'play' with a queue needs a live daemon"))
      #expect(failure.messages[6].hasPrefix("t.jsonl:8: cmd: 'next' needs a live daemon"))
    }
    #expect(!FileManager.default.fileExists(atPath: bench.path("out.wav")))
    for (key, value) in [("ack", "scheduled"), ("tag", "later"), ("yield", "master.gain")] {
      let line = #"{"at": 2, "\#(key)": "\#(value)", "cmd": "set", "key": "master.gain", "value": 0.5}"#
      let parsed = Timeline.parse(line, file: "t.jsonl")
      #expect(parsed.entries.isEmpty)
      #expect(
        parsed.errors.map(\.description) == [
          "t.jsonl:1: \(key): a timeline line's at counts from the timeline's start and makes no schedule on the"
            + " daemon; \(key) is for a request scheduled there (rampctl --at, or with repeat)"
        ])
    }
  }

  /// A line the daemon refuses when it runs stops the render, naming the line and the error.
  @Test func aLineRefusedWhenItRunsIsNamed() throws {
    let bench = try ShowBench()
    let input = try bench.file("ones.wav", frames: 48_000)
    do {
      _ = try bench.render(
        input: input, #"{"at": 0.5, "cmd": "fade", "key": "streams.nothing.gain", "to": 0}"#)
      Issue.record("rendered")
    } catch let failure as OfflineShow.Failure {
      #expect(failure.description.hasPrefix("t.jsonl:1: fade: unknown-key-path"), "\(failure)")
    }
  }
}
