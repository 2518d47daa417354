import Foundation
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// Transitions that meet through the real `rampd`, recorded on the ALSA `file` PCM at two periods
/// (240 and 384 frames): skips during a crossfade whose outgoing item ends before the skip's fade
/// would, and a pause during a crossfade. Every file is constant, one item alone on the left, so
/// the recording divided by its level is that item's gain at every sample.
extension QueueTests {
  /// A crossfade of 1 s (linear) from `a` (2.5 s, 0.5 on the left) to `b` (then `c`, `d`: 2.5 s,
  /// 0.5 on the right), and skips 0.3 s apart from 0.3 s into it.
  struct SkipCase: Sendable, CustomTestStringConvertible {
    var periodMs: Int
    var skipSeconds: Double
    var skips: [String]
    var testDescription: String { "\(skips.joined(separator: "/")), skip \(skipSeconds) s, period \(periodMs) ms" }
  }

  /// A skip (and more) during an automatic crossfade whose outgoing item `a` ends before the
  /// skip's fade-out would: `a` is faded out over what is left of it, from the level it had
  /// reached, and is never cut. On the left (`a` alone): no step between two samples larger than
  /// the ramps' own steepest (half a level over the shorter of the two crossfades), `a`'s level
  /// falls without ever rising, is heard until its file's last frame (one ramp step from silence)
  /// and ends (`item-ended`, `finished`: its crossfade began at its end) there. On the right, the
  /// items skipped between: no step larger than four such ramps at once, and the last one alone
  /// after its fade-in. With one skip and linear ramps, `a` goes on along its own crossfade's
  /// line to the sample.
  @Test(arguments: [
    SkipCase(periodMs: 5, skipSeconds: 1.5, skips: ["next"]),
    SkipCase(periodMs: 8, skipSeconds: 1.5, skips: ["next"]),
    SkipCase(periodMs: 5, skipSeconds: 0.5, skips: ["next", "next", "previous"]),
    SkipCase(periodMs: 8, skipSeconds: 0.5, skips: ["next", "next", "previous"]),
  ])
  func aSkipDuringACrossfadeFadesTheOutgoingItemOverWhatIsLeftOfIt(_ test: SkipCase) throws {
    let daemon = try DaemonProcess(limiter: "off", periodMs: test.periodMs, bufferMs: 4 * test.periodMs)
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["item-started", "item-ended", "stream-ended"]])
    let length = 120_000
    let a = try daemon.constantFile("a", seconds: 2.5, left: 0.5, right: 0)
    let others = try ["b", "c", "d"].map { try daemon.constantFile($0, seconds: 2.5, left: 0, right: 0.5) }
    let play = try client.request([
      "cmd": "play", "path": .string(a), "stream": "music", "queue": .array(others.map(JSONValue.string)),
      "crossfade": 1, "crossfadeCurve": "linear", "skipCrossfade": .number(test.skipSeconds), "skipCurve": "linear",
    ])
    #expect(play.isOK, "\(play.serialized())")
    let crossfade = Self.sample(
      try client.waitForEvent { $0["event"] == "item-started" && $0["path"] == .string(others[0]) })
    var skipped: [Int] = []
    for command in test.skips {
      usleep(300_000)
      let skip = try client.request(["cmd": .string(command), "stream": "music"])
      #expect(skip.isOK, "\(skip.serialized())")
      skipped.append(try #require(skip.result["sample"]?.int))
    }
    _ = try client.waitForEvent { $0["event"] == "item-ended" && $0["path"] == .string(a) }
    usleep(UInt32(test.skipSeconds * 1_000_000) + 300_000)
    #expect(try client.request(["cmd": "stop", "stream": "music"]).isOK)
    _ = try client.waitForEvent { $0["event"] == "stream-ended" }
    daemon.stop()

    let frames = 48_000
    let skipFrames = Int(test.skipSeconds * 48_000)
    let first = try #require(Self.itemEvents(client, "music", "item-started").first.map(Self.sample))
    let end = first + length
    try #require(crossfade == end - frames, "the crossfade starts its length before a's end")
    try #require(skipped[0] > crossfade && skipped[0] < end, "the first skip lands mid-crossfade: \(skipped)")
    let ended = try #require(Self.itemEvents(client, "music", "item-ended").first { $0["path"] == .string(a) })
    #expect(ended["reason"] == "finished" && Self.sample(ended) == end, "\(ended.serialized())")

    let left = try daemon.played(channel: 0).map(Double.init)
    let right = try daemon.played(channel: 1).map(Double.init)
    let last = skipped.last! + skipFrames
    try #require(last + 4_800 < left.count)
    let bound = 0.5 / Double(min(frames, skipFrames)) + 1e-6
    var steepest = (left: 0.0, right: 0.0, at: (left: 0, right: 0))
    for index in (crossfade - 100)..<(last + 4_800) {
      let step = (left: abs(left[index] - left[index - 1]), right: abs(right[index] - right[index - 1]))
      if step.left > steepest.left { (steepest.left, steepest.at.left) = (step.left, index) }
      if step.right > steepest.right { (steepest.right, steepest.at.right) = (step.right, index) }
    }
    print(
      "largest step: left \(steepest.left) at \(steepest.at.left), right \(steepest.right) at \(steepest.at.right) "
        + "(\(right[steepest.at.right - 1]) to \(right[steepest.at.right])); the ramps' own \(bound); crossfade "
        + "\(crossfade), skips \(skipped), end \(end) (\(test))")
    #expect(steepest.left <= bound, "a step of \(steepest.left) on a, above \(bound)")
    #expect(steepest.right <= 4 * bound, "a step of \(steepest.right) on the others, above \(4 * bound)")
    let rises = (crossfade..<end).first { left[$0] > left[$0 - 1] }
    #expect(rises == nil, "a's level rises at \(rises ?? -1)")
    let silent = (crossfade..<end).first { left[$0] == 0 }
    #expect(silent == nil, "a silent at \(silent ?? -1), before its file's end at \(end)")
    #expect(left[end - 1] <= bound, "a cut at its file's end from \(left[end - 1])")
    #expect(left[end..<(end + 4_800)].allSatisfy { $0 == 0 }, "a heard after its end")
    if test.skips.count == 1 {
      var off = 0.0
      for index in crossfade..<end { off = max(off, abs(left[index] - 0.5 * Double(end - index) / Double(frames))) }
      #expect(off < 1e-6, "a off its crossfade's line by \(off)")
    }
    #expect(right[last..<(last + 4_800)].allSatisfy { $0 == 0.5 }, "the item skipped to alone after its fade-in")
  }

  /// `pause` during a crossfade (1 s, linear, from `a` on the left to `b` on the right), then
  /// `resume` 0.6 s later: the crossfade goes on from where it was. Where both are heard, `b`'s
  /// share of the two (`right / (left + right)`, whatever the transport's level) is the
  /// crossfade's progress: it counts only the samples played, not those held silent, so both
  /// come back at the levels they had; `a` ends (`finished`) after its crossfade's full length of
  /// played samples, its remaining time heard after the resume; `queue-list` shows `a` still
  /// fading out while paused. No step larger than the pause's and resume's ramps with the
  /// crossfade's on top.
  @Test(arguments: [5, 8])
  func aPauseDuringACrossfadeResumesIt(periodMs: Int) throws {
    let daemon = try DaemonProcess(limiter: "off", periodMs: periodMs, bufferMs: 4 * periodMs)
    let client = try daemon.client()
    let (a, b) = try playCrossfadingPair(daemon, client, seconds: 2.5)
    let crossfade = Self.sample(try client.waitForEvent { $0["event"] == "item-started" && $0["path"] == .string(b) })
    usleep(300_000)
    #expect(try client.request(["cmd": "pause", "stream": "music", "fade": 0.05]).isOK)
    usleep(600_000)
    let list = try client.request(["cmd": "queue-list", "stream": "music"])
    let items = list.result["queue"]?["items"]?.arrayValue ?? []
    #expect(
      items.map { $0["fading"] } == [true, false] && items.map { $0["playing"] } == [false, true],
      "while paused: \(list.serialized())")
    #expect(try client.request(["cmd": "resume", "stream": "music", "fade": 0.05]).isOK)
    _ = try client.waitForEvent { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    daemon.stop()

    let frames = 48_000
    let ended = try #require(Self.itemEvents(client, "music", "item-ended").first { $0["path"] == .string(a) })
    #expect(ended["reason"] == "finished", "\(ended.serialized())")
    let left = try daemon.played(channel: 0).map(Double.init)
    let right = try daemon.played(channel: 1).map(Double.init)
    try #require(crossfade > 0 && crossfade + 2 * frames < left.count)
    // The hold: silent samples from the pause's end to the resume's start.
    let quiet = try #require((crossfade..<left.count).first { left[$0] == 0 && right[$0] == 0 })
    let back = try #require((quiet..<left.count).first { left[$0] != 0 || right[$0] != 0 })
    let held = back - quiet
    try #require(held > 24_000, "held for \(held) samples")
    // At most a decision grid's samples before the hold, and the resume's first, are silent yet
    // played (the transport at 0).
    let slack = 130
    let aEnd = Self.sample(ended)
    #expect(
      aEnd - crossfade - frames <= held && aEnd - crossfade - frames >= held - slack,
      "a ended \(aEnd - crossfade - frames) samples after its crossfade's length, held \(held)")

    var off = 0.0
    var worstAt = -1
    for index in crossfade..<min(aEnd, left.count) {
      let sum = left[index] + right[index]
      guard sum > 0.005 else { continue }
      let share = right[index] / sum
      let played = Double(index - crossfade - (index >= back ? held : 0)) / Double(frames)
      let error = share - played
      // After the hold the share may be ahead by the silent samples that were played.
      let allowed = index >= back ? Double(slack) / Double(frames) : 0
      let outside = error < -1e-4 ? -error : (error > allowed + 1e-4 ? error - allowed : 0)
      if outside > off {
        off = outside
        worstAt = index
      }
    }
    #expect(off == 0, "the crossfade off its progress by \(off) at \(worstAt) (hold \(quiet)..<\(back))")
    // Heard again after the resume: a's remaining time, b from its level, not from 1.
    let after = back + 2_400
    let share = right[after] / (left[after] + right[after])
    let before = right[quiet - 2_400] / (left[quiet - 2_400] + right[quiet - 2_400])
    print("share before the pause \(before), after the resume \(share); a at \(left[after] / 0.5)")
    // The share moves on by the samples played between the two: 2 400 before the pause's end,
    // 2 400 after the resume's start, and those silent but played.
    let moved = share - before - 4_800 / Double(frames)
    #expect(
      left[after] > 0.1 && moved >= -1e-4 && moved <= Double(slack) / Double(frames),
      "after the resume: a \(left[after]), b's share \(share)")

    let bound = 0.5 * (1 / 2_400.0 + 1 / Double(frames)) + 1e-6
    var steepest = 0.0
    for index in (crossfade - 100)..<(aEnd + 4_800) {
      steepest = max(steepest, abs(left[index] - left[index - 1]), abs(right[index] - right[index - 1]))
    }
    print("largest step \(steepest), the ramps' own \(bound) (period \(periodMs) ms)")
    #expect(steepest <= bound, "a step of \(steepest), above \(bound)")
    #expect(left[aEnd..<(aEnd + 4_800)].allSatisfy { $0 == 0 }, "a heard after its end")
  }
}
