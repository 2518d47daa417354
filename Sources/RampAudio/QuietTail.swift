#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Where a file's quiet tail begins: the level-triggered crossfade of a queue (`crossfadeLevel`)
/// starts there rather than a crossfade's length before the end.
///
/// The detector: the last `window` seconds of the file are cut into consecutive blocks of
/// `blockSeconds` (50 ms), counted from the start of that window; a block's level is its RMS (the
/// root mean square of every sample of every channel in it, in dBFS: 0 dB is a full-scale
/// sample). The tail begins at the end of the last block whose level is at or above `threshold`,
/// so every block after it is below: it lies within one block after the sample where the level
/// fell. When no block of the window reaches the threshold the tail is the whole window; when
/// the last block does, there is no quiet tail (nil).
///
/// Runs off the render thread (it reads the file's tail with its own reader, when the item is
/// opened); nil too for a file whose length is unknown or that cannot seek or be read.
public enum QuietTail {
  /// The settings of a queue's level-triggered crossfade: the level (dBFS) below which an item's
  /// tail counts as quiet, and how many seconds at its end are looked at.
  public struct Trigger: Sendable, Equatable {
    public var threshold: Double
    public var window: Double

    public init(threshold: Double, window: Double) {
      self.threshold = threshold
      self.window = window
    }
  }

  public static let blockSeconds = 0.05
  /// The longest `window`, seconds.
  public static let maximumWindow = 60.0

  /// The first frame of `path`'s quiet tail, in frames at `outputRate` (as a decoder resampling
  /// the file to it counts them).
  public static func start(of path: String, _ trigger: Trigger, outputRate: Int) -> Int? {
    guard let reader = try? SoundFileReader(path: path), reader.seekable, reader.frames < Int64(1) << 40,
      let frame = start(of: reader, threshold: trigger.threshold, window: trigger.window)
    else { return nil }
    return Int((Double(frame) * Double(outputRate) / Double(reader.sampleRate)).rounded())
  }

  static func start(of reader: SoundFileReader, threshold: Double, window: Double) -> Int64? {
    let length = reader.frames
    let rate = Double(reader.sampleRate)
    let first = max(length - Int64((min(window, maximumWindow) * rate).rounded()), 0)
    let block = max(Int((blockSeconds * rate).rounded()), 1)
    guard length > first, (try? reader.seek(toFrame: first)) != nil else { return nil }
    let channels = reader.channels
    // Squares against the threshold's, so no logarithm per block.
    let amplitude = LevelDetector.amplitude(decibels: threshold)
    let floor = amplitude * amplitude
    var buffer = [Float](repeating: 0, count: block * channels)
    var position = first
    var tail = first
    var lastLoud = false
    while position < length {
      let got = buffer.withUnsafeMutableBufferPointer { pointer in
        (try? reader.read(into: pointer.baseAddress!, frames: Int(min(Int64(block), length - position)))) ?? 0
      }
      guard got > 0 else { break }
      var sum = 0.0
      for index in 0..<(got * channels) { sum += Double(buffer[index]) * Double(buffer[index]) }
      position += Int64(got)
      lastLoud = sum / Double(got * channels) >= floor
      if lastLoud { tail = position }
    }
    return lastLoud ? nil : tail
  }
}
