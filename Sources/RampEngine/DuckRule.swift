#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A duck rule: while its trigger is active, its targets (gain key paths) are lowered by `depth`
/// dB, reached over the attack; once the trigger has been inactive for `hold` seconds, they come
/// back over the release. The duck is a layer of its own, multiplied into the targets in the mix:
/// it never changes a target's model value, so a `set` or `fade` on the target goes on under it
/// and the release returns to whatever the model value is then.
///
/// Triggers, any of which makes the rule active:
/// - `trigger` alone: a stream whose id matches is playing (in the mix, neither paused nor
///   stopping). `voice` matches the stream `voice`; `voice*` every stream whose id starts `voice`.
/// - `trigger` with a `sidechain`: the matching streams' level (their sum as mixed, after their own
///   gains) is above the sidechain's threshold, by its detector.
/// - the `duck` command (until `unduck`), whatever the rule's trigger.
public struct DuckRule: Sendable, Equatable {
  /// A sidechain: the level detector that follows the trigger streams.
  public struct Sidechain: Sendable, Equatable {
    /// `peak`: active from the first sample at or above the threshold; inactive once no sample
    /// has reached threshold − hysteresis for `window` seconds. `rms`: the root mean square over
    /// the last `window` seconds (mean over the channels of each frame's square), active at or
    /// above the threshold, inactive below threshold − hysteresis.
    public enum Detector: String, Sendable, CaseIterable {
      case peak, rms
    }

    /// dBFS (0 dB is a full-scale sample, 1.0).
    public var threshold: Double
    public var detector: Detector
    /// Seconds, above 0 and at most `maximumWindow`.
    public var window: Double
    /// dB, not negative: how far below the threshold the level must fall to end the trigger.
    public var hysteresis: Double

    public static let defaultWindow = 0.05
    public static let defaultHysteresis = 6.0
    public static let maximumWindow = 5.0

    public init(
      threshold: Double, detector: Detector = .rms, window: Double = Sidechain.defaultWindow,
      hysteresis: Double = Sidechain.defaultHysteresis
    ) {
      self.threshold = threshold
      self.detector = detector
      self.window = window
      self.hysteresis = hysteresis
    }
  }

  public var name: String
  /// Gain key paths: `master.gain`, `streams.<id>.gain` (the stream need not be playing yet).
  public var targets: [String]
  /// A stream id, or a prefix followed by `*`; nil: only the `duck` command triggers the rule.
  public var trigger: String?
  public var sidechain: Sidechain?
  /// dB down, above 0 and at most `maximumDepth`.
  public var depth: Double
  public var attack: Double
  public var attackCurve: TimingFunction
  public var hold: Double
  public var release: Double
  public var releaseCurve: TimingFunction

  public static let defaultDepth = 12.0
  public static let maximumDepth = 120.0
  public static let defaultAttack = 0.2
  public static let defaultHold = 0.5
  public static let defaultRelease = 1.0
  public static let defaultCurve = TimingFunction.easeInEaseOut
  /// Targets one rule may name.
  public static let maximumTargets = 16

  public init(
    name: String, targets: [String], trigger: String? = nil, sidechain: Sidechain? = nil,
    depth: Double = DuckRule.defaultDepth, attack: Double = DuckRule.defaultAttack,
    attackCurve: TimingFunction = DuckRule.defaultCurve, hold: Double = DuckRule.defaultHold,
    release: Double = DuckRule.defaultRelease, releaseCurve: TimingFunction = DuckRule.defaultCurve
  ) {
    self.name = name
    self.targets = targets
    self.trigger = trigger
    self.sidechain = sidechain
    self.depth = depth
    self.attack = attack
    self.attackCurve = attackCurve
    self.hold = hold
    self.release = release
    self.releaseCurve = releaseCurve
  }

  /// The gain the targets are multiplied by at full depth.
  public var factor: Double { pow(10, -depth / 20) }

  /// Checks what the fields cannot say alone: the error names the field.
  public func validate() throws(EngineError) {
    guard !targets.isEmpty else { throw EngineError(.invalidValue, field: "targets", "name at least one gain") }
    guard targets.count <= Self.maximumTargets else {
      throw EngineError(
        .invalidValue, field: "targets", "at most \(Self.maximumTargets) targets, got \(targets.count)")
    }
    for (index, target) in targets.enumerated() {
      let parts = target.split(separator: ".", omittingEmptySubsequences: false)
      let isGain = target == "master.gain" || (parts.count == 3 && parts[0] == "streams" && parts[2] == "gain")
      guard isGain else {
        throw EngineError(
          .invalidValue, field: "targets[\(index)]", "a duck lowers master.gain or streams.<id>.gain, not \(target)")
      }
      if targets[..<index].contains(target) {
        throw EngineError(.invalidValue, field: "targets[\(index)]", "\(target) is named twice")
      }
    }
    if let trigger {
      let name = trigger.utf8.last == UInt8(ascii: "*") ? trigger.utf8.dropLast() : trigger.utf8[...]
      guard !name.isEmpty, name.count <= 64, name.allSatisfy(KeyPath.isNameByte) else {
        throw EngineError(
          .invalidValue, field: "trigger",
          "expected a stream id, or the start of one followed by *, such as voice*; got \"\(trigger)\"")
      }
    }
    guard depth > 0, depth <= Self.maximumDepth else {
      throw EngineError(
        .outOfRange, field: "depth", "must be above 0 and at most \(Int(Self.maximumDepth)) dB, got \(depth)")
    }
    guard let sidechain else { return }
    guard trigger != nil else {
      throw EngineError(.invalidValue, field: "threshold", "a sidechain needs trigger: the streams it listens to")
    }
    guard sidechain.threshold <= 0, sidechain.threshold >= -Self.maximumDepth else {
      throw EngineError(
        .outOfRange, field: "threshold",
        "must be a level in dBFS from -\(Int(Self.maximumDepth)) to 0, got \(sidechain.threshold)")
    }
    guard sidechain.window > 0, sidechain.window <= Sidechain.maximumWindow else {
      throw EngineError(
        .outOfRange, field: "window",
        "must be above 0 and at most \(Sidechain.maximumWindow) s, got \(sidechain.window)")
    }
    guard sidechain.hysteresis >= 0, sidechain.hysteresis <= Self.maximumDepth else {
      throw EngineError(
        .outOfRange, field: "hysteresis",
        "must be from 0 to \(Int(Self.maximumDepth)) dB, got \(sidechain.hysteresis)")
    }
  }
}

/// A level ramping from one value to another over a whole number of samples along a timing
/// function, as a basic animation in amplitude space does: plain data, evaluated without
/// allocating, so a render thread can start, retarget and read it. A retarget starts from the
/// value at that sample, so nothing jumps.
public struct DuckEnvelope: Sendable, Equatable {
  public private(set) var from: Double
  public private(set) var to: Double
  /// The sample the ramp starts at, and its length in samples (0: at `to` from `begin` on).
  public private(set) var begin: Int64 = 0
  public private(set) var frames: Int64 = 0
  private var curve: TimingFunction = .linear

  public init(level: Double = 1) {
    from = level
    to = level
  }

  /// The sample the ramp ends at: from there the level is exactly `to`.
  public var end: Int64 { begin + frames }

  /// The level at `sample`: `from` before the ramp, `from + (to − from)·curve(k / frames)` at
  /// its k-th sample, exactly `to` from its end on.
  @inline(__always) public func value(at sample: Int64) -> Double {
    if sample >= begin + frames { return to }
    if sample <= begin { return from }
    return from + (to - from) * curve.value(at: Double(sample - begin) / Double(frames))
  }

  /// Ramps to `level` over `frames` samples from `sample`, starting from the level there. A fade
  /// shape mirrors in time when the level falls, as a fade does.
  public mutating func ramp(to level: Double, frames: Int64, curve: TimingFunction, at sample: Int64) {
    let start = value(at: sample)
    from = start
    to = level
    begin = sample
    self.frames = max(frames, 0)
    self.curve = curve.forRamp(falling: level < start)
  }

  /// Makes the ramp end by `last` at the latest: one that would end later goes on from its level
  /// at `sample` (at or after its start) along its curve, to the same level, reached at `last`
  /// (at once when `last` is not after `sample`). A ramp that ends by then is left as it is.
  public mutating func end(by last: Int64, at sample: Int64) {
    guard begin + frames > last else { return }
    from = value(at: sample)
    begin = sample
    frames = max(last - sample, 0)
  }

  /// Whether the level holds still over [start, start + count).
  @inline(__always) public func isResting(from start: Int64) -> Bool { start >= begin + frames }

  /// Multiplies `out[0..<count]` by the level at samples [start, start + count). Allocation-free.
  public func multiply(start: Int64, count: Int, into out: UnsafeMutablePointer<Float>) {
    var i = 0
    while i < count {
      out[i] *= Float(value(at: start + Int64(i)))
      i += 1
    }
  }
}
