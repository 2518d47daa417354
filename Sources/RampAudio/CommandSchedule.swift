/// Commands waiting for their sample, soonest first (commands for the same sample in the order
/// they came): a binary heap in storage reserved up front, so the render thread adds and takes a
/// command in O(log n) swaps, without allocating, however many wait.
struct CommandSchedule {
  private struct Entry {
    var sample: Int64
    let order: Int
    let command: PlayerCommand

    func precedes(_ other: Entry) -> Bool {
      sample < other.sample || (sample == other.sample && order < other.order)
    }
  }

  private var heap: ContiguousArray<Entry> = []
  private var nextOrder = 0

  init(capacity: Int) { heap.reserveCapacity(capacity) }

  var count: Int { heap.count }
  var capacity: Int { heap.capacity }
  /// The soonest command's sample.
  // Not `heap.first`: unspecialised in a debug build, it boxes the entry (an allocation).
  var firstSample: Int64? { heap.isEmpty ? nil : heap[0].sample }

  /// Adds `command` for `sample`. Within the capacity reserved, it never allocates.
  mutating func insert(_ command: PlayerCommand, at sample: Int64) {
    heap.append(Entry(sample: sample, order: nextOrder, command: command))
    nextOrder &+= 1
    var child = heap.count - 1
    while child > 0 {
      let parent = (child - 1) / 2
      guard heap[child].precedes(heap[parent]) else { break }
      swap(child, parent)
      child = parent
    }
  }

  /// Every command `frames` samples sooner: the order stays.
  mutating func moveEarlier(by frames: Int64) {
    var index = 0
    while index < heap.count {
      heap[index].sample -= frames
      index += 1
    }
  }

  /// Takes the soonest command.
  mutating func removeFirst() -> PlayerCommand {
    swap(0, heap.count - 1)
    let first = heap.removeLast()
    var parent = 0
    while true {
      let left = 2 * parent + 1
      guard left < heap.count else { break }
      let right = left + 1
      let soonest = right < heap.count && heap[right].precedes(heap[left]) ? right : left
      guard heap[soonest].precedes(heap[parent]) else { break }
      swap(parent, soonest)
      parent = soonest
    }
    return first.command
  }

  mutating func removeAll() { heap.removeAll(keepingCapacity: true) }

  /// Not `swapAt`: unspecialised in a debug build, it boxes an entry (an allocation and a free).
  private mutating func swap(_ first: Int, _ second: Int) {
    guard first != second else { return }
    let entry = heap[first]
    heap[first] = heap[second]
    heap[second] = entry
  }
}
