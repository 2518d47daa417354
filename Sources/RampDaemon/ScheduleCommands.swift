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
        "schedule": .integer(entry.id), "cmd": entry.request["cmd"] ?? .null,
        "started": .bool(withdraw(entry) ?? false),
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
      guard withdraw(entry) != nil else { continue }
      logger.info("a schedule gave way to a newer command", metadata: ["schedule": "\(entry.id)", "key": "\(key)"])
    }
  }

  /// Takes schedule `entry` back wherever it is: whether it had applied already, or nil when it
  /// was no longer kept (withdrawn by another, or over). A ramp of one that yields to a key path
  /// is held where it is (on its own key path), before anything sent after this applies. Only
  /// the one withdrawal that removes the entry acts on it.
  private func withdraw(_ entry: PersistedSchedule) -> Bool? {
    guard let persistence else { return nil }
    return withdrawals.withLock { _ -> Bool? in
      let withdrawal: HandedSchedules.Withdrawal?
      if wallClock.remove(entry.id) {
        handed.settled(entry.id)
        withdrawal = .beforeApplying
      } else {
        withdrawal = handed.withdraw(entry.id)
      }
      guard let removed = persistence.finish(entry.id) else { return nil }
      let rampKey: String?
      switch withdrawal {
      case .beforeApplying: return false
      case .afterApplying(let key): rampKey = key
      case nil:
        // Applied and back: a ramp keeps its entry, with where it started, while it is under way.
        guard removed.from != nil else { return false }
        rampKey = (try? Self.request(of: removed).get())?.command.rampKey
      }
      if removed.request["yield"] != nil, let rampKey { hold(rampKey) }
      return true
    }
  }

  /// The request a saved schedule keeps, parsed as it was received. Its `at` is not kept (the
  /// entry's `due` says when), but a `tag` or `yield` is only taken with one: one is given back
  /// (any: what counts is `due`), unless it repeats.
  static func request(of entry: PersistedSchedule) -> Result<Request, ProtocolError> {
    var object = entry.request
    if object["repeat"] == nil { object["at"] = .integer(0) }
    let (_, parsed) = Request.parse(utf8: Array(JSONValue.object(object).serialized().utf8))
    return parsed.map { request in
      var request = request
      request.at = nil
      return request
    }
  }
}

extension Command {
  /// The key path a saved schedule's ramp moves: a fade's (fade-in and fade-out too) that does
  /// nothing after it; nil for anything else.
  var rampKey: String? {
    guard case .fade(let fade) = self, fade.then == nil else { return nil }
    return fade.key
  }

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
