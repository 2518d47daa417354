import RampEngine
import RampProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What rampd keeps across restarts, held in memory and handed to the saver on every change: the
/// model values of master.gain and the mixer key paths, and the schedules acknowledged with
/// `"ack": "scheduled"` until they have taken effect (a ramp: until it ends).
///
/// A changed model value is also written to the levels journal (`StateStore.journal`) before the
/// change is acknowledged (`writeJournal`, which the server calls before it sends replies), so no
/// acknowledged level is lost when rampd is killed; the state file follows within the saver's
/// interval.
public final class Persistence: Sendable {
  let saver: StateSaver
  private let state: Mutex<Recorded>
  private let lastID: Atomic<UInt64>

  private struct Recorded {
    var state: PersistentState
    /// Changes acknowledged before the render thread applied them, by key path: until they have
    /// been, a model value read after an earlier command is older than the acknowledged one.
    var early: [String: Int] = [:]
    /// The values changed since the journal was last written.
    var journalDue = false
  }

  init(saver: StateSaver, restored: PersistentState) {
    self.saver = saver
    state = Mutex(Recorded(state: restored))
    lastID = Atomic(restored.schedules.map(\.id).max() ?? 0)
  }

  var snapshot: PersistentState { state.withLock { $0.state } }

  /// Records model values read after a command was applied; a write follows only when one
  /// changed. `settling`: the key path of the change this command acknowledged early.
  func record(values: [String: Double], settling: String? = nil) {
    state.withLock { recorded in
      if let settling, let count = recorded.early[settling] {
        recorded.early[settling] = count > 1 ? count - 1 : nil
      }
      guard !values.isEmpty else { return }
      var merged = recorded.state.values
      for (key, value) in values where recorded.early[key] == nil { merged[key] = value }
      change(&recorded, to: merged)
    }
  }

  /// Records a change acknowledged before it is applied (an instant `set` of master.gain).
  func acknowledgeEarly(_ key: String, value: Double) {
    state.withLock { recorded in
      recorded.early[key, default: 0] += 1
      guard recorded.state.values[key] != value else { return }
      // In place: no merged copy to build and compare, as `change` does for a set of values.
      recorded.state.values[key] = value
      changed(&recorded)
    }
  }

  private func change(_ recorded: inout Recorded, to values: [String: Double]) {
    guard values != recorded.state.values else { return }
    recorded.state.values = values
    changed(&recorded)
  }

  /// Counts a change of `recorded.state.values`, due in the journal and handed to the saver.
  private func changed(_ recorded: inout Recorded) {
    recorded.state.sequence += 1
    recorded.journalDue = true
    saver.update(recorded.state)
  }

  /// Writes the latest values to the levels journal when they changed since it was last written.
  /// Called before replies are sent, so every change they acknowledge is there, and the changes
  /// acknowledged together cost one write. In the lock, so the journal's writes come in the order
  /// of the changes.
  func writeJournal() {
    state.withLock { recorded in
      guard recorded.journalDue else { return }
      recorded.journalDue = false
      saver.store.journal(values: recorded.state.values, sequence: recorded.state.sequence)
    }
  }

  /// Adds a schedule and writes it to disk before returning: nil when it could not be saved (and
  /// it is then forgotten).
  func add(_ request: JSONObject, due: Double, confined: Bool = false) -> UInt64? {
    let id = lastID.add(1, ordering: .relaxed).newValue
    // Handed to the saver in the lock: a snapshot taken before this one, handed over after it,
    // would have the flush below write a state without the schedule.
    state.withLock { recorded in
      recorded.state.schedules.append(PersistedSchedule(id: id, request: request, due: due, confined: confined))
      recorded.state.schedules.sort { ($0.due, $0.id) < ($1.due, $1.id) }
      saver.update(recorded.state)
    }
    guard saver.flush() else {
      finish(id)
      return nil
    }
    return id
  }

  /// A ramp under way keeps its entry, with the value it started from, until it ends.
  func started(_ id: UInt64, from: Double) {
    state.withLock { recorded in
      guard let index = recorded.state.schedules.firstIndex(where: { $0.id == id }) else { return }
      recorded.state.schedules[index].from = from
      saver.update(recorded.state)
    }
  }

  /// A repeating schedule's next time: the same id, not started, due at `due`. False when it is
  /// no longer kept (unscheduled meanwhile).
  @discardableResult
  func reschedule(_ id: UInt64, due: Double) -> Bool {
    state.withLock { recorded in
      guard let index = recorded.state.schedules.firstIndex(where: { $0.id == id }) else { return false }
      recorded.state.schedules[index].due = due
      recorded.state.schedules[index].from = nil
      recorded.state.schedules.sort { ($0.due, $0.id) < ($1.due, $1.id) }
      saver.update(recorded.state)
      return true
    }
  }

  /// Records that schedule `id` was refused when its time came (nothing when it is no longer kept).
  func failed(_ id: UInt64, _ failure: PersistedSchedule.Failure) {
    state.withLock { recorded in
      guard let index = recorded.state.schedules.firstIndex(where: { $0.id == id }) else { return }
      recorded.state.schedules[index].lastFailure = failure
      saver.update(recorded.state)
    }
  }

  /// Whether schedule `id` is kept (not finished, nor taken back).
  func isKept(_ id: UInt64) -> Bool {
    state.withLock { recorded in recorded.state.schedules.contains { $0.id == id } }
  }

  /// Forgets schedule `id`; the entry it removed (nil: it was not kept).
  @discardableResult
  func finish(_ id: UInt64) -> PersistedSchedule? {
    state.withLock { recorded in
      guard let index = recorded.state.schedules.firstIndex(where: { $0.id == id }) else { return nil }
      let removed = recorded.state.schedules.remove(at: index)
      saver.update(recorded.state)
      return removed
    }
  }

  // MARK: Duck rules

  /// What a change of the saved duck rules did, command by command: the rule each name had
  /// before and after, so what the render thread refuses can be put back.
  struct DuckUndo: Sendable {
    fileprivate struct Step: Sendable {
      /// The command's place among those recorded.
      let command: Int
      let name: String
      let before: DuckRule?
      let after: DuckRule?
    }
    fileprivate let steps: [Step]
  }

  /// Records the duck rules `commands` (a `duck-add` or `duck-remove`, alone or in a batch) add
  /// and remove, and writes them to disk before returning, so a reply that follows is for a rule
  /// that survives a kill. Nil when they could not be saved: nothing is then recorded (the saver
  /// logged why), and the commands are refused.
  func record(ducks commands: [Command]) -> DuckUndo? {
    let undo = state.withLock { recorded -> DuckUndo? in
      var ducks = recorded.state.ducks
      var steps: [DuckUndo.Step] = []
      for (position, command) in commands.enumerated() {
        let name: String
        let rule: DuckRule?
        switch command {
        case .duckAdd(let added): (name, rule) = (added.name, added)
        case .duckRemove(let removed): (name, rule) = (removed, nil)
        default: continue
        }
        let before = Self.replace(name, with: rule, in: &ducks)
        steps.append(DuckUndo.Step(command: position, name: name, before: before, after: rule))
      }
      guard ducks != recorded.state.ducks else { return nil }
      recorded.state.ducks = ducks
      saver.update(recorded.state)
      return DuckUndo(steps: steps)
    }
    guard let undo else { return DuckUndo(steps: []) }
    guard saver.flush() else {
      state.withLock { recorded in
        Self.putBack(undo, from: 0, in: &recorded.state)
        saver.update(recorded.state)
      }
      return nil
    }
    return undo
  }

  /// Puts back the saved duck rules the commands from the `from`-th on replaced (refused, they
  /// did not apply), and writes them to disk.
  func undo(_ undo: DuckUndo, from: Int) {
    let changed = state.withLock { recorded in
      let before = recorded.state.ducks
      Self.putBack(undo, from: from, in: &recorded.state)
      guard recorded.state.ducks != before else { return false }
      saver.update(recorded.state)
      return true
    }
    if changed { saver.flush() }
  }

  /// The rules the steps from command `from` on replaced, as they were, last step first; a name
  /// changed since by another command (its saved rule no longer the one a step wrote) stays.
  private static func putBack(_ undo: DuckUndo, from: Int, in state: inout PersistentState) {
    for step in undo.steps.reversed() where step.command >= from {
      guard state.ducks.first(where: { $0.name == step.name }) == step.after else { continue }
      replace(step.name, with: step.before, in: &state.ducks)
    }
  }

  /// Puts `rule` under `name` (nil: none), in place or at the end; returns the rule it replaced.
  @discardableResult
  private static func replace(_ name: String, with rule: DuckRule?, in ducks: inout [DuckRule]) -> DuckRule? {
    guard let index = ducks.firstIndex(where: { $0.name == name }) else {
      if let rule { ducks.append(rule) }
      return nil
    }
    let before = ducks[index]
    if let rule { ducks[index] = rule } else { ducks.remove(at: index) }
    return before
  }

  /// The saved duck rules to add after the configuration's: those named like a configured rule
  /// are forgotten (the configuration wins), as are those beyond `capacity` rules in all.
  func restoreDucks(configured: [DuckRule], capacity: Int) -> (kept: [DuckRule], shadowed: [DuckRule], over: [DuckRule])
  {
    state.withLock { recorded in
      let names = Set(configured.map(\.name))
      let shadowed = recorded.state.ducks.filter { names.contains($0.name) }
      let rest = recorded.state.ducks.filter { !names.contains($0.name) }
      let room = max(capacity - names.count, 0)
      let kept = Array(rest.prefix(room))
      let over = Array(rest.dropFirst(room))
      if kept.count != recorded.state.ducks.count {
        recorded.state.ducks = kept
        saver.update(recorded.state)
      }
      return (kept, shadowed, over)
    }
  }
}

extension Command {
  /// `duck-add` and `duck-remove`: what `Persistence.record(ducks:)` keeps.
  var changesDuckRules: Bool {
    switch self {
    case .duckAdd, .duckRemove: true
    default: false
    }
  }
}
