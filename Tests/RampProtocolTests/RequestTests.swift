import RampEngine
import Testing

@testable import RampProtocol

/// Every command from its wire form: the defaults a short form gets, and every field of the long form.
@Suite struct CommandParsingTests {
  @Test func simpleCommandsAndTheEnvelope() throws {
    #expect(try request(#"{"cmd":"ping"}"#) == Request(.ping))
    #expect(try request(#"{"id":7,"cmd":"version"}"#) == Request(id: 7, .version))
    #expect(try request(#"{"id":"a-1","cmd":"status"}"#) == Request(id: "a-1", .status))
    #expect(try request(#"{"id":null,"cmd":"status"}"#) == Request(.status))
    #expect(try request(#"{"id":true,"cmd":"ping","at":2.5}"#) == Request(id: true, at: .delay(2.5), .ping))
    #expect(
      try request(#"{"cmd":"ping","at":"2026-11-21T07:30:00Z"}"#) == Request(at: .date(1_795_246_200), .ping))
  }

  @Test func play() throws {
    #expect(try request(#"{"cmd":"play","path":"/srv/alarm.flac"}"#) == Request(.play(Play(path: "/srv/alarm.flac"))))
    let full = try request(
      #"{"cmd":"play","path":"a.wav","stream":"s1","gain":0.5,"fadeIn":30,"curve":"ease-in","loop":true,"paused":true}"#
    )
    #expect(
      full
        == Request(
          .play(
            Play(path: "a.wav", stream: "s1", gain: 0.5, fadeIn: 30, curve: .easeIn, loop: true, paused: true))))
  }

  @Test func transportCommands() throws {
    #expect(try request(#"{"cmd":"stop"}"#) == Request(.stop(Transport())))
    #expect(try request(#"{"cmd":"pause","stream":"s1"}"#) == Request(.pause(Transport(stream: "s1"))))
    #expect(
      try request(#"{"cmd":"resume","stream":"s1","fade":2,"curve":"qsin"}"#)
        == Request(.resume(Transport(stream: "s1", fade: 2, curve: .fade(.qsin)))))
    #expect(
      try request(#"{"cmd":"seek","stream":"s1","position":12.5}"#)
        == Request(.seek(Seek(stream: "s1", position: 12.5))))
  }

  @Test func fadeDefaults() throws {
    let fade = try request(#"{"cmd":"fade","to":0.5}"#)
    #expect(fade == Request(.fade(Fade(kind: .fade, key: "master.gain", to: 0.5))))
    guard case .fade(let payload) = fade.command else { return }
    #expect(payload.duration == nil && payload.from == nil && payload.continuity == .value && payload.name == nil)
    #expect(try request(#"{"cmd":"fade-in"}"#) == Request(.fade(Fade(kind: .fadeIn, to: 1))))
    #expect(try request(#"{"cmd":"fade-out"}"#) == Request(.fade(Fade(kind: .fadeOut, to: 0))))
    #expect(try request(#"{"cmd":"fade-in","to":0.8}"#) == Request(.fade(Fade(kind: .fadeIn, to: 0.8))))
  }

  @Test func fadeWithEveryField() throws {
    let line =
      #"{"id":3,"cmd":"fade-out","key":"streams.s1.gain","from":1,"to":0.1,"duration":2.5,"curve":"ease-in","#
      + #""space":"db","dbFloor":-80,"continuity":"slope","name":"sleep","then":"pause"}"#
    let expected = Fade(
      kind: .fadeOut, key: "streams.s1.gain", from: 1, to: 0.1, duration: 2.5, curve: .easeIn,
      space: .decibels(floor: -80), continuity: .slope, name: "sleep", then: .pause)
    #expect(try request(line) == Request(id: 3, .fade(expected)))
    #expect(
      try request(#"{"cmd":"fade","to":0,"duration":0,"space":"power"}"#)
        == Request(.fade(Fade(kind: .fade, to: 0, duration: 0, space: .power))))
  }

  @Test func set() throws {
    #expect(
      try request(#"{"cmd":"set","key":"master.gain","value":0.5}"#)
        == Request(.set(SetValue(key: "master.gain", value: 0.5))))
    // Timeline scripts write "to".
    #expect(
      try request(#"{"cmd":"set","key":"master.gain","to":0.25,"duration":0}"#)
        == Request(.set(SetValue(key: "master.gain", value: 0.25, duration: 0))))
    #expect(
      try request(
        #"{"cmd":"set","key":"mixers.pcm.volume","value":-0.5,"duration":1,"curve":"steps(4)","space":"db","continuity":"value"}"#
      )
        == Request(
          .set(
            SetValue(
              key: "mixers.pcm.volume", value: -0.5, duration: 1, curve: .steps(4, .jumpEnd), space: .decibels,
              continuity: .value))))
  }

  @Test func keyPathCommands() throws {
    #expect(try request(#"{"cmd":"get","key":"master.gain"}"#) == Request(.get(key: "master.gain")))
    #expect(try request(#"{"cmd":"cancel","key":"master.gain"}"#) == Request(.cancel(key: "master.gain")))
    #expect(try request(#"{"cmd":"remove","key":"master.gain"}"#) == Request(.remove(key: "master.gain", name: nil)))
    #expect(
      try request(#"{"cmd":"remove","key":"master.gain","name":"fade"}"#)
        == Request(.remove(key: "master.gain", name: "fade")))
    #expect(try request(#"{"cmd":"list"}"#) == Request(.list(prefix: nil)))
    #expect(try request(#"{"cmd":"list","prefix":"streams."}"#) == Request(.list(prefix: "streams.")))
  }

  @Test func subscriptions() throws {
    #expect(try request(#"{"cmd":"subscribe"}"#) == Request(.subscribe(events: nil)))
    #expect(
      try request(#"{"cmd":"subscribe","events":["animation-finished","underrun"]}"#)
        == Request(.subscribe(events: [.animationFinished, .underrun])))
    #expect(
      try request(#"{"cmd":"unsubscribe","events":["stream-ended"]}"#) == Request(.unsubscribe(events: [.streamEnded])))
    #expect(try request(#"{"cmd":"unsubscribe"}"#) == Request(.unsubscribe(events: nil)))
    #expect(try request(#"{"cmd":"observe","key":"master.gain"}"#) == Request(.observe(key: "master.gain", rate: 20)))
    #expect(
      try request(#"{"cmd":"observe","key":"master.gain","rate":1000}"#)
        == Request(.observe(key: "master.gain", rate: 1000)))
    #expect(try request(#"{"cmd":"unobserve"}"#) == Request(.unobserve(key: nil)))
    #expect(try request(#"{"cmd":"unobserve","key":"master.gain"}"#) == Request(.unobserve(key: "master.gain")))
  }

  @Test func batch() throws {
    let line =
      #"{"id":1,"at":5,"cmd":"batch","commands":[{"cmd":"fade","key":"streams.a.gain","to":0,"duration":3},"#
      + #"{"cmd":"fade-in","key":"streams.b.gain","duration":3},{"cmd":"get","key":"master.gain"}]}"#
    let expected = Request(
      id: 1, at: .delay(5),
      .batch([
        Request(.fade(Fade(kind: .fade, key: "streams.a.gain", to: 0, duration: 3))),
        Request(.fade(Fade(kind: .fadeIn, key: "streams.b.gain", duration: 3))),
        Request(.get(key: "master.gain")),
      ]))
    #expect(try request(line) == expected)
  }

  @Test func wait() throws {
    #expect(try request(#"{"cmd":"wait","animations":[12,13]}"#) == Request(.wait(Wait(animations: [12, 13]))))
    #expect(
      try request(#"{"cmd":"wait","key":"master.gain","timeout":30}"#)
        == Request(.wait(Wait(key: "master.gain", timeout: 30))))
  }

  @Test func commandNamesMatchTheWire() throws {
    for name in Command.names {
      let line: String
      switch name {
      case "play": line = #"{"cmd":"play","path":"a"}"#
      case "seek": line = #"{"cmd":"seek","stream":"s","position":0}"#
      case "fade": line = #"{"cmd":"fade","to":0}"#
      case "set": line = #"{"cmd":"set","key":"k","value":0}"#
      case "get", "cancel", "remove", "observe": line = #"{"cmd":"\#(name)","key":"k"}"#
      case "animate": line = #"{"cmd":"animate","key":"k","animation":{"type":"basic"}}"#
      case "batch": line = #"{"cmd":"batch","commands":[{"cmd":"ping"}]}"#
      case "wait": line = #"{"cmd":"wait","key":"k"}"#
      case "unschedule": line = #"{"cmd":"unschedule","schedule":3}"#
      case "duck-add": line = #"{"cmd":"duck-add","name":"d","targets":["master.gain"]}"#
      case "duck-remove", "duck", "unduck": line = #"{"cmd":"\#(name)","name":"d"}"#
      case "queue-add": line = #"{"cmd":"queue-add","stream":"s","paths":["a"]}"#
      case "queue-remove": line = #"{"cmd":"queue-remove","stream":"s","index":1}"#
      case "queue-clear", "next", "previous": line = #"{"cmd":"\#(name)","stream":"s"}"#
      default: line = #"{"cmd":"\#(name)"}"#
      }
      #expect(try request(line).command.name == name)
    }
  }
}

/// Every error code parsing can produce, with its field and message.
@Suite struct RequestErrorTests {
  @Test func badJSONAndBadRequests() throws {
    #expect(refusal(#"{"cmd":"#)?.code == .badJSON)
    #expect(refusal("[1]") == ProtocolError(.badRequest, "a request must be a JSON object, got an array"))
    #expect(refusal(#""ping""#) == ProtocolError(.badRequest, "a request must be a JSON object, got \"ping\""))
    #expect(
      refusal("{}") == ProtocolError(.badRequest, field: "cmd", "cmd: missing; every request names its command"))
    #expect(
      refusal(#"{"cmd":5}"#) == ProtocolError(.badRequest, field: "cmd", "cmd: expected a command name, got 5"))
    #expect(
      refusal(#"{"id":[1],"cmd":"ping"}"#)
        == ProtocolError(.badRequest, field: "id", "id: expected a number or a string, got an array"))
    #expect(refusal(#"{"id":{"a":1},"cmd":"ping"}"#)?.field == "id")
    let longID = String(repeating: "i", count: 257)
    #expect(refusal(#"{"id":"\#(longID)","cmd":"ping"}"#)?.code == .badRequest)
  }

  @Test func ackIsCheckedAndRoundTrips() throws {
    let saved = try request(#"{"cmd":"fade-out","at":60,"ack":"scheduled"}"#)
    #expect(saved.ack == .scheduled && saved.at == .delay(60))
    #expect(try Request.parse(saved.json) == saved)
    #expect(try request(#"{"cmd":"ping","at":1}"#).ack == .applied)
    #expect(refusal(#"{"cmd":"ping","at":1,"ack":"later"}"#)?.field == "ack")
    #expect(refusal(#"{"cmd":"ping","at":1,"ack":true}"#)?.code == .invalidField)
    #expect(
      refusal(#"{"cmd":"fade-out","ack":"scheduled"}"#)
        == ProtocolError(.invalidField, field: "ack", #"ack: "scheduled" needs "at""#))
    #expect(refusal(#"{"cmd":"batch","commands":[{"cmd":"ping","ack":"applied"}]}"#)?.field == "commands[0].ack")
  }

  @Test func unknownCommandsSuggestTheClosest() {
    #expect(
      refusal(#"{"cmd":"fadeout"}"#)
        == ProtocolError(.unknownCommand, field: "cmd", "cmd: unknown command \"fadeout\"; did you mean fade-out?"))
    #expect(refusal(#"{"cmd":"Fade_In"}"#)?.message.hasSuffix("did you mean fade-in?") == true)
    #expect(refusal(#"{"cmd":"obsrve"}"#)?.message.hasSuffix("did you mean observe?") == true)
    #expect(
      refusal(#"{"cmd":"explode"}"#)
        == ProtocolError(.unknownCommand, field: "cmd", "cmd: unknown command \"explode\""))
  }

  @Test func theIdIsRecoveredFromRefusedRequests() {
    #expect(Request.parse(line: #"{"id":9,"cmd":"nope"}"#).id == 9)
    #expect(Request.parse(line: #"{"id":"x","cmd":"fade"}"#).id == "x")
    #expect(Request.parse(line: #"{"cmd":"fade","id":4.5,"durtion":1}"#).id == 4.5)
    #expect(Request.parse(line: #"{"id":[9],"cmd":"ping"}"#).id == nil)
    #expect(Request.parse(line: #"[{"id":9}]"#).id == nil)
    #expect(Request.parse(line: #"{"id":9,"cmd":"ping""#).id == nil)
    let (id, result) = Request.parse(line: #"{"id":9,"cmd":"ping"}"#)
    #expect(id == 9)
    #expect((try? result.get()) == Request(id: 9, .ping))
  }

  @Test func rawLinesMustBeUTF8() throws {
    let (_, result) = Request.parse(utf8: [0x7B, 0xFF, 0x7D])
    #expect(throws: ProtocolError(.badJSON, "the line is not valid UTF-8")) { try result.get() }
    #expect(try Request.parse(utf8: Array(#"{"cmd":"ping"}"#.utf8)).result.get() == Request(.ping))
  }

  @Test func unknownFieldsAreNamedWithASuggestion() {
    #expect(
      refusal(#"{"cmd":"fade","to":0,"durtion":2}"#)
        == ProtocolError(
          .unknownField, field: "durtion", "durtion: fade takes no field \"durtion\"; did you mean duration?"))
    #expect(
      refusal(#"{"cmd":"ping","verbose":true}"#)
        == ProtocolError(.unknownField, field: "verbose", "verbose: ping takes no field \"verbose\""))
    // A typo is reported as the typo, not as the required field it failed to give.
    #expect(refusal(#"{"cmd":"fade","tu":0}"#)?.code == .unknownField)
    #expect(refusal(#"{"cmd":"fade-in","then":"stop","thn":1}"#)?.field == "thn")
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":{"type":"keyframe","values":[1],"keyTime":[0]}}"#)
        == ProtocolError(
          .unknownField, field: "animation.keyTime",
          "animation.keyTime: a keyframe animation takes no field \"keyTime\"; did you mean keyTimes?"))
    #expect(
      refusal(#"{"cmd":"batch","commands":[{"cmd":"ping"},{"cmd":"fade","to":0,"curv":"linear"}]}"#)?.field
        == "commands[1].curv")
    // Keyframe fields do not belong to a basic animation.
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":{"type":"basic","values":[1]}}"#)?.field == "animation.values")
  }

  @Test func missingFields() {
    let cases: [(String, String)] = [
      (#"{"cmd":"fade"}"#, "to"),
      (#"{"cmd":"play"}"#, "path"),
      (#"{"cmd":"play","path":null}"#, "path"),
      (#"{"cmd":"seek","stream":"s1"}"#, "position"),
      (#"{"cmd":"seek","position":1}"#, "stream"),
      (#"{"cmd":"set","key":"master.gain"}"#, "value"),
      (#"{"cmd":"set","value":1}"#, "key"),
      (#"{"cmd":"get"}"#, "key"),
      (#"{"cmd":"cancel"}"#, "key"),
      (#"{"cmd":"remove"}"#, "key"),
      (#"{"cmd":"observe"}"#, "key"),
      (#"{"cmd":"animate","key":"k"}"#, "animation"),
      (#"{"cmd":"animate","animation":{"type":"basic"}}"#, "key"),
      (#"{"cmd":"animate","key":"k","animation":{}}"#, "animation.type"),
      (#"{"cmd":"animate","key":"k","animation":{"type":"keyframe"}}"#, "animation.values"),
      (#"{"cmd":"animate","key":"k","animation":{"type":"group"}}"#, "animation.animations"),
      (#"{"cmd":"animate","key":"k","animation":{"type":"spring","bounce":0.2}}"#, "animation.duration"),
      (#"{"cmd":"batch"}"#, "commands"),
      (#"{"cmd":"batch","commands":[{"cmd":"ping"},{"cmd":"set","key":"k"}]}"#, "commands[1].value"),
    ]
    for (line, field) in cases {
      #expect(
        refusal(line) == ProtocolError(.missingField, field: field, "\(field): missing; this field is required"),
        "\(line)")
    }
  }

  @Test func fieldsOfTheWrongType() {
    #expect(
      refusal(#"{"cmd":"fade","to":0,"duration":"2s"}"#)
        == ProtocolError(.invalidField, field: "duration", #"duration: expected a number of seconds, got "2s""#))
    #expect(
      refusal(#"{"cmd":"fade","to":"0"}"#)
        == ProtocolError(.invalidField, field: "to", #"to: expected a number, got "0""#))
    #expect(
      refusal(#"{"cmd":"play","path":"a","loop":1}"#)
        == ProtocolError(.invalidField, field: "loop", "loop: expected true or false, got 1"))
    #expect(
      refusal(#"{"cmd":"play","path":5}"#)
        == ProtocolError(.invalidField, field: "path", "path: expected a string, got 5"))
    #expect(
      refusal(#"{"cmd":"fade","to":0,"continuity":"smooth"}"#)
        == ProtocolError(
          .invalidField, field: "continuity", #"continuity: expected one of value, slope, got "smooth""#))
    #expect(
      refusal(#"{"cmd":"fade-out","then":"explode"}"#)
        == ProtocolError(.invalidField, field: "then", #"then: expected one of stop, pause, got "explode""#))
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":[1]}"#)
        == ProtocolError(.invalidField, field: "animation", "animation: expected an object, got an array"))
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":{"type":"keyframe","values":{"a":1}}}"#)?.field
        == "animation.values")
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":{"type":"keyframe","values":[0,"1"]}}"#)
        == ProtocolError(
          .invalidField, field: "animation.values[1]", #"animation.values[1]: expected a number, got "1""#))
    let longString = String(repeating: "x", count: 50)
    #expect(
      refusal(#"{"cmd":"fade","to":0,"duration":"\#(longString)"}"#)?.message
        == "duration: expected a number of seconds, got \"\(String(repeating: "x", count: 40))…\"")
  }

  @Test func numbersMustBeFiniteAndDurationsNotNegative() {
    #expect(
      refusal(#"{"cmd":"fade","to":0,"duration":-1}"#)
        == ProtocolError(.invalidField, field: "duration", "duration: must not be negative, got -1"))
    #expect(refusal(#"{"cmd":"play","path":"a","fadeIn":-0.5}"#)?.field == "fadeIn")
    #expect(refusal(#"{"cmd":"stop","fade":-2}"#)?.field == "fade")
    #expect(refusal(#"{"cmd":"seek","stream":"s","position":-2}"#)?.field == "position")
    #expect(refusal(#"{"cmd":"wait","key":"k","timeout":-2}"#)?.field == "timeout")
    // A zero duration is a jump, not an error.
    #expect(refusal(#"{"cmd":"fade","to":0,"duration":0}"#) == nil)
    // Parsed lines cannot hold NaN, but requests built by a program can.
    let built: JSONValue = ["cmd": "fade", "to": .number(.nan)]
    #expect(
      throws: ProtocolError(.invalidField, field: "to", "to: must be a finite number, got nan")
    ) { try Request.parse(built) }
    #expect(throws: ProtocolError.self) { try Request.parse(["cmd": "set", "key": "k", "value": .number(.infinity)]) }
  }

  @Test func curvesSpacesAndKeyPathsUseTheEngineParsers() {
    let curve = refusal(#"{"cmd":"fade","to":0,"curve":"bouncy"}"#)
    #expect(curve?.code == .invalidField && curve?.field == "curve")
    #expect(curve?.message.hasPrefix("curve: unknown curve 'bouncy'; expected one of: linear, ease-in") == true)
    #expect(
      refusal(#"{"cmd":"fade","to":0,"curve":"cubic-bezier(1.5,0,1,1)"}"#)
        == ProtocolError(.invalidField, field: "curve", "curve: cubic-bezier x1: must be in [0, 1], got 1.5"))
    #expect(
      refusal(#"{"cmd":"fade","to":0,"curve":7}"#)?.message == "curve: expected a curve name such as \"ease-in\", got 7"
    )
    #expect(refusal(#"{"cmd":"fade","to":0,"space":"loud"}"#)?.field == "space")
    #expect(
      refusal(#"{"cmd":"fade","to":0,"dbFloor":-80}"#)
        == ProtocolError(.invalidField, field: "dbFloor", #"dbFloor: needs space "db""#))
    #expect(
      refusal(#"{"cmd":"fade","to":0,"space":"power","dbFloor":-80}"#)
        == ProtocolError(.invalidField, field: "dbFloor", #"dbFloor: needs space "db""#))
    #expect(refusal(#"{"cmd":"fade","to":0,"space":"db","dbFloor":6}"#)?.field == "dbFloor")
    #expect(refusal(#"{"cmd":"fade","to":0,"space":"db(-80)","dbFloor":-70}"#)?.field == "dbFloor")
    #expect(
      refusal(#"{"cmd":"get","key":"a..b"}"#)
        == ProtocolError(
          .invalidField, field: "key",
          "key: 'a..b' is not a key path: use dot-separated names of letters, digits, '_' and '-'"))
    #expect(refusal(#"{"cmd":"fade","key":"master gain","to":0}"#)?.field == "key")
    #expect(refusal(#"{"cmd":"wait","key":""}"#)?.field == "key")
  }

  /// "db" alone takes the configured floor; a floor in the request wins, and survives `json`.
  @Test func theConfiguredDecibelFloorFillsInForPlainDB() throws {
    let configured = ParseOptions(decibelFloor: -80)
    let plain = #"{"cmd":"fade","to":0,"space":"db"}"#
    let parsed = try Request.parse(line: plain, options: configured).result.get()
    #expect(parsed == Request(.fade(Fade(kind: .fade, to: 0, space: .decibels(floor: -80)))))
    #expect(try request(plain) == Request(.fade(Fade(kind: .fade, to: 0, space: .decibels))))
    let explicit = #"{"cmd":"set","key":"k","value":0,"space":"db","dbFloor":-60}"#
    #expect(
      try Request.parse(line: explicit, options: configured).result.get()
        == Request(.set(SetValue(key: "k", value: 0, space: .decibels(floor: -60)))))
    #expect(
      try Request.parse(line: #"{"cmd":"set","key":"k","value":0,"space":"db(-70)"}"#, options: configured).result
        .get() == Request(.set(SetValue(key: "k", value: 0, space: .decibels(floor: -70)))))
    let animate =
      #"{"cmd":"animate","key":"k","animation":{"type":"group","animations":[{"type":"basic","valueSpace":"db"}]}}"#
    guard case .animate(let payload) = try Request.parse(line: animate, options: configured).result.get().command,
      case .group(let children) = payload.animation.content
    else { throw ProtocolError(.internalError, "not a group") }
    #expect(children[0].valueSpace == .decibels(floor: -80))
    // Written out, the floor is explicit, so the request means the same under any configuration.
    #expect(try request(parsed.json.serialized()) == parsed)
  }

  /// A floor given is data, kept whatever its value: `db(-60)` (the engine's default floor) goes
  /// over the wire as -60, not as a plain "db" that a daemon configured otherwise would read at
  /// its own floor. A client that was given no floor writes none.
  @Test func anExplicitDefaultFloorIsWrittenOut() throws {
    let daemon = ParseOptions(decibelFloor: -50)
    let given = [
      #"{"cmd":"fade","to":0,"space":"db(-60)"}"#, #"{"cmd":"fade","to":0,"space":"db","dbFloor":-60}"#,
      #"{"cmd":"animate","key":"k","animation":{"type":"basic","to":0,"valueSpace":"db(-60)"}}"#,
      #"{"cmd":"play","path":"/a","fadeIn":1,"space":"db","dbFloor":-60}"#,
      #"{"cmd":"set","key":"k","value":0,"duration":1,"space":"db(-60)"}"#,
    ]
    for line in given {
      // As rampctl does: read without a configuration, written out, read by the daemon.
      let client = try Request.parse(line: line).result.get()
      let wire = client.json.serialized()
      #expect(wire.contains(#""dbFloor":-60"#), "\(line) went out as \(wire)")
      let read = try Request.parse(line: wire, options: daemon).result.get()
      #expect(read == client, "\(line) became \(read.json.serialized())")
    }
    let plain = try Request.parse(line: #"{"cmd":"fade","to":0,"space":"db"}"#).result.get()
    #expect(plain == Request(.fade(Fade(kind: .fade, to: 0, space: .decibels(floor: nil)))))
    let wire = plain.json.serialized()
    #expect(!wire.contains("dbFloor"), "\(wire)")
    #expect(
      try Request.parse(line: wire, options: daemon).result.get()
        == Request(.fade(Fade(kind: .fade, to: 0, space: .decibels(floor: -50)))))
  }

  @Test func streamIdsAndNamesAreKeyPathComponents() {
    #expect(
      refusal(#"{"cmd":"play","path":"a","stream":"s 1"}"#)
        == ProtocolError(
          .invalidField, field: "stream", #"stream: expected 1 to 64 letters, digits, '_' or '-', got "s 1""#))
    #expect(refusal(#"{"cmd":"play","path":"a","stream":"a.b"}"#)?.field == "stream")
    #expect(refusal(#"{"cmd":"play","path":"a","stream":""}"#)?.field == "stream")
    #expect(refusal(#"{"cmd":"play","path":"a","stream":"\#(String(repeating: "s", count: 65))"}"#)?.field == "stream")
    #expect(refusal(#"{"cmd":"play","path":"a","stream":"\#(String(repeating: "s", count: 64))"}"#) == nil)
    #expect(refusal(#"{"cmd":"fade","to":0,"name":"my fade"}"#)?.field == "name")
    #expect(
      refusal(#"{"cmd":"play","path":""}"#) == ProtocolError(.invalidField, field: "path", "path: must not be empty"))
  }

  @Test func thenOnlyOnFadeOut() {
    for command in ["fade-in", "fade"] {
      #expect(
        refusal(#"{"cmd":"\#(command)","to":1,"then":"stop"}"#)
          == ProtocolError(
            .invalidField, field: "then", "then: only fade-out takes then (stop or pause when the fade ends)"))
    }
    #expect(refusal(#"{"cmd":"fade-out","then":"stop"}"#) == nil)
    #expect(refusal(#"{"cmd":"fade-out","key":"streams.s1.gain","then":"pause"}"#) == nil)
    // Only streams have a transport to stop.
    #expect(
      refusal(#"{"cmd":"fade-out","key":"mixers.master.volume","then":"stop"}"#)
        == ProtocolError(
          .invalidField, field: "then",
          "then: needs key master.gain (every stream) or streams.<id>.gain (one stream), not mixers.master.volume"))
    #expect(refusal(#"{"cmd":"fade-out","key":"streams.s1.pan","then":"stop"}"#)?.field == "then")
  }

  @Test func setTakesValueOrTo() {
    #expect(
      refusal(#"{"cmd":"set","key":"k","value":1,"to":1}"#)
        == ProtocolError(.invalidField, field: "to", "to: give value or to, not both"))
  }

  @Test func schedules() {
    #expect(refusal(#"{"cmd":"ping","at":-1}"#)?.field == "at")
    #expect(refusal(#"{"cmd":"ping","at":-1}"#)?.code == .invalidField)
    #expect(
      refusal(#"{"cmd":"ping","at":"tomorrow"}"#)
        == ProtocolError(
          .invalidField, field: "at",
          #"at: expected an RFC 3339 date and time such as "2026-11-21T07:30:00Z", got "tomorrow""#))
    #expect(refusal(#"{"cmd":"ping","at":true}"#)?.field == "at")
    #expect(refusal(#"{"cmd":"ping","at":"2026-02-30T07:30:00Z"}"#)?.field == "at")
  }

  @Test func batchRules() {
    #expect(
      refusal(#"{"cmd":"batch","commands":[{"cmd":"ping"},{"cmd":"ping"},{"cmd":"wait","key":"k"}]}"#)
        == ProtocolError(.invalidField, field: "commands[2].cmd", "commands[2].cmd: wait cannot be part of a batch"))
    for name in Command.notInBatch {
      #expect(refusal(#"{"cmd":"batch","commands":[{"cmd":"\#(name)"}]}"#)?.field == "commands[0].cmd")
    }
    #expect(
      refusal(#"{"cmd":"batch","commands":[{"id":1,"cmd":"ping"}]}"#)
        == ProtocolError(
          .invalidField, field: "commands[0].id", "commands[0].id: commands in a batch take no id; give it to the batch"
        ))
    #expect(refusal(#"{"cmd":"batch","commands":[{"cmd":"ping","at":1}]}"#)?.field == "commands[0].at")
    // Null is absence, there as everywhere.
    #expect(refusal(#"{"cmd":"batch","commands":[{"cmd":"ping","at":null,"id":null}]}"#) == nil)
    #expect(refusal(#"{"cmd":"batch","commands":[]}"#)?.field == "commands")
    #expect(refusal(#"{"cmd":"batch","commands":[1]}"#)?.field == "commands[0]")
    #expect(
      refusal(#"{"cmd":"batch","commands":[{"cmd":"fade","to":0,"duration":-1}]}"#)?.field == "commands[0].duration")
    #expect(refusal(#"{"cmd":"batch","commands":[{"cmd":"nope"}]}"#)?.code == .unknownCommand)
    #expect(refusal(#"{"cmd":"batch","commands":[{"cmd":"nope"}]}"#)?.field == "commands[0].cmd")
  }

  @Test func waitRules() {
    let both = ProtocolError(
      .invalidField, field: "animations", "animations: give exactly one of animations (ids) and key")
    #expect(refusal(#"{"cmd":"wait"}"#) == both)
    #expect(refusal(#"{"cmd":"wait","animations":[1],"key":"k"}"#) == both)
    #expect(refusal(#"{"cmd":"wait","animations":[]}"#)?.field == "animations")
    for bad in ["1.5", "-1", "\"1\"", "9007199254740992"] {
      #expect(refusal(#"{"cmd":"wait","animations":[3,\#(bad)]}"#)?.field == "animations[1]", "\(bad)")
    }
  }

  @Test func eventKinds() {
    #expect(refusal(#"{"cmd":"subscribe","events":[]}"#)?.field == "events")
    let unknown = refusal(#"{"cmd":"subscribe","events":["underrun","nope"]}"#)
    #expect(unknown?.field == "events[1]")
    #expect(unknown?.message.hasPrefix("events[1]: expected one of animation-started, animation-finished") == true)
    #expect(refusal(#"{"cmd":"unsubscribe","events":"underrun"}"#)?.field == "events")
  }

  @Test func observeRateIsBounded() {
    for rate in ["0", "-5", "1000.5", "1e-300", "0.0009"] {
      let error = refusal(#"{"cmd":"observe","key":"k","rate":\#(rate)}"#)
      #expect(error?.code == .outOfRange)
      #expect(error?.field == "rate")
    }
    #expect(
      refusal(#"{"cmd":"observe","key":"k","rate":2000}"#)?.message
        == "rate: must be at least 0.001 Hz (a look every 1000 s) and at most 1000 Hz, got 2000")
    #expect(refusal(#"{"cmd":"observe","key":"k","rate":0.001}"#) == nil)
  }

  @Test func limits() {
    let longPath = String(repeating: "p", count: 4097)
    #expect(
      refusal(#"{"cmd":"play","path":"\#(longPath)"}"#)
        == ProtocolError(.limitExceeded, field: "path", "path: at most 4096 bytes, got 4097"))
    #expect(refusal(#"{"cmd":"play","path":"\#(String(repeating: "p", count: 4096))"}"#) == nil)
    let longKey = String(repeating: "k", count: 257)
    #expect(
      refusal(#"{"cmd":"get","key":"\#(longKey)"}"#)
        == ProtocolError(.limitExceeded, field: "key", "key: at most 256 bytes, got 257"))
    let values = Array(repeating: "0.5", count: 4097).joined(separator: ",")
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":{"type":"keyframe","values":[\#(values)]}}"#)
        == ProtocolError(.limitExceeded, field: "animation.values", "animation.values: at most 4096 entries, got 4097"))
    let fine = Array(repeating: "0.5", count: 4096).joined(separator: ",")
    #expect(refusal(#"{"cmd":"animate","key":"k","animation":{"type":"keyframe","values":[\#(fine)]}}"#) == nil)
    let commands = Array(repeating: #"{"cmd":"ping"}"#, count: 257).joined(separator: ",")
    #expect(
      refusal(#"{"cmd":"batch","commands":[\#(commands)]}"#)
        == ProtocolError(.limitExceeded, field: "commands", "commands: at most 256 entries, got 257"))
    let children = Array(repeating: #"{"type":"basic"}"#, count: 257).joined(separator: ",")
    #expect(
      refusal(#"{"cmd":"animate","key":"k","animation":{"type":"group","animations":[\#(children)]}}"#)?.code
        == .limitExceeded)
  }

  /// Every code that parsing can produce is produced by some line above; this keeps the list honest.
  @Test func parsingReachesItsErrorCodes() {
    let lines = [
      "{", "[]", #"{"cmd":"nope"}"#, #"{"cmd":"fade"}"#, #"{"cmd":"fade","to":"x"}"#, #"{"cmd":"ping","x":1}"#,
      #"{"cmd":"observe","key":"k","rate":0}"#, #"{"cmd":"get","key":"\#(String(repeating: "k", count: 300))"}"#,
    ]
    let codes = Set(lines.compactMap { refusal($0)?.code })
    #expect(
      codes == [
        .badJSON, .badRequest, .unknownCommand, .missingField, .invalidField, .unknownField, .outOfRange,
        .limitExceeded,
      ])
    var framer = LineFramer(maxLineBytes: 4)
    #expect(framer.push(Array("12345".utf8)) == [.tooLong])
  }
}
