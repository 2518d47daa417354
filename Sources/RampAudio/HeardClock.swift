import Synchronization

/// Maps the output's sample clock to CLOCK_MONOTONIC: which sample is heard when. Fed by the
/// render thread with what the device says after each write (`observe`: the sample it plays at a
/// moment, from its own delay and timestamp); read by any thread through `HeardClock.Shared`.
///
/// A device's clock is not the system's: a card's crystal runs ±50–100 ppm off, seconds a day.
/// The rate is measured, not assumed: over each run of the device (from its start to an underrun,
/// a reopen or an idle stop), a least-squares line through the samples played against the
/// nanoseconds elapsed, once the run is long enough to say (`minimumSpan`). A run's rate replaces
/// the one in use only when it is known better (within a smaller error): a pointer that
/// moves in steps of tens of milliseconds at uneven times (an audio server's graph running late)
/// then moves the rate by the little it knows, not by thousands of ppm. The rate is kept across
/// runs (the crystal stays the same) and only ever refined; a new device starts over. The
/// position follows each observation, smoothed against a pointer that moves in steps (on an
/// audio server's client, no faster than a clock drifts: `boundsDrift`).
struct HeardClock {
  /// The nominal rate (frames per second).
  let nominal: Double
  /// Frames per nanosecond, as measured (nominal until measured).
  private(set) var rate: Double
  /// The reference: sample `sample` is heard at `nanoseconds` (monotonic).
  private(set) var sample: Double = 0
  private(set) var nanoseconds: Int64 = 0
  private(set) var known = false
  /// The line fitted through the run's observations (nil: the next observation starts a run).
  private var run: RunFit?
  /// How far off `rate` may be (three standard errors), in frames per second: before any run,
  /// what a clock taken at its nominal rate may be off by (1000 ppm).
  private var rateError: Double
  /// Whether the mapping may not drift faster than `nominalError`, neither its rate nor its
  /// position. An audio server's clock is a card's or the system's, within ppm of nominal, and
  /// its stream plays sample after sample, so when each sample is heard lies on a line; but the
  /// delay its client reports wanders for seconds while the server settles its latency (`pulse`
  /// through pipewire-pulse: by 3–4 ms a second, up to 16 ms off that line in a stream's first
  /// seconds, then a sawtooth of ±1 ms), which neither a fitted line nor a position that follows
  /// each observation can tell from a clock running off. So the position follows freely only
  /// until it has caught up with the reports (one within `caughtUpSeconds`, or reports on both
  /// sides of it) and the run has lasted `minimumSpan` (a stream starting up: a pointer still,
  /// then moving); after that it moves towards what the device says by at most `nominalError`
  /// of the time elapsed, as a clock would drift. Two wall-clock times converted a second apart
  /// then land a second apart within 2 ms: 1000 ppm for the rate in use, 1000 ppm for the slew.
  /// Reports `slewedSeconds` or more to one side of the position for `shiftNanoseconds` are a
  /// real shift (the server's graph skipped): a run starts from it, its position set outright.
  var boundsDrift = false
  /// The largest difference between the position and what an audio server's client reports that
  /// is taken as the report's wandering rather than a shift (`boundsDrift`).
  static let slewedSeconds = 0.02
  /// How long reports must stay `slewedSeconds` or more to one side to be a shift: longer than
  /// two of an audio server's largest quanta (2048 frames, 43 ms at 48 kHz), within one of which
  /// a pointer that moves in quanta swings to both sides of its line.
  static let shiftNanoseconds: Int64 = 100_000_000
  /// How close a report must come to the position for it to have caught up (`boundsDrift`).
  static let caughtUpSeconds = 0.001
  /// In the run, on an audio server's client: whether the position has caught up with the
  /// reports, which side of it the last report was on, and since when the reports have been
  /// `slewedSeconds` or more to one side.
  private var caughtUp = false
  private var lastAbove: Bool?
  private var outside: (since: Int64, above: Bool)?
  /// Nanoseconds a run must last before its rate is trusted over the nominal or earlier one.
  static let minimumSpan: Int64 = 500_000_000
  /// Of each observation's difference from the prediction, the part taken at once (a pointer
  /// that moves in whole periods is averaged out; a frame-exact one is followed closely).
  static let positionGain = 0.25

  init(rate: Int) {
    nominal = Double(rate)
    self.rate = Double(rate) / 1e9
    rateError = Self.nominalError * Double(rate)
  }

  /// How far off a device's clock may be before it is measured (1000 ppm).
  static let nominalError = 1e-3

  /// The device played `sample` at `nanoseconds`. The first observation of a run sets the
  /// position outright.
  mutating func observe(sample observed: Int64, at time: Int64) {
    let observed = Double(observed)
    if boundsDrift && caughtUp && isShift(observed - sample(at: time), at: time) { run = nil }
    guard var fit = run, known else {
      run = RunFit(sample: observed, nanoseconds: time, nominal: nominal)
      sample = observed
      nanoseconds = time
      known = true
      caughtUp = false
      lastAbove = nil
      outside = nil
      return
    }
    fit.add(sample: observed, at: time)
    run = fit
    let established = time - fit.nanoseconds >= Self.minimumSpan
    if established, let line = fit.line, line.error <= rateError,
      !boundsDrift || abs(line.framesPerSecond / nominal - 1) <= Self.nominalError
    {
      rate = line.framesPerSecond / 1e9
      rateError = line.error
    }
    let predicted = sample(at: time)
    let difference = observed - predicted
    var moved = difference * Self.positionGain
    if boundsDrift {
      let above = difference > 0
      if abs(difference) <= nominal * Self.caughtUpSeconds || lastAbove.map({ $0 != above }) == true {
        caughtUp = true
      }
      lastAbove = above
      if caughtUp && established {
        let most = Double(max(time - nanoseconds, 0)) * rate * Self.nominalError
        moved = min(max(moved, -most), most)
      }
    }
    sample = predicted + moved
    nanoseconds = time
  }

  /// Whether a report `difference` frames from the position, at `time`, shows a shift: reports
  /// `slewedSeconds` or more to the same side for `shiftNanoseconds`.
  private mutating func isShift(_ difference: Double, at time: Int64) -> Bool {
    guard abs(difference) >= nominal * Self.slewedSeconds else {
      outside = nil
      return false
    }
    let above = difference > 0
    guard let outside, outside.above == above else {
      self.outside = (time, above)
      return false
    }
    return time - outside.since >= Self.shiftNanoseconds
  }

  /// The device stopped (an underrun, an idle stop, a reopen): the next observation starts a run;
  /// the rate measured so far stays.
  mutating func restart() { run = nil }

  /// Another device: its clock is measured afresh.
  mutating func forgetRate() {
    run = nil
    rate = nominal / 1e9
    rateError = Self.nominalError * nominal
  }

  /// A least-squares line through a run's observations: samples played against seconds since its
  /// first, less the nominal rate (so the sums stay small over hours and keep their precision).
  struct RunFit {
    let sample: Double
    let nanoseconds: Int64
    let nominal: Double
    private var count = 0.0
    private var sumX = 0.0
    private var sumY = 0.0
    private var sumXX = 0.0
    private var sumXY = 0.0
    private var sumYY = 0.0

    init(sample: Double, nanoseconds: Int64, nominal: Double) {
      self.sample = sample
      self.nanoseconds = nanoseconds
      self.nominal = nominal
      add(sample: sample, at: nanoseconds)
    }

    mutating func add(sample observed: Double, at time: Int64) {
      let x = Double(time - nanoseconds) / 1e9
      let y = observed - sample - x * nominal
      count += 1
      sumX += x
      sumY += y
      sumXX += x * x
      sumXY += x * y
      sumYY += y * y
    }

    /// The slope in frames per second and how far off it may be; nil until three observations
    /// spread in time.
    var line: (framesPerSecond: Double, error: Double)? {
      guard count >= 3 else { return nil }
      let sxx = sumXX - sumX * sumX / count
      guard sxx > 0 else { return nil }
      let sxy = sumXY - sumX * sumY / count
      let syy = sumYY - sumY * sumY / count
      let slope = sxy / sxx
      let residual = max(syy - slope * sxy, 0) / (count - 2)
      // Three standard errors: a pointer that moves in steps errs in runs, not independently,
      // and one standard error would promise more than the line knows.
      return (nominal + slope, 3 * (residual / sxx).squareRoot())
    }
  }

  /// Whether the device has been observed since it last started (`restart`).
  var running: Bool { run != nil }

  /// The device's clock error against the system's, in parts per million (0 until measured).
  var driftPPM: Double { (rate * 1e9 / nominal - 1) * 1e6 }

  /// The sample heard at `time` (monotonic nanoseconds), by the mapping as it stands.
  func sample(at time: Int64) -> Double { sample + Double(time - nanoseconds) * rate }

  /// The monotonic nanoseconds at which `target` is heard (a sample too far off to count in
  /// nanoseconds: about 146 years from now).
  func nanoseconds(of target: Int64) -> Int64 {
    Self.clamped(Double(nanoseconds) + (Double(target) - sample) / rate)
  }

  /// `nanoseconds` rounded, within ±2⁶² (no overflow when an interval is added).
  static func clamped(_ nanoseconds: Double) -> Int64 {
    Int64(max(min(nanoseconds.rounded(), 0x1p62), -0x1p62))
  }

  /// The mapping, for readers on other threads: written by the render thread only, lock-free (a
  /// sequence lock), read by anyone.
  final class Shared: Sendable {
    private let sequence = Atomic<Int>(0)
    private let sampleBits = Atomic<UInt64>(0)
    private let nanosecondsValue = Atomic<Int64>(0)
    private let rateBits = Atomic<UInt64>(0)
    private let delayValue = Atomic<Int64>(-1)

    /// Render thread: publishes `clock` (when known) and the device's delay in frames right after
    /// the last write (−1: none measured).
    func store(_ clock: HeardClock, delay: Int64) {
      store(sample: clock.known ? clock.sample : .nan, at: clock.nanoseconds, rate: clock.rate, delay: delay)
    }

    /// Render thread: publishes that `sample` is heard at `nanoseconds` and `rate` frames per
    /// nanosecond after (a NaN sample: no mapping), and the delay in frames (−1: none measured).
    func store(sample: Double, at nanoseconds: Int64, rate: Double, delay: Int64) {
      let current = sequence.load(ordering: .relaxed)
      sequence.store(current + 1, ordering: .relaxed)
      atomicMemoryFence(ordering: .releasing)
      sampleBits.store(sample.bitPattern, ordering: .relaxed)
      nanosecondsValue.store(nanoseconds, ordering: .relaxed)
      rateBits.store(rate.bitPattern, ordering: .relaxed)
      delayValue.store(delay, ordering: .relaxed)
      sequence.store(current + 2, ordering: .releasing)
    }

    /// The mapping last stored: the sample heard at `nanoseconds`, frames per nanosecond and the
    /// delay in frames; nil before the first observation.
    func load() -> (sample: Double, nanoseconds: Int64, rate: Double, delay: Int64)? {
      while true {
        let before = sequence.load(ordering: .acquiring)
        if before & 1 == 1 { continue }
        let sample = Double(bitPattern: sampleBits.load(ordering: .relaxed))
        let time = nanosecondsValue.load(ordering: .relaxed)
        let rate = Double(bitPattern: rateBits.load(ordering: .relaxed))
        let delay = delayValue.load(ordering: .relaxed)
        atomicMemoryFence(ordering: .acquiring)
        guard sequence.load(ordering: .relaxed) == before else { continue }
        return sample.isNaN ? nil : (sample, time, rate, delay)
      }
    }
  }
}
