import Dispatch

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Keeps the sizes in a growing WAV file's header true while another writer appends to it (ALSA's
/// `file` plugin writes them only when it closes the file): once a second, on a thread of its
/// own, never the render thread. Any reader (`rampctl envelope`, sox, a browser) can then read
/// the file while it is being written, up to the last whole frame.
public final class WavHeaderKeeper: @unchecked Sendable {
  private let descriptor: CInt
  private let timer: DispatchSourceTimer
  private var running = false

  /// `descriptor`: the WAV file, open for reading and writing; it stays the caller's.
  public init(descriptor: CInt, interval: Double = 1) {
    self.descriptor = descriptor
    timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "rampd.wav-header", qos: .utility))
    timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(100))
    timer.setEventHandler { [descriptor] in _ = Self.refresh(descriptor: descriptor) }
  }

  public func start() {
    guard !running else { return }
    running = true
    timer.resume()
  }

  /// Stops the timer and brings the header up to date a last time.
  public func stop() {
    guard running else { return }
    running = false
    timer.cancel()
    _ = Self.refresh(descriptor: descriptor)
  }

  /// Sets the RIFF size and the `data` chunk's size from the file's length (whole frames only).
  /// Returns false, changing nothing, for a file that is not (yet) a WAV with a `fmt ` and a
  /// `data` chunk.
  public static func refresh(descriptor: CInt) -> Bool {
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { return false }
    let size = Int64(status.st_size)
    var header = [UInt8](repeating: 0, count: 4096)
    let count = header.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
    guard count >= 44, header[0..<4] == [0x52, 0x49, 0x46, 0x46], header[8..<12] == [0x57, 0x41, 0x56, 0x45] else {
      return false
    }
    func word(_ at: Int) -> UInt32 {
      UInt32(header[at]) | UInt32(header[at + 1]) << 8 | UInt32(header[at + 2]) << 16 | UInt32(header[at + 3]) << 24
    }
    var offset = 12
    var blockAlign = 0
    while offset + 8 <= count {
      let id = header[offset..<offset + 4]
      let length = Int(word(offset + 4))
      if id.elementsEqual("fmt ".utf8), offset + 22 <= count {
        blockAlign = Int(header[offset + 20]) | Int(header[offset + 21]) << 8
      }
      if id.elementsEqual("data".utf8) {
        guard blockAlign > 0 else { return false }
        let start = Int64(offset + 8)
        var bytes = max(size - start, 0)
        bytes = min(bytes, Int64(UInt32.max) - start)
        bytes -= bytes % Int64(blockAlign)
        write(UInt32(bytes), at: offset + 4, descriptor: descriptor, unless: word(offset + 4))
        write(UInt32(start + bytes - 8), at: 4, descriptor: descriptor, unless: word(4))
        return true
      }
      offset += 8 + length + (length & 1)
    }
    return false
  }

  private static func write(_ value: UInt32, at offset: Int, descriptor: CInt, unless current: UInt32) {
    guard value != current else { return }
    var little = value.littleEndian
    _ = withUnsafeBytes(of: &little) { pwrite(descriptor, $0.baseAddress, 4, off_t(offset)) }
  }
}
