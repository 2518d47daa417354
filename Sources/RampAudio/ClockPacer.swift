#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Keeps a writer that has no device to block on in step with CLOCK_MONOTONIC: frames written
/// are counted from an anchor (the first write), and a write waits until it keeps them at most
/// `lead` frames ahead of the clock. Used by an output paced by rampd's clock
/// (``OutputCapabilities/Clock/ours``) and by the render thread while it has no device (lost,
/// or one without a clock with nothing playing).
///
/// A writer that fell behind the clock (everything written has been played: a device would have
/// run dry, or the thread was not scheduled for a while) re-anchors: the clock starts again from
/// now, instead of racing through the time lost to catch up.
struct ClockPacer {
  let rate: Int64
  /// Whether the first write has anchored the clock.
  private(set) var started = false
  /// CLOCK_MONOTONIC nanoseconds at which frame 0 was due.
  private var anchor: Int64 = 0
  /// Frames written since the anchor.
  private(set) var written: Int64 = 0

  init(rate: Int) { self.rate = Int64(rate) }

  /// Forgets the anchor: the next write starts the clock again.
  mutating func reset() {
    started = false
    written = 0
  }

  /// Before writing `count` frames: anchors the clock at the first write; re-anchors when the
  /// writer is behind it (returns true then: an underrun); then sleeps until `count` more frames
  /// are at most `lead` ahead of the clock, or, with `refill`, until only `refill` frames are
  /// left ahead (see ``writable(count:lead:refill:now:)``).
  @discardableResult
  mutating func wait(toWrite count: Int, lead: Int, refill: Int? = nil) -> Bool {
    let now = monotonicNanoseconds()
    guard started else {
      started = true
      anchor = now
      written = 0
      return false
    }
    var late = false
    if elapsed(now: now) > written {
      late = true
      anchor = now - nanoseconds(frames: written)
    }
    // A deadline already passed costs no system call (a writer that waited for it elsewhere,
    // taking commands, finds it so every block).
    if let deadline = writable(count: count, lead: lead, refill: refill, now: now), deadline > now {
      sleep(untilNanoseconds: deadline)
    }
    return late
  }

  /// When `count` more frames may be written (CLOCK_MONOTONIC nanoseconds), nil while they fit
  /// within `lead` frames ahead of the clock. Once they do not, the writer waits until only
  /// `refill` frames are left ahead (by default `lead − count`, just room for them): a writer
  /// that then writes back to back until `lead` is full again wakes once per several blocks.
  func writable(count: Int, lead: Int, refill: Int? = nil, now: Int64 = monotonicNanoseconds()) -> Int64? {
    guard started, framesAhead(now: now) + Int64(count) > Int64(lead) else { return nil }
    return due(frame: written - Int64(max(refill ?? lead - count, 0)))
  }

  /// After writing `count` frames.
  mutating func advance(by count: Int) { written += Int64(count) }

  /// Frames written and not yet due on the clock (0 before the first write).
  func framesAhead(now: Int64 = monotonicNanoseconds()) -> Int64 {
    started ? written - elapsed(now: now) : 0
  }

  /// CLOCK_MONOTONIC nanoseconds at which frame `frame` (counted from the anchor) is due.
  func due(frame: Int64) -> Int64 { anchor + nanoseconds(frames: frame) }

  /// Sleeps until everything written is due.
  func waitUntilPlayed() {
    if started { sleep(untilNanoseconds: due(frame: written)) }
  }

  private func nanoseconds(frames: Int64) -> Int64 {
    frames / rate * 1_000_000_000 + frames % rate * 1_000_000_000 / rate
  }

  private func elapsed(now: Int64) -> Int64 {
    let ns = now - anchor
    return ns / 1_000_000_000 * rate + ns % 1_000_000_000 * rate / 1_000_000_000
  }

  private func sleep(untilNanoseconds deadline: Int64) { sleepUntil(nanoseconds: deadline) }
}
