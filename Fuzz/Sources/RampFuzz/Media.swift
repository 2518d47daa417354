import Foundation

/// The files `play` may open: a media root with a few small WAV files (one at another rate and
/// channel count, so resampling and channel mapping run; one that ends at once), things that are
/// not audio, a subdirectory, and links leading out of the roots. Seeds name them relative to the
/// first root.
enum Media {
  static func populate(_ directory: String) throws {
    let root = directory + "/media"
    let other = directory + "/media2"
    let outside = directory + "/outside"
    for path in [root, root + "/sub", other, outside] {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    try write(wav(rate: 48_000, channels: 2, frames: 4_800, frequency: 440), to: root + "/tone.wav")
    try write(wav(rate: 22_050, channels: 1, frames: 2_205, frequency: 330), to: root + "/mono22k.wav")
    try write(wav(rate: 48_000, channels: 2, frames: 240, frequency: 1000), to: root + "/click.wav")
    try write(wav(rate: 44_100, channels: 2, frames: 4_410, frequency: 220), to: root + "/sub/deep.wav")
    try write(wav(rate: 48_000, channels: 1, frames: 2_400, frequency: 550), to: other + "/other.wav")
    try write(wav(rate: 48_000, channels: 2, frames: 4_800, frequency: 660), to: outside + "/secret.wav")
    try write(Array("not audio\n".utf8), to: root + "/notes.txt")
    try write([], to: root + "/empty.wav")
    // A WAV header that promises more than the file holds.
    try write(Array(wav(rate: 48_000, channels: 2, frames: 4_800, frequency: 440).prefix(100)), to: root + "/cut.wav")
    try? FileManager.default.removeItem(atPath: root + "/escape.wav")
    try FileManager.default.createSymbolicLink(
      atPath: root + "/escape.wav", withDestinationPath: outside + "/secret.wav")
    try? FileManager.default.removeItem(atPath: root + "/inside.wav")
    try FileManager.default.createSymbolicLink(atPath: root + "/inside.wav", withDestinationPath: "tone.wav")
  }

  private static func write(_ bytes: [UInt8], to path: String) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
  }

  /// A 16-bit PCM WAV file of a sine tone.
  static func wav(rate: Int, channels: Int, frames: Int, frequency: Double) -> [UInt8] {
    var bytes: [UInt8] = []
    func append32(_ value: Int) { withUnsafeBytes(of: UInt32(value).littleEndian) { bytes += $0 } }
    func append16(_ value: Int) { withUnsafeBytes(of: UInt16(value).littleEndian) { bytes += $0 } }
    let dataBytes = frames * channels * 2
    bytes += Array("RIFF".utf8)
    append32(36 + dataBytes)
    bytes += Array("WAVEfmt ".utf8)
    append32(16)
    append16(1)
    append16(channels)
    append32(rate)
    append32(rate * channels * 2)
    append16(channels * 2)
    append16(16)
    bytes += Array("data".utf8)
    append32(dataBytes)
    for frame in 0..<frames {
      let sample = Int16(sin(2 * Double.pi * frequency * Double(frame) / Double(rate)) * 16_000)
      for _ in 0..<channels { withUnsafeBytes(of: sample.littleEndian) { bytes += $0 } }
    }
    return bytes
  }
}
