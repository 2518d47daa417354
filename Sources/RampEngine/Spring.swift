#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The physical parameters of `CASpringAnimation`, or the perceptual (duration, bounce) form.
public struct SpringParameters: Sendable, Hashable {
  public var mass: Double
  public var stiffness: Double
  public var damping: Double
  /// Initial velocity in units of the animation's distance per second, positive toward the target.
  public var initialVelocity: Double
  /// When false, as in Core Animation, a damping ratio above 1 is treated as critical damping.
  public var allowsOverdamping: Bool

  public init(
    mass: Double = 1, stiffness: Double = 100, damping: Double = 10, initialVelocity: Double = 0,
    allowsOverdamping: Bool = false
  ) {
    self.mass = mass
    self.stiffness = stiffness
    self.damping = damping
    self.initialVelocity = initialVelocity
    self.allowsOverdamping = allowsOverdamping
  }

  /// The perceptual form (SwiftUI's `Spring(duration:bounce:)`): `duration` is the period of the
  /// undamped oscillation; `bounce` 0 is critically damped, toward 1 bouncier, below 0 overdamped.
  public static func perceptual(duration: Double, bounce: Double = 0, initialVelocity: Double = 0)
    throws(EngineError) -> SpringParameters
  {
    try Check.positive(duration, "duration")
    try Check.finite(bounce, "bounce")
    guard bounce > -1, bounce < 1 else {
      throw EngineError(.invalidValue, field: "bounce", "must be greater than -1 and less than 1, got \(bounce)")
    }
    let stiffness = (2 * Double.pi / duration) * (2 * Double.pi / duration)
    // A duration such as 1e-320 or 1e308 makes the stiffness overflow or vanish: say so of the
    // duration, the field given, not of the stiffness derived from it.
    guard stiffness.isFinite, stiffness > 0 else {
      throw EngineError(.invalidValue, field: "duration", "\(duration) s is too short or too long for a spring")
    }
    let ratio = bounce >= 0 ? 1 - bounce : 1 / (1 + bounce)
    return SpringParameters(
      mass: 1, stiffness: stiffness, damping: 4 * .pi * ratio / duration,
      initialVelocity: initialVelocity, allowsOverdamping: true)
  }

  func validate() throws(EngineError) {
    try Check.positiveNormal(mass, "mass")
    try Check.positiveNormal(stiffness, "stiffness")
    try Check.nonNegative(damping, "damping")
    try Check.finite(initialVelocity, "initialVelocity")
  }

  /// Seconds until the motion stays within 0.1 % of the distance (infinite when undamped).
  public var settlingDuration: Double { SpringMotion(self).settlingDuration }
}

/// The closed-form solution of m·x'' + c·x' + k·x = 0 for progress from 0 toward 1.
struct SpringMotion: Sendable {
  enum Regime: Sendable {
    case underdamped(decay: Double, frequency: Double, a: Double, b: Double)
    case critical(rate: Double, a: Double, b: Double)
    case overdamped(r1: Double, r2: Double, c1: Double, c2: Double)
  }

  let regime: Regime
  static let settleThreshold = 1e-3

  init(_ p: SpringParameters) {
    let omega = (p.stiffness / p.mass).squareRoot()
    var zeta = p.damping / (2 * (p.stiffness * p.mass).squareRoot())
    if !p.allowsOverdamping { zeta = min(zeta, 1) }
    let v0 = p.initialVelocity
    // q = progress − 1 starts at −1 with velocity v0.
    if abs(zeta - 1) < 1e-9 {
      regime = .critical(rate: omega, a: -1, b: v0 - omega)
    } else if zeta < 1 {
      let frequency = omega * (1 - zeta * zeta).squareRoot()
      regime = .underdamped(decay: zeta * omega, frequency: frequency, a: -1, b: (v0 - zeta * omega) / frequency)
    } else {
      let root = (zeta * zeta - 1).squareRoot()
      let r1 = -omega * (zeta - root)
      let r2 = -omega * (zeta + root)
      let c2 = (v0 + r1) / (r2 - r1)
      regime = .overdamped(r1: r1, r2: r2, c1: -1 - c2, c2: c2)
    }
  }

  /// Progress at `t` seconds: 0 at t = 0, settling at 1.
  @inline(__always) func progress(_ t: Double) -> Double {
    switch regime {
    case .underdamped(let decay, let frequency, let a, let b):
      return 1 + exp(-decay * t) * (a * cos(frequency * t) + b * sin(frequency * t))
    case .critical(let rate, let a, let b):
      return 1 + exp(-rate * t) * (a + b * t)
    case .overdamped(let r1, let r2, let c1, let c2):
      return 1 + c1 * exp(r1 * t) + c2 * exp(r2 * t)
    }
  }

  var settlingDuration: Double {
    switch regime {
    case .underdamped(let decay, _, let a, let b):
      guard decay > 0 else { return .infinity }
      // The envelope bounds |q|, so once it is under the threshold the motion is too.
      let amplitude = (a * a + b * b).squareRoot()
      return max(0, log(amplitude / Self.settleThreshold) / decay)
    case .critical, .overdamped:
      // |q| decays monotonically after at most one crossing: find the last time it is above.
      var high = 1.0
      while abs(progress(high) - 1) > Self.settleThreshold || abs(progress(high * 1.5) - 1) > Self.settleThreshold {
        high *= 2
        if high > 1e7 { return .infinity }
      }
      // Scan for the last stretch above the threshold, then bisect within it.
      let steps = 2000
      var low = 0.0
      for step in stride(from: steps, through: 0, by: -1) {
        let t = high * Double(step) / Double(steps)
        if abs(progress(t) - 1) > Self.settleThreshold {
          low = t
          high = high * Double(step + 1) / Double(steps)
          break
        }
      }
      for _ in 0..<60 {
        let mid = 0.5 * (low + high)
        if abs(progress(mid) - 1) > Self.settleThreshold { low = mid } else { high = mid }
      }
      return high
    }
  }
}
