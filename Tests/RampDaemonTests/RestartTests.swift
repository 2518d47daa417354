import Foundation
import RampProtocol
import Testing

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
    try client.send(raw: #"{"id":1,"cmd":"set","key":"master.gain","value":0.3,"duration":0,"at":1}"#)
    #expect(try client.request(["cmd": "ping"]).isOK)
    first.kill()
    let second = try DaemonProcess(reusing: first.directory)
    let again = try second.client()
    #expect(try again.request(["cmd": "status"]).result["scheduled"]?.arrayValue?.count == 1)
    usleep(1_200_000)
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
    for length in stride(from: 0, to: whole.count, by: max(whole.count / 12, 1)) {
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

extension DaemonProcess {
  /// SIGKILL: no chance to save anything more or to drain.
  func kill() {
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }
}
