import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// Silent when idle: with nothing playing and nothing moving, the render thread stops the device
/// and sleeps without a timer; the next command wakes it, and what it starts is heard cleanly.
/// On the clocked test device (`Tests/Fixtures/pcm_clocked.c`), which plays in real time.
@Suite struct IdleTests {
  /// 0.5 × a 441 Hz sine.
  static func sine(_ frame: Int, _ channel: Int) -> Float {
    Float(0.5 * sin(2 * Double.pi * 441 * Double(frame) / 48_000))
  }

  /// Puts the render thread in real time, as the shipped unit lets it be (LimitRTPRIO=): at
  /// normal priority on a busy machine, a wake-up alone may take longer than the timing promised.
  /// False where the test may not (a user without the privilege).
  static func realtime(_ player: Player) -> Bool {
    var parameters = sched_param(sched_priority: 20)
    let granted = sched_setscheduler(player.renderThreadID, SCHED_FIFO, &parameters) == 0
    if !granted { print("idle: the render thread cannot have real-time priority here; timing checked loosely") }
    return granted
  }

  @Test func idleMakesNoWakeUpsAndTheNextPlayStartsCleanly() throws {
    let player = try ClockedDevice.player("rampd_clocked_idle")
    let file = try temporaryDirectory().appendingPathComponent("sine.wav").path
    let length = 24_000
    try writeSignal(file, frames: length, channels: 2, signal: Self.sine)
    player.start()
    defer { player.shutdown() }
    #expect(secondsUntil(5) { player.isIdle } != nil, "idle once the first silence has played")
    usleep(100_000)
    let thread = player.renderThreadID
    let realtime = Self.realtime(player)
    let before = try timesRun(thread)
    usleep(10_000_000)
    let woke = try timesRun(thread) - before
    #expect(woke == 0, "the render thread woke \(woke) times in 10 s idle")
    #expect(player.isIdle)

    let start = try player.prepare(file, id: "s")
    let sent = monotonicNanoseconds()
    player.perform { state in _ = start(state) }
    #expect(secondsUntil(5) { player.nextEvent() == .streamEnded(id: "s", reason: .finished) } != nil)
    #expect(secondsUntil(5) { player.isIdle } != nil, "idle again after the stream")
    let latency = try #require(player.resumeLatency)
    #expect(player.deviceUnderruns == 0, "stopping for idle is no underrun")

    let recording = try ClockedDevice.recording("rampd_clocked_idle")
    // The stream's first frame is silent (its declick ramp starts at 0); the next is not.
    let first = try #require((0..<recording.frames).first { recording.sample($0) != 0 }) - 1
    #expect(first >= 0 && (0..<first).allSatisfy { recording.sample($0) == 0 && recording.sample($0, channel: 1) == 0 })
    // A recording cut short fails here, instead of indexing past its end below.
    try #require(recording.frames >= first + length, "\(recording.frames) frames, the file from \(first)")
    // After the 10 ms declick ramp, the file sample for sample; within it, the sine under a ramp
    // from 0: never a step larger than the sine's own.
    var exact = true
    for frame in 480..<length where recording.sample(first + frame) != Self.sine(frame, 0) { exact = false }
    #expect(exact, "the file, sample for sample, after the declick")
    var steepest: Float = 0
    for frame in max(first - 100, 1)..<(first + length) {
      steepest = max(steepest, abs(recording.sample(frame) - recording.sample(frame - 1)))
    }
    #expect(steepest <= 0.5 * 2 * .pi * 441 / 48_000 + 1e-4, "a step of \(steepest)")
    let heard = try #require(recording.nanoseconds(ofFrame: first))
    let measured = Double(heard - sent) / 1e9
    if realtime {
      #expect(measured < 0.005, "first heard \(measured * 1000) ms after the command")
    } else {
      #expect(measured < 0.05, "first heard \(measured * 1000) ms after the command")
    }
    // What status reports counts from the command, the render thread's wake-up included, at any load.
    #expect(abs(latency - measured) < 0.002, "resume latency reported \(latency) s, measured \(measured) s")
  }

  /// A command scheduled while idle wakes the render thread in time: it is heard at its time.
  @Test func aCommandScheduledWhileIdleIsHeardOnTime() throws {
    let player = try ClockedDevice.player("rampd_clocked_device")
    let file = try temporaryDirectory().appendingPathComponent("one.wav").path
    try writeSignal(file, frames: 24_000, channels: 2)
    player.start()
    defer { player.shutdown() }
    // Played once (the resume latency is measured), then idle again.
    #expect(secondsUntil(5) { player.isIdle } != nil)
    let realtime = Self.realtime(player)
    try player.play(file, id: "warm")
    #expect(secondsUntil(5) { player.nextEvent() == .streamEnded(id: "warm", reason: .finished) } != nil)
    #expect(secondsUntil(5) { player.isIdle } != nil)
    usleep(500_000)
    let before = try ClockedDevice.recording("rampd_clocked_device").frames
    let start = try player.prepare(file, id: "one")
    let (wall, monotonic) = (realtimeSeconds(), monotonicNanoseconds())
    player.perform(at: player.sample(heardAt: wall + 1)) { state in _ = start(state) }
    usleep(100_000)
    #expect(player.isIdle, "still idle until shortly before the command is due")
    #expect(secondsUntil(5) { player.nextEvent() == .streamEnded(id: "one", reason: .finished) } != nil)
    let recording = try ClockedDevice.recording("rampd_clocked_device")
    let first = try #require((before..<recording.frames).first { recording.sample($0) != 0 }) - 1
    let heard = try #require(recording.nanoseconds(ofFrame: first))
    let error = Double(heard - (monotonic + 1_000_000_000)) / 1e9
    #expect(
      abs(error) < (realtime ? 0.002 : 0.02),
      "heard \(error * 1000) ms from its time; resume latency \(String(describing: player.resumeLatency))")
  }
}
