#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A file that replaces `destination` only when it is complete: every writer of the project that
/// produces a whole file (a render, a tone, the daemon's state file) writes through one.
///
/// The bytes go to a new hidden file beside the destination, `.<name>.tmp-<pid>` (created with
/// `O_EXCL`, so it is never someone else's), which ``commit()`` syncs and renames over the
/// destination, then syncs the directory (see ``Durability`` for when it syncs). Until then the destination is untouched; a writer
/// released without committing (an error, an interruption) removes its temporary file. A
/// destination that is a symbolic link is followed: its target is replaced and the link stays.
/// A process killed outright leaves its temporary file, which ``removeStale(beside:)`` removes.
///
/// Not `Sendable`: one thread owns it.
public final class ReplacementFile {
  /// The file that is replaced on commit (symbolic links resolved).
  public let destination: String
  /// The hidden temporary file being written.
  public let temporaryPath: String
  /// Write here (the temporary file, open for writing).
  public let descriptor: CInt
  /// Whether ``commit()`` syncs the file and its directory to the disk.
  public let syncsOnCommit: Bool
  private var finished = false

  /// When ``commit()`` waits for the disk.
  public enum Durability: Sendable {
    /// Always: what was committed must survive a crash (the daemon's state).
    case always
    /// Only when the rename replaces an existing file, so that a crash never leaves that file
    /// replaced by an incomplete one. A new file is left to the kernel's writeback, as other
    /// programs' outputs are: a crash can lose it, never anything that was there before.
    case whenReplacing
  }

  /// Creates the temporary file beside `path` with `mode` (less the umask). An existing
  /// destination's permissions are kept instead of `mode`.
  ///
  /// - Throws: ``ReplacementFile/Failure`` naming the step and the reason.
  public init(replacing path: String, mode: mode_t = 0o666, durability: Durability = .always) throws(Failure) {
    let destination = Self.resolvingLinks(path)
    self.destination = destination
    let (directory, name) = Self.split(destination)
    var existing = stat()
    let keepsMode = stat(destination, &existing) == 0
    syncsOnCommit = durability == .always || keepsMode
    var attempt = 0
    var descriptor: CInt = -1
    var temporary = ""
    repeat {
      attempt += 1
      temporary = Self.join(directory, ".\(name).tmp-\(getpid())" + (attempt > 1 ? "-\(attempt)" : ""))
      descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, keepsMode ? 0o600 : mode)
    } while descriptor < 0 && errno == EEXIST && attempt < 100
    guard descriptor >= 0 else { throw Failure(path: path, step: "creating \(temporary)", code: errno) }
    if keepsMode { _ = fchmod(descriptor, existing.st_mode & 0o7777) }
    self.temporaryPath = temporary
    self.descriptor = descriptor
  }

  deinit { discard() }

  /// Syncs the temporary file, renames it over the destination and syncs the directory (the
  /// syncs when ``syncsOnCommit``). On failure the temporary file is removed and the destination
  /// is as it was.
  public func commit() throws(Failure) {
    guard !finished else { throw Failure(path: destination, step: "committing", code: EBADF) }
    if syncsOnCommit && fsync(descriptor) != 0 {
      let code = errno
      discard()
      throw Failure(path: destination, step: "syncing \(temporaryPath)", code: code)
    }
    // close can report a deferred write error (NFS, quotas).
    finished = true
    if close(descriptor) != 0 {
      let code = errno
      unlink(temporaryPath)
      throw Failure(path: destination, step: "closing \(temporaryPath)", code: code)
    }
    guard rename(temporaryPath, destination) == 0 else {
      let code = errno
      unlink(temporaryPath)
      throw Failure(path: destination, step: "renaming \(temporaryPath) to \(destination)", code: code)
    }
    guard syncsOnCommit else { return }
    let directory = Self.split(destination).directory
    let code = Self.syncDirectory(directory)
    guard code == 0 else { throw Failure(path: destination, step: "syncing the directory \(directory)", code: code) }
  }

  /// Removes the temporary file; the destination stays as it was. Does nothing after a commit.
  public func discard() {
    guard !finished else { return }
    finished = true
    close(descriptor)
    unlink(temporaryPath)
  }

  /// Removes the temporary files beside `path` left by processes that no longer run (or by this
  /// one, when `includingOwn`: a caller that knows none of its own is in use).
  /// Returns the paths removed.
  @discardableResult
  public static func removeStale(beside path: String, includingOwn: Bool = false) -> [String] {
    let (directory, name) = split(resolvingLinks(path))
    guard let stream = opendir(directory) else { return [] }
    defer { closedir(stream) }
    let prefix = ".\(name).tmp-"
    var stale: [String] = []
    while let entry = readdir(stream) {
      let entryName = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
      }
      guard entryName.hasPrefix(prefix) else { continue }
      let tail = entryName.dropFirst(prefix.count)
      let digits = tail.prefix { $0 != "-" }
      let rest = tail.dropFirst(digits.count)
      guard let pid = pid_t(digits), pid > 0, rest.isEmpty || Int(rest.dropFirst()) != nil else { continue }
      let own = pid == getpid()
      if (own && includingOwn) || (!own && kill(pid, 0) != 0 && errno == ESRCH) { stale.append(entryName) }
    }
    return stale.map { join(directory, $0) }.filter { unlink($0) == 0 }
  }

  /// Whether `first` and `second` are one file (same device and inode, whatever the names: `./x`,
  /// a symbolic link, a hard link). False when either does not exist.
  public static func sameFile(_ first: String, _ second: String) -> Bool {
    var a = stat()
    var b = stat()
    guard stat(first, &a) == 0, stat(second, &b) == 0 else { return false }
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino
  }

  /// Whether the open `descriptor` is the file at `path` (which may not exist).
  public static func sameFile(descriptor: CInt, _ path: String) -> Bool {
    var a = stat()
    var b = stat()
    guard fstat(descriptor, &a) == 0, stat(path, &b) == 0 else { return false }
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino
  }

  /// Syncs a directory so that a rename in it is durable: 0, or the errno. File systems that
  /// cannot sync a directory (EINVAL) count as synced.
  public static func syncDirectory(_ directory: String) -> Int32 {
    let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard descriptor >= 0 else { return errno }
    defer { close(descriptor) }
    guard fsync(descriptor) == 0 else { return errno == EINVAL ? 0 : errno }
    return 0
  }

  /// `path` with a final symbolic link (and links to links) replaced by what it names; `path`
  /// itself when it is no link or a link that leads nowhere.
  static func resolvingLinks(_ path: String) -> String {
    var current = path
    for _ in 0..<40 {
      var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
      let length = readlink(current, &buffer, buffer.count - 1)
      guard length > 0 else { return current }
      let target = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
      current = target.hasPrefix("/") ? target : join(split(current).directory, target)
    }
    return current
  }

  static func split(_ path: String) -> (directory: String, name: String) {
    guard let slash = path.lastIndex(of: "/") else { return (".", path) }
    let directory = String(path[..<slash])
    return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
  }

  static func join(_ directory: String, _ name: String) -> String {
    directory == "/" ? "/" + name : directory + "/" + name
  }

  /// A step of writing or replacing the file that failed.
  public struct Failure: Error, CustomStringConvertible {
    /// The destination.
    public let path: String
    /// What was being done: `creating /x/.out.wav.tmp-12`, `renaming …`.
    public let step: String
    /// The errno.
    public let code: Int32

    public init(path: String, step: String, code: Int32) {
      self.path = path
      self.step = step
      self.code = code
    }

    public var reason: String { String(cString: strerror(code)) }
    public var description: String { "\(step): \(reason)" }
  }
}

@available(*, unavailable)
extension ReplacementFile: Sendable {}
