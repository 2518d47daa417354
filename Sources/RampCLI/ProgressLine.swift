import RampProtocol

/// The live line `--wait` draws on a terminal:
/// `[#####-----] gain 0.42 (-7.5 dB)  level -27.5 dBFS peak, -30.1 LUFS  1.3s/3.0s`.
///
/// The bar is the share of the ramp's time gone by (when its length is known); the numbers are
/// the value rampd reports as audible (a gain, labelled so), the signal level of what it acts on
/// (`streams.<id>.level.*`, `master.level.*`) and the time waited so far.
public struct ProgressLine: Sendable, Equatable {
  /// The audible value last observed, nil before the first one arrives.
  public var value: Double?
  /// The signal's peak over the last 400 ms (dBFS) and momentary loudness (LUFS) last observed;
  /// nil before one arrives (or when the key path has no level).
  public var peak: Double?
  public var momentary: Double?
  public var elapsed: Double
  /// The ramp's expected length; nil when it cannot be known (a spring, a default duration).
  public var total: Double?
  /// Whether `level` is a gain (shown with its dB).
  public var isGain: Bool

  public init(
    value: Double? = nil, elapsed: Double = 0, total: Double? = nil, isGain: Bool = true, peak: Double? = nil,
    momentary: Double? = nil
  ) {
    self.value = value
    self.peak = peak
    self.momentary = momentary
    self.elapsed = elapsed
    self.total = total
    self.isGain = isGain
  }

  public static let barWidth = 10

  /// The share of the bar filled: time over length, else the level itself (clamped to 0...1).
  public var fraction: Double {
    if let total { return total > 0 ? min(max(elapsed / total, 0), 1) : 1 }
    return min(max(value ?? 0, 0), 1)
  }

  public var text: String {
    let filled = Int((fraction * Double(Self.barWidth)).rounded(.down))
    var text = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: Self.barWidth - filled) + "]"
    if let value {
      if isGain {
        text += " gain " + HumanUnits.format(gain: value, decimals: 2)
        text += " (" + HumanUnits.format(decibels: value, decimals: 1) + ")"
      } else {
        text += " " + HumanUnits.format(gain: value, decimals: 2)
      }
    } else {
      text += " …"
    }
    if peak != nil || momentary != nil {
      text += "  level " + Self.level(peak, "dBFS peak") + ", " + Self.level(momentary, "LUFS") + " "
    }
    text += " " + Self.seconds(elapsed)
    if let total { text += "/" + Self.seconds(total) }
    return text
  }

  /// `-27.5 dBFS peak`; rampd reports silence as −150, shown as `-inf`.
  static func level(_ value: Double?, _ unit: String) -> String {
    guard let value else { return "… " + unit }
    return (value <= -150 ? "-inf" : HumanUnits.trimmedFixed(value, decimals: 1)) + " " + unit
  }

  /// `1.3s`: one decimal, so the line does not jitter in width as it counts.
  static func seconds(_ value: Double) -> String {
    guard value.isFinite else { return "\(value)" }
    if value >= 60 { return HumanUnits.format(duration: (value * 10).rounded() / 10) }
    return HumanUnits.trimmedFixed(value, decimals: 1) + "s"
  }
}

extension HumanUnits {
  /// `value` with exactly `decimals` decimals: `1.0`, `0.4`.
  static func trimmedFixed(_ value: Double, decimals: Int) -> String {
    var buffer = TextBuffer()
    buffer.append(fixed: value, decimals: decimals)
    return buffer.text
  }
}
