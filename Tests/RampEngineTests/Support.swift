@testable import RampEngine

/// An engine with one unclamped property `p`, so tests see exactly what the animations compute.
func makeEngine(sampleRate: Double = 1000, model: Double = 0) throws -> AnimationEngine {
  let engine = try AnimationEngine(sampleRate: sampleRate)
  try engine.define("p", value: model, range: -Double.infinity...Double.infinity)
  return engine
}

/// Presentation values of `keyPath` for samples [start, start+count), through the render path.
func values(_ engine: AnimationEngine, _ keyPath: String = "p", from start: Int64 = 0, count: Int) throws -> [Double] {
  let handle = try engine.handle(keyPath)
  var out = [Double](repeating: .nan, count: count)
  out.withUnsafeMutableBufferPointer { engine.render(handle, start: start, count: count, into: $0.baseAddress!) }
  return out
}

func value(_ engine: AnimationEngine, _ keyPath: String = "p", at sample: Int64) throws -> Double {
  try values(engine, keyPath, from: sample, count: 1)[0]
}

/// The exact y of a cubic Bézier at x: an independent reference. t is found by bisection on
/// the sign of x(t) − x evaluated in double-double arithmetic in the Bernstein form, so the root
/// is right to the last bit of t even where x(t) is flat and plain doubles lose it.
func exactBezier(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, at x: Double) -> Double {
  if x <= 0 { return 0 }
  if x >= 1 { return 1 }
  func residualIsNegative(_ t: Double) -> Bool {
    let tw = Wide(t)
    let u = Wide(1).plus(Wide(-t))
    let first = Wide(3).times(u).times(u).times(tw).times(Wide(x1))
    let second = Wide(3).times(u).times(tw).times(tw).times(Wide(x2))
    let third = tw.times(tw).times(tw)
    let sum = first.plus(second).plus(third).plus(Wide(-x))
    return sum.hi < 0 || (sum.hi == 0 && sum.lo < 0)
  }
  var low = 0.0
  var high = 1.0
  for _ in 0..<64 {
    let mid = 0.5 * (low + high)
    if residualIsNegative(mid) { low = mid } else { high = mid }
  }
  let t = 0.5 * (low + high)
  return 3 * (1 - t) * (1 - t) * t * y1 + 3 * (1 - t) * t * t * y2 + t * t * t
}

/// Largest absolute difference between consecutive samples.
func largestStep(_ samples: [Double]) -> Double {
  zip(samples, samples.dropFirst()).map { abs($1 - $0) }.max() ?? 0
}

extension Animation {
  func with(_ change: (inout Animation) -> Void) -> Animation {
    var copy = self
    change(&copy)
    return copy
  }
}

/// Double-double arithmetic for the reference solve.
struct Wide {
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
