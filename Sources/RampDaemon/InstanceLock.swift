import Foundation

/// An exclusive `flock` held for as long as a daemon runs: on the state file's lock file
/// (`<state.path>.lock`) and the socket's (`<socket>.lock`), which record the holder's pid and
/// socket, and on the embedded output's WAV file. A second rampd that would share either finds it taken and stops before it has
/// touched anything. The kernel releases the lock when the process exits, however it exits.
final class InstanceLock: @unchecked Sendable {
  let path: String
  /// Open on `path` (read and write) while the lock is held; -1 after `release`.
  private(set) var descriptor: CInt

  /// Why the lock could not be taken: another process holds it, or the file cannot be opened.
  enum Failure: Error {
    case held(by: String?)
    case unusable(String)
  }

  /// Takes the lock on `path`, creating the file (mode 0600) and its directory (0700) when
  /// missing, and writes `record` into it (nil: the file's bytes are left alone: a WAV).
  init(path: String, record: String?) throws(Failure) {
    self.path = path
    let directory = (path as NSString).deletingLastPathComponent
    if !directory.isEmpty {
      try? FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }
    let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0o600)
    guard descriptor >= 0 else { throw .unusable("cannot open \(path): \(errnoText())") }
    guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
      let code = errno
      let holder = Self.contents(descriptor)
      close(descriptor)
      if code == EWOULDBLOCK { throw .held(by: holder) }
      throw .unusable("cannot lock \(path): \(String(cString: strerror(code)))")
    }
    self.descriptor = descriptor
    if let record {
      let bytes = Array(record.utf8)
      _ = ftruncate(descriptor, 0)
      _ = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
    }
  }

  deinit { release() }

  /// Gives the lock up (the daemon stopped).
  func release() {
    guard descriptor >= 0 else { return }
    close(descriptor)
    descriptor = -1
  }

  /// What a lock file says about its holder (`pid 12, socket /run/rampd/rampd.sock`), nil when
  /// it says nothing.
  private static func contents(_ descriptor: CInt) -> String? {
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
    guard count > 0 else { return nil }
    let text = String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    // A WAV is no record.
    guard !text.isEmpty, text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else { return nil }
    return text
  }

  /// ` (pid 12, socket /run/rampd/rampd.sock)` for a holder's record, "" when there is none.
  static func describe(_ holder: String?) -> String { holder.map { " (\($0))" } ?? "" }

  /// The record a daemon writes into its lock files.
  static func record(socket: String) -> String { "pid \(getpid()), socket \(socket)\n" }
}
