import CEbur128

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A file's loudness by EBU R 128 (ITU-R BS.1770), measured with libebur128: integrated loudness,
/// loudness range and true peak.
///
/// Channels are weighted as BS.1770 says, in WAVE order (libebur128's default map, the order
/// ``ChannelMap`` reads too): 4 channels are L R Ls Rs, 5 are L R C Ls Rs, 6 are FL FR FC LFE BL
/// BR; the surrounds count +1.5 dB, the LFE and any channel after the sixth not at all. The true
/// peak is every channel's, the LFE's included.
public struct Loudness: Sendable, Equatable {
  /// Integrated loudness, LUFS; −infinity when nothing counts (see ``unmeasured``).
  public var integrated: Double
  /// Loudness range, LU; 0 when the file is too short or too quiet to have one.
  public var range: Double
  /// The highest true peak of any channel (oversampled 4× below 96 kHz, 2× below 192 kHz),
  /// dBTP; −infinity for digital silence.
  public var truePeak: Double
  /// Frames read, at ``sampleRate``.
  public var frames: Int64
  public var sampleRate: Int
  public var channels: Int

  public init(integrated: Double, range: Double, truePeak: Double, frames: Int64, sampleRate: Int, channels: Int) {
    self.integrated = integrated
    self.range = range
    self.truePeak = truePeak
    self.frames = frames
    self.sampleRate = sampleRate
    self.channels = channels
  }

  /// Why a file has no integrated loudness.
  public enum Unmeasured: String, Sendable {
    /// Shorter than one 400 ms gating block.
    case tooShort = "too-short"
    /// No gating block reaches the absolute gate, −70 LUFS: silence, or nearly.
    case silent
  }

  /// Why ``integrated`` is −infinity; nil when it is a measurement.
  public var unmeasured: Unmeasured? {
    guard integrated.isFinite else {
      return Double(frames) < Self.blockSeconds * Double(sampleRate) ? .tooShort : .silent
    }
    return nil
  }

  /// The gating block of BS.1770: the shortest audio that has an integrated loudness.
  public static let blockSeconds = 0.4

  /// Seconds of audio measured.
  public var duration: Double { sampleRate > 0 ? Double(frames) / Double(sampleRate) : 0 }

  /// libebur128's version, `1.2.6`: a different version may measure differently, so a cache of
  /// measurements is kept per version.
  public static var libraryVersion: String {
    var major: Int32 = 0
    var minor: Int32 = 0
    var patch: Int32 = 0
    ebur128_get_version(&major, &minor, &patch)
    return "\(major).\(minor).\(patch)"
  }

  /// Frames read and measured per call into libebur128.
  static let blockFrames = 16_384

  /// Reads `path` to its end through libsndfile and measures it. `progress` is called after each
  /// block with the frames read so far (on the calling thread); returning false stops the
  /// measurement, which then throws. Runs on the calling thread, which it keeps busy for as long
  /// as reading and filtering the file takes: never a render thread.
  ///
  /// - Throws: ``AudioError/Code/unreadableFile`` for a file libsndfile cannot open or read;
  ///   ``AudioError/Code/invalidParameter`` for a format libebur128 does not take (more channels
  ///   or a higher rate than it supports), or when `progress` stopped it.
  public static func measure(path: String, progress: (Int64) -> Bool = { _ in true }) throws(AudioError) -> Loudness {
    let reader = try SoundFileReader(path: path)
    return try measure(reader, progress: progress)
  }

  /// Measures what is left to read of `reader` (see ``measure(path:progress:)``).
  public static func measure(_ reader: SoundFileReader, progress: (Int64) -> Bool = { _ in true }) throws(AudioError)
    -> Loudness
  {
    let measurement = try LoudnessMeasurement(
      channels: reader.channels, sampleRate: reader.sampleRate, name: reader.path)
    let buffer = UnsafeMutablePointer<Float>.allocate(capacity: blockFrames * reader.channels)
    defer { buffer.deallocate() }
    while true {
      let got = try reader.read(into: buffer, frames: blockFrames)
      guard got > 0 else { break }
      // NaN or infinity would poison every sum after it: measured as the silence it is played as.
      if !reader.samplesAreBounded { StreamDecoder.silenceNonFinite(buffer, count: got * reader.channels) }
      try measurement.add(buffer, frames: got)
      guard progress(measurement.frames) else {
        throw AudioError(.invalidParameter, "measuring '\(reader.path)' was stopped.")
      }
    }
    return measurement.result
  }
}

/// A loudness measurement fed block by block (a file as it is read, a render as it is mixed),
/// by libebur128: integrated loudness, loudness range and true peak of everything added.
/// Not for a render thread: libebur128 allocates as its histogram and peak state grow.
public final class LoudnessMeasurement {
  private var state: UnsafeMutablePointer<ebur128_state>?
  public let channels: Int
  public let sampleRate: Int
  /// What the errors call the audio measured: a file's path, "the render".
  private let name: String
  /// Frames added so far.
  public private(set) var frames: Int64 = 0

  /// - Throws: ``AudioError/Code/invalidParameter`` for a format libebur128 does not take (more
  ///   channels or a higher rate than it supports).
  public init(channels: Int, sampleRate: Int, name: String) throws(AudioError) {
    let mode = Int32(EBUR128_MODE_I.rawValue | EBUR128_MODE_LRA.rawValue | EBUR128_MODE_TRUE_PEAK.rawValue)
    // The histogram keeps memory constant however long the audio (at 0.01 LU resolution).
    let histogram = Int32(EBUR128_MODE_HISTOGRAM.rawValue)
    guard let state = ebur128_init(UInt32(channels), UInt(sampleRate), mode | histogram) else {
      throw AudioError(
        .invalidParameter,
        "cannot measure '\(name)': libebur128 does not take \(channels) channels at \(sampleRate) Hz.")
    }
    self.state = state
    self.channels = channels
    self.sampleRate = sampleRate
    self.name = name
  }

  deinit { ebur128_destroy(&state) }

  /// Adds `frames` interleaved frames of finite samples.
  public func add(_ samples: UnsafePointer<Float>, frames count: Int) throws(AudioError) {
    guard count > 0 else { return }
    let status = ebur128_add_frames_float(state, samples, count)
    guard status == Int32(EBUR128_SUCCESS.rawValue) else {
      throw AudioError(.invalidParameter, "cannot measure '\(name)': libebur128 failed (status \(status)).")
    }
    frames += Int64(count)
  }

  /// The loudness of everything added so far.
  public var result: Loudness {
    var integrated = -Double.infinity
    var range = 0.0
    var peak = 0.0
    _ = ebur128_loudness_global(state, &integrated)
    if ebur128_loudness_range(state, &range) != Int32(EBUR128_SUCCESS.rawValue) || !range.isFinite { range = 0 }
    for channel in 0..<channels {
      var channelPeak = 0.0
      if ebur128_true_peak(state, UInt32(channel), &channelPeak) == Int32(EBUR128_SUCCESS.rawValue) {
        peak = max(peak, channelPeak)
      }
    }
    return Loudness(
      integrated: integrated.isFinite ? integrated : -.infinity, range: range,
      truePeak: peak > 0 ? 20 * log10(peak) : -.infinity, frames: frames, sampleRate: sampleRate,
      channels: channels)
  }
}
