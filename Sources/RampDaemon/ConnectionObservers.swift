import NIOCore
import RampAudio
import RampProtocol

/// One connection's observed key paths: a timer each on the connection's event loop, sending the
/// published value as a `value` event when it changed. The controller checks and starts them
/// (`Controller.observe`); they end with `unobserve` or with the connection.
///
/// Event-loop only: every method checks it is called there.
public final class ConnectionObservers {
  private final class Observer {
    let published: PublishedValue
    /// Hz, taken from the daemon's observe budget until the observation stops.
    let rate: Double
    var task: RepeatedTask?
    var last: Double?
    init(published: PublishedValue, rate: Double) {
      self.published = published
      self.rate = rate
    }
  }

  private let loop: EventLoop
  private let budget: ObserveBudget
  private let player: Player
  private let send: (String) -> Void
  private var table: [String: Observer] = [:]

  init(loop: EventLoop, budget: ObserveBudget, player: Player, send: @escaping (String) -> Void) {
    self.loop = loop
    self.budget = budget
    self.player = player
    self.send = send
  }

  var isEmpty: Bool {
    loop.preconditionInEventLoop()
    return table.isEmpty
  }

  var count: Int {
    loop.preconditionInEventLoop()
    return table.count
  }

  /// The key paths observed, sorted.
  var keys: [String] {
    loop.preconditionInEventLoop()
    return table.keys.sorted()
  }

  /// The rate `key` is observed at; nil: it is not.
  func rate(of key: String) -> Double? {
    loop.preconditionInEventLoop()
    return table[key]?.rate
  }

  /// Observes `key` (published, its rate taken from the budget already), replacing an earlier
  /// observation of it.
  func start(_ key: String, published: PublishedValue, rate: Double) {
    loop.preconditionInEventLoop()
    if let old = table.removeValue(forKey: key) { stop(old) }
    let observer = Observer(published: published, rate: rate)
    let interval = TimeAmount.nanoseconds(Int64(1e9 / rate))
    let loopBound = NIOLoopBound((self, observer), eventLoop: loop)
    observer.task = loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
      let (observers, observer) = loopBound.value
      observers.report(observer)
    }
    table[key] = observer
  }

  /// Stops observing `key`; false when it was not observed.
  func stop(_ key: String) -> Bool {
    loop.preconditionInEventLoop()
    guard let observer = table.removeValue(forKey: key) else { return false }
    stop(observer)
    return true
  }

  /// Stops every observation.
  func stopAll() {
    loop.preconditionInEventLoop()
    for observer in table.values { stop(observer) }
    table = [:]
  }

  private func stop(_ observer: Observer) {
    budget.release(observer.rate)
    observer.task?.cancel()
    player.unpublish(observer.published)
  }

  /// Sends the observed value when it changed since the last report (and the first time).
  private func report(_ observer: Observer) {
    let (value, sample) = observer.published.latest
    guard sample >= 0, !value.isNaN, value != observer.last else { return }
    observer.last = value
    send(Event.value(key: observer.published.keyPath, value: value, sample: sample).json.serializedLine())
  }
}
