/// What an animation computes once its time is known: the value at eased progress y.
enum Kernel: Sendable {
  /// `from`/`to` are in `space`.
  case basic(from: Double, to: Double, space: ValueSpace)
  case keyframes(KeyframeCurve, space: ValueSpace)
  /// `from`/`to` are in `space`; the spring runs in seconds over `duration`.
  case spring(SpringMotion, from: Double, to: Double, duration: Double, space: ValueSpace)
}

/// Shared by the instances one `add` creates (several for a group), so the completion is
/// reported once, with `finished` true when the active duration ends and false otherwise.
/// Prepared off the render thread with its id, and with its key path when the property is found
/// by handle, set when the engine commits it.
final class CompletionToken: @unchecked Sendable {
  var id: UInt64
  var key: String
  var keyPath: String
  let handler: (@Sendable (Bool) -> Void)?
  /// The engine's own (a removal's smoothing ramp), whatever its key: its report says so.
  let isInternal: Bool
  var reported = false
  /// Its instances that have not ended yet (a group's parts): it is reported when the last ends.
  var liveParts = 1
  /// How and when the first of its instances that ended early did (a part superseded on one key
  /// path while the others go on): the report says so, whenever the last part ends.
  var earlyEnding: (ending: CompletionReport.Ending, sample: Int64)?

  init(id: UInt64, key: String, keyPath: String, isInternal: Bool, handler: (@Sendable (Bool) -> Void)?) {
    self.id = id
    self.key = key
    self.keyPath = keyPath
    self.isInternal = isInternal
    self.handler = handler
  }
}

/// An animation compiled onto one property: its chain of timing levels (a group's first, the
/// animation's own last), the sample it begins at, and its kernel.
///
/// Compiled off the render thread; what depends on the moment it is committed (its begin, and
/// for from/to/by the values resolved against the presentation value then) is set by the commit.
final class AnimationInstance: @unchecked Sendable {
  var key: String
  let token: CompletionToken
  let levels: [TimingLevel]
  private(set) var beginSample: Int64
  /// The first sample at which the outermost active duration is over (Int64.max: never).
  private(set) var endSample: Int64
  /// The sample from which it takes over its property from the non-additive animations before
  /// it: its begin, or its commit when it began earlier (a late command, already under way).
  var takeoverSample: Int64 = 0
  /// Where a later animation on its property supersedes it (Int64.max: none does), kept up to
  /// date whenever the property's animations change (`AnimationEngine.refreshSupersession`).
  var supersededSample: Int64 = .max
  /// The id of the animation that supersedes it there.
  var supersededBy: UInt64?
  /// Its end was counted (its token's `liveParts`).
  var ended = false
  let removedOnCompletion: Bool
  let isAdditive: Bool
  var curve: TimingFunction
  var kernel: Kernel
  var cumulativeStep: Double
  /// A group curve bends time, so runs of linear time are one sample long.
  let sampleBySample: Bool
  /// Amplitude added as c·u(1−u)² over the first cycle (u its linear progress): it matches the
  /// slope of what was audible before this animation replaced it and fades out by the end.
  var slopeCorrection = 0.0

  init(
    key: String, token: CompletionToken, levels: [TimingLevel], beginSample: Int64, sampleRate: Double,
    removedOnCompletion: Bool, isAdditive: Bool, curve: TimingFunction, kernel: Kernel, cumulativeStep: Double
  ) {
    self.key = key
    self.token = token
    self.levels = levels
    self.beginSample = beginSample
    endSample = Self.end(of: levels, from: beginSample, sampleRate: sampleRate)
    self.removedOnCompletion = removedOnCompletion
    self.isAdditive = isAdditive
    self.curve = curve
    self.kernel = kernel
    self.cumulativeStep = cumulativeStep
    sampleBySample = levels.contains { $0.groupCurve != nil }
  }

  /// Begins at `sample` (set when it is committed).
  func place(at sample: Int64, sampleRate: Double) {
    beginSample = sample
    endSample = Self.end(of: levels, from: sample, sampleRate: sampleRate)
  }

  /// The first sample from `sample` on at which it is active (a group's part may begin after
  /// the group; one filled backwards is active before its begin), Int64.max if never: from there
  /// it takes over its property. Steps from one change of its timing to the next, as `render`
  /// does. Allocation-free.
  func firstActiveSample(from sample: Int64, sampleRate: Double) -> Int64 {
    var at = sample
    // A chain of timing levels changes state a handful of times before it is first active.
    for _ in 0..<64 {
      let span = span(at: Sample.seconds(from: beginSample, to: at, rate: sampleRate))
      if span.active { return at }
      guard span.length.isFinite else { return .max }
      at = Sample.add(at, Int64(max(1, Sample.count(span.length * sampleRate))))
    }
    return .max
  }

  /// Whether it supersedes `earlier` on their property (rampd's composition rule, which differs
  /// from Core Animation's): both non-additive, from different commands, and this one takes over
  /// later, or at the same sample and committed later. From its takeover on, `earlier` is not
  /// heard again, even after this one ends; an additive animation only ever adds.
  func supersedes(_ earlier: AnimationInstance) -> Bool {
    guard !isAdditive, !earlier.isAdditive, token !== earlier.token else { return false }
    return takeoverSample > earlier.takeoverSample
      || (takeoverSample == earlier.takeoverSample && token.id > earlier.token.id)
  }

  private static func end(of levels: [TimingLevel], from beginSample: Int64, sampleRate: Double) -> Int64 {
    let end = levels[0].activeEndInParent * sampleRate
    // Saturates: an end past Int64's range is an end that never comes.
    return end.isFinite && end < 9e18 ? Sample.add(beginSample, Int64(Sample.count(end))) : .max
  }

  /// Seconds of the innermost simple duration.
  var innerDuration: Double { levels[levels.count - 1].duration }

  /// Local progress at `seconds` after `beginSample`, composed through every level.
  func span(at seconds: Double) -> (active: Bool, x: Double, dxPerSecond: Double, iteration: Int, length: Double) {
    var parent = seconds
    var rate = 1.0
    var length = Double.infinity
    for index in levels.indices {
      let level = levels[index]
      let span = level.span(at: parent)
      length = min(length, rate == 0 ? .infinity : span.length / abs(rate))
      if !span.active { return (false, 0, 0, 0, length) }
      if index == levels.count - 1 {
        return (true, span.time / level.duration, rate * span.rate / level.duration, span.iteration, length)
      }
      if let groupCurve = level.groupCurve {
        parent = groupCurve.value(at: span.time / level.duration) * level.duration
        rate = 0
      } else {
        parent = span.time
        rate *= span.rate
      }
    }
    return (false, 0, 0, 0, length)
  }

  /// Writes (or, if additive, adds) this animation's value for samples [start, start+count)
  /// into `out`, leaving samples where it is inactive untouched. Returns whether it wrote any.
  /// Does not allocate.
  @discardableResult
  func render(
    start: Int64, count: Int, sampleRate: Double, into out: UnsafeMutablePointer<Double>,
    scratch: UnsafeMutablePointer<Double>
  ) -> Bool {
    var wrote = false
    var i = 0
    while i < count {
      let seconds = Sample.seconds(from: beginSample, to: Sample.add(start, Int64(i)), rate: sampleRate)
      let span = span(at: seconds)
      var run = count - i
      if sampleBySample {
        run = 1
      } else if span.length.isFinite {
        run = min(run, max(1, Sample.count(span.length * sampleRate)))
      }
      if span.active {
        wrote = true
        apply(
          x0: span.x, dx: span.dxPerSecond / sampleRate, count: run, iteration: span.iteration,
          into: out + i, scratch: scratch)
      }
      i += run
    }
    return wrote
  }

  private func apply(
    x0: Double, dx: Double, count: Int, iteration: Int, into out: UnsafeMutablePointer<Double>,
    scratch y: UnsafeMutablePointer<Double>
  ) {
    curve.fill(x0: x0, dx: dx, count: count, into: y)
    let offset = cumulativeStep == 0 ? 0 : Double(iteration) * cumulativeStep
    switch kernel {
    case .basic(let from, let to, .amplitude):
      let span = to - from
      for j in 0..<count { y[j] = from + span * y[j] + offset }
    case .basic(let from, let to, let space):
      let span = to - from
      for j in 0..<count { y[j] = space.decode(from + span * y[j]) + offset }
    case .keyframes(let keyframes, let space):
      var segment = 0
      for j in 0..<count { y[j] = space.decode(keyframes.value(at: y[j], segment: &segment)) + offset }
    case .spring(let motion, let from, let to, let duration, let space):
      let span = to - from
      // A curve that undershoots 0 would ask for the spring before it was released, where the
      // fast decaying root grows without bound: it is held at rest there.
      for j in 0..<count {
        let seconds = y[j] > 0 ? y[j] * duration : 0
        y[j] = space.decode(from + span * motion.progress(seconds)) + offset
      }
    }
    if slopeCorrection != 0 && iteration == 0 {
      for j in 0..<count {
        let u = x0 + Double(j) * dx
        if u > 0 && u < 1 { y[j] += slopeCorrection * u * (1 - u) * (1 - u) }
      }
    }
    if isAdditive {
      for j in 0..<count { out[j] += y[j] }
    } else {
      for j in 0..<count { out[j] = y[j] }
    }
  }
}

enum Sample {
  /// Samples in a span of `samples` (fractional): those at offsets j with j < samples, allowing
  /// for rounding so that a span of exactly N samples is N and not N + 1.
  @inline(__always) static func count(_ samples: Double) -> Int {
    let whole = (samples - 1e-7).rounded(.up)
    return whole >= Double(Int.max / 2) ? Int.max / 2 : max(Int(whole), 0)
  }

  /// `a + b`, held at Int64's ends instead of trapping: sample positions near the ends of the
  /// clock (a direct caller's extreme values) saturate.
  @inline(__always) static func add(_ a: Int64, _ b: Int64) -> Int64 {
    let (sum, overflow) = a.addingReportingOverflow(b)
    return overflow ? (b > 0 ? .max : .min) : sum
  }

  /// Seconds from sample `origin` to sample `sample`, for any two positions (a difference beyond
  /// Int64 is taken in Double).
  @inline(__always) static func seconds(from origin: Int64, to sample: Int64, rate: Double) -> Double {
    let (difference, overflow) = sample.subtractingReportingOverflow(origin)
    return (overflow ? Double(sample) - Double(origin) : Double(difference)) / rate
  }

  /// The sample nearest `seconds` at `rate`, held within Int64 (NaN: 0).
  static func position(_ seconds: Double, rate: Double) -> Int64 {
    let sample = (seconds * rate).rounded()
    guard !sample.isNaN else { return 0 }
    return Int64(min(max(sample, -9.2e18), 9.2e18))
  }
}
