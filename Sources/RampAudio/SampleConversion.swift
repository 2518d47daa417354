/// 16-bit PCM to and from float: s ↔ s / 32768, rounding to nearest even and saturating, so a
/// round trip at unity gain is exact and nothing wraps. Plain loops of selects, which the
/// compiler vectorises (the generic SIMD conversions do not).
enum SampleConversion {
  static func float(from input: UnsafePointer<Int16>, count: Int, into output: UnsafeMutablePointer<Float>) {
    let scale: Float = 1 / 32768
    for i in 0..<count { output[i] = Float(input[i]) * scale }
  }

  static func int16(from input: UnsafePointer<Float>, count: Int, into output: UnsafeMutablePointer<Int16>) {
    // Adding 1.5 × 2²³ rounds to nearest even and leaves the integer, in two's complement, in
    // the low 16 bits of the float's bit pattern: no library call, no trapping conversion.
    let magic: Float = 12_582_912
    for i in 0..<count {
      let scaled = input[i] * 32768
      let low = scaled >= -32768 ? scaled : (scaled < -32768 ? -32768 : 0)  // NaN is silence
      let clamped = low <= 32767 ? low : 32767
      output[i] = Int16(truncatingIfNeeded: (clamped + magic).bitPattern)
    }
  }
}
