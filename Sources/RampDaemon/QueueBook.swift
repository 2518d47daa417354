import RampAudio
import RampProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The queues of the streams that play one, on the control side: each queue's files in order,
/// which one plays (as the render thread's `item-started` events tell), and whether it loops.
/// The render thread holds only the playing item and the next one, which the daemon opens and
/// installs ahead of time (`Controller.installNext`).
final class QueueBook: Sendable {
  struct Item: Sendable, Equatable {
    let id: UInt64
    /// The file as resolved (absolute).
    let path: String
    /// Seconds of audio in it.
    let seconds: Double
  }

  struct Queue: Sendable {
    var items: [Item]
    /// The playing item's id.
    var current: UInt64
    var loop: Bool
    /// The level-triggered crossfade's settings, when it is on: each item is analysed as it opens.
    var tail: QuietTail.Trigger?
    /// Loudness-normalised playback, when it is on: each item is measured as it opens.
    var loudness: LoudnessNormalisation?
    /// Counts the changes (and the items started): the next item installed is the one chosen
    /// from the newest version (`QueueInstall.generation`).
    var generation: UInt64 = 1
    /// The items started and not yet ended, in the order they started (an item played again
    /// while it still fades out is there twice): the playing one and those fading out.
    var heard: [UInt64] = []

    var currentIndex: Int? { items.firstIndex { $0.id == current } }

    /// The item after the playing one (the first again when the queue loops).
    var following: Item? {
      guard let index = currentIndex else { return nil }
      if index + 1 < items.count { return items[index + 1] }
      return loop ? items.first : nil
    }

    /// Whether another item follows `item` in the queue.
    func isFollowed(_ item: Item) -> Bool {
      guard let index = items.firstIndex(of: item) else { return false }
      return index + 1 < items.count || loop
    }
  }

  private let queues = Mutex<[String: Queue]>([:])
  /// Queues whose stream has not started yet, by their first item's id (a `play` refused on the
  /// render thread leaves one here, never started).
  private let pending = Mutex<[UInt64: Queue]>([:])
  private let counter = Atomic<UInt64>(0)

  func newID() -> UInt64 { counter.add(1, ordering: .relaxed).newValue }

  /// A queue for a stream about to start with its first item.
  func prepare(_ items: [Item], loop: Bool, tail: QuietTail.Trigger?, loudness: LoudnessNormalisation?) {
    guard let first = items.first else { return }
    pending.withLock {
      $0[first.id] = Queue(items: items, current: first.id, loop: loop, tail: tail, loudness: loudness)
    }
  }

  /// The render thread started item `item` of `stream`: the queue it belongs to, afterwards.
  func started(_ stream: String, item: UInt64) -> Queue? {
    if var queue = pending.withLock({ $0.removeValue(forKey: item) }) {
      queue.heard = [item]
      queues.withLock { $0[stream] = queue }
      return queue
    }
    return queues.withLock { table in
      table[stream]?.current = item
      table[stream]?.generation += 1
      table[stream]?.heard.append(item)
      return table[stream]
    }
  }

  /// The render thread's item `item` of `stream` was last heard.
  func itemEnded(_ stream: String, item: UInt64) {
    queues.withLock { table in
      guard let index = table[stream]?.heard.firstIndex(of: item) else { return }
      table[stream]?.heard.remove(at: index)
    }
  }

  func ended(_ stream: String) { _ = queues.withLock { $0.removeValue(forKey: stream) } }

  func queue(_ stream: String) -> Queue? { queues.withLock { $0[stream] } }

  var streams: [String] { queues.withLock { $0.keys.sorted() } }

  /// Changes stream `stream`'s queue; nil when it has none.
  func change<T>(_ stream: String, _ body: (inout Queue) throws(ProtocolError) -> T) throws(ProtocolError) -> T {
    let result: Result<T, ProtocolError>? = queues.withLock { table in
      guard var queue = table[stream] else { return nil }
      do throws(ProtocolError) {
        queue.generation += 1
        let value = try body(&queue)
        table[stream] = queue
        return .success(value)
      } catch {
        return .failure(error)
      }
    }
    switch result {
    case nil: throw Self.noQueue(stream)
    case .success(let value)?: return value
    case .failure(let error)?: throw error
    }
  }

  static func noQueue(_ stream: String) -> ProtocolError {
    ProtocolError(
      .unknownStream, field: "stream", "no stream '\(stream)' plays a queue (start one with play and queue)")
  }

  /// A queue as `queue-list` and `status` show it.
  static func describe(_ queue: Queue) -> JSONValue {
    [
      "items": .array(
        queue.items.enumerated().map { index, item in
          [
            "index": .integer(index), "item": .integer(item.id), "path": .string(item.path),
            "duration": .number(item.seconds), "playing": .bool(item.id == queue.current),
            "fading": .bool(queue.heard.filter { $0 == item.id }.count > (item.id == queue.current ? 1 : 0)),
          ]
        }),
      "current": queue.currentIndex.map { .integer($0) } ?? .null,
      "loop": .bool(queue.loop),
    ]
  }

  /// `status`'s streams with their queues (each stream's `duration` is the playing item's, from
  /// the render thread).
  func annotate(_ streams: JSONValue?) -> JSONValue? {
    guard case .array(let rows)? = streams else { return streams }
    return .array(
      rows.map { row in
        guard case .object(var object) = row, case .string(let id)? = object["stream"], let queue = queue(id)
        else { return row }
        object["queue"] = Self.describe(queue)
        return .object(object)
      })
  }
}
