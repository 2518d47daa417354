import Foundation
import RampAudio
import RampEngine

/// `rampbench --limiter [--minutes M]`: the CPU time `TruePeakLimiter.process` takes for M
/// minutes (default 10) of 48 kHz stereo in blocks of 1024 frames, on this thread: a program
/// over the ceiling (limited all along), one at −20 dBFS (the limiter has nothing to do), and
/// copying the blocks alone (what the figures include besides the limiter).
func limiterBench(minutes: Double) {
  let rate = 48_000
  let block = 1024
  let frames = Int(minutes * 60 * Double(rate))
  // Ten seconds of each program, played over and over.
  let sourceFrames = 10 * rate
  func program(_ level: Double) -> [Float] {
    var noise = SplitMix(seed: 3)
    var samples = [Float](repeating: 0, count: sourceFrames * 2)
    for frame in 0..<sourceFrames {
      let t = Double(frame) / Double(rate)
      for channel in 0..<2 {
        let tone = sin(2 * Double.pi * 997 * t + Double(channel)) + 0.7 * sin(2 * Double.pi * 3000 * t)
        samples[frame * 2 + channel] = Float(level * (0.6 * tone + 0.3 * (2 * noise.unit() - 1)))
      }
    }
    return samples
  }
  func cpuSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) * 1e-9
  }
  let buffer = UnsafeMutablePointer<Float>.allocate(capacity: block * 2)
  defer { buffer.deallocate() }
  func run(_ source: [Float], limiter: TruePeakLimiter?) -> Double {
    source.withUnsafeBufferPointer { source in
      let start = cpuSeconds()
      var done = 0
      var offset = 0
      while done < frames {
        let count = min(block, frames - done, sourceFrames - offset)
        buffer.update(from: source.baseAddress! + offset * 2, count: count * 2)
        limiter?.process(buffer, frames: count)
        done += count
        offset = (offset + count) % sourceFrames
      }
      return cpuSeconds() - start
    }
  }
  print("rampbench --limiter: TruePeakLimiter.process, \(minutes) min of 48 kHz stereo, blocks of \(block)")
  let copying = run(program(1), limiter: nil)
  print(String(format: "  copying the blocks alone           %8.3f s CPU", copying))
  for (name, level) in [("over the ceiling (limiting)", 1.6), ("at −20 dBFS (nothing to do)", 0.1)] {
    let limiter = TruePeakLimiter(rate: rate, channels: 2, ceilingDecibels: -1)
    let seconds = run(program(level), limiter: limiter)
    let perSecond = (seconds - copying) / (minutes * 60) * 1000
    print(
      String(
        format: "  %@  %8.3f s CPU (%.3f ms per second of audio, %.2f %% of real time)",
        name.padding(
          toLength: 33, withPad: " ", startingAt: 0), seconds, perSecond, perSecond / 10))
  }
}
