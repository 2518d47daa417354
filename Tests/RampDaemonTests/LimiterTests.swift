import Foundation
import RampAudio
import RampProtocol
import Testing

@testable import RampTestSupport

/// The master's true-peak limiter (`[output] limiter`, on at −1 dBTP by default) on a real rampd,
/// checked on the recording of what it played (raw float, ALSA's `file` plugin).
@Suite struct LimiterTests {
  static let rate = 48_000.0
  /// −1 dBTP as an amplitude.
  static let ceiling = Float(pow(10, -1.0 / 20))

  /// A stereo float WAV of `frames` frames of `signal(frame)` on both channels.
  static func file(_ daemon: DaemonProcess, _ name: String, frames: Int, _ signal: (Int) -> Float) throws -> String {
    let path = "\(daemon.directory)/\(name).wav"
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    let samples = (0..<frames).flatMap { frame -> [Float] in
      let value = signal(frame)
      return [value, value]
    }
    try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
    return path
  }

  static func sine(_ frequency: Double, _ amplitude: Double) -> (Int) -> Float {
    { Float(amplitude * sin(2 * Double.pi * frequency * Double($0) / rate)) }
  }

  /// The true peak of stereo `samples` as libebur128 measures it (`rampctl loudness`), dBTP.
  static func truePeak(_ samples: [Float]) throws -> Double {
    let measurement = try LoudnessMeasurement(channels: 2, sampleRate: 48_000, name: "the recording")
    try samples.withUnsafeBufferPointer { try measurement.add($0.baseAddress!, frames: samples.count / 2) }
    return measurement.result.truePeak
  }

  /// Plays `streams` (path, gain) from the same sample and waits for them to end.
  static func playTogether(_ client: LineClient, _ streams: [(String, Double)]) throws {
    try client.request(["cmd": "subscribe", "events": ["stream-ended", "limiter-engaged"]])
    let plays: [JSONValue] = streams.enumerated().map { index, stream in
      ["cmd": "play", "path": .string(stream.0), "stream": .string("s\(index)"), "gain": .number(stream.1)]
    }
    #expect(try client.request(["cmd": "batch", "commands": .array(plays)]).isOK)
    for index in streams.indices {
      _ = try client.waitForEvent(timeout: 10) { $0["event"] == "stream-ended" && $0["stream"] == .string("s\(index)") }
    }
  }

  /// Two full-scale sines summed (up to +6 dBFS): nothing in the recording is over the ceiling,
  /// sample or true peak; the limiter says it engaged, by how much, and `status` counts it.
  @Test func twoFullScaleStreamsNeverPassTheCeiling() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let status = try client.request(["cmd": "status"]).result["output"]?["limiter"]
    #expect(status?["ceiling"] == -1 && status?["reduction"] == 0 && status?["engagements"] == 0, "\(status ?? .null)")
    let a = try Self.file(daemon, "a", frames: 48_000, Self.sine(997, 1))
    let b = try Self.file(daemon, "b", frames: 48_000, Self.sine(1499, 1))
    try client.request(["cmd": "observe", "key": "master.limiter", "rate": 50])
    try Self.playTogether(client, [(a, 1), (b, 1)])
    // Once: as the streams ramp in (their declick), by what it took then.
    let engaged = client.events.filter { $0["event"] == "limiter-engaged" }
    #expect(engaged.count == 1, "\(engaged)")
    let reduction = engaged.first?["reduction"]?.numberValue ?? 0
    #expect(reduction > 0 && reduction < 8, "reduction \(reduction) dB")
    // Summed, the sines reach 2.0 (+6 dBFS): up to 7 dB over the ceiling.
    let observed = client.events.filter { $0["event"] == "value" }.compactMap { $0["value"]?.numberValue }
    #expect((observed.max() ?? 0) > 5 && (observed.max() ?? 0) < 8, "observed \(observed)")
    #expect(try client.request(["cmd": "status"]).result["output"]?["limiter"]?["engagements"] == 1)
    daemon.stop()
    let played = try daemon.played()
    let loudest = played.map { abs($0) }.max() ?? 0
    #expect(loudest <= Self.ceiling, "a sample at \(20 * log10(loudest)) dBFS")
    let peak = try Self.truePeak(played)
    // libebur128 interpolates at points of its own, between the limiter's: within 0.05 dB.
    #expect(peak <= -1 + 0.05, "true peak \(peak) dBTP")
    #expect(peak > -1.5, "true peak \(peak) dBTP: limited to the ceiling, not far under it")
  }

  /// A signal under the ceiling comes out bit for bit, only later by the limiter's latency; the
  /// same through `rampctl render`.
  @Test func underTheCeilingPassesBitIdentical() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    // −3 dBFS, a few frequencies: a true peak under −1 dBTP.
    let signal: (Int) -> Float = { frame in
      let t = Double(frame) / Self.rate
      return Float(0.35 * sin(2 * .pi * 440 * t) + 0.2 * sin(2 * .pi * 3_001 * t) + 0.15 * sin(2 * .pi * 9_973 * t))
    }
    let frames = 24_000
    let path = try Self.file(daemon, "under", frames: frames, signal)
    #expect(try Self.truePeak((0..<frames).flatMap { [signal($0), signal($0)] }) < -1.5)
    try Self.playTogether(client, [(path, 1)])
    let latency = try client.request(["cmd": "status"]).result["output"]?["limiter"]?["latency"]?.numberValue
    #expect(latency.map { abs($0 * Self.rate - 58) < 0.5 } == true, "latency \(latency ?? -1) s")
    #expect(client.events.allSatisfy { $0["event"] != "limiter-engaged" })
    daemon.stop()
    let played = try daemon.played()
    // The stream's first frame is silent (its declick ramp starts at 0), the next is not.
    let start = try #require((0..<(played.count / 2)).first { played[2 * $0] != 0 }) - 1
    try #require(played.count / 2 >= start + frames)
    let differing = (480..<frames).filter {
      played[2 * (start + $0)] != signal($0) || played[2 * (start + $0) + 1] != signal($0)
    }
    #expect(differing.isEmpty, "\(differing.count) frames differ, the first at \(differing.first ?? -1)")

    // Offline: the same bytes, from the show's first sample (no latency in the file).
    let timeline = "\(daemon.directory)/show.jsonl"
    try #"{"cmd": "play", "path": "\#(path)", "stream": "s"}"#.write(
      toFile: timeline, atomically: true, encoding: .utf8)
    let output = "\(daemon.directory)/offline.wav"
    let run = try runProcess(Executables.rampctl, ["render", output, "--script", timeline, "--encoding", "float"])
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stderr.contains("limiter: -1 dBTP, never engaged"), "\(run.stderr)")
    let offline = try readSamples(output)
    #expect(offline.count == 2 * frames)
    let offlineDiffering = (480..<frames).filter { offline[2 * $0] != signal($0) }
    #expect(offlineDiffering.isEmpty, "\(offlineDiffering.count) frames differ offline")
  }

  /// A loud passage (+12 dB of gain on a full-scale sine) then a quiet one: the gain comes down
  /// before the peaks, never moves by more than its attack or release allows, and recovers at
  /// 6.02 dB per release time (100 ms) until the output is the input again, bit for bit.
  @Test func theGainRecoversAtTheReleaseRate() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[gain]\nmax = \"+13dB\"")
    let client = try daemon.client()
    let loud = 24_000
    let frames = 72_000
    let signal: (Int) -> Float = { frame in
      Float((frame < loud ? 1 : 0.05) * sin(2 * Double.pi * 1_000.3 * Double(frame) / Self.rate))
    }
    let path = try Self.file(daemon, "step", frames: frames, signal)
    try client.request(["cmd": "observe", "key": "master.limiter", "rate": 50])
    try Self.playTogether(client, [(path, 4)])
    daemon.stop()
    let played = try daemon.played()
    let start = try #require((0..<(played.count / 2)).first { played[2 * $0] != 0 }) - 1
    try #require(played.count / 2 >= start + frames)
    // The gain the limiter gave each frame where the input is far enough from 0 to tell.
    var gains: [(frame: Int, gain: Double)] = []
    for frame in 480..<frames {
      let input = 4 * Double(signal(frame))
      guard abs(input) > 0.05 else { continue }
      gains.append((frame, Double(played[2 * (start + frame)]) / input))
    }
    let deepest = gains.map(\.gain).min() ?? 1
    #expect(20 * log10(deepest) < -12.5, "deepest gain \(20 * log10(deepest)) dB")
    #expect(gains.allSatisfy { $0.gain <= 1 + 1e-6 })
    // Recovery: at most 6.02 dB per 100 ms, a factor per frame; judged over spans of 2 ms or
    // more, where a float's rounding of one sample is far under what the release allows.
    let recovery = pow(2, 1 / (0.1 * Self.rate))
    var fastest = 0.0
    var later = 0
    for before in gains {
      while later < gains.count && gains[later].frame < before.frame + 96 { later += 1 }
      guard later < gains.count else { break }
      let after = gains[later]
      fastest = max(fastest, log(after.gain / before.gain) / Double(after.frame - before.frame) / log(recovery))
    }
    #expect(fastest <= 1.001, "the gain rose \(fastest) × as fast as the release allows")
    // 13 dB at 6.02 dB per 100 ms: back to the input itself within 250 ms of the step.
    let recovered = loud + 12_000
    let differing = (recovered..<frames).filter { played[2 * (start + $0)] != 4 * signal($0) }
    #expect(
      differing.isEmpty, "\(differing.count) frames after the recovery differ, the first at \(differing.first ?? -1)")
    // And it took that long: 100 ms after the step it still lowers the output.
    let midway = gains.first { $0.frame >= loud + 4_800 }
    #expect(midway.map { $0.gain < 0.9 } == true, "gain \(midway?.gain ?? -1) 100 ms after the step")
    // Observed: the reduction, in dB, then back to 0.
    let observed = client.events.filter { $0["event"] == "value" && $0["key"] == "master.limiter" }
      .compactMap { $0["value"]?.numberValue }
    #expect((observed.max() ?? 0) > 12, "observed \(observed)")
    #expect(observed.last == 0, "observed \(observed)")
  }
}
