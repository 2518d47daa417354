import CAllocationGuard
import Foundation
import RampEngine
import Testing

@testable import RampAudio

/// The master's true-peak limiter on its own: what comes out of it, measured sample by sample and
/// with libebur128's true-peak meter (the reference the issue names).
@Suite struct TruePeakLimiterTests {
  static let rate = 48_000

  /// Interleaved stereo, `frames` long, channel c of frame f `signal(f, c)`.
  static func stereo(frames: Int, _ signal: (Int, Int) -> Double) -> [Float] {
    var samples = [Float](repeating: 0, count: frames * 2)
    for frame in 0..<frames {
      for channel in 0..<2 { samples[frame * 2 + channel] = Float(signal(frame, channel)) }
    }
    return samples
  }

  static func sine(_ frequency: Double, _ frame: Int, phase: Double = 0) -> Double {
    sin(2 * Double.pi * frequency * Double(frame) / Double(rate) + phase)
  }

  /// `samples` through `limiter` in blocks of `block` frames (the last one shorter).
  static func limited(_ samples: [Float], by limiter: TruePeakLimiter, block: Int) -> [Float] {
    var output = samples
    let frames = samples.count / limiter.channels
    output.withUnsafeMutableBufferPointer { buffer in
      var start = 0
      while start < frames {
        let count = min(block, frames - start)
        limiter.process(buffer.baseAddress! + start * limiter.channels, frames: count)
        start += count
      }
    }
    return output
  }

  /// libebur128's true peak of interleaved stereo, dBTP.
  static func truePeak(_ samples: [Float]) throws -> Double {
    let measurement = try LoudnessMeasurement(channels: 2, sampleRate: rate, name: "the limiter's output")
    try samples.withUnsafeBufferPointer { try measurement.add($0.baseAddress!, frames: samples.count / 2) }
    return measurement.result.truePeak
  }

  /// The first index where `a` and `b` differ in any bit (or in length), nil when identical.
  static func firstDifference(_ a: [Float], _ b: [Float]) -> Int? {
    guard a.count == b.count else { return min(a.count, b.count) }
    return a.indices.first { a[$0].bitPattern != b[$0].bitPattern }
  }

  /// Two full-scale sines summed (997 Hz and 3 kHz, up to +6 dBFS), an fs/4 sine at 45° (samples
  /// at −1.5 dBFS, its true peak 3 dB higher, between them) starting at full amplitude, and white
  /// noise at +6 dBFS (every frequency to Nyquist): the output's true peak, as libebur128 measures
  /// it, is at most the ceiling + 0.1 dB, and within 0.5 dB of it (limited, not silenced); no
  /// sample is over the ceiling.
  @Test(arguments: ["two full-scale sines", "fs/4 at 45°", "white noise"])
  func theTruePeakStaysUnderTheCeiling(_ signal: String) throws {
    let frames = Self.rate * 2
    let input: [Float]
    if signal == "fs/4 at 45°" {
      let amplitude = pow(10, -1.5 / 20) * sqrt(2.0)
      input = Self.stereo(frames: frames) { frame, channel in
        amplitude * Self.sine(Double(Self.rate) / 4, frame, phase: Double.pi / 4 + Double(channel) * Double.pi / 2)
      }
      #expect(input.allSatisfy { abs($0) <= Float(pow(10, -1.5 / 20)) * 1.0001 }, "sample peaks under the ceiling")
    } else if signal == "white noise" {
      var noise = SplitMix(seed: 5)
      input = Self.stereo(frames: frames) { _, _ in 2 * (2 * noise.unit() - 1) }
    } else {
      input = Self.stereo(frames: frames) { frame, channel in
        Self.sine(997, frame, phase: Double(channel)) + Self.sine(3000, frame)
      }
    }
    let inputPeak = try Self.truePeak(input)
    #expect(inputPeak > 0.5, "the input's true peak: \(inputPeak) dBTP")
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1)
    let output = Self.limited(input, by: limiter, block: 480)
    let outputPeak = try Self.truePeak(output)
    #expect(outputPeak <= -1 + 0.1, "\(signal): \(outputPeak) dBTP out, \(inputPeak) in")
    #expect(output.allSatisfy { abs($0) <= limiter.ceiling }, "a sample over the ceiling")
    #expect(outputPeak >= -1.5, "\(signal): \(outputPeak) dBTP out: lowered more than it needs")
    #expect(limiter.reductionDecibels > 0)
  }

  /// Steady sines, faded in over 10 ms, at 0.2 and 0.3 × the rate and phases where BS.1770's
  /// 4× interpolator alone reads 0.08 dB under libebur128's (their points are not at the same
  /// places between samples): held within 0.05 dB of the ceiling as libebur128 measures them.
  @Test(arguments: [(9600.0, 0.0), (14_400.0, Double.pi / 16)])
  func aSteadySineIsHeldWhereMetersReadIt(_ frequency: Double, _ phase: Double) throws {
    let fade = Self.rate / 100
    let input = Self.stereo(frames: Self.rate) { frame, channel in
      let envelope = frame < fade ? 0.5 - 0.5 * cos(Double.pi * Double(frame) / Double(fade)) : 1
      return 1.5 * envelope * Self.sine(frequency, frame, phase: phase)
    }
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1)
    let outputPeak = try Self.truePeak(Self.limited(input, by: limiter, block: 480))
    #expect(outputPeak <= -1 + 0.05, "\(frequency) Hz: \(outputPeak) dBTP")
    #expect(outputPeak >= -1.3, "\(frequency) Hz: \(outputPeak) dBTP: lowered more than it needs")
  }

  /// A −6 dBFS sine, and an fs/4 sine at 45° whose true peak is −1.2 dBTP (its samples at
  /// −4.2 dBFS), come out bit for bit as they went in, `latencyFrames` later, after that many
  /// frames of silence; the limiter says it never engaged.
  @Test func underTheCeilingPassesBitIdentical() throws {
    let frames = Self.rate
    let input = Self.stereo(frames: frames) { frame, channel in
      channel == 0
        ? 0.5 * Self.sine(997, frame)
        : pow(10, -1.2 / 20) * Self.sine(Double(Self.rate) / 4, frame, phase: Double.pi / 4)
    }
    #expect(try Self.truePeak(input) > -1.3)
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1)
    let latency = limiter.latencyFrames
    let output = Self.limited(input + [Float](repeating: 0, count: latency * 2), by: limiter, block: 480)
    #expect(output.prefix(latency * 2).allSatisfy { $0.bitPattern == 0 })
    #expect(Self.firstDifference(Array(output.dropFirst(latency * 2)), input) == nil)
    #expect(limiter.reductionDecibels == 0)
    #expect(limiter.takeEngaged() == (false, 0))
  }

  /// The gain, read on a channel carrying a constant 0.5 beside a burst of +6 dBFS: it has fallen
  /// to what the burst needs before the burst is heard (no output sample over the ceiling), it
  /// falls in steps of at most 1/`attackFrames` of its fall, it rises by at most the release's
  /// dB per frame, it takes the release's time to recover, and it returns to exactly 1.
  @Test func theGainNeverSteps() throws {
    let release = 0.1
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1, releaseSeconds: release)
    let burst = 4800..<9600
    let frames = 48_000
    let input = Self.stereo(frames: frames) { frame, channel in
      channel == 1 ? 0.5 : burst.contains(frame) ? 2 * Self.sine(440, frame) : 0.2 * Self.sine(440, frame)
    }
    let output = Self.limited(input, by: limiter, block: 256)
    let latency = limiter.latencyFrames
    // The probe's first `latency` frames are the delay line's silence.
    let gains = stride(from: 1, to: output.count, by: 2).map { $0 < latency * 2 ? 1 : Double(output[$0]) / 0.5 }
    let ceiling = pow(10, -1 / 20.0)
    let loudest = stride(from: 0, to: output.count, by: 2).map { abs(Double(output[$0])) }.max()!
    #expect(loudest <= ceiling, "a sample at \(20 * log10(loudest)) dBFS")
    let lowest = gains.min()!
    #expect(abs(lowest - ceiling / 2) < 0.01, "the deepest gain \(lowest)")
    let largestFall = (1 - lowest) / Double(limiter.attackFrames) * (1 + 1e-6)
    let largestRise = pow(10, limiter.releaseDecibelsPerSecond / Double(Self.rate) / 20) * (1 + 1e-6)
    for frame in 1..<frames {
      let (before, after) = (gains[frame - 1], gains[frame])
      #expect(before - after <= largestFall, "frame \(frame): \(before) → \(after)")
      #expect(after <= before * largestRise, "frame \(frame): \(before) → \(after)")
    }
    // Nothing changes before the burst enters the limiter (its output is then `latency` frames
    // behind), and the gain is down before the burst is heard.
    #expect(gains[..<burst.lowerBound].allSatisfy { $0 == 1 })
    #expect(gains[burst.lowerBound + latency] < 1)
    // From its deepest, the gain recovers at the release's rate, no faster.
    let lastLowest = gains.lastIndex(of: lowest)!
    let recovered = try #require(gains[lastLowest...].firstIndex(of: 1))
    let recovery = Double(recovered - lastLowest) / Double(Self.rate)
    let expected = -20 * log10(lowest) / limiter.releaseDecibelsPerSecond
    #expect(recovery >= expected * 0.99 && recovery <= expected + 0.005, "recovered in \(recovery) s, not \(expected)")
    #expect(gains[recovered...].allSatisfy { $0 == 1 })
  }

  /// Music-like audio (two sines, a loud burst, noise) through blocks of 1, 64, 480 and 4096
  /// frames, and of sizes changing from block to block: the same bytes every time.
  @Test func anyBlockSizeGivesTheSameBytes() throws {
    var noise = SplitMix(seed: 7)
    let input = Self.stereo(frames: 30_000) { frame, channel in
      let loud = (10_000..<18_000).contains(frame) ? 2.5 : 0.6
      return loud * (0.5 * Self.sine(997, frame) + 0.3 * Self.sine(3000, frame, phase: Double(channel)))
        + 0.2 * (2 * noise.unit() - 1)
    }
    func run(_ block: Int) -> [Float] {
      Self.limited(input, by: TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1), block: block)
    }
    let reference = run(480)
    for block in [1, 64, 4096] { #expect(Self.firstDifference(run(block), reference) == nil, "blocks of \(block)") }
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1)
    var output = input
    var sizes = SplitMix(seed: 11)
    output.withUnsafeMutableBufferPointer { buffer in
      var start = 0
      while start < 30_000 {
        let count = min(sizes.below(700), 30_000 - start)
        limiter.process(buffer.baseAddress! + start * 2, frames: count)
        start += count
      }
    }
    #expect(Self.firstDifference(output, reference) == nil, "blocks of changing sizes")
    #expect(Self.firstDifference(reference, input) != nil, "the limiter did nothing")
  }

  /// Audio A, a save, audio B, a restore, B again: B comes out the same both times, though the
  /// limiter was in another state (B's) before the restore; the other slot is left as it was.
  @Test func aRestoredStateRendersTheSameAgain() throws {
    let loud = Self.stereo(frames: 6000) { frame, _ in 1.8 * Self.sine(997, frame) }
    let other = Self.stereo(frames: 6000) { frame, channel in 1.4 * Self.sine(3000, frame, phase: Double(channel)) }
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1, checkpoints: 2)
    _ = Self.limited(loud, by: limiter, block: 480)
    limiter.save(to: 1)
    let first = Self.limited(other, by: limiter, block: 480)
    let afterFirst = limiter.reductionDecibels
    limiter.restore(from: 1)
    let again = Self.limited(other, by: limiter, block: 480)
    #expect(Self.firstDifference(again, first) == nil)
    #expect(limiter.reductionDecibels == afterFirst)
    // From B's end instead, B comes out otherwise (its delay line holds B's end, not A's).
    let fromB = Self.limited(other, by: limiter, block: 480)
    #expect(Self.firstDifference(fromB, first) != nil)
    // Slot 0 holds the state `init` saved: a fresh limiter's.
    limiter.restore(from: 0)
    let fresh = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1)
    #expect(
      Self.firstDifference(Self.limited(other, by: limiter, block: 480), Self.limited(other, by: fresh, block: 480))
        == nil)
  }

  /// The readings: the reduction of the last frame, and whether the limiter lowered anything
  /// (and how deep) since last asked; `reset` makes it silent and transparent again.
  @Test func readingsAndReset() throws {
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1)
    _ = Self.limited(Self.stereo(frames: 4800) { frame, _ in 2 * Self.sine(997, frame) }, by: limiter, block: 480)
    #expect(abs(limiter.reductionDecibels - 7.02) < 0.2, "\(limiter.reductionDecibels) dB")
    let engaged = limiter.takeEngaged()
    #expect(engaged.engaged && abs(engaged.deepestDecibels - 7.02) < 0.2, "\(engaged)")
    let quiet = Self.stereo(frames: 4800) { frame, _ in 0.25 * Self.sine(997, frame) }
    limiter.reset()
    #expect(limiter.reductionDecibels == 0)
    let output = Self.limited(quiet, by: limiter, block: 480)
    #expect(output.prefix(limiter.latencyFrames * 2).allSatisfy { $0 == 0 })
    #expect(
      Self.firstDifference(
        Array(output.dropFirst(limiter.latencyFrames * 2)), Array(quiet.dropLast(limiter.latencyFrames * 2))) == nil)
    #expect(limiter.takeEngaged() == (false, 0))
  }

  /// 1.5 ms of look-ahead at 48 kHz: 72 frames of attack, 82 of latency (the attack and the
  /// interpolator's 12 frames, less 2); the release's 6.02 dB per 100 ms.
  @Test func latency() {
    let limiter = TruePeakLimiter(rate: 48_000, channels: 2, ceilingDecibels: -1)
    #expect(limiter.attackFrames == 72 && limiter.latencyFrames == 82)
    #expect(abs(limiter.releaseDecibelsPerSecond - 60.2) < 0.1)
    let at44 = TruePeakLimiter(rate: 44_100, channels: 1, ceilingDecibels: -1, lookAheadSeconds: 0.002)
    #expect(at44.attackFrames == 88 && at44.latencyFrames == 98)
  }

  /// `process`, `save`, `restore`, `reset` and the readings, limiting and not, in blocks of 1 to
  /// 4096 frames: no allocation and no free on the calling thread (counted by CAllocationGuard).
  @Test func noAllocationAndNoFree() throws {
    let limiter = TruePeakLimiter(rate: Self.rate, channels: 2, ceilingDecibels: -1, checkpoints: 4)
    let frames = 4096
    let buffer = UnsafeMutablePointer<Float>.allocate(capacity: frames * 2)
    defer { buffer.deallocate() }
    var allocations = 0
    var frees = 0
    for round in 0..<40 {
      let level: Float = round % 3 == 0 ? 0.3 : 1.9
      for index in 0..<frames * 2 { buffer[index] = level * Float(sin(Double(index) * 0.031)) }
      let block = [1, 64, 480, 4096][round % 4]
      let allocated = rampd_allocations_on_this_thread()
      let freed = rampd_frees_on_this_thread()
      var start = 0
      while start < frames {
        limiter.process(buffer + start * 2, frames: min(block, frames - start))
        start += block
      }
      limiter.save(to: round % 4)
      if round % 5 == 4 { limiter.restore(from: (round + 1) % 4) }
      if round == 20 { limiter.reset() }
      let reading = limiter.reductionDecibels + limiter.takeEngaged().deepestDecibels
      allocations += rampd_allocations_on_this_thread() - allocated
      frees += rampd_frees_on_this_thread() - freed
      #expect(reading.isFinite)
    }
    #expect(allocations == 0 && frees == 0, "\(allocations) allocations, \(frees) frees")
  }
}
