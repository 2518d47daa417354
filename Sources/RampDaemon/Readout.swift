import RampAudio
import RampEngine
import RampProtocol

/// A command that reads the render thread's state or changes its duck rules (get, list, status,
/// duck-add, duck-remove, duck-list, duck, unduck). The storage it reads into (`Readout`) is
/// reserved when it is prepared; on the render thread it only copies plain values there; its
/// reply is built from them on the control side (`reply`).
struct Query: Sendable {
  enum Kind: Sendable {
    case get(key: String)
    /// `below` is `prefix` + "." (built off the render thread).
    case list(prefix: String?, below: String?)
    case status
    case duckList
    /// The rule, its storage allocated off the render thread.
    case duckAdd(DuckState)
    case duckRemove(name: String)
    case duck(name: String, on: Bool)
    /// The animations in flight on `key` (on every key path when nil), or those of `ids` (the
    /// daemon's own transport ramps included; each once, with its last part's end): what `wait`
    /// waits for.
    case animations(key: String?, ids: Set<UInt64>?)
  }

  let kind: Kind
  let readout: Readout

  /// Reserves what `kind` reads, at the most the render thread can hold (`streams`: streams).
  init(_ kind: Kind, player: Player, streams: Int = 0) {
    self.kind = kind
    let limits = player.renderCapacity
    switch kind {
    case .get:
      readout = Readout(properties: 1)
    case .animations(.some, _):
      readout = Readout(properties: 1, animations: limits.animationsPerKeyPath)
    case .animations(nil, .some(let ids)):
      readout = Readout(properties: limits.properties, animations: ids.count)
    case .list, .animations(nil, nil):
      // What a small show holds; a read that finds more is cut short, and its ticket reads again
      // with room for what it found (`grow`).
      let all = Self.roomForAll(player)
      readout = Readout(
        properties: min(Self.firstListRoom, all.properties), animations: min(4 * Self.firstListRoom, all.animations))
    case .status:
      readout = Readout(streams: streams, ducks: DuckLayer.capacity)
    case .duckList:
      readout = Readout(ducks: DuckLayer.capacity)
    case .duckAdd, .duckRemove, .duck:
      readout = Readout()
    }
  }

  /// Properties a `list` reserves room for at first (four animations each).
  static let firstListRoom = 64

  /// Room for every property and animation the render thread can hold.
  private static func roomForAll(_ player: Player) -> (properties: Int, animations: Int) {
    let limits = player.renderCapacity
    return (limits.properties, limits.properties * limits.animationsPerKeyPath)
  }

  /// Control side, after it applied: whether it read less than it found, and took room for what
  /// it found, or, the `attempt`-th time (from 1), for all the render thread can hold.
  func grow(attempt: Int, player: Player) -> Bool {
    guard readout.isCutShort else { return false }
    let all = Self.roomForAll(player)
    let found = readout.found
    // Room for what it found and half as much again: a show that keeps growing still fits soon.
    let grown =
      attempt >= 2
      ? all : (min(found.properties * 3 / 2 + 1, all.properties), min(found.animations * 3 / 2 + 1, all.animations))
    readout.reserve(properties: grown.0, animations: grown.1)
    return true
  }

  /// Control side, before it is queued with a command that changes something (and so cannot read
  /// again): room for all the render thread can hold.
  func reserveForAll(player: Player) {
    switch kind {
    case .list, .animations(nil, nil):
      let all = Self.roomForAll(player)
      readout.reserve(properties: all.properties, animations: all.animations)
    default:
      return
    }
  }

  /// Whether it may change what is heard: the duck commands do; reads do not.
  var changesSound: Bool {
    switch kind {
    case .duckAdd, .duckRemove, .duck: return true
    default: return false
    }
  }

  /// Whether `key` is measured from what is heard rather than a property: a level, or the
  /// limiter's gain reduction (``PublishedValue``).
  static func isMeasured(_ key: String) -> Bool { LevelKey(key) != nil || key == PublishedValue.limiterKeyPath }

  /// Whether it names a key path the render thread may not know.
  var namesKeyPath: Bool {
    switch kind {
    case .get, .animations(.some, _): return true
    default: return false
    }
  }

  var heldObjects: [AnyObject] {
    if case .duckAdd(let rule) = kind { return [readout, rule] }
    return [readout]
  }

  /// Render thread: why it cannot be applied now, if it cannot.
  func check(_ state: RenderState) -> CommandRefusal? {
    switch kind {
    case .get(let key), .animations(.some(let key), _): return Preparation.checkKey(key, in: state)
    case .list, .status, .duckList, .animations(nil, _): return nil
    case .duckAdd(let rule):
      return state.ducks.contains(rule.rule.name) || state.ducks.count < DuckLayer.capacity ? nil : .duckLimit
    case .duckRemove(let name), .duck(let name, _):
      return state.ducks.contains(name) ? nil : .unknownDuck(name)
    }
  }

  /// Render thread: reads (or changes the duck rules), copying plain values into the readout.
  /// Neither allocates nor frees: a rule `duck-add` replaces goes back with the readout.
  func apply(_ state: RenderState) {
    let engine = state.engine
    readout.sample = engine.now
    switch kind {
    case .get(let key):
      if let handle = engine.handleIfDefined(key) { readout.read(handle, engine, animations: false) }
    case .list(let prefix, let below):
      readout.readAll(engine, prefix: prefix, below: below, internal: false)
    case .animations(let key, let ids):
      if let key {
        if let handle = engine.handleIfDefined(key) { readout.read(handle, engine, animations: true, only: ids) }
      } else {
        readout.readAll(engine, prefix: nil, below: nil, internal: ids != nil, only: ids)
      }
    case .status:
      if let master = engine.handleIfDefined("master.gain") { readout.master = Readout.Level(master, engine) }
      var index = 0
      while index < state.streamCount && readout.streams.count < readout.streams.capacity {
        let (stream, gain) = state.snapshot(ofStreamAt: index)
        readout.streams.append(Readout.StreamReading(stream: stream, gain: Readout.Level(gain, engine)))
        index += 1
      }
      readout.readDucks(state)
    case .duckList:
      readout.readDucks(state)
    case .duckAdd(let rule):
      if case .replaced(let old) = state.ducks.add(rule, now: engine.now) {
        readout.replaced = true
        readout.released = old
      }
    case .duckRemove(let name):
      _ = state.ducks.remove(name)
    case .duck(let name, let on):
      _ = state.ducks.setManual(name, on)
    }
  }

  /// Control side, after it applied: its reply.
  func reply() -> JSONValue {
    let readout = readout
    switch kind {
    case .get(let key):
      guard let property = readout.properties.first else { return ["key": .string(key)] }
      var object = Self.describe(property)
      object["sample"] = .integer(readout.sample)
      return .object(object)
    case .list:
      var next = 0
      let properties: [JSONValue] = readout.properties.map { property in
        var object = Self.describe(property)
        let animations = readout.animations[next..<next + property.animations]
        next += property.animations
        object["animations"] = .array(animations.map(Preparation.describe))
        return .object(object)
      }
      return ["sample": .integer(readout.sample), "properties": .array(properties)]
    case .status:
      return [
        "sample": .integer(readout.sample),
        "master": readout.master.json,
        "streams": .array(
          readout.streams.map { reading in
            let stream = reading.stream
            var row: JSONObject = [
              "stream": .string(stream.id), "path": .string(stream.path), "paused": .bool(stream.paused),
              "stopping": .bool(stream.stopping), "loop": .bool(stream.loops), "position": .number(stream.seconds),
              "duration": .number(stream.duration),
              "gain": reading.gain.json,
            ]
            if let trim = stream.trim { row["loudness"] = Preparation.describe(trim) }
            return .object(row)
          }),
        "ducks": .array(readout.ducks.map(Preparation.describe)),
      ]
    case .duckList:
      return ["ducks": .array(readout.ducks.map(Preparation.describe))]
    case .animations:
      return ["animations": .array(readout.animations.map(Preparation.describe))]
    case .duckAdd(let rule):
      return ["rule": .string(rule.rule.name), "replaced": .bool(readout.replaced)]
    case .duckRemove(let name):
      return ["rule": .string(name)]
    case .duck(let name, _):
      return ["rule": .string(name), "sample": .integer(readout.sample)]
    }
  }

  /// A property as `get` and `list` show it: key, model, presentation, range.
  private static func describe(_ property: Readout.PropertyReading) -> JSONObject {
    [
      "key": .string(property.keyPath), "model": .number(property.model),
      "presentation": .number(property.presentation),
      "range": [.number(property.range.lowerBound), .number(property.range.upperBound)],
    ]
  }
}

/// What a query read on the render thread, as plain values, in storage reserved off it: the
/// render thread appends within the capacities reserved and never beyond.
final class Readout: @unchecked Sendable {
  struct PropertyReading {
    let keyPath: String
    let model: Double
    let presentation: Double
    let range: ClosedRange<Double>
    /// How many of `animations` (following the previous property's) are its.
    let animations: Int
  }

  /// `{"model": 0.5, "audible": 0.42}`: where a gain is going and what plays now.
  struct Level {
    var model = Double.nan
    var audible = Double.nan

    init() {}

    init(_ handle: PropertyHandle, _ engine: AnimationEngine) {
      model = engine.model(handle)
      audible = engine.presentation(handle)
    }

    var json: JSONValue { ["model": .number(model), "audible": .number(audible)] }
  }

  struct StreamReading {
    let stream: StreamSnapshot
    let gain: Level
  }

  var sample: Int64 = 0
  var properties: ContiguousArray<PropertyReading> = []
  var animations: ContiguousArray<AnimationStatus> = []
  var master = Level()
  var streams: ContiguousArray<StreamReading> = []
  var ducks: ContiguousArray<DuckSnapshot> = []
  /// `duck-add` replaced a rule of the same name.
  var replaced = false
  /// The rule it replaced: handed back with the ticket, to be freed off the render thread.
  var released: DuckState?

  /// The properties and animations the render thread found to read, whether or not they fit.
  private(set) var found = (properties: 0, animations: 0)

  init(properties: Int = 0, animations: Int = 0, streams: Int = 0, ducks: Int = 0) {
    self.properties.reserveCapacity(properties)
    self.animations.reserveCapacity(animations)
    self.streams.reserveCapacity(streams)
    self.ducks.reserveCapacity(ducks)
  }

  /// It found more properties or animations than it had room for.
  var isCutShort: Bool { found.properties > properties.count || found.animations > animations.count }

  /// Control side: empty again, its room kept.
  func clear() {
    properties.removeAll(keepingCapacity: true)
    animations.removeAll(keepingCapacity: true)
    streams.removeAll(keepingCapacity: true)
    ducks.removeAll(keepingCapacity: true)
    found = (0, 0)
  }

  /// Control side: empty, with room for `properties` properties and `animations` animations.
  func reserve(properties: Int, animations: Int) {
    self.properties = []
    self.properties.reserveCapacity(properties)
    self.animations = []
    self.animations.reserveCapacity(animations)
    found = (0, 0)
  }

  /// Render thread: a property's values (and its animations, those of `ids` when given), within
  /// the capacity reserved.
  func read(
    _ handle: PropertyHandle, _ engine: AnimationEngine, animations withAnimations: Bool, only ids: Set<UInt64>? = nil
  ) {
    found.properties += 1
    if withAnimations && ids == nil { found.animations += engine.animationCount(on: handle) }
    guard properties.count < properties.capacity else { return }
    var count = 0
    if withAnimations {
      let total = engine.animationCount(on: handle)
      var index = 0
      while index < total && animations.count < animations.capacity {
        let animation = engine.animation(index, on: handle)
        index += 1
        if let ids {
          guard ids.contains(animation.id) else { continue }
          // A group's animation is on several key paths: it is in flight until its last part ends.
          if let seen = position(of: animation.id) {
            if animation.endsAfter(animations[seen]) { animations[seen] = animation }
            continue
          }
        }
        animations.append(animation)
        count += 1
      }
    }
    properties.append(
      PropertyReading(
        keyPath: handle.keyPath, model: engine.model(handle), presentation: engine.presentation(handle),
        range: engine.range(handle), animations: count))
  }

  private func position(of id: UInt64) -> Int? {
    var index = 0
    while index < animations.count {
      if animations[index].id == id { return index }
      index += 1
    }
    return nil
  }

  /// Render thread: every property's values and animations (under `prefix`, that is `prefix` or
  /// below `below`, when given; the daemon's own transport ramps only when `internal`).
  func readAll(
    _ engine: AnimationEngine, prefix: String?, below: String?, internal includingInternal: Bool,
    only ids: Set<UInt64>? = nil
  ) {
    var index = 0
    while index < engine.propertyCount {
      let handle = engine.handle(at: index)
      index += 1
      let key = handle.keyPath
      if !includingInternal && InternalKeyPath.isInternal(key) { continue }
      if let prefix, let below, key != prefix && !key.hasPrefix(below) { continue }
      read(handle, engine, animations: true, only: ids)
    }
  }

  /// Render thread: the duck rules' state.
  func readDucks(_ state: RenderState) {
    var index = 0
    while index < state.ducks.count && ducks.count < ducks.capacity {
      if let snapshot = state.ducks.snapshot(at: index, sample: state.engine.now) { ducks.append(snapshot) }
      index += 1
    }
  }
}

/// The key paths defined when a command named one that is not, copied on the render thread into
/// storage its ticket reserved: the refusal's suggestion is looked for among them off it.
final class KeyPathNames: @unchecked Sendable {
  private(set) var keyPaths: ContiguousArray<String> = []

  init(capacity: Int) { keyPaths.reserveCapacity(capacity) }

  /// Render thread: copies the defined key paths, within the capacity reserved.
  func read(_ engine: AnimationEngine) {
    var index = 0
    while index < engine.propertyCount && keyPaths.count < keyPaths.capacity {
      keyPaths.append(engine.handle(at: index).keyPath)
      index += 1
    }
  }
}

/// Why the render thread refused a command, as plain values: numbers, and the names the command
/// already holds (copied, not built). The error is built from it on the control side (`error`).
enum CommandRefusal: Error {
  /// `stopping`: the stream is in its stop ramp (it ends when the ramp has reached silence).
  case streamExists(String, stopping: Bool)
  /// No property has this key path (`KeyPathNames` holds those that do).
  case unknownKey(String)
  /// `limits.streams`.
  case streamLimit(Int)
  case unknownStream(String, field: String)
  /// A seek past the end of the stream's file (`length` seconds long).
  case pastEnd(stream: String, position: Double, length: Double)
  case outOfRange(key: String, value: Double, range: ClosedRange<Double>, field: String)
  /// The stream plays no queue.
  case noQueue(String)
  case unknownDuck(String)
  case duckLimit
  /// The engine's (its field under `animation` when it is about an animation's own field).
  case engine(EngineError, underAnimation: Bool = false)
  /// A saved schedule taken back (`unschedule`, or given way) after it was handed on for its sample.
  case withdrawn

  /// Control side: the refusal as the reply reports it; `defined`, the key paths defined when it
  /// was refused (for an unknown one's suggestion).
  func error(defined: KeyPathNames?) -> ProtocolError {
    switch self {
    case .unknownKey(let key) where Query.isMeasured(key):
      // Measured as it is heard, not a property: `get` reads it when on its own (the controller's
      // `readMeasured`), not in a batch or at a time.
      return ProtocolError(
        .unknownKeyPath, field: "key",
        "'\(key)' is measured from what is heard, not a property: read it with a get of its own (not in a batch"
          + " or with at) or with observe")
    case .unknownKey(let key):
      let hint = Preparation.hint(key, defined: defined?.keyPaths ?? [])
      return ProtocolError(.unknownKeyPath, field: "key", "no property '\(key)'\(hint)")
    case .streamExists(let id, stopping: false):
      return ProtocolError(.streamExists, field: "stream", "a stream '\(id)' is already playing")
    case .streamExists(let id, stopping: true):
      return ProtocolError(
        .streamExists, field: "stream",
        "stream '\(id)' is still stopping (its stop ramp has not reached silence): play it again once it has"
          + " ended (its stream-ended event), or under another id")
    case .streamLimit(let limit):
      return ProtocolError(
        .limitExceeded, field: "stream", "\(limit) streams are playing, the most allowed (limits.streams)")
    case .unknownStream(let id, let field):
      return ProtocolError(.unknownStream, field: field, "no stream '\(id)' is playing")
    case .pastEnd(let id, let position, let length):
      return ProtocolError(
        .outOfRange, field: "position",
        "position: \(JSONValue.format(position)) s is past the end of stream '\(id)', whose file is"
          + " \(JSONValue.format((length * 1000).rounded() / 1000)) s long")
    case .outOfRange(let key, let value, let range, let field):
      return .outsideRange(value, keyPath: key, range: range, field: field)
    case .noQueue(let stream):
      return QueueBook.noQueue(stream)
    case .unknownDuck(let name):
      return ProtocolError(.unknownDuck, field: "name", "no duck rule '\(name)'")
    case .duckLimit:
      return ProtocolError(.limitExceeded, field: "name", "\(DuckLayer.capacity) duck rules exist, the most allowed")
    case .engine(let error, let underAnimation):
      return underAnimation ? ProtocolError(refusingAnimation: error) : ProtocolError(error)
    case .withdrawn:
      return ProtocolError(.invalidField, "the schedule was withdrawn before its time came")
    }
  }
}

extension AnimationStatus {
  /// Whether it ends after `other` (one that never ends, after any).
  fileprivate func endsAfter(_ other: AnimationStatus) -> Bool {
    guard let end = endSample else { return other.endSample != nil }
    return other.endSample.map { end > $0 } ?? false
  }
}
