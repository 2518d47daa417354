import Foundation
import RampProtocol
import Testing

@testable import RampCLI

/// The parts of the client that need no daemon: where the socket is, the progress line, timeline
/// scripts for a live daemon, failures and their exit statuses, replies as text.
@Suite struct ClientSupportTests {
  @Test func socketPathFollowsTheDaemonsRule() {
    let user = ["XDG_RUNTIME_DIR": "/run/user/1000"]
    #expect(
      SocketLocation.clientPath(option: nil, environment: user, isRoot: false) == "/run/user/1000/rampd/rampd.sock")
    #expect(SocketLocation.clientPath(option: nil, environment: user, isRoot: true) == "/run/rampd/rampd.sock")
    #expect(SocketLocation.clientPath(option: nil, environment: [:], isRoot: false) == "/run/rampd/rampd.sock")
    #expect(
      SocketLocation.clientPath(option: nil, environment: ["XDG_RUNTIME_DIR": "relative"], isRoot: false)
        == "/run/rampd/rampd.sock", "a relative XDG_RUNTIME_DIR is ignored, as rampd ignores it")
    var environment = user
    environment["RAMPD_SOCKET_PATH"] = "/srv/daemon.sock"
    #expect(SocketLocation.clientPath(option: nil, environment: environment, isRoot: false) == "/srv/daemon.sock")
    environment["RAMPD_SOCKET"] = "/srv/client.sock"
    #expect(SocketLocation.clientPath(option: nil, environment: environment, isRoot: false) == "/srv/client.sock")
    #expect(SocketLocation.clientPath(option: "/x.sock", environment: environment, isRoot: false) == "/x.sock")
    environment["RAMPD_SOCKET"] = ""
    #expect(SocketLocation.clientPath(option: nil, environment: environment, isRoot: false) == "/srv/daemon.sock")
  }

  /// How to start the daemon rampctl could not reach: the system service for root or the system
  /// socket, the user's service for the user's default socket, else rampd on that socket.
  @Test func startHintFollowsTheSocketRules() {
    let user = ["XDG_RUNTIME_DIR": "/run/user/1000"]
    #expect(
      SocketLocation.startHint(path: "/run/rampd/rampd.sock", environment: user, isRoot: false).contains(
        "systemctl start rampd"))
    #expect(
      SocketLocation.startHint(path: "/run/rampd/rampd.sock", environment: [:], isRoot: true).contains(
        "systemctl start rampd"))
    #expect(
      SocketLocation.startHint(path: "/run/user/1000/rampd/rampd.sock", environment: user, isRoot: false)
        .contains("systemctl --user start rampd"))
    #expect(
      SocketLocation.startHint(path: "/tmp/x.sock", environment: user, isRoot: false)
        == "`RAMPD_SOCKET=/tmp/x.sock rampd`")
  }

  @Test func progressLine() {
    #expect(
      ProgressLine(value: 0.42, elapsed: 1.3, total: 3).text == "[####------] gain 0.42 (-7.5 dB) 1.3s/3.0s")
    #expect(ProgressLine(value: 1, elapsed: 3, total: 3).text == "[##########] gain 1 (0.0 dB) 3.0s/3.0s")
    #expect(ProgressLine(elapsed: 0, total: 2).text == "[----------] … 0.0s/2.0s", "before the first value")
    #expect(
      ProgressLine(value: 0.5, elapsed: 0.4, total: nil).text == "[#####-----] gain 0.5 (-6.0 dB) 0.4s",
      "no length known: the bar is the gain")
    #expect(ProgressLine(value: 0.3, elapsed: 5, total: 2).fraction == 1, "never past full")
    #expect(ProgressLine(value: 0.25, elapsed: 1, total: 2, isGain: false).text == "[#####-----] 0.25 1.0s/2.0s")
    #expect(ProgressLine(value: 0, elapsed: 90, total: 120).text == "[#######---] gain 0 (-inf dB) 1m30s/2m")
    // The signal's level beside the gain, each labelled; silence (reported as -150) as -inf.
    #expect(
      ProgressLine(value: 0.42, elapsed: 1.3, total: 3, peak: -27.46, momentary: -30.1).text
        == "[####------] gain 0.42 (-7.5 dB)  level -27.5 dBFS peak, -30.1 LUFS  1.3s/3.0s")
    #expect(
      ProgressLine(value: 0, elapsed: 3, total: 3, peak: -150, momentary: nil).text
        == "[##########] gain 0 (-inf dB)  level -inf dBFS peak, … LUFS  3.0s/3.0s")
  }

  @Test func scriptLinesBecomeRequestsWithUnitsConverted() throws {
    let text = """
      # a timeline
      {"cmd": "play", "path": "/srv/a.wav", "stream": "a", "fadeIn": "2s"}

      {"at": 1.5, "cmd": "fade", "key": "streams.a.gain", "to": "-6dB", "duration": "500ms"}
      {"at": "1m", "cmd": "set", "key": "master.gain", "value": "50%", "duration": 0}
      {"at": "2026-11-21T07:30:00Z", "id": 9, "cmd": "stop"}
      """
    let script = Timeline.parse(text, file: "t.jsonl")
    #expect(script.errors.isEmpty, "\(script.errors)")
    #expect(script.entries.map(\.line) == [2, 4, 5, 6])
    #expect(script.entries.map(\.label) == ["t.jsonl:2", "t.jsonl:4", "t.jsonl:5", "t.jsonl:6"])
    #expect(script.entries[0].request == Request(.play(Play(path: "/srv/a.wav", stream: "a", fadeIn: 2))))
    #expect(script.entries[0].at == nil && script.entries[0].offset == 0)
    #expect(script.entries[1].at == .delay(1.5))
    #expect(
      script.entries[1].request
        == Request(.fade(Fade(kind: .fade, key: "streams.a.gain", to: pow(10, -6.0 / 20), duration: 0.5))))
    #expect(script.entries[2].offset == 60)
    #expect(script.entries[2].request == Request(.set(SetValue(key: "master.gain", value: 0.5, duration: 0))))
    #expect(script.entries[3].at == .date(RFC3339.parse("2026-11-21T07:30:00Z")!))
    #expect(script.entries[3].request == Request(.stop(Transport())), "the id is rampctl's to choose")
  }

  /// A unit that does not read inside a batch names its field's path.
  @Test func aBadUnitInsideABatchNamesItsPath() {
    let script = Timeline.parse(
      #"{"cmd": "batch", "commands": [{"cmd": "stop"}, {"cmd": "fade", "to": 0, "duration": "2 fortnights"}]}"#,
      file: "t.jsonl")
    #expect(script.entries.isEmpty)
    #expect(
      script.errors.map(\.description).first?.hasPrefix("t.jsonl:1: commands[1].duration: ") == true, "\(script.errors)"
    )
  }

  /// Relative file paths are made absolute against the timeline's directory: `play`'s `path` and
  /// `queue`, `queue-add`'s `paths`, inside a `batch` too; absolute ones are left as they are.
  @Test func relativePathsAreTakenFromTheTimelinesDirectory() throws {
    let text = """
      {"cmd": "play", "path": "a.wav", "stream": "a", "queue": ["../b.wav", "/srv/c.wav"]}
      {"cmd": "queue-add", "stream": "a", "paths": ["./d.wav"]}
      {"at": 1, "cmd": "batch", "commands": [{"cmd": "play", "path": "sub/e.wav", "stream": "e"}]}
      """
    let script = Timeline.parse(text, file: "show.jsonl", directory: "/home/me/shows")
    #expect(script.errors.isEmpty, "\(script.errors)")
    let requests = script.entries.map(\.request)
    #expect(
      requests[0]
        == Request(.play(Play(path: "/home/me/shows/a.wav", stream: "a", queue: ["/home/me/b.wav", "/srv/c.wav"]))))
    #expect(requests[1] == Request(.queueAdd(stream: "a", paths: ["/home/me/shows/d.wav"])))
    #expect(requests[2] == Request(.batch([Request(.play(Play(path: "/home/me/shows/sub/e.wav", stream: "e")))])))
    #expect(Timeline.directory(of: "/home/me/shows/show.jsonl") == "/home/me/shows")
    #expect(Timeline.directory(of: "-") == FileManager.default.currentDirectoryPath)
  }

  @Test func everyBadScriptLineIsReportedWithFileAndLine() {
    let text = """
      {"cmd": "play", "path": "/srv/a.wav"}
      {"at": -1, "cmd": "stop"}
      {"cmd": "fdae"}
      {"cmd": "set", "key": "master.gain", "value": "loud"}
      [1, 2]
      {"cmd": "fade", "to": 0.5, "durtion": 2}
      """
    let script = Timeline.parse(text, file: "bad.jsonl")
    #expect(script.entries.count == 1)
    let messages = script.errors.map(\.description)
    #expect(messages.count == 5, "\(messages)")
    #expect(messages[0].hasPrefix("bad.jsonl:2: at:"))
    #expect(messages[1].hasPrefix("bad.jsonl:3: unknown-command: cmd: unknown command \"fdae\""), "\(messages[1])")
    #expect(messages[2].hasPrefix("bad.jsonl:4: value: 'loud'"), "\(messages[2])")
    #expect(messages[3].hasPrefix("bad.jsonl:5: expected a request object"), "\(messages[3])")
    #expect(
      messages[4].contains("bad.jsonl:6: unknown-field: durtion") && messages[4].contains("did you mean duration"))
  }

  @Test func failuresHaveTheirExitStatuses() {
    let refused = ClientFailure.refused(ProtocolError(.unknownKeyPath, field: "key", "no property 'x.y'"))
    #expect(refused.exitStatus == 65)
    #expect(refused.description == "unknown-key-path: no property 'x.y' (field: key)")
    let named = ClientFailure.refused(ProtocolError(.invalidField, field: "to", "to: must be a number"))
    #expect(named.description == "invalid-field: to: must be a number", "the field is not repeated")
    #expect(ClientFailure.refused(ProtocolError(.timeout, "still running")).exitStatus == 75)
    let unreachable = ClientFailure.unreachable(path: "/run/rampd/rampd.sock", reason: "No such file or directory")
    #expect(unreachable.exitStatus == 69)
    #expect(unreachable.description.contains("/run/rampd/rampd.sock") && unreachable.description.contains("rampd"))
    #expect(ClientFailure.protocolViolation("?").exitStatus == 70)
    #expect(ClientFailure.interrupted.exitStatus == 75)
  }

  @Test func connectingToNothingIsUnreachable() {
    #expect(throws: ClientFailure.unreachable(path: "/nonexistent/rampd.sock", reason: "No such file or directory")) {
      _ = try DaemonConnection(path: "/nonexistent/rampd.sock")
    }
  }

  @Test func repliesAsText() throws {
    let get: JSONValue = [
      "key": "master.gain", "model": 0.5, "presentation": 0.25, "range": [0, 1], "sample": 480,
    ]
    #expect(ReplyText.property(get) == "master.gain = 0.5 (-6.02 dB), audible 0.25 (-12.04 dB), range 0...1")
    // A measured value: its unit, silence as -inf.
    #expect(
      ReplyText.property(["key": "master.level.peak", "value": -20.004, "sample": 480])
        == "master.level.peak = -20.0 dBFS peak")
    #expect(
      ReplyText.property(["key": "streams.a.level.momentary", "value": -150, "sample": 480])
        == "streams.a.level.momentary = -inf LUFS")
    #expect(
      ReplyText.property(["key": "master.limiter", "value": 1.5, "sample": 480]) == "master.limiter = 1.5 dB reduction")
    let list: JSONValue = [
      "sample": 0,
      "properties": [
        [
          "key": "master.gain", "model": 1, "presentation": 1, "range": [0, 1],
          "animations": [
            ["id": 3, "name": "fade", "kind": "basic", "additive": false, "begin": 0, "end": 100, "progress": 0.42]
          ],
        ]
      ],
    ]
    #expect(
      ReplyText.list(list)
        == "KEY PATH     MODEL        AUDIBLE\nmaster.gain  1 (0.00 dB)  1 (0.00 dB)\n    #3 fade (basic) 42%")
    #expect(ReplyText.event(.streamEnded(stream: "s1", reason: .stopped)) == "stream-ended s1 (stopped)")
    #expect(
      ReplyText.event(
        .animationFinished(
          id: 4, key: "master.gain", name: "fade", finished: false, sample: 9, ending: .removed, by: nil))
        == "animation-finished #4 fade on master.gain @9 (removed before its end)")
    #expect(
      ReplyText.event(
        .animationFinished(
          id: 4, key: "master.gain", name: "fade", finished: false, sample: 9, ending: .superseded, by: 5))
        == "animation-finished #4 fade on master.gain @9 (superseded by #5)")
    let status: JSONValue = [
      "version": "0.2.0", "uptime": 61.2, "clients": 0,
      "output": [
        "device": "default", "rate": 48000, "channels": 2, "format": "float", "periodFrames": 240,
        "bufferFrames": 960, "pacing": "device", "kind": "file", "state": "waiting", "underruns": 0, "embedded": true,
        "file": "/run/rampd/output.wav", "requestedDevice": "hw:0",
        "waiting": ["device": "hw:0", "attempts": 3, "nextAttempt": 0.4, "error": "No such device"],
      ],
      "streams": [
        ["stream": "s1", "path": "/a.wav", "paused": false, "stopping": false, "loop": true, "position": 2.5]
      ],
    ]
    #expect(
      ReplyText.status(status) == """
        rampd 0.2.0, up 1m1s
        output default (file), 48000 Hz, 2 ch, float, period 240 / buffer 960 frames, paced by device, waiting, 0 underrun(s)
        embedded output: playing into /run/rampd/output.wav (hw:0 could not be opened)
        waiting for hw:0: 3 attempt(s), next in 0.4 s; last: No such device
        STREAM  STATE    POSITION  LOOP  PATH
        s1      playing  2.5s      yes   /a.wav
        """)
    // A working device with nothing sent to it is idle, not playing, as the JSON's `idle` says.
    func working(idle: Bool) throws -> String {
      var object = try #require(status.objectValue)
      var output = try #require(object["output"]?.objectValue)
      output["state"] = "playing"
      output["idle"] = .bool(idle)
      object["output"] = .object(output)
      return ReplyText.status(.object(object))
    }
    #expect(try working(idle: true).contains("paced by device, idle, 0 underrun(s)"))
    #expect(try working(idle: false).contains("paced by device, playing, 0 underrun(s)"))
  }
}
