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

  /// Removes the schedule `schedule`, or every one tagged `tag`. One already handed to the render
  /// thread (due within `WallClockSchedules.lead`) can no longer be taken back; a ramp under way
  /// is forgotten (it is no longer resumed after a restart) but runs to its end.
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
    var removed: [JSONValue] = []
    var queued: [JSONValue] = []
    for entry in entries {
      let summary: JSONValue = [
        "schedule": .integer(entry.id), "cmd": entry.request["cmd"] ?? .null, "started": .bool(entry.from != nil),
        "request": .object(entry.request),
      ]
      if wallClock.remove(entry.id) || entry.from != nil {
        persistence.finish(entry.id)
        removed.append(summary)
      } else {
        queued.append(.integer(entry.id))
      }
    }
    if let schedule, removed.isEmpty {
      return .failure(
        ProtocolError(
          .invalidField, field: "schedule",
          "schedule: \(schedule) takes effect within \(JSONValue.format(WallClockSchedules.lead)) s and is already "
            + "queued for its sample; it can no longer be removed"))
    }
    return .success(["unscheduled": .array(removed), "queued": .array(queued)])
  }

  /// A request that changes a key path makes every schedule that yields to it give way: removed
  /// before it takes effect; a ramp of one under way is held where it is (`cancel`), so the newer
  /// command takes over from the audible value.
  func giveWay(to command: Command) {
    // Most requests find no schedule at all: the keys are worked out only when one is kept.
    guard let schedules = persistence?.snapshot.schedules, !schedules.isEmpty, let persistence,
      let keys = command.changedKeys, !keys.isEmpty
    else { return }
    for entry in schedules {
      guard let key = entry.request["yield"]?.stringValue, keys.contains(key) else { continue }
      if wallClock.remove(entry.id) || entry.from != nil {
        persistence.finish(entry.id)
        if entry.from != nil { hold(key) }
        logger.info(
          "a schedule gave way to a newer command", metadata: ["schedule": "\(entry.id)", "key": "\(key)"])
      }
    }
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
