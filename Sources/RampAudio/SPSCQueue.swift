import Synchronization

/// A bounded single-producer, single-consumer queue of values, lock-free: how commands reach
/// the render thread and events leave it. Push and pop never allocate; slots are preallocated
/// and a value is moved in and out.
public final class SPSCQueue<Element>: @unchecked Sendable {
  public let capacity: Int
  private let mask: Int
  private let slots: UnsafeMutablePointer<Element?>
  private let head = Atomic<Int>(0)
  private let tail = Atomic<Int>(0)

  public init(minimumCapacity: Int) {
    var capacity = 2
    while capacity < minimumCapacity { capacity <<= 1 }
    self.capacity = capacity
    mask = capacity - 1
    slots = .allocate(capacity: capacity)
    slots.initialize(repeating: nil, count: capacity)
  }

  deinit {
    slots.deinitialize(count: capacity)
    slots.deallocate()
  }

  /// Producer: how many more values fit now (the consumer may make more room meanwhile).
  public var freeSlots: Int { capacity - (head.load(ordering: .relaxed) - tail.load(ordering: .acquiring)) }

  /// Producer: false when the queue is full (the value is not taken).
  @discardableResult
  public func push(_ value: Element) -> Bool {
    let position = head.load(ordering: .relaxed)
    guard position - tail.load(ordering: .acquiring) < capacity else { return false }
    slots[position & mask] = value
    head.store(position + 1, ordering: .releasing)
    return true
  }

  /// Consumer: whether nothing waits (a producer may push meanwhile).
  public var isEmpty: Bool { tail.load(ordering: .relaxed) >= head.load(ordering: .sequentiallyConsistent) }

  /// Consumer: the oldest value, left in the queue (nil when empty).
  public var first: Element? {
    let position = tail.load(ordering: .relaxed)
    guard position < head.load(ordering: .acquiring) else { return nil }
    return slots[position & mask]
  }

  /// Consumer: the oldest value, or nil when empty.
  public func pop() -> Element? {
    let position = tail.load(ordering: .relaxed)
    guard position < head.load(ordering: .acquiring) else { return nil }
    let value = slots[position & mask].take()
    tail.store(position + 1, ordering: .releasing)
    return value
  }
}
