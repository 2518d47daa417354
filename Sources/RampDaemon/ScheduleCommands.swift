import Foundation
import Logging
import RampProtocol

/// `schedules`, `unschedule`, and the rule by which a schedule with `yield` gives way.
extension Controller {
  /// The saved schedules, soonest first, as `status` and `schedules` list them; `due` is the next
  /// time each takes effect.
  func scheduleList(withRequests: Bool) -> [JSONValue] {
    (persistence?.snapshot.schedules ?? []).map { entry in
      var object: JSONObject = [
        "schedule": .integer(entry.id), "due": .string(RFC3339.format(entry.due)),
        "cmd": entry.request["cmd"] ?? .null, "started": .bool(entry.from != nil),
      ]
      for key in ["repeat", "tag", "yield"] { object[key] = entry.request[key] }
      if withRequests { object["request"] = .object(entry.request) }
      return .object(object)
    }
  }

  /// Removes the schedule `schedule`, or every one tagged `tag`, wherever it is: waiting on the
  /// wall clock, or already handed to the render thread for its sample (it then never applies).
  /// A ramp under way is forgotten (it is no longer resumed after a restart); one of a schedule
  /// that yields to a key path is held where it is, any other runs to its end.
  func unschedule(schedule: UInt64?, tag: String?) -> Result<JSONValue, ProtocolError> {
    guard let persistence else {
      return .failure(ProtocolError(.internalError, field: "schedule", "schedules cannot be saved"))
    }
    let entries = persistence.snapshot.schedules.filter { entry in
      schedule.map { entry.id == $0 } ?? (entry.request["tag"]?.stringValue == tag)
    }
    if let schedule, entries.isEmpty {
      return .failure(
        ProtocolError(.invalidField, field: "schedule", "schedule: no schedule \(schedule) is kept (see schedules)"))
    }
    let removed: [JSONValue] = entries.map { entry in
      [
        "schedule": .integer(entry.id), "cmd": entry.request["cmd"] ?? .null, "started": .bool(withdraw(entry)),
        "request": .object(entry.request),
      ]
    }
    return .success(["unscheduled": .array(removed)])
  }

  /// A request that changes a key path makes every schedule that yields to it give way: removed
  /// before it takes effect (even if already handed on for its sample); a ramp of one under way is
  /// held where it is (`cancel`), so the newer command takes over from the audible value.
  func giveWay(to command: Command) {
    // Most requests find no schedule at all: the keys are worked out only when one is kept.
    guard let schedules = persistence?.snapshot.schedules, !schedules.isEmpty,
      let keys = command.changedKeys, !keys.isEmpty
    else { return }
    for entry in schedules {
      guard let key = entry.request["yield"]?.stringValue, keys.contains(key) else { continue }
      _ = withdraw(entry)
      logger.info("a schedule gave way to a newer command", metadata: ["schedule": "\(entry.id)", "key": "\(key)"])
    }
  }

  /// Takes schedule `entry` back wherever it is; true when it had applied already. A ramp of one
  /// that yields to a key path is then held where it is, before anything sent after this applies.
  private func withdraw(_ entry: PersistedSchedule) -> Bool {
    guard let persistence else { return false }
    defer { persistence.finish(entry.id) }
    if wallClock.remove(entry.id) { return false }
    let started: Bool
    switch handed.withdraw(entry.id) {
    case .beforeApplying: started = false
    case .afterApplying: started = true
    case nil:
      // Applied and back: a ramp keeps its entry, with where it started, while it is under way.
      started = entry.from != nil || persistence.snapshot.schedules.first { $0.id == entry.id }?.from != nil
    }
    if started, entry.request["cmd"] == "fade", let key = entry.request["yield"]?.stringValue { hold(key) }
    return started
  }
}

extension Command {
  /// The key paths applying it changes (a transport fade-out counts for its key); nil for none.
  var changedKeys: Set<String>? {
    switch self {
    case .fade(let fade): return [fade.key]
    case .set(let set): return [set.key]
    case .animate(let animate): return [animate.key]
    case .cancel(let key), .remove(let key, _): return [key]
    case .batch(let requests):
      let keys = requests.reduce(into: Set<String>()) { $0.formUnion($1.command.changedKeys ?? []) }
      return keys.isEmpty ? nil : keys
    default: return nil
    }
  }
}
