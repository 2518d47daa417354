import Foundation
import Logging
import RampAudio
import RampDaemon
import RampProtocol
import Testing

@testable import RampTestSupport

/// Requests well formed in every way but their numbers, and the other ways one client could stop
/// or starve the daemon, on a real rampd.
@Suite struct ExtremeRequestTests {
  /// Sends `line` as written and returns its reply; the daemon must still answer a ping and a status.
  private func exchange(_ client: LineClient, _ line: String) throws -> JSONValue {
    try client.send(raw: line)
    let reply = try client.readLine()
    #expect(try client.request(["cmd": "ping"]).result["pong"] == true, "no pong after \(line)")
    #expect(try client.request(["cmd": "status"])["ok"] == true, "no status after \(line)")
    return reply
  }

  /// The line from the bug report trapped on `beginSample + count`, first in the request check and
  /// then on the render thread. Its relatives put the same extreme times in a keyframe, a spring, a
  /// group's child, a repeat and an autoreversing animation.
  @Test func theIssueLineAndItsRelativesAreRefusedNamingTheField() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let refused: [(line: String, field: String, value: String)] = [
      (
        #"{"cmd":"animate","key":"master.gain","animation":{"type":"basic","to":1,"duration":1e14,"beginTime":1e14}}"#,
        "animation.beginTime", "1e14"
      ),
      (
        #"{"cmd":"animate","key":"master.gain","animation":{"type":"keyframe","values":[0,1],"duration":1e14}}"#,
        "animation.duration", "1e14"
      ),
      (
        #"{"cmd":"animate","key":"master.gain","animation":{"type":"spring","to":1,"beginTime":-1e14}}"#,
        "animation.beginTime", "-1e14"
      ),
      (
        #"{"cmd":"animate","key":"master.gain","animation":{"type":"group","animations":[{"type":"basic","to":1,"beginTime":1e300}]}}"#,
        "animation.animations[0].beginTime", "1e300"
      ),
      (
        #"{"cmd":"animate","key":"master.gain","animation":{"type":"basic","to":1,"duration":1,"repeatDuration":1e14}}"#,
        "animation.repeatDuration", "1e14"
      ),
      (
        #"{"cmd":"animate","key":"master.gain","animation":{"type":"basic","to":1,"autoreverses":true,"timeOffset":-1e14}}"#,
        "animation.timeOffset", "-1e14"
      ),
      (#"{"cmd":"fade","to":0.5,"duration":1e14}"#, "duration", "1e14"),
      (#"{"cmd":"wait","key":"master.gain","timeout":1e300}"#, "timeout", "1e300"),
    ]
    for (line, field, value) in refused {
      let reply = try exchange(client, line)
      #expect(reply.errorCode == "out-of-range", "\(line) → \(reply.serialized())")
      #expect(reply["error"]?["field"]?.stringValue == field, "\(line) → \(reply.serialized())")
      #expect(
        reply["error"]?["message"]?.stringValue
          == "\(field): \(value) s is beyond the horizon of 1000000000 s (about 31 years)",
        "\(reply.serialized())")
    }
  }

  /// At the horizon and with counts, speeds and offsets that are not times, animations are taken
  /// and rendered: positions saturate instead of trapping.
  @Test func extremeTimesWithinTheHorizonAreRendered() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let file = try daemon.constantFile("tone", seconds: 2)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "s1", "loop": true])["ok"] == true)
    let accepted = [
      #"{"type":"basic","to":1,"duration":1e9,"beginTime":1e9}"#,
      #"{"type":"basic","from":0,"to":1,"duration":1e9,"beginTime":-1e9,"fillMode":"both","speed":1e300}"#,
      #"{"type":"keyframe","values":[0,1,0.5],"duration":1e9,"repeatCount":1e300,"autoreverses":true,"cumulative":true}"#,
      #"{"type":"spring","from":0,"to":1,"duration":5e-324,"repeatCount":"inf","timeOffset":-1e9,"additive":true}"#,
      #"{"type":"group","duration":1e9,"speed":5e-324,"animations":[{"type":"group","beginTime":-1e9,"animations":[{"type":"basic","to":1,"duration":1e9,"repeatDuration":1e9,"autoreverses":true}]}]}"#,
    ]
    for (index, animation) in accepted.enumerated() {
      let line = #"{"cmd":"animate","key":"streams.s1.gain","name":"a\#(index)","animation":\#(animation)}"#
      let reply = try exchange(client, line)
      #expect(reply["ok"] == true, "\(line) → \(reply.serialized())")
    }
    // A few blocks rendered with all of them in flight.
    usleep(100_000)
    #expect(try client.request(["cmd": "ping"]).result["pong"] == true)
    let listed = try client.request(["cmd": "get", "key": "streams.s1.gain"])
    #expect(listed["ok"] == true, "\(listed.serialized())")
  }

  /// `seek` beyond the end of the file is refused naming its length; the very end is allowed.
  @Test func aSeekPastTheEndNamesTheFilesLength() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let file = try daemon.constantFile("tone", seconds: 2)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "s1", "loop": true])["ok"] == true)
    let refused = try client.request(["cmd": "seek", "stream": "s1", "position": 600])
    #expect(refused.errorCode == "out-of-range", "\(refused.serialized())")
    #expect(refused["error"]?["field"] == "position", "\(refused.serialized())")
    #expect(
      refused["error"]?["message"] == "position: 600 s is past the end of stream 's1', whose file is 2 s long",
      "\(refused.serialized())")
    let inside = try client.request(["cmd": "seek", "stream": "s1", "position": 1.5])
    #expect(inside["ok"] == true, "\(inside.serialized())")
    // In a batch, the whole batch is refused and the field is named inside it.
    let batch = try client.request([
      "cmd": "batch",
      "commands": [
        ["cmd": "set", "key": "master.gain", "value": 0.5], ["cmd": "seek", "stream": "s1", "position": 3],
      ],
    ])
    #expect(batch.errorCode == "out-of-range", "\(batch.serialized())")
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1)
  }

  /// The sum of every connection's observe rates is held to `[limits] observe-budget`.
  @Test func observeRatesShareADaemonWideBudget() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[limits]\nobserve-budget = 300")
    let first = try daemon.client()
    let second = try daemon.client()
    #expect(try first.request(["cmd": "observe", "key": "master.gain", "rate": 200])["ok"] == true)
    let over = try second.request(["cmd": "observe", "key": "master.gain", "rate": 150])
    #expect(over.errorCode == "limit-exceeded", "\(over.serialized())")
    #expect(over["error"]?["field"] == "rate", "\(over.serialized())")
    #expect(
      over["error"]?["message"]
        == "rate: 150 Hz would bring the observe rates of every connection to 350 Hz, above limits.observe-budget (300 Hz)",
      "\(over.serialized())")
    #expect(try second.request(["cmd": "observe", "key": "master.gain", "rate": 100])["ok"] == true)
    // Observing the same key again replaces the old rate rather than adding to it.
    #expect(try first.request(["cmd": "observe", "key": "master.gain", "rate": 200])["ok"] == true)
    // What an unobserve and a closed connection held is given back: 100 Hz in use, then 200.
    #expect(try first.request(["cmd": "unobserve", "key": "master.gain"])["ok"] == true)
    #expect(try second.request(["cmd": "observe", "key": "master.gain", "rate": 200])["ok"] == true)
    let third = try daemon.client()
    #expect(try third.request(["cmd": "observe", "key": "master.gain", "rate": 100])["ok"] == true)
    #expect(try third.request(["cmd": "observe", "key": "master.gain", "rate": 150]).errorCode == "limit-exceeded")
    shutdown(second.descriptor, Int32(SHUT_RDWR))
    let deadline = Date().addingTimeInterval(5)
    var again = JSONValue.null
    repeat {
      again = try third.request(["cmd": "observe", "key": "master.gain", "rate": 200])
      if again["ok"] == true { break }
      usleep(20_000)
    } while Date() < deadline
    #expect(again["ok"] == true, "\(again.serialized())")
  }

  /// The render thread has room for a fixed number of published values, reserved at start: an
  /// `observe` past it is refused, naming the field, and an `unobserve` gives room back.
  @Test func observationsPastTheRenderThreadsRoomAreRefused() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[limits]\nobservers-per-client = 1024")
    let first = try daemon.client()
    let second = try daemon.client()
    for index in 0..<1024 {
      let reply = try first.request(["cmd": "observe", "key": .string("a.k\(index)"), "rate": 0.5])
      guard reply.isOK else {
        Issue.record("observation \(index): \(reply.serialized())")
        return
      }
    }
    var refused = JSONValue.null
    var taken = 0
    while taken < 200 {
      let reply = try second.request(["cmd": "observe", "key": .string("b.k\(taken)"), "rate": 0.5])
      guard reply.isOK else {
        refused = reply
        break
      }
      taken += 1
    }
    // The room left beside the mixer bindings' and the status line's.
    #expect(taken == Player.publishedCapacity - 1024, "\(taken) more observed")
    #expect(refused.errorCode == "limit-exceeded", "\(refused.serialized())")
    #expect(refused.errorField == "key", "\(refused.serialized())")
    #expect(
      refused["error"]?["message"]?.stringValue?.contains(
        "\(Player.publishedCapacity) values are observed or published")
        == true, "\(refused.serialized())")
    #expect(try first.request(["cmd": "unobserve", "key": "a.k0"]).isOK)
    #expect(try second.request(["cmd": "observe", "key": "b.again", "rate": 0.5]).isOK)
  }

  /// An event goes out serialised once, the same line to every subscriber.
  @Test func anEventIsSerialisedOnceForAllSubscribers() throws {
    let directory = NSTemporaryDirectory() + "rampd-events-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let configuration = try DaemonConfiguration.parse(
      toml: """
        [socket]
        path = "\(directory)/rampd.sock"
        [output]
        device = "null"
        pacing = "clock"
        [embedded-output]
        enabled = false
        [state]
        path = "\(directory)/state.json"
        """, source: "test")
    let daemon = try Daemon(
      configuration: configuration, environment: [:], logger: Logger(label: "rampd") { _ in SwiftLogNoOpLogHandler() })
    try daemon.start()
    defer { daemon.shutdown() }
    let subscribers = [Recorder(), Recorder(), Recorder()]
    // On the controller's loop, where requests and events are handled.
    let controller = daemon.controller
    try controller.control.run {
      for subscriber in subscribers {
        controller.handle(Request(.subscribe(events: nil)), from: subscriber, sequence: 0)
      }
      controller.broadcast(.streamStarted(stream: "s1", path: "/music/a.flac"))
    }
    let lines = subscribers.map(\.events)
    #expect(lines.allSatisfy { $0.count == 1 })
    let first = try #require(lines[0].first)
    #expect(first.hasSuffix("\n") && first.contains("stream-started"))
    // The very same storage: one serialisation, shared.
    let storage = lines.map { $0[0].utf8.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress) } }
    #expect(storage[0] != nil)
    #expect(storage.allSatisfy { $0 == storage[0] })
  }

  /// `--check-config` (and rampd starting) lists every error in the file, not only the first.
  @Test func checkConfigReportsEveryError() throws {
    let path = NSTemporaryDirectory() + "rampd-errors-\(getpid()).toml"
    try """
    [output]
    channels = 99
    rate = "fast"
    [limits]
    observe-budget = 0
    """.write(toFile: path, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: path) }
    for arguments in [["--config", path, "--check-config"], ["--config", path]] {
      let outcome = try runProcess(Executables.rampd, arguments, environment: [:])
      #expect(outcome.status == 78, "\(outcome)")
      let lines = outcome.stderr.split(separator: "\n")
      #expect(lines.count == 3, "\(outcome)")
      #expect(lines.count == 3 && lines[0].hasPrefix("rampd: \(path):2: output.channels: "), "\(outcome)")
      #expect(lines.count == 3 && lines[1].hasPrefix("rampd: \(path):3: output.rate: "), "\(outcome)")
      #expect(
        lines.count == 3 && lines[2].hasPrefix("rampd: \(path):5: limits.observe-budget: 0 Hz is outside"),
        "\(outcome)")
    }
  }
}

/// A subscriber that keeps what it is sent.
private final class Recorder: Client, @unchecked Sendable {
  private let lock = NSLock()
  private var received: [String] = []

  var events: [String] {
    lock.lock()
    defer { lock.unlock() }
    return received
  }

  func reply(_ line: JSONValue, sequence: Int) {}

  func event(_ line: String) {
    lock.lock()
    received.append(line)
    lock.unlock()
  }

  var awaitsNoOtherReply: Bool { true }

  var confinedToMediaRoots: Bool { false }
}
