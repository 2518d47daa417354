import Synchronization

/// Maps the output's sample clock to CLOCK_MONOTONIC: which sample is heard when. Fed by the
/// render thread with what the device says after each write (`observe`: the sample it plays at a
/// moment, from its own delay and timestamp); read by any thread through `HeardClock.Shared`.
///
/// A device's clock is not the system's: a card's crystal runs ±50–100 ppm off, seconds a day.
/// The rate is measured, not assumed: over each run of the device (from its start to an underrun,
/// a reopen or an idle stop), the samples played against the nanoseconds elapsed, once the run is
/// long enough to say (`minimumSpan`). It is kept across runs (the crystal stays the same) and
/// only ever refined. The position follows each observation, smoothed against a pointer that
/// moves in steps (a card that reports it per period).
struct HeardClock {
  /// The nominal rate (frames per second).
  let nominal: Double
  /// Frames per nanosecond, as measured (nominal until measured).
  private(set) var rate: Double
  /// The reference: sample `sample` is heard at `nanoseconds` (monotonic).
  private(set) var sample: Double = 0
  private(set) var nanoseconds: Int64 = 0
  private(set) var known = false
  /// The run's first observation (nil: the next observation starts a run).
  private var runStart: (sample: Double, nanoseconds: Int64)?
  /// Nanoseconds a run must last before its rate is trusted over the nominal or earlier one.
  static let minimumSpan: Int64 = 500_000_000
  /// Of each observation's difference from the prediction, the part taken at once (a pointer
  /// that moves in whole periods is averaged out; a frame-exact one is followed closely).
  static let positionGain = 0.25

  init(rate: Int) {
    nominal = Double(rate)
    self.rate = Double(rate) / 1e9
  }

  /// The device played `sample` at `nanoseconds`. The first observation of a run sets the
  /// position outright.
  mutating func observe(sample observed: Int64, at time: Int64) {
    let observed = Double(observed)
    guard let start = runStart, known else {
      runStart = (observed, time)
      sample = observed
      nanoseconds = time
      known = true
      return
    }
    let span = time - start.nanoseconds
    if span >= Self.minimumSpan {
      rate = (observed - start.sample) / Double(span)
    }
    let predicted = sample + Double(time - nanoseconds) * rate
    sample = predicted + (observed - predicted) * Self.positionGain
    nanoseconds = time
  }

  /// The device stopped (an underrun, an idle stop, a reopen): the next observation starts a run;
  /// the rate measured so far stays.
  mutating func restart() { runStart = nil }

  /// Whether the device has been observed since it last started (`restart`).
  var running: Bool { runStart != nil }

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
      let current = sequence.load(ordering: .relaxed)
      sequence.store(current + 1, ordering: .relaxed)
      atomicMemoryFence(ordering: .releasing)
      sampleBits.store(clock.known ? clock.sample.bitPattern : Double.nan.bitPattern, ordering: .relaxed)
      nanosecondsValue.store(clock.nanoseconds, ordering: .relaxed)
      rateBits.store(clock.rate.bitPattern, ordering: .relaxed)
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
