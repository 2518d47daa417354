import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// inotify on a few paths: a descriptor that `poll` finds readable once one of them changes, so
/// a thread that waits for a change sleeps until it comes instead of looking again and again.
/// Its only state is the descriptor; one thread reads it.
final class FileWatch: Sendable {
  /// inotify's descriptor (−1 when the kernel gives none: the caller then looks on a timer).
  let descriptor: CInt

  init() {
    descriptor = inotify_init1(CInt(IN_NONBLOCK | IN_CLOEXEC))
  }

  deinit {
    if descriptor >= 0 { close(descriptor) }
  }

  /// Watches `path` for `events` (`IN_MODIFY`, `IN_CREATE`…); the watch's number, nil when the
  /// path cannot be watched (it does not exist, or no inotify).
  @discardableResult
  func add(_ path: String, events: CInt) -> CInt? {
    guard descriptor >= 0 else { return nil }
    let watch = inotify_add_watch(descriptor, path, UInt32(bitPattern: events))
    return watch >= 0 ? watch : nil
  }

  /// What changed since the last call, without waiting: each event's watch and the name of the
  /// entry it concerns in a watched directory ("" for the watched path itself).
  func changes() -> [(watch: CInt, name: String)] {
    var found: [(CInt, String)] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
      let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
      guard count > 0 else { return found }
      var offset = 0
      let header = MemoryLayout<inotify_event>.size
      while offset + header <= count {
        let (watch, length) = buffer.withUnsafeBytes { bytes in
          let event = bytes.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
          return (event.wd, Int(event.len))
        }
        let name = buffer[offset + header..<min(offset + header + length, count)].prefix { $0 != 0 }
        found.append((watch, String(decoding: name, as: UTF8.self)))
        offset += header + length
      }
    }
  }
}

/// Where the devices rampd may wait for appear: a sound card's PCM nodes in `/dev/snd` (made by
/// udev when a card is plugged in or its driver loads; `/dev/snd` itself with the first card), PipeWire's socket (`pipewire-0`) and
/// PulseAudio's (`pulse/native`, also pipewire-pulse's) in the session's runtime directory. A
/// device that did not open at start is tried again as soon as one of them appears.
struct DeviceArrivalWatch {
  private let watch = FileWatch()
  private var runtime: CInt?
  private var pulse: CInt?
  private var cards: CInt?
  private var devices: CInt?
  private let pulseDirectory: String
  /// A file made in a watched directory, or moved there.
  private static let appears = CInt(IN_CREATE | IN_MOVED_TO)
  /// A device node made, or made usable (its permissions set by udev once it exists).
  private static let cardAppears = appears | CInt(IN_ATTRIB)

  /// The runtime directories as the ALSA plugins find them, from `environment`.
  init(environment: [String: String] = ProcessInfo.processInfo.environment) {
    let runtimeDirectory = environment["PIPEWIRE_RUNTIME_DIR"] ?? environment["XDG_RUNTIME_DIR"]
    pulseDirectory =
      environment["PULSE_RUNTIME_PATH"] ?? environment["XDG_RUNTIME_DIR"].map { "\($0)/pulse" } ?? "/nonexistent"
    runtime = runtimeDirectory.flatMap { watch.add($0, events: Self.appears) }
    pulse = watch.add(pulseDirectory, events: Self.appears)
    cards = watch.add("/dev/snd", events: Self.cardAppears)
    // Without a sound card there is no /dev/snd: it comes with the first card's driver.
    if cards == nil { devices = watch.add("/dev", events: Self.appears) }
  }

  /// Whether anything is watched: without, appearances go unseen and only a timer finds them.
  var watches: Bool { runtime != nil || pulse != nil || cards != nil || devices != nil }

  var descriptor: CInt { watch.descriptor }

  /// Reads what appeared since the last call, without waiting: true when it may be a device.
  mutating func deviceMayHaveAppeared() -> Bool {
    var appeared = false
    for (number, name) in watch.changes() {
      if number == cards && name.hasPrefix("pcmC") { appeared = true }
      if number == devices && name == "snd" && cards == nil {
        cards = watch.add("/dev/snd", events: Self.cardAppears)
        appeared = true
      }
      if number == pulse && name == "native" { appeared = true }
      // PipeWire's socket (`pipewire-0`), not the lock file it makes first (`pipewire-0.lock`):
      // an attempt then would find no server to answer, and `default` would take ALSA's plugin
      // rather than the native output.
      if number == runtime && name.hasPrefix("pipewire-") && !name.hasSuffix(".lock") { appeared = true }
      if number == runtime && name == "pulse" && pulse == nil {
        // pipewire-pulse made its directory: its socket comes next, in it.
        pulse = watch.add(pulseDirectory, events: Self.appears)
        appeared = FileManager.default.fileExists(atPath: "\(pulseDirectory)/native") || appeared
      }
    }
    return appeared
  }
}
