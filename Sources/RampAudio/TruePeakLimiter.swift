#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A look-ahead limiter that keeps the true peak (ITU-R BS.1770, dBTP) of interleaved float audio
/// at or under a ceiling, for the master of the mix. The render thread owns it: every storage it
/// uses is allocated by `init`, and `process`, the readings, `save`, `restore` and `reset`
/// neither allocate, free, lock nor log.
///
/// The output is the input delayed by ``latencyFrames`` and multiplied by one gain per frame
/// (the same for every channel, so the stereo image stays where it was). The gain is exactly 1
/// while the signal's true peak stays at or under the ceiling, so the limiter is bit-transparent
/// when it has nothing to do.
///
/// How the gain is found, frame by frame of the incoming (look-ahead) signal:
/// 1. Peak: the highest of |sample| and of seven interpolated points between each pair of
///    samples, every channel. Four are BS.1770 Annex 2's 4× interpolator (its published 48-tap
///    polyphase filter, which interpolates at 1/8, 3/8, 5/8 and 7/8 of a sample period), three
///    a Hann-windowed sinc at 1/4, 1/2 and 3/4 (where meters such as libebur128 and ffmpeg's
///    `ebur128` put theirs). A 4× meter reads low when a peak falls between its points, and
///    meters do not put them at the same places: limited by the Annex's points alone, a steady
///    sine at 0.2 or 0.3 × the rate reads up to 0.1 dB over the ceiling on libebur128; with both
///    grids, at most 0.04 dB at any frequency up to 0.45 × the rate.
/// 2. Required gain: ceiling / peak when the peak is over the ceiling, else 1. It applies to the
///    whole span of samples its interpolation read (``filterSpan`` frames), not to one frame.
/// 3. Release: the envelope follows a lower required gain at once and rises back at most
///    ``releaseDecibelsPerSecond`` (linear in dB: 6.02 dB, a halving, in `releaseSeconds`).
/// 4. Attack: the minimum of the envelope over the next ``attackFrames`` + ``filterSpan`` − 1
///    frames, averaged over the last ``attackFrames`` frames. Every frame of that average's
///    window holds each frame's required gain, so the gain never exceeds the gain any sample in
///    the interpolation span of any peak requires; it falls to the peak's gain in a straight
///    line over ``attackFrames`` frames, ending before the peak's span is heard, and it rises no
///    faster than the release lets the envelope rise.
///
/// Rewind: ``save(to:)`` copies the whole state into one of `checkpoints` slots reserved by
/// `init`, ``restore(from:)`` copies it back; processing the same audio from a restored state
/// gives the same bytes. A slot is a few kilobytes at 48 kHz stereo (the delay line is most of
/// it), one copy per block saved.
///
/// CPU (release build, x86, 48 kHz stereo, `rampbench --limiter`): about 1.5 ms per second of
/// audio limited, 0.06 ms of audio at −20 dBFS. The interpolation is most of it, and it is left
/// out for a channel's chunk whose samples all stay 6.1 dB under the ceiling (no interpolated
/// point can reach the ceiling then: no phase's taps sum to more than 2.02 in absolute value).
/// At rest (the gain 1 and every sample that far under the ceiling), a chunk costs one pass to
/// find its loudest sample and the delay line is swapped with it by memory copies.
public final class TruePeakLimiter {
  public let rate: Int
  public let channels: Int
  /// The ceiling, dBTP, and as a linear amplitude.
  public let ceilingDecibels: Double
  public let ceiling: Float
  /// Frames the gain takes to fall to a peak's gain (the look-ahead given to `init`).
  public let attackFrames: Int
  /// Frames the output lags the input: ``attackFrames`` + ``filterSpan`` − 2 (a required gain
  /// binds the frame it is found at and the 11 before it, and the gain then falls over the
  /// attack: it is down by the time the first of those frames comes out).
  public let latencyFrames: Int
  public let releaseSeconds: Double
  /// How fast the gain recovers once the peaks that needed it have passed.
  public let releaseDecibelsPerSecond: Double
  /// Slots for ``save(to:)`` and ``restore(from:)``.
  public let checkpoints: Int

  /// Frames an interpolated point reads: the 12 taps of each phase.
  public static let filterSpan = 12
  /// Interpolated points between two samples: the Annex's four and three of a windowed sinc.
  static let phases = 7
  /// Frames whose peaks are found at once, channel by channel (the filters' scratch).
  static let chunkFrames = 256

  /// The envelope's largest rise in one frame, a factor.
  private let recovery: Double
  /// Frames the envelope's minimum spans.
  private let holdFrames: Int
  /// Phase p's taps for window w[0…11] (w[11] the newest sample): Σ coefficients[12p + k]·w[k].
  private let coefficients: UnsafeMutablePointer<Float>
  /// A channel's samples whose highest |sample| is at most ceiling / `boundFactor` have no
  /// interpolated point over the ceiling (the largest sum of |taps| of any phase, rounded up).
  private let boundFactor: Float

  /// The state that `save` copies, in one block: the envelope minimum's deque (values, then the
  /// steps they came at), the attack average's window, the last `filterSpan − 1` samples of each
  /// channel, and the delay line.
  private let state: UnsafeMutableRawPointer
  private let stateBytes: Int
  private let dequeValues: UnsafeMutablePointer<Double>
  private let dequeSteps: UnsafeMutablePointer<Int>
  private let average: UnsafeMutablePointer<Double>
  private let history: UnsafeMutablePointer<Float>
  private let delay: UnsafeMutablePointer<Float>

  /// Scratch, not state: one channel's history and chunk contiguous, the chunk's peaks, and one
  /// interpolated point of each frame.
  private let window: UnsafeMutablePointer<Float>
  private let peaks: UnsafeMutablePointer<Float>
  private let sums: UnsafeMutablePointer<Float>

  /// The rest of the state, copied beside the block.
  struct Cursor {
    /// Frames taken in all (the deque's clock).
    var step = 0
    var envelope = 1.0
    var dequeHead = 0
    var dequeCount = 0
    var averagePosition = 0
    var averageSum = 0.0
    /// Values under 1 in the average's window: none, and the gain is exactly 1.
    var averageLowered = 0
    var delayPosition = 0
    /// The gain given to the last frame out.
    var gain = 1.0
    /// The lowest gain given since ``takeEngaged()`` last asked.
    var lowest = 1.0
  }
  private var cursor = Cursor()
  private let savedCursors: UnsafeMutablePointer<Cursor>
  private let savedStates: UnsafeMutableRawPointer

  /// - Parameters:
  ///   - ceilingDecibels: the highest true peak let through, dBTP (−1 is EBU R 128's maximum).
  ///   - lookAheadSeconds: the attack, which the output's latency includes (at least one frame).
  ///   - releaseSeconds: the time the gain takes to recover 6.02 dB.
  ///   - checkpoints: slots reserved for ``save(to:)``.
  public init(
    rate: Int, channels: Int, ceilingDecibels: Double, lookAheadSeconds: Double = 0.0015,
    releaseSeconds: Double = 0.1, checkpoints: Int = 0
  ) {
    precondition(rate > 0 && channels > 0 && releaseSeconds > 0 && checkpoints >= 0)
    self.rate = rate
    self.channels = channels
    self.ceilingDecibels = ceilingDecibels
    ceiling = Float(pow(10, ceilingDecibels / 20))
    attackFrames = max(Int((lookAheadSeconds * Double(rate)).rounded()), 1)
    holdFrames = attackFrames + Self.filterSpan - 1
    latencyFrames = holdFrames - 1
    self.releaseSeconds = releaseSeconds
    releaseDecibelsPerSecond = 20 * log10(2.0) / releaseSeconds
    recovery = pow(10, releaseDecibelsPerSecond / Double(rate) / 20)
    self.checkpoints = checkpoints

    let span = Self.filterSpan
    coefficients = .allocate(capacity: Self.phases * span)
    var largestSum = 0.0
    for phase in 0..<Self.phases {
      var sum = 0.0
      for tap in 0..<span {
        let value = Self.coefficient(phase: phase, tap: tap)
        (coefficients + phase * span + tap).initialize(to: Float(value))
        sum += abs(value)
      }
      largestSum = max(largestSum, sum)
    }
    // Float sums of 12 products may round up a little: a margin far above their error.
    boundFactor = Float(largestSum * 1.001)

    let doubles = 2 * holdFrames + attackFrames
    let floats = channels * (span - 1) + channels * latencyFrames
    stateBytes = doubles * MemoryLayout<Double>.stride + floats * MemoryLayout<Float>.stride
    state = .allocate(byteCount: stateBytes, alignment: MemoryLayout<Double>.alignment)
    dequeValues = state.bindMemory(to: Double.self, capacity: holdFrames)
    dequeSteps = (state + holdFrames * 8).bindMemory(to: Int.self, capacity: holdFrames)
    average = (state + 2 * holdFrames * 8).bindMemory(to: Double.self, capacity: attackFrames)
    history = (state + doubles * 8).bindMemory(to: Float.self, capacity: channels * (span - 1))
    delay = (state + doubles * 8 + channels * (span - 1) * 4).bindMemory(
      to: Float.self, capacity: channels * latencyFrames)
    window = .allocate(capacity: span - 1 + Self.chunkFrames)
    window.initialize(repeating: 0, count: span - 1 + Self.chunkFrames)
    peaks = .allocate(capacity: Self.chunkFrames)
    peaks.initialize(repeating: 0, count: Self.chunkFrames)
    sums = .allocate(capacity: Self.chunkFrames)
    sums.initialize(repeating: 0, count: Self.chunkFrames)
    savedCursors = .allocate(capacity: max(checkpoints, 1))
    savedCursors.initialize(repeating: Cursor(), count: max(checkpoints, 1))
    savedStates = .allocate(byteCount: max(checkpoints, 1) * stateBytes, alignment: MemoryLayout<Double>.alignment)
    reset()
    for slot in 0..<checkpoints { save(to: slot) }
  }

  deinit {
    coefficients.deallocate()
    state.deallocate()
    window.deallocate()
    peaks.deallocate()
    sums.deallocate()
    savedCursors.deallocate()
    savedStates.deallocate()
  }

  /// BS.1770-4 Annex 2, table of the 4× interpolator: its phases 0 and 1 (phases 2 and 3 are
  /// them reversed, the 48-tap filter being symmetric).
  private static let annexPhases: [[Double]] = [
    [
      0.0017089843750, 0.0109863281250, -0.0196533203125, 0.0332031250000, -0.0594482421875, 0.1373291015625,
      0.9721679687500, -0.1022949218750, 0.0476074218750, -0.0266113281250, 0.0148925781250, -0.0083007812500,
    ],
    [
      -0.0291748046875, 0.0292968750000, -0.0517578125000, 0.0891113281250, -0.1665039062500, 0.4650878906250,
      0.7797851562500, -0.2003173828125, 0.1015625000000, -0.0582275390625, 0.0330810546875, -0.0189208984375,
    ],
  ]

  /// The tap for window sample `tap` (11 the newest) of interpolated point `phase`: phases 0–3
  /// the Annex's, 4–6 the point 1/4, 1/2, 3/4 of the way from window sample 5 to window sample 6,
  /// a sinc under a Hann window 13 samples wide (flat within 0.03 dB to 0.3 × the rate, 0.11 dB
  /// to 0.37 ×; 0.6 dB low at 0.4 ×, where the Annex's points read better).
  static func coefficient(phase: Int, tap: Int) -> Double {
    switch phase {
    case 0, 1: return annexPhases[phase][tap]
    case 2, 3: return annexPhases[3 - phase][filterSpan - 1 - tap]
    default:
      let fraction = Double(phase - 3) / 4
      let t = Double(tap) - 5 - fraction
      let sinc = sin(Double.pi * t) / (Double.pi * t)
      let halfWidth = 6.5
      return sinc * 0.5 * (1 + cos(Double.pi * t / halfWidth))
    }
  }

  /// Silence in the delay line and the filters, gain 1, not engaged. Allocation-free.
  public func reset() {
    dequeValues.initialize(repeating: 0, count: holdFrames)
    dequeSteps.initialize(repeating: 0, count: holdFrames)
    history.initialize(repeating: 0, count: channels * (Self.filterSpan - 1))
    delay.initialize(repeating: 0, count: channels * latencyFrames)
    cursor = Cursor()
    // The deque starts with one value, 1: the envelope of the silence before the first frame.
    dequeValues[0] = 1
    dequeSteps[0] = 0
    cursor.dequeCount = 1
    average.initialize(repeating: 1, count: attackFrames)
    cursor.averageSum = Double(attackFrames)
  }

  /// Copies the state into slot `checkpoint` (0 ..< ``checkpoints``). Allocation-free.
  public func save(to checkpoint: Int) {
    precondition(checkpoint >= 0 && checkpoint < checkpoints, "no limiter checkpoint \(checkpoint)")
    savedCursors[checkpoint] = cursor
    (savedStates + checkpoint * stateBytes).copyMemory(from: state, byteCount: stateBytes)
  }

  /// Puts back the state slot `checkpoint` holds: the limiter is as it was when it was saved.
  /// Allocation-free.
  public func restore(from checkpoint: Int) {
    precondition(checkpoint >= 0 && checkpoint < checkpoints, "no limiter checkpoint \(checkpoint)")
    cursor = savedCursors[checkpoint]
    state.copyMemory(from: savedStates + checkpoint * stateBytes, byteCount: stateBytes)
  }

  /// The gain reduction of the last frame out, dB: 0 when the limiter leaves the signal as it is,
  /// 3 when it lowers it by 3 dB.
  public var reductionDecibels: Double { cursor.gain < 1 ? -20 * log10(cursor.gain) : 0 }

  /// The deepest reduction since the last call, dB (0 when none), and whether the limiter
  /// lowered any frame since then; starts the next period. Allocation-free.
  public func takeEngaged() -> (engaged: Bool, deepestDecibels: Double) {
    let lowest = cursor.lowest
    cursor.lowest = 1
    return (lowest < 1, lowest < 1 ? -20 * log10(lowest) : 0)
  }

  /// Limits `frames` interleaved frames in place: what comes out is what went in
  /// ``latencyFrames`` frames before, at the limiter's gain. Allocation-free.
  public func process(_ samples: UnsafeMutablePointer<Float>, frames: Int) {
    var start = 0
    while start < frames {
      let count = min(frames - start, Self.chunkFrames)
      let chunk = samples + start * channels
      if atRest, isQuiet(chunk, frames: count) {
        // What `findPeaks` and `applyGain` would do, at a fraction of the cost: nothing to find,
        // nothing to lower.
        keepHistory(chunk, frames: count)
        passThrough(chunk, frames: count)
      } else {
        findPeaks(chunk, frames: count)
        applyGain(chunk, frames: count)
      }
      start += count
    }
  }

  /// The gain is 1 and stays 1 until a frame needs lowering: the envelope's minimum and average
  /// hold nothing but 1.
  private var atRest: Bool {
    cursor.averageLowered == 0 && cursor.dequeCount == 1 && dequeValues[cursor.dequeHead] == 1
  }

  /// Whether no sample of `frames`, nor of the history before them, is over ceiling /
  /// `boundFactor`: no sample and no interpolated point between them can then reach the ceiling.
  private func isQuiet(_ samples: UnsafeMutablePointer<Float>, frames: Int) -> Bool {
    let bound = ceiling / boundFactor
    // Counted over every sample, without a branch per sample, so that the loop is vectorised
    // (the usual answer is yes: each sample is read anyway). A NaN is over nothing, as before.
    var over: UInt32 = 0
    var index = 0
    let count = frames * channels
    while index < count {
      over |= samples[index].magnitude > bound ? 1 : 0
      index += 1
    }
    index = 0
    while index < channels * (Self.filterSpan - 1) {
      over |= history[index].magnitude > bound ? 1 : 0
      index += 1
    }
    return over == 0
  }

  /// Keeps the last `filterSpan` − 1 samples of each channel, as `findPeaks` does.
  private func keepHistory(_ samples: UnsafeMutablePointer<Float>, frames: Int) {
    let kept = Self.filterSpan - 1
    var channel = 0
    while channel < channels {
      let past = history + channel * kept
      let fresh = min(frames, kept)
      if fresh < kept { past.update(from: past + fresh, count: kept - fresh) }
      var index = 0
      while index < fresh {
        past[kept - fresh + index] = samples[(frames - fresh + index) * channels + channel]
        index += 1
      }
      channel += 1
    }
  }

  /// Each frame's highest |sample| or interpolated point, over the channels, into `peaks`.
  private func findPeaks(_ samples: UnsafeMutablePointer<Float>, frames: Int) {
    let kept = Self.filterSpan - 1
    peaks.update(repeating: 0, count: frames)
    for channel in 0..<channels {
      let past = history + channel * kept
      window.update(from: past, count: kept)
      var loudest: Float = 0
      for index in 0..<kept { loudest = max(loudest, abs(window[index])) }
      var offset = channel
      for frame in 0..<frames {
        let sample = samples[offset]
        window[kept + frame] = sample
        loudest = max(loudest, abs(sample))
        peaks[frame] = max(peaks[frame], abs(sample))
        offset += channels
      }
      // Most audio is well under the ceiling: its interpolated points cannot reach it, and
      // cannot change a required gain of 1.
      if loudest * boundFactor > ceiling { interpolate(frames: frames) }
      past.update(from: window + frames, count: kept)
    }
  }

  /// The interpolated points of `window` into `peaks`: frame f's window is w[f …  f + 11]. Tap
  /// by tap over the whole chunk, so that the compiler vectorises the loops over frames.
  private func interpolate(frames: Int) {
    let span = Self.filterSpan
    var phase = 0
    while phase < Self.phases {
      let c = coefficients + phase * span
      let first = c[0]
      for frame in 0..<frames { sums[frame] = first * window[frame] }
      var tap = 1
      while tap < span {
        let coefficient = c[tap]
        let taps = window + tap
        for frame in 0..<frames { sums[frame] += coefficient * taps[frame] }
        tap += 1
      }
      for frame in 0..<frames { peaks[frame] = max(peaks[frame], abs(sums[frame])) }
      phase += 1
    }
  }

  private func applyGain(_ samples: UnsafeMutablePointer<Float>, frames: Int) {
    if isIdle(frames: frames) {
      passThrough(samples, frames: frames)
      return
    }
    var c = cursor
    for frame in 0..<frames {
      let peak = peaks[frame]
      // A NaN peak compares false: the render loop silences NaN after the limiter. An infinite
      // one asks for no more than 60 dB, from which the gain recovers as from any other.
      let required = peak > ceiling ? max(Double(ceiling) / Double(peak), 0.001) : 1
      c.envelope = min(required, c.envelope * recovery, 1)

      // The minimum of the envelope over the last `holdFrames` frames.
      c.step += 1
      if c.dequeCount > 0 && dequeSteps[c.dequeHead] <= c.step - holdFrames {
        c.dequeHead = c.dequeHead + 1 == holdFrames ? 0 : c.dequeHead + 1
        c.dequeCount -= 1
      }
      while c.dequeCount > 0 {
        var last = c.dequeHead + c.dequeCount - 1
        if last >= holdFrames { last -= holdFrames }
        guard dequeValues[last] >= c.envelope else { break }
        c.dequeCount -= 1
      }
      var back = c.dequeHead + c.dequeCount
      if back >= holdFrames { back -= holdFrames }
      dequeValues[back] = c.envelope
      dequeSteps[back] = c.step
      c.dequeCount += 1
      let held = dequeValues[c.dequeHead]

      // Its average over the last `attackFrames` frames.
      let leaving = average[c.averagePosition]
      average[c.averagePosition] = held
      c.averagePosition = c.averagePosition + 1 == attackFrames ? 0 : c.averagePosition + 1
      c.averageLowered += (held < 1 ? 1 : 0) - (leaving < 1 ? 1 : 0)
      let gain: Double
      if c.averageLowered == 0 {
        // Exactly 1, and the running sum starts again from exact values.
        c.averageSum = Double(attackFrames)
        gain = 1
      } else {
        c.averageSum += held - leaving
        gain = min(c.averageSum / Double(attackFrames), 1)
      }
      c.gain = gain
      c.lowest = min(c.lowest, gain)

      let factor = Float(gain)
      let line = delay + c.delayPosition * channels
      let frameSamples = samples + frame * channels
      for channel in 0..<channels {
        let delayed = line[channel]
        line[channel] = frameSamples[channel]
        frameSamples[channel] = delayed * factor
      }
      c.delayPosition = c.delayPosition + 1 == latencyFrames ? 0 : c.delayPosition + 1
    }
    cursor = c
  }

  /// Whether the gain is 1 and stays 1 for the chunk: every value the envelope's minimum and
  /// average hold is 1 (the deque then holds a single 1), and no frame needs lowering.
  private func isIdle(frames: Int) -> Bool {
    guard atRest else { return false }
    var over = false
    for frame in 0..<frames { over = over || peaks[frame] > ceiling }
    return !over
  }

  /// What the per-frame path does to an idle chunk, in runs: the delay line's samples out
  /// unchanged (a gain of exactly 1), the deque's one value and the average's window moved on.
  private func passThrough(_ samples: UnsafeMutablePointer<Float>, frames: Int) {
    var done = 0
    while done < frames {
      let run = min(frames - done, latencyFrames - cursor.delayPosition)
      let line = delay + cursor.delayPosition * channels
      let audio = samples + done * channels
      // Swapped in place, sample by sample (vectorised): no copy through a scratch run.
      var index = 0
      while index < run * channels {
        let sample = audio[index]
        audio[index] = line[index]
        line[index] = sample
        index += 1
      }
      done += run
      cursor.delayPosition = cursor.delayPosition + run == latencyFrames ? 0 : cursor.delayPosition + run
    }
    cursor.step += frames
    dequeSteps[cursor.dequeHead] = cursor.step
    cursor.averagePosition = (cursor.averagePosition + frames) % attackFrames
    cursor.envelope = 1
    cursor.gain = 1
  }
}
