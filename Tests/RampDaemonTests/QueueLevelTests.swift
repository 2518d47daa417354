import Foundation
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// The level-triggered crossfade through the real `rampd`: items with a quiet tail hand over
/// where their tail begins, by the documented detector, not a crossfade's length before their end.
extension QueueTests {
  /// Two seconds: 0.5 on the left until frame `fall`, then 0.01 (−43 dBFS over both channels) to
  /// the end. Played twice, then a file at 0.5 on the right. With a −30 dBFS level over the last
  /// 1.5 s (blocks of 2 400 frames from frame 24 000) the quiet tail begins at the end of the
  /// block holding `fall`: frame 62 400. Each transition starts there (both items analysed as they
  /// are opened, off the render thread), within a block of
  /// where the level fell and long before end − crossfade (frame 84 000); the linear crossfade's
  /// ramps follow their curve at every sample, and the outgoing item's rest is not heard. The last
  /// item's audio ends on a block's last frame; it still ends with its `item-ended`.
  @Test func aQuietTailStartsTheCrossfadeWhereTheLevelFalls() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "item-ended", "stream-ended"]])
    let fall = 61_213
    let quiet: Float = 0.01
    let a = try Self.file(daemon, "a", frames: 96_000, left: { $0 < fall ? 0.5 : quiet }, right: { _ in 0 })
    let b = try daemon.constantFile("b", seconds: 1, left: 0, right: 0.5)
    let play = try client.request([
      "cmd": "play", "path": .string(a), "stream": "music", "queue": [.string(a), .string(b)], "crossfade": 0.25,
      "crossfadeCurve": "linear", "crossfadeLevel": -30, "crossfadeWindow": 1.5,
    ])
    #expect(play.isOK, "\(play.serialized())")
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    daemon.stop()

    let started = Self.itemEvents(client, "music", "item-started").map(Self.sample)
    let ended = Self.itemEvents(client, "music", "item-ended")
    try #require(started.count == 3 && ended.count == 3, "\(client.events.map { $0.serialized() })")
    let tail = 62_400
    let frames = 12_000
    #expect(tail - fall >= 0 && tail - fall <= 2_400, "within one detector block of the fall")
    #expect(started[1] - started[0] == tail && started[2] - started[1] == tail, "\(started)")
    #expect(ended.prefix(2).map(Self.sample) == [started[1] + frames, started[2] + frames], "\(ended)")
    #expect(ended.allSatisfy { $0["reason"] == "finished" })

    let left = try daemon.played(channel: 0).map(Double.init)
    let right = try daemon.played(channel: 1).map(Double.init)
    try #require(started[2] + frames + 4_800 < left.count)
    let level = Double(quiet)
    // The first handover: item 0's tail under item 1's loud start, both linear.
    let first = started[1]
    #expect(left[first - 1] == level && right[first - 1] == 0, "only the quiet tail before")
    var worst = 0.0
    for k in 0...frames {
      let x = Double(k) / Double(frames)
      worst = max(worst, abs(left[first + k] - (level * (1 - x) + 0.5 * x)), abs(right[first + k]))
    }
    #expect(worst < 1e-6, "first crossfade off its ramps by \(worst)")
    // The second: item 1's tail (left) under item 2 (right).
    let second = started[2]
    worst = 0.0
    for k in 0...frames {
      let x = Double(k) / Double(frames)
      worst = max(worst, abs(left[second + k] - level * (1 - x)), abs(right[second + k] - 0.5 * x))
    }
    #expect(worst < 1e-6, "second crossfade off its ramps by \(worst)")
    let after = (second + frames)..<(second + frames + 4_800)
    #expect(after.allSatisfy { left[$0] == 0 && right[$0] == 0.5 }, "the outgoing item's rest is not heard")
  }
}
