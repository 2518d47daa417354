import Foundation
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// rampd killed (SIGKILL, no chance to save anything more) and started again on the same state
/// file: levels and every acknowledged schedule are back.
@Suite(.serialized) struct RestartTests {

  @Test func levelsSurviveKill9() throws {
    let first = try DaemonProcess()
    let client = try first.client()
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0]).isOK)
    let fade = try client.request(["cmd": "fade", "to": 0.25, "duration": 0.1])
    let id = try #require(fade.result["animation"]?.int)
    #expect(try client.request(["cmd": "wait", "animations": [.integer(id)]]).isOK)
    usleep(200_000)
    first.kill()
    let second = try DaemonProcess(reusing: first.directory)
    let gain = try second.client().request(["cmd": "get", "key": "master.gain"])
    #expect(gain.result["model"]?.numberValue == 0.25 && gain.result["presentation"]?.numberValue == 0.25)
  }

  /// The levels journal has a change before its reply leaves: read the moment the reply arrives,
  /// it holds that value or a later one. Replies answered at once (one request at a time, from
  /// two connections in turn) and after the render thread (pipelined on one connection, whose
  /// requests apply in the order sent).
  @Test func theJournalHasEachLevelBeforeItsReplyArrives() throws {
    let daemon = try DaemonProcess()
    let journal = "\(daemon.directory)/state.json.levels"
    func journaled() throws -> Double {
      let text = try String(contentsOfFile: journal, encoding: .utf8)
      let entry = try JSON.parse(String(text.prefix { $0 != "\n" }))
      return try #require(entry["values"]?["master.gain"]?.numberValue, "\(text)")
    }
    let clients = [try daemon.client(), try daemon.client()]
    // Values only grow, so "that one or a later one" is "at least that one".
    var value = 0.0
    for step in 0..<200 {
      value += 0.001
      let client = clients[step % 2]
      #expect(try client.request(["cmd": "set", "key": "master.gain", "value": .number(value), "duration": 0]).isOK)
      #expect(try journaled() >= value, "step \(step)")
    }
    for round in 0..<10 {
      var lines: [(client: LineClient, value: Double)] = []
      for index in 0..<20 {
        value += 0.001
        let client = clients[round % 2]
        try client.send(
          raw: #"{"id":\#(index),"cmd":"set","key":"master.gain","value":\#(value),"duration":0}"#)
        lines.append((client, value))
      }
      for (index, line) in lines.enumerated() {
        #expect(try line.client.reply(to: index).isOK)
        #expect(try journaled() >= line.value, "round \(round), request \(index)")
      }
    }
  }

  @Test func aScheduledRampKilledHalfwayResumesWhereItWouldBe() throws {
    let first = try DaemonProcess()
    let client = try first.client()
    let reply = try client.request(["cmd": "fade", "to": 0, "duration": 2, "at": 0.2, "ack": "scheduled"])
    let id = try #require(reply.result["scheduled"]?.int, "\(reply.serialized())")
    #expect(reply.result["due"]?.stringValue != nil)
    // One second into the two-second ramp: about half done.
    usleep(1_200_000)
    let before = try #require(client.request(["cmd": "get", "key": "master.gain"]).result["presentation"]?.numberValue)
    #expect(before > 0.4 && before < 0.6, "\(before)")
    first.kill()
    let killedAt = Date()
    let second = try DaemonProcess(reusing: first.directory)
    let again = try second.client()
    let after = try #require(again.request(["cmd": "get", "key": "master.gain"]).result["presentation"]?.numberValue)
    let due = 1 - (1.0 + Date().timeIntervalSince(killedAt)) / 2
    // As far along as it would be had nothing happened (within the restart's own time), not back
    // at 1 and not jumped to 0.
    #expect(after < before && abs(after - due) < 0.15, "\(after), expected about \(due)")
    let scheduled = try #require(again.request(["cmd": "status"]).result["scheduled"]?.arrayValue)
    #expect(scheduled.map { $0["schedule"]?.int } == [id] && scheduled.first?["started"] == true)
    usleep(1_200_000)
    let end = try again.request(["cmd": "get", "key": "master.gain"])
    #expect(end.result["presentation"]?.numberValue == 0 && end.result["model"]?.numberValue == 0)
    // Over, it is no longer kept.
    #expect(try again.request(["cmd": "status"]).result["scheduled"]?.arrayValue == [])
  }

  /// A sleep timer is scheduled commands with a tag and a yield: killed and restarted, rampd
  /// has them all back, with their tag and yield, and they still give way to a newer command.
  @Test func aSleepTimerIsThereAfterARestartAndStillYields() throws {
    let first = try DaemonProcess()
    var environment = childEnvironment
    environment["RAMPD_SOCKET"] = first.socket
    let sleep = try runProcess(Executables.rampctl, ["sleep", "1h", "--fade", "10m"], environment: environment)
    #expect(sleep.status == 0, "\(sleep)")
    first.kill()
    let second = try DaemonProcess(reusing: first.directory)
    let client = try second.client()
    let kept = try #require(client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue)
    #expect(kept.map { $0["cmd"]?.stringValue } == ["fade", "stop", "set"], "\(kept)")
    #expect(kept.allSatisfy { $0["tag"] == "sleep" && $0["yield"] == "master.gain" }, "\(kept)")
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.5]).isOK)
    #expect(try client.request(["cmd": "schedules"]).result["schedules"]?.arrayValue == [])
  }

  @Test func everyAcknowledgedScheduleIsThereAfterKill9WhileAdding() throws {
    let first = try DaemonProcess()
    let client = try first.client()
    // Sent in a burst; killed while they are still arriving. Every one answered must come back.
    var lines: [String] = []
    for index in 0..<200 {
      lines.append(
        #"{"id":\#(index),"cmd":"set","key":"master.gain","value":0.5,"duration":0,"at":3600,"ack":"scheduled"}"#)
    }
    try client.send(raw: lines.joined(separator: "\n"))
    var acknowledged: [Int] = []
    while acknowledged.count < 40 {
      let line = try client.readLine()
      if let id = line.result["scheduled"]?.int { acknowledged.append(id) }
    }
    first.kill()
    // Replies already written but not yet read were acknowledged too.
    while let line = try? client.readLine(), let id = line.result["scheduled"]?.int { acknowledged.append(id) }
    let second = try DaemonProcess(reusing: first.directory)
    let kept = try #require(second.client().request(["cmd": "status"]).result["scheduled"]?.arrayValue)
    let ids = Set(kept.compactMap { $0["schedule"]?.int })
    #expect(
      acknowledged.count >= 40 && Set(acknowledged).isSubset(of: ids), "\(acknowledged.count) acked, \(ids.count) kept")
  }

  /// A timeline script's line (plain `at`: its reply waits for its time) is saved too.
  @Test func aPlainScheduledRequestSurvivesKill9() throws {
    let first = try DaemonProcess()
    let client = try first.client()
    // Due in 3 s: a restart on a busy machine takes more than a second.
    try client.send(raw: #"{"id":1,"cmd":"set","key":"master.gain","value":0.3,"duration":0,"at":3}"#)
    #expect(try client.request(["cmd": "ping"]).isOK)
    first.kill()
    let second = try DaemonProcess(reusing: first.directory)
    let again = try second.client()
    #expect(try again.request(["cmd": "status"]).result["scheduled"]?.arrayValue?.count == 1)
    usleep(3_200_000)
    #expect(try again.request(["cmd": "get", "key": "master.gain"]).result["model"]?.numberValue == 0.3)
    #expect(try again.request(["cmd": "status"]).result["scheduled"]?.arrayValue == [])
  }

  @Test func aTruncatedStateFileNeverStopsTheDaemon() throws {
    let first = try DaemonProcess()
    let client = try first.client()
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0]).isOK)
    #expect(try client.request(["cmd": "fade", "to": 0.1, "duration": 1, "at": 600, "ack": "scheduled"]).isOK)
    #expect(first.stop() == 0)
    let path = "\(first.directory)/state.json"
    let whole = try Data(contentsOf: URL(fileURLWithPath: path))
    #expect(whole.count > 100)
    // A cut that removes only the final newline leaves a whole file: cuts stop before it.
    let content = whole.count - whole.reversed().prefix { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: " ") }.count
    for length in stride(from: 0, to: content, by: max(content / 12, 1)) {
      try whole.prefix(length).write(to: URL(fileURLWithPath: path))
      let daemon = try DaemonProcess(reusing: first.directory)
      let gain = try daemon.client().request(["cmd": "get", "key": "master.gain"])
      // Unreadable: started afresh at unity, the file moved aside.
      #expect(gain.result["model"]?.numberValue == 1, "cut at \(length): \(gain.serialized())")
      #expect(daemon.stop() == 0)
      #expect(daemon.log.contains("corrupt"), "cut at \(length)")
    }
  }
}

/// Kill -9 at random moments under load, then a restart on the same state: nothing acknowledged is
/// lost. Rounds with a seeded random moment (the seed is printed; RAMPD_TEST_SEED repeats a run).
@Suite(.serialized) struct KillUnderLoadTests {
  /// What one client sent, in order, and which of it was acknowledged.
  final class Sent: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [(value: Double, acknowledged: Bool, schedule: Int?)] = []

    func sending(_ value: Double) -> Int {
      lock.withLock {
        entries.append((value, false, nil))
        return entries.count - 1
      }
    }

    func acknowledged(_ index: Int, schedule: Int? = nil) {
      lock.withLock { entries[index] = (entries[index].value, true, schedule) }
    }

    /// The values the key may hold now: the last acknowledged one and any sent after it (those may
    /// or may not have been applied). Nil when nothing was acknowledged yet.
    var possible: [Double]? {
      lock.withLock {
        guard let last = entries.lastIndex(where: \.acknowledged) else { return nil }
        return entries[last...].map(\.value)
      }
    }

    /// Every value sent, acknowledged or not.
    var sent: [Double] { lock.withLock { entries.map(\.value) } }

    var schedules: [Int] { lock.withLock { entries.compactMap(\.schedule) } }
    var count: Int { lock.withLock { entries.filter(\.acknowledged).count } }
  }

  @Test func nothingAcknowledgedIsLostToKill9UnderLoad() throws {
    let seed =
      ProcessInfo.processInfo.environment["RAMPD_TEST_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...999_999)
    print("kill -9 under load: seed \(seed) (RAMPD_TEST_SEED=\(seed) repeats it)")
    var random = SplitMix(seed: seed)
    let scratch = NSTemporaryDirectory() + "rampd-kill-\(getpid())"
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let library = "\(scratch)/libasound_module_ctl_recorder.so"
    try Fixture.compile("ctl_recorder.c", to: library)
    let configuration = """
      [[mixer]]
      name = "m1"
      card = "rampd_kill_ctl1"
      element = "Master"
      [[mixer]]
      name = "m2"
      card = "rampd_kill_ctl2"
      element = "Master"
      """
    let alsa = """
      ctl_type.recorder { lib "\(library)" }
      ctl.rampd_kill_ctl1 { type recorder; log "\(scratch)/m1.log" }
      ctl.rampd_kill_ctl2 { type recorder; log "\(scratch)/m2.log" }
      """
    // The first daemon owns the directory (its state file) and removes it when it goes.
    var first: DaemonProcess?
    var directory: String?
    var farSchedules: [Int] = []
    var expected: [String: [Double]] = [:]
    var counter = 0
    for round in 0..<5 {
      let daemon = try DaemonProcess(extraConfiguration: configuration, extraALSA: alsa, reusing: directory)
      directory = daemon.directory
      if first == nil { first = daemon }
      if round > 0 {
        try check(daemon, expected: expected, farSchedules: farSchedules, round: round)
      }
      let master = Sent()
      let mixer = Sent()
      let far = Sent()
      let soon = Sent()
      let socket = daemon.socket
      let start = Date().timeIntervalSince1970
      let base = counter
      counter += 100_000
      let writers: [@Sendable () throws -> Void] = [
        // Instant sets of master.gain: answered as soon as they are queued.
        {
          let client = try LineClient(path: socket)
          for k in 1..<100_000 {
            let value = Double(base + k) / 1_000_000
            let index = master.sending(value)
            guard try client.request(["cmd": "set", "key": "master.gain", "value": .number(value), "duration": 0]).isOK
            else { return }
            master.acknowledged(index)
          }
        },
        // Sets of a mixer key path, some ramped: answered once applied.
        {
          let client = try LineClient(path: socket)
          for k in 1..<100_000 {
            let value = Double(base + k) / 1_000_000
            let index = mixer.sending(value)
            let request: JSONObject = [
              "cmd": "set", "key": "mixers.m1.volume", "value": .number(value),
              "duration": .number(k % 3 == 0 ? 0.05 : 0),
            ]
            guard try client.request(request).isOK else { return }
            mixer.acknowledged(index)
          }
        },
        // Ramps an hour away, acknowledged once saved.
        {
          let client = try LineClient(path: socket)
          for k in 1..<100_000 {
            let index = far.sending(0)
            let reply = try client.request([
              "cmd": "fade", "to": 0.1, "duration": 5, "at": .number(3600 + Double(k)), "ack": "scheduled",
            ])
            guard let id = reply.result["scheduled"]?.int else { return }
            far.acknowledged(index, schedule: id)
          }
        },
        // Sets of another mixer due within the second, each later than the one before: the last
        // one saved is the value the mixer ends at, before or after a restart.
        {
          let client = try LineClient(path: socket)
          for k in 1..<100_000 {
            let value = Double(base + k) / 1_000_000
            let index = soon.sending(value)
            let at = RFC3339.format(start + 0.4 + Double(k) * 0.002)
            let request: JSONObject = [
              "cmd": "set", "key": "mixers.m2.volume", "value": .number(value), "duration": 0, "at": .string(at),
              "ack": "scheduled",
            ]
            guard let id = try client.request(request).result["scheduled"]?.int else { return }
            soon.acknowledged(index, schedule: id)
          }
        },
      ]
      let done = DispatchGroup()
      for writer in writers {
        done.enter()
        Thread {
          _ = try? writer()
          done.leave()
        }.start()
      }
      let delay = 0.3 + 1.2 * random.unit()
      usleep(UInt32(delay * 1e6))
      daemon.kill()
      done.wait()
      print(
        "kill -9 round \(round) after \(String(format: "%.2f", delay)) s: acknowledged \(master.count) master sets,"
          + " \(mixer.count) mixer sets, \(far.count) + \(soon.count) schedules")
      farSchedules += far.schedules
      for (key, sent) in [("master.gain", master), ("mixers.m1.volume", mixer), ("mixers.m2.volume", soon)] {
        if let possible = sent.possible {
          expected[key] = possible
        } else if expected[key] != nil {
          // Nothing acknowledged this round: the value from before, or one sent in this round
          // (saved, and killed before its reply left).
          expected[key]! += sent.sent
        }
      }
      // The soon-due sets, all due by now: the restart applies those it kept.
      usleep(UInt32(max(0, start + 0.6 + Double(soon.count + 1) * 0.002 - Date().timeIntervalSince1970) * 1e6))
    }
    let last = try DaemonProcess(extraConfiguration: configuration, extraALSA: alsa, reusing: directory)
    try check(last, expected: expected, farSchedules: farSchedules, round: 5)
    #expect(last.stop() == 0)
    #expect(first != nil)
  }

  private func check(_ daemon: DaemonProcess, expected: [String: [Double]], farSchedules: [Int], round: Int) throws {
    let client = try daemon.client()
    // Schedules restored as already due were applied when the daemon started.
    usleep(100_000)
    for (key, possible) in expected.sorted(by: { $0.key < $1.key }) {
      let model = try #require(client.request(["cmd": "get", "key": .string(key)]).result["model"]?.numberValue)
      #expect(
        possible.contains(model),
        "round \(round): \(key) is \(model); acknowledged \(possible.first ?? -1), sent after it \(possible.dropFirst().prefix(3))"
      )
    }
    let listed = Set(
      try client.request(["cmd": "status"]).result["scheduled"]?.arrayValue?.compactMap { $0["schedule"]?.int } ?? [])
    let missing = farSchedules.filter { !listed.contains($0) }
    #expect(missing.isEmpty, "round \(round): acknowledged schedules lost: \(missing.prefix(10))")
  }
}

extension DaemonProcess {
  /// SIGKILL: no chance to save anything more or to drain.
  func kill() {
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }
}
