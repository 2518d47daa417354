import RampSystem

/// Maps an animation's linear progress x in [0, 1] to eased progress y.
///
/// Three families, all parsed from the strings the CLI and the protocol use:
/// - Core Animation's cubic Béziers: `linear`, `ease-in`, `ease-out`, `ease-in-out`, `default`
///   (CSS `ease` is the same curve), and `cubic-bezier(x1,y1,x2,y2)` with x1, x2 in [0, 1];
/// - CSS steps: `steps(n[, jump-start|jump-end|jump-none|jump-both])`, `step-start`, `step-end`;
/// - sox/ffmpeg fade shapes by ffmpeg's names (`qsin`, `exp`, `losi`, …). Only these mirror in
///   time on a falling ramp, as `afade=t=out` does; Béziers and steps apply to progress as in
///   Core Animation, whichever way the value moves.
///
/// Input outside [0, 1] is clamped, so y(x) is defined for every x, including NaN-free ends.
public enum TimingFunction: Sendable, Hashable, CustomStringConvertible {
  case cubicBezier(UnitBezier)
  case steps(Int, StepPosition)
  /// A fade shape; `mirrored` is the time-mirrored form used for falling ramps: y = 1 − g(1 − x).
  case fade(FadeShape, mirrored: Bool = false)

  public static let linear = TimingFunction.cubicBezier(UnitBezier(0, 0, 1, 1))
  public static let easeIn = TimingFunction.cubicBezier(UnitBezier(0.42, 0, 1, 1))
  public static let easeOut = TimingFunction.cubicBezier(UnitBezier(0, 0, 0.58, 1))
  public static let easeInEaseOut = TimingFunction.cubicBezier(UnitBezier(0.42, 0, 0.58, 1))
  public static let `default` = TimingFunction.cubicBezier(UnitBezier(0.25, 0.1, 0.25, 1))

  static let named: [(String, TimingFunction)] = [
    ("linear", .linear), ("ease-in", .easeIn), ("ease-out", .easeOut),
    ("ease-in-out", .easeInEaseOut), ("default", .default), ("ease", .default),
    ("step-start", .steps(1, .jumpStart)), ("step-end", .steps(1, .jumpEnd)),
  ]

  /// The accepted names, for help texts and error messages.
  public static var names: [String] {
    named.map(\.0) + ["cubic-bezier(x1,y1,x2,y2)", "steps(n[,position])"]
      + FadeShape.allCases.map(\.rawValue)
  }

  /// A validated cubic Bézier: every coordinate finite, x1 and x2 in [0, 1].
  public static func bezier(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double) throws(EngineError)
    -> TimingFunction
  {
    for (name, value) in [("x1", x1), ("y1", y1), ("x2", x2), ("y2", y2)] {
      try Check.finite(value, "cubic-bezier \(name)")
    }
    guard (0...1).contains(x1) else {
      throw EngineError(.invalidTimingFunction, field: "cubic-bezier x1", "must be in [0, 1], got \(x1)")
    }
    guard (0...1).contains(x2) else {
      throw EngineError(.invalidTimingFunction, field: "cubic-bezier x2", "must be in [0, 1], got \(x2)")
    }
    return .cubicBezier(UnitBezier(x1, y1, x2, y2))
  }

  /// Validated steps: at least one step (two for `jump-none`).
  public static func stepped(_ count: Int, _ position: StepPosition = .jumpEnd) throws(EngineError)
    -> TimingFunction
  {
    let minimum = position == .jumpNone ? 2 : 1
    guard count >= minimum else {
      throw EngineError(
        .invalidTimingFunction, field: "steps",
        "needs at least \(minimum) step\(minimum == 1 ? "" : "s") with \(position.rawValue), got \(count)")
    }
    return .steps(count, position)
  }

  /// Checks a curve built directly from its cases, as `bezier(…)` and `stepped(…)` do.
  public func validate(field: String = "curve") throws(EngineError) {
    do {
      switch self {
      case .cubicBezier(let b): _ = try Self.bezier(b.x1, b.y1, b.x2, b.y2)
      case .steps(let count, let position): _ = try Self.stepped(count, position)
      case .fade: break
      }
    } catch {
      throw EngineError(error.code, field: field, "\(error.field.map { "\($0): " } ?? "")\(error.message)")
    }
  }

  /// Parses a curve string such as `ease-in`, `cubic-bezier(0.1, 1, 1, 0.2)`, `steps(4, jump-none)` or `qsin`.
  public init(parsing text: String) throws(EngineError) {
    let source = text.trimmingWhitespace().lowercased()
    if let match = Self.named.first(where: { $0.0 == source }) {
      self = match.1
      return
    }
    if let shape = FadeShape(rawValue: source) {
      self = .fade(shape)
      return
    }
    if let arguments = Self.arguments(of: "cubic-bezier", in: source) {
      guard arguments.count == 4 else {
        throw EngineError(
          .invalidTimingFunction, field: "curve",
          "cubic-bezier takes 4 numbers (x1,y1,x2,y2), got \(arguments.count) in '\(text)'")
      }
      var numbers: [Double] = []
      for (index, argument) in arguments.enumerated() {
        guard let number = Double(argument), number.isFinite else {
          let name = ["x1", "y1", "x2", "y2"][index]
          throw EngineError(
            .invalidTimingFunction, field: "cubic-bezier \(name)", "'\(argument)' is not a finite number")
        }
        numbers.append(number)
      }
      self = try Self.bezier(numbers[0], numbers[1], numbers[2], numbers[3])
      return
    }
    if let arguments = Self.arguments(of: "steps", in: source) {
      guard (1...2).contains(arguments.count), let count = Int(arguments[0]) else {
        throw EngineError(
          .invalidTimingFunction, field: "steps",
          "expected steps(n) or steps(n, position) with a whole n, got '\(text)'")
      }
      var position = StepPosition.jumpEnd
      if arguments.count == 2 {
        switch arguments[1] {
        case "start": position = .jumpStart
        case "end": position = .jumpEnd
        case let other:
          guard let parsed = StepPosition(rawValue: other) else {
            throw EngineError(
              .invalidTimingFunction, field: "steps position",
              "'\(other)' is not one of jump-start, jump-end, jump-none, jump-both, start, end")
          }
          position = parsed
        }
      }
      self = try Self.stepped(count, position)
      return
    }
    throw EngineError(
      .invalidTimingFunction, field: "curve",
      "unknown curve '\(text)'; expected one of: \(Self.names.joined(separator: ", "))")
  }

  /// The comma-separated arguments of `name(...)`, or nil when `source` is not such a call.
  private static func arguments(of name: String, in source: String) -> [String]? {
    guard source.hasPrefix(name), source.hasSuffix(")") else { return nil }
    var rest = source.dropFirst(name.count).drop(while: { $0 == " " })
    guard rest.first == "(" else { return nil }
    rest = rest.dropFirst().dropLast()
    return rest.split(separator: ",", omittingEmptySubsequences: false).map {
      String($0).trimmingWhitespace()
    }
  }

  public var description: String {
    switch self {
    case .cubicBezier(let b):
      if let match = Self.named.first(where: { $0.1 == self }) { return match.0 }
      return "cubic-bezier(\(b.x1),\(b.y1),\(b.x2),\(b.y2))"
    case .steps(let count, let position):
      return "steps(\(count),\(position.rawValue))"
    case .fade(let shape, let mirrored):
      return mirrored ? "\(shape.rawValue) (mirrored)" : shape.rawValue
    }
  }

  /// True when y = x everywhere, which lets kernels skip the solve.
  public var isLinear: Bool {
    switch self {
    case .cubicBezier(let b): return b.x1 == b.y1 && b.x2 == b.y2
    case .fade(let shape, _): return shape == .tri
    case .steps: return false
    }
  }

  /// The curve to use for a ramp: fade shapes mirror in time when the value falls.
  public func forRamp(falling: Bool) -> TimingFunction {
    if case .fade(let shape, _) = self { return .fade(shape, mirrored: falling) }
    return self
  }

  /// y at x, with x clamped to [0, 1].
  public func value(at x: Double) -> Double {
    switch self {
    case .cubicBezier(let bezier):
      if isLinear { return UnitBezier.clampUnit(x) }
      return bezier.value(at: x)
    case .steps(let count, let position):
      return position.value(at: x, count: count)
    case .fade(let shape, let mirrored):
      return mirrored ? 1 - shape.gain(1 - UnitBezier.clampUnit(x)) : shape.gain(x)
    }
  }

  /// Writes y(x0 + i·dx) for i in 0..<count. Does not allocate; this is the render thread's path.
  public func fill(x0: Double, dx: Double, count: Int, into y: UnsafeMutablePointer<Double>) {
    switch self {
    case .cubicBezier(let bezier) where !isLinear:
      bezier.fill(x0: x0, dx: dx, count: count, into: y)
    case .cubicBezier:
      for i in 0..<count { y[i] = UnitBezier.clampUnit(x0 + Double(i) * dx) }
    default:
      for i in 0..<count { y[i] = value(at: x0 + Double(i) * dx) }
    }
  }
}
