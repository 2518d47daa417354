import Foundation
import RampProtocol

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// A fenced code block of a Markdown document, with the example markers written before it.
///
/// A marker is an HTML comment on its own line right above the fence (blank lines between are
/// allowed), invisible when the document is rendered:
///
///     <!-- example: skip (needs root and systemd) -->   not run; the reason is required
///     <!-- example: daemon -->                          a long-running daemon: started in the background
///     <!-- example: until-interrupted -->               runs until Ctrl-C, which must end it with 0
///     <!-- example: given {"cmd":"play",...} -->        a request sent (and accepted) before the block
///     <!-- example: installed -->                       run after `script/install`; PREFIX names its prefix
struct DocBlock {
  var language: String
  var text: String
  /// The line of the opening fence (1-based).
  var line: Int
  var markers: [String]

  var skipReason: String? {
    markers.first { $0.hasPrefix("skip") }.map { String($0.dropFirst(4)).trimmingCharacters(in: .whitespaces) }
  }
  var givens: [String] {
    markers.filter { $0.hasPrefix("given ") }.map { String($0.dropFirst(6)).trimmingCharacters(in: .whitespaces) }
  }
  func has(_ marker: String) -> Bool { markers.contains(marker) }

  static let knownMarkers = ["skip", "daemon", "until-interrupted", "given", "installed"]

  /// Markers this harness does not understand (a typo must not silently skip a check).
  var unknownMarkers: [String] {
    markers.filter { marker in !Self.knownMarkers.contains { marker == $0 || marker.hasPrefix($0 + " ") } }
  }
}

enum Markdown {
  /// The repository's root, found from this file's path.
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

  static func read(_ name: String) throws -> String {
    try String(contentsOfFile: "\(root)/\(name)", encoding: .utf8)
  }

  /// Every fenced block, in order. Fences may be indented (inside a list item); the block's lines
  /// lose that indentation.
  static func blocks(_ document: String) -> [DocBlock] {
    var blocks: [DocBlock] = []
    var markers: [String] = []
    var open: (language: String, indent: Int, line: Int, lines: [String])?
    for (index, raw) in document.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
      let line = String(raw)
      let trimmed = line.trimmingCharacters(in: .whitespaces)
      if var block = open {
        if trimmed == "```" {
          blocks.append(
            DocBlock(
              language: block.language, text: block.lines.joined(separator: "\n") + "\n", line: block.line,
              markers: markers))
          markers = []
          open = nil
        } else {
          block.lines.append(String(line.dropFirst(min(block.indent, line.prefix { $0 == " " }.count))))
          open = block
        }
        continue
      }
      if trimmed.hasPrefix("```") {
        open = (String(trimmed.dropFirst(3)), line.prefix { $0 == " " }.count, index + 1, [])
      } else if trimmed.hasPrefix("<!-- example:"), trimmed.hasSuffix("-->") {
        markers.append(
          String(trimmed.dropFirst("<!-- example:".count).dropLast(3)).trimmingCharacters(in: .whitespaces))
      } else if !trimmed.isEmpty {
        markers = []
      }
    }
    return blocks
  }
}

/// Whether `actual` has the shape of `expected`, a reply written in a document: the same members
/// (recursively), values of the same JSON types, and the same `ok` and error (code, field and
/// message). Other values (samples, times, ids) may differ. Arrays are compared element by
/// element as far as both go; one documented with elements may not be empty. Returns what
/// differs, or nil.
func shapeMismatch(expected: JSONValue, actual: JSONValue, path: String = "") -> String? {
  let exact: Set<String> = ["ok", "error.code", "error.field", "error.message"]
  if exact.contains(path), expected != actual {
    return "\(path): expected \(expected.serialized()), got \(actual.serialized())"
  }
  switch (expected, actual) {
  case (.object(let want), .object(let got)):
    let missing = want.keys.filter { got[$0] == nil }
    let extra = got.keys.filter { want[$0] == nil }
    if !missing.isEmpty || !extra.isEmpty {
      return "\(path.isEmpty ? "reply" : path): members missing \(missing), not documented \(extra)"
    }
    for key in want.keys {
      if let mismatch = shapeMismatch(
        expected: want[key]!, actual: got[key]!, path: path.isEmpty ? key : "\(path).\(key)")
      {
        return mismatch
      }
    }
    return nil
  case (.array(let want), .array(let got)):
    if !want.isEmpty && got.isEmpty { return "\(path): documented \(expected.serialized()), got []" }
    for (index, (one, other)) in zip(want, got).enumerated() {
      if let mismatch = shapeMismatch(expected: one, actual: other, path: "\(path)[\(index)]") { return mismatch }
    }
    return nil
  case (.null, .null), (.bool, .bool), (.number, .number), (.string, .string): return nil
  default: return "\(path): expected a value like \(expected.serialized()), got \(actual.serialized())"
  }
}

/// A shell (or other) process run the way a user runs a pasted block: in its own process group,
/// so that Ctrl-C (SIGINT to the group) and a timeout reach every process it started.
final class BlockProcess {
  let process = Process()
  private let output = Pipe()
  private let sink = LogSink()
  private let errorSink = LogSink()
  private let errors = Pipe()

  init(_ arguments: [String], stdin: String? = nil, environment: [String: String], directory: String) throws {
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    process.environment = environment
    process.currentDirectoryURL = URL(fileURLWithPath: directory)
    process.standardOutput = output
    process.standardError = errors
    let input = Pipe()
    if stdin == nil { process.standardInput = FileHandle.nullDevice } else { process.standardInput = input }
    for (pipe, sink) in [(output, sink), (errors, errorSink)] {
      pipe.fileHandleForReading.readabilityHandler = { handle in
        let data = handle.availableData
        if data.isEmpty { handle.readabilityHandler = nil }
        sink.append(data)
      }
    }
    // A child inherits its parent thread's signal mask, and the test's threads block signals: the
    // block starts as from a shell, with none blocked, so that Ctrl-C reaches its handlers.
    var none = sigset_t()
    var previous = sigset_t()
    sigemptyset(&none)
    pthread_sigmask(SIG_SETMASK, &none, &previous)
    defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
    try process.run()
    // Foundation starts a child as the leader of a process group of its own, as a shell starts a job.
    guard getpgid(process.processIdentifier) == process.processIdentifier else {
      process.terminate()
      throw HarnessError("\(arguments[0]) is not the leader of its own process group")
    }
    if let stdin {
      input.fileHandleForWriting.write(Data(stdin.utf8))
      try input.fileHandleForWriting.close()
    }
  }

  var text: String { "stdout:\n\(sink.text)\nstderr:\n\(errorSink.text)" }

  /// Sends `signal` to the process group.
  func signal(_ signal: Int32) { kill(-process.processIdentifier, signal) }

  /// Waits for the end; after `timeout` seconds the group is killed and nil returned.
  func wait(timeout: Double) -> Int32? {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(20_000) }
    if process.isRunning {
      signal(SIGKILL)
      process.waitUntilExit()
      return nil
    }
    // Let the readers take the last of the output.
    usleep(50_000)
    return process.terminationStatus
  }
}

/// Who pastes a document's examples into a shell.
enum DocReader: String, CaseIterable, Sendable, CustomStringConvertible {
  /// root, as after `sudo -i`: no `XDG_RUNTIME_DIR`, no `RAMPD_SOCKET`, so rampd and rampctl meet
  /// on the system socket, /run/rampd/rampd.sock, and rampd keeps its state in /var/lib/rampd.
  case root
  /// An ordinary user (`DocSandbox.userName`), with the `XDG_RUNTIME_DIR` a login gives
  /// (/run/user/UID, theirs, mode 0700).
  case user

  var description: String { rawValue }
}

/// Where a reader runs the examples: as that reader, with the machine's default paths, in a
/// private mount namespace where /run and /var/lib are overlays whose changes stay in a tmpfs of
/// the namespace's own, /run/rampd and /var/lib/rampd start empty, and a user has
/// /run/user/UID as logind makes it. rampd's defaults (/run/rampd, /var/lib/rampd, the user's
/// runtime directory) are then this run's own: nothing reaches the machine, and another run at the
/// same time does not meet this one's daemon. Needs root (the user, the namespace, the mounts).
final class DocSandbox {
  /// The ordinary user, created with useradd when missing.
  static let userName = "rampd-docs"

  let reader: DocReader
  let uid: uid_t
  let gid: gid_t
  /// A process that holds the namespace while the examples run: it ends when its input closes.
  private let holder = Process()
  private let keepAlive = Pipe()

  /// `scratch`, an empty directory, holds the overlays' changes (a tmpfs mounted there, seen only
  /// in the namespace).
  init(_ reader: DocReader, scratch: String) throws {
    self.reader = reader
    (uid, gid) = reader == .root ? (0, 0) : try Self.ordinaryUser()
    var setup = """
      set -e
      mount -t tmpfs -o mode=0700 rampd-docs "$0"
      for d in run var/lib; do
        mkdir -p "$0/$d/upper" "$0/$d/work"
        mount -t overlay -o "lowerdir=/$d,upperdir=$0/$d/upper,workdir=$0/$d/work" rampd-docs "/$d"
      done
      for d in /run/rampd /var/lib/rampd; do
        if [ -d "$d" ]; then mount -t tmpfs -o mode=0755 rampd-docs "$d"; fi
      done

      """
    if reader == .user {
      setup += """
        mkdir -p /run/user/\(uid)
        mount -t tmpfs -o mode=0700,uid=\(uid),gid=\(gid) rampd-docs /run/user/\(uid)

        """
    }
    setup += "echo ready\nexec cat >/dev/null\n"
    holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    holder.arguments = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", setup, scratch]
    let output = Pipe()
    let errors = Pipe()
    holder.standardInput = keepAlive
    holder.standardOutput = output
    holder.standardError = errors
    try holder.run()
    let said = String(decoding: output.fileHandleForReading.readData(ofLength: 6), as: UTF8.self)
    guard said == "ready\n" else {
      close()
      let why = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      throw HarnessError("the namespace for the examples could not be set up: \(why)")
    }
  }

  deinit { close() }

  /// The user's runtime directory, as a login sets `XDG_RUNTIME_DIR` (nil for root).
  var runtimeDirectory: String? { reader == .root ? nil : "/run/user/\(uid)" }

  /// `arguments` run in the namespace, as the reader, in `directory`.
  func command(_ arguments: [String], directory: String) -> [String] {
    let enter = ["nsenter", "--target", "\(holder.processIdentifier)", "--mount", "--wd=\(directory)", "--"]
    let become =
      reader == .root ? [] : ["setpriv", "--reuid=\(uid)", "--regid=\(gid)", "--init-groups", "--"]
    return enter + become + arguments
  }

  /// `path` in the namespace, as the test (outside it) reaches it.
  func outside(_ path: String) -> String { "/proc/\(holder.processIdentifier)/root\(path)" }

  /// Gives `path` to the reader.
  func own(_ path: String) throws {
    guard chown(path, uid, gid) == 0 else {
      throw HarnessError("chown \(path): \(String(cString: strerror(errno)))")
    }
  }

  /// Ends the holder; the namespace goes with the last process in it.
  func close() {
    try? keepAlive.fileHandleForWriting.close()
    if holder.isRunning { holder.waitUntilExit() }
  }

  private static func ordinaryUser() throws -> (uid_t, gid_t) {
    if let entry = getpwnam(userName) { return (entry.pointee.pw_uid, entry.pointee.pw_gid) }
    let made = try runProcess(
      "/usr/bin/env",
      ["useradd", "--no-create-home", "--shell", "/bin/sh", "--comment", "rampd's documented examples", userName])
    // Another test run may have created it in the meantime.
    guard let entry = getpwnam(userName) else { throw HarnessError("useradd \(userName): \(made)") }
    return (entry.pointee.pw_uid, entry.pointee.pw_gid)
  }
}
