import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// rampd through its native PipeWire output (`device = "pipewire-native"`: a `pw_stream` whose
/// `process` callback runs the render step) into a real PipeWire with WirePlumber
/// (`PipeWireSession`), what it plays recorded from the sink with `pw-record`. A debug rampd
/// traps any allocation in the render step, on whichever thread runs it (PipeWire's data thread
/// here): each test ends with rampd exiting cleanly, so none fired.
@Suite(.serialized) struct PipeWireNativeTests {
  static let device = "pipewire-native"

  /// `status` says the native output, its quantum and a pacing by the device; a constant plays
  /// level for level at the sink; a linear fade of it from gain 1 to 0.2 over one second is the
  /// line, sample for sample, with no step larger than its slope and no underrun.
  @Test func fadesThroughTheNativeOutputFollowTheLine() throws {
    let session = try PipeWireSession()
    let (daemon, client, recording) = try PipeWireTests.recordingAConstant(
      through: Self.device, in: session, name: "native-fade")
    let output = try #require(client.request(["cmd": "status"]).result["output"])
    #expect(output["kind"] == "pipewire-native" && output["device"] == "pipewire-native", "\(output.serialized())")
    #expect(output["pacing"] == "device" && output["rewind"] == false, "\(output.serialized())")
    let faded = try client.request(["cmd": "fade", "key": "master.gain", "to": 0.2, "duration": 1, "curve": "linear"])
    #expect(faded.isOK, "\(faded.serialized())")
    usleep(1_600_000)
    try PipeWireTests.expectLinearFade(in: try recording.finish(), device: Self.device)
    let after = try client.request(["cmd": "status"]).result["output"]
    #expect(after?["underruns"] == 0, "\(after?.serialized() ?? "")")
    #expect(daemon.stop() == 0)
    #expect(!daemon.log.contains("on the render thread"), "\(daemon.log)")
  }

  /// Two steps scheduled with `at` for wall-clock times one second apart are heard one second
  /// apart at the sink, within a millisecond (48 frames); a `set` is heard about a quantum
  /// (21 ms at 1024 frames) after it is sent, not a buffer's worth.
  @Test func atAndSetThroughTheNativeOutputLandOnTime() throws {
    let session = try PipeWireSession()
    let clock = ISO8601DateFormatter()
    clock.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    let (daemon, client, recording) = try PipeWireTests.recordingAConstant(
      through: Self.device, in: session, name: "native-at")
    let first = Date().addingTimeInterval(0.7)
    let second = first.addingTimeInterval(1)
    for (time, value) in [(first, 0.25), (second, 0.125)] {
      let scheduled = try client.request([
        "cmd": "set", "key": "master.gain", "value": .number(value * 2), "duration": 0,
        "at": .string(clock.string(from: time)), "ack": "scheduled",
      ])
      #expect(scheduled.isOK, "\(scheduled.serialized())")
    }
    let setTime = second.addingTimeInterval(0.5)
    usleep(UInt32(max(setTime.timeIntervalSinceNow, 0) * 1e6))
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 1, "duration": 0]).isOK)
    usleep(500_000)
    let heard = try recording.finish()
    let left = stride(from: 0, to: heard.count, by: 2).map { heard[$0] }
    func firstFrame(at level: Float, from start: Int = 0) throws -> Int {
      try #require(
        left[start...].firstIndex { abs($0 - level) < 1e-6 }, "\(level) never heard: \(PipeWireTests.summary(heard))")
    }
    let stepOne = try firstFrame(at: 0.25)
    let stepTwo = try firstFrame(at: 0.125, from: stepOne)
    let back = try firstFrame(at: 0.5, from: stepTwo)
    print("native: steps 1 s apart heard \(stepTwo - stepOne) frames apart")
    #expect(abs(stepTwo - stepOne - 48_000) <= 48, "steps 1 s apart heard \(stepTwo - stepOne) frames apart")
    let latency = Double(back - stepTwo) / 48_000 - 0.5
    print("native: a set heard \(latency * 1000) ms after it was sent")
    #expect(latency > 0 && latency < 0.06, "a set heard \(latency) s after it was sent")
    let output = try client.request(["cmd": "status"]).result["output"]
    #expect(output?["underruns"] == 0, "\(output?.serialized() ?? "")")
    #expect(daemon.stop() == 0)
  }

  /// PipeWire killed while rampd plays: `device-failed`, `status` answers `failed` through the
  /// outage and rampd takes next to no CPU; PipeWire back: `device-recovered` within 3 s and the
  /// sink hears the stream at the level set meanwhile.
  @Test func playsThroughTheNativeOutputAndOutlivesARestart() throws {
    try PipeWireTests().outlivesARestart(device: Self.device, playing: true)
  }

  /// The same while idle: rampd holds no stream (it let go of it so the sink may suspend), so
  /// nothing fails; a play after the server is back is heard.
  @Test func outlivesARestartWhileIdleOnTheNativeOutput() throws {
    try PipeWireTests().outlivesARestart(device: Self.device, playing: false)
  }
}
