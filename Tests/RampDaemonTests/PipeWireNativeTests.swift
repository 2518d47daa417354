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
    // Within 1 ms of a second, but for whole quanta pw-record lost between the steps on a loaded
    // machine, which shift what it recorded after them by exactly a quantum; any other error
    // fails. (A quantum the sink played without rampd no longer shifts the second step: rampd
    // moves its schedule by it, which `atIsPlayedByTheSinkAtItsInstant` checks by the sink's
    // clock, where nothing is lost.)
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

  /// `at` by the sink's clock: a step scheduled for a wall-clock instant is played by the sink at
  /// that instant, within a millisecond. `pw_clock_recorder` (Tests/Fixtures) records the sink's
  /// monitor with the graph's clock of every cycle, and first calibrates the monitor with clicks
  /// of its own, each played when PipeWire says (its `pw_time`): so the instant the sink played
  /// each recorded frame is known without trusting rampd's mapping. Two steps one second apart,
  /// at 1024 frames and at 256; between them rampd is stopped for 0.1 s (SIGSTOP), so the sink
  /// plays cycles without it: the second step is still played at its instant, not that much
  /// later.
  @Test(arguments: [1024, 256])
  func atIsPlayedByTheSinkAtItsInstant(quantum: Int) throws {
    let (session, recording, daemon, client) = try Self.clockRecordedConstant(quantum: quantum, name: "native-at-clock")
    // PipeWire lives until the test ends.
    defer { withExtendedLifetime(session) {} }
    // Whole milliseconds (the RFC 3339 text carries them), on CLOCK_MONOTONIC through the
    // difference between the two clocks read now.
    let stamp = ISO8601DateFormatter()
    stamp.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    let first = Date(timeIntervalSince1970: ((Date().timeIntervalSince1970 + 0.8) * 1000).rounded() / 1000)
    let instants = [first, first.addingTimeInterval(1)]
    var real = timespec()
    var monotonic = timespec()
    clock_gettime(CLOCK_REALTIME, &real)
    clock_gettime(CLOCK_MONOTONIC, &monotonic)
    let realToMonotonic =
      (Int64(monotonic.tv_sec) * 1_000_000_000 + Int64(monotonic.tv_nsec))
      - (Int64(real.tv_sec) * 1_000_000_000 + Int64(real.tv_nsec))
    for (instant, value) in zip(instants, [0.5, 0.25]) {
      let scheduled = try client.request([
        "cmd": "set", "key": "master.gain", "value": .number(value), "duration": 0,
        "at": .string(stamp.string(from: instant)), "ack": "scheduled",
      ])
      #expect(scheduled.isOK, "\(scheduled.serialized())")
    }
    usleep(UInt32(max(first.timeIntervalSinceNow + 0.4, 0) * 1e6))
    kill(daemon.process.processIdentifier, SIGSTOP)
    usleep(100_000)
    kill(daemon.process.processIdentifier, SIGCONT)
    // The stop fell between the two instants, so the second step is the one it tests.
    let resumed = Date()
    #expect(
      resumed < instants[1].addingTimeInterval(-0.1), "rampd resumed \(resumed), the second step due \(instants[1])")
    usleep(UInt32(max(instants[1].timeIntervalSinceNow + 0.3, 0) * 1e6))
    let heard = try recording.finish()
    let underruns = try #require(client.request(["cmd": "status"]).result["output"]?["underruns"]?.int)
    #expect(underruns > 0, "the sink played without rampd while it was stopped: counted")
    #expect(daemon.stop() == 0)

    let (lag, spread) = try #require(heard.monitorLag(), "the clicks were not all found: \(heard.clicks)")
    print("native \(quantum): the monitor hands a frame over \(Double(lag) / 1e6) ms after the sink played it")
    // The same for every click, to a frame (20.8 µs).
    #expect(spread <= 21_000, "the clicks' lags differ by \(spread) ns")
    var from = 0
    for (instant, level) in zip(instants, [Float(0.25), 0.125]) {
      let index = try #require(heard.firstRun(of: level, from: from), "\(level) never heard")
      let played = try #require(heard.handedOver(index)) - lag
      let due = Int64((instant.timeIntervalSince1970 * 1e9).rounded()) + realToMonotonic
      let error = Double(played - due) / 1e6
      print("native \(quantum): a step due at \(instant) played \(error) ms from its instant")
      #expect(abs(error) <= 1, "a step played \(error) ms from its instant (quantum \(quantum))")
      from = index
    }
  }

  /// A PipeWire of its own with its sink recorded by `pw_clock_recorder` (its clicks first, in
  /// silence), then rampd natively at `quantum` frames playing a constant 0.5 in a loop.
  static func clockRecordedConstant(
    quantum: Int, name: String
  ) throws -> (PipeWireSession, PipeWireSession.ClockRecording, DaemonProcess, LineClient) {
    let session = try PipeWireSession(name: name)
    let recording = try session.startClockRecording(seconds: 60, clicks: 4, quantum: quantum)
    usleep(2_200_000)
    let daemon = try DaemonProcess(
      name: "\(name)-\(quantum)", periodMs: 20, bufferMs: 100,
      environment: session.environment.merging([
        "RAMPD_OUTPUT_DEVICE": device, "RAMPD_OUTPUT_PIPEWIRE_QUANTUM": "\(quantum)",
      ]) { $1 }, pacing: "device")
    let client = try daemon.client()
    let file = try daemon.constantFile("probe", seconds: 2, left: 0.5, right: 0.5)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]).isOK)
    usleep(500_000)
    return (session, recording, daemon, client)
  }

  /// `set` → played, by the sink's clock (`pw_clock_recorder`, as above): twenty `set`s of the
  /// master at random phases against the cycle, each played after it was sent and at most a
  /// quantum after its reply (sent once the render step applied it) came back; the figures printed.
  @Test(arguments: [1024, 256])
  func aSetIsPlayedAboutAQuantumAfterItIsSent(quantum: Int) throws {
    let (session, recording, daemon, client) = try Self.clockRecordedConstant(
      quantum: quantum, name: "native-set-clock")
    // PipeWire lives until the test ends.
    defer { withExtendedLifetime(session) {} }
    func monotonic() -> Int64 {
      var now = timespec()
      clock_gettime(CLOCK_MONOTONIC, &now)
      return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
    var sent: [(nanoseconds: Int64, replied: Int64, level: Float)] = []
    for index in 0..<20 {
      let gain = index % 2 == 0 ? 0.5 : 1
      let before = monotonic()
      #expect(try client.request(["cmd": "set", "key": "master.gain", "value": .number(gain), "duration": 0]).isOK)
      sent.append((before, monotonic(), Float(gain * 0.5)))
      usleep(UInt32.random(in: 80_000...120_000))
    }
    usleep(200_000)
    let heard = try recording.finish()
    #expect(daemon.stop() == 0)

    let (lag, spread) = try #require(heard.monitorLag(), "the clicks were not all found: \(heard.clicks)")
    #expect(spread <= 21_000, "the clicks' lags differ by \(spread) ns")
    var from = 0
    var latencies: [Double] = []
    var afterReply: [Double] = []
    for (nanoseconds, replied, level) in sent {
      let index = try #require(heard.firstRun(of: level, from: from, length: 32), "\(level) never heard")
      let played = try #require(heard.handedOver(index)) - lag
      latencies.append(Double(played - nanoseconds) / 1e9)
      afterReply.append(Double(played - replied) / 1e9)
      from = index
    }
    let quantumSeconds = Double(quantum) / 48_000
    print(
      "native \(quantum): a set played \(medianAndP99(latencies)), from \(latencies.min()! * 1000) to"
        + " \(latencies.max()! * 1000) ms after it was sent (a quantum is \(quantumSeconds * 1000) ms)")
    #expect(latencies.allSatisfy { $0 > 0 }, "a set played before it was sent: \(latencies)")
    // The reply comes once the render step applied the set to the quantum it renders, which the
    // sink plays within that quantum: so the change is played at most a quantum after the reply,
    // whatever the machine's load made of the request's way there (the median above shows it on
    // a quiet machine: about 11 ms at 1024, 4.7 ms at 256). A change rendered a cycle later than
    // it was applied, or held in a buffer, would be played later.
    #expect(
      afterReply.allSatisfy { $0 <= quantumSeconds + 0.001 },
      "a set played more than a quantum after its reply came: \(afterReply)")
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
