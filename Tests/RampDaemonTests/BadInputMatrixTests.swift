import Foundation
import RampAudio
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// docs/BAD-INPUT.md, row by row, against one real `rampd` while a constant stream plays: each
/// row gets its documented reply, the daemon answers `ping` after it, nothing underruns, the
/// constant stream's samples never change, and memory and descriptors stay bounded.
@Suite(.serialized) struct BadInputMatrixTests {
  @Test func everyRowOfTheDocumentGetsItsDocumentedReply() throws {
    let document = try BadInputDocument.load()
    #expect(document.numbers.count >= 50 && document.requests.count >= 100, "the tables were read")
    let run = try BadInputRun()
    for row in document.numbers {
      for (value, expected) in row.cells {
        let line = row.template.replacingOccurrences(of: "$", with: value)
        try run.check(Array(line.utf8), expected, row: "\(row.field) = \(value): \(line)")
      }
    }
    for row in document.requests {
      try run.check(BadInputDocument.bytes(row.sends), row.expected, row: row.sends)
    }
    for row in document.paths {
      let line = row.sends.replacingOccurrences(of: "$ROOT", with: run.root)
      let path = try JSON.parse(line)["path"]?.stringValue
      try run.check(Array(line.utf8), row.expected, row: line, names: path)
    }

    let scenarios = run.scenarios
    #expect(Set(document.connections) == Set(scenarios.keys), "the doc's scenarios and the test's differ")
    for name in document.connections {
      guard let scenario = scenarios[name] else { continue }
      try scenario()
      try run.checkAlive(after: name)
      try run.checkMemory(after: name)
    }
    try run.finish()
  }
}

/// One daemon and the state of a run through the tables.
final class BadInputRun {
  let daemon: DaemonProcess
  let client: LineClient
  let root: String
  let outside: String
  /// The stream whose samples must stay at `level`.
  static let level: Float = 0.25
  private var rowCount = 0
  private var victims = 0
  private var underrunEvents: [JSONValue] = []
  private(set) var baselineResident = 0
  /// Growth of resident memory tolerated over the whole run.
  static let memoryBound = 16 << 20

  init() throws {
    try ensureDescriptorLimit(4096)
    // The media roots must exist when rampd reads its configuration: made first, in the
    // directory the daemon then uses.
    let directory = NSTemporaryDirectory() + "rampd-badinput-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    root = "\(directory)/media"
    outside = "\(directory)/outside"
    try Self.makeFixtures(root: root, outside: outside)
    daemon = try DaemonProcess(
      extraConfiguration: """
        [limits]
        streams = 256
        [media]
        roots = ["\(root)", "/dev"]
        """, periodMs: 10, bufferMs: 100, reusing: directory)
    client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["underrun"]])
    let bg = try client.request(["cmd": "play", "path": "level.wav", "stream": "bg", "loop": true])
    let t = try client.request(["cmd": "play", "path": "silence.wav", "stream": "t", "loop": true])
    guard bg.isOK, t.isOK else { throw HarnessError("cannot start bg and t: \(bg.serialized()) \(t.serialized())") }
    usleep(200_000)
    baselineResident = try daemon.residentBytes()
  }

  deinit { try? FileManager.default.removeItem(atPath: daemon.directory) }

  static func makeFixtures(root: String, outside: String) throws {
    let files = FileManager.default
    try files.createDirectory(atPath: "\(root)/dir", withIntermediateDirectories: true)
    try files.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try writeConstant("\(root)/silence.wav", level: 0)
    try writeConstant("\(root)/level.wav", level: level)
    try writeConstant("\(outside)/o.wav", level: 0)
    guard mkfifo("\(root)/fifo", 0o644) == 0 else { throw HarnessError("mkfifo failed") }
    for (link, target) in [
      ("link-out.wav", "../outside/o.wav"), ("linkdir", "../outside"), ("link-zero", "/dev/zero"),
      ("loop1", "loop2"), ("loop2", "loop1"), ("dangling", "nothing-here.wav"),
    ] {
      try files.createSymbolicLink(atPath: "\(root)/\(link)", withDestinationPath: target)
    }
    // Damaged on purpose: NaN and infinite samples; sample rates no audio has.
    var nan = [Float](repeating: 0.5, count: 96_000)
    for i in stride(from: 0, to: nan.count, by: 50) {
      nan[i] = .nan
      nan[i + 25] = i % 100 == 0 ? .infinity : -.infinity
    }
    _ = files.createFile(
      atPath: "\(root)/nan.wav",
      contents: wav(format: 3, channels: 2, rate: 48_000, bits: 32, data: nan.withUnsafeBytes { Data($0) }))
    for (name, rate) in [("rate-1hz.wav", 1), ("rate-max.wav", 0x7FFF_FFFF)] {
      _ = files.createFile(
        atPath: "\(root)/\(name)",
        contents: wav(format: 1, channels: 2, rate: rate, bits: 16, data: Data(count: 38_400)))
    }
    _ = files.createFile(atPath: "\(root)/empty.wav", contents: Data())
    _ = files.createFile(atPath: "\(root)/notes.txt", contents: Data("not audio\n".utf8))
  }

  /// A WAV file as written here, header fields and all (little-endian).
  static func wav(format: Int, channels: Int, rate: Int, bits: Int, data: Data) -> Data {
    func le(_ value: Int, _ width: Int) -> [UInt8] { (0..<width).map { UInt8((value >> (8 * $0)) & 0xFF) } }
    let align = channels * bits / 8
    let fmt =
      le(format, 2) + le(channels, 2) + le(rate, 4) + le(rate &* align & 0xFFFF_FFFF, 4) + le(align, 2) + le(bits, 2)
    let body = Array("WAVEfmt ".utf8) + le(fmt.count, 4) + fmt + Array("data".utf8) + le(data.count, 4)
    return Data(Array("RIFF".utf8) + le(body.count + data.count, 4) + body) + data
  }

  /// One second of stereo float at `level`.
  static func writeConstant(_ path: String, level: Float) throws {
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    let samples = [Float](repeating: level, count: 96_000)
    try samples.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: 48_000) }
    try writer.close()
  }

  // MARK: Rows

  /// Sends one row, then a `ping`, on the main connection; checks the row's reply against the
  /// table, that the `ping` is answered, and `status` after it.
  func check(_ line: [UInt8], _ expected: BadInputDocument.Expected, row: String, names path: String? = nil) throws {
    rowCount += 1
    var line = line
    if let range = line.firstRange(of: Array("{u}".utf8)) {
      victims += 1
      let victim = "u\(victims)"
      let started = try client.request(["cmd": "play", "path": "silence.wav", "stream": .string(victim), "loop": true])
      guard started.isOK else { throw HarnessError("cannot start \(victim): \(started.serialized())") }
      line.replaceSubrange(range, with: Array(victim.utf8))
    }
    let ping = "after-\(rowCount)"
    try client.send(bytes: line + [10] + Array(#"{"id":"\#(ping)","cmd":"ping"}"#.utf8) + [10])
    var replies: [JSONValue] = []
    var pinged = false
    // A row scheduled with `at` may be answered after the ping.
    while !pinged || (replies.isEmpty && expected != .none) {
      let next = try client.readLine()
      if next["event"] != nil {
        if next["event"] == "underrun" { underrunEvents.append(next) }
        continue
      }
      if next["id"] == .string(ping) {
        #expect(next.isOK, "ping after \(row)")
        pinged = true
      } else {
        replies.append(next)
      }
    }
    verify(replies, expected, row: row, names: path)
    try checkStatus(after: row)
  }

  private func verify(_ replies: [JSONValue], _ expected: BadInputDocument.Expected, row: String, names path: String?) {
    let shown = replies.map { $0.serialized() }.joined(separator: " ")
    switch expected {
    case .none:
      #expect(replies.isEmpty, "\(row): expected no reply, got \(shown)")
    case .ok:
      #expect(replies.count == 1 && replies[0].isOK, "\(row): expected ok, got \(shown)")
    case .error(let code, let field):
      guard replies.count == 1, let reply = replies.first else {
        Issue.record("\(row): expected one reply, got \(shown)")
        return
      }
      let message = reply["error"]?["message"]?.stringValue ?? ""
      #expect(
        reply["ok"] == false && reply.errorCode == code && reply.errorField == field,
        "\(row): expected \(expected), got \(shown)")
      #expect(!message.isEmpty, "\(row): no message")
      if let field,
        ["missing-field", "unknown-field", "unknown-command", "invalid-field", "bad-request"].contains(code)
      {
        #expect(message.hasPrefix("\(field): "), "\(row): the message does not start with \(field): \(message)")
      }
      if code == "bad-json" || (code == "bad-request" && field == nil) {
        #expect(reply["id"] == nil, "\(row): a line that was not read as a request cannot echo an id")
      }
      if let path, ["file-error", "forbidden-path"].contains(code) {
        #expect(message.contains(path), "\(row): the message does not name '\(path)': \(message)")
      }
    }
  }

  /// Zero underruns; `bg` and `t` still play; streams a row started are stopped.
  private func checkStatus(after row: String) throws {
    let status = try client.request(["cmd": "status"])
    // Not `status.output.underruns`: under clock pacing it counts the render thread's late wake-ups,
    // which a loaded test machine causes whatever the row; the stream's own underruns and the
    // recorded samples are what a row could disturb.
    #expect(underrunEvents.isEmpty, "underrun events after \(row): \(underrunEvents.map { $0.serialized() })")
    underrunEvents = []
    let streams = status.result["streams"]?.arrayValue ?? []
    let ids = streams.compactMap { $0["stream"]?.stringValue }
    #expect(ids.contains("bg") && ids.contains("t"), "bg or t is gone after \(row): \(ids)")
    for stream in streams {
      guard let id = stream["stream"]?.stringValue, id != "bg", id != "t", stream["stopping"] == .bool(false) else {
        continue
      }
      try client.request(["cmd": "stop", "stream": .string(id)])
    }
  }

  func checkAlive(after scenario: String) throws {
    #expect(daemon.process.isRunning, "rampd died during \(scenario): \(daemon.readLog())")
    let pong = try client.request(["cmd": "ping"])
    #expect(pong.isOK, "ping after \(scenario)")
    try checkStatus(after: scenario)
  }

  func checkMemory(after scenario: String) throws {
    let resident = try daemon.residentBytes()
    #expect(
      resident - baselineResident < Self.memoryBound,
      "after \(scenario) rampd holds \(resident >> 20) MiB, \((resident - baselineResident) >> 20) MiB above its start")
  }

  /// The constant stream's samples, from its start (after the declick ramp) to now.
  func finish() throws {
    try checkMemory(after: "every row")
    // A quick run (few rows, an idle machine) may end before a second has played: the check below
    // wants one, so let it play that long.
    var played = try daemon.played()
    let deadline = Date().addingTimeInterval(5)
    while played.count < 48_000 * 2 * 5 / 4 + 4 * 960, Date() < deadline {
      usleep(50_000)
      played = try daemon.played()
    }
    let first = try #require(played.firstIndex { $0 != 0 }, "bg never played")
    // The declick ramp (10 ms) and a margin.
    let steady = played[(first + 2 * 960)...]
    let wrong = steady.indices.filter { steady[$0] != Self.level }
    let unchanged = wrong.isEmpty
    #expect(
      unchanged,
      "\(wrong.count) of \(steady.count) samples are not \(Self.level); the first at frame \((wrong.first ?? 0) / 2): \(wrong.prefix(4).map { steady[$0] })"
    )
    #expect(steady.count > 48_000 * 2, "bg played at least a second")
    daemon.stop()
    #expect(daemon.process.terminationStatus == 0, "rampd exit status \(daemon.process.terminationStatus)")
  }

  // MARK: Scenarios

  var scenarios: [String: () throws -> Void] {
    [
      "line-at-limit": lineAtLimit, "line-over-limit": lineOverLimit,
      "10MiB-no-newline": { try self.hugeLine(newline: false) },
      "10MiB-with-newline": { try self.hugeLine(newline: true) }, "binary-garbage": binaryGarbage,
      "0xFF-line": { try self.longLine(of: 0xFF) }, "NUL-line": { try self.longLine(of: 0) },
      "byte-at-a-time": byteAtATime, "lines-across-writes": linesAcrossWrites,
      "last-line-without-newline": lastLineWithoutNewline,
      "disconnect-mid-line": disconnectMidLine, "close-with-replies-due": closeWithRepliesDue,
      "1000-idle-connections": idleConnections,
      "subscriber-never-reads": subscriberNeverReads, "client-never-reads-replies": clientNeverReadsReplies,
      "15MiB-line-under-a-raised-limit": longLineUnderRaisedLimit,
    ]
  }

  private static let lineLimit = 65_536

  private func paddedPing(id: String, length: Int) -> [UInt8] {
    let ping = Array(#"{"id":"\#(id)","cmd":"ping"}"#.utf8)
    return ping + [UInt8](repeating: UInt8(ascii: " "), count: length - ping.count)
  }

  private func lineAtLimit() throws {
    let connection = try daemon.client()
    try connection.send(bytes: paddedPing(id: "limit", length: Self.lineLimit) + [10])
    let reply = try connection.readLine()
    #expect(reply.isOK && reply["id"] == "limit", "a line of exactly the limit: \(reply.serialized())")
  }

  private func expectLineTooLong(_ connection: RawConnection, _ what: String) throws {
    _ = try connection.readLineBytes()  // the greeting
    let reply = try connection.readLine()
    #expect(reply?.errorCode == "line-too-long", "\(what): \(reply?.serialized() ?? "closed without a reply")")
    #expect(reply?["id"] == nil && reply?.errorField == nil, "\(what): \(reply?.serialized() ?? "")")
    #expect(connection.readsToEnd(), "\(what): the connection stays open")
  }

  private func lineOverLimit() throws {
    let connection = try RawConnection(path: daemon.socket)
    connection.sendAll(paddedPing(id: "over", length: Self.lineLimit + 1) + [10])
    try expectLineTooLong(connection, "a line one byte over the limit")
  }

  private func hugeLine(newline: Bool) throws {
    let connection = try RawConnection(path: daemon.socket)
    // The daemon closes as soon as the line passes the limit: the rest may not be sent.
    connection.sendAll([UInt8](repeating: UInt8(ascii: "a"), count: 10 << 20) + (newline ? [10] : []))
    try expectLineTooLong(connection, "10 MiB\(newline ? " and a newline" : " without a newline")")
  }

  /// A second daemon, whose line limit is raised to 16 MiB: a 15 MiB line is read whole, and
  /// meanwhile another client is served within seconds.
  private func longLineUnderRaisedLimit() throws {
    let raised = try DaemonProcess(
      name: "longline",
      extraConfiguration: """
        [limits]
        line-length = "16MiB"
        """)
    let sender = try RawConnection(path: raised.socket)
    let other = try RawConnection(path: raised.socket)
    _ = try sender.readLineBytes()
    _ = try other.readLineBytes()
    let line =
      Array(#"{"id":"long","cmd":"ping","pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 15 << 20)
      + Array(#""}"#.utf8) + [10]
    let start = Date()
    let sending = Thread { sender.sendAll(line) }
    sending.start()
    usleep(100_000)
    other.sendAll(Array(#"{"id":"other","cmd":"ping"}"#.utf8) + [10])
    other.setTimeout(seconds: 120)
    let pong = try other.readLine()
    let waited = Date().timeIntervalSince(start)
    #expect(pong?.isOK == true, "\(pong?.serialized() ?? "closed")")
    #expect(waited < 10, "another client waited \(waited) s while a 15 MiB line came in")
    sender.setTimeout(seconds: 120)
    let reply = try sender.readLine()
    #expect(
      reply?.errorCode == "unknown-field" && reply?.errorField == "pad" && reply?["id"] == "long",
      "the 15 MiB line: \(reply?.serialized() ?? "closed")")
    #expect(raised.process.isRunning)
  }

  private func binaryGarbage() throws {
    var generator = SplitMix(seed: 0xBAD_1DEA)
    var garbage = (0..<(64 << 10)).map { _ in UInt8.random(in: 0...255, using: &generator) }
    garbage[100] = 0
    garbage[200] = 0xFF
    garbage.append(10)
    // What the daemon should answer: one reply per line that is not blank (a CR before the
    // newline dropped).
    var expected = 0
    for var line in garbage.split(separator: 10, omittingEmptySubsequences: false).dropLast() {
      if line.last == 13 { line = line.dropLast() }
      if !line.allSatisfy({ $0 == 32 || $0 == 9 }) { expected += 1 }
    }
    let connection = try RawConnection(path: daemon.socket)
    _ = try connection.readLineBytes()
    connection.sendAll(garbage + Array(#"{"id":"garbage","cmd":"ping"}"#.utf8) + [10])
    var replies = 0
    while let line = try connection.readLine() {
      if line["id"] == "garbage" {
        #expect(line.isOK)
        break
      }
      replies += 1
      #expect(
        ["bad-json", "bad-request"].contains(line.errorCode ?? "") && line["id"] == nil,
        "garbage got \(line.serialized())")
    }
    #expect(replies == expected, "\(replies) replies to \(expected) lines of garbage")
  }

  private func longLine(of byte: UInt8) throws {
    try check(
      [UInt8](repeating: byte, count: 60_000), .error(code: "bad-json", field: nil),
      row: "60000 bytes of 0x\(String(byte, radix: 16))")
  }

  private func byteAtATime() throws {
    let connection = try RawConnection(path: daemon.socket)
    _ = try connection.readLineBytes()
    for byte in Array(#"{"id":"slow","cmd":"ping"}"#.utf8) + [10] {
      #expect(connection.sendAll([byte]))
      usleep(200)
    }
    let reply = try connection.readLine()
    #expect(reply?.isOK == true && reply?["id"] == "slow", "\(reply?.serialized() ?? "closed")")
  }

  /// Several lines in one write, a CRLF ending, a blank line, and a line split between writes.
  private func linesAcrossWrites() throws {
    let connection = try RawConnection(path: daemon.socket)
    _ = try connection.readLineBytes()
    #expect(
      connection.sendAll(Array("{\"id\":1,\"cmd\":\"ping\"}\r\n\r\n\n{\"id\":2,\"cmd\":\"ping\"}\n{\"id\":3,\"cm".utf8))
    )
    usleep(50_000)
    #expect(connection.sendAll(Array("d\":\"ping\"}\n".utf8)))
    for id in 1...3 {
      let reply = try connection.readLine()
      #expect(reply?.isOK == true && reply?["id"] == .integer(id), "reply \(id): \(reply?.serialized() ?? "closed")")
    }
  }

  private func lastLineWithoutNewline() throws {
    let connection = try RawConnection(path: daemon.socket)
    _ = try connection.readLineBytes()
    connection.sendAll(Array(#"{"cmd":"set","key":"streams.t.pan","value":0.25,"duration":0}"#.utf8))
    connection.shutdownWriting()
    let reply = try connection.readLine()
    #expect(reply?.isOK == true, "the last line, without its newline: \(reply?.serialized() ?? "closed")")
    #expect(connection.readsToEnd(), "closed once answered")
    let deadline = Date().addingTimeInterval(5)
    var pan = try client.request(["cmd": "get", "key": "streams.t.pan"]).result["model"]
    while pan != 0.25 && Date() < deadline {
      usleep(10_000)
      pan = try client.request(["cmd": "get", "key": "streams.t.pan"]).result["model"]
    }
    #expect(pan == 0.25, "the last line, without its newline, was not applied")
  }

  private func disconnectMidLine() throws {
    let connection = try RawConnection(path: daemon.socket)
    _ = try connection.readLineBytes()
    connection.sendAll(Array(#"{"cmd":"pi"#.utf8))
  }

  /// Lines answered at once (refusals) to a client that no longer reads: the first reply fails and
  /// closes the connection while the rest of the read is being handled.
  private func closeWithRepliesDue() throws {
    for _ in 0..<3 {
      let connection = try RawConnection(path: daemon.socket)
      _ = try connection.readLineBytes()
      connection.shutdownReading()
      connection.sendAll(Array(String(repeating: "x\n", count: 300).utf8) + Array(#"{"cmd":"subscribe"}"#.utf8) + [10])
      usleep(50_000)
    }
    #expect(try client.request(["cmd": "ping"]).isOK, "the daemon still answers")
  }

  private func idleConnections() throws {
    try ensureDescriptorLimit(4096)
    let before = try daemon.openDescriptors()
    let others = try client.request(["cmd": "status"]).result["clients"]?.int ?? 0
    var greeted: [RawConnection] = []
    var refused = 0
    for _ in 0..<1000 {
      let connection = try RawConnection(path: daemon.socket)
      guard let first = try connection.readLine() else {
        Issue.record("a connection was closed without a greeting or a refusal")
        continue
      }
      if first["hello"] == "rampd" {
        greeted.append(connection)
      } else {
        refused += 1
        let message = first["error"]?["message"]?.stringValue ?? ""
        #expect(
          first.errorCode == "limit-exceeded" && message.contains("limits.clients"), "refusal: \(first.serialized())")
        #expect(connection.readsToEnd(), "a refused connection is closed")
      }
    }
    #expect(greeted.count + others == 64, "\(greeted.count) greeted with \(others) already connected")
    #expect(refused == 1000 - greeted.count)
    // Served meanwhile.
    #expect(try client.request(["cmd": "ping"]).isOK)
    let open = try daemon.openDescriptors()
    #expect(open >= before + greeted.count, "\(open) descriptors open, \(before) before")
    greeted = []
    let deadline = Date().addingTimeInterval(10)
    var after = try daemon.openDescriptors()
    while after > before && Date() < deadline {
      usleep(20_000)
      after = try daemon.openDescriptors()
    }
    #expect(after <= before, "\(after) descriptors open once they closed, \(before) before")
  }

  private func subscriberNeverReads() throws {
    let deaf = try RawConnection(path: daemon.socket)
    _ = try deaf.readLineBytes()
    deaf.sendAll(Array(#"{"id":"sub","cmd":"subscribe"}"#.utf8) + [10])
    let listener = try daemon.client()
    try listener.request(["cmd": "subscribe", "events": ["animation-started"]])
    let flooder = try daemon.client()
    var ids: Set<Int> = []
    var seen: Set<Int> = []
    let count = 5000
    for chunk in stride(from: 0, to: count, by: 250) {
      var lines: [UInt8] = []
      for i in chunk..<(chunk + 250) {
        let line =
          #"{"id":\#(i),"cmd":"fade","key":"streams.t.gain","to":\#(Double(i % 10) / 10),"duration":5,"name":"flood"}"#
        lines += Array(line.utf8) + [10]
      }
      try flooder.send(bytes: lines)
      for _ in chunk..<(chunk + 250) {
        let reply = try flooder.readLine()
        #expect(reply.isOK, "fade: \(reply.serialized())")
        if let id = reply.result["animation"]?.int { ids.insert(id) }
      }
      // The listener reads as it goes (a subscriber that reads keeps every event).
      while !ids.isSubset(of: seen) {
        let event = try listener.readLine()
        if event["event"] == "animation-started", let id = event["id"]?.int { seen.insert(id) }
      }
    }
    #expect(ids.count == count, "\(ids.count) of \(count) fades answered")
    #expect(seen == ids, "the reading subscriber got \(seen.count) of \(ids.count) events")
    try checkMemory(after: "the flood of events")
    // The deaf subscriber is still connected, lost events, and answers once it reads.
    deaf.sendAll(Array(#"{"id":"deaf","cmd":"ping"}"#.utf8) + [10])
    var started = 0
    var answered = false
    deaf.setTimeout(seconds: 10)
    while let line = try deaf.readLine() {
      if line["event"] == "animation-started" { started += 1 }
      if line["id"] == "deaf" {
        answered = line.isOK
        break
      }
    }
    #expect(answered, "the subscriber that did not read is still served")
    #expect(started < count, "it got all \(started) events: nothing was dropped, so nothing was tested")
  }

  private func clientNeverReadsReplies() throws {
    let greedy = try RawConnection(path: daemon.socket)
    _ = try greedy.readLineBytes()
    greedy.nonBlocking = true
    var sent = 0
    var unsent: [UInt8] = []
    var stalledSince: Date?
    // Pipelines pings until the daemon has taken nothing for a second (or far more than it
    // should ever buffer: then the test fails below).
    while sent < 200_000 {
      if unsent.isEmpty {
        unsent = Array(#"{"id":\#(sent),"cmd":"ping"}"#.utf8) + [10]
        sent += 1
      }
      let taken = try greedy.sendSome(unsent[...])
      unsent.removeFirst(taken)
      if taken > 0 {
        stalledSince = nil
      } else if let since = stalledSince {
        if Date().timeIntervalSince(since) > 1 { break }
        usleep(5_000)
      } else {
        stalledSince = Date()
      }
    }
    #expect(sent < 200_000, "the daemon took \(sent) requests without their replies being read")
    try checkMemory(after: "\(sent) requests whose replies were not read")
    #expect(try client.request(["cmd": "ping"]).isOK, "another client is served meanwhile")
    greedy.nonBlocking = false
    var answered = Set<Int>()
    var duplicates = 0
    func readReplies(until count: Int) throws {
      while answered.count < count, let reply = try greedy.readLine() {
        guard let id = reply["id"]?.int else { continue }
        if !answered.insert(id).inserted { duplicates += 1 }
        #expect(
          reply.isOK || reply.errorCode == "limit-exceeded",
          "ping \(id) of a client that did not read: \(reply.serialized())")
      }
    }
    // The daemon reads the rest of the last line only once this client reads.
    try readReplies(until: unsent.isEmpty ? sent : sent - 1)
    #expect(greedy.sendAll(unsent))
    try readReplies(until: sent)
    #expect(
      answered.count == sent && duplicates == 0, "\(answered.count) of \(sent) pings answered, \(duplicates) twice")
  }
}
