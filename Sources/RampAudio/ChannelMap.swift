/// Maps interleaved frames of `inputChannels` channels to `outputChannels` channels.
///
/// The rules, in order:
/// - equal counts: identity;
/// - mono in: the same signal on every output, not attenuated;
/// - 6 channels (5.1 in WAVE order FL FR FC LFE BL BR) to stereo: the ITU-R BS.775 down-mix
///   `L = FL + 0.707·FC + 0.707·BL`, `R = FR + 0.707·FC + 0.707·BR`, LFE dropped, divided by
///   1 + 2·0.707 so that full-scale input cannot clip;
/// - more channels in than out: output `j` is the average of the inputs `i` with `i % M == j`
///   (so stereo to mono averages both; N to stereo averages the 1st, 3rd, 5th… channel into the
///   left and the 2nd, 4th, 6th… into the right);
/// - fewer channels in than out (not mono): the first inputs go to the first outputs, the other
///   outputs are silent.
public struct ChannelMap: Sendable, Equatable {
  public let inputChannels: Int
  public let outputChannels: Int

  private enum Kind: Sendable, Equatable {
    case identity
    case broadcast
    case itu51ToStereo
    case fold
    case padSilence
  }

  private let kind: Kind

  /// The ITU centre and surround weight, 1/√2.
  private static let ituWeight: Float = 0.70710677

  /// - Throws: ``AudioError/Code/invalidParameter`` for a count outside 1...1024.
  public init(inputChannels: Int, outputChannels: Int) throws(AudioError) {
    guard (1...1024).contains(inputChannels), (1...1024).contains(outputChannels) else {
      throw AudioError(
        .invalidParameter, "channel map: \(inputChannels) → \(outputChannels) channels; 1 to 1024 are supported.")
    }
    self.inputChannels = inputChannels
    self.outputChannels = outputChannels
    if inputChannels == outputChannels {
      kind = .identity
    } else if inputChannels == 1 {
      kind = .broadcast
    } else if inputChannels == 6 && outputChannels == 2 {
      kind = .itu51ToStereo
    } else if inputChannels > outputChannels {
      kind = .fold
    } else {
      kind = .padSilence
    }
  }

  /// Whether ``map(_:frames:into:)`` copies the input unchanged.
  public var isIdentity: Bool { kind == .identity }

  /// Maps `frames` frames of `input` (`frames × inputChannels` floats) into `output`
  /// (`frames × outputChannels` floats). Does not allocate. The buffers must not overlap, except
  /// that an identity map may be given the same buffer twice.
  public func map(_ input: UnsafePointer<Float>, frames: Int, into output: UnsafeMutablePointer<Float>) {
    guard frames > 0 else { return }
    let n = inputChannels
    let m = outputChannels
    switch kind {
    case .identity:
      if UnsafePointer(output) != input {
        output.update(from: input, count: frames * n)
      }
    case .broadcast:
      for f in 0..<frames {
        let value = input[f]
        let out = output + f * m
        for c in 0..<m { out[c] = value }
      }
    case .itu51ToStereo:
      let w = Self.ituWeight
      let norm: Float = 1 / (1 + 2 * w)
      for f in 0..<frames {
        let inp = input + f * 6
        let centre = w * inp[2]
        output[2 * f] = (inp[0] + centre + w * inp[4]) * norm
        output[2 * f + 1] = (inp[1] + centre + w * inp[5]) * norm
      }
    case .fold:
      for f in 0..<frames {
        let inp = input + f * n
        let out = output + f * m
        for j in 0..<m {
          var sum: Float = 0
          var count = 0
          var i = j
          while i < n {
            sum += inp[i]
            count += 1
            i += m
          }
          out[j] = sum / Float(count)
        }
      }
    case .padSilence:
      for f in 0..<frames {
        let inp = input + f * n
        let out = output + f * m
        for j in 0..<n { out[j] = inp[j] }
        for j in n..<m { out[j] = 0 }
      }
    }
  }
}
