/// What an animation does before it begins and after it ends (`CAMediaTimingFillMode`).
public enum FillMode: String, CaseIterable, Sendable {
  case removed, forwards, backwards, both

  var fillsBackwards: Bool { self == .backwards || self == .both }
  var fillsForwards: Bool { self == .forwards || self == .both }
}

/// Core Animation's `CAMediaTiming`: how an animation's local time follows its parent's.
///
/// Local time is t = (t_parent − beginTime)·speed + timeOffset. The active duration is
/// `repeatDuration` when set, else `repeatCount` (fractional or infinite; 0 means 1) cycles of
/// `duration`, a cycle being twice the duration when `autoreverses`. As in Core Animation,
/// `timeOffset` shifts the phase within the active duration, wrapping around a cycle.
public struct MediaTiming: Sendable, Hashable {
  /// Seconds. At the top level, absolute engine time (nil: the sample at which the animation
  /// is added); inside a group, relative to the group's local time (nil: 0).
  public var beginTime: Double?
  /// Seconds; 0 means the transaction's default (a spring's settling duration, a group's
  /// longest child).
  public var duration: Double
  public var speed: Double
  public var timeOffset: Double
  public var repeatCount: Double
  public var repeatDuration: Double
  public var autoreverses: Bool
  public var fillMode: FillMode
  public var removedOnCompletion: Bool

  public init(
    beginTime: Double? = nil, duration: Double = 0, speed: Double = 1, timeOffset: Double = 0,
    repeatCount: Double = 0, repeatDuration: Double = 0, autoreverses: Bool = false,
    fillMode: FillMode = .removed, removedOnCompletion: Bool = true
  ) {
    self.beginTime = beginTime
    self.duration = duration
    self.speed = speed
    self.timeOffset = timeOffset
    self.repeatCount = repeatCount
    self.repeatDuration = repeatDuration
    self.autoreverses = autoreverses
    self.fillMode = fillMode
    self.removedOnCompletion = removedOnCompletion
  }

  /// The longest span of time, in seconds, the engine takes: begin times (from now, or within a
  /// group), durations, time offsets and finite repeat durations beyond it are refused, so sample
  /// positions stay far inside Int64 at any sample rate up to 10 MHz. About 31.7 years.
  public static let horizon = 1e9

  /// `isTopLevel`: the begin time is absolute, and is checked against the horizon from the
  /// engine's clock by the engine (`AnimationEngine.add`); inside a group it is relative.
  func validate(_ prefix: String, isTopLevel: Bool) throws(EngineError) {
    if let beginTime {
      try Check.finite(beginTime, prefix + "beginTime")
      if !isTopLevel { try Check.withinHorizon(beginTime, prefix + "beginTime") }
    }
    try Check.nonNegative(duration, prefix + "duration")
    try Check.withinHorizon(duration, prefix + "duration")
    try Check.nonNegative(speed, prefix + "speed")
    try Check.finite(timeOffset, prefix + "timeOffset")
    try Check.withinHorizon(timeOffset, prefix + "timeOffset")
    try Check.nonNegativeOrInfinite(repeatCount, prefix + "repeatCount")
    try Check.nonNegativeOrInfinite(repeatDuration, prefix + "repeatDuration")
    if repeatDuration.isFinite { try Check.withinHorizon(repeatDuration, prefix + "repeatDuration") }
    if repeatCount > 0 && repeatDuration > 0 {
      throw EngineError(
        .invalidAnimation, field: prefix + "repeatDuration", "set repeatCount or repeatDuration, not both")
    }
  }
}

/// A `MediaTiming` with its duration resolved, ready to map parent time to local time.
struct TimingLevel: Sendable {
  let begin: Double
  let duration: Double
  let speed: Double
  let timeOffset: Double
  let cycle: Double
  let activeDuration: Double
  let autoreverses: Bool
  let fillMode: FillMode
  /// A group's own timing function, applied to its local time before its children see it.
  let groupCurve: TimingFunction?

  init(_ timing: MediaTiming, duration: Double, begin: Double, groupCurve: TimingFunction? = nil) {
    self.begin = begin
    self.duration = duration
    speed = timing.speed
    timeOffset = timing.timeOffset
    autoreverses = timing.autoreverses
    cycle = timing.autoreverses ? 2 * duration : duration
    if timing.repeatDuration > 0 {
      activeDuration = timing.repeatDuration
    } else if timing.repeatCount > 0 {
      activeDuration = timing.repeatCount * cycle
    } else {
      activeDuration = cycle
    }
    fillMode = timing.fillMode
    self.groupCurve = groupCurve?.isLinear == true ? nil : groupCurve
  }

  /// Parent seconds from `begin` until the active duration ends (infinite if it never does).
  var activeEndInParent: Double {
    if speed == 0 || activeDuration.isInfinite { return .infinity }
    return begin + activeDuration / speed
  }

  /// Where local time stands at parent time `parent`, and for how long it keeps moving linearly.
  func span(at parent: Double) -> Span {
    if parent < begin {
      let wait = begin - parent
      guard fillMode.fillsBackwards else { return .inactive(for: wait) }
      let start = position(elapsed: 0, atEnd: false)
      return Span(active: true, time: start.time, rate: 0, length: wait, iteration: start.iteration)
    }
    let elapsed = speed == 0 ? 0 : (parent - begin) * speed
    if elapsed >= activeDuration {
      guard fillMode.fillsForwards else { return .inactive(for: .infinity) }
      let end = position(elapsed: activeDuration, atEnd: true)
      return Span(active: true, time: end.time, rate: 0, length: .infinity, iteration: end.iteration)
    }
    let here = position(elapsed: elapsed, atEnd: false)
    if speed == 0 {
      return Span(active: true, time: here.time, rate: 0, length: .infinity, iteration: here.iteration)
    }
    let remaining = min(here.remaining, activeDuration - elapsed)
    return Span(
      active: true, time: here.time, rate: here.forward ? speed : -speed, length: remaining / speed,
      iteration: here.iteration)
  }

  private func position(elapsed: Double, atEnd: Bool)
    -> (time: Double, forward: Bool, remaining: Double, iteration: Int)
  {
    let phase = elapsed + timeOffset
    var iteration = (phase / cycle).rounded(.down)
    var within = phase - iteration * cycle
    // At the very end of a whole number of cycles, stay at the end of the last one.
    if atEnd && within <= cycle * 1e-12 && phase > 0 {
      iteration -= 1
      within = cycle
    }
    let index = iteration.isFinite ? Int(max(min(iteration, 1e15), -1e15)) : 0
    if within < duration || (!autoreverses && within <= duration) {
      return (min(within, duration), true, duration - within, index)
    }
    return (cycle - within, false, cycle - within, index)
  }
}

/// A stretch of parent time over which local time moves at a constant rate.
struct Span: Sendable {
  var active: Bool
  /// Local time within the current simple duration, in [0, duration].
  var time: Double
  /// d(local time)/d(parent time): ±speed, or 0 while filling.
  var rate: Double
  /// Parent seconds this holds for.
  var length: Double
  /// The cycle index, for cumulative animations.
  var iteration: Int

  static func inactive(for length: Double) -> Span {
    Span(active: false, time: 0, rate: 0, length: length, iteration: 0)
  }
}
