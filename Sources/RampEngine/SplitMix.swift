/// SplitMix64: a small, fast generator with a seed, so a run that draws from it (a test's data, a
/// fuzzer's requests) can be repeated exactly from the seed it prints.
public struct SplitMix: RandomNumberGenerator, Sendable {
  private var state: UInt64

  public init(seed: UInt64) { state = seed }

  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  /// In 0..<bound.
  public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }

  /// In [0, 1).
  public mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

  public mutating func chance(_ probability: Double) -> Bool { unit() < probability }
}
