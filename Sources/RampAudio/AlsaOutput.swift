import CALSA

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What the daemon asks of its ALSA output. `validate()` checks ranges; the device may still
/// negotiate different values (see `AlsaPCMOutput.Negotiated`).
public struct OutputConfiguration: Sendable, Equatable {
  /// The sample format written to ALSA. `.auto` takes the first of float, s32, s24, s16 the device accepts.
  public enum SampleFormat: String, CaseIterable, Sendable {
    case auto
    case float32 = "float"
    case s32
    /// 24 bits in a 32-bit little-endian container (ALSA `S24_LE`).
    case s24
    case s16
  }

  /// How `write` keeps time. `.device` relies on the blocking device; `.clock` sleeps so that writes
  /// never run more than one buffer ahead of wall-clock time (for sinks that swallow samples as fast as
  /// they come, like ALSA's `null`); `.auto` is `.clock` when the PCM chain ends in a null PCM
  /// (``OutputChain/automaticPacing``).
  public enum Pacing: String, CaseIterable, Sendable {
    case auto
    case clock
    case device
  }

  /// ALSA PCM name (`default`, `hw:0,0`, `plughw:1`, a name from asound.conf, …).
  public var device = "default"
  /// Frames per second.
  public var sampleRate = 48_000
  public var channels = 2
  public var format: SampleFormat = .auto
  /// Period (wake-up interval) in seconds. With clock pacing it is the block size.
  public var periodTime: Double = 0.010
  /// Buffer (total latency the device holds) in seconds.
  public var bufferTime: Double = 0.050
  public var pacing: Pacing = .auto
  /// With clock pacing, the seconds of audio left ahead of the clock when the render thread wakes
  /// to refill the buffer: how late a wake-up may be without an underrun. The thread then writes
  /// blocks back to back until the buffer is full, so it wakes once per (buffer − margin). Nil:
  /// half the buffer rounded up to whole periods (with 10 ms periods, 30 ms of a 50 ms buffer: a
  /// wake-up per two periods). From one period to the buffer less one period.
  /// On a device that rewinds (device pacing), the same margin for a render thread that fills the
  /// buffer and sleeps until this much is left (nil there: ``AlsaPCMOutput/rewindingLead``).
  public var marginTime: Double?
  /// Seconds of audio after which the player closes the device and opens it again; nil: never.
  /// A `file` plugin's file then starts afresh rather than grow without bound (the daemon's
  /// embedded output); whatever the device holds at that moment is cut short.
  public var reopenAfter: Double?
  /// Whether the device keeps writing silence while nothing plays. With clock pacing over a
  /// `file` plugin, false cuts idle spells out of the file (it then holds what was played,
  /// each idle spell shortened to the silence written before the stop) and keeps the render
  /// thread asleep meanwhile; true keeps the file a time line, a sample for every sample of
  /// wall-clock time.
  public var writesIdleSilence = true
  /// Whether a change rewrites what the device holds and has not played yet (`snd_pcm_rewind`),
  /// so it is heard within ``AlsaPCMOutput/rewindMargin`` whatever the buffer, instead of once
  /// the buffer has played (``AlsaPCMOutput/allowsRewind``).
  public var rewind: Rewind = .auto
  /// The buffer (seconds) on a device that rewinds, if more than `bufferTime`: a long buffer
  /// stands a render thread scheduled late, and costs no responsiveness there. 0: `bufferTime`.
  public var rewindBufferTime: Double = 0
  /// The true-peak limiter on the master (``TruePeakLimiter``); not enabled unless asked for
  /// (the daemon's configuration asks by default).
  public var limiter = LimiterSettings(enabled: false)
  /// The native PipeWire output's stream (``PipeWireOutput``): its role, target and quantum.
  public var pipewire = PipeWireSettings()

  public enum Rewind: String, CaseIterable, Sendable {
    /// On a sound card (a chain that ends in a kernel `hw` PCM, not through `dmix`).
    case auto
    /// On any chain that plays in real time and is not one that cannot (`file`, `null`, `dmix`):
    /// for a device, such as an ALSA plugin, known to play from its ring as it goes.
    case on
    case off
  }

  public init(
    device: String = "default", sampleRate: Int = 48_000, channels: Int = 2, format: SampleFormat = .auto,
    periodTime: Double = 0.010, bufferTime: Double = 0.050, pacing: Pacing = .auto, reopenAfter: Double? = nil,
    marginTime: Double? = nil
  ) {
    self.device = device
    self.sampleRate = sampleRate
    self.channels = channels
    self.format = format
    self.periodTime = periodTime
    self.bufferTime = bufferTime
    self.pacing = pacing
    self.reopenAfter = reopenAfter
    self.marginTime = marginTime
  }

  /// Checks ranges. Every message starts with the configuration key it concerns (`output.rate: …`).
  public func validate() throws(AudioError) {
    let invalid = AudioError.invalidOutput
    if device.isEmpty {
      throw invalid("device", "must not be empty")
    }
    if !(8_000...384_000).contains(sampleRate) {
      throw invalid("rate", "\(sampleRate) Hz is outside 8000...384000")
    }
    if !(1...32).contains(channels) {
      throw invalid("channels", "\(channels) is outside 1...32")
    }
    if !periodTime.isFinite || !(0.001...1).contains(periodTime) {
      throw invalid("period", "\(periodTime) s is outside 0.001...1 s")
    }
    if !bufferTime.isFinite || bufferTime < 2 * periodTime {
      throw invalid("buffer", "\(bufferTime) s is less than two periods (2 × \(periodTime) s)")
    }
    if bufferTime > 10 {
      throw invalid("buffer", "\(bufferTime) s is more than 10 s")
    }
    if let marginTime,
      !(marginTime.isFinite && marginTime >= periodTime && marginTime <= bufferTime - periodTime + 1e-9)
    {
      throw invalid(
        "margin",
        "\(marginTime) s is outside one period (\(periodTime) s) to the buffer less one period"
          + " (\(bufferTime) s − \(periodTime) s)")
    }
    if !rewindBufferTime.isFinite || !(0...10).contains(rewindBufferTime) {
      throw invalid("rewind-buffer", "\(rewindBufferTime) s is outside 0...10 s")
    }
    try limiter.validate()
    try pipewire.validate()
    if let reopenAfter, !(reopenAfter >= periodTime && reopenAfter <= 86_400) {
      // Set by the daemon from its own key (embedded-output.max-duration), which it checks first.
      throw AudioError(.invalidParameter, "reopenAfter: \(reopenAfter) s is outside one period...86400 s")
    }
  }
}

/// Blocking ALSA playback of interleaved float audio, converted to whatever the device takes.
///
/// Owned by one thread (the render thread): not `Sendable`, no locks. `write` does not allocate,
/// lock or log. To reopen after a device error, `close()` this one and create a new one.
///
/// An ``AudioOutput`` pushed by the render thread: its chain (``OutputChain``) decides what it
/// says it can do (``capabilities``): its clock (`null` under clock pacing: rampd's; a device
/// that holds nothing after a write: none), rewinds (a sound card), idle stops and releases (an
/// audio server's plugin).
public final class AlsaPCMOutput: AudioOutput {
  /// What the device actually gave us.
  public typealias Negotiated = NegotiatedOutput

  /// Frames left ahead of what plays when a writer that fills the buffer several blocks at a time
  /// wakes to refill it, the margin against a late wake-up: `margin` seconds
  /// (`OutputConfiguration.marginTime`), by default half the buffer rounded up to whole periods
  /// (30 ms of a 50 ms buffer in 10 ms periods: a wake-up per two periods, where most of a
  /// wake-up's cost is the waking itself); never less than a period unless the buffer holds under
  /// two, never more than the buffer less one period.
  public static func refillLead(bufferFrames: Int, periodFrames period: Int, rate: Int, margin: Double?) -> Int {
    let most = max(bufferFrames - period, 0)
    guard let margin else {
      let half = (bufferFrames + 1) / 2
      return min(max((half + period - 1) / max(period, 1) * period, period), most)
    }
    return min(max(Int((margin * Double(rate)).rounded()), period), most)
  }

  public let negotiated: Negotiated
  /// Underruns (-EPIPE) and suspends (-ESTRPIPE) recovered from in `write`; with clock pacing, also
  /// each time the writer fell behind the clock (the sink itself, `null` or `file`, never underruns).
  public private(set) var underruns = 0
  /// With device pacing: the device plays nothing in real time (ALSA's `null`, a `file` plugin
  /// over it): it holds no audio right after a write, taking whatever comes at once. Known after
  /// the first write.
  public private(set) var hasNoClock = false
  /// Whether what the device holds may be rewritten (`snd_pcm_rewind`): asked for
  /// (`OutputConfiguration.rewind`), device pacing, and a chain that plays what it holds in real
  /// time and honours a rewind (not `file`, `null` or `dmix`). Rewinds happen once the device is
  /// also known to play in real time (``rewindsNow``).
  public let allowsRewind: Bool
  private var clockProbed = false

  /// The configured PCM's chain, classified once when it is opened: it decides pacing, rewind and
  /// stopping while idle.
  public let chain: OutputChain

  /// Frames converted per `snd_pcm_writei` call: the conversion buffer holds this many frames.
  /// Equal to the period size (at least 64 frames); larger writes are done in blocks of this size.
  public let blockFrames: Int

  private(set) var pcm: OpaquePointer?
  /// `snd_pcm_status` goes here (allocated once: `heardPosition` runs on the render thread).
  private let status: OpaquePointer
  private let buffer: UnsafeMutableRawPointer
  private let bytesPerFrame: Int
  private var rng = XorShift64(seed: 0x9E37_79B9_7F4A_7C15)

  /// Clock pacing: frames written against CLOCK_MONOTONIC (at the negotiated rate once open).
  private var clock = ClockPacer(rate: 48_000)

  public init(_ configuration: OutputConfiguration) throws(AudioError) {
    try configuration.validate()
    let device = configuration.device

    var handle: OpaquePointer?
    var err = snd_pcm_open(&handle, device, SND_PCM_STREAM_PLAYBACK, 0)
    guard err >= 0, let pcm = handle else {
      throw AudioError(.device, "ALSA device '\(device)': cannot open for playback: \(alsaError(err))")
    }
    var ownsPCM = true
    defer { if ownsPCM { snd_pcm_close(pcm) } }

    func fail(_ what: String, _ code: Int32) -> AudioError {
      AudioError(.device, "ALSA device '\(device)': \(what): \(alsaError(code))")
    }

    // Hardware parameters.
    var hwOptional: OpaquePointer?
    err = snd_pcm_hw_params_malloc(&hwOptional)
    guard err >= 0, let hw = hwOptional else { throw fail("cannot allocate hardware parameters", err) }
    defer { snd_pcm_hw_params_free(hw) }

    err = snd_pcm_hw_params_any(pcm, hw)
    if err < 0 { throw fail("cannot read hardware parameters", err) }
    err = snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED)
    if err < 0 { throw fail("interleaved access not supported", err) }

    let format: OutputConfiguration.SampleFormat
    if configuration.format == .auto {
      var chosen: OutputConfiguration.SampleFormat?
      for candidate in [OutputConfiguration.SampleFormat.float32, .s32, .s24, .s16]
      where snd_pcm_hw_params_test_format(pcm, hw, candidate.alsaFormat) == 0 {
        err = snd_pcm_hw_params_set_format(pcm, hw, candidate.alsaFormat)
        if err >= 0 {
          chosen = candidate
          break
        }
      }
      guard let chosen else {
        throw AudioError(.device, "ALSA device '\(device)': accepts none of FLOAT_LE, S32_LE, S24_LE, S16_LE")
      }
      format = chosen
    } else {
      format = configuration.format
      err = snd_pcm_hw_params_set_format(pcm, hw, format.alsaFormat)
      if err < 0 {
        throw fail("does not accept format \(format.rawValue) (\(format.alsaName))", err)
      }
    }

    err = snd_pcm_hw_params_set_channels(pcm, hw, UInt32(configuration.channels))
    if err < 0 {
      var lo: UInt32 = 0
      var hi: UInt32 = 0
      snd_pcm_hw_params_get_channels_min(hw, &lo)
      snd_pcm_hw_params_get_channels_max(hw, &hi)
      throw fail("does not support \(configuration.channels) channels (it takes \(lo)...\(hi))", err)
    }

    var rate = UInt32(configuration.sampleRate)
    err = snd_pcm_hw_params_set_rate_near(pcm, hw, &rate, nil)
    if err < 0 { throw fail("cannot set a rate near \(configuration.sampleRate) Hz", err) }

    var periodMicros = UInt32((configuration.periodTime * 1e6).rounded())
    err = snd_pcm_hw_params_set_period_time_near(pcm, hw, &periodMicros, nil)
    if err < 0 { throw fail("cannot set a period near \(configuration.periodTime) s", err) }
    // The chain (known before the setup) decides whether it may rewind, and with it the buffer.
    let chain = OutputChain(opened: pcm, name: device)
    if let refused = chain.refusal(of: configuration.rewind) { throw refused }
    let pacing = configuration.pacing == .auto ? chain.automaticPacing : configuration.pacing
    let rewinds = pacing == .device && chain.rewinds(under: configuration.rewind)
    let bufferTime = rewinds ? max(configuration.bufferTime, configuration.rewindBufferTime) : configuration.bufferTime
    var bufferMicros = UInt32((bufferTime * 1e6).rounded())
    err = snd_pcm_hw_params_set_buffer_time_near(pcm, hw, &bufferMicros, nil)
    if err < 0 { throw fail("cannot set a buffer near \(configuration.bufferTime) s", err) }

    err = snd_pcm_hw_params(pcm, hw)
    if err < 0 { throw fail("cannot apply hardware parameters", err) }

    var periodSize: snd_pcm_uframes_t = 0
    var bufferSize: snd_pcm_uframes_t = 0
    err = snd_pcm_hw_params_get_period_size(hw, &periodSize, nil)
    if err < 0 { throw fail("cannot read the period size", err) }
    err = snd_pcm_hw_params_get_buffer_size(hw, &bufferSize)
    if err < 0 { throw fail("cannot read the buffer size", err) }

    // Software parameters: start when the buffer is full but for one period; wake when the
    // refill lead is left (several periods free, `refillLead`), or per period on a device that
    // rewinds (the render thread waits for room itself there, on its own timer) and through an
    // audio server.
    var swOptional: OpaquePointer?
    err = snd_pcm_sw_params_malloc(&swOptional)
    guard err >= 0, let sw = swOptional else { throw fail("cannot allocate software parameters", err) }
    defer { snd_pcm_sw_params_free(sw) }
    err = snd_pcm_sw_params_current(pcm, sw)
    if err < 0 { throw fail("cannot read software parameters", err) }
    let startThreshold = bufferSize > periodSize ? bufferSize - periodSize : bufferSize
    err = snd_pcm_sw_params_set_start_threshold(pcm, sw, startThreshold)
    if err < 0 { throw fail("cannot set the start threshold", err) }
    let refillLead = Self.refillLead(
      bufferFrames: Int(bufferSize), periodFrames: Int(periodSize), rate: Int(rate), margin: configuration.marginTime)
    // An audio server's plugin makes avail_min its stream's latency, which sets the quantum of the
    // server's whole graph: a period there, as the latency rampd promises.
    let serverClient = chain.kind == .pipewire || chain.kind == .pulse
    let availMin =
      rewinds || serverClient ? periodSize : max(bufferSize - snd_pcm_uframes_t(refillLead), periodSize)
    err = snd_pcm_sw_params_set_avail_min(pcm, sw, availMin)
    if err < 0 { throw fail("cannot set avail_min", err) }
    // Timestamps on CLOCK_MONOTONIC with every status (`heardPosition`); a device that cannot
    // gives none, and the time the status was read stands in.
    _ = snd_pcm_sw_params_set_tstamp_mode(pcm, sw, SND_PCM_TSTAMP_ENABLE)
    _ = snd_pcm_sw_params_set_tstamp_type(pcm, sw, SND_PCM_TSTAMP_TYPE_MONOTONIC)
    err = snd_pcm_sw_params(pcm, sw)
    if err < 0 { throw fail("cannot apply software parameters", err) }

    err = snd_pcm_prepare(pcm)
    if err < 0 { throw fail("cannot prepare", err) }
    var statusOptional: OpaquePointer?
    err = snd_pcm_status_malloc(&statusOptional)
    guard err >= 0, let status = statusOptional else { throw fail("cannot allocate a status", err) }

    self.chain = chain
    writesIdleSilence = configuration.writesIdleSilence
    releasesWhenIdle = serverClient
    allowsRewind = rewinds

    negotiated = Negotiated(
      device: device, format: format, rate: Int(rate), channels: configuration.channels,
      periodFrames: Int(periodSize), bufferFrames: Int(bufferSize), pacing: pacing, kind: chain.kind)
    blockFrames = max(Int(periodSize), 64)
    clock = ClockPacer(rate: negotiated.rate)
    bytesPerFrame = format.bytesPerSample * configuration.channels
    buffer = UnsafeMutableRawPointer.allocate(byteCount: blockFrames * bytesPerFrame, alignment: 16)
    self.status = status
    self.pcm = pcm
    ownsPCM = false
  }

  deinit {
    close()
    buffer.deallocate()
    snd_pcm_status_free(status)
  }

  /// Closes the PCM without draining. Idempotent; `write` throws afterwards.
  public func close() {
    if let pcm {
      snd_pcm_close(pcm)
      self.pcm = nil
    }
  }

  public var isOpen: Bool { pcm != nil }

  /// What the chain and the first write said (``AudioOutput/capabilities``). Allocation-free.
  public var capabilities: OutputCapabilities {
    OutputCapabilities(
      clock: negotiated.pacing == .clock ? .ours : hasNoClock ? .none : .own, delivery: .push,
      mayRewind: allowsRewind, rewindFrames: rewindsNow ? negotiated.bufferFrames : 0,
      rewindMarginFrames: rewindMarginFrames, stopsWhenIdle: stopsWhenIdle, releasesWhenIdle: releasesWhenIdle,
      boundsHeardDrift: releasesWhenIdle)
  }

  /// Pushed: never pulls.
  public func startPulling(_ renderer: any PulledRender) -> Bool { false }

  /// `failureMessage` as an error.
  public var failure: AudioError { AudioError(.device, failureMessage) }

  /// Writes `frames` frames of interleaved float samples (`negotiated.channels` per frame), converting
  /// to the negotiated format in blocks of `blockFrames`. Blocks until the device (or, with clock
  /// pacing, the clock) has room. Recovers from underruns and suspends; any other failure throws
  /// `AudioError(.device)`, after which the caller should close and reopen.
  ///
  /// `clamped`: the caller promises every sample is within [−1, 1] and none is NaN (the render
  /// path clamps its mix); a float device then takes the samples as they are, unconverted.
  public func write(_ interleaved: UnsafePointer<Float>, frames: Int, clamped: Bool = false) throws(AudioError) {
    guard writeBlock(interleaved, frames: frames, clamped: clamped) else {
      throw AudioError(.device, failureMessage)
    }
  }

  /// The ALSA error code that made the last write fail (`closedCode` after close; 0: none did).
  /// The render thread's write records it instead of building a message.
  public private(set) var writeFailure: Int32 = 0
  private static let closedCode = Int32.min
  /// `writeFailure` of a device that took nothing for `stallMilliseconds`.
  private static let stalledCode = Int32.min + 1

  /// How long a device with room for nothing may take nothing before a write gives up on it: an
  /// audio server's stream that never runs (PipeWire with no sink to link it to, a graph that
  /// stopped) would otherwise hold `snd_pcm_writei` in its wait for ever, and the render thread
  /// with it. Far longer than any device's period (an audio server's quantum is at most a few
  /// hundred milliseconds), and than four buffers.
  var stallMilliseconds: Int32 {
    Int32(max(2000, 4 * negotiated.bufferFrames * 1000 / max(negotiated.rate, 1)))
  }

  /// Set by whoever hands a failed device over (the render thread): its failure is news (the
  /// device was playing), and the thread that takes it over announces it with `failureMessage`.
  public var announcesFailure = false

  /// Why the last write failed, in words: built by whoever reads it, off the render thread.
  public var failureMessage: String {
    switch writeFailure {
    case Self.closedCode: "ALSA device '\(negotiated.device)': write after close"
    case Self.stalledCode:
      "ALSA device '\(negotiated.device)': took no audio for \(Double(stallMilliseconds) / 1000) s (its stream does not run)"
    default: "ALSA device '\(negotiated.device)': write failed: \(alsaError(writeFailure))"
    }
  }

  /// Recoveries in a row, with not a frame written in between, after which a write fails: ALSA's
  /// `pipewire` PCM while its server is down fails every write although `snd_pcm_recover`
  /// succeeds each time, and would be retried forever. A real underrun is followed by a write.
  static let fruitlessRecoveries = 4

  /// `write` as the render thread does it: false when the device failed (`writeFailure` says
  /// why, `failureMessage` in words). Allocation-free.
  public func writeBlock(_ interleaved: UnsafePointer<Float>, frames: Int, clamped: Bool = false) -> Bool {
    guard let pcm else {
      writeFailure = Self.closedCode
      return false
    }
    let channels = negotiated.channels
    let direct = clamped && negotiated.format == .float32
    var done = 0
    while done < frames {
      let count = min(blockFrames, frames - done)
      let source: UnsafeRawPointer
      if direct {
        source = UnsafeRawPointer(interleaved + done * channels)
      } else {
        convert(interleaved + done * channels, samples: count * channels)
        source = UnsafeRawPointer(buffer)
      }
      if negotiated.pacing == .clock { waitForClock(frames: count) }
      var offset = 0
      var fruitless = 0
      while offset < count {
        // A device without room is waited for here, bounded, rather than in `snd_pcm_writei`,
        // which would wait without end on a stream that never runs. (An error here is left to
        // the write, which reports or recovers it.)
        if negotiated.pacing == .device, case let room = snd_pcm_avail_update(pcm), room >= 0,
          room < count - offset, snd_pcm_wait(pcm, stallMilliseconds) == 0
        {
          writeFailure = Self.stalledCode
          return false
        }
        let result = snd_pcm_writei(pcm, source + offset * bytesPerFrame, snd_pcm_uframes_t(count - offset))
        if result >= 0 {
          offset += Int(result)
          fruitless = 0
          continue
        }
        let code = Int32(truncatingIfNeeded: result)
        if code == -EPIPE || code == -ESTRPIPE {
          underruns += 1
        }
        let recovered = snd_pcm_recover(pcm, code, 1)
        fruitless += 1
        if recovered < 0 || fruitless >= Self.fruitlessRecoveries {
          writeFailure = code
          return false
        }
      }
      clock.advance(by: count)
      done += count
      if startEarly { startIfEnough() }
    }
    if !clockProbed && negotiated.pacing == .device && frames > 0 {
      // A device that plays in real time holds at least part of what was just written. One that
      // cannot say (an error) is taken to have a clock: waiting on it unbounded would be worse.
      clockProbed = true
      // An audio server's client plays in real time, though it may say it holds nothing
      // before it has started (`pulse` does).
      hasNoClock = !releasesWhenIdle && deviceDelay() == 0
    }
    return true
  }

  /// `snd_pcm_delay`, at least 0; nil when the device cannot say.
  private func deviceDelay() -> Int? {
    guard let pcm else { return nil }
    var delay: snd_pcm_sframes_t = 0
    guard snd_pcm_delay(pcm, &delay) == 0 else { return nil }
    return max(Int(delay), 0)
  }

  /// Where the device is in what was written: `delay` frames written are not yet heard at
  /// `nanoseconds` (CLOCK_MONOTONIC), so the last frame written is heard `delay` frames after it.
  /// From the device's own status (`snd_pcm_status`: its delay and timestamp) while it runs; with
  /// clock pacing, from the clock. Nil while the device does not play in real time (not started,
  /// stopped, without a clock). Allocation-free.
  public func heardPosition() -> (delay: Int, nanoseconds: Int64)? {
    guard let pcm else { return nil }
    if negotiated.pacing == .clock {
      guard clock.started else { return nil }
      let now = monotonicNanoseconds()
      return (Int(max(clock.framesAhead(now: now), 0)), now)
    }
    guard !hasNoClock, snd_pcm_status(pcm, status) == 0, snd_pcm_status_get_state(status) == SND_PCM_STATE_RUNNING
    else { return nil }
    let now = monotonicNanoseconds()
    var stamp = snd_htimestamp_t()
    snd_pcm_status_get_htstamp(status, &stamp)
    var time = Int64(stamp.tv_sec) * 1_000_000_000 + Int64(stamp.tv_nsec)
    // No timestamp, or one on another clock (a plugin chain that did not pass the type on).
    if time == 0 || abs(time - now) > 100_000_000 { time = now }
    return (max(Int(snd_pcm_status_get_delay(status)), 0), time)
  }

  /// Whether the player may stop writing while nothing plays (`stopForIdle`): a device that
  /// plays in real time, or a clock-paced `null` that keeps nothing (or a `file` over it that is
  /// not to keep idle silence: `OutputConfiguration.writesIdleSilence`); not a chain that writes
  /// a file sample for sample, nor a device without a clock (or not yet known to have one).
  public var stopsWhenIdle: Bool {
    negotiated.pacing == .clock ? chain.swallowsSilently || !writesIdleSilence : clockProbed && !hasNoClock
  }

  /// Whether a device stopped for idle is also closed, and opened again when something is to
  /// play: a client of an audio server (PipeWire, PulseAudio), whose stream keeps the server's
  /// graph running while it is open, stopped or not.
  public let releasesWhenIdle: Bool
  private let writesIdleSilence: Bool

  /// Set by `stopForIdle`: the next writes start the device once it holds two blocks instead of
  /// its start threshold (a buffer less a period), so what wakes it from idle is heard within
  /// the time it takes to render two blocks, and the start does not wait for a buffer to be
  /// rendered; the writes that follow fill the buffer faster than it plays.
  private var startEarly = false
  /// With `startEarly`: not before these monotonic nanoseconds (0: at once).
  private var startAt: Int64 = 0

  /// After `stopForIdle`, with device pacing: the device is to start at `nanoseconds`
  /// (monotonic) exactly, once it holds two blocks; the writes wait for it. False when it cannot
  /// (clock pacing, or the device is not stopped for idle).
  public func start(at nanoseconds: Int64) -> Bool {
    guard startEarly, negotiated.pacing == .device else { return false }
    startAt = nanoseconds
    return true
  }

  private func startIfEnough() {
    guard let pcm else { return }
    guard snd_pcm_state(pcm) == SND_PCM_STATE_PREPARED else {
      startEarly = false
      return
    }
    if (deviceDelay() ?? 0) >= min(2 * blockFrames, negotiated.bufferFrames) {
      startEarly = false
      if startAt > 0 { sleepUntil(nanoseconds: startAt) }
      startAt = 0
      snd_pcm_start(pcm)
    }
  }

  /// Stops the device, which has played what it holds but its last silence (nothing plays): it
  /// neither runs dry (no underrun) nor wakes anyone until the next writes start it again, once
  /// it holds two blocks. With clock pacing, the clock starts again at the next write, and what
  /// the chain still buffers is written out (`snd_pcm_drain`: a `file` plugin's last chunk
  /// reaches its file, which then holds all that was played while rampd idles). Allocation-free.
  public func stopForIdle() {
    guard let pcm else { return }
    if negotiated.pacing == .clock {
      snd_pcm_drain(pcm)
      snd_pcm_prepare(pcm)
      clock.reset()
      return
    }
    snd_pcm_drop(pcm)
    snd_pcm_prepare(pcm)
    startEarly = true
  }

  /// Plays out what has been written (`snd_pcm_drain`; with clock pacing, also sleeps until the
  /// wall clock has caught up with the frames written), then prepares the PCM for further writes.
  public func drain() {
    guard let pcm else { return }
    if negotiated.pacing == .clock { clock.waitUntilPlayed() }
    snd_pcm_drain(pcm)
    snd_pcm_prepare(pcm)
    clock.reset()
  }

  /// Frames written but not yet heard, for latency reporting: `snd_pcm_delay` (0 on error); with clock
  /// pacing, the frames written ahead of the wall clock (a null PCM reports no delay of its own).
  public var delayFrames: Int {
    let device = deviceDelay() ?? 0
    guard negotiated.pacing == .clock else { return device }
    return max(device, Int(max(clock.framesAhead(), 0)))
  }

  // MARK: Conversion

  private func convert(_ source: UnsafePointer<Float>, samples: Int) {
    switch negotiated.format {
    case .float32, .auto:
      let out = buffer.assumingMemoryBound(to: Float.self)
      for i in 0..<samples {
        let x = source[i]
        out[i] = x.isNaN ? 0 : (x < -1 ? -1 : (x > 1 ? 1 : x))
      }
    case .s32:
      let out = buffer.assumingMemoryBound(to: Int32.self)
      for i in 0..<samples {
        out[i] = Int32(littleEndian: quantize(source[i], scale: 2_147_483_648, dither: 0))
      }
    case .s24:
      let out = buffer.assumingMemoryBound(to: Int32.self)
      for i in 0..<samples {
        out[i] = Int32(littleEndian: quantize(source[i], scale: 8_388_608, dither: rng.tpdf()))
      }
    case .s16:
      let out = buffer.assumingMemoryBound(to: Int16.self)
      for i in 0..<samples {
        out[i] = Int16(littleEndian: Int16(truncatingIfNeeded: quantize(source[i], scale: 32_768, dither: rng.tpdf())))
      }
    }
  }

  /// Scales to `scale` LSB per unit, adds `dither` LSB, rounds and saturates to [-scale, scale - 1].
  /// Input at or beyond ±1 gives exactly full scale (no dither on the rails), never a wrap; NaN gives 0.
  @inline(__always)
  private func quantize(_ sample: Float, scale: Double, dither: Double) -> Int32 {
    let x = Double(sample)
    if x >= 1 { return Int32(scale - 1) }
    if x <= -1 { return Int32(-scale) }
    if x.isNaN { return 0 }
    var y = (x * scale + dither).rounded()
    y = y < -scale ? -scale : (y > scale - 1 ? scale - 1 : y)
    return Int32(y)
  }

  // MARK: Clock pacing

  /// With clock pacing, how long to wait before writing a block of `frames` (always 0 with device
  /// pacing): the render thread spends that time taking commands. 0 while the block fits in the
  /// buffer ahead of the clock; once it does not, the seconds until only `refill` frames are left
  /// ahead, so a writer that then writes blocks back to back until the buffer is full again wakes
  /// once per several blocks. The default, buffer − `frames`, is how long `write` would sleep.
  public func secondsUntilWritable(frames: Int, refillAt refill: Int? = nil) -> Double {
    guard negotiated.pacing == .clock else { return 0 }
    let now = monotonicNanoseconds()
    guard let due = clock.writable(count: frames, lead: negotiated.bufferFrames, refill: refill, now: now) else {
      return 0
    }
    return max(Double(due - now) / 1e9, 0)
  }

  /// Sleeps until writing `frames` more keeps the frames written at most one buffer ahead of the
  /// wall clock. A writer that fell behind the clock (a virtual underrun) re-anchors it.
  private func waitForClock(frames: Int) {
    if clock.wait(toWrite: frames, lead: negotiated.bufferFrames) {
      // Everything written has been "played": a device would have run dry here. Counted, or a
      // clock-paced output (the embedded WAV file, tests) would never report a late render.
      underruns += 1
    }
  }
}

extension OutputConfiguration.SampleFormat {
  var alsaFormat: snd_pcm_format_t {
    switch self {
    case .auto, .float32: SND_PCM_FORMAT_FLOAT_LE
    case .s32: SND_PCM_FORMAT_S32_LE
    case .s24: SND_PCM_FORMAT_S24_LE
    case .s16: SND_PCM_FORMAT_S16_LE
    }
  }

  var alsaName: String {
    switch self {
    case .auto, .float32: "FLOAT_LE"
    case .s32: "S32_LE"
    case .s24: "S24_LE"
    case .s16: "S16_LE"
    }
  }

  var bytesPerSample: Int { self == .s16 ? 2 : 4 }
}

/// xorshift64 (Marsaglia): deterministic, allocation-free noise for dither.
private struct XorShift64 {
  var state: UInt64

  init(seed: UInt64) { state = seed == 0 ? 0x2545_F491_4F6C_DD1D : seed }

  @inline(__always)
  mutating func next() -> UInt64 {
    state ^= state << 13
    state ^= state >> 7
    state ^= state << 17
    return state
  }

  /// Triangular dither in LSB: the sum of two uniforms in [-0.5, 0.5), one from each 32-bit half.
  @inline(__always)
  mutating func tpdf() -> Double {
    let r = next()
    let a = Double(r >> 40) * 0x1p-24
    let b = Double((r & 0xFFFF_FFFF) >> 8) * 0x1p-24
    return a + b - 1
  }
}

private func alsaError(_ code: Int32) -> String {
  String(cString: snd_strerror(code))
}
