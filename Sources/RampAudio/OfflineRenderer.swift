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
}

/// Renders a file through the same engine and kernels as live playback: the input plays as
/// stream `main` (`streams.main.gain`), under `master.gain`, and the output
/// is written block by block. Deterministic: the same input, options and script give the same
/// bytes.
public enum OfflineRenderer {
  public static let streamGain = "streams.main.gain"
  public static let masterGain = "master.gain"

  public static func render(input: String, output: String, options: RenderOptions) throws -> RenderSummary {
    let reader = try SoundFileReader(path: input)
    let rate = reader.sampleRate
    let channels = reader.channels
    let encoding = options.encoding ?? reader.encoding ?? .pcm24
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
    try writer.close()
    return RenderSummary(frames: total, sampleRate: rate, channels: channels, encoding: encoding)
  }
}
