// rampbench: throughput and accuracy of the engine's per-sample evaluation.
//
//   swift run -c release rampbench [--seconds S]
//   swift run -c release rampbench --limiter [--minutes M]   (the true-peak limiter's CPU time)
//
// Each case renders a gain buffer the way the render thread does (blocks of 1024 samples at
// 48 kHz through AnimationEngine.render into Float), for at least S seconds of wall time per
// case (default 1), on one thread, and reports values per second. The accuracy pass renders
// the whole ramp once in double precision and compares every sample with a slow exact solve
// (ReferenceBezier, double-double bisection) or the analytic keyframe line.
import Foundation
import RampAudio
import RampEngine

let arguments = CommandLine.arguments
if arguments.contains("--limiter") {
  limiterBench(minutes: arguments.firstIndex(of: "--minutes").flatMap { Double(arguments[$0 + 1]) } ?? 10)
  exit(0)
}
let minimumSeconds = arguments.firstIndex(of: "--seconds").flatMap { Double(arguments[$0 + 1]) } ?? 1.0
let sampleRate = 48_000.0
let block = 1024

struct Case {
  let name: String
  let rampSeconds: Double
  let make: (AnimationEngine) throws -> Void
  let exact: (Double) -> Double  // exact value at progress x in [0, 1]
}

func bezierCase(_ name: String, _ p: (Double, Double, Double, Double)) -> Case {
  let reference = ReferenceBezier(p.0, p.1, p.2, p.3)
  return Case(
    name: "fade \(name), 10 s", rampSeconds: 10,
    make: { engine in
      let curve = try TimingFunction.bezier(p.0, p.1, p.2, p.3)
      try engine.add(.basic(from: 0, to: 1, duration: 10, timingFunction: curve), forKey: "fade", to: "master.gain")
    }, exact: { reference.value(at: $0) })
}

let keyframeValues = [0.0, 1, 0.25, 0.8, 0.5, 1]
let cases = [
  bezierCase("ease-in-out", (0.42, 0, 0.58, 1)),
  bezierCase("default", (0.25, 0.1, 0.25, 1)),
  bezierCase("cubic-bezier(0.1,1,1,0.2)", (0.1, 1, 1, 0.2)),
  Case(
    name: "keyframes linear ×6, 10 s", rampSeconds: 10,
    make: { engine in
      try engine.add(.keyframes(keyframeValues, duration: 10), forKey: "kf", to: "master.gain")
    },
    exact: { x in
      let position = x * Double(keyframeValues.count - 1)
      let i = min(Int(position), keyframeValues.count - 2)
      let u = position - Double(i)
      return keyframeValues[i] + (keyframeValues[i + 1] - keyframeValues[i]) * u
    }),
  Case(
    name: "fade linear, 10 s", rampSeconds: 10,
    make: { engine in try engine.add(.basic(from: 0, to: 1, duration: 10), forKey: "fade", to: "master.gain") },
    exact: { $0 }),
]

func engine(for benchCase: Case) throws -> (AnimationEngine, PropertyHandle) {
  let engine = try AnimationEngine(sampleRate: sampleRate, maxBlockSize: block)
  let handle = try engine.define("master.gain", value: 0, range: 0...1)
  try benchCase.make(engine)
  return (engine, handle)
}

print("rampbench: per-sample gain evaluation, \(Int(sampleRate)) Hz, blocks of \(block), one thread")
print("")
print("case                                   values/s      ns/value   worst error    samples checked")
print(String(repeating: "-", count: 100))
var failed = false
for benchCase in cases {
  let (engine, handle) = try engine(for: benchCase)
  let rampSamples = Int(benchCase.rampSeconds * sampleRate)
  let buffer = UnsafeMutablePointer<Float>.allocate(capacity: block)
  defer { buffer.deallocate() }
  // Warm-up pass (page faults, caches, frequency), not timed.
  for position in stride(from: 0, to: rampSamples, by: block) {
    engine.render(handle, start: Int64(position), count: min(block, rampSamples - position), into: buffer)
  }
  // Throughput: render the ramp over and over (the clock is not advanced, so it stays in flight).
  var rendered = 0
  var sink: Float = 0
  let clock = ContinuousClock()
  let start = clock.now
  var elapsed = Duration.zero
  while elapsed < .seconds(minimumSeconds) {
    var position = 0
    while position < rampSamples {
      let n = min(block, rampSamples - position)
      engine.render(handle, start: Int64(position), count: n, into: buffer)
      sink += buffer[n - 1]
      position += n
    }
    rendered += rampSamples
    elapsed = clock.now - start
  }
  let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
  let rate = Double(rendered) / seconds

  // Accuracy: every sample of the ramp in double precision against the exact value.
  var worst = 0.0
  let exactBuffer = UnsafeMutablePointer<Double>.allocate(capacity: rampSamples)
  defer { exactBuffer.deallocate() }
  engine.render(handle, start: 0, count: rampSamples, into: exactBuffer)
  for k in 0..<rampSamples {
    worst = max(worst, abs(exactBuffer[k] - benchCase.exact(Double(k) / Double(rampSamples))))
  }
  if worst > 1e-6 { failed = true }
  let name = benchCase.name.padding(toLength: 36, withPad: " ", startingAt: 0)
  print(
    "\(name) \(String(format: "%12.3e", rate))  \(String(format: "%10.2f", 1e9 / rate))   \(String(format: "%10.2e", worst))    \(rampSamples)"
  )
  if sink.isNaN { print("(sink \(sink))") }
}
print("")
print("target: ≥ 1e8 values/s per core, worst error ≤ 1e-6\(failed ? "  — ACCURACY TARGET MISSED" : "")")

// Gain kernel against a plain memory copy of the same buffer: 4096 stereo float frames (32 KiB,
// in cache, as a render block is), one gain value per frame.
func bandwidth(_ body: () -> Void, bytes: Int) -> Double {
  let clock = ContinuousClock()
  var best = Double.infinity
  for _ in 0..<5 {
    let start = clock.now
    for _ in 0..<20_000 { body() }
    let elapsed = clock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    best = min(best, seconds)
  }
  return Double(bytes) * 20_000 / best
}

let frames = 4096
let input = UnsafeMutablePointer<Float>.allocate(capacity: frames * 2)
let output = UnsafeMutablePointer<Float>.allocate(capacity: frames * 2)
let gains = UnsafeMutablePointer<Float>.allocate(capacity: frames)
for i in 0..<(frames * 2) { input[i] = Float(i % 97) / 97 - 0.5 }
for i in 0..<frames { gains[i] = Float(i) / Float(frames) }
let bytes = frames * 2 * MemoryLayout<Float>.size
let copy = bandwidth({ output.update(from: input, count: frames * 2) }, bytes: bytes)
let apply = bandwidth({ GainKernel.apply(input, gain: gains, frames: frames, channels: 2, into: output) }, bytes: bytes)
let mix = bandwidth(
  { GainKernel.accumulate(input, gain: gains, frames: frames, channels: 2, into: output) }, bytes: bytes)
let clampRate = bandwidth({ GainKernel.clamp(output, count: frames * 2) }, bytes: bytes)
print("")
print("gain kernel, 4096 stereo float frames per call     GB/s    × copy")
print(String(repeating: "-", count: 70))
for (name, rate) in [
  ("memory copy", copy), ("apply (out = in × gain)", apply), ("accumulate (out += in × gain)", mix),
  ("clamp", clampRate),
] {
  print(
    "\(name.padding(toLength: 48, withPad: " ", startingAt: 0)) \(String(format: "%7.2f", rate / 1e9))   \(String(format: "%5.2f", rate / copy))"
  )
}
print("")
print("target: the gain kernel at least half the copy's bandwidth")
