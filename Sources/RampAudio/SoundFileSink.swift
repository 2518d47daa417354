/// Where an offline ``Player`` sends its blocks: an output that takes samples as fast as they
/// come, with no clock.
public protocol BlockSink: AnyObject {
  /// Takes `frames` interleaved frames of the mix (clamped to [-1, 1]).
  func write(_ samples: UnsafePointer<Float>, frames: Int) throws(AudioError)
}

/// A sink that writes a sound file through ``SoundFileWriter``: to a hidden temporary file beside
/// the output, renamed over it by ``finish(frames:)`` and removed if the sink goes without it.
/// The newest block is held back until the next one comes, so the file can end on any sample of
/// it (a show ends where its last stream ends, within a block). What reaches the file can be
/// scaled by a constant ``gain`` and measured (``measurement``); a sink with no writer only
/// measures.
public final class SoundFileSink: BlockSink {
  public let writer: SoundFileWriter?
  public let channels: Int
  /// Every frame that reaches the file (or would, with no writer) is added to it.
  public let measurement: LoudnessMeasurement?
  /// Multiplied into every sample before it is measured and written.
  public var gain: Float = 1
  /// Frames written to the file so far (the held-back block not counted).
  public private(set) var written: Int64 = 0
  /// Frames the file may hold at most (nil: no limit): blocks beyond it are dropped.
  public var limit: Int64?
  private let held: UnsafeMutablePointer<Float>
  private let capacity: Int
  private var heldFrames = 0

  public init(writer: SoundFileWriter, blockFrames: Int, measurement: LoudnessMeasurement? = nil) {
    self.writer = writer
    self.measurement = measurement
    channels = writer.channels
    capacity = blockFrames
    held = .allocate(capacity: blockFrames * writer.channels)
  }

  /// A sink that writes nothing and measures what it is given.
  public init(measuring measurement: LoudnessMeasurement, blockFrames: Int) {
    writer = nil
    self.measurement = measurement
    channels = measurement.channels
    capacity = blockFrames
    held = .allocate(capacity: blockFrames * measurement.channels)
  }

  deinit { held.deallocate() }

  /// Frames taken so far, written or held.
  public var received: Int64 { written + Int64(heldFrames) }

  public func write(_ samples: UnsafePointer<Float>, frames: Int) throws(AudioError) {
    try flush(upTo: limit)
    let taken = min(frames, capacity)
    held.update(from: samples, count: taken * channels)
    heldFrames = taken
  }

  /// Writes what is held, up to `total` frames in the file; the rest is dropped.
  private func flush(upTo total: Int64?) throws(AudioError) {
    let frames = total.map { Int(max(min(Int64(heldFrames), $0 - written), 0)) } ?? heldFrames
    if gain != 1 {
      for index in 0..<(frames * channels) { held[index] *= gain }
    }
    try measurement?.add(held, frames: frames)
    try writer?.write(held, frames: frames)
    written += Int64(frames)
    heldFrames = 0
  }

  /// Completes the file with exactly `frames` frames (at most those received), and renames it
  /// into place.
  public func finish(frames: Int64) throws(AudioError) {
    try flush(upTo: min(frames, limit ?? frames))
    try writer?.close()
  }

  /// Refuses an output that is the input (whatever the spelling: `./x`, a symbolic link, a hard
  /// link), which the render would replace.
  public static func checkDistinct(input: String, output: String) throws(AudioError) {
    if ReplacementFile.sameFile(input, output) { throw sameFile(input: input, output: output) }
  }

  /// The same, judged on an open input, so no rename in between can slip it past.
  public static func checkDistinct(_ input: SoundFileReader, output: String) throws(AudioError) {
    if input.isSameFile(as: output) { throw sameFile(input: input.path, output: output) }
  }

  private static func sameFile(input: String, output: String) -> AudioError {
    let names = input == output ? "'\(output)'" : "'\(output)' (the same file as '\(input)')"
    return AudioError(.invalidParameter, "the output \(names) is the input; write to another file")
  }

  /// The encoding asked for; else the input's when the output's format can store it; else 24-bit
  /// (with a note saying why when the input had an encoding of its own).
  public static func chooseEncoding(_ asked: SampleEncoding?, input: SampleEncoding?, output: String) -> (
    SampleEncoding, String?
  ) {
    if let asked { return (asked, nil) }
    guard let input else { return (.pcm24, nil) }
    guard let allowed = SoundFileWriter.encodings(forPath: output), !allowed.contains(input) else {
      return (input, nil)
    }
    let format = SoundFileWriter.formatName(forPath: output) ?? "the output's format"
    let chosen: SampleEncoding = allowed.contains(.pcm24) ? .pcm24 : allowed[0]
    return (
      chosen,
      "\(format) cannot store the input's encoding '\(input.rawValue)'; writing '\(chosen.rawValue)' "
        + "(--encoding chooses)"
    )
  }
}
