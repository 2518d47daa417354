import RampAudio
import RampEngine
import RampProtocol

/// The duck commands (`duck-add`, `duck-remove`, `duck-list`, `duck`, `unduck`) as operations on
/// the render thread's `DuckLayer`. A rule's storage (its detector's window) is allocated here.
extension Preparation {
  func prepareDuck(_ command: Command) -> Operation {
    switch command {
    // Duck commands change the duck layer and say so in a reply built on the render thread (as
    // a query's is); the rule's storage was allocated here.
    case .duckAdd(let rule):
      let prepared = player.prepareDuck(rule)
      let name = rule.name
      return .query(
        check: { state in
          state.ducks.contains(name) || state.ducks.count < DuckLayer.capacity
            ? nil
            : ProtocolError(
              .limitExceeded, field: "name", "\(DuckLayer.capacity) duck rules exist, the most allowed")
        },
        read: { state in
          let replaced = state.ducks.contains(name)
          _ = state.ducks.add(prepared, now: state.engine.now)
          return ["rule": .string(name), "replaced": .bool(replaced)]
        })
    case .duckRemove(let name):
      return .query(
        check: { Self.checkDuck(name, in: $0) },
        read: { state in
          _ = state.ducks.remove(name)
          return ["rule": .string(name)]
        })
    case .duck(let name, let on):
      return .query(
        check: { Self.checkDuck(name, in: $0) },
        read: { state in
          _ = state.ducks.setManual(name, on)
          return ["rule": .string(name), "sample": .integer(state.engine.now)]
        })
    default:
      return .query(
        check: nil,
        read: { state in
          ["ducks": .array(state.ducks.snapshots(at: state.engine.now).map(Self.describe))]
        })
    }
  }

  static func checkDuck(_ name: String, in state: RenderState) -> ProtocolError? {
    state.ducks.contains(name) ? nil : ProtocolError(.unknownDuck, field: "name", "no duck rule '\(name)'")
  }

  /// A rule as `duck-list` shows it: its fields, as `duck-add` takes them, and its state.
  static func describe(_ snapshot: DuckSnapshot) -> JSONValue {
    var object = Command.duckRule(snapshot.rule)
    object["phase"] = .string(snapshot.phase)
    object["manual"] = .bool(snapshot.manual)
    object["level"] = .number(snapshot.level)
    return .object(object)
  }
}
