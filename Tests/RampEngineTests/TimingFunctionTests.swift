import Testing

@testable import RampEngine

@Suite struct TimingFunctionTests {
  @Test func appleMeasuredValuesAtTwoThirds() throws {
    let cases: [(String, Double)] = [
      ("default", 0.926527), ("ease-in-out", 0.772850), ("ease-in", 0.515911), ("ease-out", 0.846581),
      ("cubic-bezier(0.1,1,1,0.2)", 0.589449),
    ]
    for (name, expected) in cases {
      let curve = try TimingFunction(parsing: name)
      #expect(abs(curve.value(at: 0.67) - expected) < 1e-5, "\(name) at 0.67")
    }
  }

  @Test func appleMeasuredValuesAtQuarters() throws {
    let cases: [(TimingFunction, [Double])] = [
      (.easeIn, [0.093465, 0.315357, 0.621861]),
      (.easeOut, [0.378140, 0.684643, 0.906535]),
      (.easeInEaseOut, [0.129162, 0.5, 0.870838]),
    ]
    for (curve, expected) in cases {
      for (x, y) in zip([0.25, 0.5, 0.75], expected) {
        #expect(abs(curve.value(at: x) - y) < 1e-5, "\(curve) at \(x)")
      }
    }
  }

  static let beziers: [(Double, Double, Double, Double)] = [
    (0.25, 0.1, 0.25, 1), (0.42, 0, 1, 1), (0, 0, 0.58, 1), (0.42, 0, 0.58, 1), (0.1, 1, 1, 0.2),
    (0, 1, 1, 0), (1, 0, 0, 1), (0, 0, 0, 1), (1, 0, 1, 1), (0, 0, 1, 0), (1, 1, 0, 0),
    (0.5, -0.5, 0.5, 1.5), (0.68, -0.55, 0.265, 1.55), (0.01, 0.99, 0.99, 0.01), (1, 1, 1, 1), (0, 0, 0, 0),
  ]

  /// Within 1e-6 of the exact curve everywhere, x = 0 and x = 1 included, in both the scalar
  /// solve and the batch fill the render thread uses.
  @Test(arguments: beziers)
  func matchesTheExactCurveEverywhere(_ points: (Double, Double, Double, Double)) throws {
    let (x1, y1, x2, y2) = points
    let curve = try TimingFunction.bezier(x1, y1, x2, y2)
    let n = 20_000
    var filled = [Double](repeating: .nan, count: n + 1)
    filled.withUnsafeMutableBufferPointer { curve.fill(x0: 0, dx: 1 / Double(n), count: n + 1, into: $0.baseAddress!) }
    var worstScalar = 0.0
    var worstFill = 0.0
    for i in 0...n {
      let x = Double(i) / Double(n)
      let exact = exactBezier(x1, y1, x2, y2, at: x)
      let scalar = curve.value(at: x)
      #expect(scalar.isFinite && filled[i].isFinite)
      worstScalar = max(worstScalar, abs(scalar - exact))
      worstFill = max(worstFill, abs(filled[i] - exact))
    }
    #expect(worstScalar <= 1e-6, "scalar solve of \(points) off by \(worstScalar)")
    #expect(worstFill <= 1e-6, "batch fill of \(points) off by \(worstFill)")
    #expect(curve.value(at: 0) == 0)
    #expect(abs(curve.value(at: 1) - 1) < 1e-12)
  }

  /// Runs that go backwards (autoreverse), start mid-curve, overshoot the ends or are a few
  /// samples long agree with the scalar solve.
  @Test func batchFillAgreesWithScalarForAnyRun() throws {
    let curve = try TimingFunction.bezier(0.68, -0.55, 0.265, 1.55)
    let runs: [(Double, Double, Int)] = [
      (1, -1e-4, 10_001), (0.3, 1e-5, 7), (0.9, 1e-3, 300), (-0.2, 1e-3, 1500), (0.5, 0, 9), (0.999, 1e-6, 3000),
    ]
    for (x0, dx, count) in runs {
      var filled = [Double](repeating: .nan, count: count)
      filled.withUnsafeMutableBufferPointer { curve.fill(x0: x0, dx: dx, count: count, into: $0.baseAddress!) }
      for i in 0..<count {
        #expect(abs(filled[i] - curve.value(at: x0 + Double(i) * dx)) < 1e-9, "run \(x0),\(dx) sample \(i)")
      }
    }
  }

  @Test func inputOutsideTheUnitIntervalIsClamped() throws {
    for name in ["ease-in", "cubic-bezier(0.1,1,1,0.2)", "steps(3)", "qsin", "exp"] {
      let curve = try TimingFunction(parsing: name)
      #expect(curve.value(at: -5) == curve.value(at: 0))
      #expect(curve.value(at: 7) == curve.value(at: 1))
      #expect(curve.value(at: .nan) == curve.value(at: 0))
      #expect(curve.value(at: -.infinity) == curve.value(at: 0))
      #expect(curve.value(at: .infinity) == curve.value(at: 1))
    }
  }

  @Test func cssSteps() throws {
    let end = try TimingFunction(parsing: "steps(4)")
    #expect(end.value(at: 0) == 0)
    #expect(end.value(at: 0.24) == 0)
    #expect(end.value(at: 0.25) == 0.25)
    #expect(end.value(at: 0.99) == 0.75)
    #expect(end.value(at: 1) == 1)
    let start = try TimingFunction(parsing: "steps(4, jump-start)")
    #expect(start.value(at: 0) == 0.25)
    #expect(start.value(at: 0.76) == 1)
    let none = try TimingFunction(parsing: "steps(5, jump-none)")
    #expect(none.value(at: 0) == 0)
    #expect(none.value(at: 0.2) == 0.25)
    #expect(none.value(at: 1) == 1)
    let both = try TimingFunction(parsing: "steps(3, jump-both)")
    #expect(both.value(at: 0) == 0.25)
    #expect(both.value(at: 0.5) == 0.5)
    #expect(both.value(at: 1) == 1)
    #expect(try TimingFunction(parsing: "step-start") == .steps(1, .jumpStart))
    #expect(try TimingFunction(parsing: "steps(2, end)") == .steps(2, .jumpEnd))
  }

  @Test func namesParseToCoreAnimationControlPoints() throws {
    #expect(try TimingFunction(parsing: "linear") == .cubicBezier(UnitBezier(0, 0, 1, 1)))
    #expect(try TimingFunction(parsing: "ease-in") == .cubicBezier(UnitBezier(0.42, 0, 1, 1)))
    #expect(try TimingFunction(parsing: "ease-out") == .cubicBezier(UnitBezier(0, 0, 0.58, 1)))
    #expect(try TimingFunction(parsing: "ease-in-out") == .cubicBezier(UnitBezier(0.42, 0, 0.58, 1)))
    #expect(try TimingFunction(parsing: "default") == .cubicBezier(UnitBezier(0.25, 0.1, 0.25, 1)))
    #expect(
      try TimingFunction(parsing: " Cubic-Bezier( 0.1 , 0.2,0.3 ,0.4 ) ")
        == .cubicBezier(UnitBezier(0.1, 0.2, 0.3, 0.4)))
    for shape in FadeShape.allCases {
      #expect(try TimingFunction(parsing: shape.rawValue) == .fade(shape))
    }
    // Names print back as they parse.
    for name in ["linear", "ease-in", "ease-out", "ease-in-out", "default", "steps(3,jump-none)", "qsin"] {
      #expect(try TimingFunction(parsing: name).description == name)
    }
  }

  @Test func malformedCurvesSayWhatIsWrong() {
    let cases: [(String, String, String)] = [
      ("cubic-bezier(2,0,1,1)", "cubic-bezier x1", "[0, 1]"),
      ("cubic-bezier(0,0,-0.5,1)", "cubic-bezier x2", "[0, 1]"),
      ("cubic-bezier(0,0,1)", "curve", "4 numbers"),
      ("cubic-bezier(0,nan,1,1)", "cubic-bezier y1", "finite"),
      ("cubic-bezier(0,abc,1,1)", "cubic-bezier y1", "finite"),
      ("steps(0)", "steps", "at least 1"),
      ("steps(1, jump-none)", "steps", "at least 2"),
      ("steps(2, sideways)", "steps position", "sideways"),
      ("steps(1.5)", "steps", "whole"),
      ("wobble", "curve", "unknown curve"),
      ("", "curve", "unknown curve"),
    ]
    for (text, field, fragment) in cases {
      do {
        _ = try TimingFunction(parsing: text)
        Issue.record("'\(text)' parsed")
      } catch {
        #expect(error.code == .invalidTimingFunction, "\(text)")
        #expect(error.field == field, "\(text): field \(String(describing: error.field))")
        #expect(error.message.contains(fragment), "\(text): \(error.message)")
      }
    }
  }

  /// Fade shapes mirror in time on a falling ramp (as afade=t=out); Béziers and steps do not.
  @Test func onlyFadeShapesMirrorOnFallingRamps() throws {
    for shape in FadeShape.allCases {
      let falling = TimingFunction.fade(shape).forRamp(falling: true)
      for x in stride(from: 0.0, through: 1.0, by: 0.05) {
        #expect(abs(falling.value(at: x) - (1 - shape.gain(1 - x))) < 1e-15)
        #expect(TimingFunction.fade(shape).forRamp(falling: false).value(at: x) == shape.gain(x))
      }
    }
    #expect(TimingFunction.easeIn.forRamp(falling: true) == .easeIn)
    #expect(TimingFunction.steps(3, .jumpEnd).forRamp(falling: true) == .steps(3, .jumpEnd))
  }

  @Test func fadeShapesRunFromSilenceToUnity() {
    for shape in FadeShape.allCases {
      #expect(abs(shape.gain(0)) < 1e-4, "\(shape) at 0: \(shape.gain(0))")
      #expect(abs(shape.gain(1) - 1) < 1e-12, "\(shape) at 1")
      for x in stride(from: 0.0, through: 1.0, by: 0.001) { #expect(shape.gain(x).isFinite) }
    }
  }
}
