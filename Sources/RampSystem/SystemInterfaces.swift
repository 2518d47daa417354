#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

// What Foundation's Thread, FileHandle and NSString gave, from the C library: Foundation's
// versions bring its internationalisation (and ICU's data) into every binary that uses them.

/// Starts a detached thread that runs `body`, named `name` (15 bytes at most) as `top` and
/// `/proc/<pid>/task/<tid>/comm` show it. Its stack is the C library's default size.
public func startThread(named name: String, _ body: @escaping @Sendable () -> Void) {
  let box = Unmanaged.passRetained(ThreadBody(name: name, body)).toOpaque()
  var thread = pthread_t()
  let failure = pthread_create(
    &thread, nil,
    { argument in
      let thread = Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue()
      nameThisThread(thread.name)
      thread.body()
      return nil
    }, box)
  precondition(failure == 0, "cannot start the thread \(name): \(String(cString: strerror(failure)))")
  pthread_detach(thread)
}

private final class ThreadBody {
  let name: String
  let body: @Sendable () -> Void
  init(name: String, _ body: @escaping @Sendable () -> Void) {
    self.name = name
    self.body = body
  }
}

/// Names the calling thread as `top` and `/proc/<pid>/task/<tid>/comm` show it (15 bytes at
/// most). Allocates: not for the render loop itself; `startThread` calls it as its thread starts.
public func nameThisThread(_ name: String) {
  let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
  guard descriptor >= 0 else { return }
  var bytes = Array(name.utf8.prefix(15))
  _ = write(descriptor, &bytes, bytes.count)
  close(descriptor)
}

/// Writes `text` in full to `descriptor` (1: standard output, 2: standard error), retrying on
/// interruption. The C `errno` of a failure, 0 when all was written.
@discardableResult public func writeText(_ text: String, to descriptor: Int32) -> Int32 {
  var bytes = Array(text.utf8)
  return writeAll(&bytes, to: descriptor)
}

/// Writes `bytes` in full to `descriptor`, retrying on interruption. The C `errno` of a failure,
/// 0 when all was written.
@discardableResult public func writeAll(_ bytes: inout [UInt8], to descriptor: Int32) -> Int32 {
  bytes.withUnsafeBytes { raw in
    var offset = 0
    while offset < raw.count {
      let written = write(descriptor, raw.baseAddress! + offset, raw.count - offset)
      if written < 0 {
        if errno == EINTR { continue }
        return errno
      }
      offset += written
    }
    return 0
  }
}

/// The directory part of a path, as `NSString.deletingLastPathComponent` gave it:
/// `/run/rampd/socket` → `/run/rampd`, `/socket` → `/`, `socket` → `` (none), `/a/b/` → `/a`.
public func directoryPart(of path: String) -> String {
  var bytes = Array(path.utf8)
  while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
  guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "" }
  var end = slash
  while end > 0 && bytes[end - 1] == UInt8(ascii: "/") { end -= 1 }
  return end == 0 ? "/" : String(decoding: bytes[..<end], as: UTF8.self)
}
