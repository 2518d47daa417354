import Synchronization

/// A single-producer, single-consumer ring of floats: the decoder thread writes, the render
/// thread reads, neither waits for the other, neither allocates or locks. Positions only grow;
/// the capacity is a power of two so a position maps to a slot with a mask.
public final class RingBuffer: @unchecked Sendable {
  public let capacity: Int
  private let mask: Int
  private let storage: UnsafeMutablePointer<Float>
  private let written = Atomic<Int>(0)
  private let read = Atomic<Int>(0)
  /// Where the producer's room ends: equal to `read`, or behind it while the consumer `holds`
  /// what it read until it lets go of it (`release(upTo:)`), so it can read it again (`rewind(to:)`).
  private let released = Atomic<Int>(0)
  /// Consumer: what is read stays in the ring until released (a player that may rewind its
  /// device keeps the audio it may have to render again).
  public var holds = false

  /// At least `minimumCapacity` samples (rounded up to a power of two).
  public init(minimumCapacity: Int) {
    var capacity = 1
    while capacity < max(minimumCapacity, 2) { capacity <<= 1 }
    self.capacity = capacity
    mask = capacity - 1
    storage = .allocate(capacity: capacity)
    storage.initialize(repeating: 0, count: capacity)
  }

  deinit { storage.deallocate() }

  /// Samples waiting to be read (consumer side).
  public var available: Int { written.load(ordering: .acquiring) - read.load(ordering: .relaxed) }

  /// Room for samples (producer side).
  public var space: Int { capacity - (written.load(ordering: .relaxed) - released.load(ordering: .acquiring)) }

  /// Producer: copies up to `count` samples in; returns how many fitted.
  @discardableResult
  public func write(_ samples: UnsafePointer<Float>, count: Int) -> Int {
    let head = written.load(ordering: .relaxed)
    let tail = released.load(ordering: .acquiring)
    let n = min(count, capacity - (head - tail))
    guard n > 0 else { return 0 }
    let start = head & mask
    let first = min(n, capacity - start)
    (storage + start).update(from: samples, count: first)
    if n > first { storage.update(from: samples + first, count: n - first) }
    written.store(head + n, ordering: .releasing)
    return n
  }

  /// Consumer: copies up to `count` samples out; returns how many there were.
  @discardableResult
  public func read(into samples: UnsafeMutablePointer<Float>, count: Int) -> Int {
    consume(count: count) { run, offset, length in (samples + offset).update(from: run, count: length) }
  }

  /// Consumer: up to `count` samples, read in place: `body` gets each contiguous run (two when
  /// the ring wraps) and its offset from the first sample; then they count as read. Returns how
  /// many there were. No copy; `body` must not keep the pointer.
  @discardableResult
  public func consume(count: Int, _ body: (UnsafePointer<Float>, _ offset: Int, _ count: Int) -> Void) -> Int {
    let tail = read.load(ordering: .relaxed)
    let head = written.load(ordering: .acquiring)
    let n = min(count, head - tail)
    guard n > 0 else { return 0 }
    let start = tail & mask
    let first = min(n, capacity - start)
    body(storage + start, 0, first)
    if n > first { body(storage, first, n - first) }
    read.store(tail + n, ordering: .relaxed)
    if !holds { released.store(tail + n, ordering: .releasing) }
    return n
  }

  /// Consumer: how many samples have ever been read.
  public var readPosition: Int { read.load(ordering: .relaxed) }

  /// Consumer: what was read before `position` may be overwritten now (at most what was read).
  public func release(upTo position: Int) {
    let limit = min(position, read.load(ordering: .relaxed))
    if limit > released.load(ordering: .relaxed) { released.store(limit, ordering: .releasing) }
  }

  /// Consumer: whether `position` was read and not yet released.
  public func canRewind(to position: Int) -> Bool {
    position >= released.load(ordering: .relaxed) && position <= read.load(ordering: .relaxed)
  }

  /// Consumer: reads again from `position`, which was read and not yet released. False (and
  /// nothing moves) when it is not.
  @discardableResult
  public func rewind(to position: Int) -> Bool {
    guard canRewind(to: position) else { return false }
    read.store(position, ordering: .relaxed)
    return true
  }

  /// Producer side: how many samples have ever been written (a mark for `discard(upTo:)`).
  public var writePosition: Int { written.load(ordering: .acquiring) }

  /// Consumer: drops what was written before `position` (a seek: everything older than the
  /// producer's mark), leaving what came after.
  public func discard(upTo position: Int) {
    let tail = read.load(ordering: .relaxed)
    if position > tail {
      read.store(position, ordering: .relaxed)
      released.store(position, ordering: .releasing)
    }
  }
}
