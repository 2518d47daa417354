import RampEngine

// What the daemon sets up on the render thread at start, on reload and for its observers, as
// commands prepared off it like any other: their storage is built before they are queued, and
// whatever a commit lets go of is handed to the recovery thread (`RenderState.retire`) or stays
// in the command, which is let go of there too.

/// Installs the transaction `set` uses when it is given none.
public final class PreparedDefaultTransaction: RenderCommand {
  private let transaction: Transaction

  /// The transaction's completion is dropped: the one replaced then never holds a closure either,
  /// so replacing it frees nothing.
  public init(_ transaction: Transaction) {
    var transaction = transaction
    transaction.completion = nil
    self.transaction = transaction
  }

  public func commit(_ state: RenderState) { state.engine.defaultTransaction = transaction }
}

/// Adds a duck rule (`Player.prepareDuck`); a rule of the same name is replaced, and handed to
/// the recovery thread to be freed. When `DuckLayer.capacity` rules exist it is not added.
public final class PreparedDuckRule: RenderCommand {
  private let rule: DuckState

  init(_ rule: DuckState) { self.rule = rule }

  public func commit(_ state: RenderState) {
    if case .replaced(let old) = state.ducks.add(rule, now: state.engine.now) { state.retire(old) }
  }
}

/// Defines a property prepared off the render thread, unless its key path is defined already.
public final class PreparedDefinition: RenderCommand {
  private let property: PropertyHandle

  init(_ property: PropertyHandle) { self.property = property }

  public func commit(_ state: RenderState) {
    guard state.engine.handleIfDefined(property.keyPath) == nil else { return }
    state.engine.define(property)
  }
}

/// Model values set at once, each clamped to its property's range; a key path not defined is
/// passed over.
public final class PreparedLevels: RenderCommand {
  private let levels: ContiguousArray<Level>

  struct Level: Sendable {
    let keyPath: String
    let value: Double
  }

  init(_ levels: [(keyPath: String, value: Double)]) {
    self.levels = ContiguousArray(levels.map { Level(keyPath: $0.keyPath, value: $0.value) })
  }

  public func commit(_ state: RenderState) {
    let engine = state.engine
    var index = 0
    while index < levels.count {
      let level = levels[index]
      index += 1
      guard let handle = engine.handleIfDefined(level.keyPath) else { continue }
      let range = engine.range(handle)
      _ = try? engine.set(handle, to: min(max(level.value, range.lowerBound), range.upperBound), action: nil)
    }
  }
}

/// Removes the animation under `key` from `keyPath`, with no ramp over the jump.
public final class PreparedRemoval: RenderCommand {
  private let key: String
  private let keyPath: String

  public init(key: String, from keyPath: String) {
    self.key = key
    self.keyPath = keyPath
  }

  public func commit(_ state: RenderState) {
    _ = try? state.engine.removeAnimation(forKey: key, from: keyPath, declick: nil)
  }
}

/// Starts or stops publishing a value at every block (`Player.publish`, `Player.unpublish`). The
/// player refuses to publish more than `Player.publishedCapacity` values, for which room is
/// reserved, so adding one never grows the list; one removed is held by the command, so the
/// render thread never frees it.
final class PreparedPublication: RenderCommand {
  let value: PublishedValue
  let adds: Bool

  init(_ value: PublishedValue, adds: Bool) {
    self.value = value
    self.adds = adds
  }

  func commit(_ state: RenderState) {
    if adds {
      guard state.published.count < state.published.capacity else { return }
      state.published.append(value)
      return
    }
    var index = 0
    while index < state.published.count {
      if state.published[index] === value {
        state.published.remove(at: index)
        return
      }
      index += 1
    }
  }
}
