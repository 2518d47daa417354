import Logging
import RampEngine
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// Saves the daemon's state in the background, coalescing changes.
///
/// `update` is cheap and never waits for the disk: it replaces any state not yet written and
/// wakes the saver's own thread. That thread writes the first change promptly, then at most once
/// per `interval` (measured from the end of the previous write), always the latest state: a
/// 30-minute fade that changes the model value every block costs one write per interval, not one
/// per block. `flush` writes whatever is pending on the caller's thread and says whether the state
/// is on disk: before acknowledging a scheduled command, and at shutdown.
///
/// A failed write is logged once per distinct error (a full disk logs once, not every 50 ms), and
/// once when saving works again. It is retried on the next change, or by `flush`, never in a loop.
public final class StateSaver: Sendable {
  /// How saving has gone so far.
  public struct Statistics: Sendable, Equatable {
    /// Successful writes.
    public var writes = 0
    /// Failed writes.
    public var failures = 0
    /// The latest failure; nil once a write succeeds again.
    public var lastError: StateStoreError?
  }

  public let store: StateStore
  /// The least time between the end of a write and the start of the next one, in seconds.
  public let interval: Double
  private let core: SaverCore

  /// Starts the saver's thread (`rampd-state`). Call `close` to stop it; dropping the saver also
  /// closes it.
  public init(store: StateStore, interval: Double = 0.05, logger: Logger) {
    self.store = store
    self.interval = interval
    core = SaverCore(store: store, interval: interval, logger: logger)
    let core = core
    startThread(named: "rampd-state") { core.run() }
  }

  deinit { _ = core.close() }

  /// Makes `state` the one to save. From any thread; never blocks on the disk.
  public func update(_ state: PersistentState) {
    core.update(state)
  }

  /// Writes any state not yet written (or whose write failed), on this thread, after a write in
  /// progress. True when the latest state is on disk.
  @discardableResult public func flush() -> Bool {
    core.flush()
  }

  /// Stops the thread and flushes; true when the latest state is on disk. Idempotent. Later
  /// updates are kept until `flush`.
  @discardableResult public func close() -> Bool {
    core.close()
  }

  public var statistics: Statistics { core.snapshot }
}

/// The saver's shared state. Every stored `var` is guarded by `condition`; the disk is written
/// with it unlocked, by one writer at a time (`writing`).
private final class SaverCore: @unchecked Sendable {
  let store: StateStore
  let interval: Double
  let logger: Logger
  let condition = Condition()

  /// The latest state, not yet being written.
  var pending: PersistentState?
  /// A state whose write failed and that no later one replaced: `flush` retries it.
  var failed: PersistentState?
  /// A write is under way (by the thread or a `flush`), with `condition` unlocked.
  var writing = false
  /// Monotonic time the last write ended.
  var lastWriteEnd = -Double.infinity
  var stopping = false
  var running = true
  /// The thread waits for a change (not for the interval to pass): only then does a change need
  /// to wake it. A busy client's every `set` would otherwise cost a thread wake-up.
  var idle = false
  var statistics = StateSaver.Statistics()
  /// The error last logged, so that a repeated one is not logged again.
  var loggedError: String?

  init(store: StateStore, interval: Double, logger: Logger) {
    self.store = store
    self.interval = interval
    self.logger = logger
  }

  func update(_ state: PersistentState) {
    condition.lock()
    pending = state
    if idle { condition.broadcast() }
    condition.unlock()
  }

  func run() {
    condition.lock()
    while !stopping {
      if pending == nil || writing {
        idle = true
        condition.wait()
        idle = false
        continue
      }
      let wait = lastWriteEnd + interval - monotonicNow()
      if wait > 0 {
        condition.wait(seconds: wait)
        continue
      }
      _ = writePending()
    }
    running = false
    condition.broadcast()
    condition.unlock()
  }

  func flush() -> Bool {
    condition.lock()
    defer { condition.unlock() }
    while writing { condition.wait() }
    return writePending()
  }

  func close() -> Bool {
    condition.lock()
    stopping = true
    condition.broadcast()
    while running { condition.wait() }
    condition.unlock()
    return flush()
  }

  var snapshot: StateSaver.Statistics {
    condition.lock()
    defer { condition.unlock() }
    return statistics
  }

  /// Writes `pending` (else `failed`), with `condition` unlocked during the write; called and
  /// returns with it locked, and with no other write under way. True when nothing is left unsaved.
  private func writePending() -> Bool {
    guard let state = pending ?? failed else { return true }
    pending = nil
    failed = nil
    writing = true
    condition.unlock()
    var outcome: StateStoreError?
    do {
      try store.save(state)
    } catch {
      outcome = error
    }
    condition.lock()
    writing = false
    lastWriteEnd = monotonicNow()
    var message: (level: Logger.Level, text: String)?
    if let outcome {
      statistics.failures += 1
      statistics.lastError = outcome
      if pending == nil { failed = state }
      if loggedError != outcome.description {
        loggedError = outcome.description
        message = (.warning, "\(outcome.description); will try again on the next change")
      }
    } else {
      statistics.writes += 1
      statistics.lastError = nil
      if loggedError != nil {
        loggedError = nil
        message = (.notice, "saved state to \(store.path) again")
      }
    }
    condition.broadcast()
    if let message {
      condition.unlock()
      logger.log(level: message.level, "\(message.text)")
      condition.lock()
    }
    return outcome == nil
  }
}

private func monotonicNow() -> Double {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// A lock and its condition variable (what `NSCondition` gave, from pthreads): a timed wait
/// counts on the monotonic clock, which a change of the wall clock does not move.
private final class Condition: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let variable = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

  init() {
    pthread_mutex_init(mutex, nil)
    var attributes = pthread_condattr_t()
    pthread_condattr_init(&attributes)
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
    pthread_cond_init(variable, &attributes)
    pthread_condattr_destroy(&attributes)
  }

  deinit {
    pthread_cond_destroy(variable)
    pthread_mutex_destroy(mutex)
    variable.deallocate()
    mutex.deallocate()
  }

  func lock() { pthread_mutex_lock(mutex) }
  func unlock() { pthread_mutex_unlock(mutex) }
  func broadcast() { pthread_cond_broadcast(variable) }
  /// Unlocks, sleeps until a broadcast (or a spurious wake-up), locks again.
  func wait() { pthread_cond_wait(variable, mutex) }

  /// As `wait`, for at most `seconds`.
  func wait(seconds: Double) {
    var deadline = timespec()
    clock_gettime(CLOCK_MONOTONIC, &deadline)
    let nanoseconds = Int(deadline.tv_nsec) + Int((min(seconds, 3.0e9) * 1e9).rounded(.up))
    deadline.tv_sec += nanoseconds / 1_000_000_000
    deadline.tv_nsec = nanoseconds % 1_000_000_000
    _ = pthread_cond_timedwait(variable, mutex, &deadline)
  }
}
