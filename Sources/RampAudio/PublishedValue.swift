import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A key path's presentation value, published by the render thread at the start of every block
/// for threads that must not touch the engine (mixer bindings, observers). A reader that polls
/// only while the value moves can sleep in `waitForChange` while it holds still, if the value was
/// published with `wakesOnChange` (the render thread then rings it when the value changes).
///
/// Paced by the clock, or filling a device that rewinds, the render thread renders several blocks
/// at one wake-up; each block's value
/// then carries the time at which it becomes `latest`, one period after the one before, so a
/// reader still sees a new value every period, as if the blocks had been rendered one at a time.
public final class PublishedValue: @unchecked Sendable {
  public let keyPath: String
  /// The last values published, newest at `written - 1`: more than a batch of blocks holds at the
  /// default period and buffer, also on a device that rewinds (a 200 ms buffer refilled at once
  /// after a rewind: 20 blocks).
  private let slots: [Slot]
  private let written = Atomic<Int>(0)
  /// The newest value stored (what `waitForChange` compares with).
  private let newest = Atomic<UInt64>(Double.nan.bitPattern)
  private let bell: Bell?
  /// A reader sleeps in `waitForChange`.
  private let sleeping = Atomic<Bool>(false)

  /// One published value. A sequence lock: odd `sequence` while the render thread writes it.
  private final class Slot: Sendable {
    let sequence = Atomic<Int>(0)
    let index = Atomic<Int>(-1)
    let sample = Atomic<Int64>(-1)
    let bits = Atomic<UInt64>(Double.nan.bitPattern)
    /// CLOCK_MONOTONIC nanoseconds from which it is `latest`.
    let due = Atomic<Int64>(0)
  }

  private static let slotCount = 32
  /// The key path's property as the render thread last looked it up (render thread only).
  var handle: PropertyHandle?
  /// For a level (`master.level.peak`, `streams.<id>.level.momentary`): whose, and which reading.
  let level: LevelKey?
  /// `master.limiter`: the master limiter's gain reduction, dB (NaN without a limiter).
  let readsLimiter: Bool
  public static let limiterKeyPath = "master.limiter"
  /// The meter `level` names as the render thread last looked it up (render thread only). Not
  /// retained: it belongs to its stream, and is looked up again once a stream leaves.
  var meter: Unmanaged<SignalLevel>?
  /// Between `Player.publish` and `Player.unpublish`.
  let isPublished = Atomic<Bool>(false)

  init(keyPath: String, wakesOnChange: Bool) {
    self.keyPath = keyPath
    level = LevelKey(keyPath)
    readsLimiter = keyPath == Self.limiterKeyPath
    slots = (0..<Self.slotCount).map { _ in Slot() }
    bell = wakesOnChange ? Bell() : nil
  }

  /// The value and the output sample it applies to; NaN while the key path does not exist (and
  /// sample −1 before the first block).
  public var latest: (value: Double, sample: Int64) {
    let now = monotonicNanoseconds()
    let count = written.load(ordering: .acquiring)
    var oldest: (value: Double, sample: Int64) = (.nan, -1)
    var index = count - 1
    while index >= 0 && index >= count - Self.slotCount {
      if let entry = read(index) {
        if entry.due <= now { return (Double(bitPattern: entry.bits), entry.sample) }
        oldest = (Double(bitPattern: entry.bits), entry.sample)
      }
      index -= 1
    }
    // Only values not yet due (or overwritten while read): the oldest of them.
    return oldest
  }

  /// Entry `index`, unless the render thread has overwritten it with a newer one.
  private func read(_ index: Int) -> (sample: Int64, bits: UInt64, due: Int64)? {
    let slot = slots[index % Self.slotCount]
    while true {
      let before = slot.sequence.load(ordering: .acquiring)
      if before & 1 == 1 { continue }
      let entry = (
        slot.sample.load(ordering: .relaxed), slot.bits.load(ordering: .relaxed),
        slot.due.load(ordering: .relaxed)
      )
      let stored = slot.index.load(ordering: .relaxed)
      atomicMemoryFence(ordering: .acquiring)
      guard slot.sequence.load(ordering: .relaxed) == before else { continue }
      return stored == index ? entry : nil
    }
  }

  /// Render thread: the value at `sample`, the latest from `due` (monotonic nanoseconds) on.
  func store(_ value: Double, sample: Int64, due: Int64) {
    let index = written.load(ordering: .relaxed)
    let slot = slots[index % Self.slotCount]
    let sequence = slot.sequence.load(ordering: .relaxed)
    slot.sequence.store(sequence + 1, ordering: .relaxed)
    atomicMemoryFence(ordering: .releasing)
    slot.index.store(index, ordering: .relaxed)
    slot.sample.store(sample, ordering: .relaxed)
    slot.bits.store(value.bitPattern, ordering: .relaxed)
    slot.due.store(due, ordering: .relaxed)
    slot.sequence.store(sequence + 2, ordering: .releasing)
    written.store(index + 1, ordering: .releasing)
    let previous = newest.exchange(value.bitPattern, ordering: .relaxed)
    guard let bell, previous != value.bitPattern else { return }
    // Pairs with the fence in `waitForChange`: either the reader sees the new value, or this sees
    // the reader asleep.
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    if sleeping.load(ordering: .relaxed),
      sleeping.compareExchange(expected: true, desired: false, ordering: .relaxed).exchanged
    {
      bell.ring()
    }
  }

  /// Sleeps until the newest value stored is no longer `value` (bit for bit: NaN while the key
  /// path does not exist), `wake()` is called, or `timeout` seconds pass (negative: no limit).
  /// Returns at once for a value published without `wakesOnChange`.
  public func waitForChange(from value: Double, timeout: Double = -1) {
    guard let bell else { return }
    sleeping.store(true, ordering: .relaxed)
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    if newest.load(ordering: .relaxed) == value.bitPattern {
      bell.wait(seconds: timeout)
    }
    sleeping.store(false, ordering: .relaxed)
  }

  /// Wakes a reader sleeping in `waitForChange` (to stop it).
  public func wake() { bell?.ring() }
}

/// A level's key path: `master.level.peak`, `master.level.momentary`, `streams.<id>.level.peak`,
/// `streams.<id>.level.momentary` (``SignalLevel``), read from the meters, not the engine.
public struct LevelKey: Equatable, Sendable {
  public enum Reading: String, Sendable { case peak, momentary }
  /// nil: the master.
  public var stream: String?
  public var reading: Reading

  /// The gain of what is measured: `master.gain`, `streams.<id>.gain`.
  public var gainKeyPath: String { stream.map { "streams.\($0).gain" } ?? "master.gain" }

  public init?(_ keyPath: String) {
    let parts = keyPath.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count >= 3, parts[parts.count - 2] == "level", let reading = Reading(rawValue: String(parts.last!))
    else { return nil }
    if parts.count == 3 && parts[0] == "master" {
      stream = nil
    } else if parts.count >= 4 && parts[0] == "streams" {
      stream = parts[1..<(parts.count - 2)].joined(separator: ".")
    } else {
      return nil
    }
    self.reading = reading
  }
}
