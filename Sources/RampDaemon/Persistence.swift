import Foundation
import RampProtocol
import Synchronization

/// What rampd keeps across restarts, held in memory and handed to the saver on every change: the
/// model values of master.gain and the mixer key paths, and the schedules acknowledged with
/// `"ack": "scheduled"` until they have taken effect (a ramp: until it ends).
public final class Persistence: Sendable {
  let saver: StateSaver
  private let state: Mutex<PersistentState>
  private let lastID: Atomic<UInt64>

  init(saver: StateSaver, restored: PersistentState) {
    self.saver = saver
    state = Mutex(restored)
    lastID = Atomic(restored.schedules.map(\.id).max() ?? 0)
  }

  var snapshot: PersistentState { state.withLock { $0 } }

  /// Records model values; a write follows only when one changed.
  func record(values: [String: Double]) {
    let changed = state.withLock { state -> PersistentState? in
      var merged = state.values
      for (key, value) in values { merged[key] = value }
      guard merged != state.values else { return nil }
      state.values = merged
      return state
    }
    if let changed { saver.update(changed) }
  }

  /// Adds a schedule and writes it to disk before returning: nil when it could not be saved (and
  /// it is then forgotten).
  func add(_ request: JSONObject, due: Double, confined: Bool = false) -> UInt64? {
    let id = lastID.add(1, ordering: .relaxed).newValue
    let updated = state.withLock { state in
      state.schedules.append(PersistedSchedule(id: id, request: request, due: due, confined: confined))
      state.schedules.sort { ($0.due, $0.id) < ($1.due, $1.id) }
      return state
    }
    saver.update(updated)
    guard saver.flush() else {
      finish(id)
      return nil
    }
    return id
  }

  /// A ramp under way keeps its entry, with the value it started from, until it ends.
  func started(_ id: UInt64, from: Double) {
    let updated = state.withLock { state -> PersistentState? in
      guard let index = state.schedules.firstIndex(where: { $0.id == id }) else { return nil }
      state.schedules[index].from = from
      return state
    }
    if let updated { saver.update(updated) }
  }

  func finish(_ id: UInt64) {
    let updated = state.withLock { state -> PersistentState? in
      guard let index = state.schedules.firstIndex(where: { $0.id == id }) else { return nil }
      state.schedules.remove(at: index)
      return state
    }
    if let updated { saver.update(updated) }
  }
}
