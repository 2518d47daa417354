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

func exactBezier(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, at x: Double) -> Double {
  ReferenceBezier(x1, y1, x2, y2).value(at: x)
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
