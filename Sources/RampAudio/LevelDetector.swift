import RampEngine

/// A sidechain's level detector (`DuckRule.Sidechain`): follows a signal frame by frame and says
/// whether it is above the threshold, with hysteresis. Plain data with its window's storage
/// allocated up front: `process` neither allocates nor frees, so the render thread runs it.
///
/// - `peak`: a frame's level is its largest |sample| over the channels. Active from the first
///   frame at or above the threshold (no delay); inactive once no frame has reached
///   threshold − hysteresis for `window` seconds.
/// - `rms`: the mean square over the last `window` seconds of each frame's mean square over the
///   channels. Active once its root is at or above the threshold, inactive below
///   threshold − hysteresis. A steady signal of RMS r ≥ threshold T that starts after silence is
///   detected after window × (T / r)² seconds: at most the window.
final class LevelDetector {
  let detector: DuckRule.Sidechain.Detector
  /// The thresholds as amplitudes (peak) or mean squares (rms).
  private let on: Double
  private let off: Double
  let windowFrames: Int
  private(set) var active = false
  /// peak: frames since one reached the lower threshold.
  private var quietFrames = Int.max / 2
  /// rms: each frame's mean square over the window, and their sum.
  private let powers: UnsafeMutablePointer<Double>
  private var sum = 0.0
  private var index = 0

  init(_ sidechain: DuckRule.Sidechain, sampleRate: Double) {
    detector = sidechain.detector
    let onAmplitude = Self.amplitude(decibels: sidechain.threshold)
    let offAmplitude = Self.amplitude(decibels: sidechain.threshold - sidechain.hysteresis)
    on = detector == .peak ? onAmplitude : onAmplitude * onAmplitude
    off = detector == .peak ? offAmplitude : offAmplitude * offAmplitude
    windowFrames = max(Int((sidechain.window * sampleRate).rounded()), 1)
    let stored = detector == .rms ? windowFrames : 1
    powers = .allocate(capacity: stored)
    powers.initialize(repeating: 0, count: stored)
  }

  deinit { powers.deallocate() }

  static func amplitude(decibels: Double) -> Double { ValueSpace.decibels(floor: -400).decode(decibels) }

  /// Takes `frames` frames of interleaved audio. Allocation-free.
  func process(_ audio: UnsafePointer<Float>, frames: Int, channels: Int) {
    var frame = 0
    while frame < frames {
      let base = frame * channels
      var channel = 0
      switch detector {
      case .peak:
        var peak: Float = 0
        while channel < channels {
          peak = max(peak, abs(audio[base + channel]))
          channel += 1
        }
        let level = Double(peak)
        if level >= on { active = true }
        quietFrames = level >= off ? 0 : quietFrames + 1
        if active && quietFrames >= windowFrames { active = false }
      case .rms:
        var power = 0.0
        while channel < channels {
          let sample = Double(audio[base + channel])
          power += sample * sample
          channel += 1
        }
        power /= Double(channels)
        sum += power - powers[index]
        powers[index] = power
        index += 1
        if index == windowFrames {
          // Once per window the sum is taken afresh, so rounding never accumulates.
          index = 0
          sum = 0
          var k = 0
          while k < windowFrames {
            sum += powers[k]
            k += 1
          }
        }
        let meanSquare = max(sum, 0) / Double(windowFrames)
        if meanSquare >= on {
          active = true
        } else if meanSquare < off {
          active = false
        }
      }
      frame += 1
    }
  }
}
