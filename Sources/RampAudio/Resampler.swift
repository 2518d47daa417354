import CSoxr

/// A streaming sample-rate converter for interleaved 32-bit float frames, built on libsoxr.
///
/// Feed input with ``process(input:inputFrames:output:outputCapacity:)``; when the input ends, keep
/// calling it with `input: nil` until it produces nothing, to drain the filter's tail. Runs on one
/// thread, so the output is deterministic for a given input and block sizes. Not `Sendable`: one
/// thread owns a resampler.
public final class Resampler {
  /// soxr's quality recipes.
  public enum Quality: String, CaseIterable, Sendable {
    /// Cubic interpolation.
    case quick
    /// 16-bit precision, large roll-off.
    case low
    /// 16-bit precision, medium roll-off.
    case medium
    /// 20-bit precision (soxr's default).
    case high
    /// 28-bit precision.
    case veryHigh

    var recipe: UInt {
      switch self {
      case .quick: return UInt(SOXR_QQ)
      case .low: return UInt(SOXR_LQ)
      case .medium: return UInt(SOXR_MQ)
      case .high: return UInt(SOXR_20_BITQ)
      case .veryHigh: return UInt(SOXR_28_BITQ)
      }
    }
  }

  public let inputRate: Double
  public let outputRate: Double
  public let channels: Int
  public let quality: Quality

  private let soxr: soxr_t

  /// - Throws: ``AudioError/Code/invalidParameter`` for a rate that is not finite and positive, or
  ///   channels outside 1...32; ``AudioError/Code/device`` never; soxr's own refusal as
  ///   `invalidParameter`.
  public init(inputRate: Double, outputRate: Double, channels: Int, quality: Quality = .high) throws(AudioError) {
    guard inputRate.isFinite, inputRate > 0 else {
      throw AudioError(.invalidParameter, "resampler: input rate \(inputRate) must be a positive number.")
    }
    guard outputRate.isFinite, outputRate > 0 else {
      throw AudioError(.invalidParameter, "resampler: output rate \(outputRate) must be a positive number.")
    }
    guard (1...32).contains(channels) else {
      throw AudioError(.invalidParameter, "resampler: \(channels) channels; 1 to 32 are supported.")
    }
    self.inputRate = inputRate
    self.outputRate = outputRate
    self.channels = channels
    self.quality = quality

    var error: soxr_error_t? = nil
    var io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I)
    var q = soxr_quality_spec(quality.recipe, 0)
    var runtime = soxr_runtime_spec(1)  // one thread: deterministic, no hidden worker threads
    let created = soxr_create(inputRate, outputRate, UInt32(channels), &error, &io, &q, &runtime)
    if let error {
      if let created { soxr_delete(created) }
      throw AudioError(
        .invalidParameter, "resampler \(inputRate) → \(outputRate) Hz: soxr refused: \(String(cString: error)).")
    }
    guard let created else {
      throw AudioError(.invalidParameter, "resampler \(inputRate) → \(outputRate) Hz: soxr_create failed.")
    }
    self.soxr = created
  }

  deinit {
    soxr_delete(soxr)
  }

  /// Resamples.
  ///
  /// - Parameters:
  ///   - input: `inputFrames` interleaved frames, or nil for end of input: the filter's buffered
  ///     tail is then flushed into `output` (call again with nil until `produced` is 0).
  ///   - output: room for `outputCapacity` interleaved frames.
  /// - Returns: input frames consumed (the rest must be offered again) and output frames written.
  /// - Throws: ``AudioError/Code/invalidParameter`` for negative counts or a soxr failure.
  public func process(
    input: UnsafePointer<Float>?, inputFrames: Int, output: UnsafeMutablePointer<Float>, outputCapacity: Int
  ) throws(AudioError) -> (consumed: Int, produced: Int) {
    guard inputFrames >= 0, outputCapacity >= 0 else {
      throw AudioError(
        .invalidParameter, "resampler: negative frame count (input \(inputFrames), output \(outputCapacity)).")
    }
    var consumed = 0
    var produced = 0
    let error = soxr_process(
      soxr, input.map { UnsafeRawPointer($0) }, input == nil ? 0 : inputFrames, &consumed,
      UnsafeMutableRawPointer(output), outputCapacity, &produced)
    if let error {
      throw AudioError(.invalidParameter, "resampler: soxr failed: \(String(cString: error)).")
    }
    return (consumed, produced)
  }

  /// The filter's delay, in output frames, at this point of the stream.
  public var delay: Double { soxr_delay(soxr) }

  /// Forgets all buffered input, ready for a fresh signal with the same configuration.
  public func reset() {
    soxr_clear(soxr)
  }
}

@available(*, unavailable)
extension Resampler: Sendable {}
