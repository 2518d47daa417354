/// An animation compiled for one `add`, off the thread that owns the engine: its instances
/// (several for a group), each bound to its property's key path, with from/to/by still to be
/// resolved against the presentation value when the engine commits it
/// (`AnimationEngine.commit`). Compiling reads no engine state, so any thread may do it; the
/// commit allocates nothing. Committed once.
public final class PreparedAnimation: @unchecked Sendable {
  /// The name it is added under (`declick` for a removal's smoothing ramp, which is named
  /// `declick-<id>` when committed and is internal: the name is for `list`, not a reserved prefix).
  public let key: String
  /// The key path it animates ("" when it is committed to a property by handle).
  public let keyPath: String
  let continuity: Continuity
  let token: CompletionToken
  let parts: ContiguousArray<Part>
  let begin: Begin
  let namedByID: Bool
  /// Named by id: `declick-`, in room reserved here for any id's digits, which the commit writes.
  private var idName = ""
  /// Each part's property, found by the commit (the storage is reserved here).
  var targets: ContiguousArray<Property?>
  public internal(set) var isCommitted = false
  /// Once committed: the sample it begins at, if it animates its own key path (a group's children
  /// may all animate others).
  public internal(set) var beginOnOwnProperty: Int64?

  /// When it begins: at the commit, at an absolute time on the engine's clock (seconds), or
  /// seconds after the commit (negative: already under way).
  public enum Begin: Sendable {
    case now
    case absolute(Double)
    case afterCommit(Double)
  }

  /// One instance, the key path of its property (nil: the animation's own), and the field a
  /// missing key path is reported under.
  struct Part {
    let keyPath: String?
    let field: String
    let instance: AnimationInstance
    let ends: Ends
  }

  /// What the commit resolves: the ends of a basic or spring animation (keyframes are fixed).
  enum Ends {
    case fixed
    case basic(BasicAnimation, space: ValueSpace, curve: TimingFunction, cumulative: Bool)
    case spring(SpringMotion, BasicAnimation, duration: Double, space: ValueSpace, cumulative: Bool)
  }

  /// Compiles `animation` for `keyPath` under `key`. `defaultDuration`: what a duration of 0
  /// stands for (the implicit transaction's); `begin` overrides the animation's own beginTime,
  /// which is otherwise absolute. `isInternal`: its completion report says it is not a client's
  /// (`CompletionReport.isInternal`), whatever its key.
  public convenience init(
    _ animation: Animation, forKey key: String, to keyPath: String, continuity: Continuity = .value,
    begin: Begin? = nil, isInternal: Bool = false, sampleRate: Double, defaultDuration: Double,
    completion: (@Sendable (Bool) -> Void)? = nil
  ) throws(EngineError) {
    try self.init(
      animation, forKey: key, to: keyPath, continuity: continuity, begin: begin, namedByID: false,
      isInternal: isInternal, sampleRate: sampleRate, defaultDuration: defaultDuration, completion: completion)
  }

  init(
    _ animation: Animation, forKey key: String, to keyPath: String, continuity: Continuity, begin: Begin?,
    namedByID: Bool, isInternal: Bool = false, sampleRate: Double, defaultDuration: Double,
    completion: (@Sendable (Bool) -> Void)?
  ) throws(EngineError) {
    guard !key.isEmpty else {
      throw EngineError(.invalidAnimation, field: "name", "an animation key must not be empty")
    }
    try animation.validate()
    self.key = key
    self.keyPath = keyPath
    self.continuity = continuity
    self.namedByID = namedByID
    if namedByID {
      idName = key + "-"
      idName.reserveCapacity(idName.utf8.count + 20)
    }
    self.begin = begin ?? animation.timing.beginTime.map { .absolute($0) } ?? .now
    let token = CompletionToken(
      id: 0, key: key, keyPath: keyPath, isInternal: isInternal || namedByID, handler: completion)
    self.token = token
    var compiler = Compiler(sampleRate: sampleRate, defaultDuration: defaultDuration, token: token)
    try compiler.compile(animation, keyPath: nil, field: "key", at: "", outer: [])
    parts = compiler.parts
    targets = ContiguousArray(repeating: nil, count: compiler.parts.count)
  }

  /// The implicit animation a model change to `value` gets under `transaction` (nil: the change
  /// is instant), from the presentation value at the commit.
  public static func implicitAction(
    to value: Double, on keyPath: String, transaction: Transaction, sampleRate: Double
  ) throws(EngineError) -> PreparedAnimation? {
    try Check.nonNegative(transaction.duration, "duration")
    try Check.withinHorizon(transaction.duration, "duration")
    try transaction.timingFunction.validate()
    if transaction.disableActions || transaction.duration == 0 { return nil }
    var action = Animation(
      .basic(BasicAnimation(to: value)), timing: MediaTiming(duration: transaction.duration),
      timingFunction: transaction.timingFunction, valueSpace: transaction.valueSpace)
    action.timing.fillMode = .removed
    return try PreparedAnimation(
      action, forKey: AnimationEngine.implicitActionKey, to: keyPath, continuity: transaction.continuity,
      sampleRate: sampleRate, defaultDuration: 0, completion: transaction.completion)
  }

  /// The additive ramp that smooths the jump a removal makes, over `seconds` (nil: none): from
  /// the jump (given at the commit) to 0, named `declick-<id>`.
  public static func declickRamp(seconds: Double, sampleRate: Double) throws(EngineError) -> PreparedAnimation? {
    try Check.nonNegative(seconds, "declick")
    try Check.withinHorizon(seconds, "declick")
    guard seconds > 0 else { return nil }
    var ramp = Animation.basic(to: 0, duration: seconds)
    ramp.isAdditive = true
    return try PreparedAnimation(
      ramp, forKey: "declick", to: "", continuity: .value, begin: nil, namedByID: true, sampleRate: sampleRate,
      defaultDuration: 0, completion: nil)
  }

  /// Its name by `id` (`declick-<id>`), written into the room reserved off the render thread:
  /// allocation-free for any id.
  func name(byID id: UInt64) -> String {
    var divisor: UInt64 = 1
    while id / divisor >= 10 { divisor *= 10 }
    var rest = id
    while divisor > 0 {
      idName.unicodeScalars.append(Unicode.Scalar(UInt8(truncatingIfNeeded: 48 + rest / divisor)))
      rest %= divisor
      divisor /= 10
    }
    return idName
  }

  /// Builds the instances of an animation and its children, depth first.
  private struct Compiler {
    let sampleRate: Double
    let defaultDuration: Double
    let token: CompletionToken
    var parts: ContiguousArray<Part> = []

    init(sampleRate: Double, defaultDuration: Double, token: CompletionToken) {
      self.sampleRate = sampleRate
      self.defaultDuration = defaultDuration
      self.token = token
    }

    private var defaultDurationOrOneSample: Double {
      defaultDuration > 0 ? defaultDuration : 1 / sampleRate
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
            let level = TimingLevel(
              child.timing, duration: resolvedDuration(child), begin: child.timing.beginTime ?? 0)
            return level.activeEndInParent
          }.max() ?? 0
        return end.isFinite && end > 0 ? end : defaultDurationOrOneSample
      default:
        return defaultDurationOrOneSample
      }
    }

    /// `field`: the request field naming the key path its parts animate; `path`: where the
    /// animation is in the outermost one (`animations[1].`), for its children's fields.
    mutating func compile(
      _ animation: Animation, keyPath: String?, field: String, at path: String, outer: [TimingLevel],
      outermostRemovedOnCompletion: Bool? = nil
    ) throws(EngineError) {
      let duration = resolvedDuration(animation)
      let begin = outer.isEmpty ? 0 : (animation.timing.beginTime ?? 0)
      // Only the outermost animation decides whether it is removed when its active time ends.
      let removedOnCompletion = outermostRemovedOnCompletion ?? animation.timing.removedOnCompletion
      let space = animation.valueSpace
      if case .group(let children) = animation.content {
        let level = TimingLevel(
          animation.timing, duration: duration, begin: begin, groupCurve: animation.timingFunction)
        for (index, child) in children.enumerated() {
          let childPath = "\(path)animations[\(index)]."
          try compile(
            child, keyPath: child.keyPath ?? keyPath, field: child.keyPath == nil ? field : childPath + "keyPath",
            at: childPath, outer: outer + [level], outermostRemovedOnCompletion: removedOnCompletion)
        }
        return
      }
      let levels = outer + [TimingLevel(animation.timing, duration: duration, begin: begin)]
      let cumulative = animation.isCumulative && !animation.timing.autoreverses
      var kernel = Kernel.basic(from: 0, to: 0, space: space)
      var step = 0.0
      let ends: Ends
      switch animation.content {
      case .basic(let basic):
        try BasicAnimation.checkGiven(basic.from, basic.to, basic.by)
        ends = .basic(basic, space: space, curve: animation.timingFunction, cumulative: cumulative)
      case .keyframes(let keyframes):
        let compiledCurve = try KeyframeCurve(keyframes, space: space)
        kernel = .keyframes(compiledCurve, space: space)
        step = cumulative ? space.decode(compiledCurve.last) - space.decode(compiledCurve.first) : 0
        ends = .fixed
      case .spring(let spring):
        try spring.parameters.validate()
        try BasicAnimation.checkGiven(spring.from, spring.to, spring.by)
        ends = .spring(
          SpringMotion(spring.parameters), BasicAnimation(from: spring.from, to: spring.to, by: spring.by),
          duration: duration, space: space, cumulative: cumulative)
      case .group:
        return
      }
      let instance = AnimationInstance(
        key: token.key, token: token, levels: levels, beginSample: 0, sampleRate: sampleRate,
        removedOnCompletion: removedOnCompletion, isAdditive: animation.isAdditive, curve: animation.timingFunction,
        kernel: kernel, cumulativeStep: step)
      parts.append(Part(keyPath: keyPath, field: field, instance: instance, ends: ends))
    }
  }
}
