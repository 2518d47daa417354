/// A cubic Bézier from (0,0) to (1,1) with control points (x1,y1) and (x2,y2), the curve behind
/// `CAMediaTimingFunction` and CSS `cubic-bezier()`.
///
/// Solving x(t) = x is the whole cost of a timing function, so it is done two ways:
/// `value(at:)` solves robustly (Newton, then bisection when Newton leaves the interval or
/// stalls), and `fill` solves a run of evenly spaced inputs, warm-starting each sample from the
/// one four places earlier so that one predictor and one Newton correction usually suffice.
/// Any sample whose correction is not tiny is re-solved robustly, so both paths agree with the
/// exact curve to well under 1e-9.
public struct UnitBezier: Sendable, Hashable {
  public let x1: Double
  public let y1: Double
  public let x2: Double
  public let y2: Double

  // Power-basis coefficients: x(t) = ((ax·t + bx)·t + cx)·t, likewise y.
  @usableFromInline let ax: Double
  @usableFromInline let bx: Double
  @usableFromInline let cx: Double
  @usableFromInline let ay: Double
  @usableFromInline let by: Double
  @usableFromInline let cy: Double

  /// Control points as given; x1 and x2 must lie in [0, 1] (checked by `TimingFunction`).
  public init(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double) {
    self.x1 = x1
    self.y1 = y1
    self.x2 = x2
    self.y2 = y2
    cx = 3 * x1
    bx = 3 * (x2 - x1) - cx
    ax = 1 - cx - bx
    cy = 3 * y1
    by = 3 * (y2 - y1) - cy
    ay = 1 - cy - by
  }

  public static func == (a: UnitBezier, b: UnitBezier) -> Bool {
    a.x1 == b.x1 && a.y1 == b.y1 && a.x2 == b.x2 && a.y2 == b.y2
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(x1)
    hasher.combine(y1)
    hasher.combine(x2)
    hasher.combine(y2)
  }

  @inlinable func curveX(_ t: Double) -> Double { ((ax * t + bx) * t + cx) * t }
  @inlinable func curveY(_ t: Double) -> Double { ((ay * t + by) * t + cy) * t }
  @inlinable func slopeX(_ t: Double) -> Double { (3 * ax * t + 2 * bx) * t + cx }

  /// The parameter t with x(t) = x, for x in [0, 1].
  public func solveT(forX x: Double, guess: Double? = nil) -> Double {
    if x <= 0 { return 0 }
    if x >= 1 { return 1 }
    var t = min(max(guess ?? x, 0), 1)
    for _ in 0..<8 {
      let error = curveX(t) - x
      if abs(error) < 1e-15 { return polished(t, forX: x) }
      let slope = slopeX(t)
      if abs(slope) < 1e-12 { break }
      let next = t - error / slope
      if !(next >= 0 && next <= 1) { break }
      t = next
    }
    // Bisection: x(t) is monotonic because x1 and x2 lie in [0, 1].
    var low = 0.0
    var high = 1.0
    t = x
    for _ in 0..<64 {
      let value = curveX(t)
      if value == x { break }
      if value < x { low = t } else { high = t }
      let next = 0.5 * (low + high)
      if next == t { break }
      t = next
    }
    return polished(t, forX: x)
  }

  /// Where x(t) is nearly flat, rounding in x(t) − x (half an ulp of x) moves the root by its
  /// cube root, far more than 1e-6 in y. There the root is refined with the residual computed
  /// in double-double arithmetic, which pins t to the nearest double.
  private func polished(_ t: Double, forX x: Double) -> Double {
    guard abs(slopeX(t)) < 1e-6 else { return t }
    let a = DoubleDouble.one - cxExact - bxExact
    func above(_ t: Double) -> Bool {
      (((a * t + bxExact) * t + cxExact) * t - x).sign > 0
    }
    var low = max(t - 1e-4, 0)
    var high = min(t + 1e-4, 1)
    if above(low) { low = 0 }
    if !above(high) { high = 1 }
    for _ in 0..<80 {
      let mid = 0.5 * (low + high)
      if mid == low || mid == high { break }
      if above(mid) { high = mid } else { low = mid }
    }
    return 0.5 * (low + high)
  }

  private var cxExact: DoubleDouble { DoubleDouble.product(3, x1) }
  private var bxExact: DoubleDouble {
    DoubleDouble.sum(x2, -x1) * 3 - cxExact
  }

  /// y at x, clamped to the curve's ends outside [0, 1] (Apple's behaviour).
  public func value(at x: Double) -> Double {
    if !(x > 0) { return 0 }
    if x >= 1 { return 1 }
    return curveY(solveT(forX: x))
  }

  /// Writes y(x0 + i·dx) for i in 0..<count. Does not allocate.
  public func fill(x0: Double, dx: Double, count: Int, into y: UnsafeMutablePointer<Double>) {
    var i = 0
    // Lanes: sample i is predicted from sample i-4, so four independent chains overlap in the CPU.
    let lanes = 4
    var t = SIMD4<Double>(repeating: 0)
    var inverseSlope = SIMD4<Double>(repeating: 0)
    var previousX = SIMD4<Double>(repeating: 0)
    let warmUp = min(count, lanes)
    while i < warmUp {
      let x = Self.clampUnit(x0 + Double(i) * dx)
      let ti = solveT(forX: x)
      t[i] = ti
      previousX[i] = x
      let s = slopeX(ti)
      inverseSlope[i] = s > 1e-6 ? 1 / s : 0
      y[i] = x <= 0 ? 0 : (x >= 1 ? 1 : curveY(ti))
      i += 1
    }
    typealias Lanes = SIMD4<Double>
    let laneOffsets = Lanes(0, 1, 2, 3)
    let zero = Lanes(repeating: 0)
    let one = Lanes(repeating: 1)
    let ax4 = Lanes(repeating: ax)
    let bx4 = Lanes(repeating: bx)
    let cx4 = Lanes(repeating: cx)
    let ay4 = Lanes(repeating: ay)
    let by4 = Lanes(repeating: by)
    let cy4 = Lanes(repeating: cy)
    let ax3 = Lanes(repeating: 3 * ax)
    let bx2 = Lanes(repeating: 2 * bx)
    let tolerance = Lanes(repeating: 1e-8)
    let tinySlope = Lanes(repeating: 1e-6)
    while i + lanes <= count {
      let index: Lanes = Lanes(repeating: Double(i)) + laneOffsets
      var x: Lanes = Lanes(repeating: x0) + index * dx
      x = x.clamped(lowerBound: zero, upperBound: one)
      // Predictor: one Newton step from the previous lane's solution, whose x we know exactly.
      let delta: Lanes = x - previousX
      var tn: Lanes = t + delta * inverseSlope
      // Corrector: one Newton step at the predicted point.
      var px: Lanes = ax4 * tn + bx4
      px = px * tn + cx4
      let residual: Lanes = px * tn - x
      var slope: Lanes = ax3 * tn + bx2
      slope = slope * tn + cx4
      let step: Lanes = residual / slope
      tn = tn - step
      let negativeTolerance = zero - tolerance
      var suspicious = (step .> tolerance) .| (step .< negativeTolerance)
      suspicious .|= (slope .< tinySlope)
      suspicious .|= (tn .< zero)
      suspicious .|= (tn .> one)
      suspicious .|= (inverseSlope .== zero)
      if any(suspicious) {
        for lane in 0..<lanes where suspicious[lane] {
          tn[lane] = solveT(forX: x[lane], guess: t[lane])
        }
        for lane in 0..<lanes {
          let exact = slopeX(tn[lane])
          inverseSlope[lane] = exact > 1e-6 ? 1 / exact : 0
        }
      } else {
        inverseSlope = one / slope
      }
      var out: Lanes = ay4 * tn + by4
      out = out * tn + cy4
      out = out * tn
      // The curve passes exactly through (0,0) and (1,1).
      out.replace(with: zero, where: x .<= zero)
      out.replace(with: one, where: x .>= one)
      y[i] = out[0]
      y[i + 1] = out[1]
      y[i + 2] = out[2]
      y[i + 3] = out[3]
      t = tn
      previousX = x
      i += lanes
    }
    while i < count {
      let x = Self.clampUnit(x0 + Double(i) * dx)
      y[i] = value(at: x)
      i += 1
    }
  }

  @inline(__always) static func clampUnit(_ x: Double) -> Double {
    x > 0 ? (x < 1 ? x : 1) : 0
  }
}

/// A double-double number (hi + lo, |lo| ≤ ulp(hi)/2): about 106 bits, enough to evaluate a
/// cubic's residual exactly where the cubic is flat.
struct DoubleDouble {
  var hi: Double
  var lo: Double

  static let one = DoubleDouble(hi: 1, lo: 0)

  static func sum(_ a: Double, _ b: Double) -> DoubleDouble {
    let s = a + b
    let bb = s - a
    return DoubleDouble(hi: s, lo: (a - (s - bb)) + (b - bb))
  }

  static func product(_ a: Double, _ b: Double) -> DoubleDouble {
    let p = a * b
    return DoubleDouble(hi: p, lo: (-p).addingProduct(a, b))
  }

  private static func normalized(_ hi: Double, _ lo: Double) -> DoubleDouble {
    let s = hi + lo
    return DoubleDouble(hi: s, lo: lo - (s - hi))
  }

  static func + (a: DoubleDouble, b: DoubleDouble) -> DoubleDouble {
    let s = sum(a.hi, b.hi)
    return normalized(s.hi, s.lo + a.lo + b.lo)
  }

  static prefix func - (a: DoubleDouble) -> DoubleDouble { DoubleDouble(hi: -a.hi, lo: -a.lo) }
  static func - (a: DoubleDouble, b: DoubleDouble) -> DoubleDouble { a + (-b) }
  static func - (a: DoubleDouble, b: Double) -> DoubleDouble { a + DoubleDouble(hi: -b, lo: 0) }

  static func * (a: DoubleDouble, b: Double) -> DoubleDouble {
    let p = product(a.hi, b)
    return normalized(p.hi, p.lo + a.lo * b)
  }

  var sign: Double { hi != 0 ? hi : lo }
}
