import Foundation
import Testing

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

@Suite struct ReplacementFileTests {
  func scratch(_ name: String = #function) throws -> String {
    let directory = NSTemporaryDirectory() + "rampd-replace-\(getpid())-\(name.filter(\.isLetter))"
    try? FileManager.default.removeItem(atPath: directory)
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return directory
  }

  func write(_ text: String, _ file: ReplacementFile) {
    _ = Array(text.utf8).withUnsafeBytes { Glibc.write(file.descriptor, $0.baseAddress, $0.count) }
  }

  /// The destination changes only on commit; a discarded or released file leaves it and no
  /// temporary file; two at once to one destination do not meet.
  @Test func replacesOnlyOnCommit() throws {
    let directory = try scratch()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = "\(directory)/out.txt"
    try "old".write(toFile: path, atomically: false, encoding: .utf8)
    do {
      let first = try ReplacementFile(replacing: path)
      let second = try ReplacementFile(replacing: path)
      #expect(first.temporaryPath != second.temporaryPath)
      write("new", first)
      write("other", second)
      second.discard()
      #expect(try String(contentsOfFile: path, encoding: .utf8) == "old")
      try first.commit()
    }
    #expect(try String(contentsOfFile: path, encoding: .utf8) == "new")
    do {
      let released = try ReplacementFile(replacing: path)
      write("lost", released)
    }
    #expect(try String(contentsOfFile: path, encoding: .utf8) == "new")
    #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["out.txt"])
  }

  /// A file that replaces another is synced before the rename, whatever the durability asked; a
  /// new one only when asked to be (a render's output is left to the kernel's writeback).
  @Test func syncsWhenItReplacesAFileOrWhenAskedTo() throws {
    let directory = try scratch()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = "\(directory)/out.txt"
    let new = try ReplacementFile(replacing: path, durability: .whenReplacing)
    #expect(!new.syncsOnCommit)
    #expect(try ReplacementFile(replacing: path).syncsOnCommit)
    write("first", new)
    try new.commit()
    #expect(try String(contentsOfFile: path, encoding: .utf8) == "first")
    let replacing = try ReplacementFile(replacing: path, durability: .whenReplacing)
    #expect(replacing.syncsOnCommit)
    write("second", replacing)
    try replacing.commit()
    #expect(try String(contentsOfFile: path, encoding: .utf8) == "second")
    #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["out.txt"])
  }

  /// Temporary files of processes that no longer run are removed; others are left.
  @Test func staleTemporariesOfDeadProcessesGo() throws {
    let directory = try scratch()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let dead: pid_t = 99_999_999
    for name in [
      ".out.wav.tmp-\(dead)", ".out.wav.tmp-\(dead)-3", ".out.wav.tmp-\(getppid())", ".other.wav.tmp-\(dead)",
    ] {
      _ = FileManager.default.createFile(atPath: "\(directory)/\(name)", contents: Data())
    }
    let removed = ReplacementFile.removeStale(beside: "\(directory)/out.wav").map { ($0 as NSString).lastPathComponent }
    #expect(removed.sorted() == [".out.wav.tmp-\(dead)", ".out.wav.tmp-\(dead)-3"])
  }

  /// A WAV whose header says 0 bytes of data (as ALSA's file plugin leaves it while it writes)
  /// reads as empty; once refreshed, as every whole frame in the file.
  @Test func wavHeaderKeeperMakesAGrowingFileReadable() throws {
    let directory = try scratch()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = "\(directory)/open.wav"
    var bytes: [UInt8] = Array("RIFF".utf8) + [36, 0, 0, 0] + Array("WAVEfmt ".utf8) + [16, 0, 0, 0]
    // PCM, 2 channels, 48000 Hz, 192000 bytes/s, block align 4, 16 bits.
    bytes += [1, 0, 2, 0, 0x80, 0xBB, 0, 0, 0x00, 0xEE, 0x02, 0, 4, 0, 16, 0]
    bytes += Array("data".utf8) + [0, 0, 0, 0]
    let frames = 1000
    for index in 0..<frames * 2 { bytes += [UInt8(index & 0xFF), 0x10] }
    bytes += [0x7F, 0x7F]  // half a frame
    _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
    let descriptor = open(path, O_RDWR)
    defer { close(descriptor) }
    #expect(WavHeaderKeeper.refresh(descriptor: descriptor))
    let reader = try SoundFileReader(path: path)
    #expect(reader.frames == Int64(frames))
    let header = try #require(FileManager.default.contents(atPath: path))
    let riff = header[4..<8].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) }
    let data = header[40..<44].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) }
    #expect(riff == 36 + frames * 4 && data == frames * 4, "RIFF \(riff), data \(data)")
    #expect(header.count == bytes.count, "nothing appended")
    // Not a WAV: nothing changes.
    let other = "\(directory)/text"
    _ = FileManager.default.createFile(atPath: other, contents: Data(repeating: 0x41, count: 100))
    let textDescriptor = open(other, O_RDWR)
    defer { close(textDescriptor) }
    #expect(!WavHeaderKeeper.refresh(descriptor: textDescriptor))
    #expect(FileManager.default.contents(atPath: other) == Data(repeating: 0x41, count: 100))
  }
}
