import Dispatch
import Foundation
import Synchronization

/// Saved schedules kept on the wall clock until shortly before they are due.
///
/// A sample number fixed hours ahead would be wrong by the time it comes: a card's clock drifts
/// (±50–100 ppm, seconds a day) and an outage of the device shifts the sample count. So a
/// schedule due later than `lead` waits here, by its Unix time, and is handed to the render
/// thread (converted to a sample by `Controller.targetSample`) only `lead` seconds before it is
/// due. The timer sleeps at most `longestSleep` at a time and reads the wall clock each time it
/// wakes, so a change of the system clock is followed within that.
final class WallClockSchedules: @unchecked Sendable {
  /// How long before its time a schedule is handed to the render thread.
  static let lead = 1.0
  /// The longest the timer sleeps before it reads the wall clock again.
  static let longestSleep = 60.0

  private struct Entry: Sendable {
    let due: Double
    let fire: @Sendable () -> Void
  }

  private let entries = Mutex<[UInt64: Entry]>([:])
  private let queue = DispatchQueue(label: "rampd.wall-clock-schedules")
  /// Touched only on `queue`.
  private var timer: DispatchSourceTimer?
  private let now: @Sendable () -> Double

  init(now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
    self.now = now
  }

  /// Whether a schedule due at `due` waits here rather than going to the render thread now.
  func holds(due: Double) -> Bool { due - now() > Self.lead }

  /// Calls `fire` `lead` seconds before `due` (Unix seconds), on a queue of its own (at once,
  /// there, when that is already past).
  func add(_ id: UInt64, due: Double, fire: @escaping @Sendable () -> Void) {
    entries.withLock { $0[id] = Entry(due: due, fire: fire) }
    queue.async { [self] in rearm() }
  }

  /// Forgets schedule `id`; false when it was not waiting here (already handed on, or unknown).
  func remove(_ id: UInt64) -> Bool {
    entries.withLock { $0.removeValue(forKey: id) != nil }
  }

  var count: Int { entries.withLock { $0.count } }

  /// On `queue`: hands on what is due within `lead`, then sleeps until the next one is.
  private func rearm() {
    let time = now()
    let ready = entries.withLock { table in
      let due = table.filter { $0.value.due - time <= Self.lead }.sorted {
        ($0.value.due, $0.key) < ($1.value.due, $1.key)
      }
      for (id, _) in due { table[id] = nil }
      return due.map(\.value)
    }
    for entry in ready { entry.fire() }
    timer?.cancel()
    timer = nil
    guard let soonest = entries.withLock({ $0.values.map(\.due).min() }) else { return }
    let wait = min(max(soonest - Self.lead - now(), 0.001), Self.longestSleep)
    let next = DispatchSource.makeTimerSource(queue: queue)
    next.schedule(deadline: .now() + wait, leeway: .milliseconds(5))
    next.setEventHandler { [weak self] in self?.rearm() }
    next.resume()
    timer = next
  }
}
