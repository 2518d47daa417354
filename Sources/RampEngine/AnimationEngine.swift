/// One animatable float: a model value, a range, and the animations in flight on it.
public final class Property: @unchecked Sendable {
  public let keyPath: String
  public internal(set) var model: Double
  public let range: ClosedRange<Double>
  var instances: ContiguousArray<AnimationInstance> = []

  init(keyPath: String, model: Double, range: ClosedRange<Double>, capacity: Int) {
    self.keyPath = keyPath
    self.model = model
    self.range = range
    instances.reserveCapacity(capacity)
  }

  var clamps: Bool { range.lowerBound.isFinite || range.upperBound.isFinite }
}

/// A resolved key path, so the render thread need not hash strings.
public struct PropertyHandle: @unchecked Sendable {
  let property: Property
  public var keyPath: String { property.keyPath }

  /// Whether both name the same property (not merely the same key path).
  public func isSame(as other: PropertyHandle) -> Bool { property === other.property }

  /// The property itself, for a render thread to hand off when it lets go of the last handle (an
  /// undefined property is freed with it).
  public var object: AnyObject { property }
}

/// Core Animation's model, rebuilt for audio: a tree of float properties addressed by key
/// paths, each with a model value and a presentation value computed per sample from the
/// animations added to it, on a clock that counts samples.
///
/// The engine belongs to one thread. Mutations given plain values (`set`, `add`, `remove…`) may
/// allocate; their prepared forms do not (`commit` of a `PreparedAnimation` compiled on another
/// thread, `define` of a prepared property, `set` and `remove…` with prepared ramps), nor does
/// the evaluation path (`render`, `advance`), so a render thread can own the engine and apply
/// mutations between blocks. Completion reports and retired animations wait in
/// preallocated buffers until `drainCompletions` runs them on the caller's side.
public final class AnimationEngine {
  public let sampleRate: Double
  public let maxBlockSize: Int
  public let maxAnimationsPerKeyPath: Int
  /// Properties reserved for: defining more grows the tables. Any thread may read it.
  public let propertyCapacity: Int
  /// Animations that may end (and so be reported and retired) between two drains: every one
  /// that can exist at once, `propertyCapacity` × `maxAnimationsPerKeyPath` (at least 1024).
  /// Reserved: a mutation that could end more than the room left is refused (`tooManyEnding`),
  /// so the reports and the retired animations never grow. Advancing the clock, or removing a
  /// property, ends only animations that exist, which fit once the buffers have been drained:
  /// a render thread drains them after every command and every block.
  public let completionCapacity: Int
  /// The sample the next block starts at: the engine's "now".
  public private(set) var now: Int64 = 0
  /// The transaction `set` uses when it is given none.
  public var defaultTransaction = Transaction()

  public static let implicitActionKey = "implicit"

  private var properties: [String: Property] = [:]
  private var ordered: ContiguousArray<Property> = []
  /// The id the next animation committed takes (internal: tests start it far on).
  var nextID: UInt64 = 1
  private let scratch: UnsafeMutablePointer<Double>
  private let block: UnsafeMutablePointer<Double>
  private var reports: [CompletionReport] = []
  private var retired: [CompletionToken] = []
  private var graveyard: ContiguousArray<AnimationInstance> = []

  /// `propertyCapacity`: properties reserved for, so that defining one on the render thread does
  /// not grow the tables.
  public init(
    sampleRate: Double, maxBlockSize: Int = 4096, maxAnimationsPerKeyPath: Int = 64, propertyCapacity: Int = 256
  ) throws(EngineError) {
    try Check.positive(sampleRate, "sampleRate")
    guard maxBlockSize > 0 else {
      throw EngineError(.invalidValue, field: "maxBlockSize", "must be at least 1, got \(maxBlockSize)")
    }
    guard maxAnimationsPerKeyPath > 0 else {
      throw EngineError(
        .invalidValue, field: "maxAnimationsPerKeyPath", "must be at least 1, got \(maxAnimationsPerKeyPath)")
    }
    self.sampleRate = sampleRate
    self.maxBlockSize = maxBlockSize
    self.maxAnimationsPerKeyPath = maxAnimationsPerKeyPath
    self.propertyCapacity = propertyCapacity
    scratch = .allocate(capacity: maxBlockSize)
    block = .allocate(capacity: maxBlockSize)
    let (all, overflow) = propertyCapacity.multipliedReportingOverflow(by: maxAnimationsPerKeyPath)
    completionCapacity = max(overflow ? Int.max : all, 1024)
    reports.reserveCapacity(completionCapacity)
    retired.reserveCapacity(completionCapacity)
    graveyard.reserveCapacity(completionCapacity)
    properties.reserveCapacity(propertyCapacity)
    ordered.reserveCapacity(propertyCapacity)
  }

  deinit {
    scratch.deallocate()
    block.deallocate()
  }

  // MARK: The property tree

  /// Creates (or redefines the range of) the property at `keyPath`, as a stream or mixer appears.
  @discardableResult
  public func define(_ keyPath: String, value: Double, range: ClosedRange<Double> = 0...1) throws(EngineError)
    -> PropertyHandle
  {
    define(try prepareProperty(keyPath, value: value, range: range))
  }

  /// A property made ready to be defined (`define(_:)`), checked and its storage reserved. Reads
  /// only the engine's constants: any thread may call it.
  public func prepareProperty(_ keyPath: String, value: Double, range: ClosedRange<Double> = 0...1)
    throws(EngineError) -> PropertyHandle
  {
    try KeyPath.validate(keyPath)
    try Check.finite(value, "value")
    guard !range.lowerBound.isNaN, !range.upperBound.isNaN else {
      throw EngineError(.invalidValue, field: "range", "must not contain NaN")
    }
    guard range.contains(value) else {
      throw EngineError(.outOfRange, field: "value", reason: .outsideRange(value, keyPath: keyPath, range: range))
    }
    return PropertyHandle(
      property: Property(keyPath: keyPath, model: value, range: range, capacity: maxAnimationsPerKeyPath))
  }

  /// Defines a prepared property (replacing any at its key path). Allocation-free while fewer
  /// properties than `propertyCapacity` are defined.
  @discardableResult
  public func define(_ prepared: PropertyHandle) -> PropertyHandle {
    let property = prepared.property
    if let existing = properties[property.keyPath] {
      removeProperty(existing)
    }
    properties[property.keyPath] = property
    ordered.append(property)
    return prepared
  }

  /// Removes the property at `keyPath` and every property below it (`streams.s1` removes
  /// `streams.s1.gain` and `streams.s1.pan`); their animations end with `finished` false.
  /// Returns how many properties were removed.
  @discardableResult
  public func undefine(_ keyPath: String) -> Int {
    let prefix = keyPath + "."
    let doomed = ordered.filter { $0.keyPath == keyPath || $0.keyPath.hasPrefix(prefix) }
    for property in doomed { removeProperty(property) }
    return doomed.count
  }

  /// Removes the property `handle` names, as `undefine(_:)` does, without building or matching
  /// key paths: on the render thread it neither allocates nor frees (the property itself goes
  /// when the last handle does).
  public func undefine(_ handle: PropertyHandle) {
    guard properties[handle.property.keyPath] === handle.property else { return }
    removeProperty(handle.property)
  }

  private func removeProperty(_ property: Property) {
    endAll(property)
    properties.removeValue(forKey: property.keyPath)
    // Index loops, not `removeAll(where:)`: unspecialised in a debug build, it allocates.
    var index = 0
    while index < ordered.count {
      if ordered[index] === property {
        ordered.remove(at: index)
        break
      }
      index += 1
    }
  }

  public var keyPaths: [String] { ordered.map(\.keyPath) }

  /// How many properties are defined. Allocation-free, unlike `keyPaths`.
  public var propertyCount: Int { ordered.count }

  /// The property defined `index`-th (0 ..< `propertyCount`), in the order of `keyPaths`.
  /// Allocation-free.
  public func handle(at index: Int) -> PropertyHandle { PropertyHandle(property: ordered[index]) }

  /// The model value, range, audible value and animation count of a defined property: what `get`
  /// and `list` show of it. Allocation-free.
  public func model(_ handle: PropertyHandle) -> Double { handle.property.model }
  public func range(_ handle: PropertyHandle) -> ClosedRange<Double> { handle.property.range }
  public func presentation(_ handle: PropertyHandle) -> Double { value(of: handle.property, at: now) }
  public func animationCount(on handle: PropertyHandle) -> Int { handle.property.instances.count }

  /// Refuses, as `removeAnimation(forKey:from:declick:)` would, a key under which no animation
  /// runs on `handle`'s property. Allocation-free.
  public func checkRemoval(forKey key: String, on handle: PropertyHandle) throws(EngineError) {
    let property = handle.property
    var index = 0
    while index < property.instances.count {
      if property.instances[index].key == key { return }
      index += 1
    }
    throw EngineError(.unknownAnimation, field: "name", reason: .noAnimation(key: key, keyPath: property.keyPath))
  }

  public func contains(_ keyPath: String) -> Bool { properties[keyPath] != nil }

  /// The handle of `keyPath` if it is defined: a plain lookup, no validation and no error to
  /// build, so the render thread may call it every block.
  public func handleIfDefined(_ keyPath: String) -> PropertyHandle? {
    properties[keyPath].map(PropertyHandle.init(property:))
  }

  public func handle(_ keyPath: String) throws(EngineError) -> PropertyHandle {
    PropertyHandle(property: try property(keyPath))
  }

  private func property(_ keyPath: String) throws(EngineError) -> Property {
    // Every defined key path was validated by `define`: only a miss needs to know why.
    if let property = properties[keyPath] { return property }
    try KeyPath.validate(keyPath)
    guard let property = properties[keyPath] else {
      throw EngineError(.unknownKeyPath, field: "key", reason: .noProperty(keyPath: keyPath))
    }
    return property
  }

  public func range(_ keyPath: String) throws(EngineError) -> ClosedRange<Double> {
    try property(keyPath).range
  }

  // MARK: Model and presentation

  public func model(_ keyPath: String) throws(EngineError) -> Double { try property(keyPath).model }

  /// The value audible at sample `sample` (default: now).
  public func presentation(_ keyPath: String, at sample: Int64? = nil) throws(EngineError) -> Double {
    value(of: try property(keyPath), at: sample ?? now)
  }

  private func value(of property: Property, at sample: Int64) -> Double {
    var result = 0.0
    _ = withUnsafeMutablePointer(to: &result) { evaluate(property, start: sample, count: 1, into: $0) }
    return result
  }

  /// The value beneath the additive animations, held to the property's range: where a change
  /// that supersedes what runs starts, since the additive ones go on adding on top of it (from the
  /// audible value, a tremolo's deviation would be counted twice, a jump).
  private func valueBeneathAdditive(of property: Property, at sample: Int64) -> Double {
    var result = 0.0
    _ = withUnsafeMutablePointer(to: &result) {
      evaluate(property, start: sample, count: 1, into: $0, withAdditive: false)
    }
    return result
  }

  /// Changes the model value. Unless actions are disabled (or the duration is 0), an implicit
  /// animation runs from the presentation value to the new model value, replacing the previous
  /// implicit one: the latest command wins and nothing jumps.
  @discardableResult
  public func set(_ keyPath: String, to value: Double, transaction: Transaction? = nil) throws(EngineError)
    -> UInt64?
  {
    let property = try property(keyPath)
    try checkModel(value, of: property)
    let action = try PreparedAnimation.implicitAction(
      to: value, on: keyPath, transaction: transaction ?? defaultTransaction, sampleRate: sampleRate)
    return try set(PropertyHandle(property: property), to: value, action: action)
  }

  /// `set` with the implicit animation prepared off the render thread
  /// (`PreparedAnimation.implicitAction`; nil: instant). Allocation-free when it succeeds.
  @discardableResult
  public func set(_ keyPath: String, to value: Double, action: PreparedAnimation?) throws(EngineError) -> UInt64? {
    try set(PropertyHandle(property: try property(keyPath)), to: value, action: action)
  }

  /// The same, by handle.
  @discardableResult
  public func set(_ handle: PropertyHandle, to value: Double, action: PreparedAnimation?) throws(EngineError)
    -> UInt64?
  {
    let property = handle.property
    try checkModel(value, of: property)
    guard let action else {
      // An instant change supersedes what runs, as an animated one would: the model shows now.
      try checkRoom(toEnd: property.instances.count)
      removeInstances(of: property, key: Self.implicitActionKey, ending: .superseded(by: nil))
      supersedeRunning(on: property, by: nil)
      property.model = value
      return nil
    }
    // The model changes with the commit, after its checks: a refused set changes nothing.
    return try commit(action, to: handle, from: valueBeneathAdditive(of: property, at: now), model: value)
  }

  private func checkModel(_ value: Double, of property: Property) throws(EngineError) {
    try Check.finite(value, "value")
    guard property.range.contains(value) else {
      throw EngineError(
        .outOfRange, field: "value", reason: .outsideRange(value, keyPath: property.keyPath, range: property.range))
    }
  }

  // MARK: Animations

  /// Adds `animation` to `keyPath` under `key`, replacing any animation already under that key
  /// there (which ends with `finished` false). Returns the id its completion report will carry.
  @discardableResult
  public func add(
    _ animation: Animation, forKey key: String, to keyPath: String, continuity: Continuity = .value,
    completion: (@Sendable (Bool) -> Void)? = nil
  ) throws(EngineError) -> UInt64 {
    guard !key.isEmpty else {
      throw EngineError(.invalidAnimation, field: "name", "an animation key must not be empty")
    }
    _ = try property(keyPath)
    let prepared = try PreparedAnimation(
      animation, forKey: key, to: keyPath, continuity: continuity, sampleRate: sampleRate,
      defaultDuration: defaultTransaction.duration, completion: completion)
    return try commit(prepared)
  }

  /// Adds an animation prepared off the render thread: finds its properties (`handle`: the
  /// animation's own, without a lookup), resolves its from/to/by against the presentation value
  /// now (`from`: the start of a single basic animation without one, given instead), checks the
  /// limits and adds its instances, replacing those under the same key (which end with
  /// `finished` false). With `model`, the animation's own property takes that model value and
  /// loses its implicit animation too, as `set` without one would (a fade leaves its target
  /// behind); the ends are resolved against the model before. Returns its id. Allocation-free,
  /// whether it succeeds or not; a refused commit leaves the engine as it was.
  @discardableResult
  public func commit(
    _ prepared: PreparedAnimation, to handle: PropertyHandle? = nil, from: Double? = nil, model: Double? = nil
  ) throws(EngineError) -> UInt64 {
    let (target, beginSample) = try ready(prepared, to: handle, from: from, model: model)
    let parts = prepared.parts
    var index = 0
    let key = prepared.namedByID ? prepared.name(byID: nextID) : prepared.key
    let id = nextID
    nextID += 1
    let token = prepared.token
    token.id = id
    token.keyPath = target.keyPath
    if prepared.namedByID {
      token.key = key
      index = 0
      while index < parts.count {
        parts[index].instance.key = key
        index += 1
      }
    }

    // The slope of what would be heard on without this change, for slope continuity: forward,
    // since a change committed at this same sample just before may have ended what ran at now − 1.
    let slope = prepared.continuity == .slope
    let oldSlope = slope ? value(of: target, at: Sample.add(now, 1)) - value(of: target, at: now) : 0
    index = 0
    while index < parts.count {
      let property = prepared.targets[index]!
      if Self.isFirstTarget(index, of: prepared) {
        // Named by id, it replaces nothing: not even a client's animation that happens to have its name.
        if !prepared.namedByID { removeInstances(of: property, key: key, ending: .superseded(by: id)) }
        if supersedesNow(prepared, on: property) { supersedeRunning(on: property, by: id) }
      }
      index += 1
    }
    if let model {
      removeInstances(of: target, key: Self.implicitActionKey, ending: .superseded(by: id))
      target.model = model
    }
    token.liveParts = parts.count
    index = 0
    while index < parts.count {
      prepared.targets[index]!.instances.append(parts[index].instance)
      index += 1
    }
    index = 0
    while index < parts.count {
      if Self.isFirstTarget(index, of: prepared) { refreshSupersession(of: prepared.targets[index]!) }
      index += 1
    }
    prepared.isCommitted = true
    index = 0
    while index < parts.count {
      if prepared.targets[index]! === target {
        prepared.beginOnOwnProperty = beginSample
        break
      }
      index += 1
    }

    let instance = parts[0].instance
    if slope, parts.count == 1, !instance.isAdditive, instance.levels.count == 1, beginSample == now {
      let newSlope = value(of: target, at: Sample.add(now, 1)) - value(of: target, at: now)
      let samples = instance.innerDuration * sampleRate / max(instance.levels[0].speed, 1e-12)
      if samples >= 2 { instance.slopeCorrection = (oldSlope - newSlope) * samples }
    }
    return id
  }

  /// Refuses, as `commit` would now, what `commit` would refuse, and changes nothing in the
  /// engine: a check before a command that also commits others, so that all of them apply or
  /// none. Allocation-free.
  public func check(
    _ prepared: PreparedAnimation, to handle: PropertyHandle? = nil, from: Double? = nil, model: Double? = nil
  ) throws(EngineError) {
    _ = try ready(prepared, to: handle, from: from, model: model)
  }

  /// Refuses what `set(_:to:action:)` would refuse, and changes nothing. Allocation-free.
  public func check(set action: PreparedAnimation, on handle: PropertyHandle, to value: Double) throws(EngineError) {
    try check(action, to: handle, from: valueBeneathAdditive(of: handle.property, at: now), model: value)
  }

  /// Whether the `index`-th part's property is not also an earlier part's: each property counted
  /// once. Allocation-free.
  private static func isFirstTarget(_ index: Int, of prepared: PreparedAnimation) -> Bool {
    let property = prepared.targets[index]!
    var other = 0
    while other < index {
      if prepared.targets[other]! === property { return false }
      other += 1
    }
    return true
  }

  /// What `commit` does before it changes anything: finds the properties, places the begin,
  /// resolves the ends (into `prepared`, not yet the engine's) and checks the limits.
  private func ready(_ prepared: PreparedAnimation, to handle: PropertyHandle?, from: Double?, model: Double?)
    throws(EngineError) -> (target: Property, beginSample: Int64)
  {
    guard !prepared.isCommitted else {
      throw EngineError(.invalidAnimation, reason: .committedTwice)
    }
    let target: Property
    if let handle {
      target = handle.property
    } else {
      target = try property(prepared.keyPath)
    }
    if let model { try checkModel(model, of: target) }
    let beginSample: Int64
    switch prepared.begin {
    case .now:
      beginSample = now
    case .absolute(let begin):
      beginSample = try place(begin)
    case .afterCommit(let offset):
      beginSample = try place(Double(now) / sampleRate + offset)
    }
    let parts = prepared.parts
    var index = 0
    while index < parts.count {
      let part = parts[index]
      if let path = part.keyPath {
        do { prepared.targets[index] = try property(path) } catch {
          throw error.about(part.field)
        }
      } else {
        prepared.targets[index] = target
      }
      index += 1
    }
    // Resolved before anything changes, against what is audible now.
    index = 0
    while index < parts.count {
      let instance = parts[index].instance
      try resolve(parts[index], on: prepared.targets[index]!, from: parts.count == 1 ? from : nil)
      instance.place(at: beginSample, sampleRate: sampleRate)
      instance.takeoverSample = instance.firstActiveSample(from: now, sampleRate: sampleRate)
      index += 1
    }
    // Named by id: under a name no other animation has, so it replaces none.
    let key = prepared.namedByID ? nil : prepared.key

    // Check limits before changing anything, so a refused add leaves the engine as it was.
    index = 0
    while index < parts.count {
      let property = prepared.targets[index]!
      var count = 0
      var other = 0
      while other <= index {
        if prepared.targets[other]! === property { count += 1 }
        other += 1
      }
      // What this commit replaces, supersedes or removes does not count.
      let dropsImplicit = model != nil && property === target
      let supersedes = supersedesNow(prepared, on: property)
      other = 0
      while other < property.instances.count {
        let existing = property.instances[other]
        if existing.key != key && !(dropsImplicit && existing.key == Self.implicitActionKey)
          && !(supersedes && isSupersededNow(existing))
        {
          count += 1
        }
        other += 1
      }
      if count > maxAnimationsPerKeyPath {
        throw EngineError(
          .limitExceeded, field: "key",
          reason: .tooManyAnimations(keyPath: property.keyPath, limit: maxAnimationsPerKeyPath))
      }
      index += 1
    }
    // At most every animation on its properties ends: each property counted once.
    var ending = 0
    index = 0
    while index < parts.count {
      if Self.isFirstTarget(index, of: prepared) { ending += prepared.targets[index]!.instances.count }
      index += 1
    }
    if model != nil {
      // Its implicit animation goes too, when no part animates it.
      var animated = false
      index = 0
      while index < parts.count {
        if prepared.targets[index]! === target { animated = true }
        index += 1
      }
      if !animated { ending += target.instances.count }
    }
    try checkRoom(toEnd: ending)
    return (target, beginSample)
  }

  /// The sample an animation beginning at `begin` (seconds on the engine's clock) begins at:
  /// within the horizon of the engine's clock, now (a millisecond's leeway for the rounding of a
  /// caller's relative time plus the clock).
  private func place(_ begin: Double) throws(EngineError) -> Int64 {
    try Check.withinHorizon(begin - Double(now) / sampleRate, "beginTime", shown: begin, slack: 1e-3)
    return Sample.position(begin, rate: sampleRate)
  }

  /// Resolves a part's ends against `property` now: the presentation and model values (0 for an
  /// additive animation, a delta on the value beneath).
  private func resolve(_ part: PreparedAnimation.Part, on property: Property, from given: Double?)
    throws(EngineError)
  {
    let instance = part.instance
    let presentation = instance.isAdditive ? 0 : valueBeneathAdditive(of: property, at: now)
    let model = instance.isAdditive ? 0 : property.model
    switch part.ends {
    case .fixed:
      return
    case .basic(var basic, let space, let curve, let cumulative):
      if basic.from == nil, let given { basic.from = given }
      let (from, to) = basic.ends(presentation: presentation, model: model)
      try Self.checkSpace(space, from, to)
      instance.kernel = .basic(from: space.encode(from), to: space.encode(to), space: space)
      instance.curve = curve.forRamp(falling: to < from)
      instance.cumulativeStep = cumulative ? to - from : 0
    case .spring(let motion, let basic, let duration, let space, let cumulative):
      let (from, to) = basic.ends(presentation: presentation, model: model)
      try Self.checkSpace(space, from, to)
      instance.kernel = .spring(
        motion, from: space.encode(from), to: space.encode(to), duration: duration, space: space)
      instance.cumulativeStep = cumulative ? to - from : 0
    }
  }

  private static func checkSpace(_ space: ValueSpace, _ from: Double, _ to: Double) throws(EngineError) {
    if space.needsNonNegativeValues {
      guard from >= 0, to >= 0 else {
        throw EngineError(.invalidAnimation, field: "space", reason: .negativeInSpace(space, from: from, to: to))
      }
    }
  }

  /// Removes the animation under `key` from `keyPath`. With `declick` seconds, the jump this
  /// would make is smoothed by an additive ramp from the difference to 0, so nothing clicks.
  public func removeAnimation(forKey key: String, from keyPath: String, declick: Double = 0) throws(EngineError) {
    let property = try property(keyPath)
    try removeAnimation(
      forKey: key, declick: try PreparedAnimation.declickRamp(seconds: declick, sampleRate: sampleRate),
      property: property)
  }

  /// The same, with the smoothing ramp prepared off the render thread
  /// (`PreparedAnimation.declickRamp`; nil: none). Allocation-free when it succeeds.
  public func removeAnimation(forKey key: String, from keyPath: String, declick: PreparedAnimation?)
    throws(EngineError)
  {
    try removeAnimation(forKey: key, declick: declick, property: try property(keyPath))
  }

  private func removeAnimation(forKey key: String, declick: PreparedAnimation?, property: Property)
    throws(EngineError)
  {
    try checkRemoval(forKey: key, on: PropertyHandle(property: property))
    try checkRoom(toEnd: property.instances.count)
    let before = value(of: property, at: now)
    removeInstances(of: property, key: key, ending: .removed)
    smoothJump(on: property, from: before, ramp: declick)
  }

  /// Removes every animation on `keyPath`, smoothing the jump over `declick` seconds.
  public func removeAllAnimations(from keyPath: String, declick: Double = 0) throws(EngineError) {
    _ = try property(keyPath)
    try removeAllAnimations(
      from: keyPath, declick: try PreparedAnimation.declickRamp(seconds: declick, sampleRate: sampleRate))
  }

  /// The same, with the smoothing ramp prepared off the render thread (nil: none).
  /// Allocation-free.
  public func removeAllAnimations(from keyPath: String, declick: PreparedAnimation?) throws(EngineError) {
    let property = try property(keyPath)
    try checkRoom(toEnd: property.instances.count)
    let before = value(of: property, at: now)
    endAll(property)
    smoothJump(on: property, from: before, ramp: declick)
  }

  /// Holds the audible value: it becomes the model value and every animation is dropped.
  public func cancel(_ keyPath: String) throws(EngineError) {
    let property = try property(keyPath)
    try checkRoom(toEnd: property.instances.count)
    let held = value(of: property, at: now)
    endAll(property)
    property.model = min(max(held, property.range.lowerBound), property.range.upperBound)
  }

  private func smoothJump(on property: Property, from before: Double, ramp: PreparedAnimation?) {
    guard let ramp else { return }
    let after = value(of: property, at: now)
    let jump = before - after
    guard jump != 0, jump.isFinite else { return }
    _ = try? commit(ramp, to: PropertyHandle(property: property), from: jump)
  }

  /// Ends every animation on `property` early. Allocation-free.
  private func endAll(_ property: Property) {
    var index = 0
    while index < property.instances.count {
      endEarly(property.instances[index], ending: .removed)
      index += 1
    }
    property.instances.removeAll(keepingCapacity: true)
  }

  /// The animations in flight on `keyPath`, in the order they apply.
  public func animations(on keyPath: String) throws(EngineError) -> [AnimationStatus] {
    let handle = try handle(keyPath)
    return (0..<animationCount(on: handle)).map { animation($0, on: handle) }
  }

  /// The `index`-th animation in flight on `handle` (0 ..< `animationCount(on:)`), in the order
  /// they apply. Allocation-free.
  public func animation(_ index: Int, on handle: PropertyHandle) -> AnimationStatus {
    let keyPath = handle.property.keyPath
    let instance = handle.property.instances[index]
    let ends = instance.endSample != .max
    let progress =
      ends
      ? min(
        max(
          Sample.seconds(from: instance.beginSample, to: now, rate: 1)
            / max(Sample.seconds(from: instance.beginSample, to: instance.endSample, rate: 1), 1), 0), 1)
      : nil
    let kind: String
    if instance.levels.count > 1 {
      kind = "group"
    } else {
      switch instance.kernel {
      case .basic: kind = "basic"
      case .keyframes: kind = "keyframe"
      case .spring: kind = "spring"
      }
    }
    return AnimationStatus(
      id: instance.token.id, key: instance.key, keyPath: keyPath, kind: kind, isAdditive: instance.isAdditive,
      beginSample: instance.beginSample, endSample: ends ? instance.endSample : nil, progress: progress)
  }

  // MARK: Evaluation (the render thread's path: no allocation)

  /// The value of `handle` when nothing is animating it (its clamped model value), else nil: lets
  /// the render path skip per-sample work for a property at rest. Allocation-free.
  public func restingValue(_ handle: PropertyHandle) -> Double? {
    let property = handle.property
    guard property.instances.isEmpty else { return nil }
    return min(max(property.model, property.range.lowerBound), property.range.upperBound)
  }

  /// Fills `out` with the presentation value of `handle` for samples [start, start+count).
  public func render(_ handle: PropertyHandle, start: Int64, count: Int, into out: UnsafeMutablePointer<Float>) {
    let property = handle.property
    if property.instances.isEmpty {
      // Nothing in flight, the usual case between fades: the model value, clamped.
      let range = property.range
      out.update(repeating: Float(min(max(property.model, range.lowerBound), range.upperBound)), count: count)
      return
    }
    var done = 0
    while done < count {
      let n = min(count - done, maxBlockSize)
      if evaluate(property, start: Sample.add(start, Int64(done)), count: n, into: block) {
        for i in 0..<n { out[done + i] = Float(block[i]) }
      } else {
        (out + done).update(repeating: Float(block[0]), count: n)
      }
      done += n
    }
  }

  /// As `render`, in double precision.
  public func render(_ handle: PropertyHandle, start: Int64, count: Int, into out: UnsafeMutablePointer<Double>) {
    var done = 0
    while done < count {
      let n = min(count - done, maxBlockSize)
      evaluate(handle.property, start: Sample.add(start, Int64(done)), count: n, into: out + done)
      done += n
    }
  }

  /// Returns false when no animation touched the block, which then holds the model value.
  @discardableResult
  private func evaluate(
    _ property: Property, start: Int64, count: Int, into out: UnsafeMutablePointer<Double>, withAdditive: Bool = true
  ) -> Bool {
    out.update(repeating: property.model, count: count)
    var touched = false
    // Non-additive animations replace the value in the order added, each until one that
    // supersedes it takes over (`AnimationInstance.supersedes`); additive ones sum on top.
    // Index loops, not for-in: an unspecialised iterator allocates in a debug build.
    let instances = property.instances
    for pass in 0..<(withAdditive ? 2 : 1) {
      var index = 0
      while index < instances.count {
        let instance = instances[index]
        if instance.isAdditive == (pass == 1) {
          var heard = count
          if !instance.isAdditive {
            let at = instance.supersededSample
            if at != .max {
              let (ahead, overflow) = at.subtractingReportingOverflow(start)
              heard = overflow ? (at > start ? count : 0) : Int(max(min(ahead, Int64(count)), 0))
            }
          }
          if heard > 0 {
            touched =
              instance.render(start: start, count: heard, sampleRate: sampleRate, into: out, scratch: scratch)
              || touched
          }
        }
        index += 1
      }
    }
    if !touched {
      out[0] = min(max(property.model, property.range.lowerBound), property.range.upperBound)
      return false
    }
    // Clamped beneath the additive layers too: a change never starts outside the property's range
    // (nor from the NaN or infinity of an animation's extreme values, which `animate` accepts).
    if property.clamps {
      let low = property.range.lowerBound
      let high = property.range.upperBound
      for i in 0..<count {
        let v = out[i]
        // Written so that NaN, should it ever appear, becomes the lower bound.
        out[i] = v >= low ? (v <= high ? v : high) : low
      }
    }
    return true
  }

  /// Moves the clock back to `sample` (at most `now`), to render again what was rendered from
  /// there: every animation is a function of the sample clock, so the same samples come out, as
  /// long as nothing ended, began or changed in between (the caller's to make sure: no
  /// completion was queued, no command ran). Allocation-free.
  public func rewind(to sample: Int64) {
    precondition(sample <= now, "the clock only rewinds")
    now = sample
  }

  /// Moves the clock forward by `count` samples and retires what has ended: each completion is
  /// queued (finished: true) and animations removed on completion are set aside. Does not
  /// allocate once drained: what ends is what exists, which `completionCapacity` holds.
  public func advance(by count: Int) {
    now = Sample.add(now, Int64(count))
    var propertyIndex = 0
    while propertyIndex < ordered.count {
      let property = ordered[propertyIndex]
      propertyIndex += 1
      // Before the ends: one that supersedes another may have ended in the same block.
      retireSuperseded(on: property)
      var removed = false
      var index = property.instances.count - 1
      while index >= 0 {
        let instance = property.instances[index]
        if instance.endSample <= now {
          endPart(instance, ending: .completed, sample: instance.endSample)
          if instance.removedOnCompletion {
            graveyard.append(instance)
            property.instances.remove(at: index)
            removed = true
          }
        }
        index -= 1
      }
      if removed { refreshSupersession(of: property) }
    }
  }

  /// Hands each queued completion report to `body` (oldest first) after calling the
  /// animation's own completion handler, and releases retired animations.
  public func drainCompletions(_ body: (CompletionReport) -> Void = { _ in }) {
    drainCompletions(retiring: { _ in }, body)
  }

  /// The same, handing each retired animation (and its completion token) to `retire` before
  /// letting it go: a caller that keeps it (in a queue to another thread) has it freed there,
  /// not on the render thread.
  public func drainCompletions(retiring retire: (AnyObject) -> Void, _ body: (CompletionReport) -> Void) {
    // In place, so the buffers stay uniquely referenced and keep their capacity: no allocation.
    if !reports.isEmpty {
      var index = 0
      while index < reports.count {
        retired[index].handler?(reports[index].finished)
        body(reports[index])
        retire(retired[index])
        index += 1
      }
      reports.removeAll(keepingCapacity: true)
      retired.removeAll(keepingCapacity: true)
    }
    if !graveyard.isEmpty {
      var index = 0
      while index < graveyard.count {
        retire(graveyard[index])
        index += 1
      }
      graveyard.removeAll(keepingCapacity: true)
    }
  }

  /// True when completion reports are waiting.
  public var hasPendingCompletions: Bool { !reports.isEmpty }

  /// Animations that may still end before the next drain without growing its buffers.
  public var completionRoom: Int { completionCapacity - max(reports.count, graveyard.count) }

  /// Refuses a change that could end `count` animations when there is no room to report them.
  private func checkRoom(toEnd count: Int) throws(EngineError) {
    guard count <= completionRoom else {
      throw EngineError(.limitExceeded, field: "key", reason: .tooManyEnding(limit: completionCapacity))
    }
  }

  /// True while an animation has not ended (running, or waiting for its begin time): every
  /// property's value is otherwise constant from `now` on. Allocation-free.
  public var isAnimating: Bool {
    var propertyIndex = 0
    while propertyIndex < ordered.count {
      let instances = ordered[propertyIndex].instances
      propertyIndex += 1
      var index = 0
      while index < instances.count {
        if instances[index].endSample > now { return true }
        index += 1
      }
    }
    return false
  }

  // MARK: Internals

  /// Ends the animations on `property` named `key`. Allocation-free.
  private func removeInstances(of property: Property, key: String, ending: CompletionReport.Ending) {
    endInstances(of: property, ending: ending) { $0.key == key }
  }

  /// Ends the animations on `property` that `ends` picks, as `ending` says, keeping the others in
  /// their order. Allocation-free: index loops, compacted in place, a closure that does not escape.
  private func endInstances(
    of property: Property, ending: CompletionReport.Ending, where ends: (AnimationInstance) -> Bool
  ) {
    var kept = 0
    var index = 0
    while index < property.instances.count {
      let instance = property.instances[index]
      if ends(instance) {
        endEarly(instance, ending: ending)
      } else {
        if kept != index { property.instances[kept] = instance }
        kept += 1
      }
      index += 1
    }
    while property.instances.count > kept { property.instances.removeLast() }
    refreshSupersession(of: property)
  }

  // MARK: The composition rule

  /// Whether `prepared`, committed now, takes over `property` at once: one of its parts there is
  /// not additive and has begun. One that begins later supersedes at its begin (`advance`).
  private func supersedesNow(_ prepared: PreparedAnimation, on property: Property) -> Bool {
    var index = 0
    while index < prepared.parts.count {
      let instance = prepared.parts[index].instance
      if prepared.targets[index]! === property && !instance.isAdditive && instance.takeoverSample <= now { return true }
      index += 1
    }
    return false
  }

  /// Whether a change taking over now supersedes `instance`: a non-additive animation that has
  /// taken over already (one still waiting for its begin takes over after the change, and so
  /// supersedes it then).
  private func isSupersededNow(_ instance: AnimationInstance) -> Bool {
    !instance.isAdditive && instance.takeoverSample <= now
  }

  /// Ends, as superseded by animation `id` (nil: an instant model change), every non-additive
  /// animation on `property` that has taken over by now. Allocation-free.
  private func supersedeRunning(on property: Property, by id: UInt64?) {
    endInstances(of: property, ending: .superseded(by: id)) { isSupersededNow($0) }
  }

  /// The first sample at which an animation that supersedes `instances[index]` takes over
  /// (Int64.max: none does). Allocation-free.
  private static func supersededAt(_ index: Int, in instances: ContiguousArray<AnimationInstance>) -> Int64 {
    let instance = instances[index]
    var at = Int64.max
    guard !instance.isAdditive else { return at }
    var other = 0
    while other < instances.count {
      let later = instances[other]
      if other != index && later.takeoverSample < at && later.supersedes(instance) { at = later.takeoverSample }
      other += 1
    }
    return at
  }

  /// Works out, for every animation on `property`, where a later one supersedes it and which
  /// (`supersededSample`, `supersededBy`), after its animations changed: `evaluate` reads it at
  /// every block. Allocation-free.
  private func refreshSupersession(of property: Property) {
    var index = 0
    while index < property.instances.count {
      let instance = property.instances[index]
      instance.supersededSample = Self.supersededAt(index, in: property.instances)
      instance.supersededBy = Self.supersedingID(instance, in: property.instances)
      index += 1
    }
  }

  /// Ends the animations on `property` that a later one has superseded by now (one that began
  /// after its commit, or took over within the last block). One whose active time ran out first
  /// is left to end as finished (`advance`'s next step), and then goes quietly. Allocation-free.
  private func retireSuperseded(on property: Property) {
    guard property.instances.count > 1 else { return }
    var kept = 0
    var index = 0
    while index < property.instances.count {
      let instance = property.instances[index]
      let at = instance.supersededSample
      if at <= now && (at < instance.endSample || instance.ended) {
        endPart(instance, ending: .superseded(by: instance.supersededBy), sample: at)
        graveyard.append(instance)
      } else {
        if kept != index { property.instances[kept] = instance }
        kept += 1
      }
      index += 1
    }
    guard kept < property.instances.count else { return }
    while property.instances.count > kept { property.instances.removeLast() }
    refreshSupersession(of: property)
  }

  /// The id of the animation that supersedes `instance` first (at its `supersededSample`).
  private static func supersedingID(_ instance: AnimationInstance, in instances: ContiguousArray<AnimationInstance>)
    -> UInt64?
  {
    var other = 0
    while other < instances.count {
      let later = instances[other]
      if later.takeoverSample == instance.supersededSample && later.supersedes(instance) { return later.token.id }
      other += 1
    }
    return nil
  }

  private func endEarly(_ instance: AnimationInstance, ending: CompletionReport.Ending, sample: Int64? = nil) {
    graveyard.append(instance)
    endPart(instance, ending: ending, sample: sample ?? now)
  }

  /// Counts the end of one of an animation's instances (a group has one per part), and reports
  /// the animation when its last one ends: finished only if none ended early, else as the first
  /// that did (a part superseded on one key path ends the group's report there, though its
  /// parts elsewhere play on). Allocation-free.
  private func endPart(_ instance: AnimationInstance, ending: CompletionReport.Ending, sample: Int64) {
    guard !instance.ended else { return }
    instance.ended = true
    let token = instance.token
    if ending != .completed && token.earlyEnding == nil { token.earlyEnding = (ending, sample) }
    token.liveParts -= 1
    guard token.liveParts <= 0, !token.reported else { return }
    token.reported = true
    if let early = token.earlyEnding {
      queueReport(token, finished: false, sample: early.sample, ending: early.ending)
    } else {
      queueReport(token, finished: true, sample: sample, ending: .completed)
    }
  }

  private func queueReport(
    _ token: CompletionToken, finished: Bool, sample: Int64, ending: CompletionReport.Ending = .completed
  ) {
    reports.append(
      CompletionReport(
        id: token.id, key: token.key, keyPath: token.keyPath, finished: finished, sample: sample,
        isInternal: token.isInternal, ending: ending))
    retired.append(token)
  }
}
