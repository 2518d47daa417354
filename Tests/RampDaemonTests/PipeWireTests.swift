import Foundation
import RampProtocol
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// rampd where a desktop's audio runs: ALSA's `pipewire` PCM into a real PipeWire with
/// WirePlumber (`PipeWireSession`), what it plays recorded from the sink with `pw-record`.
@Suite(.serialized) struct PipeWireTests {
  /// Plays through PipeWire, level for level; PipeWire killed while rampd plays (a restart at
  /// login, logout or upgrade): `device-failed`, a `status` that answers, next to no CPU while
  /// the server is away; PipeWire back: `device-recovered`, playing at the level set meanwhile.
  @Test func playsThroughPipeWireAndOutlivesItsRestart() throws {
    let session = try PipeWireSession()
    let daemon = try DaemonProcess(
      periodMs: 20, bufferMs: 100,
      environment: session.environment.merging(["RAMPD_OUTPUT_DEVICE": "pipewire"]) { $1 }, pacing: "device")
    let watcher = try daemon.client()
    #expect(try watcher.request(["cmd": "subscribe", "events": ["device-failed", "device-recovered"]]).isOK)
    let client = try daemon.client()
    let file = try daemon.constantFile("probe", seconds: 2, left: 0.25, right: 0.25)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]).isOK)
    usleep(500_000)
    let before = try session.record(seconds: 1)
    #expect(Self.longestRun(of: 0.25, in: before) > 48_000 / 4, "\(Self.summary(before))")

    session.stop()
    let failed = try watcher.waitForEvent(timeout: 5) { $0["event"] == "device-failed" }
    #expect(failed["message"]?.stringValue?.isEmpty == false, "\(failed.serialized())")
    try expectQuietOutage(daemon, client, setting: 0.5)

    try session.start()
    let recovered = try watcher.waitForEvent(timeout: 20) { $0["event"] == "device-recovered" }
    #expect(recovered["device"] == "pipewire", "\(recovered.serialized())")
    usleep(500_000)
    #expect(try client.request(["cmd": "status"]).result["output"]?["state"] == "playing")
    let after = try session.record(seconds: 1)
    #expect(Self.longestRun(of: 0.125, in: after) > 48_000 / 4, "\(Self.summary(after))")
    #expect(daemon.stop() == 0)
  }

  /// The same through ALSA's `pulse` PCM and pipewire-pulse, PipeWire's PulseAudio server,
  /// killed with PipeWire while a stream plays.
  @Test func playsThroughPulseAndOutlivesItsRestart() throws {
    try outlivesARestart(device: "pulse", playing: true)
  }

  /// PipeWire and pipewire-pulse killed while nothing plays, then started again: rampd on `pulse`
  /// plays once they are back.
  @Test func outlivesAPulseRestartWhileIdle() throws {
    try outlivesARestart(device: "pulse", playing: false)
  }

  @Test func outlivesAPipeWireRestartWhileIdle() throws {
    try outlivesARestart(device: "pipewire", playing: false)
  }

  /// rampd on `device` (with a stream playing a constant 0.25, or idle, nothing played yet) when
  /// the audio server is killed and started again: through the outage `status` answers (playing:
  /// `device-failed` at once, and `status` says `failed`) and rampd takes under 1 % of a core;
  /// within 3 s of the server's return (when idle, the stream is played then) `device-recovered`
  /// and the sink hears the stream at the level set meanwhile; the device's events are
  /// `device-failed` and `device-recovered`, in that order. Idle, the device is stopped and
  /// nothing is written: its loss is found at the first write after the outage.
  func outlivesARestart(device: String, playing: Bool, name: String = #function) throws {
    let session = try PipeWireSession(name: "\(name)\(device)\(playing)", pulse: device == "pulse")
    let daemon = try DaemonProcess(
      name: "\(name)\(device)\(playing)", periodMs: 20, bufferMs: 100,
      environment: session.environment.merging(["RAMPD_OUTPUT_DEVICE": device]) { $1 }, pacing: "device")
    let watcher = try daemon.client()
    #expect(try watcher.request(["cmd": "subscribe", "events": ["device-failed", "device-recovered"]]).isOK)
    let client = try daemon.client()
    let file = try daemon.constantFile("probe", seconds: 2, left: 0.25, right: 0.25)
    let play: JSONObject = ["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]
    if playing {
      #expect(try client.request(play).isOK)
      usleep(500_000)
      let before = try session.record(seconds: 1)
      #expect(Self.longestRun(of: 0.25, in: before) > 48_000 / 4, "\(Self.summary(before))")
    } else {
      usleep(500_000)
    }

    session.stop()
    if playing {
      let failed = try watcher.waitForEvent(timeout: 5) { $0["event"] == "device-failed" }
      #expect(failed["message"]?.stringValue?.isEmpty == false, "\(failed.serialized())")
    }
    let pid = daemon.process.processIdentifier
    let cpuBefore = try cpuSeconds(pid)
    let lost = Date()
    for _ in 0..<5 {
      let status = try client.request(["cmd": "status"])
      // Idle, the device is stopped: its loss is found at the next write, which a request may cause.
      let states: [JSONValue] = playing ? ["failed"] : ["playing", "failed"]
      #expect(states.contains(status.result["output"]?["state"] ?? .null), "\(status.serialized())")
      usleep(1_000_000)
    }
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0]).isOK)
    let cpu = try cpuSeconds(pid) - cpuBefore
    let outage = Date().timeIntervalSince(lost)
    #expect(cpu < 0.01 * outage, "\(cpu) s of CPU in \(outage) s without the audio server")

    try session.start()
    let back = Date()
    let recording = try session.startRecording()
    if !playing { #expect(try client.request(play).isOK) }
    let recovered = try watcher.waitForEvent(timeout: 10) { $0["event"] == "device-recovered" }
    let recoveredAfter = Date().timeIntervalSince(back)
    #expect(recovered["device"] == .string(device), "\(recovered.serialized())")
    #expect(recoveredAfter < 3, "device-recovered \(recoveredAfter) s after the server was back")
    usleep(UInt32(max(3 - Date().timeIntervalSince(back), 0) * 1e6))
    let after = try recording.finish()
    // At the level set during the outage, for a quarter second at least, within the 3 s.
    #expect(Self.longestRun(of: 0.125, in: after) > 48_000 / 4, "\(Self.summary(after))")
    #expect(try client.request(["cmd": "status"]).result["output"]?["state"] == "playing")
    let events = watcher.events.compactMap { $0["event"]?.stringValue }
    #expect(events == ["device-failed", "device-recovered"], "\(events)")
    #expect(daemon.stop() == 0)
  }

  /// rampd started with `--device pipewire` before PipeWire is up (a user unit at login): it
  /// plays into the embedded output meanwhile, and `status` says it waits for `pipewire`, how
  /// many attempts and why the last failed (the log says so once). PipeWire started:
  /// `device-recovered`, `status` says it plays into `pipewire`, paced by the device, and a fade
  /// is heard in the sink, sample for sample.
  @Test func waitsForPipeWireStartedAfterIt() throws {
    let session = try PipeWireSession(started: false)
    let daemon = try DaemonProcess(
      periodMs: 20, bufferMs: 100,
      environment: session.environment.merging([
        "RAMPD_OUTPUT_DEVICE": "pipewire", "RAMPD_EMBEDDED_OUTPUT_ENABLED": "true",
        "RAMPD_EMBEDDED_OUTPUT_PATH": "\(session.runtime)/embedded.wav",
      ]) { $1 }, pacing: "auto")
    let watcher = try daemon.client()
    #expect(try watcher.request(["cmd": "subscribe", "events": ["device-failed", "device-recovered"]]).isOK)
    let client = try daemon.client()
    let waiting = try #require(client.request(["cmd": "status"]).result["output"])
    #expect(waiting["state"] == "waiting" && waiting["embedded"] == true, "\(waiting.serialized())")
    #expect(waiting["pacing"] == "clock" && waiting["requestedDevice"] == "pipewire", "\(waiting.serialized())")
    #expect(waiting["waiting"]?["device"] == "pipewire", "\(waiting.serialized())")
    #expect(waiting["waiting"]?["error"]?.stringValue?.contains("pipewire") == true, "\(waiting.serialized())")
    let firstAttempts = waiting["waiting"]?["attempts"]?.int ?? 0
    #expect(firstAttempts >= 1)
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0, "duration": 0]).isOK)
    let file = try daemon.constantFile("probe", seconds: 2, left: 0.5, right: 0.5)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]).isOK)
    usleep(1_000_000)
    let later = try client.request(["cmd": "status"]).result["output"]
    let attempts = later?["waiting"]?["attempts"]?.int ?? 0
    #expect(later?["state"] == "waiting" && attempts > firstAttempts, "\(later?.serialized() ?? "")")

    try session.start()
    let recovered = try watcher.waitForEvent(timeout: 10) { $0["event"] == "device-recovered" }
    #expect(recovered["device"] == "pipewire", "\(recovered.serialized())")
    let playing = try #require(client.request(["cmd": "status"]).result["output"])
    #expect(playing["state"] == "playing" && playing["device"] == "pipewire", "\(playing.serialized())")
    #expect(playing["pacing"] == "device" && playing["embedded"] == false, "\(playing.serialized())")
    #expect(playing["waiting"] == nil, "\(playing.serialized())")

    let recording = try session.startRecording()
    usleep(300_000)
    #expect(try client.request(["cmd": "fade", "to": 1, "duration": 1]).isOK)
    usleep(1_700_000)
    let samples = try recording.finish()
    Self.expectLinearRise(to: 0.5, over: 48_000, in: samples)
    let underruns = try client.request(["cmd": "status"]).result["output"]?["underruns"]
    #expect(underruns == 0, "rampd's own underruns: \(underruns ?? .null)")
    let events = watcher.events.compactMap { $0["event"]?.stringValue }
    #expect(events == ["device-recovered"], "\(events)")
    #expect(daemon.stop() == 0)
    let said = daemon.log.split(separator: "\n").filter { $0.contains("waiting for it") }
    #expect(said.count == 1, "\(said)")
  }

  /// A linear fade from silence to `level` over `frames`, heard whole: every frame between
  /// silence and the level rises by the fade's own slope (no gap, no jump, no step back), there
  /// are `frames` of them (within 1 %), and the level holds after it.
  static func expectLinearRise(to level: Float, over frames: Int, in interleaved: [Float]) {
    let left = stride(from: 0, to: interleaved.count, by: 2).map { interleaved[$0] }
    guard let start = left.firstIndex(where: { $0 > 0 }), let end = left.firstIndex(where: { $0 >= level - 1e-6 })
    else {
      Issue.record("no fade to \(level): \(summary(interleaved))")
      return
    }
    let rise = left[max(start - 1, 0)...end]
    let slope = level / Float(frames)
    let steps = zip(rise.dropFirst(), rise).map { $0 - $1 }
    #expect(
      steps.allSatisfy { $0 >= 0 && $0 <= slope * 1.01 + 1e-7 }, "steps \(steps.min() ?? 0)...\(steps.max() ?? 0)")
    #expect(abs(end - start - frames) < frames / 100, "\(end - start) frames from silence to \(level)")
    let held = left[end...].prefix(48_000 / 4)
    #expect(held.count == 48_000 / 4 && held.allSatisfy { abs($0 - level) < 1e-6 }, "\(held.count) frames held")
  }

  /// The most frames in a row whose two channels are both `level`, within a float's rounding.
  static func longestRun(of level: Float, in interleaved: [Float]) -> Int {
    var longest = 0
    var run = 0
    var index = 0
    while index + 1 < interleaved.count {
      if abs(interleaved[index] - level) < 1e-6 && abs(interleaved[index + 1] - level) < 1e-6 {
        run += 1
        longest = max(longest, run)
      } else {
        run = 0
      }
      index += 2
    }
    return longest
  }

  static func summary(_ samples: [Float]) -> String {
    "\(samples.count / 2) frames, from \(samples.min() ?? .nan) to \(samples.max() ?? .nan)"
  }
}
