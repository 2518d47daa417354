import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// Heard now: on a device that rewinds, a change rewrites what the device holds and has not
/// played, beyond `AlsaPCMOutput.rewindMargin`, so it is heard within that margin whatever the
/// buffer; on one that cannot, it is heard once the buffer has played, as before. On the clocked
/// test device (`Tests/Fixtures/pcm_clocked.c`), which plays in real time and records when it
/// played each frame: the reference for "heard".
@Suite struct RewindTests {
  /// Between 0.25 and 0.75, a 10 Hz sine: never 0, so the gain applied to each frame can be read
  /// back from the recording (`recorded / signal`), and a frame skipped, repeated or left stale
  /// shows as a jump in it.
  static func signal(_ frame: Int) -> Float { Float(0.5 + 0.25 * sin(2 * Double.pi * Double(frame) / 4_800)) }

  /// The ramp each `set` makes: 20 ms, linear, between 1 and 0.5.
  static let ramp = 0.02
  static let slope = 0.5 / (ramp * 48_000)

  struct Outcome {
    /// Seconds from each `set` to its first frame heard.
    var latencies: [Double] = []
    /// The largest step of the gain read back between two frames heard.
    var largestStep = 0.0
    var rewind: (active: Bool, margin: Double, rewinds: Int)
    var underruns: Int
    var finished = 0
    /// The render thread ran in real time (`IdleTests.realtime`).
    var realtime = false
  }

  /// Plays the signal through `name` (200 ms buffer, 10 ms period), then sends `sets` gain
  /// changes (each a 20 ms ramp, alternately to 0.5 and back to 1) at random phases against the
  /// period; reads back from `recording` when each was first heard and how the gain moved.
  func run(_ name: String, recording: String, sets: Int, test: String = #function) throws -> Outcome {
    let player = try ClockedDevice.player(name, rewind: .on)
    let file = try temporaryDirectory(test).appendingPathComponent("signal.wav").path
    let frames = 48_000 * (2 + sets / 2)
    try writeSignal(file, frames: frames, channels: 2) { frame, _ in Self.signal(frame) }
    player.start()
    try player.play(file, id: "signal")
    usleep(800_000)
    // In real time, as the shipped unit lets the render thread be: at normal priority on a busy
    // machine it may run late and the device under (what is heard is checked regardless).
    let realtime = IdleTests.realtime(player)
    var sent: [(nanoseconds: Int64, value: Double)] = []
    var generator = SystemRandomNumberGenerator()
    var value = 1.0
    for _ in 0..<sets {
      usleep(UInt32.random(in: 230_000...290_000, using: &generator))
      value = value == 1 ? 0.5 : 1
      let target = value
      sent.append((monotonicNanoseconds(), target))
      player.perform { state in
        _ = try? state.engine.set(
          "master.gain", to: target, transaction: Transaction(duration: Self.ramp, timingFunction: .linear))
      }
    }
    usleep(400_000)
    var outcome = Outcome(rewind: player.outputRewind, underruns: player.deviceUnderruns, realtime: realtime)
    player.shutdown()
    while let event = player.nextEvent() {
      if case .animationFinished = event { outcome.finished += 1 }
    }

    let played = try ClockedDevice.recording(recording)
    // The stream's first frame: near the first one heard that is not silence (its fade-in starts
    // at 0), where the signal fits what was heard once the fade-in is over.
    let first = try #require((0..<played.frames).first { played.sample($0) != 0 }, "the signal was heard")
    let start = (max(first - 3, 0)...first + 3).min { a, b in
      func misfit(_ start: Int) -> Float {
        (1_000..<1_500).reduce(0) { $0 + abs(played.sample(start + $1) - Self.signal($1)) }
      }
      return misfit(a) < misfit(b)
    }!
    let end = min(start + frames, played.frames)
    // The gain applied to each frame, from the end of the fade-in on (its own ramp is steeper).
    let settled = start + 1_000
    var gains = [Double](repeating: 1, count: end - start)
    for frame in start..<end {
      gains[frame - start] = Double(played.sample(frame)) / Double(Self.signal(frame - start))
    }
    for index in (settled - start + 1)..<gains.count {
      outcome.largestStep = max(outcome.largestStep, abs(gains[index] - gains[index - 1]))
    }
    var frame = settled
    var previous = 1.0
    for (nanoseconds, value) in sent {
      while frame < end, let heard = played.nanoseconds(ofFrame: frame), heard < nanoseconds { frame += 1 }
      while frame < end, abs(gains[frame - start] - previous) < 1e-4 { frame += 1 }
      let heard = try #require(played.nanoseconds(ofFrame: frame), "the change to \(value) was heard")
      outcome.latencies.append(Double(heard - nanoseconds) / 1e9)
      previous = value
    }
    return outcome
  }

  @Test func aChangeIsHeardWithinTheMarginWithA200msBuffer() throws {
    let outcome = try run("rampd_clocked_rewind", recording: "rampd_clocked_rewind", sets: 12)
    #expect(outcome.rewind.active, "the clocked device rewinds")
    #expect(outcome.rewind.margin <= 0.005)
    #expect(outcome.rewind.rewinds >= 12, "\(outcome.rewind.rewinds) rewinds")
    #expect(!outcome.realtime || outcome.underruns == 0, "\(outcome.underruns) underrun(s) in real time")
    let sorted = outcome.latencies.sorted()
    let median = sorted[sorted.count / 2]
    // Heard within the margin; the rest is the render thread's wake-up and render (a loaded
    // machine may delay one of them).
    #expect(median <= 0.005, "heard after \(outcome.latencies.map { ($0 * 1e4).rounded() / 10 }) ms")
    #expect(sorted.last! <= 0.05, "heard after \(outcome.latencies.map { ($0 * 1e4).rounded() / 10 }) ms")
    // No step in what was heard beyond the ramp's own slope: nothing rewound was played, nothing
    // written again was skipped or played twice.
    #expect(outcome.largestStep <= Self.slope * 1.01 + 1e-5, "a step of \(outcome.largestStep)")
    // Every animation's end is posted once, for what was finally heard: each set's and the
    // stream's fade-in.
    #expect(outcome.finished == 13)
  }

  /// A command that only reads (`changesSound` false) reads the value it would have read anyway.
  final class Reading: RenderCommand, @unchecked Sendable {
    var value = Float.nan
    var changesSound: Bool { false }
    func commit(_ state: RenderState) {
      state.engine.render(state.master, start: state.engine.now, count: 1, into: &value)
    }
  }

  /// A query rewinds nothing (the device's audio is not rendered again for it), and does not
  /// stop the rewind of a change that follows it at once: that change is still heard now.
  @Test func aQueryRewindsNothingAndTheChangeAfterItStillRewinds() throws {
    let player = try ClockedDevice.player("rampd_clocked_rewind_query", rewind: .on)
    defer { player.shutdown() }
    let file = try temporaryDirectory().appendingPathComponent("signal.wav").path
    try writeSignal(file, frames: 48_000 * 4, channels: 2) { frame, _ in Self.signal(frame) }
    player.start()
    try player.play(file, id: "signal")
    usleep(800_000)
    #expect(player.outputRewind.active, "the clocked device rewinds")
    let before = player.outputRewind.rewinds
    for _ in 0..<20 {
      player.submit(Reading())
      usleep(20_000)
    }
    usleep(100_000)
    #expect(player.outputRewind.rewinds == before, "\(player.outputRewind.rewinds - before) rewinds for queries")
    for index in 0..<5 {
      let target = index % 2 == 0 ? 0.5 : 1
      player.submit(Reading())
      player.perform { state in
        _ = try? state.engine.set("master.gain", to: target, transaction: Transaction(duration: Self.ramp))
      }
      usleep(150_000)
    }
    #expect(player.outputRewind.rewinds == before + 5, "\(player.outputRewind.rewinds - before) rewinds for 5 changes")
  }

  /// ALSA's `file` plugin cannot rewind: a change is heard once what the buffer holds has
  /// played, as without rewind, and the audio is as continuous. The render thread refills the
  /// 200 ms buffer when only the margin (100 ms) is left, so a change waits for between the margin
  /// and the buffer, depending on when it comes: never the few milliseconds of a rewind.
  @Test func withoutRewindAChangeWaitsForTheBuffer() throws {
    let outcome = try run("rampd_clocked_no_rewind", recording: "rampd_clocked_behind_file", sets: 6)
    #expect(!outcome.rewind.active)
    #expect(outcome.rewind.rewinds == 0)
    let sorted = outcome.latencies.sorted()
    // A wake-up late by a loaded machine leaves less than the margin queued: some room below it.
    #expect(sorted[0] >= 0.04 && sorted[sorted.count / 2] >= 0.09, "heard after \(outcome.latencies) s")
    #expect(sorted[sorted.count - 1] <= 0.3, "heard after \(outcome.latencies) s")
    #expect(outcome.largestStep <= Self.slope * 1.01 + 1e-5, "a step of \(outcome.largestStep)")
    #expect(outcome.finished == 7)
  }

  /// On a device that rewinds, the render thread fills the buffer and sleeps until only the
  /// margin (50 ms) is left, as PulseAudio's timer does, instead of waking at every period: with
  /// a 200 ms buffer and 10 ms blocks, a wake-up per 15 blocks or so (a few more while the
  /// decoder's ring is topped up). What is heard is still every frame of the file, in order,
  /// without an underrun.
  @Test func aDeviceThatRewindsIsFilledOncePerBufferLessTheMargin() throws {
    let player = try ClockedDevice.player("rampd_clocked_rewind_timer", rewind: .on)
    let file = try temporaryDirectory().appendingPathComponent("signal.wav").path
    let frames = 48_000 * 3
    try writeSignal(file, frames: frames, channels: 2) { frame, _ in Self.signal(frame) }
    player.start()
    try player.play(file, id: "signal")
    #expect(secondsUntil(5) { player.renderThreadID > 0 && player.blocksRendered > 50 } != nil)
    #expect(player.outputRewind.active, "the clocked device rewinds")
    let (woke, rendered) = try wakeUpsAndBlocksInASecond(player)
    #expect((80...120).contains(rendered), "\(rendered) blocks in a second")
    #expect(woke * 4 < rendered, "\(woke) wake-ups for \(rendered) blocks")
    #expect(secondsUntil(5) { player.nextEvent() == .streamEnded(id: "signal", reason: .finished) } != nil)
    #expect(player.deviceUnderruns == 0)
    player.shutdown()
    let played = try ClockedDevice.recording("rampd_clocked_rewind_timer")
    // After the fade-in, at unity gain: the file itself, frame for frame.
    let first = try #require((0..<played.frames).first { played.sample($0) != 0 }, "the signal was heard")
    let start = try #require(
      (max(first - 3, 0)...first + 3).first { start in
        (24_000..<24_100).allSatisfy { played.sample(start + $0) == Self.signal($0) }
      }, "the signal's first frame")
    let mismatch = (4_800..<frames).first {
      start + $0 >= played.frames || played.sample(start + $0) != Self.signal($0)
    }
    #expect(mismatch == nil, "frame \(mismatch ?? -1) differs from the file")
  }
}
