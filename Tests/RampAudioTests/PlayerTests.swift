import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// Live playback through real ALSA: a `file` PCM over `null` records every sample as raw float,
/// paced to the clock as the daemon's embedded output is, so the decoders run ahead as they would
/// in real time (pacing `device` would outrun them and record underruns).
@Suite struct PlayerTests {
  func player(_ number: Int, pacing: OutputConfiguration.Pacing = .device) throws -> (Player, String) {
    let path = AlsaTestConfig.path("player\(number).raw")
    let configuration = OutputConfiguration(
      device: "rampd_test_player\(number)", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: pacing)
    return (try Player(output: configuration), path)
  }

  /// Waits for the first event that `match` accepts, collecting all events on the way.
  @discardableResult
  func waitFor(_ player: Player, seconds: Double = 20, _ match: (PlayerEvent) -> Bool) -> [PlayerEvent] {
    var seen: [PlayerEvent] = []
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
      if let event = player.nextEvent() {
        seen.append(event)
        if match(event) { return seen }
      } else {
        usleep(200)
      }
    }
    Issue.record("timed out after \(player.blocksRendered) blocks; saw \(seen)")
    return seen
  }

  func recorded(_ path: String) throws -> [Float] {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
  }

  func constantFile(_ value: Float, seconds: Double, name: String = #function) throws -> String {
    let path = try temporaryDirectory(name).appendingPathComponent("constant.wav").path
    try writeSignal(path, frames: Int(seconds * 48_000), channels: 2) { _, _ in value }
    return path
  }

  /// With pacing `device` on a device without a clock (a `file` PCM over `null` takes whatever it
  /// is given at once), the render thread outruns real time: it waits for decoders that are behind
  /// instead of playing silence, so the recording holds the whole file sample for sample and no
  /// underrun is posted. Eight Ogg Vorbis streams of one file, mixed at 1/8 each, make sure the
  /// decoders are the slower side. With nothing playing, time follows the clock instead of racing.
  @Test func aDeviceWithoutAClockRecordsEverySampleOfTheFile() throws {
    let (player, path) = try player(15, pacing: .device)
    let file = try temporaryDirectory().appendingPathComponent("long.ogg").path
    try writeSignal(file, frames: 10 * 48_000, encoding: .pcm16) { f, c in
      Float(0.5 * sin(Double(f) * (c == 0 ? 0.031 : 0.047)))
    }
    let decoded = try readAll(file).samples
    player.start()
    defer { player.shutdown() }
    let streams = 8
    let starts = try (0..<streams).map { try player.prepare(file, id: "s\($0)", gain: 1 / Double(streams)) }
    player.perform { state in for start in starts { _ = start(state) } }
    var ended = 0
    let events = waitFor(player, seconds: 120) { event in
      if case .streamEnded(_, .finished) = event { ended += 1 }
      return ended == streams
    }
    #expect(!events.contains { if case .underrun = $0 { return true } else { return false } }, "\(events)")

    // Idle now: the clock keeps time, about 14 400 frames in 0.3 s, not millions.
    let before = player.currentSample
    usleep(300_000)
    let idle = player.currentSample - before
    #expect(idle > 0 && idle < 48_000, "\(idle) frames in 0.3 s with nothing playing")
    player.shutdown()

    let samples = try recorded(path)
    let left = stride(from: 0, to: samples.count, by: 2).map { samples[$0] }
    let first = try #require(left.firstIndex { $0 != 0 }) - 1
    #expect(first % player.output.periodFrames == 0, "the streams start on a block boundary")
    try #require(samples.count >= first * 2 + decoded.count, "\(samples.count / 2) frames recorded")
    // After the 10 ms declick, eight times 1/8 of the file: the file, give or take rounding.
    var wrong = 0
    for index in (480 * 2)..<decoded.count where abs(samples[first * 2 + index] - decoded[index]) > 1e-5 {
      wrong += 1
    }
    #expect(wrong == 0, "\(wrong) of \(decoded.count) samples differ from the file's")
  }

  @Test func fadeInOfConstantInputIsTheCurveAtEverySample() throws {
    let (player, path) = try player(1, pacing: .clock)
    player.start()
    try player.play(try constantFile(1, seconds: 0.5), id: "a", fadeIn: 0.1, curve: .easeInEaseOut)
    waitFor(player) { $0 == .streamEnded(id: "a", reason: .finished) }
    player.shutdown()
    let samples = try recorded(path)
    let left = stride(from: 0, to: samples.count, by: 2).map { samples[$0] }
    let first = try #require(left.firstIndex { $0 > 0 }) - 1
    #expect(first % player.output.periodFrames == 0, "the fade starts on a block boundary")
    var worst = 0.0
    for k in 0..<24_000 {
      let expected = k < 4800 ? TimingFunction.easeInEaseOut.value(at: Double(k) / 4800) : 1
      worst = max(worst, abs(Double(left[first + k]) - expected))
    }
    #expect(worst <= 1e-6)
    #expect(left[(first + 24_000)...].allSatisfy { $0 == 0 }, "silence after the stream ends")
  }

  /// In real time, so the second stream starts during the first one's fade: each sample step is
  /// q's fade slope, plus h's declick slope for the 480 samples of its declick.
  @Test func twoStreamsMixWithTheirOwnRamps() throws {
    let (player, path) = try player(2, pacing: .clock)
    player.start()
    let quarter = try constantFile(0.25, seconds: 0.4, name: "quarter")
    let half = try constantFile(0.5, seconds: 0.4, name: "half")
    try player.play(quarter, id: "q", fadeIn: 0.2, curve: .linear)
    try player.play(half, id: "h", gain: 0.5)
    var ended: Set<String> = []
    waitFor(player) { event in
      if case .streamEnded(let id, .finished) = event { ended.insert(id) }
      return ended.count == 2
    }
    player.shutdown()
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
    let start = try #require(left.firstIndex { $0 != 0 }) - 1
    let fadeSlope = 0.25 / 9_600
    let declickSlope = 0.25 / 480
    let onset = try #require((start..<(start + 9_600)).first { Double(left[$0 + 1] - left[$0]) > fadeSlope + 1e-4 })
    var worst = 0.0
    for k in start..<(start + 9_599) {
      let step = Double(left[k + 1]) - Double(left[k])
      let expected = (onset..<(onset + 480)).contains(k) ? fadeSlope + declickSlope : fadeSlope
      worst = max(worst, abs(step - expected))
    }
    #expect(worst < 1e-6)
    let both = Double(left[start + 12_000])
    #expect(abs(both - 0.5) < 1e-6)
  }

  /// In real time: with device pacing the render thread would outrun the decoder of a looping
  /// file, and an underrun's silence is a click of its own.
  @Test func stopPauseAndResumeRampInsteadOfClicking() throws {
    let (player, path) = try player(3, pacing: .clock)
    player.start()
    try player.play(try constantFile(1, seconds: 0.2), id: "s", loop: true)
    usleep(30_000)
    player.pause("s")
    usleep(30_000)
    player.resume("s")
    usleep(30_000)
    player.stop("s", fade: 0.05)
    waitFor(player) { $0 == .streamEnded(id: "s", reason: .stopped) }
    player.shutdown()
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
    // The steepest legal step is the 10 ms declick's: 1 / 480 per sample.
    #expect(Double(largestStep(left.map(Double.init))) <= 1 / 480 + 1e-6)
    #expect(left.contains(1))
    #expect(left.last! < 1 / 2_400 + 1e-6, "ends on the fade's last steps")
  }

  /// A seek ramps out, jumps and ramps back in: no step larger than the declick allows, and the
  /// audio after it is the file's audio at the new position.
  @Test func seekIsClickFreeAndLandsWhereAsked() throws {
    let (player, path) = try player(6, pacing: .clock)
    player.start()
    let file = try temporaryDirectory().appendingPathComponent("slope.wav").path
    // The signal says where in the file it is: 0.5 at the start rising to 0.9 at one second.
    try writeSignal(file, frames: 48_000, channels: 2) { f, _ in 0.5 + 0.4 * Float(f) / 48_000 }
    try player.play(file, id: "s")
    usleep(150_000)
    player.seek("s", to: 0.8)
    waitFor(player) { $0 == .streamEnded(id: "s", reason: .finished) }
    player.shutdown()
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element).map(Double.init)
    // Up to the file's own end (which ends at 0.9, as the file does).
    let end = try #require(left.lastIndex { $0 != 0 })
    #expect(largestStep(Array(left[...end])) <= 0.9 / 480 + 1e-5)
    // Silence in the middle of the stream: the seek's gap.
    let start = try #require(left.firstIndex { $0 != 0 })
    let gap = try #require(left[start...].firstIndex { $0 == 0 })
    let resumed = try #require(left[gap...].firstIndex { $0 != 0 })
    // 10 ms after it resumed the ramp is over: the file's audio at 0.8 s + 10 ms.
    let after = left[resumed + 480]
    #expect(abs(after - (0.5 + 0.4 * (0.8 + 0.01))) < 0.002, "\(after)")
    // About 0.2 s of the file is left to play after the seek.
    let rest = (left[resumed...].firstIndex { $0 == 0 } ?? left.count) - resumed
    #expect(abs(rest - 9_600) < 200, "\(rest) samples after the seek")
  }

  /// In real time (clock pacing), as a daemon plays: not one underrun while a bad file is refused.
  @Test func aBadFileIsRefusedWhileAnotherStreamPlaysOn() throws {
    let (player, _) = try player(4, pacing: .clock)
    player.start()
    try player.play(try constantFile(0.5, seconds: 0.3), id: "good")
    let notAudio = try temporaryDirectory().appendingPathComponent("text.wav").path
    try "hello".write(toFile: notAudio, atomically: true, encoding: .utf8)
    #expect(throws: AudioError.self) { try player.play(notAudio, id: "bad") }
    let events = waitFor(player) { $0 == .streamEnded(id: "good", reason: .finished) }
    player.shutdown()
    #expect(!events.contains { if case .underrun = $0 { return true } else { return false } })
  }
}

extension PlayerTests {
  /// A FLAC cut off mid-stream, played next to a good stream: the damaged file is refused with
  /// its name or ends on its own (finished with what was there, or failed), never taking the
  /// other stream down: not one underrun, and the good stream plays unbroken to its end.
  @Test func aTruncatedFileNeverDisturbsAnotherStream() throws {
    let (player, path) = try player(9, pacing: .clock)
    player.start()
    let directory = try temporaryDirectory()
    let whole = directory.appendingPathComponent("whole.flac").path
    try writeSignal(whole, frames: 48_000, channels: 2, encoding: .pcm16) { f, _ in Float(sin(Double(f) / 20)) * 0.5 }
    let bytes = try Data(contentsOf: URL(fileURLWithPath: whole))
    let cut = directory.appendingPathComponent("cut.flac").path
    try bytes.prefix(bytes.count * 2 / 5).write(to: URL(fileURLWithPath: cut))
    try player.play(try constantFile(0.25, seconds: 0.6), id: "good")
    var refused: AudioError?
    do {
      try player.play(cut, id: "cut")
    } catch let error as AudioError {
      refused = error
    }
    if let refused { #expect(refused.message.contains("cut.flac"), "\(refused.message)") }
    let events = waitFor(player) { $0 == .streamEnded(id: "good", reason: .finished) }
    player.shutdown()
    #expect(!events.contains { if case .underrun = $0 { return true } else { return false } }, "\(events)")
    if refused == nil {
      #expect(events.contains { if case .streamEnded("cut", _) = $0 { return true } else { return false } })
    }
    // The good stream: 0.25 from its declick to its end, whatever the cut file did.
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
    let first = try #require(left.firstIndex { $0 > 0 })
    let lastGood = try #require(left.lastIndex { $0 != 0 })
    #expect(lastGood - first > 28_000, "the good stream played to its end")
  }

  /// A command scheduled for a sample splits the block there: the output changes on exactly that
  /// sample, not at the next period boundary. The doorbell rings for the events that follow.
  @Test func aScheduledCommandLandsOnItsExactSample() throws {
    let (player, path) = try player(7, pacing: .clock)
    player.start()
    try player.play(try constantFile(1, seconds: 0.3), id: "c")
    #expect(player.waitForEvents(timeout: 5), "stream-started rings the doorbell")
    // Deliberately not on a period boundary (periods are 240 frames here).
    let target = player.currentSample + 4_800 + 123
    #expect(target % Int64(player.output.periodFrames) != 0)
    player.perform(at: target) { state in
      _ = try? state.engine.set("master.gain", to: 0.5, transaction: .instant)
    }
    waitFor(player) { $0 == .streamEnded(id: "c", reason: .finished) }
    player.shutdown()
    let left = try recorded(path).enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
    let at = Int(target)
    #expect(left[at - 1] == 1 && left[at] == 0.5, "\(left[at - 1]) then \(left[at])")
    #expect(left[(at - 2_000)..<at].allSatisfy { $0 == 1 } && left[at..<(at + 2_000)].allSatisfy { $0 == 0.5 })
  }
}

extension PlayerTests {
  /// `streams.<id>.pan` is a balance: swept from −1 to +1, the left channel holds at unity until
  /// the centre and then falls to 0, the right rises from 0 to unity at the centre, per sample.
  @Test func panSweepsTheBalanceSampleBySample() throws {
    let (player, path) = try player(8, pacing: .clock)
    player.start()
    try player.play(try constantFile(1, seconds: 0.5), id: "p")
    #expect(player.waitForEvents(timeout: 5))
    let begin = player.currentSample + 2_400
    player.perform(at: begin) { state in
      _ = try? state.engine.add(.basic(from: -1, to: 1, duration: 0.1), forKey: "sweep", to: "streams.p.pan")
    }
    waitFor(player) { $0 == .streamEnded(id: "p", reason: .finished) }
    player.shutdown()
    let samples = try recorded(path)
    let start = Int(begin)
    var worst = 0.0
    // Up to the last sample of the sweep: then it is removed and the balance is its model, 0.
    for k in 0..<4_800 {
      let balance = -1 + 2 * Double(k) / 4_800
      let left = Double(samples[2 * (start + k)])
      let right = Double(samples[2 * (start + k) + 1])
      worst = max(worst, abs(left - min(1, 1 - balance)), abs(right - min(1, 1 + balance)))
    }
    #expect(worst < 1e-6, "off the balance law by \(worst)")
    #expect(samples[2 * (start - 1)] == 1 && samples[2 * (start - 1) + 1] == 1, "centred before the sweep")
    #expect(samples[2 * (start + 4_800)] == 1 && samples[2 * (start + 4_800) + 1] == 1, "centred after it")
  }

  /// A command still waiting for its sample when the player shuts down is released, with what it
  /// holds: a scheduled play holds its decoder (a thread, a ring of a second, a file) until then.
  /// Found by the fuzz target, whose daemons piled up decoder threads after shutting down.
  @Test func shutdownReleasesCommandsStillWaiting() throws {
    final class Held: Sendable {}
    let player = try Player(output: OutputConfiguration(device: "null", format: .float32, pacing: .clock))
    player.start()
    weak var released: Held?
    do {
      let held = Held()
      released = held
      player.perform(at: 48_000 * 3600) { _ in _ = held }
    }
    // Taken into the schedule once a few blocks have gone by.
    let blocks = player.blocksRendered
    let deadline = Date().addingTimeInterval(10)
    while player.blocksRendered < blocks + 3 && Date() < deadline { usleep(1_000) }
    #expect(released != nil, "held while waiting")
    player.shutdown()
    #expect(released == nil)
  }
}

func largestStep(_ samples: [Double]) -> Double {
  zip(samples, samples.dropFirst()).map { abs($1 - $0) }.max() ?? 0
}
