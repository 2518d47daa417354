import RampEngine
import Testing

@testable import RampProtocol

@Suite struct ReplyTests {
  @Test func successAndFailureLines() {
    #expect(
      Reply.success(id: 7, result: ["animation": 12]).serialized() == #"{"id":7,"ok":true,"result":{"animation":12}}"#)
    #expect(Reply.success(id: nil, result: [:]).serialized() == #"{"ok":true,"result":{}}"#)
    let error = ProtocolError(.invalidField, field: "duration", #"duration: expected a number of seconds, got "2s""#)
    #expect(
      Reply.failure(id: "a", error: error).serialized()
        == #"{"id":"a","ok":false,"error":{"code":"invalid-field","field":"duration","message":"duration: expected a number of seconds, got \"2s\""}}"#
    )
    #expect(
      Reply.failure(id: nil, error: ProtocolError(.shuttingDown, "bye")).serialized()
        == #"{"ok":false,"error":{"code":"shutting-down","message":"bye"}}"#)
  }

  @Test func greeting() {
    #expect(Greeting.line(version: "0.2.0").serialized() == #"{"hello":"rampd","version":"0.2.0","protocol":1}"#)
  }

  @Test func errorCodesAreStable() {
    // Clients branch on these strings; renaming one breaks them.
    #expect(
      ErrorCode.allCases.map(\.rawValue) == [
        "bad-json", "bad-request", "line-too-long", "unknown-command", "missing-field", "invalid-field",
        "unknown-field", "out-of-range", "unknown-key-path", "unknown-stream", "unknown-animation", "stream-exists",
        "file-error", "forbidden-path", "permission-denied", "limit-exceeded", "timeout", "shutting-down",
        "internal-error", "events-lost", "unknown-duck",
      ])
    #expect(
      ProtocolError(.timeout, field: "timeout", "timeout: 5 s passed").description == "timeout: timeout: 5 s passed")
  }

  @Test func engineRefusalsKeepTheirField() {
    let unknown = EngineError(.unknownKeyPath, field: "key", "no property streams.s9.gain")
    #expect(
      ProtocolError(unknown).prefixed("commands[1]")
        == ProtocolError(.unknownKeyPath, field: "commands[1].key", "no property streams.s9.gain"))
    #expect(
      ProtocolError(EngineError(.limitExceeded, field: "key", "full")).code == .limitExceeded)
    #expect(ProtocolError(EngineError(.unknownAnimation, field: "name", "no")).code == .unknownAnimation)
    #expect(ProtocolError(EngineError(.invalidValue, field: "value", "2.0 is outside")).code == .invalidField)
    #expect(ProtocolError(EngineError(.invalidAnimation, "bad")) == ProtocolError(.invalidField, "bad"))
    #expect(
      ProtocolError(EngineError(.invalidAnimation, "bad"), field: "animation")
        == ProtocolError(.invalidField, field: "animation", "bad"))
  }

  @Test func refusalsBecomeReplies() throws {
    let (id, result) = Request.parse(line: #"{"id":4,"cmd":"fade","to":0,"durtion":1}"#)
    guard case .failure(let error) = result else { throw ProtocolError(.internalError, "accepted") }
    #expect(
      Reply.failure(id: id, error: error).serialized()
        == #"{"id":4,"ok":false,"error":{"code":"unknown-field","field":"durtion","message":"durtion: fade takes no field \"durtion\"; did you mean duration?"}}"#
    )
  }
}

@Suite struct EventTests {
  @Test(arguments: [
    (
      Event.animationFinished(
        id: 12, key: "master.gain", name: "fade", finished: true, sample: 96_000, ending: .completed, by: nil),
      #"{"event":"animation-finished","id":12,"key":"master.gain","name":"fade","finished":true,"sample":96000,"reason":"completed"}"#
    ),
    (
      .animationFinished(
        id: 12, key: "master.gain", name: "fade", finished: false, sample: 96_000, ending: .superseded, by: 13),
      #"{"event":"animation-finished","id":12,"key":"master.gain","name":"fade","finished":false,"sample":96000,"reason":"superseded","by":13}"#
    ),
    (
      .animationFinished(
        id: 12, key: "master.gain", name: "fade", finished: false, sample: 96_000, ending: .superseded, by: nil),
      #"{"event":"animation-finished","id":12,"key":"master.gain","name":"fade","finished":false,"sample":96000,"reason":"superseded"}"#
    ),
    (
      .animationFinished(
        id: 12, key: "master.gain", name: "fade", finished: false, sample: 96_000, ending: .removed, by: nil),
      #"{"event":"animation-finished","id":12,"key":"master.gain","name":"fade","finished":false,"sample":96000,"reason":"removed"}"#
    ),
    (
      .animationStarted(id: 3, key: "streams.s1.gain", name: "animation", sample: 0),
      #"{"event":"animation-started","id":3,"key":"streams.s1.gain","name":"animation","sample":0}"#
    ),
    (
      .streamStarted(stream: "s1", path: "/srv/a.flac"),
      #"{"event":"stream-started","stream":"s1","path":"/srv/a.flac"}"#
    ),
    (.streamEnded(stream: "s1", reason: .finished), #"{"event":"stream-ended","stream":"s1","reason":"finished"}"#),
    (
      .streamEnded(stream: "s1", reason: .failed, message: "read error"),
      #"{"event":"stream-ended","stream":"s1","reason":"failed","message":"read error"}"#
    ),
    (.deviceFailed(message: "device gone"), #"{"event":"device-failed","message":"device gone"}"#),
    (.deviceRecovered(device: "default"), #"{"event":"device-recovered","device":"default"}"#),
    (
      .configReloaded(applied: ["fade.duration"], restartRequired: ["output.device"]),
      #"{"event":"config-reloaded","applied":["fade.duration"],"restartRequired":["output.device"]}"#
    ),
    (.underrun(stream: "s1"), #"{"event":"underrun","stream":"s1"}"#),
    (.underrun(stream: nil), #"{"event":"underrun"}"#),
    (.duckStarted(rule: "talk", sample: 480), #"{"event":"duck-started","rule":"talk","sample":480}"#),
    (.duckEnded(rule: "talk", sample: 96_480), #"{"event":"duck-ended","rule":"talk","sample":96480}"#),
    (
      .scheduleApplied(schedule: 4, cmd: "play", tag: "alarm", next: 1_795_500_000),
      #"{"event":"schedule-applied","schedule":4,"command":"play","tag":"alarm","next":"2026-11-24T06:00:00Z"}"#
    ),
    (
      .scheduleApplied(schedule: 5, cmd: "stop", tag: nil, next: nil),
      #"{"event":"schedule-applied","schedule":5,"command":"stop","next":null}"#
    ),
    (
      .scheduleFailed(
        schedule: 4, cmd: "play", tag: "alarm",
        error: ProtocolError(.streamExists, field: "stream", "a stream 'alarm' is already playing"),
        next: 1_795_500_000),
      #"{"event":"schedule-failed","schedule":4,"command":"play","tag":"alarm","error":{"code":"stream-exists","field":"stream","message":"a stream 'alarm' is already playing"},"next":"2026-11-24T06:00:00Z"}"#
    ),
    (
      .scheduleFailed(
        schedule: 5, cmd: "fade", tag: nil,
        error: ProtocolError(.unknownStream, field: "key", "no stream 'x' is playing"),
        next: nil),
      #"{"event":"schedule-failed","schedule":5,"command":"fade","error":{"code":"unknown-stream","field":"key","message":"no stream 'x' is playing"},"next":null}"#
    ),
    (
      .limiterEngaged(reduction: 2.5, sample: 480),
      #"{"event":"limiter-engaged","reduction":2.5,"sample":480}"#
    ),
    (
      .value(key: "master.gain", value: 0.5, sample: 48_000),
      #"{"event":"value","key":"master.gain","value":0.5,"sample":48000}"#
    ),
  ])
  func linesAndBack(event: Event, line: String) throws {
    #expect(event.json.serialized() == line)
    #expect(try Event.parse(try JSON.parse(line)) == event)
    #expect(try ServerLine.parse(line) == .event(event))
    #expect(event.kind.map(\.rawValue) ?? "value" == event.name)
  }

  @Test func everyKindHasAnEvent() {
    let kinds: [EventKind?] = [
      Event.animationStarted(id: 1, key: "k", name: "n", sample: 0).kind,
      Event.animationFinished(id: 1, key: "k", name: "n", finished: false, sample: 0, ending: .removed, by: nil).kind,
      Event.streamStarted(stream: "s", path: "p").kind, Event.streamEnded(stream: "s", reason: .stopped).kind,
      Event.deviceFailed(message: "m").kind, Event.deviceRecovered(device: "d").kind,
      Event.configReloaded(applied: [], restartRequired: []).kind,
      Event.underrun(stream: nil).kind, Event.eventsLost(count: 3).kind,
      Event.scheduleApplied(schedule: 1, cmd: "play", tag: nil, next: nil).kind,
      Event.scheduleFailed(schedule: 1, cmd: "play", tag: nil, error: ProtocolError(.badRequest, "m"), next: nil).kind,
      Event.duckStarted(rule: "r", sample: 0).kind, Event.duckEnded(rule: "r", sample: 9).kind,
      Event.itemStarted(stream: "s", item: 1, path: "p", sample: 0).kind,
      Event.itemEnded(stream: "s", item: 1, path: "p", reason: "finished", sample: 9).kind,
      Event.limiterEngaged(reduction: 2.5, sample: 480).kind,
    ]
    #expect(kinds.compactMap { $0 } == EventKind.allCases)
    #expect(Event.value(key: "k", value: 0, sample: 0).kind == nil)
  }
}

@Suite struct ServerLineTests {
  @Test func readsGreetingsRepliesAndUnknownEvents() throws {
    #expect(
      try ServerLine.parse(#"{"hello":"rampd","version":"0.2.0","protocol":1}"#)
        == .greeting(server: "rampd", version: "0.2.0", protocolVersion: 1))
    #expect(
      try ServerLine.parse(#"{"id":7,"ok":true,"result":{"animation":12}}"#)
        == .reply(id: 7, result: .success(["animation": 12])))
    #expect(
      try ServerLine.parse(#"{"ok":false,"error":{"code":"unknown-stream","field":"stream","message":"no s9"}}"#)
        == .reply(id: nil, result: .failure(ProtocolError(.unknownStream, field: "stream", "no s9"))))
    // A code from a newer server is not lost: its message stays.
    #expect(
      try ServerLine.parse(#"{"id":1,"ok":false,"error":{"code":"brand-new","message":"m"}}"#)
        == .reply(id: 1, result: .failure(ProtocolError(.internalError, "m"))))
    #expect(
      try ServerLine.parse(#"{"event":"tempo-changed","bpm":120}"#)
        == .unknownEvent(["event": "tempo-changed", "bpm": 120]))
    // Newer servers may add members to known events.
    #expect(
      try ServerLine.parse(#"{"event":"config-reloaded","path":"/etc/rampd.toml"}"#)
        == .event(.configReloaded(applied: [], restartRequired: [])))
  }

  @Test func refusesMalformedServerLines() {
    #expect(throws: ProtocolError.self) { try ServerLine.parse("[]") }
    #expect(throws: ProtocolError.self) { try ServerLine.parse(#"{"ok":false}"#) }
    #expect(throws: ProtocolError.self) { try ServerLine.parse(#"{"id":1}"#) }
    #expect(throws: ProtocolError.self) { try ServerLine.parse(#"{"event":"animation-finished","id":1}"#) }
    #expect(throws: ProtocolError.self) {
      try ServerLine.parse(#"{"event":"stream-ended","stream":"s","reason":"bored"}"#)
    }
    #expect(throws: ProtocolError.self) { try ServerLine.parse(#"{"event":"value","key":"k","value":1,"sample":1.5}"#) }
  }

  /// Every event and reply the daemon writes is one line a client reads back.
  @Test func repliesRoundTripThroughTheClientReader() throws {
    let error = ProtocolError(.invalidField, field: "to", "to: expected a number")
    #expect(
      try ServerLine.parse(Reply.failure(id: "x", error: error).serialized())
        == .reply(id: "x", result: .failure(error)))
    #expect(
      try ServerLine.parse(Reply.success(id: 2.5, result: "text\nwith newline").serialized())
        == .reply(id: 2.5, result: .success("text\nwith newline")))
  }

  /// An out-of-range refusal names its bound and the number as typed fields, which survive the
  /// wire, and a prefix (a batch's `commands[1]`) keeps them.
  @Test func outOfRangeRefusalsCarryTheirBoundAndValue() throws {
    let error = ProtocolError(
      outOfRange: .gainMaximum, value: 1.5, field: "value", detail: "is above the maximum gain 1 (0 dB)")
    #expect(error.message == "1.5 is above the maximum gain 1 (0 dB)")
    let line = Reply.failure(id: 3, error: error).serialized()
    #expect(
      line.contains(#""bound":"gain-maximum""#) && line.contains(#""value":1.5"#)
        && line.contains(#""detail":"is above the maximum gain 1 (0 dB)""#), "\(line)")
    #expect(try ServerLine.parse(line) == .reply(id: 3, result: .failure(error)))
    let prefixed = error.prefixed("commands[1]")
    #expect(prefixed.field == "commands[1].value" && prefixed.bound == .gainMaximum && prefixed.value == 1.5)
    // Without one (an older daemon, another refusal), nothing is guessed from the message.
    let plain = try ServerLine.parse(
      #"{"id":4,"ok":false,"error":{"code":"out-of-range","field":"value","message":"2 is above the maximum gain 1"}}"#)
    guard case .reply(_, .failure(let read)) = plain else { throw ProtocolError(.internalError, "not a refusal") }
    #expect(read.bound == nil && read.value == nil && read.detail == nil)
  }
}

@Suite struct LineFramerTests {
  @Test func splitsLinesAcrossReads() {
    var framer = LineFramer()
    #expect(framer.push(Array(#"{"cmd":"pi"#.utf8)) == [])
    #expect(framer.pendingByteCount == 10)
    #expect(
      framer.push(Array("ng\"}\n{\"cmd\":\"status\"}\r\n\n{".utf8))
        == [.line(Array(#"{"cmd":"ping"}"#.utf8)), .line(Array(#"{"cmd":"status"}"#.utf8)), .line([])])
    #expect(framer.pendingByteCount == 1)
  }

  @Test func aLineAtTheLimitPassesOneByteMoreDoesNot() {
    var framer = LineFramer(maxLineBytes: 8)
    #expect(framer.push(Array("12345678\n".utf8)) == [.line(Array("12345678".utf8))])
    #expect(framer.push(Array("12345678\r\n".utf8)) == [.line(Array("12345678".utf8))])
    #expect(framer.push(Array("ok\n123456789".utf8)) == [.line(Array("ok".utf8)), .tooLong])
    // After an overlong line the stream has no trustworthy boundary: nothing more comes out.
    #expect(framer.push(Array("\n{}\n".utf8)) == [])
    #expect(ProtocolError.lineTooLong(limit: 8).code == .lineTooLong)
    #expect(
      ProtocolError.lineTooLong(limit: 65_536).message == "a line may have at most 65536 bytes; closing the connection")
    #expect(LineFramer().maxLineBytes == 65_536)
  }

  @Test func anOverlongLineIsCaughtBeforeItsEnd() {
    var framer = LineFramer(maxLineBytes: 4)
    #expect(framer.push(Array("12".utf8)) == [])
    #expect(framer.push(Array("345".utf8)) == [.tooLong])
    #expect(framer.pendingByteCount == 0)
  }
}
