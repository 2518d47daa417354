import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Damaged media files (docs/BAD-INPUT.md, "Media files"): WAV, FLAC, Ogg Vorbis and MP3 written
/// here, mutated deterministically, and played by one daemon while a constant stream plays. Each
/// plays or is refused with `file-error`; the daemon never crashes and the constant stream never
/// changes.
extension BadInputMatrixTests {
  @Test func everyDamagedFilePlaysOrIsRefusedWithoutDisturbingAnotherStream() throws {
    let document = try BadInputDocument.load()
    #expect(
      Set(document.mutations) == Set(Mutation.Kind.allCases.map(\.rawValue)),
      "the doc's mutations and the test's differ")
    let run = try BadInputRun()
    let bases = try MediaBase.all(in: run.root)
    var generator = SplitMix(seed: 0x5EED_F11E)
    var mutants: [(name: String, bytes: [UInt8])] = []
    for base in bases {
      for kind in Mutation.Kind.allCases {
        for (index, bytes) in Mutation.mutants(of: base, kind: kind, using: &generator).enumerated() {
          mutants.append(("\(base.name)-\(kind.rawValue)-\(index).\(base.format.rawValue)", bytes))
        }
      }
    }
    #expect(mutants.count >= 250, "\(mutants.count) mutants")

    var playing: [String] = []
    var accepted = 0
    var refused = 0
    for (number, mutant) in mutants.enumerated() {
      let path = "\(run.root)/\(mutant.name)"
      try Data(mutant.bytes).write(to: URL(fileURLWithPath: path))
      let stream = "m\(number)"
      // Gain 0: whatever the file holds, nothing of it may reach the mix.
      let reply = try run.client.request([
        "cmd": "play", "path": .string(mutant.name), "stream": .string(stream), "gain": 0,
      ])
      if reply.isOK {
        accepted += 1
        playing.append(stream)
        // A header may make a decoder ask for too much (a 1 Hz rate once took a gigabyte).
        try run.checkMemory(after: mutant.name)
      } else {
        refused += 1
        let message = reply["error"]?["message"]?.stringValue ?? ""
        #expect(
          reply.errorCode == "file-error" && reply.errorField == "path" && message.contains(mutant.name),
          "\(mutant.name): \(reply.serialized())")
      }
      // A few play at once, each for a while; the oldest is stopped (or has ended).
      if playing.count > 6 {
        let stop = try run.client.request(["cmd": "stop", "stream": .string(playing.removeFirst())])
        #expect(stop.isOK || stop.errorCode == "unknown-stream", "stop: \(stop.serialized())")
      }
      if number % 25 == 0 { try run.checkAlive(after: mutant.name) }
    }
    for stream in playing { try run.client.request(["cmd": "stop", "stream": .string(stream)]) }
    // Every accepted mutant ends or stops: none is left wedged.
    let deadline = Date().addingTimeInterval(10)
    var left: [String] = []
    repeat {
      let status = try run.client.request(["cmd": "status"])
      left = (status.result["streams"]?.arrayValue ?? []).compactMap { $0["stream"]?.stringValue }
        .filter { $0.hasPrefix("m") }
      if !left.isEmpty { usleep(50_000) }
    } while !left.isEmpty && Date() < deadline
    #expect(left.isEmpty, "mutant streams still there: \(left)")
    #expect(accepted > 0 && refused > 0, "\(accepted) played, \(refused) refused: the mutants test both ways")
    try run.checkAlive(after: "every mutant")
    try run.finish()
  }
}

/// The undamaged files the mutants come from.
struct MediaBase {
  enum Format: String { case wav, flac, ogg, mp3 }
  let name: String
  let format: Format
  let bytes: [UInt8]

  /// 0.25 s of a 440 Hz sine at half scale: WAV 16-bit stereo at 48 kHz, WAV float mono at
  /// 44.1 kHz, FLAC, Ogg Vorbis and MP3 (libsndfile writes MP3 when built with LAME; else ffmpeg).
  static func all(in directory: String) throws -> [MediaBase] {
    var bases: [MediaBase] = []
    for (name, format, rate, channels, encoding) in [
      ("pcm16", Format.wav, 48_000, 2, SampleEncoding.pcm16), ("float", .wav, 44_100, 1, .float),
      ("flac", .flac, 48_000, 2, .pcm16), ("vorbis", .ogg, 48_000, 2, .pcm16), ("mpeg", .mp3, 44_100, 2, .pcm16),
    ] {
      let path = "\(directory)/base-\(name).\(format.rawValue)"
      if format == .mp3 && !SoundFileWriter.writableExtensions.contains("mp3") {
        let wav = "\(directory)/base-\(name)-source.wav"
        try write(wav, rate: rate, channels: channels, encoding: encoding)
        try run("/usr/bin/ffmpeg", ["-loglevel", "error", "-y", "-i", wav, path])
      } else {
        try write(path, rate: rate, channels: channels, encoding: encoding)
      }
      let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
      bases.append(MediaBase(name: name, format: format, bytes: bytes))
    }
    return bases
  }

  private static func write(_ path: String, rate: Int, channels: Int, encoding: SampleEncoding) throws {
    let frames = rate / 4
    var samples = [Float](repeating: 0, count: frames * channels)
    for frame in 0..<frames {
      let value = Float(0.5 * sin(2 * Double.pi * 440 * Double(frame) / Double(rate)))
      for channel in 0..<channels { samples[frame * channels + channel] = value }
    }
    let writer = try SoundFileWriter(path: path, sampleRate: rate, channels: channels, encoding: encoding)
    try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
  }

  private static func run(_ tool: String, _ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw HarnessError("\(tool) \(arguments) failed") }
  }
}

/// Deterministic damage, by kind (docs/BAD-INPUT.md lists the kinds).
enum Mutation {
  enum Kind: String, CaseIterable {
    case bitFlips = "bit-flips"
    case byteRun = "byte-run"
    case truncate
    case headerField = "header-field"
    case duplicateChunk = "duplicate-chunk"
    case splice
  }

  static func mutants(of base: MediaBase, kind: Kind, using generator: inout SplitMix) -> [[UInt8]] {
    let bytes = base.bytes
    func offset(headerBiased: Bool = false) -> Int {
      headerBiased && Bool.random(using: &generator)
        ? Int.random(in: 0..<min(128, bytes.count), using: &generator)
        : Int.random(in: 0..<bytes.count, using: &generator)
    }
    switch kind {
    case .bitFlips:
      return (0..<12).map { _ in
        var copy = bytes
        for _ in 0..<Int.random(in: 1...16, using: &generator) {
          copy[offset(headerBiased: true)] ^= 1 << UInt8.random(in: 0...7, using: &generator)
        }
        return fixingOggChecksums(copy, format: base.format, when: Bool.random(using: &generator))
      }
    case .byteRun:
      return (0..<10).map { _ in
        var copy = bytes
        let start = offset(headerBiased: true)
        let end = min(start + Int.random(in: 1...64, using: &generator), copy.count)
        let fill: UInt8 = Bool.random(using: &generator) ? 0x00 : 0xFF
        for i in start..<end { copy[i] = fill }
        return copy
      }
    case .truncate:
      let fixed = [0, 1, 3, 4, 8, 12, 16, 20, 24, 28, 36, 40, 44, 48, 64, 100]
      return (fixed + (0..<6).map { _ in offset() }).filter { $0 < bytes.count }.map { Array(bytes[..<$0]) }
    case .headerField:
      return headerFields(base).map { fixingOggChecksums($0, format: base.format, when: true) }
    case .duplicateChunk:
      return duplicates(base).map { fixingOggChecksums($0, format: base.format, when: false) }
    case .splice:
      return (0..<8).map { _ in
        let start = offset()
        let region = bytes[start..<min(start + Int.random(in: 1...4096, using: &generator), bytes.count)]
        var copy = bytes
        copy.insert(contentsOf: region, at: offset(headerBiased: true))
        return copy
      }
    }
  }

  // MARK: Header fields

  private static func headerFields(_ base: MediaBase) -> [[UInt8]] {
    let bytes = base.bytes
    var out: [[UInt8]] = []
    func patch(_ at: Int, _ value: UInt64, width: Int, bigEndian: Bool = false) {
      guard at >= 0, at + width <= bytes.count else { return }
      var copy = bytes
      for i in 0..<width {
        let shift = UInt64(8 * (bigEndian ? width - 1 - i : i))
        copy[at + i] = UInt8((value >> shift) & 0xFF)
      }
      out.append(copy)
    }
    switch base.format {
    case .wav:
      patch(4, 0, width: 4)
      patch(4, 0xFFFF_FFFF, width: 4)
      if let fmt = chunk("fmt ", in: bytes) {
        patch(fmt + 4, 0, width: 4)
        patch(fmt + 4, 2, width: 4)
        patch(fmt + 4, 0xFFFF_FFFF, width: 4)
        for format: UInt64 in [0, 2, 7, 0x55, 0xFFFE] { patch(fmt + 8, format, width: 2) }
        for channels: UInt64 in [0, 3, 33, 1024, 65_535] { patch(fmt + 10, channels, width: 2) }
        for rate: UInt64 in [0, 1, 999, 8_000, 768_001, 0x7FFF_FFFF, 0xFFFF_FFFF] { patch(fmt + 12, rate, width: 4) }
        patch(fmt + 16, 0, width: 4)
        for align: UInt64 in [0, 1, 65_535] { patch(fmt + 20, align, width: 2) }
        for bits: UInt64 in [0, 1, 7, 64, 65_535] { patch(fmt + 22, bits, width: 2) }
      }
      if let data = chunk("data", in: bytes) {
        for size: UInt64 in [0, 1, 3, 0x7FFF_FFFF, 0xFFFF_FFFF] { patch(data + 4, size, width: 4) }
      }
    case .flac:
      // STREAMINFO: the block header at 4, its 34 bytes from 8.
      patch(5, 0, width: 3, bigEndian: true)
      patch(5, 0xFF_FFFF, width: 3, bigEndian: true)
      patch(4, 0x7F, width: 1)
      for size: UInt64 in [0, 1, 65_535] {
        patch(8, size, width: 2, bigEndian: true)
        patch(10, size, width: 2, bigEndian: true)
      }
      // Rate (20 bits), channels − 1 (3), bits − 1 (5), total frames (36): 64 bits from 18.
      let packed = bytes.count >= 26 ? bytes[18..<26].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } : 0
      let rate = UInt64(0xFFFFF) << 44
      let channels = UInt64(0x7) << 41
      let bits = UInt64(0x1F) << 36
      let total = UInt64(0xF_FFFF_FFFF)
      for value in [
        packed & ~rate, packed & ~rate | UInt64(1) << 44, packed | rate, packed | channels, packed & ~bits,
        packed | bits, packed & ~total, packed | total,
      ] {
        patch(18, value, width: 8, bigEndian: true)
      }
    case .ogg:
      // The identification header follows the first page's header and segment table.
      guard bytes.count > 27 else { break }
      let packet = 27 + Int(bytes[26])
      for channels: UInt64 in [0, 255] { patch(packet + 11, channels, width: 1) }
      for rate: UInt64 in [0, 1, 0xFFFF_FFFF] { patch(packet + 12, rate, width: 4) }
      for blocksizes: UInt64 in [0x00, 0xFF, 0x66, 0xB8] { patch(packet + 28, blocksizes, width: 1) }
      patch(26, 0, width: 1)
      patch(26, 255, width: 1)
    case .mp3:
      if bytes.starts(with: Array("ID3".utf8)) { patch(6, 0x7F7F_7F7F, width: 4, bigEndian: true) }
      guard let frame = firstFrame(in: bytes) else { break }
      // Bitrate index 15 and 0, sample rate index 3, layer 0, version 1 (all reserved or free).
      let b1 = UInt64(bytes[frame + 1])
      let b2 = UInt64(bytes[frame + 2])
      patch(frame + 2, b2 | 0xF0, width: 1)
      patch(frame + 2, b2 & 0x0F, width: 1)
      patch(frame + 2, b2 | 0x0C, width: 1)
      patch(frame + 1, b1 & ~0x06, width: 1)
      patch(frame + 1, b1 & ~0x18 | 0x08, width: 1)
      patch(frame + 3, UInt64(bytes[frame + 3]) | 0xC0, width: 1)
    }
    return out
  }

  // MARK: Duplicates

  private static func duplicates(_ base: MediaBase) -> [[UInt8]] {
    let bytes = base.bytes
    var out: [[UInt8]] = []
    func inserting(_ range: Range<Int>, at position: Int) {
      guard range.upperBound <= bytes.count, position <= bytes.count else { return }
      var copy = bytes
      copy.insert(contentsOf: bytes[range], at: position)
      out.append(copy)
    }
    switch base.format {
    case .wav:
      for id in ["fmt ", "data"] {
        guard let start = chunk(id, in: bytes) else { continue }
        let end = min(start + 8 + Int(le32(bytes, start + 4)), bytes.count)
        inserting(start..<end, at: end)
        inserting(start..<end, at: 12)
      }
      // An unknown chunk claiming nearly 4 GiB before the rest.
      var copy = bytes
      copy.insert(contentsOf: Array("junk".utf8) + [0xF0, 0xFF, 0xFF, 0xFF], at: 12)
      out.append(copy)
    case .flac:
      inserting(4..<42, at: 42)
      inserting(4..<42, at: 4)
    case .ogg:
      let pages = oggPages(bytes)
      for page in pages.prefix(3) { inserting(page, at: page.upperBound) }
    case .mp3:
      if let frame = firstFrame(in: bytes) {
        inserting(frame..<min(frame + 2_000, bytes.count), at: frame)
        inserting(frame..<min(frame + 400, bytes.count), at: bytes.count)
      }
      if bytes.starts(with: Array("ID3".utf8)) { inserting(0..<10, at: 10) }
    }
    return out
  }

  // MARK: Formats

  static func le32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
    guard at + 4 <= bytes.count else { return 0 }
    return (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[at + $1]) << (8 * UInt32($1)) }
  }

  /// The offset of a RIFF chunk's id.
  static func chunk(_ id: String, in bytes: [UInt8]) -> Int? {
    var at = 12
    let wanted = Array(id.utf8)
    while at + 8 <= bytes.count {
      if Array(bytes[at..<(at + 4)]) == wanted { return at }
      at += 8 + Int(le32(bytes, at + 4)) + Int(le32(bytes, at + 4) & 1)
    }
    return nil
  }

  /// The first MPEG frame header (after an ID3v2 tag).
  static func firstFrame(in bytes: [UInt8]) -> Int? {
    var start = 0
    if bytes.starts(with: Array("ID3".utf8)), bytes.count > 10 {
      start = 10 + bytes[6..<10].reduce(0) { $0 << 7 | Int($1 & 0x7F) }
    }
    guard start + 4 <= bytes.count else { return nil }
    return (start..<(bytes.count - 4)).first { bytes[$0] == 0xFF && bytes[$0 + 1] & 0xE0 == 0xE0 }
  }

  /// Each Ogg page's byte range.
  static func oggPages(_ bytes: [UInt8]) -> [Range<Int>] {
    var pages: [Range<Int>] = []
    var at = 0
    while at + 27 <= bytes.count, bytes[at..<(at + 4)].elementsEqual("OggS".utf8) {
      let segments = Int(bytes[at + 26])
      guard at + 27 + segments <= bytes.count else { break }
      let body = bytes[(at + 27)..<(at + 27 + segments)].reduce(0) { $0 + Int($1) }
      let end = min(at + 27 + segments + body, bytes.count)
      pages.append(at..<end)
      at = end
    }
    return pages
  }

  /// Recomputes each Ogg page's CRC, so a damaged field is read by the decoder instead of the
  /// page being skipped.
  static func fixingOggChecksums(_ bytes: [UInt8], format: MediaBase.Format, when fix: Bool) -> [UInt8] {
    guard format == .ogg, fix else { return bytes }
    var copy = bytes
    for page in oggPages(bytes) {
      for i in 22..<26 { copy[page.lowerBound + i] = 0 }
      var crc: UInt32 = 0
      for byte in copy[page] {
        crc = (crc << 8) ^ oggTable[Int((crc >> 24) ^ UInt32(byte))]
      }
      for i in 0..<4 { copy[page.lowerBound + 22 + i] = UInt8((crc >> (8 * UInt32(i))) & 0xFF) }
    }
    return copy
  }

  private static let oggTable: [UInt32] = (0..<256).map { index in
    var r = UInt32(index) << 24
    for _ in 0..<8 { r = r & 0x8000_0000 != 0 ? (r << 1) ^ 0x04C1_1DB7 : r << 1 }
    return r
  }
}
