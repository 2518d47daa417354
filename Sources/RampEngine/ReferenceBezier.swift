/// A slow, independent solve of a cubic Bézier timing curve, the yardstick the fast paths are
/// measured against in tests and benchmarks. t is found by 64 bisections on the sign of
/// x(t) − x evaluated in double-double arithmetic in the Bernstein form, so the root is right to
/// the last bit of t even where x(t) is flat and plain doubles lose it.
public struct ReferenceBezier: Sendable {
  let x1: Double
  let y1: Double
  let x2: Double
  let y2: Double

  public init(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double) {
    self.x1 = x1
    self.y1 = y1
    self.x2 = x2
    self.y2 = y2
  }

  public func value(at x: Double) -> Double {
    if !(x > 0) { return 0 }
    if x >= 1 { return 1 }
    var low = 0.0
    var high = 1.0
    for _ in 0..<64 {
      let mid = 0.5 * (low + high)
      if residualIsNegative(mid, x) { low = mid } else { high = mid }
    }
    let t = 0.5 * (low + high)
    return 3 * (1 - t) * (1 - t) * t * y1 + 3 * (1 - t) * t * t * y2 + t * t * t
  }

  private func residualIsNegative(_ t: Double, _ x: Double) -> Bool {
    let tw = Wide(t)
    let u = Wide(1).plus(Wide(-t))
    let first = Wide(3).times(u).times(u).times(tw).times(Wide(x1))
    let second = Wide(3).times(u).times(tw).times(tw).times(Wide(x2))
    let third = tw.times(tw).times(tw)
    let sum = first.plus(second).plus(third).plus(Wide(-x))
    return sum.hi < 0 || (sum.hi == 0 && sum.lo < 0)
  }
}

/// Double-double arithmetic for the reference solve, kept apart from `DoubleDouble` so the
/// yardstick shares no code with what it measures.
private struct Wide {
  var hi: Double
  var lo: Double

  init(_ hi: Double, _ lo: Double = 0) {
    let s = hi + lo
    self.hi = s
    self.lo = lo - (s - hi)
  }

  func plus(_ b: Wide) -> Wide {
    let s = hi + b.hi
    let v = s - hi
    let e = (hi - (s - v)) + (b.hi - v)
    return Wide(s, e + lo + b.lo)
  }

  func times(_ b: Wide) -> Wide {
    let p = hi * b.hi
    let e = (-p).addingProduct(hi, b.hi)
    return Wide(p, e + hi * b.lo + lo * b.hi)
  }
}
