/// A keyframe animation compiled for evaluation: values in the animation's value space,
/// segment boundaries, per-segment curves and, for `cubic`, Kochanek–Bartels tangents.
struct KeyframeCurve: Sendable {
  let mode: KeyframeAnimation.CalculationMode
  let values: [Double]
  /// Segment boundaries in [0, 1]. For discrete mode there is one more than there are values.
  let times: [Double]
  let curves: [TimingFunction]?
  let outgoing: [Double]
  let incoming: [Double]

  init(_ animation: KeyframeAnimation, space: ValueSpace) throws(EngineError) {
    let raw = animation.values
    guard !raw.isEmpty else {
      throw EngineError(.invalidAnimation, field: "values", "a keyframe animation needs at least one value")
    }
    for (index, value) in raw.enumerated() { try Check.finite(value, "values[\(index)]") }
    let encoded = raw.map(space.encode)
    let count = raw.count
    mode = animation.calculationMode
    values = encoded

    switch mode {
    case .paced:
      // Times proportional to the distance travelled, so the value moves at one speed.
      var distances = [0.0]
      for index in encoded.indices.dropFirst() {
        distances.append(distances[index - 1] + abs(encoded[index] - encoded[index - 1]))
      }
      let total = distances.last ?? 0
      times =
        total > 0 ? distances.map { $0 / total } : Self.evenTimes(count)
      curves = nil
    case .discrete:
      if let keyTimes = animation.keyTimes {
        guard keyTimes.count == count || keyTimes.count == count + 1 else {
          throw EngineError(
            .invalidAnimation, field: "keyTimes",
            "discrete mode needs \(count) or \(count + 1) key times for \(count) values, got \(keyTimes.count)")
        }
        try Self.validate(keyTimes, mustEndAtOne: keyTimes.count == count + 1)
        times = keyTimes.count == count ? keyTimes + [1] : keyTimes
      } else {
        times = (0...count).map { Double($0) / Double(count) }
      }
      curves = nil
    case .linear, .cubic:
      if let keyTimes = animation.keyTimes {
        guard keyTimes.count == count else {
          throw EngineError(
            .invalidAnimation, field: "keyTimes", "needs one key time per value (\(count)), got \(keyTimes.count)")
        }
        try Self.validate(keyTimes, mustEndAtOne: count > 1)
        times = keyTimes
      } else {
        times = Self.evenTimes(count)
      }
      if let functions = animation.timingFunctions {
        guard functions.count == max(count - 1, 0) else {
          throw EngineError(
            .invalidAnimation, field: "timingFunctions",
            "needs one timing function per segment (\(max(count - 1, 0))), got \(functions.count)")
        }
        curves = functions.allSatisfy(\.isLinear) ? nil : functions
      } else {
        curves = nil
      }
    }

    if mode == .cubic {
      let tension = try Self.parameters(animation.tensionValues, "tensionValues", count)
      let continuity = try Self.parameters(animation.continuityValues, "continuityValues", count)
      let bias = try Self.parameters(animation.biasValues, "biasValues", count)
      var outgoing = [Double](repeating: 0, count: count)
      var incoming = [Double](repeating: 0, count: count)
      for i in 0..<count {
        // The ends repeat their neighbour, so the end tangents are one-sided.
        let previous = encoded[max(i - 1, 0)]
        let next = encoded[min(i + 1, count - 1)]
        let back = encoded[i] - previous
        let ahead = next - encoded[i]
        let t = tension[i]
        let c = continuity[i]
        let b = bias[i]
        var out = (1 - t) * (1 + b) * (1 + c) / 2 * back + (1 - t) * (1 - b) * (1 - c) / 2 * ahead
        var into = (1 - t) * (1 + b) * (1 - c) / 2 * back + (1 - t) * (1 - b) * (1 + c) / 2 * ahead
        // Scale for uneven key times, so the speed matches across a key.
        if i > 0 && i < count - 1 {
          let before = times[i] - times[i - 1]
          let after = times[i + 1] - times[i]
          if before + after > 0 {
            out *= 2 * after / (before + after)
            into *= 2 * before / (before + after)
          }
        }
        outgoing[i] = out
        incoming[i] = into
      }
      self.outgoing = outgoing
      self.incoming = incoming
    } else {
      outgoing = []
      incoming = []
    }
  }

  private static func evenTimes(_ count: Int) -> [Double] {
    count == 1 ? [0] : (0..<count).map { Double($0) / Double(count - 1) }
  }

  private static func validate(_ keyTimes: [Double], mustEndAtOne: Bool) throws(EngineError) {
    for (index, time) in keyTimes.enumerated() {
      let field = "keyTimes[\(index)]"
      try Check.finite(time, field)
      guard (0...1).contains(time) else {
        throw EngineError(.invalidAnimation, field: field, "must be in [0, 1], got \(time)")
      }
      if index > 0 && time < keyTimes[index - 1] {
        throw EngineError(
          .invalidAnimation, field: field, "key times must not decrease (\(keyTimes[index - 1]) then \(time))")
      }
    }
    guard keyTimes.first == 0 else {
      throw EngineError(.invalidAnimation, field: "keyTimes", "must start at 0")
    }
    guard !mustEndAtOne || keyTimes.last == 1 else {
      throw EngineError(.invalidAnimation, field: "keyTimes", "must end at 1")
    }
  }

  private static func parameters(_ given: [Double]?, _ field: String, _ count: Int) throws(EngineError) -> [Double] {
    guard let given else { return [Double](repeating: 0, count: count) }
    guard given.count == count else {
      throw EngineError(.invalidAnimation, field: field, "needs one value per keyframe (\(count)), got \(given.count)")
    }
    for (index, value) in given.enumerated() { try Check.finite(value, "\(field)[\(index)]") }
    return given
  }

  var first: Double { values[0] }
  var last: Double { values[values.count - 1] }

  /// The value (in the animation's space) at progress y; `segment` carries the last segment
  /// found between calls, since consecutive samples rarely cross one.
  @inline(__always) func value(at progress: Double, segment: inout Int) -> Double {
    let y = progress > 0 ? (progress < 1 ? progress : 1) : 0
    let count = values.count
    if count == 1 { return values[0] }
    let lastSegment = mode == .discrete ? count - 1 : count - 2
    if segment > lastSegment { segment = lastSegment }
    while segment < lastSegment && y >= times[segment + 1] { segment += 1 }
    while segment > 0 && y < times[segment] { segment -= 1 }
    if mode == .discrete {
      return y >= 1 ? values[count - 1] : values[segment]
    }
    let start = times[segment]
    let width = times[segment + 1] - start
    var u = width > 0 ? (y - start) / width : 1
    u = u > 0 ? (u < 1 ? u : 1) : 0
    if let curves { u = curves[segment].value(at: u) }
    let a = values[segment]
    let b = values[segment + 1]
    if mode == .cubic {
      // Cubic Hermite between the two keys with Kochanek–Bartels tangents.
      let u2 = u * u
      let u3 = u2 * u
      let h00 = 2 * u3 - 3 * u2 + 1
      let h10 = u3 - 2 * u2 + u
      let h01 = -2 * u3 + 3 * u2
      let h11 = u3 - u2
      return h00 * a + h10 * outgoing[segment] + h01 * b + h11 * incoming[segment + 1]
    }
    return a + (b - a) * u
  }
}
