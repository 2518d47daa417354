#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The fade curves of sox and ffmpeg, under ffmpeg's `afade` names and with its formulas.
///
/// A shape is a fade-in gain curve g(x) on [0, 1]. A falling ramp uses the time-mirrored
/// shape g(1 − x), exactly as `afade=t=out` does, so rampd and ffmpeg produce the same gains.
public enum FadeShape: String, CaseIterable, Sendable {
  case tri, qsin, iqsin, esin, hsin, ihsin, exp, log, par, ipar, qua, cub, squ, cbr
  case dese, desi, losi, sinc, isinc

  /// The fade-in gain at x in [0, 1] (ffmpeg `fade_gain` with silence 0 and unity 1).
  public func gain(_ x: Double) -> Double {
    let x = x > 0 ? (x < 1 ? x : 1) : 0
    switch self {
    case .tri: return x
    case .qsin: return sin(x * .pi / 2)
    case .iqsin: return 0.636_619_772_367_581_4 * asin(x)
    case .esin: return 1 - cos(.pi / 4 * (Self.cube(2 * x - 1) + 1))
    case .hsin: return (1 - cos(x * .pi)) / 2
    case .ihsin: return 0.318_309_886_183_790_7 * acos(1 - 2 * x)
    case .exp: return exponential(-11.512_925_464_970_227 * (1 - x))
    case .log: return min(max(1 + 0.2 * log10(x), 0), 1)
    case .par: return 1 - (1 - x).squareRoot()
    case .ipar: return 1 - (1 - x) * (1 - x)
    case .qua: return x * x
    case .cub: return x * x * x
    case .squ: return x.squareRoot()
    case .cbr: return cbrt(x)
    case .dese: return x <= 0.5 ? cbrt(2 * x) / 2 : 1 - cbrt(2 * (1 - x)) / 2
    case .desi: return x <= 0.5 ? Self.cube(2 * x) / 2 : 1 - Self.cube(2 * (1 - x)) / 2
    case .losi:
      let a = 1 / (1 - 0.787) - 1
      let big = 1 / (1 + exponential(-((x - 0.5) * a * 2)))
      let low = 1 / (1 + exponential(a))
      let high = 1 / (1 + exponential(-a))
      return (big - low) / (high - low)
    case .sinc: return x >= 1 ? 1 : sin(.pi * (1 - x)) / (.pi * (1 - x))
    case .isinc: return x <= 0 ? 0 : 1 - sin(.pi * x) / (.pi * x)
    }
  }

  private static func cube(_ v: Double) -> Double { v * v * v }
}

/// e^x: `exp` inside `FadeShape` is its case.
private func exponential(_ x: Double) -> Double { exp(x) }
