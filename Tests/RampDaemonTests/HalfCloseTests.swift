import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Clients that send everything, shut their side and then read, as shell tools do (`socat`,
/// `nc -N`, a script's `shutdown(SHUT_WR)`): every request read gets its reply, in order, and
/// then rampd closes the connection. The real `socat` (script/setup installs it) and a raw socket.
@Suite struct HalfCloseTests {
  /// `printf … | socat [-t seconds] - UNIX-CONNECT:socket`: every line socat printed, and how long
  /// it ran. socat leaves once rampd closes, or `timeout` seconds after its input ended (0.5 s by
  /// default).
  func socat(_ daemon: DaemonProcess, _ input: String, timeout: Double? = nil) throws -> (
    lines: [JSONValue], seconds: Double
  ) {
    let start = Date()
    let outcome = try runProcess(
      "/usr/bin/socat", (timeout.map { ["-t", "\($0)"] } ?? []) + ["-", "UNIX-CONNECT:\(daemon.socket)"],
      stdin: input)
    let seconds = Date().timeIntervalSince(start)
    guard outcome.status == 0 else { throw HarnessError("socat: \(outcome)") }
    let lines = try outcome.stdout.split(separator: "\n").map { try JSON.parse(String($0)) }
    return (lines, seconds)
  }

  /// The lines of `count` requests with ids 1…count: reads, and instant `set`s (answered early)
  /// unless `sets` is false.
  func requests(_ count: Int, sets: Bool = true) -> String {
    let kinds =
      [#""cmd":"ping""#, #""cmd":"get","key":"master.gain""#, #""cmd":"status""#]
      + (sets ? [#""cmd":"set","key":"master.gain","value":0.5,"duration":0"#] : [])
    return (1...count).map { #"{"id":\#($0),\#(kinds[$0 % kinds.count])}"# + "\n" }.joined()
  }

  func expectReplies(_ lines: some Collection<JSONValue>, ids: ClosedRange<Int>, _ what: String) {
    #expect(lines.count == ids.count, "\(what): \(lines.count) replies to \(ids.count) requests")
    for (line, id) in zip(lines, ids) where !(line.isOK && line["id"] == .integer(id)) {
      Issue.record("\(what): reply \(id) is \(line.serialized())")
      return
    }
  }

  @Test func socatGetsTheReplyToOneRequest() throws {
    let daemon = try DaemonProcess()
    // As the issue ran it: socat's default 0.5 s for the replies once its input ended.
    for request in [
      #"{"id":1,"cmd":"ping"}"#, #"{"id":1,"cmd":"status"}"#, #"{"id":1,"cmd":"get","key":"master.gain"}"#,
    ] {
      let (lines, _) = try socat(daemon, request + "\n")
      #expect(lines.first?["hello"] == "rampd", "\(request): \(lines)")
      expectReplies(lines.dropFirst(), ids: 1...1, request)
    }
  }

  @Test func socatGetsEveryReplyOfPipelinedRequestsInOrder() throws {
    let daemon = try DaemonProcess()
    let (two, _) = try socat(daemon, requests(2))
    expectReplies(two.dropFirst(), ids: 1...2, "two requests in one go")
    let (many, seconds) = try socat(daemon, requests(500), timeout: 30)
    expectReplies(many.dropFirst(), ids: 1...500, "500 pipelined requests")
    #expect(seconds < 10, "socat ran \(seconds) s: rampd did not close once it had answered")
  }

  @Test func socatGetsTheReplyToALastLineWithoutNewline() throws {
    let daemon = try DaemonProcess()
    let (lines, _) = try socat(daemon, #"{"id":1,"cmd":"ping"}"# + "\n" + #"{"id":2,"cmd":"get","key":"master.gain"}"#)
    expectReplies(lines.dropFirst(), ids: 1...2, "a last line without newline")
  }

  /// A fade then a `wait` for it: the wait's reply comes when the fade ends, then rampd closes;
  /// the fade is heard in the recorded samples.
  @Test func socatWaitIsAnsweredWhenTheFadeEndsThenTheConnectionCloses() throws {
    let daemon = try DaemonProcess(limiter: "off")
    let file = try daemon.constantFile("one", seconds: 10)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "one"]).isOK)
    usleep(200_000)
    let input =
      #"{"id":1,"cmd":"fade","key":"master.gain","to":0.25,"duration":1,"curve":"linear"}"# + "\n"
      + #"{"id":2,"cmd":"wait","key":"master.gain"}"# + "\n"
    let (lines, seconds) = try socat(daemon, input, timeout: 30)
    expectReplies(lines.dropFirst(), ids: 1...2, "fade and wait")
    let awaited = lines.last?.result["animations"]?.arrayValue ?? []
    #expect(awaited.count == 1 && awaited.first?["finished"] == .bool(true), "\(lines.last?.serialized() ?? "")")
    #expect(seconds >= 0.9 && seconds < 5, "socat ran \(seconds) s for a 1 s fade")
    var left = try daemon.played(channel: 0)
    // After the stream's declick ramp up to 1, the first sample below 1 starts the fade.
    let steady = try #require(left.firstIndex(where: { $0 >= 0.9999 }), "the stream was not heard")
    let start = try #require(left[steady...].firstIndex(where: { $0 < 0.9999 }), "the fade was not heard")
    // The recording lags what is heard by the device's buffer: wait for 100 ms past the fade's end.
    let end = start + 48_000
    let deadline = Date().addingTimeInterval(5)
    while left.count < end + 4_800 && Date() < deadline {
      usleep(20_000)
      left = try daemon.played(channel: 0)
    }
    try #require(left.count >= end + 4_800, "100 ms after the fade were not recorded")
    // 1 s at 48 kHz from 1 to 0.25, linear: halfway is 0.625.
    let halfway = left[start + 24_000]
    #expect(abs(halfway - 0.625) < 0.02, "halfway through the fade: \(halfway)")
    #expect(left[(end + 48)..<(end + 4_800)].allSatisfy { abs($0 - 0.25) < 1e-6 }, "the fade ends at 0.25")
  }

  @Test func aRawSocketThatHalfClosesGetsEveryReplyThenTheEnd() throws {
    let daemon = try DaemonProcess()
    // One request.
    let one = try RawConnection(path: daemon.socket)
    _ = try one.readLineBytes()
    one.sendAll(Array(#"{"id":1,"cmd":"status"}"#.utf8) + [10])
    one.shutdownWriting()
    expectReplies([try one.readLine()].compactMap { $0 }, ids: 1...1, "one request")
    #expect(one.readsToEnd(), "closed after the reply")

    // 500 pipelined, sent before reading anything.
    let many = try RawConnection(path: daemon.socket)
    _ = try many.readLineBytes()
    many.sendAll(Array(requests(500).utf8))
    many.shutdownWriting()
    var replies: [JSONValue] = []
    while let line = try many.readLine() { replies.append(line) }
    expectReplies(replies, ids: 1...500, "500 pipelined requests")

    // A long request: answered when the fade ends, then the end of the stream at once.
    let long = try RawConnection(path: daemon.socket)
    _ = try long.readLineBytes()
    long.sendAll(
      Array(#"{"id":1,"cmd":"fade","key":"master.gain","to":0.5,"duration":0.5}"#.utf8) + [10]
        + Array(#"{"id":2,"cmd":"wait","key":"master.gain"}"#.utf8) + [10])
    long.shutdownWriting()
    let sent = Date()
    let fade = try long.readLine()
    let wait = try long.readLine()
    let answered = Date()
    expectReplies([fade, wait].compactMap { $0 }, ids: 1...2, "fade and wait")
    #expect(answered.timeIntervalSince(sent) >= 0.45, "the wait replied before its fade ended")
    #expect(long.readsToEnd(), "closed after the wait's reply")
    #expect(Date().timeIntervalSince(answered) < 1, "closed once the last reply was out")

    // A last line without newline (the bad-input matrix checks its effect too).
    let last = try RawConnection(path: daemon.socket)
    _ = try last.readLineBytes()
    last.sendAll(Array(#"{"id":1,"cmd":"ping"}"#.utf8))
    last.shutdownWriting()
    expectReplies([try last.readLine()].compactMap { $0 }, ids: 1...1, "a last line without newline")
    #expect(last.readsToEnd())

    // Nothing sent at all.
    let silent = try RawConnection(path: daemon.socket)
    _ = try silent.readLineBytes()
    silent.shutdownWriting()
    #expect(silent.readsToEnd(), "a client that sent nothing and shut its side is closed")
  }

  /// A client that closes both directions with replies due: what it sent takes effect, its
  /// connection goes (the count in `status` and the daemon's descriptors come back), and the
  /// daemon carries on.
  @Test func aClientThatClosesBothWaysLeavesNothingBehind() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    // The state file's journal of levels opens at the first change of master.gain: before counting.
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.9, "duration": 0]).isOK)
    let clientsBefore = try client.request(["cmd": "status"]).result["clients"]?.int
    let descriptorsBefore = try daemon.openDescriptors()
    for _ in 0..<20 {
      let gone = try RawConnection(path: daemon.socket)
      _ = try gone.readLineBytes()
      gone.sendAll(
        Array(requests(50, sets: false).utf8)
          + Array(#"{"id":"f","cmd":"fade","key":"master.gain","to":0.4,"duration":0.3}"#.utf8) + [10]
          + Array(#"{"id":"w","cmd":"wait","key":"master.gain"}"#.utf8) + [10])
      // The socket closes both ways with the replies unread.
    }
    let deadline = Date().addingTimeInterval(5)
    var clients = try client.request(["cmd": "status"]).result["clients"]?.int
    var descriptors = try daemon.openDescriptors()
    while (clients != clientsBefore || descriptors > descriptorsBefore) && Date() < deadline {
      usleep(20_000)
      clients = try client.request(["cmd": "status"]).result["clients"]?.int
      descriptors = try daemon.openDescriptors()
    }
    #expect(clients == clientsBefore, "status counts \(clients ?? -1) connections, \(clientsBefore ?? -1) before")
    #expect(descriptors <= descriptorsBefore, "\(descriptors) descriptors open, \(descriptorsBefore) before")
    // The fades were read and applied although their senders had gone.
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == .number(0.4))
    #expect(daemon.process.isRunning)
  }
}
