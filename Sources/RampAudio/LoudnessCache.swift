import FoundationEssentials
import RampEngine
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Which file this is, as far as a measurement of it goes: the same device, inode, size and
/// modification time (to the nanosecond) is taken for the same contents. A file rewritten in
/// place gets a new modification time; one replaced by a rename, a new inode.
public struct FileIdentity: Hashable, Sendable {
  public var device: UInt64
  public var inode: UInt64
  public var size: Int64
  /// Nanoseconds since the epoch.
  public var modified: Int64

  public init(device: UInt64, inode: UInt64, size: Int64, modified: Int64) {
    self.device = device
    self.inode = inode
    self.size = size
    self.modified = modified
  }

  init(_ status: stat) {
    self.init(
      device: UInt64(status.st_dev), inode: UInt64(status.st_ino), size: Int64(status.st_size),
      modified: Int64(status.st_mtim.tv_sec) * 1_000_000_000 + Int64(status.st_mtim.tv_nsec))
  }

  /// The identity of the file at `path` (links followed), nil when there is none.
  public init?(path: String) {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    self.init(status)
  }

  /// The identity of an open file.
  public init?(descriptor: CInt) {
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { return nil }
    self.init(status)
  }
}

/// Measurements of files by their ``FileIdentity``, kept in a file so that a file is measured once.
///
/// The file is text: a header line naming the format and libebur128's version, then one line per
/// file, `device inode size mtime-ns frames rate channels integrated range true-peak` (`-inf` for
/// an infinite value). A cache written by another version of libebur128 is dropped, since it may
/// measure differently; one that cannot be read or parsed is ignored (``problem`` says why) and
/// replaced on the next ``save()``: a cache never stops a measurement.
public struct LoudnessCache: Sendable {
  public let path: String
  public private(set) var entries: [FileIdentity: Loudness] = [:]
  /// Why the file on disk was ignored (a line that is not an entry, a read error); nil when it
  /// was read, or was not there, or was written by another version of libebur128.
  public private(set) var problem: String?

  static var header: String { "rampd-loudness-cache 1 libebur128 \(Loudness.libraryVersion)" }

  /// An empty cache that ``save()`` writes to `path`.
  public init(emptyAt path: String) { self.path = path }

  /// The cache at `path`: empty when there is no file, or it is ignored (see ``problem``).
  public init(loading path: String) {
    self.path = path
    switch Self.load(path) {
    case .success(let entries): self.entries = entries
    case .failure(let problem): self.problem = problem.text
    }
  }

  public subscript(identity: FileIdentity) -> Loudness? {
    get { entries[identity] }
    set { entries[identity] = newValue }
  }

  /// Writes the cache to its path, atomically (a reader sees the old file or the new one), with
  /// what another process saved there since this one was loaded: its entries are kept, this
  /// one's win. Creates the directory (mode 0700) when it is missing.
  ///
  /// - Throws: ``AudioError/Code/unwritableFile`` naming the file and the reason.
  public func save() throws(AudioError) {
    var merged = (try? Self.load(path).get()) ?? [:]
    merged.merge(entries) { _, mine in mine }
    let directory = directoryPart(of: path)
    if !directory.isEmpty {
      do {
        try FileManager.default.createDirectory(
          atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
      } catch {
        throw AudioError(.unwritableFile, "cannot write the loudness cache '\(path)': cannot create \(directory).")
      }
    }
    var text = Self.header + "\n"
    for (identity, loudness) in merged {
      let fields: [String] = [
        String(identity.device), String(identity.inode), String(identity.size), String(identity.modified),
        String(loudness.frames), String(loudness.sampleRate), String(loudness.channels),
        Self.format(loudness.integrated), Self.format(loudness.range), Self.format(loudness.truePeak),
      ]
      text += fields.joined(separator: " ") + "\n"
    }
    do {
      let file = try ReplacementFile(replacing: path, mode: 0o600, durability: .whenReplacing)
      let bytes = Array(text.utf8)
      var written = 0
      while written < bytes.count {
        let count = bytes.withUnsafeBytes { write(file.descriptor, $0.baseAddress! + written, $0.count - written) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else {
          throw ReplacementFile.Failure(
            path: path, step: "writing \(file.temporaryPath)", code: count == 0 ? EIO : errno)
        }
        written += count
      }
      try file.commit()
    } catch let failure as ReplacementFile.Failure {
      throw AudioError(.unwritableFile, "cannot write the loudness cache '\(path)': \(failure)")
    } catch {
      throw AudioError(.unwritableFile, "cannot write the loudness cache '\(path)': \(error)")
    }
  }

  /// Shortest text that reads back as the same double; `-inf` for −infinity.
  private static func format(_ value: Double) -> String {
    value.isFinite ? String(value) : (value < 0 ? "-inf" : "inf")
  }

  private struct Problem: Error {
    var text: String
  }

  /// The entries at `path`; none when there is no file or another version wrote it.
  private static func load(_ path: String) -> Result<[FileIdentity: Loudness], Problem> {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else {
      // No cache yet, or its directory is not one (saving says so).
      if errno == ENOENT || errno == ENOTDIR { return .success([:]) }
      return .failure(Problem(text: "cannot read it: \(String(cString: strerror(errno)))"))
    }
    defer { close(descriptor) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
      let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      guard count >= 0 else { return .failure(Problem(text: "cannot read it: \(String(cString: strerror(errno)))")) }
      if count == 0 { break }
      bytes.append(contentsOf: chunk[..<count])
    }
    guard let text = String(validating: bytes, as: UTF8.self) else {
      return .failure(Problem(text: "it is not text"))
    }
    var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    if lines.last == "" { lines.removeLast() }
    guard let first = lines.first, first.hasPrefix("rampd-loudness-cache ") else {
      return .failure(Problem(text: "line 1 is not its header"))
    }
    guard first == header else { return .success([:]) }
    var entries: [FileIdentity: Loudness] = [:]
    for (offset, line) in lines.enumerated().dropFirst() {
      let fields = line.split(separator: " ", omittingEmptySubsequences: false)
      guard fields.count == 10,
        let device = UInt64(fields[0]), let inode = UInt64(fields[1]), let size = Int64(fields[2]),
        let modified = Int64(fields[3]), let frames = Int64(fields[4]), frames >= 0,
        let rate = Int(fields[5]), rate > 0, let channels = Int(fields[6]), channels > 0,
        let integrated = Double(fields[7]), !integrated.isNaN, integrated < .infinity,
        let range = Double(fields[8]), range.isFinite, range >= 0,
        let peak = Double(fields[9]), !peak.isNaN, peak < .infinity
      else { return .failure(Problem(text: "line \(offset + 1) is not an entry")) }
      entries[FileIdentity(device: device, inode: inode, size: size, modified: modified)] = Loudness(
        integrated: integrated, range: range, truePeak: peak, frames: frames, sampleRate: rate, channels: channels)
    }
    return .success(entries)
  }
}
