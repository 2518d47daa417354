/// An animation of one float property, as Core Animation describes one: what it interpolates
/// (basic, keyframes, spring or a group of others), its media timing, its timing function,
/// whether it adds to the value beneath it, and the space it interpolates in.
///
/// This is a description: it holds no state. The engine compiles it when it is added,
/// capturing the presentation value at that moment.
public struct Animation: Sendable {
  public enum Content: Sendable {
    case basic(BasicAnimation)
    case keyframes(KeyframeAnimation)
    case spring(SpringAnimation)
    /// Children run in the group's local time and are clipped to its active duration.
    case group([Animation])
  }

  public var content: Content
  public var timing: MediaTiming
  /// Applied to each cycle's progress. Core Animation's default for explicit animations: linear.
  public var timingFunction: TimingFunction
  /// Adds the animated value to the value beneath instead of replacing it.
  public var isAdditive: Bool
  /// Each repeat cycle continues from where the previous one ended.
  public var isCumulative: Bool
  public var valueSpace: ValueSpace
  /// For a group's children: the key path animated (default: the group's own).
  public var keyPath: String?

  public init(
    _ content: Content, timing: MediaTiming = MediaTiming(), timingFunction: TimingFunction = .linear,
    additive: Bool = false, cumulative: Bool = false, valueSpace: ValueSpace = .amplitude,
    keyPath: String? = nil
  ) {
    self.content = content
    self.timing = timing
    self.timingFunction = timingFunction
    self.isAdditive = additive
    self.isCumulative = cumulative
    self.valueSpace = valueSpace
    self.keyPath = keyPath
  }

  /// `CABasicAnimation`: from/to/by resolved by Core Animation's table when added.
  public static func basic(
    from: Double? = nil, to: Double? = nil, by: Double? = nil, duration: Double = 0,
    timingFunction: TimingFunction = .linear
  ) -> Animation {
    Animation(
      .basic(BasicAnimation(from: from, to: to, by: by)), timing: MediaTiming(duration: duration),
      timingFunction: timingFunction)
  }

  /// `CAKeyframeAnimation` with evenly spaced (or given) key times.
  public static func keyframes(
    _ values: [Double], keyTimes: [Double]? = nil, duration: Double = 0,
    calculationMode: KeyframeAnimation.CalculationMode = .linear
  ) -> Animation {
    Animation(
      .keyframes(KeyframeAnimation(values: values, keyTimes: keyTimes, calculationMode: calculationMode)),
      timing: MediaTiming(duration: duration))
  }

  /// `CASpringAnimation` toward `to` (from the presentation value unless `from` is given).
  public static func spring(
    from: Double? = nil, to: Double? = nil, by: Double? = nil, parameters: SpringParameters = SpringParameters()
  ) -> Animation {
    Animation(.spring(SpringAnimation(from: from, to: to, by: by, parameters: parameters)))
  }

  public static func group(_ children: [Animation], duration: Double = 0) -> Animation {
    Animation(.group(children), timing: MediaTiming(duration: duration))
  }
}

public struct BasicAnimation: Sendable, Hashable {
  public var from: Double?
  public var to: Double?
  public var by: Double?

  public init(from: Double? = nil, to: Double? = nil, by: Double? = nil) {
    self.from = from
    self.to = to
    self.by = by
  }

  /// Core Animation's from/to/by table. `presentation` is the value audible when the animation
  /// is added (captured once), `model` the property's model value then.
  /// The ends as given: finite, at most two of them.
  static func checkGiven(_ from: Double?, _ to: Double?, _ by: Double?) throws(EngineError) {
    for (name, value) in [("from", from), ("to", to), ("by", by)] {
      if let value { try Check.finite(value, name) }
    }
    if from != nil, to != nil, by != nil {
      throw EngineError(.invalidAnimation, field: "by", "give at most two of from, to and by")
    }
  }

  func resolve(presentation: Double, model: Double) throws(EngineError) -> (from: Double, to: Double) {
    try Self.checkGiven(from, to, by)
    return ends(presentation: presentation, model: model)
  }

  /// `resolve` for ends already checked (when an animation is committed): allocation-free.
  func ends(presentation: Double, model: Double) -> (from: Double, to: Double) {
    switch (from, to, by) {
    case (let f?, let t?, nil): return (f, t)
    case (let f?, nil, let b?): return (f, f + b)
    case (nil, let t?, let b?): return (t - b, t)
    case (let f?, nil, nil): return (f, model)
    case (nil, let t?, nil): return (presentation, t)
    case (nil, nil, let b?): return (presentation, presentation + b)
    case (nil, nil, nil): return (presentation, model)
    case (.some, .some, .some): return (presentation, model)  // refused by checkGiven
    }
  }
}

public struct SpringAnimation: Sendable, Hashable {
  public var from: Double?
  public var to: Double?
  public var by: Double?
  public var parameters: SpringParameters

  public init(from: Double? = nil, to: Double? = nil, by: Double? = nil, parameters: SpringParameters) {
    self.from = from
    self.to = to
    self.by = by
    self.parameters = parameters
  }
}

public struct KeyframeAnimation: Sendable, Hashable {
  public enum CalculationMode: String, CaseIterable, Sendable {
    case linear, discrete, paced, cubic
  }

  public var values: [Double]
  /// Fractions of the duration, from 0 to 1, non-decreasing; one per value (for discrete, one
  /// more than the values is also accepted). Nil spaces the values evenly. Ignored when paced.
  public var keyTimes: [Double]?
  /// One per segment (values.count − 1). Ignored when paced.
  public var timingFunctions: [TimingFunction]?
  public var calculationMode: CalculationMode
  /// Kochanek–Bartels parameters for `cubic`, one per value (nil: all 0, Catmull-Rom).
  public var tensionValues: [Double]?
  public var continuityValues: [Double]?
  public var biasValues: [Double]?

  public init(
    values: [Double], keyTimes: [Double]? = nil, timingFunctions: [TimingFunction]? = nil,
    calculationMode: CalculationMode = .linear, tensionValues: [Double]? = nil,
    continuityValues: [Double]? = nil, biasValues: [Double]? = nil
  ) {
    self.values = values
    self.keyTimes = keyTimes
    self.timingFunctions = timingFunctions
    self.calculationMode = calculationMode
    self.tensionValues = tensionValues
    self.continuityValues = continuityValues
    self.biasValues = biasValues
  }
}
