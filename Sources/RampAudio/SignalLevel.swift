#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The level of a signal as it is heard: its sample peak (dBFS) and its momentary loudness
/// (LUFS, ITU-R BS.1770: K-weighted mean square over the last 400 ms, channels weighted as
/// ``Loudness`` weights them), both over the last 400 ms. The render thread feeds it every block
/// and reads it for `streams.<id>.level.*` and `master.level.*`: its storage is allocated when it
/// is made, and `add` and the readings neither allocate nor free.
///
/// A stereo meter costs about 0.4 ms of CPU per second of audio (x86, release build: two biquads
/// per channel and sample, a serial chain), against the render thread's 2.3 ms/s for all the
/// rest, so the render loop meters only while some level is observed (``RenderState/metersLevels``).
///
/// The window advances in steps of 10 ms: the 400 ms are the last 40 complete steps (the peak
/// also counts the step under way), so a reading lags the signal by at most 10 ms.
final class SignalLevel {
  let channels: Int
  /// Frames per step of the window.
  let stepFrames: Int
  static let steps = 40

  /// The two K-weighting stages, as libebur128 derives them for any sample rate: a high shelf
  /// (the head's effect), then a high pass (RLB). Coefficients b0 b1 b2 a1 a2.
  private let shelf: (Double, Double, Double, Double, Double)
  private let highPass: (Double, Double, Double, Double, Double)
  /// Per channel: the two stages' states (transposed direct form II), four values.
  private let filterState: UnsafeMutablePointer<Double>
  /// Per channel: its weight in the sum (BS.1770's G: 1, 1.41 for surrounds, 0 for the LFE).
  private let weights: UnsafeMutablePointer<Double>
  /// The last `steps` steps' peaks and weighted energies (sums of squares), and the step under way.
  private let stepPeaks: UnsafeMutablePointer<Float>
  private let stepEnergies: UnsafeMutablePointer<Double>
  private var step = 0
  private var framesInStep = 0
  /// The channel of the next sample.
  private var channel = 0
  private var peak: Float = 0
  private var energy = 0.0
  /// The sum of `stepEnergies`, taken afresh at each step (so rounding never accumulates).
  private var windowEnergy = 0.0

  init(sampleRate: Int, channels: Int) {
    self.channels = channels
    stepFrames = Self.stepFrames(sampleRate: sampleRate)
    let rate = Double(sampleRate)
    // libebur128's ebur128_init_filter: the analog prototypes of BS.1770, bilinear at `rate`.
    var f0 = 1681.974450955533
    let gain = 3.999843853973347
    var q = 0.7071752369554196
    var k = tan(Double.pi * f0 / rate)
    let vh = pow(10, gain / 20)
    let vb = pow(vh, 0.4996667741545416)
    var a0 = 1 + k / q + k * k
    shelf = (
      (vh + vb * k / q + k * k) / a0, 2 * (k * k - vh) / a0, (vh - vb * k / q + k * k) / a0, 2 * (k * k - 1) / a0,
      (1 - k / q + k * k) / a0
    )
    f0 = 38.13547087602444
    q = 0.5003270373238773
    k = tan(Double.pi * f0 / rate)
    a0 = 1 + k / q + k * k
    highPass = (1, -2, 1, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0)
    filterState = .allocate(capacity: channels * 4)
    filterState.initialize(repeating: 0, count: channels * 4)
    weights = .allocate(capacity: channels)
    for channel in 0..<channels { (weights + channel).initialize(to: Self.weight(channel: channel, of: channels)) }
    stepPeaks = .allocate(capacity: Self.steps)
    stepPeaks.initialize(repeating: 0, count: Self.steps)
    stepEnergies = .allocate(capacity: Self.steps)
    stepEnergies.initialize(repeating: 0, count: Self.steps)
  }

  deinit {
    filterState.deallocate()
    weights.deallocate()
    stepPeaks.deallocate()
    stepEnergies.deallocate()
  }

  static func stepFrames(sampleRate: Int) -> Int { max(Int((Double(sampleRate) / 100).rounded()), 1) }

  /// Frames from the meters' start to their first reading of a whole window.
  static func windowFrames(sampleRate: Int) -> Int { stepFrames(sampleRate: sampleRate) * steps }

  /// libebur128's default channel map (the one ``Loudness`` measures files with): 4 channels are
  /// L R Ls Rs, 5 are L R C Ls Rs, otherwise L R C LFE Ls Rs and nothing after the sixth.
  static func weight(channel: Int, of channels: Int) -> Double {
    let surround = 1.41
    switch channels {
    case 4: return channel < 2 ? 1 : surround
    case 5: return channel < 3 ? 1 : surround
    default:
      switch channel {
      case 0, 1, 2: return 1
      case 4, 5: return surround
      default: return 0
      }
    }
  }

  /// Takes `count` interleaved samples, each multiplied first by `constant` and, when given, by
  /// `gains[frame]` (the frame counted from the first sample given). Allocation-free.
  func add(_ audio: UnsafePointer<Float>, samples count: Int, constant: Float = 1, gains: UnsafePointer<Float>? = nil) {
    guard channel == 0, count % channels == 0 else {
      // A ring's wrap-around may split a frame (3 or 6 channels): taken sample by sample, at a
      // constant gain, the only kind of call a ring's parts come with.
      addSamples(audio, count: count, gain: constant)
      return
    }
    let frames = count / channels
    var frame = 0
    while frame < frames {
      let run = min(frames - frame, stepFrames - framesInStep)
      var channel = 0
      while channel < channels {
        filter(
          audio + frame * channels + channel, frames: run, channel: channel, constant: constant,
          gains: gains.map { $0 + frame })
        channel += 1
      }
      framesInStep += run
      frame += run
      if framesInStep == stepFrames { endStep() }
    }
  }

  /// One channel's samples, `channels` apart, through the K-weighting into `energy` and `peak`:
  /// the filter's state in registers for the run, not in memory at every sample.
  @inline(__always)
  private func filter(
    _ samples: UnsafePointer<Float>, frames: Int, channel: Int, constant: Float, gains: UnsafePointer<Float>?
  ) {
    let (sb0, sb1, sb2, sa1, sa2) = shelf
    let (hb0, hb1, hb2, ha1, ha2) = highPass
    let state = filterState + channel * 4
    var s0 = state[0]
    var s1 = state[1]
    var s2 = state[2]
    var s3 = state[3]
    var sum = 0.0
    var highest = peak
    var index = 0
    var offset = 0
    while index < frames {
      var sample = samples[offset] * constant
      if let gains { sample *= gains[index] }
      highest = max(highest, abs(sample))
      let x = Double(sample)
      let y = sb0 * x + s0
      s0 = sb1 * x - sa1 * y + s1
      s1 = sb2 * x - sa2 * y
      let z = hb0 * y + s2
      s2 = hb1 * y - ha1 * z + s3
      s3 = hb2 * y - ha2 * z
      sum += z * z
      index += 1
      offset += channels
    }
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = s3
    energy += weights[channel] * sum
    peak = highest
  }

  private func addSamples(_ audio: UnsafePointer<Float>, count: Int, gain: Float) {
    let (sb0, sb1, sb2, sa1, sa2) = shelf
    let (hb0, hb1, hb2, ha1, ha2) = highPass
    var index = 0
    while index < count {
      let sample = audio[index] * gain
      peak = max(peak, abs(sample))
      let state = filterState + channel * 4
      let x = Double(sample)
      let y = sb0 * x + state[0]
      state[0] = sb1 * x - sa1 * y + state[1]
      state[1] = sb2 * x - sa2 * y
      let z = hb0 * y + state[2]
      state[2] = hb1 * y - ha1 * z + state[3]
      state[3] = hb2 * y - ha2 * z
      energy += weights[channel] * z * z
      channel += 1
      if channel == channels {
        channel = 0
        framesInStep += 1
        if framesInStep == stepFrames { endStep() }
      }
      index += 1
    }
  }

  /// Forgets everything taken: the window reads silence until it fills again. Allocation-free.
  func reset() {
    filterState.update(repeating: 0, count: channels * 4)
    stepPeaks.update(repeating: 0, count: Self.steps)
    stepEnergies.update(repeating: 0, count: Self.steps)
    step = 0
    framesInStep = 0
    channel = 0
    peak = 0
    energy = 0
    windowEnergy = 0
  }

  /// Takes `frames` frames of silence: what a paused or held stream adds to the mix.
  /// Allocation-free.
  func addSilence(frames: Int) {
    var left = frames
    while left > 0 {
      let taken = min(left, stepFrames - framesInStep)
      framesInStep += taken
      left -= taken
      if framesInStep == stepFrames { endStep() }
    }
  }

  private func endStep() {
    stepPeaks[step] = peak
    stepEnergies[step] = energy
    step = (step + 1) % Self.steps
    peak = 0
    energy = 0
    framesInStep = 0
    var sum = 0.0
    var index = 0
    while index < Self.steps {
      sum += stepEnergies[index]
      index += 1
    }
    windowEnergy = sum
    // Silence after sound leaves the filters' states decaying through subnormal numbers, slow
    // on most processors: below any audible level they are silence.
    index = 0
    while index < channels * 4 {
      if abs(filterState[index]) < 1e-20 { filterState[index] = 0 }
      index += 1
    }
  }

  /// What silence reads, dB and LUFS: a number JSON can carry, under any level 32-bit float
  /// audio holds above its noise.
  static let floor = -150.0

  /// The highest |sample| of the last 400 ms, dBFS; ``floor`` for silence.
  var peakDecibels: Double {
    var highest = peak
    var index = 0
    while index < Self.steps {
      highest = max(highest, stepPeaks[index])
      index += 1
    }
    return highest > 0 ? max(20 * log10(Double(highest)), Self.floor) : Self.floor
  }

  /// Momentary loudness, LUFS: −0.691 + 10 log₁₀ of the weighted mean square of the last 400 ms;
  /// ``floor`` for silence.
  var momentary: Double {
    let meanSquare = windowEnergy / Double(stepFrames * Self.steps)
    return meanSquare > 0 ? max(-0.691 + 10 * log10(meanSquare), Self.floor) : Self.floor
  }
}
