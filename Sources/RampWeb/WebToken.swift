import FoundationEssentials
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif
// A release build (whole module) finds C's `struct stat` through SwiftNIO's CNIOLinux, whose
// header includes <sys/stat.h>: MemberImportVisibility then wants that module named.
#if canImport(CNIOLinux)
  import CNIOLinux
#endif

/// The token rampd-web uses when none is configured: made once, on its first start, from the
/// kernel's random number generator, and kept in its state directory readable by its user alone,
/// so that the page is never open to every local user.
enum WebToken {
  /// 24 bytes, 192 bits, written as 48 hexadecimal digits.
  static let byteCount = 24

  /// A refusal to start, with the text printed after `rampd-web: `.
  struct Failure: Error, CustomStringConvertible {
    let description: String
  }

  /// rampd-web's state directory, by rampd's own rule (`StateLocation`).
  static func directory(environment: [String: String], isRoot: Bool) -> String {
    StateLocation.directory(name: "rampd-web", environment: environment, isRoot: isRoot)
  }

  /// The token in `directory`/token, made there first when there is none.
  static func load(in directory: String) throws(Failure) -> (token: String, path: String, made: Bool) {
    let path = directory + "/token"
    if let token = try read(path) { return (token, path, false) }
    do {
      try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    } catch {
      throw Failure(description: "cannot create its state directory \(directory): \(failureReason(error))")
    }
    let token = fresh()
    // Written under a name of its own, then linked into place: a rampd-web starting at the same
    // moment either finds no token or a whole one, and the loser of the race takes the winner's.
    let temporary = "\(path).tmp-\(getpid())"
    let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else { throw Failure(description: "cannot write \(temporary): \(text(errno))") }
    let bytes = Array((token + "\n").utf8)
    let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    let synced = fsync(descriptor) == 0
    close(descriptor)
    defer { unlink(temporary) }
    guard written == bytes.count, synced else {
      throw Failure(description: "cannot write \(temporary): \(text(errno))")
    }
    if link(temporary, path) != 0 {
      let failure = errno
      if failure == EEXIST, let theirs = try read(path) { return (theirs, path, false) }
      throw Failure(description: "cannot create \(path): \(text(failure))")
    }
    return (token, path, true)
  }

  /// The token stored at `path`, nil when there is no file; a file that others may read, or that
  /// does not hold a token, is refused rather than trusted.
  private static func read(_ path: String) throws(Failure) -> String? {
    var status = stat()
    guard stat(path, &status) == 0 else {
      if errno == ENOENT { return nil }
      throw Failure(description: "cannot read \(path): \(text(errno))")
    }
    if status.st_mode & 0o077 != 0 {
      throw Failure(
        description: "\(path) may be read by others (mode \(String(status.st_mode & 0o777, radix: 8))): "
          + "`chmod 600 \(path)`, or remove it and a new token is made")
    }
    let contents: String
    do {
      contents = try String(contentsOfFile: path, encoding: .utf8)
    } catch {
      throw Failure(description: "cannot read \(path): \(failureReason(error))")
    }
    let token = contents.trimmingWhitespace()
    guard token.count >= WebSettings.minimumTokenLength, token.unicodeScalars.allSatisfy(WebSettings.isTokenCharacter)
    else {
      throw Failure(
        description: "\(path) does not hold a token (at least \(WebSettings.minimumTokenLength) letters, digits "
          + "or . _ ~ -): remove it and a new one is made")
    }
    return token
  }

  /// `byteCount` bytes from the system's generator: Swift's `SystemRandomNumberGenerator` is
  /// getrandom(2) on Linux (the kernel's CSPRNG, waiting only until it is seeded).
  private static func fresh() -> String {
    var generator = SystemRandomNumberGenerator()
    let bytes = (0..<byteCount).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    return bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
  }

  private static func text(_ code: Int32) -> String { String(cString: strerror(code)) }
}

extension String {
  fileprivate func leftPadded(to width: Int) -> String {
    count >= width ? self : String(repeating: "0", count: width - count) + self
  }
}
