import RampEngine

/// A change to the engine at an exact time of an offline render: what a timeline script's line
/// becomes once parsed. The renderer applies it between samples, on the sample `at` names.
public struct ScheduledChange {
  /// Seconds from the start of the render.
  public var at: Double
  /// A description for error messages (`line 3: fade`).
  public var label: String
  public var apply: (AnimationEngine) throws -> Void

  public init(at: Double, label: String, apply: @escaping (AnimationEngine) throws -> Void) {
    self.at = at
    self.label = label
    self.apply = apply
  }
}

/// How `OfflineRenderer` shapes a file.
public struct RenderOptions {
  /// Seconds of fade-in on stream `main` from the start (nil: none).
  public var fadeIn: Double?
  /// Seconds of fade-out on `master.gain` ending at the end of the input (nil: none).
  public var fadeOut: Double?
  public var curve: TimingFunction
  public var valueSpace: ValueSpace
  /// Nil: the input's own encoding when the output can hold it, else 24-bit PCM.
  public var encoding: SampleEncoding?
  public var changes: [ScheduledChange]
  public var blockFrames: Int
  /// Asked between blocks; true stops the render (``OfflineRenderer/Interrupted``), and the
  /// output stays as it was.
  public var isCancelled: () -> Bool = { false }

  public init(
    fadeIn: Double? = nil, fadeOut: Double? = nil, curve: TimingFunction = .linear, valueSpace: ValueSpace = .amplitude,
    encoding: SampleEncoding? = nil, changes: [ScheduledChange] = [], blockFrames: Int = 32_768
  ) {
    self.fadeIn = fadeIn
    self.fadeOut = fadeOut
    self.curve = curve
    self.valueSpace = valueSpace
    self.encoding = encoding
    self.changes = changes
    self.blockFrames = blockFrames
  }
}

public struct RenderSummary: Sendable {
  public let frames: Int64
  public let sampleRate: Int
  public let channels: Int
  public let encoding: SampleEncoding
  /// Why the encoding is not the one the input has, when that was chosen for the user (a 32-bit
  /// input to FLAC, which holds 24 bits at most); nil otherwise.
  public let encodingNote: String?
}

/// Renders a file through the same engine and kernels as live playback: the input plays as
/// stream `main` (`streams.main.gain`), under `master.gain`, and the output
/// is written block by block. Deterministic: the same input, options and script give the same
/// bytes.
public enum OfflineRenderer {
  public static let streamGain = "streams.main.gain"
  public static let masterGain = "master.gain"

  /// A render stopped by ``RenderOptions/isCancelled``: nothing was written.
  public struct Interrupted: Error, CustomStringConvertible {
    public var description: String { "interrupted; nothing was written" }
  }

  /// Refuses an output that is the input (whatever the spelling: `./x`, a symbolic link, a hard
  /// link), which the render would replace.
  public static func checkDistinct(input: String, output: String) throws(AudioError) {
    if ReplacementFile.sameFile(input, output) { throw sameFile(input: input, output: output) }
  }

  private static func sameFile(input: String, output: String) -> AudioError {
    let names = input == output ? "'\(output)'" : "'\(output)' (the same file as '\(input)')"
    return AudioError(.invalidParameter, "the output \(names) is the input; write to another file")
  }

  /// Renders `input` into `output` (replaced only once the render is complete; see
  /// ``SoundFileWriter``).
  ///
  /// - Throws: ``AudioError`` for an unreadable input, an output that is the input, an unwritable
  ///   output, a script line that fails or lies after the end; ``Interrupted``.
  public static func render(input: String, output: String, options: RenderOptions) throws -> RenderSummary {
    let reader = try SoundFileReader(path: input)
    // Judged on the open input, so no rename in between can slip it past.
    if reader.isSameFile(as: output) { throw sameFile(input: input, output: output) }
    let rate = reader.sampleRate
    let channels = reader.channels
    let (encoding, note) = chooseEncoding(options.encoding, input: reader.encoding, output: output)
    let length = reader.frames > 0 && reader.frames < Int64.max / 2 ? reader.frames : nil
    if let length, let late = options.changes.first(where: { ($0.at * Double(rate)).rounded() > Double(length) }) {
      throw pastTheEnd(late, frames: length, rate: rate)
    }
    let writer = try SoundFileWriter(path: output, sampleRate: rate, channels: channels, encoding: encoding)
    let engine = try AnimationEngine(sampleRate: Double(rate), maxBlockSize: options.blockFrames)
    let master = try engine.define(masterGain, value: 1, range: 0...1)
    let stream = try engine.define(streamGain, value: 1, range: 0...1)

    if let fadeIn = options.fadeIn, fadeIn > 0 {
      var fade = Animation.basic(from: 0, to: 1, duration: fadeIn, timingFunction: options.curve)
      fade.valueSpace = options.valueSpace
      try engine.add(fade, forKey: "fade-in", to: streamGain)
    }
    if let fadeOut = options.fadeOut, fadeOut > 0 {
      guard reader.frames > 0 else {
        throw AudioError(.unreadableFile, "cannot fade out '\(input)': its length is unknown")
      }
      let start = max(Double(reader.frames) / Double(rate) - fadeOut, 0)
      var fade = Animation.basic(from: 1, to: 0, duration: fadeOut, timingFunction: options.curve)
      fade.valueSpace = options.valueSpace
      fade.timing.beginTime = start
      fade.timing.fillMode = .forwards
      try engine.add(fade, forKey: "fade-out", to: masterGain)
    }

    // Changes in time order, each on its exact sample.
    let changes = options.changes.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }
      .map { (sample: Int64(($0.element.at * Double(rate)).rounded()), change: $0.element) }
    var nextChange = 0

    let block = options.blockFrames
    let buffers = RenderBuffers(frames: block, channels: channels)
    defer { buffers.deallocate() }
    let audio = buffers.audio
    let gain = buffers.gain
    let masterBlock = buffers.ramp
    var total: Int64 = 0
    while true {
      if options.isCancelled() { throw Interrupted() }
      while nextChange < changes.count && changes[nextChange].sample <= engine.now {
        let (_, change) = changes[nextChange]
        do { try change.apply(engine) } catch {
          throw AudioError(.invalidParameter, "\(change.label): \(error)")
        }
        nextChange += 1
      }
      var want = block
      if nextChange < changes.count { want = min(want, Int(changes[nextChange].sample - engine.now)) }
      let got = try reader.read(into: audio, frames: want)
      if got == 0 { break }
      engine.render(stream, start: engine.now, count: got, into: gain)
      engine.render(master, start: engine.now, count: got, into: masterBlock)
      GainKernel.multiply(gain, by: masterBlock, count: got)
      GainKernel.apply(audio, gain: gain, frames: got, channels: channels, into: audio)
      GainKernel.clamp(audio, count: got * channels)
      try writer.write(audio, frames: got)
      engine.advance(by: got)
      engine.drainCompletions()
      total += Int64(got)
    }
    // The declared length was wrong (or unknown): the line never ran.
    if nextChange < changes.count { throw pastTheEnd(changes[nextChange].change, frames: total, rate: rate) }
    if options.isCancelled() { throw Interrupted() }
    try writer.close()
    return RenderSummary(
      frames: total, sampleRate: rate, channels: channels, encoding: encoding, encodingNote: note)
  }

  private static func pastTheEnd(_ change: ScheduledChange, frames: Int64, rate: Int) -> AudioError {
    func seconds(_ value: Double) -> String {
      let rounded = (value * 1000).rounded() / 1000
      return rounded == rounded.rounded() ? "\(Int64(rounded)) s" : "\(rounded) s"
    }
    return AudioError(
      .invalidParameter,
      "\(change.label): at \(seconds(change.at)) is after the end of the render, which is "
        + "\(seconds(Double(frames) / Double(rate))) long (\(frames) frames at \(rate) Hz)")
  }

  /// The encoding asked for; else the input's when the output's format can store it; else 24-bit
  /// (with a note saying why when the input had an encoding of its own).
  static func chooseEncoding(_ asked: SampleEncoding?, input: SampleEncoding?, output: String) -> (
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
