import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

/// Bugs the fuzz target (Fuzz/, docs/FUZZING.md) found, each checked on a real rampd.
@Suite struct FuzzRegressionTests {
  /// The daemon's threads with this name (`/proc/<pid>/task/*/comm`).
  private func threads(named name: String, in daemon: DaemonProcess) -> Int {
    let tasks = "/proc/\(daemon.process.processIdentifier)/task"
    let ids = (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []
    return ids.count { id in
      (try? String(contentsOfFile: "\(tasks)/\(id)/comm", encoding: .utf8))?
        .trimmingCharacters(in: .whitespacesAndNewlines) == name
    }
  }

  /// Found as an out-of-memory: a `play` refused after its file was opened (its stream id in use,
  /// the stream limit reached, another command of its batch refused, or only checked for an
  /// `"ack": "scheduled"`) left its decoder thread running, with its ring, file and pipe, for the
  /// daemon's life.
  @Test func refusedPlaysLeaveNoDecoderRunning() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[limits]\nstreams = 2")
    let file = try daemon.constantFile("tone", seconds: 30)
    let client = try daemon.client()
    for stream in ["a", "b"] {
      let started = try client.request(["cmd": "play", "path": .string(file), "stream": .string(stream)])
      #expect(started["ok"] == true, "\(started.serialized())")
    }
    for _ in 0..<5 {
      let taken = try client.request(["cmd": "play", "path": .string(file), "stream": "a"])
      #expect(taken.errorCode == "stream-exists", "\(taken.serialized())")
      let full = try client.request(["cmd": "play", "path": .string(file), "stream": "c"])
      #expect(full.errorCode == "limit-exceeded", "\(full.serialized())")
      let batch = try client.request([
        "cmd": "batch",
        "commands": [
          ["cmd": "get", "key": "streams.nope.gain"], ["cmd": "play", "path": .string(file), "stream": "d"],
        ],
      ])
      #expect(batch.errorCode == "unknown-key-path", "\(batch.serialized())")
    }
    // Scheduled far ahead, it waits on the wall clock and opens its file only shortly before its
    // time; the decoder opened to check it must go.
    let scheduled = try client.request([
      "cmd": "play", "path": .string(file), "stream": "later", "at": "2099-01-01T00:00:00Z", "ack": "scheduled",
    ])
    #expect(scheduled["ok"] == true, "\(scheduled.serialized())")
    // Two streams playing: two decoders once the refused ones and the check's have stopped.
    let deadline = Date().addingTimeInterval(10)
    while threads(named: "rampd-decoder", in: daemon) > 2 && Date() < deadline { usleep(20_000) }
    #expect(threads(named: "rampd-decoder", in: daemon) == 2)
  }
}

/// Numbers the parser accepts (finite, not negative) but that overflowed an integer conversion
/// and crashed rampd.
@Suite struct HugeNumberTests {
  /// Found by the fuzz target: `"at": 9007199254740993` (any delay past about 6 million years)
  /// trapped converting the due time to a sample. Delays are now at most 10¹⁰ s; the furthest date
  /// RFC 3339 can write is scheduled, not a crash.
  @Test func aDelayBeyondTheSampleClockIsRefusedAndTheLastDateScheduled() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let refused = try client.request(["cmd": "ping", "at": 9_007_199_254_740_993, "ack": "scheduled"])
    #expect(refused["error"]?["code"] == "invalid-field", "\(refused.serialized())")
    #expect(refused["error"]?["field"] == "at", "\(refused.serialized())")
    let scheduled = try client.request(["cmd": "ping", "at": "9999-12-31T23:59:59Z", "ack": "scheduled"])
    #expect(scheduled.result["due"] == "9999-12-31T23:59:59Z", "\(scheduled.serialized())")
    let status = try client.request(["cmd": "status"])
    #expect(status.result["scheduled"]?.arrayValue?.first?["cmd"] == "ping", "\(status.serialized())")
  }

  /// `observe` with a rate above 0 but below about 1e-10 Hz trapped computing its interval; such
  /// a rate would also cost the observe budget nothing. It is refused, naming the field, and the
  /// lowest rate allowed is accepted.
  @Test func anObserveRateNearZeroIsRefused() throws {
    let daemon = try DaemonProcess()
    let client = try daemon.client()
    let observed = try client.request(["cmd": "observe", "key": "master.gain", "rate": 1e-300])
    #expect(observed.errorCode == "out-of-range", "\(observed.serialized())")
    #expect(observed.errorField == "rate", "\(observed.serialized())")
    #expect(
      observed["error"]?["message"]?.stringValue?.contains("at least 0.001 Hz") == true, "\(observed.serialized())")
    #expect(try client.request(["cmd": "observe", "key": "master.gain", "rate": 0.001]).isOK)
    #expect(try client.request(["cmd": "ping"]).result["pong"] == true)
  }

  /// `seek` to a position past what the sample clock counts trapped on the render thread. Such a
  /// position is now refused (beyond the horizon, and past the file's end); the very end of the
  /// file finishes the stream.
  @Test func aSeekBeyondAnyFileIsRefusedAndOneToTheEndFinishesTheStream() throws {
    let daemon = try DaemonProcess()
    let file = try daemon.constantFile("tone", seconds: 5)
    let client = try daemon.client()
    try client.request(["cmd": "subscribe", "events": ["stream-ended"]])
    let play = try client.request(["cmd": "play", "path": .string(file), "stream": "a"])
    #expect(play["ok"] == true, "\(play.serialized())")
    let far = try client.request(["cmd": "seek", "stream": "a", "position": 1e300])
    #expect(far.errorCode == "out-of-range", "\(far.serialized())")
    let seek = try client.request(["cmd": "seek", "stream": "a", "position": 5])
    #expect(seek.result["position"] == 5, "\(seek.serialized())")
    let ended = try client.waitForEvent { $0["event"] == "stream-ended" }
    #expect(ended["reason"] == "finished", "\(ended.serialized())")
    #expect(try client.request(["cmd": "ping"]).result["pong"] == true)
  }
}
