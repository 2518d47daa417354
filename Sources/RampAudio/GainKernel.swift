/// The per-sample arithmetic of the render path: gain times signal, summed over streams, and a
/// safety clamp. Interleaved float frames; one gain value per frame. None of these allocate,
/// lock or branch per sample beyond the loop itself, so the compiler vectorises them.
public enum GainKernel {
  /// gains[i] *= other[i]: a stream's gain times the master gain.
  @inlinable
  public static func multiply(_ gains: UnsafeMutablePointer<Float>, by other: UnsafePointer<Float>, count: Int) {
    for i in 0..<count { gains[i] *= other[i] }
  }

  /// samples[i] *= factor: a fixed trim (`LoudnessTrim`), applied as a file is decoded.
  @inlinable
  public static func scale(_ samples: UnsafeMutablePointer<Float>, by factor: Float, count: Int) {
    for i in 0..<count { samples[i] *= factor }
  }

  /// output[f·c + k] = input[f·c + k] × gain[f].
  @inlinable
  public static func apply(
    _ input: UnsafePointer<Float>, gain: UnsafePointer<Float>, frames: Int, channels: Int,
    into output: UnsafeMutablePointer<Float>
  ) {
    switch channels {
    case 1:
      for f in 0..<frames { output[f] = input[f] * gain[f] }
    case 2:
      for f in 0..<frames {
        let g = gain[f]
        output[2 * f] = input[2 * f] * g
        output[2 * f + 1] = input[2 * f + 1] * g
      }
    default:
      for f in 0..<frames {
        let g = gain[f]
        for k in 0..<channels { output[f * channels + k] = input[f * channels + k] * g }
      }
    }
  }

  /// output[f·c + k] += input[f·c + k] × gain[f]: mixes one stream into the sum.
  @inlinable
  public static func accumulate(
    _ input: UnsafePointer<Float>, gain: UnsafePointer<Float>, frames: Int, channels: Int,
    into output: UnsafeMutablePointer<Float>
  ) {
    switch channels {
    case 1:
      for f in 0..<frames { output[f] += input[f] * gain[f] }
    case 2:
      for f in 0..<frames {
        let g = gain[f]
        output[2 * f] += input[2 * f] * g
        output[2 * f + 1] += input[2 * f + 1] * g
      }
    default:
      for f in 0..<frames {
        let g = gain[f]
        for k in 0..<channels { output[f * channels + k] += input[f * channels + k] * g }
      }
    }
  }

  /// output[i] += input[i] × gain: mixes one stream into the sum at a gain that holds for the
  /// whole run (the same products as `accumulate` given that gain on every frame).
  @inlinable
  public static func accumulate(
    _ input: UnsafePointer<Float>, gain: Float, count: Int, into output: UnsafeMutablePointer<Float>
  ) {
    for i in 0..<count { output[i] += input[i] * gain }
  }

  /// Mixes one stereo stream into the sum with a per-frame gain and balance: balance −1 is the
  /// left channel alone, +1 the right alone, 0 both at unity (a balance control, not an
  /// equal-power pan: a centred stereo recording is left as it was).
  /// output[2f] += input[2f] × gain[f] × min(1, 1 − b[f]); output[2f+1] += input[2f+1] × gain[f] × min(1, 1 + b[f]).
  @inlinable
  public static func accumulateBalanced(
    _ input: UnsafePointer<Float>, gain: UnsafePointer<Float>, balance: UnsafePointer<Float>, frames: Int,
    into output: UnsafeMutablePointer<Float>
  ) {
    for f in 0..<frames {
      let g = gain[f]
      let b = balance[f]
      let left = 1 - b < 1 ? 1 - b : 1
      let right = 1 + b < 1 ? 1 + b : 1
      output[2 * f] += input[2 * f] * (g * left)
      output[2 * f + 1] += input[2 * f + 1] * (g * right)
    }
  }

  /// Limits every sample to [−limit, limit] so that a sum of loud streams saturates instead of
  /// wrapping in an integer format; NaN becomes silence.
  public static func clamp(_ buffer: UnsafeMutablePointer<Float>, count: Int, limit: Float = 1) {
    for i in 0..<count {
      let v = buffer[i]
      let low = v >= -limit ? v : (v < -limit ? -limit : 0)
      buffer[i] = low <= limit ? low : limit
    }
  }
}
