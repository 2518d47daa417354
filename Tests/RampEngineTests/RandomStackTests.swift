import PropertyBased
import Testing

@testable import RampEngine

/// Builds animations from a list of numbers in [0, 1], so PropertyBased can generate and shrink
/// them: every number picks a kind, a curve, a duration, a timing option or a value, reaching
/// the extremes (durations of a microsecond or a day, infinite repeats, speed 0, overshooting
/// curves, dB and power spaces, keyframes of every mode, groups of groups).
struct AnimationRecipe {
  var numbers: [Double]
  var cursor = 0

  mutating func next() -> Double {
    defer { cursor += 1 }
    return numbers.isEmpty ? 0.5 : numbers[cursor % numbers.count]
  }

  mutating func pick<T>(_ choices: [T]) -> T { choices[min(Int(next() * Double(choices.count)), choices.count - 1)] }

  mutating func value() -> Double { pick([0, 1, 0.5, 2, -1, 1e-9, 1e6]) * next() }

  mutating func curve() -> TimingFunction {
    switch pick([0, 1, 2, 3]) {
    case 0: return pick([.linear, .easeIn, .easeOut, .easeInEaseOut, .default])
    case 1: return .cubicBezier(UnitBezier(next(), next() * 4 - 2, next(), next() * 4 - 2))
    case 2: return .steps(1 + Int(next() * 10), pick(StepPosition.allCases))
    default: return .fade(pick(FadeShape.allCases))
    }
  }

  mutating func timing(nested: Bool) -> MediaTiming {
    var timing = MediaTiming()
    timing.duration = pick([0, 1e-6, 0.001, 0.3, 2, 86_400]) * (0.5 + next())
    timing.beginTime = pick([nil, 0, 0.01, 0.5, -0.2])
    timing.speed = pick([1, 0, 0.5, 3, 1e-6])
    timing.timeOffset = pick([0, 0.1, -0.3, 1e4])
    switch pick([0, 1, 2]) {
    case 0: timing.repeatCount = pick([0, 0.5, 2.7, .infinity])
    case 1: timing.repeatDuration = pick([0, 0.2, 5, .infinity])
    default: break
    }
    timing.autoreverses = next() < 0.3
    timing.fillMode = pick(FillMode.allCases)
    timing.removedOnCompletion = next() < 0.7
    return timing
  }

  mutating func animation(depth: Int = 0) -> Animation {
    let content: Animation.Content
    switch pick(depth < 2 ? [0, 1, 2, 3] : [0, 1, 2]) {
    case 0:
      content = .basic(
        BasicAnimation(
          from: next() < 0.5 ? value() : nil, to: next() < 0.5 ? value() : nil, by: next() < 0.3 ? value() : nil))
    case 1:
      let count = 1 + Int(next() * 6)
      let values = (0..<count).map { _ in value() }
      let mode = pick(KeyframeAnimation.CalculationMode.allCases)
      var keyframes = KeyframeAnimation(values: values, calculationMode: mode)
      if next() < 0.5 && count > 1 {
        var times = (0..<count).map { _ in next() }.sorted()
        times[0] = 0
        times[count - 1] = 1
        keyframes.keyTimes = times
        keyframes.timingFunctions = (0..<(count - 1)).map { _ in curve() }
      }
      if mode == .cubic {
        keyframes.tensionValues = values.map { _ in next() * 2 - 1 }
        keyframes.continuityValues = values.map { _ in next() * 2 - 1 }
        keyframes.biasValues = values.map { _ in next() * 2 - 1 }
      }
      content = .keyframes(keyframes)
    case 2:
      let parameters = SpringParameters(
        mass: pick([1, 0.01, 50]), stiffness: pick([100, 1, 5000]), damping: pick([0, 1, 10, 300]),
        initialVelocity: pick([0, 10, -50]), allowsOverdamping: next() < 0.5)
      content = .spring(SpringAnimation(from: next() < 0.5 ? value() : nil, to: value(), parameters: parameters))
    default:
      content = .group((0..<(1 + Int(next() * 3))).map { _ in animation(depth: depth + 1) })
    }
    var result = Animation(content, timing: timing(nested: depth > 0), timingFunction: curve())
    result.isAdditive = next() < 0.3
    result.isCumulative = next() < 0.3
    result.valueSpace = pick([.amplitude, .amplitude, .power, .decibels, .decibels(floor: -120)])
    return result
  }
}

@Suite struct RandomStackTests {
  @Test func randomAnimationStacksNeverProduceNaNOrInfinity() async {
    await propertyCheck(count: 300, input: Gen.double(in: 0...1).array(of: 4...80)) { numbers in
      var recipe = AnimationRecipe(numbers: numbers)
      let engine = try AnimationEngine(sampleRate: 48_000, maxBlockSize: 512)
      try engine.define("free", value: 0.5, range: -Double.infinity...Double.infinity)
      try engine.define("gain", value: 0.5, range: 0...1)
      for index in 0..<(1 + Int(recipe.next() * 6)) {
        let animation = recipe.animation()
        let continuity = recipe.pick(Continuity.allCases)
        for keyPath in ["free", "gain"] {
          // Refusals are fine (limits, negative values in dB); crashes and non-finite output are not.
          _ = try? engine.add(animation, forKey: "k\(index % 3)", to: keyPath, continuity: continuity)
        }
        if recipe.next() < 0.3 { try engine.set("gain", to: recipe.next(), transaction: Transaction(duration: 0.01)) }
        engine.advance(by: Int(recipe.next() * 3000))
      }
      for start in [engine.now, engine.now + 47_999, 1 << 40, -5] {
        let free = try values(engine, "free", from: start, count: 600)
        let gain = try values(engine, "gain", from: start, count: 600)
        let nonFinite = free.filter { !$0.isFinite }.count
        let outOfRange = gain.filter { !(0...1).contains($0) }.count
        #expect(nonFinite == 0, "free at \(start)")
        #expect(outOfRange == 0, "gain at \(start)")
      }
      engine.advance(by: 100_000)
      engine.drainCompletions()
    }
  }
}

/// Stacks the random search once turned up, kept as plain tests.
@Suite struct FoundByRandomStacks {
  /// An undershooting curve asked a stiffly overdamped spring for negative time (exp overflow).
  @Test func springUnderAnUndershootingCurveStaysFinite() throws {
    let engine = try makeEngine(sampleRate: 48_000)
    var spring = Animation.spring(from: 0, to: 1, parameters: SpringParameters(damping: 300, allowsOverdamping: true))
    spring.timingFunction = .cubicBezier(UnitBezier(0, 0, 0, -2))
    try engine.add(spring, forKey: "s", to: "p")
    #expect(try values(engine, count: 48_000).allSatisfy(\.isFinite))
  }

  /// An undamped spring swinging hundreds of dB past its target overflowed the dB decode.
  @Test func springSwingingInDecibelsStaysFinite() throws {
    let engine = try makeEngine(sampleRate: 48_000, model: 0.5)
    var spring = Animation.spring(
      from: 1e6, to: 1e-11, parameters: SpringParameters(mass: 50, stiffness: 1, damping: 0, initialVelocity: -50))
    spring.valueSpace = .decibels(floor: -120)
    spring.timing.duration = 50_000
    try engine.add(spring, forKey: "s", to: "p")
    for start: Int64 in [0, 48_000 * 100, 48_000 * 10_000] {
      #expect(try values(engine, from: start, count: 4800).allSatisfy(\.isFinite))
    }
  }

  /// steps(1, jump-none) has no jumps to divide by; built directly it skipped the parser.
  @Test func stepsWithoutJumpsDoNotDivideByZero() {
    for x in [0, 0.5, 1] { #expect(TimingFunction.steps(1, .jumpNone).value(at: x).isFinite) }
  }
}
