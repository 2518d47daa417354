/// Where the jumps of a CSS `steps()` function fall (CSS Easing Functions Level 1).
public enum StepPosition: String, CaseIterable, Sendable {
  case jumpStart = "jump-start"
  case jumpEnd = "jump-end"
  case jumpNone = "jump-none"
  case jumpBoth = "jump-both"

  /// y for `steps(count, self)` at x in [0, 1].
  func value(at x: Double, count: Int) -> Double {
    let x = x > 0 ? (x < 1 ? x : 1) : 0
    var step = (x * Double(count)).rounded(.down)
    if self == .jumpStart || self == .jumpBoth { step += 1 }
    let jumps: Double
    switch self {
    case .jumpStart, .jumpEnd: jumps = Double(count)
    case .jumpNone: jumps = Double(count - 1)
    case .jumpBoth: jumps = Double(count + 1)
    }
    guard jumps > 0 else { return x >= 1 ? 1 : 0 }
    return min(step, jumps) / jumps
  }
}
