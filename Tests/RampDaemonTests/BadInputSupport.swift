import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// docs/BAD-INPUT.md, as the bad-input tests read it: each table follows a
/// `<!-- table: name -->` marker, and its rows are the expectations.
struct BadInputDocument {
  /// What a row expects back.
  enum Expected: Equatable, CustomStringConvertible {
    case ok
    /// No reply at all (a blank line).
    case none
    /// A failed reply with this code, naming `field` (nil: the reply names no field).
    case error(code: String, field: String?)

    var description: String {
      switch self {
      case .ok: "ok"
      case .none: "no reply"
      case .error(let code, let field): field.map { "\(code) naming \($0)" } ?? "\(code) naming no field"
      }
    }
  }

  struct NumberRow {
    let field: String
    /// The request, with `$` where the value goes.
    let template: String
    let cells: [(value: String, expected: Expected)]
  }

  struct LineRow {
    /// As written in the table: `\xHH` stands for a raw byte.
    let sends: String
    let expected: Expected
  }

  var numbers: [NumberRow] = []
  var requests: [LineRow] = []
  var paths: [LineRow] = []
  var connections: [String] = []
  var mutations: [String] = []

  static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("docs/BAD-INPUT.md").path

  /// Codes whose replies never name a field.
  static let fieldless: Set<String> = ["bad-json", "line-too-long"]

  static func load() throws -> BadInputDocument {
    let text = try String(contentsOfFile: path, encoding: .utf8)
    var document = BadInputDocument()
    let numbers = try table("numbers", in: text)
    let values = numbers.header.dropFirst(2).map(unquoted)
    for row in numbers.rows {
      guard row.count == values.count + 2 else { throw HarnessError("numbers: \(row.count) cells in \(row)") }
      let field = unquoted(row[0])
      let cells = try zip(values, row.dropFirst(2)).map { value, cell in
        (value, try expected(cell, field: field))
      }
      document.numbers.append(NumberRow(field: field, template: unquoted(row[1]), cells: cells))
    }
    for (name, keyPath) in [("requests", \BadInputDocument.requests), ("paths", \.paths)] {
      for row in try table(name, in: text).rows {
        guard row.count >= 3 else { throw HarnessError("\(name): \(row)") }
        let field = row[2] == "—" ? nil : unquoted(row[2])
        document[keyPath: keyPath].append(
          LineRow(sends: unquoted(row[0]), expected: try expected(row[1], field: field)))
      }
    }
    document.connections = try table("connections", in: text).rows.map { unquoted($0[0]) }
    document.mutations = try table("mutations", in: text).rows.map { unquoted($0[0]) }
    return document
  }

  /// A reply cell: `ok`, `none`, a code (naming `field`, or nothing for the fieldless codes and
  /// when `field` is nil), or a code and the field it names instead.
  static func expected(_ cell: String, field: String?) throws -> Expected {
    let words = cell.split(separator: " ").map { unquoted(String($0)) }
    switch words.count {
    case 1 where words[0] == "ok": return .ok
    case 1 where words[0] == "none": return .none
    case 1: return .error(code: words[0], field: fieldless.contains(words[0]) ? nil : field)
    case 2: return .error(code: words[0], field: words[1])
    default: throw HarnessError("cannot read the reply cell '\(cell)'")
    }
  }

  /// The header and the rows (as trimmed cells) of the table after `<!-- table: name -->`.
  static func table(_ name: String, in text: String) throws -> (header: [String], rows: [[String]]) {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    guard let marker = lines.firstIndex(of: "<!-- table: \(name) -->") else {
      throw HarnessError("\(path) has no table '\(name)'")
    }
    let body = lines[(marker + 1)...].prefix { $0.hasPrefix("|") }
    guard body.count >= 2 else { throw HarnessError("table '\(name)' is empty") }
    return (cells(body.first!), body.dropFirst(2).map(cells))
  }

  /// A table line's cells; `\|` is a bar inside a cell.
  static func cells(_ line: String) -> [String] {
    var cells: [String] = []
    var current = ""
    var escaped = false
    for character in line.dropFirst() {
      if escaped {
        current.append(character == "|" ? "|" : "\\\(character)")
        escaped = false
      } else if character == "\\" {
        escaped = true
      } else if character == "|" {
        cells.append(current.trimmingCharacters(in: .whitespaces))
        current = ""
      } else {
        current.append(character)
      }
    }
    return cells
  }

  static func unquoted(_ cell: String) -> String {
    cell.count >= 2 && cell.hasPrefix("`") && cell.hasSuffix("`") ? String(cell.dropFirst().dropLast()) : cell
  }

  /// The bytes a row sends: `\xHH` is the byte HH, everything else UTF-8.
  static func bytes(_ text: String) -> [UInt8] {
    let utf8 = Array(text.utf8)
    var bytes: [UInt8] = []
    var index = 0
    while index < utf8.count {
      if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count, utf8[index + 1] == UInt8(ascii: "x"),
        let byte = UInt8(String(decoding: utf8[(index + 2)...(index + 3)], as: UTF8.self), radix: 16)
      {
        bytes.append(byte)
        index += 4
      } else {
        bytes.append(utf8[index])
        index += 1
      }
    }
    return bytes
  }
}

extension DaemonProcess {
  var pid: Int32 { process.processIdentifier }

  /// The daemon's resident memory, in bytes (`VmRSS`).
  func residentBytes() throws -> Int {
    let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
      let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
    else { throw HarnessError("no VmRSS for \(pid)") }
    return kilobytes * 1024
  }

  /// How many descriptors the daemon has open.
  func openDescriptors() throws -> Int {
    try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
  }
}

/// A bare connection, for clients that misbehave: no greeting check, raw bytes, its own reading.
/// Unchecked: one thread may send while another reads (sending touches no state).
final class RawConnection: @unchecked Sendable {
  let descriptor: CInt
  private var pending: [UInt8] = []

  init(path: String) throws {
    descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
    let connected = UnixAddress(path)?.connect(descriptor) ?? -1
    guard connected == 0 else {
      let reason = String(cString: strerror(errno))
      close(descriptor)
      throw HarnessError("connect \(path): \(reason)")
    }
    setTimeout(seconds: 10)
  }

  deinit { close(descriptor) }

  func setTimeout(seconds: Int) {
    var timeout = timeval(tv_sec: seconds, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
  }

  var nonBlocking: Bool {
    get { fcntl(descriptor, F_GETFL) & O_NONBLOCK != 0 }
    set {
      let flags = fcntl(descriptor, F_GETFL)
      _ = fcntl(descriptor, F_SETFL, newValue ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
    }
  }

  /// Sends what the socket takes at once; returns how many bytes (0 when it would block).
  func sendSome(_ bytes: ArraySlice<UInt8>) throws -> Int {
    let result = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    if result < 0 {
      if errno == EAGAIN || errno == EWOULDBLOCK { return 0 }
      throw HarnessError("send: \(String(cString: strerror(errno)))")
    }
    return result
  }

  /// Sends everything, blocking; false when the daemon closed the connection first.
  @discardableResult
  func sendAll(_ bytes: [UInt8]) -> Bool {
    var sent = 0
    while sent < bytes.count {
      let result = bytes[sent...].withUnsafeBytes {
        Glibc.send(descriptor, $0.baseAddress, min($0.count, 1 << 20), Int32(MSG_NOSIGNAL))
      }
      guard result > 0 else { return false }
      sent += result
    }
    return true
  }

  func shutdownWriting() { shutdown(descriptor, Int32(SHUT_WR)) }
  /// The daemon's next write to this connection then fails (EPIPE).
  func shutdownReading() { shutdown(descriptor, Int32(SHUT_RD)) }

  /// The next line, or nil at the end of the stream.
  func readLine() throws -> JSONValue? {
    guard let bytes = try readLineBytes() else { return nil }
    return try JSON.parse(utf8: bytes)
  }

  func readLineBytes() throws -> [UInt8]? {
    switch try receiveLine(from: descriptor, pending: &pending) {
    case .line(let bytes): return bytes
    case .closed: return nil
    case .failed: throw HarnessError("recv: \(String(cString: strerror(errno)))")
    }
  }

  /// Reads until the daemon closes the connection; true when it did (false: it stayed open
  /// past the timeout).
  func readsToEnd() -> Bool { readsUntilClosed(descriptor) }
}

/// Raises this process's descriptor limit to at least `count` (its hard limit permitting).
func ensureDescriptorLimit(_ count: Int) throws {
  var limit = rlimit()
  getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
  guard limit.rlim_cur < rlim_t(count) else { return }
  limit.rlim_cur = min(rlim_t(count), limit.rlim_max)
  guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur >= rlim_t(count) else {
    throw HarnessError("cannot raise RLIMIT_NOFILE to \(count) (hard limit \(limit.rlim_max))")
  }
}
