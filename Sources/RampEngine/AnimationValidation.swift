extension Animation {
  /// Refuses what the engine would refuse about this animation for its own sake, before it is
  /// added anywhere: timing, curves, keyframes, spring parameters, the value space and the ends
  /// it names, a group and each of its children (fields under `animations[i].`).
  ///
  /// What depends on an engine's state is left to `AnimationEngine.add`: the key paths, the
  /// limits, the values a missing `from` or `to` resolves to, the begin time against its clock.
  public func validate() throws(EngineError) {
    // A top-level begin time is absolute: `AnimationEngine.add` checks it against the horizon
    // from its own clock.
    try validate(prefix: "")
  }

  func validate(prefix: String) throws(EngineError) {
    try timing.validate(prefix, isTopLevel: prefix.isEmpty)
    try timingFunction.validate(field: prefix + "timingFunction")
    if case .decibels(let floor?) = valueSpace {
      guard floor.isFinite, floor < 0 else {
        throw EngineError(
          .invalidValue, field: prefix + "space", "the dB floor must be a finite negative number, got \(floor)")
      }
    }
    // Errors from the content's own checks name fields relative to the content.
    func within(_ error: EngineError) -> EngineError {
      EngineError(error.code, field: error.field.map { prefix + $0 } ?? prefix.dropLastDot, error.message)
    }
    switch content {
    case .basic(let basic):
      do throws(EngineError) {
        try Self.checkEnds(basic.from, basic.to, basic.by, space: valueSpace)
      } catch { throw within(error) }
    case .keyframes(let keyframes):
      for (index, curve) in (keyframes.timingFunctions ?? []).enumerated() {
        try curve.validate(field: "\(prefix)timingFunctions[\(index)]")
      }
      do throws(EngineError) {
        if valueSpace.needsNonNegativeValues, let negative = keyframes.values.first(where: { $0 < 0 }) {
          throw EngineError(
            .invalidAnimation, field: "space", "\(valueSpace) needs non-negative values, got \(negative)")
        }
        _ = try KeyframeCurve(keyframes, space: valueSpace)
      } catch { throw within(error) }
    case .spring(let spring):
      do throws(EngineError) {
        try spring.parameters.validate()
        try Self.checkEnds(spring.from, spring.to, spring.by, space: valueSpace)
      } catch { throw within(error) }
    case .group(let children):
      guard !children.isEmpty else {
        throw EngineError(.invalidAnimation, field: prefix + "animations", "a group needs at least one animation")
      }
      for (index, child) in children.enumerated() {
        try child.validate(prefix: "\(prefix)animations[\(index)].")
      }
    }
  }

  /// The ends an animation names: finite, at most two of them, not negative where the space
  /// needs non-negative values. A missing end resolves against the engine's state when added.
  private static func checkEnds(_ from: Double?, _ to: Double?, _ by: Double?, space: ValueSpace)
    throws(EngineError)
  {
    try BasicAnimation.checkGiven(from, to, by)
    guard space.needsNonNegativeValues else { return }
    // The ends known without the engine's state; a missing one is checked when the animation is added.
    let ends: [Double]
    switch (from, to, by) {
    case (let f?, let t?, nil): ends = [f, t]
    case (let f?, nil, let b?): ends = [f, f + b]
    case (nil, let t?, let b?): ends = [t - b, t]
    default: ends = [from, to].compactMap { $0 }
    }
    if ends.contains(where: { $0 < 0 }) {
      let values = ends.map { "\($0)" }.joined(separator: " and ")
      throw EngineError(.invalidAnimation, field: "space", "\(space) needs non-negative values, got \(values)")
    }
  }
}

extension ValueSpace {
  /// Power and decibel spaces encode magnitudes: their values must not be negative.
  var needsNonNegativeValues: Bool {
    switch self {
    case .power, .decibels: return true
    default: return false
    }
  }
}

extension String {
  fileprivate var dropLastDot: String? {
    isEmpty ? nil : String(hasSuffix(".") ? dropLast() : self[...])
  }
}
