/// What the master's true-peak limiter keeps to (``TruePeakLimiter``): `[output] limiter`,
/// `limiter-lookahead` and `limiter-release`.
public struct LimiterSettings: Sendable, Equatable {
  /// False: no limiter, the mix is clamped to [−1, 1] as it goes out.
  public var enabled: Bool
  /// The highest true peak let out, dBTP (−1: EBU R 128's maximum for distribution).
  public var ceilingDecibels: Double
  /// Seconds the gain takes to come down before a peak: the output's latency is this plus 10
  /// frames. 1 ms by default: with a rewind's 3 ms margin, a change is still heard within 5 ms.
  public var lookAhead: Double
  /// Seconds the gain takes to recover 6.02 dB (a halving) once the peaks have passed.
  public var release: Double

  public static let ceilingRange = -20.0...0.0
  public static let lookAheadRange = 0.0005...0.02
  public static let releaseRange = 0.01...5.0

  public init(enabled: Bool = true, ceilingDecibels: Double = -1, lookAhead: Double = 0.001, release: Double = 0.1) {
    self.enabled = enabled
    self.ceilingDecibels = ceilingDecibels
    self.lookAhead = lookAhead
    self.release = release
  }

  /// Checks ranges; a message starts with the configuration key it concerns.
  public func validate() throws(AudioError) {
    let invalid = AudioError.invalidOutput
    if !ceilingDecibels.isFinite || !Self.ceilingRange.contains(ceilingDecibels) {
      throw invalid("limiter", "\(ceilingDecibels) dBTP is outside -20...0 dBTP")
    }
    if !lookAhead.isFinite || !Self.lookAheadRange.contains(lookAhead) {
      throw invalid("limiter-lookahead", "\(lookAhead) s is outside 0.0005...0.02 s")
    }
    if !release.isFinite || !Self.releaseRange.contains(release) {
      throw invalid("limiter-release", "\(release) s is outside 0.01...5 s")
    }
  }

  /// The limiter for a mix at `rate` with `channels`, with `checkpoints` slots for rewind; nil
  /// when not enabled.
  func limiter(rate: Int, channels: Int, checkpoints: Int) -> TruePeakLimiter? {
    guard enabled else { return nil }
    return TruePeakLimiter(
      rate: rate, channels: channels, ceilingDecibels: ceilingDecibels, lookAheadSeconds: lookAhead,
      releaseSeconds: release, checkpoints: checkpoints)
  }
}

/// What ``Player/limiter`` reports.
public struct LimiterReport: Sendable, Equatable {
  public var settings: LimiterSettings
  public var latencyFrames: Int
  public var reductionDecibels: Double
  public var engagements: Int
}

extension AudioError {
  /// An `[output]` key's value out of range: `output.<field>: <problem>`.
  static func invalidOutput(_ field: String, _ problem: String) -> AudioError {
    AudioError(.invalidParameter, section: "output", field: field, problem)
  }
}
