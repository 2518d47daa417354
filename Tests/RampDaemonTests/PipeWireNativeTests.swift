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
  /// line, sample for sample, with no step larger than its slope; any quantum the sink played
  /// without it is one `status` counted.
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
    let heard = try recording.finish()
    // On a loaded machine without real-time priority the graph may play a quantum without
    // rampd's: heard as silence, and counted by status (a jump of the graph's ticks).
    let counted = try client.request(["cmd": "status"]).result["output"]?["underruns"]?.int ?? -1
    try PipeWireTests.expectLinearFade(in: heard, device: Self.device, countedGaps: counted)
    #expect(daemon.stop() == 0)
    #expect(!daemon.log.contains("on the render thread"), "\(daemon.log)")
  }

  /// Two steps scheduled with `at` for wall-clock times one second apart are heard one second
  /// apart at the sink, within a millisecond (48 frames); a `set` is heard about a quantum
  /// (21 ms at 1024 frames) after it is sent, not a buffer's worth.
  @Test func atAndSetThroughTheNativeOutputLandOnTime() throws {
    let session = try PipeWireSession()
    let (daemon, client, stepOne, stepTwo, back) = try PipeWireTests.scheduledSteps(
      through: Self.device, in: session, name: "native-at")
    let spacing = stepTwo - stepOne
    print("native: steps 1 s apart heard \(spacing) frames apart")
    // Within 1 ms of a second, but for whole quanta lost between the steps: on a loaded machine
    // without real-time priority the graph sometimes plays a quantum without rampd's buffer (or
    // pw-record misses one), which shifts what follows by exactly a quantum; any other error fails.
    let quantum = 1024
    let lostQuanta = Int((Double(spacing - 48_000) / Double(quantum)).rounded())
    #expect(abs(spacing - 48_000 - lostQuanta * quantum) <= 48, "steps 1 s apart heard \(spacing) frames apart")
    let latency = Double(back - stepTwo) / 48_000 - 0.5
    print("native: a set heard \(latency * 1000) ms after it was sent")
    #expect(latency > 0 && latency < 0.06, "a set heard \(latency) s after it was sent")
    let output = try client.request(["cmd": "status"]).result["output"]
    let underruns = output?["underruns"]?.int ?? -1
    #expect(underruns >= 0, "\(output?.serialized() ?? "")")
    if lostQuanta != 0 || underruns != 0 {
      // Not yet proven natively: that every quantum the sink played without rampd's buffer is
      // counted (0.3.65 tells a stream of skipped cycles only through `ticks`).
      withKnownIssue("a quantum lost at the sink under load, not always counted", isIntermittent: true) {
        Issue.record("\(lostQuanta) quanta lost between the steps; \(underruns) underruns counted")
      }
    }
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

  /// Idle through the native output, from start-up and again after a play: rampd lets go of its
  /// stream (closed, not merely inactive), the sink suspends, and over 10 s no thread of rampd
  /// wakes (PipeWire's data and loop threads in it included) nor does the server more than a few
  /// times; a play after idle is heard at its level from silence, its reopen time in `status`.
  @Test func idleThroughTheNativeOutputLetsTheSinkSuspend() throws {
    try PipeWireTests.idleLetsTheSinkSuspend(through: [Self.device], in: PipeWireSession())
  }

  /// `device = "default"` where ALSA's `default` is PipeWire's plugin (`pcm.!default { type
  /// pipewire }`, as pipewire-alsa installs it): with no PipeWire server, rampd starts at once and
  /// waits for `default` as through ALSA (no kind yet, the plugin's failure as the reason); the
  /// server started, its socket brings the native output, `status` says `pipewire-native` and the
  /// sink hears the stream. A rampd started with the server up takes the native output at once.
  @Test func theDefaultDeviceIsTheNativeOutputWhereALSAsDefaultIsPipeWire() throws {
    let session = try PipeWireSession(started: false)
    // ALSA's configuration without the machine's own (its hooks), and PipeWire as the default.
    let alsa = "\(session.runtime)/alsa.conf"
    try AlsaConfiguration.withoutHooks().write(toFile: alsa, atomically: true, encoding: .utf8)
    let asDefault = "\(session.runtime)/99-pipewire-default.conf"
    try "pcm.!default { type pipewire }\nctl.!default { type pipewire }\n".write(
      toFile: asDefault, atomically: true, encoding: .utf8)
    let environment = session.environment.merging([
      "RAMPD_OUTPUT_DEVICE": "default", "ALSA_CONFIG_PATH": "\(alsa):\(asDefault)",
    ]) { $1 }
    let started = Date()
    let daemon = try DaemonProcess(periodMs: 20, bufferMs: 100, environment: environment, pacing: "auto")
    let client = try daemon.client()
    let waiting = try #require(client.request(["cmd": "status"]).result["output"])
    let startedIn = Date().timeIntervalSince(started)
    #expect(startedIn < 5, "rampd answered \(startedIn) s after it was started")
    #expect(waiting["state"] == "waiting" && waiting["kind"] == nil, "\(waiting.serialized())")
    #expect(waiting["waiting"]?["device"] == "default", "\(waiting.serialized())")
    #expect(waiting["waiting"]?["error"]?.stringValue?.isEmpty == false, "\(waiting.serialized())")
    let file = try daemon.constantFile("probe", seconds: 2, left: 0.5, right: 0.5)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]).isOK)

    try session.start()
    let deadline = Date().addingTimeInterval(5)
    var output = try client.request(["cmd": "status"]).result["output"]
    while output?["state"] != "playing" && Date() < deadline {
      usleep(100_000)
      output = try client.request(["cmd": "status"]).result["output"]
    }
    #expect(
      output?["state"] == "playing" && output?["kind"] == "pipewire-native",
      "\(output?.serialized() ?? "")\n\(daemon.log)")
    #expect(output?["device"] == "default", "\(output?.serialized() ?? "")")
    let heard = try session.record(seconds: 1)
    #expect(PipeWireTests.longestRun(of: 0.5, in: heard) > 48_000 / 2, "\(PipeWireTests.summary(heard))")
    #expect(daemon.stop() == 0)

    let second = try DaemonProcess(
      name: "default-with-server", periodMs: 20, bufferMs: 100, environment: environment, pacing: "auto")
    let now = try #require(second.client().request(["cmd": "status"]).result["output"])
    #expect(now["state"] == "playing" && now["kind"] == "pipewire-native", "\(now.serialized())")
    #expect(now["pacing"] == "device" && now["rewind"] == false, "\(now.serialized())")
    #expect(second.stop() == 0)
  }
}
