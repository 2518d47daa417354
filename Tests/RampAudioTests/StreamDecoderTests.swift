import Foundation
import Testing

@testable import RampAudio

@Suite struct RingBufferTests {
  /// A ring that holds what it read keeps it from the producer until released, and reads it
  /// again after a rewind; what was released cannot be read again.
  @Test func heldAudioIsReadAgainAfterARewindAndFreedOnRelease() {
    let ring = RingBuffer(minimumCapacity: 8)
    ring.holds = true
    let samples: [Float] = [1, 2, 3, 4, 5, 6, 7, 8]
    #expect(ring.write(samples, count: 8) == 8)
    var out = [Float](repeating: 0, count: 4)
    #expect(ring.read(into: &out, count: 4) == 4)
    // Read, not released: no room for the producer.
    #expect(ring.space == 0 && ring.write(samples, count: 1) == 0)
    #expect(ring.rewind(to: 2))
    #expect(ring.read(into: &out, count: 2) == 2 && out[0] == 3 && out[1] == 4)
    ring.release(upTo: 3)
    #expect(ring.space == 3)
    #expect(!ring.rewind(to: 2), "released audio is not read again")
    #expect(ring.rewind(to: 3) && ring.available == 5)
    // Not holding: reading releases at once.
    ring.holds = false
    #expect(ring.read(into: &out, count: 4) == 4 && ring.space == 7)
  }

  @Test func wrapsAroundAndKeepsOrder() {
    let ring = RingBuffer(minimumCapacity: 5)
    #expect(ring.capacity == 8)
    var out = [Float](repeating: 0, count: 8)
    for round in 0..<10 {
      let input = (0..<6).map { Float(round * 6 + $0) }
      #expect(input.withUnsafeBufferPointer { ring.write($0.baseAddress!, count: 6) } == 6)
      #expect(ring.available == 6 && ring.space == 2)
      #expect(out.withUnsafeMutableBufferPointer { ring.read(into: $0.baseAddress!, count: 8) } == 6)
      #expect(Array(out.prefix(6)) == input)
    }
    let full = [Float](repeating: 1, count: 20)
    #expect(full.withUnsafeBufferPointer { ring.write($0.baseAddress!, count: 20) } == 8)
  }

  /// One thread writes a counting sequence as fast as it can, another reads: nothing is lost,
  /// duplicated or reordered.
  @Test func producerAndConsumerOnTwoThreads() async {
    let ring = RingBuffer(minimumCapacity: 1024)
    let total = 2_000_000
    let producer = Thread {
      var next = 0
      var chunk = [Float](repeating: 0, count: 333)
      while next < total {
        let n = min(333, total - next)
        for i in 0..<n { chunk[i] = Float(bitPattern: UInt32(next + i)) }
        var done = 0
        while done < n {
          done += chunk.withUnsafeBufferPointer { ring.write($0.baseAddress! + done, count: n - done) }
        }
        next += n
      }
    }
    producer.start()
    var expected = 0
    var chunk = [Float](repeating: 0, count: 500)
    var ordered = true
    while expected < total {
      let n = chunk.withUnsafeMutableBufferPointer { ring.read(into: $0.baseAddress!, count: 500) }
      for i in 0..<n where chunk[i].bitPattern != UInt32(expected + i) { ordered = false }
      expected += n
    }
    #expect(ordered)
    #expect(ring.available == 0)
  }
}

@Suite struct StreamDecoderTests {
  func drain(_ decoder: StreamDecoder, limit: Int = 10_000_000) -> [Float] {
    var out: [Float] = []
    var chunk = [Float](repeating: 0, count: 4096)
    let deadline = Date().addingTimeInterval(20)
    while Date() < deadline && out.count < limit {
      let n = chunk.withUnsafeMutableBufferPointer { decoder.ring.read(into: $0.baseAddress!, count: 4096) }
      out += chunk[0..<n]
      if n == 0 {
        if decoder.isFinished && decoder.ring.available == 0 { break }
        usleep(500)
      }
    }
    return out
  }

  @Test func resamplesAndMapsMonoToStereo() throws {
    let directory = try temporaryDirectory()
    let path = directory.appendingPathComponent("mono44.wav").path
    try writeSignal(path, frames: 44_100, channels: 1, rate: 44_100) { f, _ in
      Float(sin(Double(f) * 2 * .pi * 1000 / 44_100) * 0.5)
    }
    let decoder = try StreamDecoder(path: path, outputRate: 48_000, outputChannels: 2, bufferSeconds: 0.1)
    let samples = drain(decoder)
    #expect(decoder.error == nil)
    #expect(abs(samples.count / 2 - 48_000) < 100, "\(samples.count / 2) frames")
    var identical = true
    for f in 0..<(samples.count / 2) where samples[2 * f] != samples[2 * f + 1] { identical = false }
    #expect(identical)
    // 1 kHz survives: about 2000 zero crossings a second.
    var crossings = 0
    for f in 1..<(samples.count / 2) where (samples[2 * f - 2] < 0) != (samples[2 * f] < 0) { crossings += 1 }
    #expect(abs(crossings - 2000) < 20)
  }

  @Test func loopsUntilCancelled() throws {
    let directory = try temporaryDirectory()
    let path = directory.appendingPathComponent("short.wav").path
    try writeSignal(path, frames: 1000, channels: 2) { f, _ in Float(f) / 1000 }
    let decoder = try StreamDecoder(path: path, outputRate: 48_000, outputChannels: 2, bufferSeconds: 0.05, loops: true)
    let samples = drain(decoder, limit: 2 * 5500)
    decoder.cancel()
    #expect(samples.count >= 2 * 5500)
    #expect(samples[2 * 999] == 0.999)
    #expect(samples[2 * 1000] == 0)  // back at the start
    #expect(samples[2 * 4321] == 0.321)
  }

  @Test func refusesWhatItCannotReadNamingTheFile() throws {
    let directory = try temporaryDirectory()
    let path = directory.appendingPathComponent("notes.wav").path
    try "not audio at all".write(toFile: path, atomically: true, encoding: .utf8)
    do {
      _ = try StreamDecoder(path: path, outputRate: 48_000, outputChannels: 2)
      Issue.record("decoded a text file")
    } catch {
      #expect(error.code == .unreadableFile)
      #expect(error.message.contains(path))
    }
  }
}
