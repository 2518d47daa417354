import PropertyBased
import RampEngine
import Testing

@testable import RampProtocol

@Suite struct RequestRoundTripTests {
  /// The line a client sends for the brief's example request, byte for byte.
  @Test func writesTheDocumentedLine() {
    let fade = Request(id: 7, .fade(Fade(kind: .fade, to: 0, duration: 2.5, curve: .easeIn, space: .decibels)))
    #expect(
      fade.json.serialized()
        == #"{"id":7,"cmd":"fade","key":"master.gain","to":0,"duration":2.5,"curve":"ease-in","space":"db"}"#)
    #expect(Request(.ping).json.serialized() == #"{"cmd":"ping"}"#)
    #expect(
      Request(at: .date(1_795_246_200.25), .fade(Fade(kind: .fadeOut, then: .stop))).json.serialized()
        == #"{"at":"2026-11-21T07:30:00.25Z","cmd":"fade-out","key":"master.gain","to":0,"then":"stop"}"#)
    let spring = Request(.animate(Animate(key: "k", animation: .spring(to: 1))))
    #expect(
      spring.json.serialized()
        == #"{"cmd":"animate","key":"k","name":"animation","animation":{"type":"spring","to":1,"mass":1,"stiffness":100,"damping":10}}"#
    )
  }

  /// One request of every command, each with its options set, through `json` and back.
  @Test func everyCommandRoundTrips() throws {
    var group = Animation.group(
      [.basic(from: 0, to: 1), .keyframes([0, 1, 0.5], keyTimes: [0, 0.5, 1], calculationMode: .cubic)],
      duration: 4)
    group.timing.repeatCount = .infinity
    group.valueSpace = .decibels(floor: -72)
    let requests: [Request] = [
      Request(.ping), Request(id: "v", .version), Request(id: 1.5, .status),
      Request(.play(Play(path: "/a b/c.flac", stream: "s1", gain: 0.5, fadeIn: 3, curve: .fade(.exp), loop: true))),
      Request(.stop(Transport())), Request(.pause(Transport(stream: "s", fade: 0, curve: .easeOut))),
      Request(.resume(Transport(fade: 1))), Request(.seek(Seek(stream: "s", position: 61.5))),
      Request(
        at: .delay(0.5),
        .fade(
          Fade(
            kind: .fadeOut, key: "streams.s.gain", from: 1, to: 0.2, duration: 1800, curve: try .bezier(0.1, 1, 1, 0.2),
            space: .power, continuity: .slope, name: "sleep", then: .pause))),
      Request(.fade(Fade(kind: .fadeIn))), Request(.fade(Fade(kind: .fade, to: 0.3))),
      Request(
        .set(SetValue(key: "master.gain", value: 0.5, duration: 0, curve: .steps(3, .jumpBoth), continuity: .slope))),
      Request(.get(key: "master.gain")), Request(.cancel(key: "master.gain")),
      Request(.remove(key: "master.gain", name: nil)), Request(.remove(key: "master.gain", name: "fade")),
      Request(.list(prefix: nil)), Request(.list(prefix: "streams.")),
      Request(.subscribe(events: nil)), Request(.subscribe(events: EventKind.allCases)),
      Request(.unsubscribe(events: [.underrun])), Request(.observe(key: "master.gain", rate: 60)),
      Request(.unobserve(key: nil)), Request(.unobserve(key: "master.gain")),
      Request(.animate(Animate(key: "master.gain", name: "g", animation: group, continuity: .slope))),
      Request(id: 3, .batch([Request(.ping), Request(.fade(Fade(kind: .fade, to: 0.5)))])),
      Request(.wait(Wait(animations: [1, 2], timeout: 10))), Request(.wait(Wait(key: "master.gain"))),
      Request(.schedules), Request(.unschedule(schedule: 3, tag: nil)),
      Request(.unschedule(schedule: nil, tag: "sleep")),
      Request(
        at: .delay(5), ack: .scheduled, repeats: .every(seconds: 90), tag: "beeps", yield: "master.gain",
        .play(Play(path: "/a.wav", fadeIn: 2, space: .decibels))),
      Request(
        ack: .scheduled, repeats: .daily(seconds: 25_200, days: Recurrence.weekdays), tag: "alarm", .stop(Transport())),
      Request(.duckAdd(DuckRule(name: "talk", targets: ["streams.bed.gain"]))),
      Request(
        .duckAdd(
          DuckRule(
            name: "mic", targets: ["master.gain", "streams.a.gain"], trigger: "voice*",
            sidechain: DuckRule.Sidechain(threshold: -35, detector: .peak, window: 0.1, hysteresis: 3), depth: 20,
            attack: 0.05, attackCurve: .fade(.qsin), hold: 0, release: 3, releaseCurve: .easeOut))),
      Request(.duckRemove(name: "talk")), Request(.duckList), Request(at: .delay(2), .duck(name: "talk", on: true)),
      Request(.duck(name: "talk", on: false)),
      Request(
        .play(
          Play(
            path: "/a.wav", stream: "music", loop: true, queue: ["/b.wav", "/c.wav"],
            crossfade: Crossfade(
              duration: 4, curve: .linear, skipDuration: 1, skipCurve: .fade(.qsin), level: -35.5, window: 12.5)))),
      Request(.queueAdd(stream: "music", paths: ["/d.wav"])), Request(.queueRemove(stream: "music", index: 2)),
      Request(.queueClear(stream: "music")), Request(.queueList(stream: nil)), Request(.queueList(stream: "music")),
      Request(at: .delay(1), .skip(stream: "music", forward: true)), Request(.skip(stream: "music", forward: false)),
    ]
    #expect(Set(requests.map(\.command.name)) == Set(Command.names))
    for original in requests {
      let line = original.json.serialized()
      #expect(try request(line) == original, "\(line)")
      #expect(try Request.parse(original.json) == original)
    }
  }

  /// Random requests of every command, with random options, survive `json`, the serializer and the parser.
  @Test func randomRequestsRoundTrip() async {
    await propertyCheck(count: 400, input: Gen.double(in: 0...1).array(of: 4...80)) { numbers in
      var recipe = Recipe(numbers: numbers)
      let original = recipe.request()
      let line = original.json.serialized()
      let (id, result) = Request.parse(line: line)
      #expect(id == original.id)
      switch result {
      case .success(let parsed): #expect(parsed == original, "\(line)")
      case .failure(let error): Issue.record("refused \(line): \(error)")
      }
    }
  }

  @Test func animateEqualityLooksAtTheAnimation() {
    let a = Animate(key: "k", animation: .basic(to: 1))
    #expect(a == Animate(key: "k", animation: .basic(to: 1)))
    #expect(a != Animate(key: "k", animation: .basic(to: 0.5)))
    #expect(a != Animate(key: "k", animation: .keyframes([1])))
    #expect(a != Animate(key: "k", animation: .basic(to: 1).with { $0.timing.speed = 2 }))
    #expect(a != Animate(key: "k", animation: .group([.basic(to: 1)])))
  }
}

@Suite struct ScheduleTests {
  @Test(arguments: [
    ("1970-01-01T00:00:00Z", 0.0),
    ("2026-11-21T07:30:00Z", 1_795_246_200),
    ("2026-11-21t07:30:00z", 1_795_246_200),
    ("2026-11-21 07:30:00Z", 1_795_246_200),
    ("2026-11-21T08:30:00+01:00", 1_795_246_200),
    ("2026-11-21T02:00:00-05:30", 1_795_246_200),
    ("2024-02-29T23:59:59Z", 1_709_251_199),
    ("1969-12-31T23:00:00Z", -3600),
    ("0001-01-01T00:00:00Z", -62_135_596_800),
    ("2026-11-21T07:30:00.5Z", 1_795_246_200.5),
    ("2026-11-21T07:30:00.000001Z", 1_795_246_200.000001),
  ])
  func parsesRFC3339(text: String, seconds: Double) {
    #expect(RFC3339.parse(text) == seconds)
  }

  @Test(arguments: [
    "2026-11-21", "2026-11-21T07:30:00", "2026-11-21T07:30Z", "2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
    "2026-04-31T00:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21T07:60:00Z", "2026-11-21T07:30:00.Z",
    "2026-11-21T07:30:00+0100", "2026-11-21T07:30:00Zjunk", "2026/11/21T07:30:00Z", "+2026-11-21T07:30:00Z",
    "2026-11-21T07:30:00+24:00",
  ])
  func refusesWhatIsNotRFC3339(text: String) {
    #expect(RFC3339.parse(text) == nil)
  }

  @Test func formatsUTC() {
    #expect(RFC3339.format(0) == "1970-01-01T00:00:00Z")
    #expect(RFC3339.format(-3600) == "1969-12-31T23:00:00Z")
    #expect(RFC3339.format(1_795_246_200.5) == "2026-11-21T07:30:00.5Z")
    #expect(RFC3339.format(1e-5) == "1970-01-01T00:00:00.00001Z")
    #expect(RFC3339.format(1e300) == "9999-12-31T23:59:59Z")
  }

  /// Any instant formats to a timestamp that parses back to the same double.
  @Test func timestampsRoundTripExactly() async {
    await propertyCheck(count: 500, input: Gen.double(in: -6.2e10...2.5e11)) { seconds in
      let text = RFC3339.format(seconds)
      #expect(RFC3339.parse(text) == seconds, "\(seconds) → \(text)")
    }
  }
}
