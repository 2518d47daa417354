import ArgumentParser
import Foundation
import RampEngine
import RampProtocol
import Testing

@testable import RampCtlCommands

/// The request rampctl sends for a command line.
private func request(_ words: String...) throws -> Request {
  let command = try RampCtl.parseAsRoot(Arguments.prepared(words))
  let daemonCommand = try #require(command as? any DaemonCommand, "\(words[0]) talks to rampd")
  return try daemonCommand.request()
}

/// The message and exit status rampctl would print for a command line it refuses.
private func refusal(_ words: String...) -> (message: String, status: Int32) {
  do {
    _ = try RampCtl.parseAsRoot(Arguments.prepared(words))
    return ("accepted", 0)
  } catch {
    return (RampCtl.message(for: error), RampCtl.exitCode(for: error).rawValue)
  }
}

/// rampctl's arguments → the request it sends, for every subcommand, with no daemon: the
/// command line goes through the same preparation and parser as `rampctl` itself.
@Suite struct RampctlRequestTests {

  static let minus6dB = pow(10, -6.0 / 20)

  @Test func informationCommands() throws {
    #expect(try request("ping") == Request(.ping))
    #expect(try request("version") == Request(.version))
    #expect(try request("status") == Request(.status))
    #expect(try request("status", "--json", "--socket", "/tmp/x.sock") == Request(.status))
  }

  @Test func playMakesThePathAbsoluteAndReadsUnits() throws {
    let directory = FileManager.default.currentDirectoryPath
    let played = try request(
      "play", "music/song.flac", "--stream", "a", "--gain", "-6dB", "--fade-in", "3s", "--curve", "linear", "--loop",
      "--paused")
    let expected = Play(
      path: directory + "/music/song.flac", stream: "a", gain: Self.minus6dB, fadeIn: 3, curve: .linear, loop: true,
      paused: true)
    #expect(played == Request(.play(expected)))
    #expect(try request("play", "/srv/a.wav", "--gain", "50%") == Request(.play(Play(path: "/srv/a.wav", gain: 0.5))))
    #expect(try request("play", "./x/../b.wav") == Request(.play(Play(path: directory + "/b.wav"))))
  }

  /// The level-triggered crossfade's options, in rampctl's units; refused without a queue or out
  /// of range, naming the option.
  @Test func playTakesTheLevelTriggeredCrossfade() throws {
    let played = try request(
      "play", "/a.wav", "--queue", "/b.wav", "--crossfade", "2s", "--crossfade-level", "-35dB", "--crossfade-window",
      "8s")
    let expected = Play(
      path: "/a.wav", queue: ["/b.wav"], crossfade: Crossfade(duration: 2, level: -35, window: 8))
    #expect(played == Request(.play(expected)))
    let refusals = [
      (refusal("play", "/a.wav", "--crossfade-level", "-35dB"), "--crossfade-level belongs to a queue"),
      (
        refusal("play", "/a.wav", "--queue", "/b.wav", "--crossfade-level", "+6dB"),
        "--crossfade-level: crossfadeLevel: expected a level"
      ),
      (refusal("play", "/a.wav", "--queue", "/b.wav", "--crossfade-level", "loud"), "--crossfade-level"),
      (
        refusal("play", "/a.wav", "--queue", "/b.wav", "--crossfade-window", "2m"),
        "--crossfade-window: crossfadeWindow: expected above 0"
      ),
    ]
    for (refused, message) in refusals {
      #expect(refused.status == 64 && refused.message.contains(message), "\(refused.message)")
    }
  }

  /// `--loudness` needs its unit and a target in range, named in the refusal; `off` overrides
  /// the configured default.
  @Test func playTakesALoudnessTarget() throws {
    #expect(
      try request("play", "/a.wav", "--loudness", "-18LUFS")
        == Request(.play(Play(path: "/a.wav", loudness: .target(-18)))))
    #expect(
      try request("play", "/a.wav", "--loudness", "-23 lufs")
        == Request(.play(Play(path: "/a.wav", loudness: .target(-23)))))
    #expect(try request("play", "/a.wav", "--loudness", "off") == Request(.play(Play(path: "/a.wav", loudness: .off))))
    let refusals = [
      (
        refusal("play", "/a.wav", "--loudness", "5"),
        "--loudness: '5' is not valid (no unit: write LUFS after the number)"
      ),
      (refusal("play", "/a.wav", "--loudness", "-18"), "--loudness: '-18' is not valid (no unit: write LUFS"),
      (refusal("play", "/a.wav", "--loudness", "+3LUFS"), "--loudness: '+3LUFS' is above the maximum, -5 LUFS"),
      (refusal("play", "/a.wav", "--loudness", "-18dB"), "--loudness: '-18dB' is not valid (no LUFS unit)"),
    ]
    for (refused, message) in refusals {
      #expect(refused.status == 64 && refused.message.contains(message), "\(refused.message)")
    }
  }

  @Test func transportCommands() throws {
    #expect(try request("stop") == Request(.stop(Transport())))
    #expect(
      try request("stop", "s1", "--fade", "2s", "--curve", "ease-out")
        == Request(.stop(Transport(stream: "s1", fade: 2, curve: .easeOut))))
    #expect(try request("pause", "--fade", "500ms") == Request(.pause(Transport(fade: 0.5))))
    #expect(try request("resume", "a") == Request(.resume(Transport(stream: "a"))))
    #expect(try request("seek", "s1", "1m30s") == Request(.seek(Seek(stream: "s1", position: 90))))
  }

  @Test func fadeTakesKeyTargetAndEveryRampOption() throws {
    let fade = try request(
      "fade", "master.gain", "-12dB", "--duration", "2s", "--curve", "ease-in", "--space", "db", "--slope", "--name",
      "duck", "--from", "1")
    let expected = Fade(
      kind: .fade, key: "master.gain", from: 1, to: pow(10, -12.0 / 20), duration: 2, curve: .easeIn,
      space: .decibels, continuity: .slope, name: "duck")
    #expect(fade == Request(.fade(expected)))
    // A bare stream id is that stream's gain.
    #expect(try request("fade", "s1", "0") == Request(.fade(Fade(kind: .fade, key: "streams.s1.gain", to: 0))))
  }

  /// fade, fade-in and fade-out share one summary, one --wait and one record of what was typed.
  @Test func theThreeFadesReportWhatWasTypedAndWaitAlike() throws {
    let commands: [any DaemonCommand] = [
      try #require(
        RampCtl.parseAsRoot(Arguments.prepared(["fade", "s1", "+3dB", "--from", "50%", "--wait"])) as? FadeCommand),
      try #require(
        RampCtl.parseAsRoot(Arguments.prepared(["fade-in", "s1", "--to", "+3dB", "--from", "50%", "--wait"]))
          as? FadeInCommand),
      try #require(
        RampCtl.parseAsRoot(Arguments.prepared(["fade-out", "s1", "--to", "+3dB", "--from", "50%", "--wait"]))
          as? FadeOutCommand),
    ]
    let reply: JSONValue = ["key": "streams.s1.gain", "to": 0.5, "duration": 2, "animation": 7]
    for command in commands {
      #expect(command.typed == ["to": "+3dB", "from": "50%"], "\(type(of: command))")
      #expect(command.summary(of: reply) == "streams.s1.gain → 0.5 (-6.02 dB) over 2s (#7)")
      let wait = try #require(command.rampWait(for: reply))
      #expect(wait.animations == [7] && wait.observe == "streams.s1.gain" && wait.duration == 2)
    }
  }

  @Test func fadeInAndOutDefaultToMasterGain() throws {
    #expect(try request("fade-in") == Request(.fade(Fade(kind: .fadeIn))))
    #expect(
      try request("fade-in", "s2", "--to", "-6dB", "--duration", "1s")
        == Request(.fade(Fade(kind: .fadeIn, key: "streams.s2.gain", to: Self.minus6dB, duration: 1))))
    #expect(
      try request("fade-out", "--duration", "10s", "--then", "stop")
        == Request(.fade(Fade(kind: .fadeOut, duration: 10, then: .stop))))
    #expect(
      try request("fade-out", "streams.a.gain", "--then", "pause", "--curve", "qsin")
        == Request(.fade(Fade(kind: .fadeOut, key: "streams.a.gain", curve: .fade(.qsin), then: .pause))))
  }

  @Test func setTakesDurationOrInstant() throws {
    #expect(
      try request("set", "master.gain", "-6dB", "--duration", "500ms")
        == Request(.set(SetValue(key: "master.gain", value: Self.minus6dB, duration: 0.5))))
    #expect(
      try request("set", "s1", "50%", "--instant")
        == Request(.set(SetValue(key: "streams.s1.gain", value: 0.5, duration: 0))))
    #expect(
      try request("set", "master.gain", "0.8", "--curve", "ease-in-out", "--space", "power", "--slope")
        == Request(
          .set(SetValue(key: "master.gain", value: 0.8, curve: .easeInEaseOut, space: .power, continuity: .slope))))
    #expect(try request("set", "master.gain", "1") == Request(.set(SetValue(key: "master.gain", value: 1))))
  }

  @Test func propertyCommands() throws {
    #expect(try request("get") == Request(.get(key: "master.gain")))
    #expect(try request("get", "streams.a.gain") == Request(.get(key: "streams.a.gain")))
    #expect(try request("cancel", "master.gain") == Request(.cancel(key: "master.gain")))
    #expect(try request("remove", "s1") == Request(.remove(key: "streams.s1.gain", name: nil)))
    #expect(
      try request("remove", "master.gain", "--name", "duck") == Request(.remove(key: "master.gain", name: "duck")))
    #expect(try request("list") == Request(.list(prefix: nil)))
    #expect(try request("list", "streams") == Request(.list(prefix: "streams")))
    // A bare stream id, as every other command takes it: that stream's key paths.
    #expect(try request("list", "sl") == Request(.list(prefix: "streams.sl")))
    #expect(try request("list", "master") == Request(.list(prefix: "master")))
    #expect(try request("list", "mixers") == Request(.list(prefix: "mixers")))
    #expect(try request("list", "streams.sl.gain") == Request(.list(prefix: "streams.sl.gain")))
  }

  @Test func animateKeyframes() throws {
    let animate = try request(
      "animate", "streams.s1.gain", "--keyframes", "1,0.5,-6dB", "--key-times", "0,0.3,1", "--mode", "cubic",
      "--duration", "1s", "--repeat", "inf", "--autoreverse", "--space", "db", "--name", "wobble")
    var expected = Animation.keyframes(
      [1, 0.5, Self.minus6dB], keyTimes: [0, 0.3, 1], duration: 1, calculationMode: .cubic)
    expected.timing.repeatCount = .infinity
    expected.timing.autoreverses = true
    expected.valueSpace = .decibels
    #expect(animate == Request(.animate(Animate(key: "streams.s1.gain", name: "wobble", animation: expected))))
  }

  @Test func animateBasicWithTiming() throws {
    let animate = try request(
      "animate", "master.gain", "--by", "-0.2", "--duration", "1s", "--additive", "--cumulative", "--repeat", "3",
      "--curve", "ease-in", "--speed", "2", "--begin", "500ms", "--fill-mode", "both", "--slope")
    var expected = Animation.basic(by: -0.2, duration: 1, timingFunction: .easeIn)
    expected.isAdditive = true
    expected.isCumulative = true
    expected.timing.repeatCount = 3
    expected.timing.speed = 2
    expected.timing.beginTime = 0.5
    expected.timing.fillMode = .both
    #expect(animate == Request(.animate(Animate(key: "master.gain", animation: expected, continuity: .slope))))
  }

  /// With --additive, keyframes are changes added to the value beneath: plain numbers, which
  /// may be negative (a tremolo under a gain's own ramps).
  @Test func additiveKeyframesAreSignedChanges() throws {
    let animate = try request(
      "animate", "master.gain", "--keyframes", "0,-0.25,0", "--additive", "--duration", "1s", "--repeat", "inf",
      "--name", "tremolo")
    var expected = Animation.keyframes([0, -0.25, 0], duration: 1)
    expected.isAdditive = true
    expected.timing.repeatCount = .infinity
    #expect(animate == Request(.animate(Animate(key: "master.gain", name: "tremolo", animation: expected))))
    #expect(throws: (any Error).self) { try request("animate", "master.gain", "--keyframes", "0,-0.25,0") }
  }

  @Test func animateSprings() throws {
    let physical = try request(
      "animate", "master.gain", "--spring", "--to", "0.5", "--mass", "2", "--stiffness", "300", "--damping", "20")
    let parameters = SpringParameters(mass: 2, stiffness: 300, damping: 20)
    #expect(
      physical == Request(.animate(Animate(key: "master.gain", animation: .spring(to: 0.5, parameters: parameters)))))
    let perceptual = try request(
      "animate", "master.gain", "--spring", "--to", "0.5", "--bounce", "0.3", "--duration", "800ms")
    let expected = Animation.spring(to: 0.5, parameters: try SpringParameters.perceptual(duration: 0.8, bounce: 0.3))
    #expect(perceptual == Request(.animate(Animate(key: "master.gain", animation: expected))))
  }

  @Test func animateFromJSONIsTheWireObject() throws {
    let animate = try request(
      "animate", "master.gain", "--animation", #"{"type":"basic","to":0.5,"duration":2}"#, "--name", "j")
    #expect(
      animate == Request(.animate(Animate(key: "master.gain", name: "j", animation: .basic(to: 0.5, duration: 2)))))
  }

  @Test func eventsAndWaiting() throws {
    #expect(try request("watch") == Request(.subscribe(events: nil)))
    #expect(
      try request("watch", "--events", "stream-started,stream-ended")
        == Request(.subscribe(events: [.streamStarted, .streamEnded])))
    #expect(try request("observe") == Request(.observe(key: "master.gain", rate: 20)))
    #expect(try request("observe", "s1", "--rate", "50") == Request(.observe(key: "streams.s1.gain", rate: 50)))
    #expect(
      try request("wait", "--animation", "3,4", "--animation", "5", "--timeout", "1m")
        == Request(.wait(Wait(animations: [3, 4, 5], timeout: 60))))
    #expect(try request("wait", "--key", "master.gain") == Request(.wait(Wait(key: "master.gain"))))
  }

  // MARK: Refusals are usage errors (64) that name the option

  @Test func badUnitsNameTheOption() {
    let duration = refusal("fade-in", "--duration", "fast")
    #expect(duration.status == 64 && duration.message.contains("--duration: 'fast'"), "\(duration.message)")
    let gain = refusal("set", "master.gain", "-6xB")
    #expect(gain.status == 64 && gain.message.contains("<value>: '-6xB'"), "the typed minus sign: \(gain.message)")
    let curve = refusal("fade", "master.gain", "0", "--curve", "wobbly")
    #expect(curve.status == 64 && curve.message.contains("--curve"), "\(curve.message)")
    let then = refusal("fade-out", "--then", "explode")
    #expect(then.status == 64 && then.message.contains("--then"), "\(then.message)")
  }

  @Test func contradictionsAndLocalChecks() {
    let both = refusal("set", "master.gain", "1", "--instant", "--duration", "1s")
    #expect(both.status == 64 && both.message.contains("--instant"), "\(both.message)")
    let kinds = refusal("animate", "master.gain", "--keyframes", "1,0", "--spring", "--to", "1")
    #expect(kinds.status == 64 && kinds.message.contains("one kind"), "\(kinds.message)")
    let keyTimes = refusal("animate", "master.gain", "--keyframes", "1,0", "--key-times", "0,2")
    #expect(keyTimes.status == 64 && keyTimes.message.contains("--key-times: keyTimes[1]"), "\(keyTimes.message)")
    let endless = refusal(
      "animate", "master.gain", "--keyframes", "1,0", "--duration", "1s", "--repeat", "inf", "--wait")
    #expect(endless.status == 64 && endless.message.contains("never ends"), "\(endless.message)")
    let stream = refusal("play", "a.wav", "--stream", "bad id")
    #expect(stream.status == 64 && stream.message.contains("--stream"), "\(stream.message)")
    let wait = refusal("wait")
    #expect(wait.status == 64 && wait.message.contains("--animation"), "\(wait.message)")
    let events = refusal("watch", "--events", "stream-stopped")
    #expect(events.status == 64 && events.message.contains("--events"), "\(events.message)")
    let missing = refusal("seek", "s1")
    #expect(missing.status == 64 && missing.message.contains("<position>"), "\(missing.message)")
  }

  // MARK: The command line itself

  @Test func negativeValuesAreNotOptions() {
    #expect(
      Arguments.prepared(["set", "k", "-6dB", "--duration", "1s"]) == ["set", "k", "\u{2212}6dB", "--duration", "1s"])
    #expect(
      Arguments.prepared(["-inf dB", "-.5", "-h", "--", "-6"]) == ["\u{2212}inf dB", "\u{2212}.5", "-h", "--", "-6"])
    #expect(Arguments.restoringMinus("\u{2212}5.wav") == "-5.wav")
  }

  @Test func absolutePaths() {
    #expect(Parse.absolutePath("a.wav", directory: "/home/me") == "/home/me/a.wav")
    #expect(Parse.absolutePath("../b.wav", directory: "/home/me") == "/home/b.wav")
    #expect(Parse.absolutePath("/srv/c.wav", directory: "/home/me") == "/srv/c.wav")
  }

  @Test func expectedLengthOfAnimations() {
    var keyframes = Animation.keyframes([1, 0], duration: 1)
    keyframes.timing.repeatCount = 3
    keyframes.timing.autoreverses = true
    #expect(AnimateCommand.expectedLength(of: keyframes) == 6)
    keyframes.timing.repeatCount = .infinity
    #expect(AnimateCommand.expectedLength(of: keyframes) == .infinity)
    #expect(AnimateCommand.expectedLength(of: .basic(to: 1)) == nil, "rampd's default duration")
  }
}

/// `--at` and the repeat options on every command that changes sound; `alarm` and `sleep`.
@Suite struct RampctlScheduleTests {

  @Test(arguments: [
    ["play", "/a.wav"], ["stop"], ["pause", "s1"], ["resume"], ["seek", "s1", "10s"], ["fade", "master.gain", "0.5"],
    ["fade-in"], ["fade-out"], ["set", "master.gain", "-6dB"], ["animate", "master.gain", "--to", "0.5"],
    ["cancel", "master.gain"], ["remove", "master.gain"],
  ])
  func everyCommandThatChangesSoundTakesAt(words: [String]) throws {
    let later = try RampCtl.parseAsRoot(Arguments.prepared(words + ["--at", "+20m"])) as! any DaemonCommand
    let scheduled = try later.request()
    #expect(scheduled.at == .delay(1200) && scheduled.ack == .scheduled, "\(words)")
    let daily =
      try RampCtl.parseAsRoot(Arguments.prepared(words + ["--at", "07:00", "--weekdays"])) as! any DaemonCommand
    let repeating = try daily.request()
    #expect(repeating.at == nil && repeating.repeats == .daily(seconds: 25_200, days: Recurrence.weekdays), "\(words)")
    #expect(repeating.ack == .scheduled)
  }

  @Test func repeatOptions() throws {
    #expect(
      try request("stop", "--at", "22:30:15", "--daily").repeats == .daily(seconds: 81_015, days: Recurrence.everyDay))
    #expect(try request("stop", "--at", "8:00", "--days", "sat,sun").repeats == .daily(seconds: 28_800, days: [0, 6]))
    let every = try request("play", "/a.wav", "--every", "30m", "--at", "+10s")
    #expect(every.repeats == .every(seconds: 1800) && every.at == .delay(10))
    #expect(try request("play", "/a.wav", "--every", "90s").at == nil)
  }

  @Test func alarmIsAScheduledPlayThatFadesInInDecibels() throws {
    let alarm = try request("alarm", "07:00", "/wake.flac", "--weekdays", "--fade-in", "10m", "--to", "-6dB")
    let expected = Play(
      path: "/wake.flac", stream: "alarm", gain: pow(10, -6.0 / 20), fadeIn: 600, curve: .linear,
      space: .decibels, loop: true)
    #expect(alarm.command == .play(expected))
    #expect(alarm.repeats == .daily(seconds: 25_200, days: Recurrence.weekdays) && alarm.tag == "alarm")
    #expect(alarm.ack == .scheduled && alarm.at == nil)
    let once = try request("alarm", "06:30", "/wake.flac", "--no-loop")
    #expect(once.repeats == nil && once.at != nil && once.ack == .scheduled)
  }

  @Test func sleepIsAFadeAStopAndTheLevelBack() throws {
    let sleep = try #require(RampCtl.parseAsRoot(["sleep", "30m"]) as? SleepCommand)
    let requests = try sleep.requests(level: 0.8)
    #expect(requests.map(\.at) == [.delay(1500), .delay(1800.25), .delay(1801.25)])
    #expect(requests.allSatisfy { $0.tag == "sleep" && $0.yield == "master.gain" && $0.ack == .scheduled })
    #expect(
      requests[0].command
        == .fade(Fade(kind: .fade, key: "master.gain", to: 0, duration: 300, curve: .linear, space: .decibels)))
    #expect(requests[2].command == .set(SetValue(key: "master.gain", value: 0.8, duration: 0)))
    // The default fade (5m) takes all of a shorter time.
    let short = try #require(RampCtl.parseAsRoot(["sleep", "1m"]) as? SleepCommand)
    #expect(try short.requests(level: 1).map(\.at) == [.delay(0), .delay(60.25), .delay(61.25)])
    let whole = try #require(RampCtl.parseAsRoot(["sleep", "10m", "--fade", "10m"]) as? SleepCommand)
    #expect(try whole.requests(level: 1).map(\.at) == [.delay(0), .delay(600.25), .delay(601.25)])
  }

  /// A sleep timer of no time is refused, and so is a --fade longer than the time (it is not
  /// shortened without a word), each naming what is wrong.
  @Test func sleepRefusesNoTimeAndAFadeLongerThanIt() {
    let none = refusal("sleep", "0s")
    #expect(none.status == 64 && none.message.contains("<time>: must be more than 0s, got '0s'"), "\(none)")
    let long = refusal("sleep", "5m", "--fade", "10m")
    #expect(
      long.status == 64 && long.message.contains("--fade: '10m' is longer than the time, '5m'; give at most 5m"),
      "\(long)")
  }

  /// `alarm --help` names only its own options (its time is <time>, it has no --at nor --every),
  /// and no help of any command says a default twice (its own words and ArgumentParser's).
  @Test func helpTextsNameTheirOwnOptionsAndEachDefaultOnce() throws {
    let alarm = RampCtl.helpMessage(for: AlarmCommand.self)
    #expect(!alarm.contains("--at") && !alarm.contains("--every"), "\(alarm)")
    #expect(alarm.contains("--daily") && alarm.contains("at that time of day"), "\(alarm)")
    #expect(
      try request("alarm", "07:00", "/w.flac", "--daily").repeats == .daily(seconds: 25_200, days: Recurrence.everyDay))
    let every = refusal("alarm", "07:00", "/w.flac", "--every", "1h")
    #expect(every.status == 64 && every.message.contains("--every"), "\(every)")
    func commands(_ command: any ParsableCommand.Type) -> [any ParsableCommand.Type] {
      [command] + command.configuration.subcommands.flatMap(commands)
    }
    // Wide enough that each option's help is one line.
    for command in commands(RampCtl.self) {
      let help = RampCtl.helpMessage(for: command, columns: 1000)
      for line in help.split(separator: "\n") {
        #expect(line.ranges(of: "(default").count <= 1, "\(command.configuration.commandName ?? "?"): \(line)")
      }
    }
  }
}
