import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// The master limiter on a device that rewinds: every rewind puts the limiter back where it was
/// at the rewound sample (its checkpoint in the rewind record), so what is heard is what an
/// offline player renders with the same changes on the same samples, bit for bit. On the clocked
/// test device (`Tests/Fixtures/pcm_clocked.c`), which plays in real time and honours rewinds.
@Suite struct LimiterRewindTests {
  /// Up to 1.2 at gain 1 (over the −1 dBTP ceiling, 0.89, for a third of each cycle), 0.6 at gain
  /// 0.5: the limiter works, then rests, at every change.
  static func signal(_ frame: Int) -> Float { Float(0.7 + 0.5 * sin(2 * Double.pi * Double(frame) / 4_800)) }

  final class Recorder: BlockSink {
    var samples: [Float] = []
    func write(_ samples: UnsafePointer<Float>, frames: Int) throws(AudioError) {
      self.samples.append(contentsOf: UnsafeBufferPointer(start: samples, count: frames * 2))
    }
  }

  static let transaction = Transaction(duration: 0.02, timingFunction: .linear)

  @Test func aRewoundLimiterRendersWhatAnOfflinePlayerRenders() throws {
    let limiter = LimiterSettings()
    let player = try ClockedDevice.player("rampd_clocked_limiter_rewind", rewind: .on, limiter: limiter)
    let file = try temporaryDirectory().appendingPathComponent("signal.wav").path
    let frames = 48_000 * 3
    try writeSignal(file, frames: frames, channels: 2) { frame, _ in Self.signal(frame) }
    player.start()
    try player.play(file, id: "signal")
    usleep(500_000)
    // In real time, as the shipped unit lets the render thread be: at normal priority on a busy
    // machine it may run late and the device under (what is compared below holds regardless).
    let realtime = IdleTests.realtime(player)
    var value = 1.0
    for _ in 0..<8 {
      usleep(UInt32.random(in: 150_000...250_000))
      value = value == 1 ? 0.5 : 1
      let target = value
      player.perform { state in _ = try? state.engine.set("master.gain", to: target, transaction: Self.transaction) }
    }
    var reports: [CompletionReport] = []
    let ended = secondsUntil(10) {
      while let event = player.nextEvent() {
        if case .animationFinished(let report) = event { reports.append(report) }
        if event == .streamEnded(id: "signal", reason: .finished) { return true }
      }
      return false
    }
    #expect(ended != nil)
    let rewinds = player.outputRewind.rewinds
    let underruns = player.deviceUnderruns
    player.shutdown()
    #expect(rewinds >= 8, "\(rewinds) rewinds")
    if realtime { #expect(underruns == 0) }
    // When the stream started (its start ramp ends a declick ramp later), and when each set did.
    let started = try #require(reports.first { $0.keyPath == "streams.signal.transport" }, "\(reports)").sample - 480
    let sets = reports.filter { $0.keyPath == "master.gain" }.map { ($0.sample - 960 - started, $0) }
    try #require(sets.count == 8 && sets.allSatisfy { $0.1.finished })

    // Offline: the same file from sample 0, the same changes on the same samples.
    let recorder = Recorder()
    let offline = try Player(sink: recorder, rate: 48_000, channels: 2, blockFrames: 480, limiter: limiter)
    try offline.play(file, id: "signal")
    value = 1
    for (sample, _) in sets {
      value = value == 1 ? 0.5 : 1
      let target = value
      offline.perform(at: sample) { state in
        _ = try? state.engine.set("master.gain", to: target, transaction: Self.transaction)
      }
    }
    while recorder.samples.count < 2 * (frames + 4_800) { try offline.renderOffline() }
    offline.finishOffline()

    let played = try ClockedDevice.recording("rampd_clocked_limiter_rewind")
    let liveStart = try #require((0..<played.frames).first { played.sample($0) != 0 })
    let offlineStart = try #require((0..<(recorder.samples.count / 2)).first { recorder.samples[2 * $0] != 0 })
    try #require(played.frames >= liveStart + frames - offlineStart)
    var differing = 0
    var first: Int?
    for frame in 0..<(frames - offlineStart) {
      for channel in 0..<2
      where played.sample(liveStart + frame, channel: channel) != recorder.samples[2 * (offlineStart + frame) + channel]
      {
        differing += 1
        if first == nil { first = frame }
      }
    }
    #expect(differing == 0, "\(differing) samples differ, the first at frame \(first ?? -1) of \(frames)")
    // And it limited: nothing over the ceiling, where the signal at gain 1 goes 2.6 dB over it.
    let loudest = (0..<played.frames).map { abs(played.sample($0)) }.max() ?? 0
    #expect(loudest <= limiter.ceilingLinear && loudest > limiter.ceilingLinear * 0.97, "loudest \(loudest)")
  }
}

extension LimiterSettings {
  var ceilingLinear: Float { Float(pow(10, ceilingDecibels / 20)) }
}
