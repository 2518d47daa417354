import FoundationEssentials
import Logging
import RampEngine
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

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
    let directory = directoryPart(of: path)
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
    let text = String(decoding: buffer[..<count], as: UTF8.self).trimmingWhitespace()
    // A WAV is no record.
    guard !text.isEmpty, text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else { return nil }
    return text
  }

  /// What a daemon claims before it opens anything: the lock beside its `socket` (nil: systemd
  /// passed the socket) after making sure no rampd listens there, and the lock of its `state`
  /// file, each recording `record` (its socket). A lock file that cannot be created is logged and
  /// done without.
  ///
  /// - Throws: `ServerError` naming the other daemon and what it holds.
  static func claim(socket: String?, state: String, record socketPath: String, logger: Logger) throws
    -> [InstanceLock]
  {
    var locks: [InstanceLock] = []
    let record = record(socket: socketPath)
    if let socket {
      try Server.refuseLiveListener(at: socket)
      // Two daemons starting at once on one socket: the second would take the first's fresh
      // socket file for a stale one.
      do {
        locks.append(try InstanceLock(path: socket + ".lock", record: record))
      } catch .held(let holder) {
        throw ServerError(
          "another rampd\(describe(holder)) is starting on \(socket); this one stops without touching anything")
      } catch .unusable(let problem) {
        logger.warning("no lock beside the socket: \(problem)")
      }
    }
    do {
      locks.append(try InstanceLock(path: state + ".lock", record: record))
    } catch .held(let holder) {
      throw ServerError(
        "another rampd\(describe(holder)) is running with the state file \(state); this one stops without "
          + "touching anything (give it another state.path to run both)")
    } catch .unusable(let problem) {
      logger.warning("no lock on the state file; another rampd sharing it would not be noticed: \(problem)")
    }
    return locks
  }

  /// The lock on the embedded output's WAV file, taken before ALSA's file plugin opens (and
  /// truncates) it: another daemon's file must be left alone.
  static func claim(embeddedFile file: String) throws -> InstanceLock {
    do {
      return try InstanceLock(path: file, record: nil)
    } catch .held {
      throw ServerError(
        "another rampd plays into the embedded output file \(file); this one stops without touching it "
          + "(give it another embedded-output.path, or a device)")
    } catch .unusable(let problem) {
      throw ServerError("embedded-output.path: \(problem)")
    }
  }

  /// ` (pid 12, socket /run/rampd/rampd.sock)` for a holder's record, "" when there is none.
  static func describe(_ holder: String?) -> String { holder.map { " (\($0))" } ?? "" }

  /// The record a daemon writes into its lock files.
  static func record(socket: String) -> String { "pid \(getpid()), socket \(socket)\n" }
}
