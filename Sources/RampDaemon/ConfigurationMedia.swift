#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Why `MediaSettings.resolve` refused a path. `description` is a sentence for an error reply.
public struct MediaPathError: Error, Sendable, Equatable, CustomStringConvertible {
  public enum Reason: Sendable, Equatable {
    /// The path is empty.
    case empty
    /// A relative path, and no `media.roots` to resolve it against.
    case relativeWithoutRoots
    /// Outside every media root (after symbolic links are followed).
    case outsideRoots
    /// Nothing there (or a directory on the way cannot be read); the detail is the system's reason.
    case notFound(String)
    /// A directory or a device, not a file.
    case notAFile
    /// A confined client (neither root nor rampd's user), and no `media.roots` to confine it to.
    case confinedWithoutRoots
  }

  /// The path as the request gave it.
  public var path: String
  public var reason: Reason

  public init(path: String, reason: Reason) {
    self.path = path
    self.reason = reason
  }

  public var description: String {
    switch reason {
    case .empty: return "the path is empty"
    case .relativeWithoutRoots: return "'\(path)' is a relative path; send an absolute path"
    case .outsideRoots: return "'\(path)' is outside the media roots"
    case .notFound(let detail): return "'\(path)': \(detail)"
    case .notAFile: return "'\(path)' is not a file"
    case .confinedWithoutRoots:
      return
        "'\(path)': clients other than root and rampd's user may play only files under [media] roots, and none are set"
    }
  }
}

extension MediaSettings {
  /// The canonical absolute path of a file `play` may open, or why not.
  ///
  /// A relative path is resolved against the first root (and refused when there are no roots). The
  /// path is canonicalised (`realpath`: `.`, `..` and symbolic links), and with roots it must lie
  /// under one of them, canonicalised too: a symbolic link inside a root that points outside is
  /// refused. A path outside the roots is refused as such whether or not it exists, so a client
  /// cannot probe for files it may not play.
  ///
  /// `confined`: a client that is neither root nor rampd's user, which may play only under roots.
  public func resolve(_ path: String, confined: Bool = false) throws(MediaPathError) -> String {
    guard !path.isEmpty else { throw MediaPathError(path: path, reason: .empty) }
    if confined && roots.isEmpty { throw MediaPathError(path: path, reason: .confinedWithoutRoots) }
    let absolute: String
    if path.hasPrefix("/") {
      absolute = path
    } else if let first = roots.first {
      absolute = (first.hasSuffix("/") ? first : first + "/") + path
    } else {
      throw MediaPathError(path: path, reason: .relativeWithoutRoots)
    }
    let canonicalRoots = roots.compactMap(Self.realPath)

    guard let canonical = Self.realPath(absolute) else {
      let reason = String(cString: strerror(errno))
      // Nothing to follow: judge the path as written, with `.` and `..` removed.
      if !roots.isEmpty {
        let lexical = Self.lexicallyNormalized(absolute)
        guard (roots.map(Self.lexicallyNormalized) + canonicalRoots).contains(where: { Self.isWithin(lexical, $0) })
        else { throw MediaPathError(path: path, reason: .outsideRoots) }
      }
      throw MediaPathError(path: path, reason: .notFound(reason))
    }
    if !roots.isEmpty && !canonicalRoots.contains(where: { Self.isWithin(canonical, $0) }) {
      throw MediaPathError(path: path, reason: .outsideRoots)
    }
    var info = stat()
    guard stat(canonical, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
      throw MediaPathError(path: path, reason: .notAFile)
    }
    return canonical
  }

  /// Whether a file already open (its path as the kernel names the descriptor) lies under a root:
  /// the check that holds even if a directory on the way was swapped for a link after `resolve`.
  public func contains(openedPath: String) -> Bool {
    roots.isEmpty || roots.compactMap(Self.realPath).contains { Self.isWithin(openedPath, $0) }
  }

  static func isWithin(_ path: String, _ root: String) -> Bool {
    root == "/" || path == root || path.hasPrefix(root.hasSuffix("/") ? root : root + "/")
  }

  static func realPath(_ path: String) -> String? {
    guard let resolved = realpath(path, nil) else { return nil }
    defer { free(resolved) }
    return String(cString: resolved)
  }

  /// `/a/./b/../c` → `/a/c`, without touching the file system.
  static func lexicallyNormalized(_ path: String) -> String {
    var parts: [Substring] = []
    for part in path.split(separator: "/") {
      if part == "." { continue }
      if part == ".." {
        if !parts.isEmpty { parts.removeLast() }
        continue
      }
      parts.append(part)
    }
    return "/" + parts.joined(separator: "/")
  }
}
