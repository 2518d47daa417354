import Logging
import RampAudio
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A queue command made ready: the next item installed after a change to the queue, or a skip
/// to an item, its file opened and prefilled. Committed on the render thread without allocating;
/// the reply is built off it.
enum QueueStep: Sendable {
  /// `queue-add`, `queue-remove`, `queue-clear`: the queue as it is now (the reply) and the next
  /// item for the render thread.
  case install(QueueInstall, reply: JSONValue)
  /// `next`, `previous`.
  case skip(QueueSkip, index: Int)

  var stream: String {
    switch self {
    case .install(let install, _): return install.stream
    case .skip(let skip, _): return skip.stream
    }
  }

  /// Render thread: commits it; the skip's sample goes in the outcome. Allocation-free.
  func apply(_ state: RenderState, _ outcome: inout Operation.Outcome) {
    switch self {
    case .install(let install, _): install.commit(state)
    case .skip(let skip, _):
      skip.commit(state)
      outcome.sample = skip.sample
    }
  }

  func reply(_ outcome: Operation.Outcome) -> JSONValue {
    switch self {
    case .install(_, let reply): return reply
    case .skip(let skip, let index):
      return [
        "stream": .string(skip.stream), "index": .integer(index), "item": .integer(skip.item.id),
        "path": .string(skip.item.path), "sample": .integer(outcome.sample),
      ]
    }
  }
}

/// The configured crossfades of a queue stream (`[queue]`).
public struct QueueDefaults: Sendable, Equatable {
  /// Seconds of crossfade at an item's end (0: gapless).
  public var crossfade: Double = 0
  public var curve: TimingFunction = .fade(.qsin)
  /// Seconds of crossfade on a skip (0: the declick ramp).
  public var skipCrossfade: Double = 0
  public var skipCurve: TimingFunction = .fade(.qsin)
  /// The level-triggered crossfade (dBFS; nil: off) and the seconds at an item's end it looks at.
  public var level: Double?
  public var window: Double = Crossfade.defaultWindow
  /// The loudness a queue's items are normalised to; nil: `playback.loudness`.
  public var loudness: LoudnessChoice?

  public init() {}
}

extension Preparation {
  /// A path resolved under the media roots: a path outside them is `forbidden-path`, one that
  /// cannot be resolved `file-error`, naming `field`.
  static func resolve(_ path: String, in media: MediaSettings, field: String, confined: Bool) throws(ProtocolError)
    -> String
  {
    do {
      return try media.resolve(path, confined: confined)
    } catch {
      switch error.reason {
      case .outsideRoots, .relativeWithoutRoots, .confinedWithoutRoots:
        throw ProtocolError(.forbiddenPath, field: field, error.description)
      default: throw ProtocolError(.fileError, field: field, error.description)
      }
    }
  }

  /// A file for a queue, resolved under the media roots and opened to check it (`field` names it
  /// in a refusal): its path and length.
  func queueItem(_ path: String, field: String, confined: Bool) throws(ProtocolError) -> QueueBook.Item {
    let media = configuration.media
    let resolved = try Self.resolve(path, in: media, field: field, confined: confined)
    let reader: SoundFileReader
    do throws(AudioError) {
      reader = try SoundFileReader(path: resolved)
    } catch {
      throw ProtocolError(.fileError, field: field, error.message)
    }
    guard media.contains(openedPath: reader.openedPath) else {
      throw ProtocolError(.forbiddenPath, field: field, MediaPathError(path: path, reason: .outsideRoots).description)
    }
    guard StreamDecoder.fileRates.contains(reader.sampleRate) else {
      throw ProtocolError(
        .fileError, field: field,
        "cannot read '\(path)': its sample rate, \(reader.sampleRate) Hz, is outside the "
          + "\(StreamDecoder.fileRates.lowerBound) to \(StreamDecoder.fileRates.upperBound) Hz rampd decodes.")
    }
    return QueueBook.Item(
      id: queues.newID(), path: resolved, seconds: Double(reader.frames) / Double(reader.sampleRate))
  }

  /// Opens `item` of `queue` ahead of its turn (and finds its quiet tail, when the queue's
  /// crossfade is level-triggered). A file that fails now (gone since it was added) is refused
  /// naming `field`.
  func openQueueItem(_ item: QueueBook.Item, in queue: QueueBook.Queue, field: String) throws(ProtocolError)
    -> QueueItem
  {
    do {
      return try player.prepareQueueItem(
        item.path, id: item.id, followed: queue.isFollowed(item), tail: queue.tail, loudness: queue.loudness)
    } catch let error as AudioError {
      throw ProtocolError(.fileError, field: field, error.message)
    } catch {
      throw ProtocolError(.fileError, field: field, "\(error)")
    }
  }

  /// The render-thread part of a `play` with `queue`: its items checked, the second one opened,
  /// the queue booked to start with `first` (the file `path` names, already resolved).
  func prepareQueue(_ play: Play, first path: String, confined: Bool, loudness: LoudnessNormalisation?)
    throws(ProtocolError) -> StreamQueue?
  {
    guard let rest = play.queue else { return nil }
    var items = [try queueItem(path, field: "path", confined: confined)]
    for (index, file) in rest.enumerated() {
      items.append(try queueItem(file, field: "queue[\(index)]", confined: confined))
    }
    let defaults = live.read { $0.queue }
    let crossfade = play.crossfade
    let tail = (crossfade.level ?? defaults.level).map {
      QuietTail.Trigger(threshold: $0, window: crossfade.window ?? defaults.window)
    }
    var queue = QueueBook.Queue(items: items, current: items[0].id, loop: play.loop, tail: tail, loudness: loudness)
    // The first item's trim, for its quiet tail (the stream's decoder then finds it cached).
    var firstTrim = 0.0
    if let loudness, tail != nil {
      do throws(AudioError) {
        firstTrim = try loudness.meter.trim(for: items[0].path, target: loudness.target).decibels
      } catch {
        throw ProtocolError(.fileError, field: "path", error.message)
      }
    }
    var next: QueueItem?
    if let following = queue.following {
      let index = items.firstIndex(of: following).map { $0 - 1 } ?? 0
      next = try openQueueItem(following, in: queue, field: "queue[\(index)]")
    }
    let stream = player.prepareQueue(
      item: items[0].id, followed: queue.following != nil, next: next,
      automatic: (crossfade.duration ?? defaults.crossfade, crossfade.curve ?? defaults.curve),
      manual: (crossfade.skipDuration ?? defaults.skipCrossfade, crossfade.skipCurve ?? defaults.skipCurve),
      quietStart: tail.flatMap {
        QuietTail.start(
          of: items[0].path, QuietTail.Trigger(threshold: $0.threshold - firstTrim, window: $0.window),
          outputRate: player.output.rate)
      })
    queue.current = items[0].id
    queues.prepare(queue.items, loop: queue.loop, tail: tail, loudness: loudness)
    // The items after the next one are measured now, in the background, so that opening each
    // in its turn finds it cached.
    if let loudness { loudness.meter.measureAhead(items.dropFirst(2).map(\.path)) }
    return stream
  }

  /// `queue-add`, `queue-remove`, `queue-clear`, `queue-list`, `next` and `previous`.
  func prepareQueueCommand(_ command: Command, confined: Bool) throws(ProtocolError) -> Operation {
    switch command {
    case .queueList(let stream):
      if let stream {
        guard let queue = queues.queue(stream) else { throw QueueBook.noQueue(stream) }
        return .answer(["stream": .string(stream), "queue": QueueBook.describe(queue)])
      }
      let all = queues.streams.compactMap { id in
        queues.queue(id).map { JSONValue.object(["stream": .string(id), "queue": QueueBook.describe($0)]) }
      }
      return .answer(["queues": .array(all)])
    case .queueAdd(let stream, let paths):
      guard queues.queue(stream) != nil else { throw QueueBook.noQueue(stream) }
      var items: [QueueBook.Item] = []
      for (index, path) in paths.enumerated() {
        items.append(try queueItem(path, field: "paths[\(index)]", confined: confined))
      }
      queues.queue(stream)?.loudness?.meter.measureAhead(items.map(\.path))
      return try install(stream) { queue throws(ProtocolError) in queue.items += items }
    case .queueRemove(let stream, let index):
      return try install(stream) { queue throws(ProtocolError) in
        guard index < queue.items.count else {
          throw ProtocolError(
            .outOfRange, field: "index",
            "index: the queue holds \(queue.items.count) items (0 to \(queue.items.count - 1))")
        }
        guard queue.items[index].id != queue.current else {
          throw ProtocolError(.invalidField, field: "index", "index: item \(index) is playing; skip it with next first")
        }
        queue.items.remove(at: index)
      }
    case .queueClear(let stream):
      // Only the playing item is left, and the stream ends after it: a looping queue stops
      // looping, or it would play that item for ever.
      return try install(stream) { queue throws(ProtocolError) in
        queue.items.removeAll { $0.id != queue.current }
        queue.loop = false
      }
    case .skip(let stream, let forward):
      guard let queue = queues.queue(stream), let current = queue.currentIndex else {
        throw QueueBook.noQueue(stream)
      }
      var index = forward ? current + 1 : current - 1
      if index >= queue.items.count {
        guard queue.loop else {
          throw ProtocolError(.outOfRange, field: "stream", "stream '\(stream)' plays the last item of its queue")
        }
        index = 0
      }
      // Before the first: the first again, from its start (or the last, when the queue loops).
      if index < 0 { index = queue.loop ? queue.items.count - 1 : 0 }
      let target = queue.items[index]
      let item = try openQueueItem(target, in: queue, field: "stream")
      return .queue(.skip(player.prepareSkip(stream, to: item), index: index))
    default:
      throw ProtocolError(.internalError, field: "cmd", "'\(command.name)' is not a queue command")
    }
  }

  /// Changes a queue and installs the item that now follows the playing one.
  private func install(_ stream: String, _ body: (inout QueueBook.Queue) throws(ProtocolError) -> Void)
    throws(ProtocolError) -> Operation
  {
    let queue = try queues.change(stream) { queue throws(ProtocolError) in
      try body(&queue)
      return queue
    }
    var next: QueueItem?
    if let following = queue.following {
      next = try openQueueItem(following, in: queue, field: "stream")
    }
    let reply: JSONValue = ["stream": .string(stream), "queue": QueueBook.describe(queue)]
    return .queue(
      .install(
        QueueInstall(stream: stream, after: queue.current, generation: queue.generation, item: next), reply: reply))
  }
}

extension EventHub {
  /// The render thread's item events: the book follows the playing item and the next one is
  /// opened (off the loop) and installed before the playing one ends.
  func queueEvent(_ event: PlayerEvent) {
    let queues = preparation.queues
    switch event {
    case .itemStarted(let stream, let item, let sample):
      guard let queue = queues.started(stream, item: item) else { return }
      let path = queue.items.first { $0.id == item }?.path ?? ""
      broadcast(.itemStarted(stream: stream, item: item, path: path, sample: sample))
      installNext(stream, after: item)
    case .itemEnded(let stream, let item, let sample, let reason):
      let path = queues.queue(stream)?.items.first { $0.id == item }?.path ?? ""
      queues.itemEnded(stream, item: item)
      broadcast(.itemEnded(stream: stream, item: item, path: path, reason: reason.rawValue, sample: sample))
    default:
      return
    }
  }

  /// Opens the item that follows `after` in `stream`'s queue (off the loop: it waits for the disk,
  /// and may measure the file's loudness) and installs it; an item whose file no longer opens
  /// leaves the queue (logged) and the one after it is tried.
  private func installNext(_ stream: String, after: UInt64) {
    let queues = preparation.queues
    let preparation = preparation
    let logger = logger
    control.offload(.queue) { () -> QueueInstall? in
      while let queue = queues.queue(stream), queue.current == after {
        guard let following = queue.following else {
          return QueueInstall(stream: stream, after: after, generation: queue.generation, item: nil)
        }
        do throws(ProtocolError) {
          let item = try preparation.openQueueItem(following, in: queue, field: "path")
          return QueueInstall(stream: stream, after: after, generation: queue.generation, item: item)
        } catch {
          logger.warning(
            "queue item dropped: it no longer opens", metadata: ["stream": "\(stream)", "error": "\(error.message)"])
          _ = try? queues.change(stream) { queue in queue.items.removeAll { $0.id == following.id } }
        }
      }
      return nil
    } then: { [player] install in
      if let install { player.submit(install) }
    }
  }
}
