import RampEngine
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Keeps the sizes in a growing WAV file's header true while another writer appends to it (ALSA's
/// `file` plugin writes them only when it closes the file): at most once a second, on a queue of
/// its own, never the render thread. Any reader (`rampctl envelope`, sox, a browser) can then
/// read the file while it is being written, up to the last whole frame.
///
/// It wakes only when the file changes (inotify's `IN_MODIFY`): a file nothing is written to (the
/// embedded output while idle) costs no wake-up. Its own header write is a change too, seen once:
/// the refresh after it finds the header true and writes nothing.
public final class WavHeaderKeeper: Sendable {
  private let descriptor: CInt
  private let interval: Double
  /// The file, watched for writes.
  private let watch = FileWatch()
  private let watching: Bool
  /// Rung by `stop`: the keeper's thread ends.
  private let stopBell: DescriptorBell?
  private let running = Atomic<Bool>(false)
  private let finished = Atomic<Bool>(false)

  /// `descriptor`: the WAV file at `path`, open for reading and writing; it stays the caller's.
  public init(descriptor: CInt, path: String, interval: Double = 1) {
    self.descriptor = descriptor
    self.interval = interval
    watching = watch.add(path, events: CInt(IN_MODIFY)) != nil
    stopBell = try? DescriptorBell("wav-header")
  }

  public func start() {
    guard watching, stopBell != nil,
      running.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    else { return }
    startThread(named: "rampd-wav-header") { [self] in run() }
  }

  /// Stops watching and brings the header up to date a last time.
  public func stop() {
    guard running.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged else {
      return
    }
    stopBell?.ring()
    while !finished.load(ordering: .acquiring) { usleep(1_000) }
    _ = Self.refresh(descriptor: descriptor)
  }

  /// The keeper's thread: sleeps until the file changes, then refreshes the header, at most once
  /// an interval.
  private func run() {
    defer { finished.store(true, ordering: .releasing) }
    guard let stopBell else { return }
    var refreshed = -Double.infinity
    var due: Double?
    while running.load(ordering: .acquiring) {
      let timeout = due.map { pollMilliseconds($0 - monotonicSeconds()) } ?? -1
      if stopBell.wait(milliseconds: timeout, orReadable: watch.descriptor) {
        _ = watch.changes()
        if due == nil { due = max(refreshed + interval, monotonicSeconds()) }
      }
      if let deadline = due, monotonicSeconds() >= deadline {
        due = nil
        refreshed = monotonicSeconds()
        _ = Self.refresh(descriptor: descriptor)
      }
    }
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
