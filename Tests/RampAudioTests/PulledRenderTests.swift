import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// The render step as a pulled output runs it (``PulledRender``): the offline render's output
/// driven as a pull (``SinkOutput/pull(frames:)``), asking for whatever number of frames it
/// likes, renders the same samples as the same output pushed a block at a time, sample for
/// sample: the commands land on their samples, the limiter's latency is skipped, the streams
/// play through pauses and seeks at any pull size.
@Suite struct PulledRenderTests {
  final class Recorder: BlockSink {
    var samples: [Float] = []
    func write(_ samples: UnsafePointer<Float>, frames: Int) throws(AudioError) {
      self.samples.append(contentsOf: UnsafeBufferPointer(start: samples, count: frames * 2))
    }
  }

  static let rate = 48_000
  static let transaction = Transaction(duration: 0.05, timingFunction: .linear)

  /// The same show on `player`: a stream, fades of the master on samples that fall inside
  /// blocks, a pause and a resume, a seek.
  static func show(_ player: Player, file: String) throws {
    try player.play(file, id: "signal")
    for (index, sample) in [Int64(1_234), 20_011, 31_999, 40_480].enumerated() {
      let target = index % 2 == 0 ? 0.25 : 1.5
      player.perform(at: sample) { state in
        _ = try? state.engine.set("master.gain", to: target, transaction: Self.transaction)
      }
    }
    player.pause("signal", fade: 0.02, at: 50_007)
    player.resume("signal", fade: 0.02, at: 60_333)
    player.seek("signal", to: 0.5, at: 70_001)
  }

  @Test(arguments: [[480], [1, 37, 480, 481, 1_024, 2_048, 256, 100], [7_000]])
  func aPulledRenderIsThePushedOne(pulls: [Int]) throws {
    let file = try temporaryDirectory().appendingPathComponent("signal.wav").path
    try writeSignal(file, frames: Self.rate * 3, channels: 2) { frame, channel in
      Float(0.8 * sin(2 * Double.pi * Double(frame) / Double(97 + channel)))
    }
    let frames = 100_000
    let limiter = LimiterSettings()

    let pushed = Recorder()
    let pusher = try Player(sink: pushed, rate: Self.rate, channels: 2, blockFrames: 480, limiter: limiter)
    try Self.show(pusher, file: file)
    while pushed.samples.count < 2 * frames { try pusher.renderOffline() }
    pusher.finishOffline()

    let pulled = Recorder()
    let output = SinkOutput(
      sink: pulled, rate: Self.rate, channels: 2, blockFrames: 480, delivery: .pull, pullCapacity: 8_192)
    #expect(output.capabilities.delivery == .pull && output.capabilities.clock == .none)
    let puller = try Player(offline: output, limiter: limiter)
    #expect(throws: AudioError.self) { try puller.renderOffline() }
    try Self.show(puller, file: file)
    var index = 0
    while pulled.samples.count < 2 * frames + 2 * output.pullCapacity {
      try output.pull(frames: pulls[index % pulls.count])
      index += 1
    }
    puller.finishOffline()

    #expect(pushed.samples.prefix(2 * frames).contains { $0 != 0 })
    let first = (0..<(2 * frames)).first { pushed.samples[$0] != pulled.samples[$0] }
    #expect(first == nil, "first differing sample \(first.map { "\($0 / 2)" } ?? "")")
  }

  /// The timing a pulled output hands over feeds the heard clock: the last frame of each buffer
  /// is heard `delay` frames after the time it gives, whatever the pull's size, and `status`'s
  /// delay is that delay.
  @Test func aPullsTimingIsWhenItsSamplesAreHeard() throws {
    let output = SinkOutput(
      sink: Recorder(), rate: Self.rate, channels: 2, blockFrames: 480, delivery: .pull, pullCapacity: 2_048)
    let player = try Player(offline: output)
    defer { player.finishOffline() }
    #expect(player.measuredOutput == nil)
    let start = monotonicNanoseconds()
    // A graph that asks for each buffer as the one before it starts to play, and plays it
    // `latency` frames later: each buffer's last frame is heard its own length and that later.
    let latency = 1_536
    var rendered: Int64 = 0
    for frames in [1_024, 256, 2_048, 480, 1_000] {
      let nanoseconds = start + rendered * 1_000_000_000 / Int64(Self.rate)
      try output.pull(frames: frames, timing: PullTiming(delay: latency + frames, nanoseconds: nanoseconds))
      rendered += Int64(frames)
      let mapping = try #require(player.link.heard.load())
      // Sample `s` is heard at start + (s + latency) / rate.
      let heard = mapping.sample + Double(start - mapping.nanoseconds) * mapping.rate
      #expect(abs(heard + Double(latency)) < 0.5, "after \(rendered) frames: \(heard)")
      #expect(mapping.delay == Int64(latency + frames))
    }
    #expect(player.currentSample == rendered)
  }

  /// A pull asks for no more than the output can hold.
  @Test func aPullBeyondItsCapacityIsRefused() throws {
    let output = SinkOutput(
      sink: Recorder(), rate: Self.rate, channels: 2, blockFrames: 480, delivery: .pull, pullCapacity: 1_000)
    let player = try Player(offline: output)
    #expect(throws: AudioError(.invalidParameter, "pull: frames 1001 is outside 0...1000")) {
      try output.pull(frames: 1_001)
    }
    player.finishOffline()
  }
}
