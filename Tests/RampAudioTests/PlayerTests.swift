import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// Live playback through real ALSA: a `file` PCM over `null` records every sample as raw float.
/// Pacing `device` runs as fast as ALSA takes samples, so seconds of audio take milliseconds.
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

  @Test func fadeInOfConstantInputIsTheCurveAtEverySample() throws {
    let (player, path) = try player(1)
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

  @Test func stopPauseAndResumeRampInsteadOfClicking() throws {
    let (player, path) = try player(3)
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
    #expect(left.last == 0)
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

func largestStep(_ samples: [Double]) -> Double {
  zip(samples, samples.dropFirst()).map { abs($1 - $0) }.max() ?? 0
}
