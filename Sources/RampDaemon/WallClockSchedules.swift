import FoundationEssentials
import NIOCore

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Saved schedules kept on the wall clock until shortly before they are due.
///
/// A sample number fixed hours ahead would be wrong by the time it comes: a card's clock drifts
/// (±50–100 ppm, seconds a day) and an outage of the device shifts the sample count. So a
/// schedule due later than `lead` waits here, by its Unix time, and is handed to the render
/// thread (converted to a sample by `Controller.targetSample`) only `lead` seconds before it is
/// due. The timer sleeps at most `longestSleep` at a time and reads the wall clock each time it
/// wakes, so a change of the system clock is followed within that.
///
/// Its table and timer are the control loop's: a schedule fires there.
final class WallClockSchedules: Sendable {
  /// How long before its time a schedule is handed to the render thread.
  static let lead = 1.0
  /// The longest the timer sleeps before it reads the wall clock again.
  static let longestSleep = 60.0

  private struct Entry {
    let due: Double
    let fire: @Sendable () -> Void
  }

  private struct Table {
    var entries: [UInt64: Entry] = [:]
    var timer: Scheduled<Void>?
  }

  private let control: ControlLoop
  private let table: NIOLoopBoundBox<Table>
  private let now: @Sendable () -> Double

  init(control: ControlLoop, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
    self.control = control
    self.now = now
    table = .makeBoxSendingValue(Table(), eventLoop: control.eventLoop)
  }

  /// Whether a schedule due at `due` waits here rather than going to the render thread now.
  func holds(due: Double) -> Bool { due - now() > Self.lead }

  /// Calls `fire` on the loop `lead` seconds before `due` (Unix seconds); at the loop's next turn
  /// when that is already past.
  func add(_ id: UInt64, due: Double, fire: @escaping @Sendable () -> Void) {
    table.value.entries[id] = Entry(due: due, fire: fire)
    control.eventLoop.execute { [self] in rearm() }
  }

  /// Forgets schedule `id`; false when it was not waiting here (already handed on, or unknown).
  func remove(_ id: UInt64) -> Bool {
    table.value.entries.removeValue(forKey: id) != nil
  }

  var count: Int { table.value.entries.count }

  /// Hands on what is due within `lead`, then sleeps until the next one is.
  private func rearm() {
    let time = now()
    let ready = table.withValue { table in
      let due = table.entries.filter { $0.value.due - time <= Self.lead }.sorted {
        ($0.value.due, $0.key) < ($1.value.due, $1.key)
      }
      for (id, _) in due { table.entries[id] = nil }
      return due.map(\.value.fire)
    }
    for fire in ready { fire() }
    table.value.timer?.cancel()
    table.value.timer = nil
    guard let soonest = table.value.entries.values.map(\.due).min() else { return }
    let wait = min(max(soonest - Self.lead - now(), 0.001), Self.longestSleep)
    table.value.timer = control.after(wait) { [self] in rearm() }
  }
}
