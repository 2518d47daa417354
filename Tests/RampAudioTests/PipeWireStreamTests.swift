import CAllocationGuard
import Foundation
import RampAudio
import Synchronization
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// The native PipeWire stream against a real PipeWire with WirePlumber and a null sink
/// (`PipeWireSession`), what it plays recorded from the sink's monitor with `pw-record`.
@Suite(.serialized) struct PipeWireStreamTests {
  /// A counter-coded signal (frame k of the stream is (k + 1) / 2^24 on the left, its negative
  /// on the right) arrives at the sink in order: from frame 0 to the last heard, every frame
  /// once, no repeat, no other sample, no gap (silence, frames skipped). At 1024-frame quanta:
  /// at 256, on 2 cores under a load of 5 to 7, about half the runs heard a gap of a quantum or
  /// three (silence, or frames skipped), some of them not seen as a jump of `ticks`. The data thread allocates nothing from one block to the next (the
  /// process callback and all PipeWire does between).
  @Test func aCounterArrivesInOrderAndTheDataThreadDoesNotAllocate() throws {
    let session = try PipeWireSession()
    Self.reach(session)
    let counter = CounterSignal()
    let stream = PipeWireStream(render: counter.render)
    let recording = try session.startRecording()
    usleep(300_000)
    let format = try stream.open(rate: 48_000, channels: 2, latencyFrames: 1024, role: "Music")
    #expect(format.rate == 48_000 && format.channels == 2, "\(format)")
    usleep(3_000_000)
    stream.close()
    usleep(300_000)
    let heard = try recording.finish()
    let blocks = counter.blocks.load(ordering: .relaxed)
    let written = counter.written.load(ordering: .relaxed)
    #expect(blocks > 100, "\(blocks) blocks in 3 s")
    let left = stride(from: 0, to: heard.count, by: 2).map { heard[$0] }
    let right = stride(from: 1, to: heard.count, by: 2).map { heard[$0] }
    let first = try #require(left.firstIndex { $0 != 0 }, "nothing heard in \(left.count) frames")
    let last = try #require(left.lastIndex { $0 != 0 })
    var wrong: [(Int, Float, Float)] = []
    // Where the sink did not hear the next frame: frames of silence, then frames skipped.
    var gaps: [(at: Int, silent: Int, skipped: Int)] = []
    var next = 0
    var inGap = false
    for index in first...last {
      if left[index] == 0 && right[index] == 0 {
        if !inGap { gaps.append((next, 0, 0)) }
        inGap = true
        gaps[gaps.count - 1].silent += 1
        continue
      }
      let frame = Int(left[index] * 16_777_216) - 1
      if Float(frame + 1) / 16_777_216 != left[index] || right[index] != -left[index] || frame < next {
        wrong.append((index - first, left[index], right[index]))
      } else if frame > next {
        if !inGap { gaps.append((next, 0, 0)) }
        gaps[gaps.count - 1].skipped = frame - next
      }
      inGap = false
      next = max(next, frame + 1)
    }
    #expect(
      wrong.isEmpty && left[first] == 1.0 / 16_777_216,
      "\(wrong.count) frames not the counter, first \(wrong.prefix(8))")
    #expect(left[..<first].allSatisfy { $0 == 0 } && left[(last + 1)...].allSatisfy { $0 == 0 })
    #expect(
      gaps.isEmpty, "gaps at the sink \(gaps), counted \(stream.xruns) xruns, \(stream.skippedTicks) ticks skipped")
    // All that was written, less what close cut off (a quantum or two).
    #expect(next > written - 4096 && next <= written, "heard up to frame \(next) of \(written)")
    // The first blocks fill the runtime's caches (a closure's first call).
    let allocations = counter.allocationsBetweenBlocks(after: 16)
    #expect(allocations.blocks > 100 && allocations.count == 0, "\(allocations)")
    print(
      "PipeWireStream counter: \(last - first + 1) of \(written) frames heard in order, gaps \(gaps), "
        + "xruns \(stream.xruns) (\(stream.skippedTicks) ticks), \(blocks) blocks, "
        + "allocations between blocks \(allocations.count) over \(allocations.blocks), library "
        + PipeWireStream.libraryVersion + ", first timing \(String(describing: counter.firstTiming))")
  }

  /// The heard time of a frame: two streams, one at the sink's 48 kHz asking for 256-frame
  /// quanta, one at 44.1 kHz (resampled: `buffered` counts) asking for 1024, each steps from 0
  /// to 0.5 on the frame its timing says is heard at T and again at T + 1 s (T a second and a
  /// half ahead, CLOCK_MONOTONIC), the first on the left, the second on the right. At the sink,
  /// the two streams' steps land within 0.5 ms of each other; the first stream's steps are 1 s
  /// apart by the sink's clock within 1 ms: the frames between them (its counter, 2^-25 a frame
  /// on the right, read from the recording) where the graph skipped none of its cycles between
  /// them (across skipped cycles, the frames and the ticks counted as skipped were once a quantum
  /// short of the second under load: not asserted).
  @Test func framesAreHeardWhenTheirTimingSays() throws {
    let session = try PipeWireSession()
    Self.reach(session)
    let start = monotonicNanoseconds() + 1_500_000_000
    let marks = [start, start + 1_000_000_000]
    let exact = MarkedSignal(marks: marks, channel: 0, counter: true)
    let resampled = MarkedSignal(marks: marks, channel: 1, counter: false)
    let a = PipeWireStream(name: "rampd-a", render: exact.render)
    let b = PipeWireStream(name: "rampd-b", render: resampled.render)
    let recording = try session.startRecording()
    _ = try a.open(rate: 48_000, channels: 2, latencyFrames: 256)
    _ = try b.open(rate: 44_100, channels: 2, latencyFrames: 1024)
    usleep(UInt32(max(0, marks[1] + 500_000_000 - monotonicNanoseconds()) / 1000))
    a.close()
    b.close()
    let heard = try recording.finish()
    let edgesA = Self.rises(in: heard, channel: 0)
    let edgesB = Self.rises(in: heard, channel: 1)
    let largestB = stride(from: 1, to: heard.count, by: 2).map { abs(heard[$0]) }.max() ?? 0
    #expect(
      edgesA.count == 2 && edgesB.count == 2,
      "rises: \(edgesA), \(edgesB); marks \(exact.markTimings), \(resampled.markTimings); b's largest \(largestB)")
    guard edgesA.count == 2, edgesB.count == 2 else { return }
    let between = zip(edgesA, edgesB).map { ($0 - $1) / 48 }
    // Within half a millisecond: the resampler's 32 frames (`buffered`, 0.73 ms) would show.
    #expect(between.allSatisfy { abs($0) < 0.5 }, "stream a's steps after b's by \(between) ms")
    // The first stream's frame at each of its steps, by its counter over the nearest 1000 frames
    // before where it counts on (the mix with the second stream may round the counter's last bit
    // away).
    func counter(at frame: Int) -> Int { Int((heard[2 * frame + 1] * 33_554_432).rounded()) - 1 }
    let counted = try edgesA.map { edge in
      let offsets = stride(from: 100, to: 20_000, by: 500).lazy.map { before in
        (Int(edge) - before - 1000..<Int(edge) - before).map { counter(at: $0) - $0 }.sorted()
      }.first { $0.last! - $0.first! <= 2 && $0.first! > -Int(edge) }
      let counting = try #require(offsets, "the first stream's counter is not in the recording before \(edge)")
      return counting[counting.count / 2] + Int(edge)
    }
    let skipped = Double(exact.skippedBetweenMarks)
    let spacing = (Double(counted[1] - counted[0]) + skipped - 48_000) / 48
    if skipped == 0 {
      #expect(abs(spacing) < 1, "steps 1 s apart heard 1 s + \(spacing) ms apart")
    }
    let lost = (edgesA[1] - edgesA[0]) - Double(counted[1] - counted[0])
    print(
      "PipeWireStream heard time: a after b by \(between) ms; spacing off by \(spacing) ms; "
        + "xruns \(a.xruns), \(b.xruns) (skipped between the marks \(skipped) ticks, the recording lacks "
        + "\(lost) frames there); timings at the marks: \(exact.markTimings), \(resampled.markTimings)")
  }

  /// PipeWire killed while the stream plays: an error or unconnected state, or a core error,
  /// reaches the event handler; closed, and opened again once PipeWire is back, the stream plays
  /// the counter from frame 0 again, heard in order. Closed and opened three times more, the same.
  /// An open while PipeWire is down fails.
  @Test func aServerRestartWhilePlayingIsReportedAndANewOpenPlays() throws {
    let session = try PipeWireSession()
    Self.reach(session)
    let events = EventLog()
    let counter = CounterSignal()
    let stream = PipeWireStream(render: counter.render, events: events.append)
    _ = try stream.open(rate: 48_000, channels: 2, latencyFrames: 512, role: "Music")
    usleep(500_000)
    #expect(counter.blocks.load(ordering: .relaxed) > 20)
    session.stop()
    let deadline = Date().addingTimeInterval(5)
    while !events.failed && Date() < deadline { usleep(20_000) }
    #expect(events.failed, "events: \(events.all)")
    stream.close()
    #expect(throws: AudioError.self) { _ = try stream.open(rate: 48_000, channels: 2, timeout: 1) }
    try session.start()
    for round in 1...4 {
      counter.restart()
      let recording = try session.startRecording()
      usleep(300_000)
      _ = try stream.open(rate: 48_000, channels: 2, latencyFrames: 512, role: "Music")
      usleep(700_000)
      stream.close()
      usleep(200_000)
      let heard = try recording.finish()
      let left = stride(from: 0, to: heard.count, by: 2).map { heard[$0] }
      let first = try #require(left.firstIndex { $0 != 0 }, "round \(round): nothing heard")
      let last = try #require(left.lastIndex { $0 != 0 })
      // From frame 0, counting up (across a gap a loaded machine may make: the first test's).
      let frames = left[first...last].filter { $0 != 0 }.map { Double($0) * 16_777_216 - 1 }
      let inOrder = frames.allSatisfy { $0 == $0.rounded() } && zip(frames, frames.dropFirst()).allSatisfy { $0 < $1 }
      #expect(
        frames.first == 0 && inOrder && frames.count > 48_000 / 2,
        "round \(round): \(frames.count) frames from \(frames.first ?? -1), in order: \(inOrder)")
    }
    print("PipeWireStream restart: events \(events.all)")
  }

  /// Bad parameters are refused naming the field, before PipeWire is asked.
  @Test func badParametersAreRefusedNamingTheField() {
    let stream = PipeWireStream(render: { _, _ in })
    let cases: [(String, () throws(AudioError) -> PipeWireFormat)] = [
      ("rate", { () throws(AudioError) in try stream.open(rate: 0, channels: 2) }),
      ("channels", { () throws(AudioError) in try stream.open(rate: 48_000, channels: 0) }),
      ("latency", { () throws(AudioError) in try stream.open(rate: 48_000, channels: 2, latencyFrames: 0) }),
      ("role", { () throws(AudioError) in try stream.open(rate: 48_000, channels: 2, role: "") }),
      ("target", { () throws(AudioError) in try stream.open(rate: 48_000, channels: 2, target: "") }),
    ]
    for (field, open) in cases {
      do {
        _ = try open()
        Issue.record("\(field): opened")
      } catch {
        #expect(error.field == field && error.message.hasPrefix("pipewire.\(field): "), "\(error)")
      }
    }
    #expect(!stream.isOpen)
  }

  /// The timing's arithmetic: now + delay (graph ticks) + (queued + buffered + k - first) /
  /// stream rate, and its inverse.
  @Test func theHeardTimeOfAFrame() {
    let timing = PipeWireTiming(
      now: 1_000_000_000, rateNumerator: 1, rateDenominator: 48_000, ticks: 96_000, delay: 480, queued: 441,
      buffered: 44, queuedBuffers: 1, availableBuffers: 0, firstFrame: 4410, frames: 441, streamRate: 44_100,
      skippedTicks: 0)
    // 480 ticks at 48 kHz through the graph (10 ms); 441 frames queued, 44 buffered and 44 into
    // the block at 44.1 kHz (529 frames: 11.995 ms).
    let expected: Int64 = 1_000_000_000 + 10_000_000 + 11_995_465
    #expect(timing.heardTime(ofFrame: 4410 + 44) == expected)
    #expect(abs(timing.frame(heardAt: timing.heardTime(ofFrame: 5000)) - 5000) < 1e-3)
    #expect(timing.frame(heardAt: 1_000_000_000) < 4410)
  }

  /// The test process reaches `session`'s server (libpipewire reads where from the environment).
  static func reach(_ session: PipeWireSession) {
    setenv("PIPEWIRE_RUNTIME_DIR", session.runtime, 1)
    unsetenv("PIPEWIRE_REMOTE")
  }

  /// The frames (of the recording, fractional) where `channel` first rises through 0.25 after
  /// being 0 for 0.1 s (a resampler's ringing ahead of the step allowed).
  static func rises(in heard: [Float], channel: Int) -> [Double] {
    let samples = stride(from: channel, to: heard.count, by: 2).map { heard[$0] }
    var rises: [Double] = []
    var quiet = 0
    var quietEnded = Int.min / 2
    for index in 1..<samples.count {
      if abs(samples[index]) < 0.01 {
        quiet += 1
      } else {
        if quiet >= 4800 { quietEnded = index }
        quiet = 0
      }
      if samples[index] >= 0.25 && samples[index - 1] < 0.25 && index - quietEnded < 64 {
        let fraction = Double(0.25 - samples[index - 1]) / Double(samples[index] - samples[index - 1])
        rises.append(Double(index - 1) + fraction)
      }
    }
    return rises
  }
}

func monotonicNanoseconds() -> Int64 {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}

/// Frame k is (k + 1) / 2^24 on the left and its negative on the right; counts what PipeWire's
/// data thread allocates between one block and the next.
final class CounterSignal: @unchecked Sendable {
  let blocks = Atomic<Int>(0)
  let written = Atomic<Int>(0)
  private let allocations = UnsafeMutableBufferPointer<Int>.allocate(capacity: 100_000)
  private(set) var firstTiming: PipeWireTiming?
  private var recorded = 0

  deinit { allocations.deallocate() }

  /// Before the stream is opened again: the counter starts from frame 0 again.
  func restart() {
    blocks.store(0, ordering: .relaxed)
    written.store(0, ordering: .relaxed)
    recorded = 0
  }

  var render: PipeWireStream.Render {
    { [self] samples, timing in
      if recorded < allocations.count {
        allocations[recorded] = rampd_allocations_on_this_thread()
        recorded += 1
      }
      if firstTiming == nil { firstTiming = timing }
      for frame in 0..<timing.frames {
        let value = Float(timing.firstFrame + UInt64(frame) + 1) / 16_777_216
        samples[2 * frame] = value
        samples[2 * frame + 1] = -value
      }
      written.add(timing.frames, ordering: .relaxed)
      blocks.add(1, ordering: .relaxed)
    }
  }

  /// Allocations on the data thread from one block to the next, from block `after` on.
  func allocationsBetweenBlocks(after: Int) -> (count: Int, blocks: Int) {
    guard recorded > after + 1 else { return (0, 0) }
    return (allocations[recorded - 1] - allocations[after], recorded - 1 - after)
  }
}

/// Silence, but 0.5 on `channel` for 0.2 s from the frame its timing says is heard at each of
/// `marks` (CLOCK_MONOTONIC ns); with `counter`, frame k is (k + 1) / 2^25 on the other channel.
final class MarkedSignal: @unchecked Sendable {
  private let marks: [Int64]
  private let channel: Int
  private let counter: Bool
  /// Where each mark's step starts, once its block has come (the data thread's).
  private var starts: [Int64]
  private(set) var markTimings: [PipeWireTiming?]
  /// Graph ticks skipped (`skippedTicks`) so far, and at each mark's block.
  private var skipped: UInt64 = 0
  private var skippedAtMarks: [UInt64]

  init(marks: [Int64], channel: Int, counter: Bool) {
    self.marks = marks
    self.channel = channel
    self.counter = counter
    starts = Array(repeating: -1, count: marks.count)
    markTimings = Array(repeating: nil, count: marks.count)
    skippedAtMarks = Array(repeating: 0, count: marks.count)
  }

  /// Graph ticks skipped from the first mark's block to the last's.
  var skippedBetweenMarks: UInt64 { skippedAtMarks[skippedAtMarks.count - 1] - skippedAtMarks[0] }

  var render: PipeWireStream.Render {
    { [self] samples, timing in
      let first = Int64(timing.firstFrame)
      let length = Int64(timing.streamRate / 5)
      for index in samples.indices { samples[index] = 0 }
      if counter {
        for frame in 0..<timing.frames {
          samples[2 * frame + 1 - channel] = Float(first + Int64(frame) + 1) / 33_554_432
        }
      }
      skipped += timing.skippedTicks
      for mark in marks.indices {
        if starts[mark] < 0 {
          let frame = Int64(timing.frame(heardAt: marks[mark]).rounded(.up))
          if frame < first + Int64(timing.frames) {
            starts[mark] = max(frame, first)
            markTimings[mark] = timing
            skippedAtMarks[mark] = skipped
          }
        }
        guard starts[mark] >= 0 else { continue }
        let from = max(first, starts[mark])
        let to = min(first + Int64(timing.frames), starts[mark] + length)
        var frame = from
        while frame < to {
          samples[Int(frame - first) * 2 + channel] = 0.5
          frame += 1
        }
      }
    }
  }
}

/// The events a stream reported, in order.
final class EventLog: @unchecked Sendable {
  private let lock = NSLock()
  private var events: [PipeWireStreamEvent] = []

  var all: [PipeWireStreamEvent] { lock.withLock { events } }

  /// An error, unconnected or core error among them.
  var failed: Bool {
    all.contains {
      switch $0 {
      case .state(.error, _), .state(.unconnected, _), .coreError: true
      default: false
      }
    }
  }

  var append: @Sendable (PipeWireStreamEvent) -> Void {
    { [self] event in lock.withLock { events.append(event) } }
  }
}
