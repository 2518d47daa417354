import Foundation
import Testing

@testable import RampAudio

/// Runs `input` (interleaved) through `resampler` in blocks, then flushes.
private func resampleAll(_ resampler: Resampler, _ input: [Float], block: Int = 1000) throws -> [Float] {
  let channels = resampler.channels
  let inputFrames = input.count / channels
  var output: [Float] = []
  let capacity = 4096
  var buffer = [Float](repeating: 0, count: capacity * channels)
  var offset = 0
  try input.withUnsafeBufferPointer { inp in
    while offset < inputFrames {
      let n = min(block, inputFrames - offset)
      let (consumed, produced) = try buffer.withUnsafeMutableBufferPointer {
        try resampler.process(
          input: inp.baseAddress! + offset * channels, inputFrames: n, output: $0.baseAddress!,
          outputCapacity: capacity)
      }
      offset += consumed
      output += buffer[0..<(produced * channels)]
    }
  }
  while true {
    let (_, produced) = try buffer.withUnsafeMutableBufferPointer {
      try resampler.process(input: nil, inputFrames: 0, output: $0.baseAddress!, outputCapacity: capacity)
    }
    if produced == 0 { break }
    output += buffer[0..<(produced * channels)]
  }
  return output
}

private func sine(frequency: Double, rate: Double, frames: Int, amplitudes: [Double]) -> [Float] {
  var samples = [Float](repeating: 0, count: frames * amplitudes.count)
  for f in 0..<frames {
    let s = sin(2 * .pi * frequency * Double(f) / rate)
    for (c, a) in amplitudes.enumerated() { samples[f * amplitudes.count + c] = Float(a * s) }
  }
  return samples
}

private func channel(_ samples: [Float], _ c: Int, of channels: Int) -> [Float] {
  stride(from: c, to: samples.count, by: channels).map { samples[$0] }
}

private func zeroCrossings(_ x: ArraySlice<Float>) -> Int {
  var count = 0
  var previous = x.first ?? 0
  for value in x.dropFirst() {
    if (previous < 0) != (value < 0) { count += 1 }
    previous = value
  }
  return count
}

private func rms(_ x: ArraySlice<Float>) -> Double {
  (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(x.count)).squareRoot()
}

@Suite struct ResamplerTests {
  @Test func upsample44100To48000() throws {
    let resampler = try Resampler(inputRate: 44100, outputRate: 48000, channels: 2)
    let frames = 44100
    let input = sine(frequency: 1000, rate: 44100, frames: frames, amplitudes: [0.8, -0.4])
    let output = try resampleAll(resampler, input)
    let outFrames = output.count / 2
    #expect(abs(outFrames - 48000) <= 3, "\(outFrames) frames")

    for (c, amplitude) in [0.8, 0.4].enumerated() {
      let x = channel(output, c, of: 2)
      let middle = x[2000..<(outFrames - 2000)]
      // 1 kHz at 48 kHz: a zero crossing every 24 samples.
      let expectedCrossings = Double(middle.count) / 24
      #expect(abs(Double(zeroCrossings(middle)) - expectedCrossings) <= 2)
      let level = rms(middle) * 2.0.squareRoot()
      let dB = 20 * log10(level / amplitude)
      #expect(abs(dB) < 0.5, "channel \(c): \(dB) dB")
    }
    // Channels stay interleaved in order: right is −½ × left.
    for f in stride(from: 2000, to: outFrames - 2000, by: 97) {
      #expect(abs(output[2 * f + 1] + 0.5 * output[2 * f]) < 1e-3)
    }
  }

  @Test func downsample48000To44100KeepsLength() throws {
    let resampler = try Resampler(inputRate: 48000, outputRate: 44100, channels: 1, quality: .veryHigh)
    let output = try resampleAll(resampler, sine(frequency: 440, rate: 48000, frames: 96000, amplitudes: [0.5]))
    #expect(abs(output.count - 88200) <= 3)
  }

  @Test func identityRatePassesThrough() throws {
    let resampler = try Resampler(inputRate: 48000, outputRate: 48000, channels: 1)
    let input = sine(frequency: 1000, rate: 48000, frames: 48000, amplitudes: [0.7])
    let output = try resampleAll(resampler, input)
    #expect(abs(output.count - input.count) <= 1)
    var worst: Float = 0
    for i in 100..<(min(input.count, output.count) - 100) { worst = max(worst, abs(input[i] - output[i])) }
    #expect(worst < 1e-3, "max difference \(worst)")
  }

  @Test func deterministicAcrossRunsAndInstances() throws {
    let input = sine(frequency: 1234, rate: 44100, frames: 20000, amplitudes: [0.5, 0.25])
    let a = try resampleAll(try Resampler(inputRate: 44100, outputRate: 48000, channels: 2), input)
    let b = try resampleAll(try Resampler(inputRate: 44100, outputRate: 48000, channels: 2), input)
    #expect(a == b)
  }

  @Test func smallOutputBuffersConsumeIncrementally() throws {
    let resampler = try Resampler(inputRate: 44100, outputRate: 48000, channels: 1)
    let input = sine(frequency: 1000, rate: 44100, frames: 1000, amplitudes: [0.5])
    var out = [Float](repeating: 0, count: 10)
    var consumedTotal = 0
    var producedTotal = 0
    try input.withUnsafeBufferPointer { inp in
      var rounds = 0
      while consumedTotal < input.count && rounds < 10000 {
        let (c, p) = try out.withUnsafeMutableBufferPointer {
          try resampler.process(
            input: inp.baseAddress! + consumedTotal, inputFrames: input.count - consumedTotal,
            output: $0.baseAddress!, outputCapacity: 10)
        }
        #expect(p <= 10)
        consumedTotal += c
        producedTotal += p
        rounds += 1
      }
    }
    #expect(consumedTotal == input.count)
    #expect(producedTotal > 0)
  }

  @Test func invalidParametersThrow() {
    for (input, output, channels) in [
      (0.0, 48000.0, 2), (-44100, 48000, 2), (.nan, 48000, 2), (.infinity, 48000, 2),
      (44100, 0, 2), (44100, -1, 2), (44100, .nan, 2), (44100, 48000, 0), (44100, 48000, 33),
    ] as [(Double, Double, Int)] {
      let error = #expect(throws: AudioError.self) {
        try Resampler(inputRate: input, outputRate: output, channels: channels)
      }
      #expect(error?.code == .invalidParameter)
    }
  }
}

@Suite struct ChannelMapTests {
  private func apply(_ map: ChannelMap, _ input: [Float]) -> [Float] {
    let frames = input.count / map.inputChannels
    var output = [Float](repeating: .nan, count: frames * map.outputChannels)
    input.withUnsafeBufferPointer { inp in
      output.withUnsafeMutableBufferPointer { map.map(inp.baseAddress!, frames: frames, into: $0.baseAddress!) }
    }
    return output
  }

  @Test func monoToStereoDuplicates() throws {
    let map = try ChannelMap(inputChannels: 1, outputChannels: 2)
    #expect(apply(map, [0.5, -0.25, 1]) == [0.5, 0.5, -0.25, -0.25, 1, 1])
    let six = try ChannelMap(inputChannels: 1, outputChannels: 6)
    #expect(apply(six, [0.3]) == [Float](repeating: 0.3, count: 6))
  }

  @Test func stereoToMonoAverages() throws {
    let map = try ChannelMap(inputChannels: 2, outputChannels: 1)
    #expect(apply(map, [1, 0, 0.5, -0.5, 0.25, 0.75]) == [0.5, 0, 0.5])
  }

  @Test func fivePointOneToStereoIsITU() throws {
    let map = try ChannelMap(inputChannels: 6, outputChannels: 2)
    let w: Float = 0.70710677
    let norm = 1 / (1 + 2 * w)
    // FL FR FC LFE BL BR
    let out = apply(map, [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1])
    let expected: [Float] = [norm, 0, w * norm, w * norm, 0, 0, 0, w * norm, 1, 1]
    for (a, b) in zip(out, expected) { #expect(abs(a - b) < 1e-6) }
  }

  @Test func foldAndPad() throws {
    // 3 → 2: channels 1 and 3 average into the left, 2 into the right.
    #expect(apply(try ChannelMap(inputChannels: 3, outputChannels: 2), [1, 0.5, 0]) == [0.5, 0.5])
    // 2 → 4: stereo on the first two outputs, silence on the rest.
    #expect(apply(try ChannelMap(inputChannels: 2, outputChannels: 4), [0.1, 0.2]) == [0.1, 0.2, 0, 0])
    // 4 → 2: average of (1, 3) and (2, 4).
    #expect(apply(try ChannelMap(inputChannels: 4, outputChannels: 2), [1, 1, 0, 0.5]) == [0.5, 0.75])
  }

  @Test func identity() throws {
    let map = try ChannelMap(inputChannels: 2, outputChannels: 2)
    #expect(map.isIdentity)
    #expect(apply(map, [0.1, 0.2, 0.3, 0.4]) == [0.1, 0.2, 0.3, 0.4])
  }

  @Test func invalidCountsThrow() {
    #expect(throws: AudioError.self) { try ChannelMap(inputChannels: 0, outputChannels: 2) }
    #expect(throws: AudioError.self) { try ChannelMap(inputChannels: 2, outputChannels: 0) }
  }
}
