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
}

/// Core Animation's model, rebuilt for audio: a tree of float properties addressed by key
/// paths, each with a model value and a presentation value computed per sample from the
/// animations added to it, on a clock that counts samples.
///
/// The engine belongs to one thread. Mutations (`set`, `add`, `remove…`) may allocate; the
/// evaluation path (`render`, `advance`) does not, so a render thread can own the engine and
/// apply mutations between blocks. Completion reports and retired animations wait in
/// preallocated buffers until `drainCompletions` runs them on the caller's side.
public final class AnimationEngine {
  public let sampleRate: Double
  public let maxBlockSize: Int
  public let maxAnimationsPerKeyPath: Int
  /// The sample the next block starts at: the engine's "now".
  public private(set) var now: Int64 = 0
  /// The transaction `set` uses when it is given none.
  public var defaultTransaction = Transaction()

  public static let implicitActionKey = "implicit"

  private var properties: [String: Property] = [:]
  private var ordered: ContiguousArray<Property> = []
  private var nextID: UInt64 = 1
  private let scratch: UnsafeMutablePointer<Double>
  private let block: UnsafeMutablePointer<Double>
  private var reports: [CompletionReport] = []
  private var retired: [CompletionToken] = []
  private var graveyard: ContiguousArray<AnimationInstance> = []

  public init(sampleRate: Double, maxBlockSize: Int = 4096, maxAnimationsPerKeyPath: Int = 64) throws(EngineError) {
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
    scratch = .allocate(capacity: maxBlockSize)
    block = .allocate(capacity: maxBlockSize)
    reports.reserveCapacity(1024)
    retired.reserveCapacity(1024)
    graveyard.reserveCapacity(1024)
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
    try KeyPath.validate(keyPath)
    try Check.finite(value, "value")
    guard !range.lowerBound.isNaN, !range.upperBound.isNaN else {
      throw EngineError(.invalidValue, field: "range", "must not contain NaN")
    }
    guard range.contains(value) else {
      throw EngineError(.outOfRange, field: "value", "\(value) is outside \(keyPath)'s range \(range)")
    }
    if let existing = properties[keyPath] {
      removeProperty(existing)
    }
    let property = Property(keyPath: keyPath, model: value, range: range, capacity: maxAnimationsPerKeyPath)
    properties[keyPath] = property
    ordered.append(property)
    return PropertyHandle(property: property)
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
    var index = 0
    while index < property.instances.count {
      endEarly(property.instances[index])
      index += 1
    }
    property.instances.removeAll(keepingCapacity: true)
    properties.removeValue(forKey: property.keyPath)
    // Index loops, not `removeAll(where:)`: unspecialised in a debug build, it allocates.
    index = 0
    while index < ordered.count {
      if ordered[index] === property {
        ordered.remove(at: index)
        break
      }
      index += 1
    }
  }

  public var keyPaths: [String] { ordered.map(\.keyPath) }

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
      throw EngineError(.unknownKeyPath, field: "key", "no property '\(keyPath)'")
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

  /// Changes the model value. Unless actions are disabled (or the duration is 0), an implicit
  /// animation runs from the presentation value to the new model value, replacing the previous
  /// implicit one: the latest command wins and nothing jumps.
  @discardableResult
  public func set(_ keyPath: String, to value: Double, transaction: Transaction? = nil) throws(EngineError)
    -> UInt64?
  {
    let property = try property(keyPath)
    try Check.finite(value, "value")
    guard property.range.contains(value) else {
      throw EngineError(
        .outOfRange, field: "value", "\(value) is outside \(keyPath)'s range \(property.range)")
    }
    let transaction = transaction ?? defaultTransaction
    try Check.nonNegative(transaction.duration, "duration")
    try Check.withinHorizon(transaction.duration, "duration")
    try transaction.timingFunction.validate()
    if transaction.disableActions || transaction.duration == 0 {
      removeInstances(of: property, key: Self.implicitActionKey)
      property.model = value
      return nil
    }
    var action = Animation(
      .basic(BasicAnimation()), timing: MediaTiming(duration: transaction.duration),
      timingFunction: transaction.timingFunction, valueSpace: transaction.valueSpace)
    action.timing.fillMode = .removed
    let from = self.value(of: property, at: now)
    action.content = .basic(BasicAnimation(from: from, to: value))
    property.model = value
    return try add(
      action, forKey: Self.implicitActionKey, to: keyPath, continuity: transaction.continuity,
      completion: transaction.completion)
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
    let target = try property(keyPath)
    try animation.validate()
    let beginSample: Int64
    if let begin = animation.timing.beginTime {
      // Absolute: within the horizon of the engine's clock, now (a millisecond's leeway for the
      // rounding of a caller's relative time plus the clock).
      try Check.withinHorizon(begin - Double(now) / sampleRate, "beginTime", shown: begin, slack: 1e-3)
      beginSample = Sample.position(begin, rate: sampleRate)
    } else {
      beginSample = now
    }
    let id = nextID
    let token = CompletionToken(id: id, key: key, keyPath: keyPath, handler: completion)
    var compiled: [(Property, AnimationInstance)] = []
    try compile(animation, on: target, outer: [], beginSample: beginSample, token: token, into: &compiled)

    // Check limits before changing anything, so a refused add leaves the engine as it was.
    var counts: [ObjectIdentifier: Int] = [:]
    for (property, _) in compiled {
      let id = ObjectIdentifier(property)
      if counts[id] == nil { counts[id] = property.instances.count { $0.key != key } }
      counts[id]! += 1
      if counts[id]! > maxAnimationsPerKeyPath {
        throw EngineError(
          .limitExceeded, field: "key",
          "\(property.keyPath) already has \(maxAnimationsPerKeyPath) animations, the most allowed")
      }
    }
    nextID += 1

    // The slope audible just before this change, for slope continuity.
    let oldSlope =
      continuity == .slope ? value(of: target, at: now) - value(of: target, at: Sample.add(now, -1)) : 0
    var touched: [Property] = []
    for (property, _) in compiled where !touched.contains(where: { $0 === property }) {
      removeInstances(of: property, key: key)
      touched.append(property)
    }
    for (property, instance) in compiled { property.instances.append(instance) }

    if continuity == .slope, compiled.count == 1, let instance = compiled.first?.1, !instance.isAdditive,
      instance.levels.count == 1, beginSample == now
    {
      let newSlope = value(of: target, at: Sample.add(now, 1)) - value(of: target, at: now)
      let samples = instance.innerDuration * sampleRate / max(instance.levels[0].speed, 1e-12)
      if samples >= 2 { instance.slopeCorrection = (oldSlope - newSlope) * samples }
    }
    return id
  }

  /// Removes the animation under `key` from `keyPath`. With `declick` seconds, the jump this
  /// would make is smoothed by an additive ramp from the difference to 0, so nothing clicks.
  public func removeAnimation(forKey key: String, from keyPath: String, declick: Double = 0) throws(EngineError) {
    let property = try property(keyPath)
    try Check.nonNegative(declick, "declick")
    try Check.withinHorizon(declick, "declick")
    guard property.instances.contains(where: { $0.key == key }) else {
      throw EngineError(.unknownAnimation, field: "name", "no animation '\(key)' on \(keyPath)")
    }
    let before = value(of: property, at: now)
    removeInstances(of: property, key: key)
    smoothJump(on: property, from: before, over: declick)
  }

  /// Removes every animation on `keyPath`, smoothing the jump over `declick` seconds.
  public func removeAllAnimations(from keyPath: String, declick: Double = 0) throws(EngineError) {
    let property = try property(keyPath)
    try Check.nonNegative(declick, "declick")
    try Check.withinHorizon(declick, "declick")
    let before = value(of: property, at: now)
    for instance in property.instances { endEarly(instance) }
    property.instances.removeAll(keepingCapacity: true)
    smoothJump(on: property, from: before, over: declick)
  }

  /// Holds the audible value: it becomes the model value and every animation is dropped.
  public func cancel(_ keyPath: String) throws(EngineError) {
    let property = try property(keyPath)
    let held = value(of: property, at: now)
    for instance in property.instances { endEarly(instance) }
    property.instances.removeAll(keepingCapacity: true)
    property.model = min(max(held, property.range.lowerBound), property.range.upperBound)
  }

  private func smoothJump(on property: Property, from before: Double, over seconds: Double) {
    guard seconds > 0 else { return }
    let after = value(of: property, at: now)
    let jump = before - after
    guard jump != 0, jump.isFinite else { return }
    var ramp = Animation.basic(from: jump, to: 0, duration: seconds)
    ramp.isAdditive = true
    let key = "declick-\(nextID)"
    _ = try? add(ramp, forKey: key, to: property.keyPath)
  }

  /// The animations in flight on `keyPath`, in the order they apply.
  public func animations(on keyPath: String) throws(EngineError) -> [AnimationStatus] {
    let property = try property(keyPath)
    return property.instances.map { instance in
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
  private func evaluate(_ property: Property, start: Int64, count: Int, into out: UnsafeMutablePointer<Double>)
    -> Bool
  {
    out.update(repeating: property.model, count: count)
    var touched = false
    // Non-additive animations replace the value in the order added; additive ones sum on top.
    // Index loops, not for-in: an unspecialised iterator allocates in a debug build.
    let instances = property.instances
    for pass in 0..<2 {
      var index = 0
      while index < instances.count {
        let instance = instances[index]
        if instance.isAdditive == (pass == 1) {
          touched =
            instance.render(start: start, count: count, sampleRate: sampleRate, into: out, scratch: scratch) || touched
        }
        index += 1
      }
    }
    if !touched {
      out[0] = min(max(property.model, property.range.lowerBound), property.range.upperBound)
      return false
    }
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

  /// Moves the clock forward by `count` samples and retires what has ended: each completion is
  /// queued (finished: true) and animations removed on completion are set aside. Does not
  /// allocate as long as fewer than 1024 reports wait to be drained.
  public func advance(by count: Int) {
    now = Sample.add(now, Int64(count))
    var propertyIndex = 0
    while propertyIndex < ordered.count {
      let property = ordered[propertyIndex]
      propertyIndex += 1
      var index = property.instances.count - 1
      while index >= 0 {
        let instance = property.instances[index]
        if instance.endSample <= now {
          if !instance.token.reported {
            instance.token.reported = true
            queueReport(instance.token, finished: true, sample: instance.endSample)
          }
          if instance.removedOnCompletion {
            graveyard.append(instance)
            property.instances.remove(at: index)
          }
        }
        index -= 1
      }
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

  private func removeInstances(of property: Property, key: String) {
    for instance in property.instances where instance.key == key { endEarly(instance) }
    property.instances.removeAll { $0.key == key }
  }

  private func endEarly(_ instance: AnimationInstance) {
    graveyard.append(instance)
    guard !instance.token.reported else { return }
    instance.token.reported = true
    queueReport(instance.token, finished: false, sample: now)
  }

  private func queueReport(_ token: CompletionToken, finished: Bool, sample: Int64) {
    reports.append(
      CompletionReport(id: token.id, key: token.key, keyPath: token.keyPath, finished: finished, sample: sample))
    retired.append(token)
  }

  /// The duration `MediaTiming.duration == 0` stands for.
  private func resolvedDuration(_ animation: Animation) -> Double {
    if animation.timing.duration > 0 { return animation.timing.duration }
    switch animation.content {
    case .spring(let spring):
      let settling = spring.parameters.settlingDuration
      return settling.isFinite && settling > 0 ? settling : defaultDurationOrOneSample
    case .group(let children):
      // A group without a duration lasts as long as its longest child.
      let end =
        children.map { child -> Double in
          let level = TimingLevel(child.timing, duration: resolvedDuration(child), begin: child.timing.beginTime ?? 0)
          return level.activeEndInParent
        }.max() ?? 0
      return end.isFinite && end > 0 ? end : defaultDurationOrOneSample
    default:
      return defaultDurationOrOneSample
    }
  }

  private var defaultDurationOrOneSample: Double {
    defaultTransaction.duration > 0 ? defaultTransaction.duration : 1 / sampleRate
  }

  private func compile(
    _ animation: Animation, on property: Property, outer: [TimingLevel], beginSample: Int64, token: CompletionToken,
    outermostRemovedOnCompletion: Bool? = nil, into compiled: inout [(Property, AnimationInstance)]
  ) throws(EngineError) {
    let duration = resolvedDuration(animation)
    let begin = outer.isEmpty ? 0 : (animation.timing.beginTime ?? 0)
    // Only the outermost animation decides whether it is removed when its active time ends.
    let removedOnCompletion = outermostRemovedOnCompletion ?? animation.timing.removedOnCompletion
    let space = animation.valueSpace

    if case .group(let children) = animation.content {
      let level = TimingLevel(animation.timing, duration: duration, begin: begin, groupCurve: animation.timingFunction)
      for (index, child) in children.enumerated() {
        var target = property
        if let path = child.keyPath {
          do { target = try self.property(path) } catch {
            throw EngineError(error.code, field: "animations[\(index)].keyPath", error.message)
          }
        }
        try compile(
          child, on: target, outer: outer + [level], beginSample: beginSample, token: token,
          outermostRemovedOnCompletion: removedOnCompletion, into: &compiled)
      }
      return
    }

    let level = TimingLevel(animation.timing, duration: duration, begin: begin)
    let levels = outer + [level]
    // Additive animations are deltas on the value beneath, so "presentation" and "model" are 0.
    let presentation = animation.isAdditive ? 0 : value(of: property, at: now)
    let model = animation.isAdditive ? 0 : property.model
    let kernel: Kernel
    var curve = animation.timingFunction
    var step = 0.0
    switch animation.content {
    case .basic(let basic):
      let (from, to) = try basic.resolve(presentation: presentation, model: model)
      if space.needsNonNegativeValues {
        guard from >= 0, to >= 0 else {
          throw EngineError(
            .invalidAnimation, field: "space", "\(space) needs non-negative values, got \(from) and \(to)")
        }
      }
      kernel = .basic(from: space.encode(from), to: space.encode(to), space: space)
      curve = curve.forRamp(falling: to < from)
      step = to - from
    case .keyframes(let keyframes):
      let compiledCurve = try KeyframeCurve(keyframes, space: space)
      kernel = .keyframes(compiledCurve, space: space)
      step = space.decode(compiledCurve.last) - space.decode(compiledCurve.first)
    case .spring(let spring):
      try spring.parameters.validate()
      let (from, to) = try BasicAnimation(from: spring.from, to: spring.to, by: spring.by)
        .resolve(presentation: presentation, model: model)
      if space.needsNonNegativeValues {
        guard from >= 0, to >= 0 else {
          throw EngineError(
            .invalidAnimation, field: "space", "\(space) needs non-negative values, got \(from) and \(to)")
        }
      }
      kernel = .spring(
        SpringMotion(spring.parameters), from: space.encode(from), to: space.encode(to), duration: duration,
        space: space)
      step = to - from
    case .group:
      return
    }
    if !animation.isCumulative || animation.timing.autoreverses { step = 0 }
    let instance = AnimationInstance(
      key: token.key, token: token, levels: levels, beginSample: beginSample, sampleRate: sampleRate,
      removedOnCompletion: removedOnCompletion, isAdditive: animation.isAdditive, curve: curve, kernel: kernel,
      cumulativeStep: step)
    compiled.append((property, instance))
  }
}
