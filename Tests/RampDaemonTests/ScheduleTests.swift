import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Repeating schedules, alarms and sleep timers, through the real rampd and rampctl, checked on
/// the samples rampd wrote to ALSA's `file` plugin.
@Suite(.serialized) struct ScheduleTests {
  static let rate = 48_000.0

  /// A daemon whose output has room (200 ms) to ride out a loaded machine, so that the samples
  /// checked are the ones a late period would not have skipped. Without the limiter: the tests
  /// read the gain off full-scale files.
  static func roomyDaemon(environment: [String: String] = [:], name: String = #function) throws -> DaemonProcess {
    try DaemonProcess(name: name, limiter: "off", periodMs: 10, bufferMs: 200, environment: environment)
  }

  func rampctl(_ arguments: [String], _ daemon: DaemonProcess, environment extra: [String: String] = [:]) throws
    -> ProcessOutcome
  {
    var environment = childEnvironment
    environment["RAMPD_SOCKET"] = daemon.socket
    environment.merge(extra) { $1 }
    return try runProcess(Executables.rampctl, arguments, environment: environment)
  }

  /// `HH:MM:SS` in `zone`, `seconds` from now (rounded up to a whole second), and that instant.
  static func clock(in zone: TimeZone, secondsFromNow seconds: Double) -> (text: String, instant: Double) {
    let instant = (Date().timeIntervalSince1970 + seconds).rounded(.up)
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = zone
    let parts = calendar.dateComponents([.hour, .minute, .second], from: Date(timeIntervalSince1970: instant))
    func two(_ value: Int?) -> String { String(format: "%02d", value ?? 0) }
    return ("\(two(parts.hour)):\(two(parts.minute)):\(two(parts.second))", instant)
  }

  /// The index of the first sample that is not silent.
  static func firstSound(_ samples: [Float], from start: Int = 0) -> Int? {
    samples[start...].firstIndex { $0 != 0 }
  }

  @Test func aRepeatingScheduleFiresAgainAfterARestart() throws {
    let first = try Self.roomyDaemon()
    let file = try first.constantFile("beep", seconds: 0.2, left: 0.25, right: 0.25)
    let client = try first.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["schedule-applied"]]).isOK)
    let reply = try client.request([
      "cmd": "play", "path": .string(file), "repeat": ["every": 1.5], "at": 0.5, "tag": "beeps",
    ])
    let id = try #require(reply.result["scheduled"]?.int, "\(reply.serialized())")
    let applied = try client.waitForEvent { $0["event"] == "schedule-applied" && $0["schedule"]?.int == id }
    #expect(applied["tag"] == "beeps" && applied["command"] == "play" && applied["next"]?.stringValue != nil)
    // Applied a buffer (200 ms) before it is heard: killed before its time, rampd would play it
    // again after the restart, as it should, since nobody heard it. Kill it once it was heard.
    usleep(300_000)
    first.kill()
    try FileManager.default.moveItem(atPath: first.recording, toPath: first.recording + ".before")
    let second = try DaemonProcess(periodMs: 10, bufferMs: 200, reusing: first.directory)
    let again = try second.client()
    #expect(try again.request(["cmd": "subscribe", "events": ["schedule-applied"]]).isOK)
    let listed = try #require(again.request(["cmd": "schedules"]).result["schedules"]?.arrayValue)
    #expect(listed.count == 1 && listed[0]["schedule"]?.int == id && listed[0]["repeat"] == ["every": 1.5])
    // Restored from the state file, it comes again at its next time, and again after that.
    let restarted = try again.waitForEvent { $0["event"] == "schedule-applied" && $0["schedule"]?.int == id }
    let next = try #require(restarted["next"]?.stringValue.flatMap(RFC3339.parse))
    _ = try again.waitForEvent(timeout: 5) {
      $0["event"] == "schedule-applied" && $0["schedule"]?.int == id && $0 != restarted
    }
    #expect(abs(Date().timeIntervalSince1970 - next) < 0.5)
    usleep(400_000)
    #expect(second.stop() == 0)
    // Every beep rampd played after the restart is the file at its level: 0.25 on every sample
    // between the declick ramps (10 ms), and 0.2 s long.
    let played = try second.played(channel: 0)
    var start = 0
    var beeps = 0
    while let onset = Self.firstSound(played, from: start) {
      let end = played[onset...].firstIndex(of: 0) ?? played.count
      #expect(abs(Double(end - onset) - 0.2 * Self.rate) <= 2, "beep \(beeps) lasts \(end - onset) samples")
      let plateau = played[(onset + 480)..<(end - 480)]
      #expect(plateau.allSatisfy { $0 == 0.25 }, "beep \(beeps)")
      beeps += 1
      start = end
    }
    #expect(beeps == 2)
  }

  /// A repeat at a time of day is in rampd's local time (`TZ`): the due time of 'HH:MM:SS' in
  /// Europe/Berlin is that instant, not the UTC one an hour off; it fires then and comes back a
  /// day later. What happens when the day has a daylight-saving change is `RecurrenceTests`'.
  @Test func aTimeOfDayIsInTheDaemonsTimeZone() throws {
    let zone = TimeZone(identifier: "Europe/Berlin")!
    let daemon = try DaemonProcess(environment: ["TZ": "Europe/Berlin"])
    let client = try daemon.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["schedule-applied"]]).isOK)
    let (text, instant) = Self.clock(in: zone, secondsFromNow: 3)
    let reply = try client.request([
      "cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0, "repeat": ["time": .string(text)],
    ])
    let id = try #require(reply.result["scheduled"]?.int, "\(reply.serialized())")
    #expect(reply.result["due"]?.stringValue.flatMap(RFC3339.parse) == instant, "\(reply.serialized())")
    let applied = try client.waitForEvent { $0["event"] == "schedule-applied" && $0["schedule"]?.int == id }
    #expect(abs(Date().timeIntervalSince1970 - instant) < 0.5)
    let next = try #require(applied["next"]?.stringValue.flatMap(RFC3339.parse))
    let expected = Recurrence.daily(seconds: Recurrence.clockSeconds(text)!, days: Recurrence.everyDay).next(
      after: instant, start: instant, offset: { zone.secondsFromGMT(for: Date(timeIntervalSince1970: $0)) })
    #expect(next == expected && next - instant >= 82_800 && next - instant <= 90_000)
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"]?.numberValue == 0.5)
    // rampctl shows the schedule with its next time and how it repeats.
    let listed = try rampctl(["schedules"], daemon, environment: ["TZ": "Europe/Berlin"])
    #expect(listed.status == 0 && listed.stdout.contains("#\(id) set at") && listed.stdout.contains("daily"))
  }

  /// `--at HH:MM:SS` is rampctl's local time (`TZ`, read through the C library: without ICU,
  /// Foundation's `TimeZone.current` is GMT), the due time it prints too: in New York, the
  /// instant that clock shows there, not the UTC one four or five hours off.
  @Test func anAtClockTimeIsInRampctlsTimeZone() throws {
    let zone = TimeZone(identifier: "America/New_York")!
    let daemon = try DaemonProcess()
    let (text, instant) = Self.clock(in: zone, secondsFromNow: 3600)
    let set = try rampctl(
      ["fade", "master.gain", "0.5", "--at", text, "--duration", "1s"], daemon,
      environment: ["TZ": "America/New_York"])
    #expect(set.status == 0, "\(set)")
    let status = try daemon.client().request(["cmd": "status"])
    let entry = try #require(status.result["scheduled"]?.arrayValue?.first, "\(status.serialized())")
    #expect(entry["due"]?.stringValue.flatMap(RFC3339.parse) == instant, "\(status.serialized())")
    let local = HumanUnits.format(
      localTime: instant, offset: { zone.secondsFromGMT(for: Date(timeIntervalSince1970: $0)) })
    #expect(local.hasSuffix("-04:00") || local.hasSuffix("-05:00"), "\(local)")
    #expect(set.stdout.contains("takes effect at \(local)"), "\(set)")
  }

  /// `rampctl alarm`: at its time the file starts from silence and ramps, straight in dB, to the
  /// capped level, then stays there, on every sample.
  @Test func anAlarmFadesInToItsCappedLevel() throws {
    let daemon = try Self.roomyDaemon()
    let file = try daemon.constantFile("wake", seconds: 4)
    let (text, _) = Self.clock(in: .current, secondsFromNow: 3)
    let set = try rampctl(["alarm", text, file, "--fade-in", "1s", "--to", "-6dB", "--no-loop"], daemon)
    #expect(set.status == 0, "\(set)")
    let status = try daemon.client().request(["cmd": "status"])
    let entry = try #require(status.result["scheduled"]?.arrayValue?.first)
    #expect(entry["cmd"] == "play" && entry["tag"] == "alarm", "\(status.serialized())")
    let client = try daemon.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["stream-started"]]).isOK)
    _ = try client.waitForEvent(timeout: 8) { $0["event"] == "stream-started" && $0["stream"] == "alarm" }
    usleep(2_500_000)  // the ramp and half a second at the cap, before rampd's own fade-out at SIGTERM
    #expect(daemon.stop() == 0)
    let played = try daemon.played(channel: 0)
    let onset = try #require(Self.firstSound(played))
    let cap = pow(10, -6.0 / 20)
    let length = Int(Self.rate)
    // Sample n of the ramp is -60 dB + 54 dB·n/N (the dB space's floor is silence), then the cap.
    var worst = 0.0
    for n in 1..<length {
      let expected = pow(10, (-60 + 54 * Double(n) / Double(length)) / 20)
      worst = max(worst, abs(Double(played[onset - 1 + n]) - expected))
    }
    #expect(worst < 1e-6, "largest error on the ramp \(worst)")
    let after = played[(onset + length)..<min(played.count, onset + length + 24_000)]
    #expect(after.count == 24_000 && after.allSatisfy { abs(Double($0) - cap) < 1e-6 })
  }

  /// A daily alarm refused when its time comes (a stream `alarm` is already playing): subscribers
  /// hear `schedule-failed` with the schedule, the command, the reason (code, field, message) and
  /// its next time; `rampctl watch` prints it; `status` and `schedules` keep the refusal with its
  /// time, `rampctl schedules` prints it, and so does a restarted rampd (it is in the state file).
  @Test func aRefusedAlarmIsAnnouncedAndListed() throws {
    let daemon = try Self.roomyDaemon()
    let file = try daemon.constantFile("dc", seconds: 1, left: 0.5, right: 0.5)
    let play = try rampctl(["play", file, "--stream", "alarm", "--loop"], daemon)
    #expect(play.status == 0, "\(play)")
    let client = try daemon.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["schedule-failed", "schedule-applied"]]).isOK)
    let watch = try BlockProcess(
      [Executables.rampctl, "watch", "--events", "schedule-failed", "--count", "1"],
      environment: childEnvironment.merging(["RAMPD_SOCKET": daemon.socket]) { $1 }, directory: daemon.directory)
    defer { _ = watch.wait(timeout: 0) }
    // Both subscribed before the alarm is set.
    for _ in 0..<200 {
      if try client.request(["cmd": "status"]).result["subscribers"]?.int == 2 { break }
      usleep(10_000)
    }
    let (text, instant) = Self.clock(in: .current, secondsFromNow: 3)
    let alarm = try rampctl(["alarm", text, file, "--daily"], daemon)
    #expect(alarm.status == 0, "\(alarm)")
    let failed = try client.waitForEvent(timeout: 8) { $0["event"]?.stringValue?.hasPrefix("schedule-") == true }
    let id = try #require(failed["schedule"]?.int)
    #expect(failed["event"] == "schedule-failed" && failed["command"] == "play" && failed["tag"] == "alarm")
    #expect(failed["error"]?["code"] == "stream-exists" && failed["error"]?["field"] == "stream", "\(failed)")
    let message = try #require(failed["error"]?["message"]?.stringValue)
    #expect(message == "a stream 'alarm' is already playing")
    #expect(abs(Date().timeIntervalSince1970 - instant) < 1.5)
    let next = try #require(failed["next"]?.stringValue.flatMap(RFC3339.parse))
    #expect(abs(next - instant - 86_400) <= 3_600, "comes again tomorrow: \(failed)")

    #expect(watch.wait(timeout: 5) == 0, "\(watch.text)")
    #expect(
      watch.text.contains("schedule-failed #\(id) play [alarm]: stream-exists: \(message); next at"), "\(watch.text)")

    func checkListed(_ entry: JSONValue?) {
      let failure = entry?["lastFailure"]
      #expect(entry?["schedule"]?.int == id && failure?["code"] == "stream-exists", "\(entry ?? .null)")
      #expect(failure?["message"]?.stringValue == message && failure?["field"] == "stream")
      let at = failure?["at"]?.stringValue.flatMap(RFC3339.parse) ?? 0
      #expect(abs(at - instant) < 1.5, "\(entry ?? .null)")
      #expect(entry?["due"]?.stringValue.flatMap(RFC3339.parse) == next)
    }
    checkListed(try client.request(["cmd": "status"]).result["scheduled"]?.arrayValue?.first)
    checkListed(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue?.first)
    let listed = try rampctl(["schedules"], daemon)
    #expect(listed.status == 0 && listed.stdout.contains("#\(id) play at"), "\(listed)")
    #expect(
      listed.stdout.contains("; failed at ") && listed.stdout.contains(": stream-exists: \(message)"), "\(listed)")
    let status = try rampctl(["status"], daemon)
    #expect(status.stdout.contains(": stream-exists: \(message)"), "\(status)")

    #expect(daemon.stop() == 0)
    let again = try DaemonProcess(reusing: daemon.directory)
    checkListed(try again.client().request(["cmd": "schedules"]).result["schedules"]?.arrayValue?.first)
  }

  /// `rampctl sleep`: master.gain fades out (straight in dB) over the last part, every stream
  /// stops, and master.gain is back at its level for the next play.
  @Test func aSleepTimerFadesOutAndStops() throws {
    let daemon = try Self.roomyDaemon()
    let file = try daemon.constantFile("music", seconds: 1)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["stream-ended"]]).isOK)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "music", "loop": true]).isOK)
    let sleep = try rampctl(["sleep", "2s", "--fade", "1s"], daemon)
    #expect(sleep.status == 0 && sleep.stdout.contains("fades to silence"), "\(sleep)")
    let listed = try #require(client.request(["cmd": "status"]).result["scheduled"]?.arrayValue)
    #expect(
      listed.map { $0["cmd"]?.stringValue } == ["fade", "stop", "set"] && listed.allSatisfy { $0["tag"] == "sleep" })
    let ended = try client.waitForEvent(timeout: 5) { $0["event"] == "stream-ended" && $0["stream"] == "music" }
    #expect(ended["reason"] == "stopped")
    usleep(1_500_000)
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"]?.numberValue == 1)
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
    #expect(daemon.stop() == 0)
    let played = try daemon.played(channel: 0)
    let fadeStart = try #require(played.lastIndex(of: 1))
    let length = Int(Self.rate)
    var worst = 0.0
    for n in 1..<length {
      worst = max(worst, abs(Double(played[fadeStart + n]) - pow(10, -60 * Double(n) / Double(length) / 20)))
    }
    #expect(worst < 1e-6, "largest error on the fade \(worst)")
    #expect(played[(fadeStart + length)...].allSatisfy { $0 == 0 })
  }

  /// A newer command on master.gain cancels the sleep timer: before its fade, the schedules go;
  /// during it, the fade is held where it is and the newer command takes over from there.
  @Test func aNewerMasterGainCommandCancelsTheSleepTimer() throws {
    let daemon = try Self.roomyDaemon()
    let file = try daemon.constantFile("music", seconds: 1)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "music", "loop": true]).isOK)
    #expect(try rampctl(["sleep", "6s", "--fade", "4s"], daemon).status == 0)
    usleep(3_000_000)
    // The fade began a second ago; the stop is three seconds away.
    let set = try rampctl(["set", "master.gain", "0.5", "--duration", "200ms"], daemon)
    #expect(set.status == 0, "\(set)")
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
    usleep(4_500_000)
    let status = try client.request(["cmd": "status"])
    #expect(status.result["streams"]?.arrayValue?.count == 1, "\(status.serialized())")
    let gain = try client.request(["cmd": "get", "key": "master.gain"]).result
    #expect(gain["model"]?.numberValue == 0.5 && gain["presentation"]?.numberValue == 0.5)
    #expect(daemon.stop() == 0)
    let played = try daemon.played(channel: 0)
    // At 0.5 from the end of the set's ramp until rampd's own fade-out at SIGTERM: over 4 s.
    let held = try #require(played.lastIndex(of: 0.5))
    let settled = try #require(played[..<held].lastIndex { $0 != 0.5 }) + 1
    #expect(held - settled > 4 * Int(Self.rate), "\(held - settled) samples at 0.5")
    // No jump: the level moved by no more than a ramp's step from one sample to the next.
    let fadeStart = try #require(played.lastIndex(of: 1))
    var largest: Float = 0
    for index in fadeStart..<held { largest = max(largest, abs(played[index + 1] - played[index])) }
    #expect(largest < 0.01, "largest step \(largest)")
  }

  /// One sleep timer at a time, whatever happens: a timer whose fade runs from the start
  /// (`sleep 30s`) replaced by a longer one, then cancelled; or replaced, then overruled by a
  /// `set`. The first fade stops where it is, master.gain comes back without a jump, and once
  /// settled what is heard is the model value.
  @Test(arguments: ["cancel", "set"])
  func aReplacedSleepTimerLeavesNothingBehind(ending: String) throws {
    let daemon = try Self.roomyDaemon(name: "sleep-\(ending)")
    let file = try daemon.constantFile("music", seconds: 1)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "music", "loop": true]).isOK)
    let first = try rampctl(["sleep", "30s"], daemon)
    #expect(first.status == 0, "\(first)")
    usleep(2_000_000)
    // The first timer's fade (over all of its 30 s) has been under way for 2 s.
    let second = try rampctl(["sleep", "45m"], daemon)
    #expect(second.status == 0, "\(second)")
    // The new timer, and the fade back to the level before the first (which yields to master.gain).
    let listed = try #require(client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue)
      .filter { $0["tag"] == "sleep" }
    #expect(listed.count == 3 && listed.allSatisfy { $0["started"] == false }, "only the new timer: \(listed)")
    let restore = listed.last?["request"]?["value"]?.numberValue
    #expect(restore == 1, "the new timer sets back the level before the first: \(listed)")
    usleep(500_000)
    let expected: Double
    if ending == "cancel" {
      let cancel = try rampctl(["sleep", "--cancel"], daemon)
      #expect(cancel.status == 0 && cancel.stdout.contains("cancelled"), "\(cancel)")
      expected = 1
    } else {
      #expect(try rampctl(["set", "master.gain", "0.5"], daemon).status == 0)
      expected = 0.5
    }
    usleep(3_000_000)
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
    let gain = try client.request(["cmd": "get", "key": "master.gain"]).result
    #expect(gain["model"]?.numberValue == expected && gain["presentation"]?.numberValue == expected, "\(gain)")
    #expect(try client.request(["cmd": "status"]).result["streams"]?.arrayValue?.count == 1)
    #expect(daemon.stop() == 0)
    let played = try daemon.played(channel: 0)
    let target = Float(expected)
    // Settled at the model value from the end of the last ramp until rampd's fade-out at SIGTERM.
    let held = try #require(played.lastIndex { abs(Double($0) - expected) < 1e-6 })
    let settled = try #require(played[..<held].lastIndex { abs(Double($0) - expected) >= 1e-6 }) + 1
    #expect(held - settled > Int(Self.rate), "\(held - settled) samples at \(target)")
    let start = try #require(played.firstIndex(of: 1))
    // Every ramp here moves by less than a thousandth a sample; a jump between two levels more.
    var largest: Float = 0
    var at = start
    for index in start..<held where abs(played[index + 1] - played[index]) > largest {
      largest = abs(played[index + 1] - played[index])
      at = index
    }
    #expect(largest < 0.001, "a step of \(largest) at \(Double(at - start) / Self.rate) s")
    // The first fade was heard and stopped: the level went down, then came back.
    let lowest = try #require(played[start..<held].min())
    #expect(lowest < 0.8 && lowest > 0.1, "lowest \(lowest)")
  }

  /// A schedule due within a second is already on the render thread, waiting for its sample:
  /// unscheduled there, it never applies; a newer command it yields to takes it back the same way.
  @Test func aScheduleHandedOnForItsSampleCanStillBeTakenBack() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    for round in 0..<20 {
      let scheduled = try client.request([
        "cmd": "set", "key": "master.gain", "value": 0.2, "at": 0.5, "ack": "scheduled", "tag": "soon",
        "yield": "master.gain",
      ])
      #expect(scheduled.isOK, "\(scheduled.serialized())")
      if round % 2 == 0 {
        let removed = try client.request(["cmd": "unschedule", "tag": "soon"]).result["unscheduled"]?.arrayValue
        #expect(removed?.count == 1 && removed?.first?["started"] == false, "\(removed ?? [])")
      } else {
        #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 1, "duration": 0]).isOK)
      }
    }
    usleep(1_000_000)
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"]?.numberValue == 1)
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
  }

  /// "Cancel" cancels what is not yet heard: a play scheduled 200 ms ahead and unscheduled at
  /// once is never heard, however late the render thread or the request. A play scheduled the
  /// same way and left alone, on the other channel, proves the recording hears such plays.
  @Test func aPlayUnscheduledAtOnceIsNeverHeard() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let cancelled = try daemon.constantFile("cancelled", seconds: 0.5, left: 0.25, right: 0)
    for round in 0..<10 {
      let scheduled = try client.request([
        "cmd": "play", "path": .string(cancelled), "stream": .string("c\(round)"), "at": 0.2, "ack": "scheduled",
        "tag": "soon",
      ])
      #expect(scheduled.isOK, "\(scheduled.serialized())")
      let removed = try client.request(["cmd": "unschedule", "tag": "soon"]).result["unscheduled"]?.arrayValue
      #expect(removed?.count == 1 && removed?.first?["started"] == false, "\(removed ?? [])")
    }
    let kept = try daemon.constantFile("kept", seconds: 0.3, left: 0, right: 0.5)
    let scheduled = try client.request(["cmd": "play", "path": .string(kept), "at": 0.2, "ack": "scheduled"])
    #expect(scheduled.isOK, "\(scheduled.serialized())")
    usleep(1_200_000)
    #expect(daemon.stop() == 0)
    let left = try daemon.played(channel: 0)
    let right = try daemon.played(channel: 1)
    #expect(!left.isEmpty && left.allSatisfy { $0 == 0 }, "heard: \(left.firstIndex { $0 != 0 } ?? -1)")
    #expect(right.contains(0.5), "the play left alone was not heard")
  }

  @Test func sleepTakesNoBareNumber() throws {
    let daemon = try DaemonProcess()
    for arguments in [
      ["sleep", "30"], ["sleep", "1h", "--fade", "10"], ["alarm", "07:00", "x.flac", "--fade-in", "30"],
    ] {
      let refused = try rampctl(arguments, daemon)
      #expect(
        refused.status == 64 && refused.stderr.contains("has no unit") && refused.stderr.contains("m or "), "\(refused)"
      )
    }
    #expect(try daemon.client().request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
  }

  @Test func sleepCancelRemovesItAndUnscheduleNamesBadInput() throws {
    let daemon = try DaemonProcess()
    let file = try daemon.constantFile("music", seconds: 1)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "music", "loop": true]).isOK)
    #expect(try rampctl(["sleep", "30m"], daemon).status == 0)
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue?.count == 3)
    let cancel = try rampctl(["sleep", "--cancel"], daemon)
    #expect(cancel.status == 0 && cancel.stdout.contains("cancelled"), "\(cancel)")
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
    let bad: [(JSONObject, String)] = [
      (["cmd": "unschedule", "schedule": 999], "schedule"),
      (["cmd": "play", "path": .string(file), "repeat": ["time": "24:00"]], "repeat.time"),
      (["cmd": "stop", "repeat": ["every": 0]], "repeat.every"),
      (["cmd": "stop", "repeat": ["time": "07:00", "days": ["someday"]]], "repeat.days[0]"),
      (["cmd": "set", "key": "master.gain", "value": 1, "at": 60, "yield": "master..gain"], "yield"),
    ]
    for (request, field) in bad {
      let reply = try client.request(request)
      #expect(!reply.isOK && reply.errorField == field, "\(reply.serialized())")
    }
    let refused = try rampctl(["alarm", "7am", file], daemon)
    #expect(refused.status == 64 && refused.stderr.contains("<time>"), "\(refused)")
    #expect(try rampctl(["play", file, "--at", "07:00", "--days", "mon,funday"], daemon).stderr.contains("--days"))
    // Still playing.
    #expect(try client.request(["cmd": "status"]).result["streams"]?.arrayValue?.count == 1)
  }
}
