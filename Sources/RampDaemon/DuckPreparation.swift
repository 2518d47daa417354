import RampAudio
import RampEngine
import RampProtocol

/// The duck commands (`duck-add`, `duck-remove`, `duck-list`, `duck`, `unduck`) as queries on
/// the render thread's `DuckLayer` (Readout.swift). A rule's storage (its detector's window) is
/// allocated here.
extension Preparation {
  func prepareDuck(_ command: Command) -> Operation {
    switch command {
    case .duckAdd(let rule): return .query(Query(.duckAdd(player.prepareDuck(rule)), player: player))
    case .duckRemove(let name): return .query(Query(.duckRemove(name: name), player: player))
    case .duck(let name, let on): return .query(Query(.duck(name: name, on: on), player: player))
    default: return .query(Query(.duckList, player: player))
    }
  }

  /// A rule as `duck-list` and `status` show it: its fields, as `duck-add` takes them, and its
  /// state.
  static func describe(_ snapshot: DuckSnapshot) -> JSONValue {
    var object = Command.duckRule(snapshot.rule)
    object["phase"] = .string(snapshot.phase)
    object["manual"] = .bool(snapshot.manual)
    object["level"] = .number(snapshot.level)
    return .object(object)
  }
}
