import RampEngine
import Testing

@testable import RampCLI

@Suite struct TimelineScriptTests {
  func apply(_ line: String) throws -> AnimationEngine {
    let change = try TimelineScript.parse(line, label: "t:1")
    let engine = try AnimationEngine(sampleRate: 1000)
    try engine.define("master.gain", value: 1, range: 0...1)
    try engine.define("streams.main.gain", value: 1, range: 0...1)
    try change.apply(engine)
    return engine
  }

  @Test func fadeWithUnitsCurveAndSpace() throws {
    let change = try TimelineScript.parse(
      #"{"at": "1.5s", "cmd": "fade", "key": "streams.main.gain", "to": "-6dB", "duration": "500ms", "curve": "ease-in", "space": "db"}"#,
      label: "t:1")
    #expect(change.at == 1.5)
    let engine = try apply(
      #"{"cmd": "fade", "key": "streams.main.gain", "to": "-6dB", "duration": "500ms", "curve": "ease-in"}"#)
    #expect(abs(try engine.model("streams.main.gain") - 0.501187) < 1e-6)
    #expect(try engine.animations(on: "streams.main.gain").first?.endSample == 500)
  }

  @Test func fadeOutDefaultsToSilenceOnMaster() throws {
    let engine = try apply(#"{"cmd": "fade-out", "duration": 2}"#)
    #expect(try engine.model("master.gain") == 0)
    #expect(try engine.animations(on: "master.gain").first?.endSample == 2000)
  }

  @Test func setWithoutDurationIsInstant() throws {
    let engine = try apply(#"{"cmd": "set", "to": 0.25}"#)
    #expect(try engine.presentation("master.gain") == 0.25)
  }

  @Test(arguments: [
    ("not json", "not a JSON object"),
    (#"[1, 2]"#, "not a JSON object"),
    (#"{"to": 1}"#, "cmd: missing"),
    (#"{"cmd": "play"}"#, "cannot be rendered offline"),
    // A play line says that play is the problem, not its fields.
    (#"{"at": 0, "cmd": "play", "path": "/a.flac", "fadeIn": 2}"#, "'play' cannot be rendered offline"),
    (#"{"cmd": "fade", "to": 1, "speed": 2}"#, "unknown field 'speed'"),
    (#"{"cmd": "fade"}"#, "to: missing"),
    (#"{"cmd": "fade", "to": -1}"#, "to: must be a finite gain"),
    (#"{"cmd": "fade", "to": true}"#, "to: expected a gain"),
    (#"{"cmd": "fade", "to": "loud"}"#, "to"),
    (#"{"cmd": "fade", "to": 1, "duration": -2}"#, "duration: must be a finite number"),
    (#"{"cmd": "fade", "to": 1, "duration": "soon"}"#, "duration"),
    (#"{"cmd": "fade", "to": 1, "at": -1}"#, "at: must be"),
    (#"{"cmd": "fade", "to": 1, "curve": "wobble"}"#, "unknown curve"),
    (#"{"cmd": "fade", "to": 1, "curve": "cubic-bezier(2,0,1,1)"}"#, "x1"),
    (#"{"cmd": "fade", "to": 1, "space": "loud"}"#, "space"),
    (#"{"cmd": "fade", "to": 1, "continuity": "jerk"}"#, "continuity"),
    (#"{"cmd": "fade", "to": 1, "key": 7}"#, "key: expected a string"),
  ])
  func badLinesSayWhatIsWrong(_ line: String, _ fragment: String) {
    do {
      _ = try TimelineScript.parse(line, label: "script.jsonl:4")
      Issue.record("accepted \(line)")
    } catch let error as ScriptError {
      #expect(error.description.hasPrefix("script.jsonl:4: "), "\(error)")
      #expect(error.description.contains(fragment), "\(error)")
    } catch {
      Issue.record("unexpected \(error)")
    }
  }

  @Test func unknownKeyPathFailsWhenApplied() throws {
    let change = try TimelineScript.parse(#"{"cmd": "fade", "key": "streams.nope.gain", "to": 0}"#, label: "t:1")
    let engine = try AnimationEngine(sampleRate: 1000)
    #expect(throws: EngineError.self) { try change.apply(engine) }
  }
}
