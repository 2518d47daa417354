import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// The real rampd when things go wrong underneath it: the output device unplugged and plugged
/// back, the disk full when it saves its state.
@Suite(.serialized) struct FaultTests {
  /// rampd on `Tests/Fixtures/pcm_flaky.c` (an ALSA PCM that fails with ENODEV while a flag file
  /// exists): unplugged in the middle of a fade, it goes on serving and keeping time; a fade sent
  /// during the outage runs on the clock; plugged back, the device is reopened and plays at the
  /// levels the fades reached, not where they were when it was lost.
  @Test func theDeviceFailsWhileRampingAndComesBack() throws {
    let output = try FlakyOutput(failingWhile: "flag", device: "rampd_flaky_e2e")
    defer { output.remove() }
    let (daemon, raw, flag) = (output.daemon, output.raw, output.trigger)
    let (watcher, client) = try output.playing()
    let before = try client.request(["cmd": "status"]).result
    #expect(before["output"]?["device"] == "rampd_flaky_e2e" && before["output"]?["state"] == "playing")
    usleep(300_000)
    // A slow fade, lost halfway.
    #expect(try client.request(["cmd": "fade", "to": 0.2, "duration": 1]).isOK)
    usleep(400_000)
    guard FileManager.default.createFile(atPath: flag, contents: nil) else {
      throw HarnessError("cannot create \(flag)")
    }
    let failed = try watcher.waitForEvent { $0["event"] == "device-failed" }
    #expect(failed["message"]?.stringValue?.isEmpty == false, "\(failed.serialized())")
    let lostAt = Date()
    let outage = try client.request(["cmd": "status"])
    #expect(outage.result["output"]?["state"] == "failed", "\(outage.serialized())")
    // Everything still answers, and what is sent now takes effect on the clock.
    #expect(try client.request(["cmd": "ping"]).isOK)
    let midway = try #require(client.request(["cmd": "get", "key": "master.gain"]).result["presentation"]?.numberValue)
    #expect(midway > 0.2 && midway < 1, "the first fade was under way: \(midway)")
    let retarget = try client.request(["cmd": "fade", "to": 0.5, "duration": 0.3])
    let id = try #require(retarget.result["animation"]?.int, "\(retarget.serialized())")
    #expect(try client.request(["cmd": "wait", "animations": [.integer(id)], "timeout": 5]).isOK)
    #expect(try client.request(["cmd": "set", "key": "streams.a.gain", "value": 0.8, "duration": 0]).isOK)
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["presentation"] == 0.5)
    // Whatever the device had taken before it was lost; nothing more can reach it now.
    let framesBeforeReplug = try floatSamples(raw).count / 2
    usleep(200_000)
    #expect(try floatSamples(raw).count / 2 == framesBeforeReplug, "nothing written to a lost device")
    try FileManager.default.removeItem(atPath: flag)
    let recovered = try watcher.waitForEvent { $0["event"] == "device-recovered" }
    #expect(recovered["device"] == "rampd_flaky_e2e", "\(recovered.serialized())")
    let back = try client.request(["cmd": "status"]).result
    #expect(back["output"]?["state"] == "playing" && back["streams"]?.arrayValue?.count == 1)
    // The clock kept running through the outage (the stream's position counts on).
    let elapsed = Date().timeIntervalSince(lostAt)
    let advanced = Double(back["sample"]?.int ?? 0) - Double(outage.result["sample"]?.int ?? 0)
    #expect(abs(advanced / 48_000 - elapsed) < 0.5, "\(advanced / 48_000) s of samples in \(elapsed) s")
    usleep(400_000)

    // Played after the device came back: every sample at the levels reached during the outage,
    // master 0.5 × stream 0.8 (the last block may still be arriving, so it is left out).
    let samples = try floatSamples(raw)
    let resumed = Array(samples[(framesBeforeReplug * 2)..<(samples.count - 2 * 480)])
    #expect(resumed.count > 2 * 48_000 / 5, "\(resumed.count / 2) frames played since")
    let level = Float(0.8) * 0.5
    let off = resumed.firstIndex { $0 != level }
    #expect(
      off == nil, "sample \(off ?? 0) after the device came back is \(off.map { resumed[$0] } ?? 0), not \(level)")
    // Before the loss: the first fade, falling from 1 and not yet at its end.
    let lost = Array(samples[..<(framesBeforeReplug * 2)])
    #expect(lost.contains(1) && (lost.last ?? 0) < 1 && (lost.last ?? 0) > 0.2, "\(lost.last ?? -1)")
    #expect(daemon.stop() == 0)
  }

  /// An audio server that goes away under rampd (ALSA's `pipewire` PCM while PipeWire restarts,
  /// as `pcm_flaky`'s `gone` plays it): every write is an xrun that snd_pcm_recover "recovers"
  /// and the next write fails the same way. rampd does not spin on it: it says `device-failed`,
  /// goes on answering and keeping time at a CPU cost near nothing, and `device-recovered` once
  /// the server is back, playing at the level set meanwhile.
  @Test func anAudioServerThatGoesAwayEndsInDeviceFailedNotASpin() throws {
    let output = try FlakyOutput(failingWhile: "gone", device: "rampd_gone_e2e")
    defer { output.remove() }
    let (daemon, raw, gone) = (output.daemon, output.raw, output.trigger)
    let (watcher, client) = try output.playing()
    usleep(300_000)
    guard FileManager.default.createFile(atPath: gone, contents: nil) else {
      throw HarnessError("cannot create \(gone)")
    }
    let failed = try watcher.waitForEvent(timeout: 3) { $0["event"] == "device-failed" }
    #expect(failed["message"]?.stringValue?.isEmpty == false, "\(failed.serialized())")
    try expectQuietOutage(daemon, client, setting: 0.5)
    let framesBefore = try floatSamples(raw).count / 2
    try FileManager.default.removeItem(atPath: gone)
    let recovered = try watcher.waitForEvent(timeout: 10) { $0["event"] == "device-recovered" }
    #expect(recovered["device"] == "rampd_gone_e2e", "\(recovered.serialized())")
    usleep(500_000)
    #expect(try client.request(["cmd": "status"]).result["output"]?["state"] == "playing")
    let samples = try floatSamples(raw)
    let resumed = samples[(framesBefore * 2)...].dropLast(2 * 4_800)
    #expect(resumed.count > 2 * 4_800 && resumed.allSatisfy { $0 == 0.5 }, "\(resumed.count / 2) frames since")
    #expect(daemon.stop() == 0)
  }

  /// The state file on a small tmpfs that fills up: commands go on working, the failure is logged
  /// once, the previous state file stays whole and readable, and once there is room again the state
  /// is saved again.
  @Test func aFullDiskKeepsThePreviousStateAndTheDaemonServing() throws {
    let mount = NSTemporaryDirectory() + "rampd-full-\(getpid())"
    try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: mount) }
    guard Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", mount]) == 0 else {
      try Test.cancel("cannot mount a tmpfs here (needs root, or CAP_SYS_ADMIN): the full-disk test is skipped")
    }
    defer { _ = Self.run("/bin/umount", ["-l", mount]) }
    let statePath = "\(mount)/state.json"
    let daemon = try DaemonProcess(environment: ["RAMPD_STATE_PATH": statePath])
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 3)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "a", "loop": true]).isOK)
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.5, "duration": 0]).isOK)
    let saved = try waitForState(statePath) { $0["values"]?["master.gain"] == 0.5 }
    #expect(saved)

    // Fill the file system to the last byte.
    let filler = "\(mount)/filler"
    let descriptor = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    #expect(descriptor >= 0)
    let block = [UInt8](repeating: 0xAA, count: 4096)
    while write(descriptor, block, block.count) > 0 {}
    var byte: UInt8 = 1
    while write(descriptor, &byte, 1) == 1 {}
    close(descriptor)

    for value in [0.3, 0.4, 0.25] {
      let reply = try client.request(["cmd": "set", "key": "master.gain", "value": .number(value), "duration": 0])
      #expect(reply.isOK, "\(reply.serialized())")
      usleep(150_000)
    }
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 0.25)
    // A schedule that cannot be saved is refused, not silently volatile.
    let scheduled = try client.request(["cmd": "fade", "to": 0, "duration": 1, "at": 3600, "ack": "scheduled"])
    #expect(scheduled.errorCode == "internal-error" && scheduled.errorField == "ack", "\(scheduled.serialized())")
    #expect(try client.request(["cmd": "ping"]).isOK)
    // The previous state, whole: it still says 0.5.
    let kept = try JSON.parse(String(contentsOfFile: statePath, encoding: .utf8))
    #expect(kept["values"]?["master.gain"] == 0.5, "\(kept.serialized())")
    #expect(kept["schedules"] == [])

    try FileManager.default.removeItem(atPath: filler)
    #expect(try client.request(["cmd": "set", "key": "master.gain", "value": 0.75, "duration": 0]).isOK)
    let savedAgain = try waitForState(statePath) { $0["values"]?["master.gain"] == 0.75 }
    #expect(savedAgain, "saved again once there was room")
    let status = try client.request(["cmd": "status"])
    #expect(status.result["streams"]?.arrayValue?.count == 1)
    #expect(daemon.stop() == 0)
    let failures = daemon.log.split(separator: "\n").filter { $0.contains("cannot save state") }
    #expect(failures.count == 1, "logged once: \(failures)")
    #expect(failures.first?.contains("No space left on device") == true, "\(failures)")
    #expect(daemon.log.contains("saved state to \(statePath) again"))
    // The stream played on through it all.
    let left = try daemon.played(channel: 0)
    let first = try #require(left.firstIndex { $0 == 0.5 })
    let gap = left[first...].firstIndex { $0 == 0 }
    #expect(gap.map { $0 > left.count - 48_000 } ?? true, "silence at \(gap ?? 0) of \(left.count)")
  }

  /// Reads the state file until `match` accepts it (the saver writes in the background).
  private func waitForState(_ path: String, _ match: (JSONValue) -> Bool) throws -> Bool {
    for _ in 0..<100 {
      if let text = try? String(contentsOfFile: path, encoding: .utf8), let state = try? JSON.parse(text),
        match(state)
      {
        return true
      }
      usleep(20_000)
    }
    return false
  }

  static func run(_ tool: String, _ arguments: [String]) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return -1 }
    process.waitUntilExit()
    return process.terminationStatus
  }
}

/// The float samples in a raw FLOAT_LE file, none if it does not exist.
func floatSamples(_ path: String) throws -> [Float] {
  guard FileManager.default.fileExists(atPath: path) else { return [] }
  let data = try Data(contentsOf: URL(fileURLWithPath: path))
  return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self).prefix(data.count / 4)) }
}

/// rampd on a `pcm_flaky` device (`Tests/Fixtures/pcm_flaky.c`) of its own, which fails while the
/// file `trigger` exists: with `failingWhile` "flag", as an unplugged card; "gone", as ALSA's
/// `pipewire` PCM while its server is away. What it plays is appended to `raw`.
struct FlakyOutput {
  let scratch: String
  let raw: String
  let trigger: String
  let daemon: DaemonProcess

  init(failingWhile option: String, device: String) throws {
    scratch = NSTemporaryDirectory() + "rampd-\(device)-\(getpid())"
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    let library = "\(scratch)/libasound_module_pcm_rampd_flaky.so"
    try Fixture.compile("pcm_flaky.c", to: library)
    raw = "\(scratch)/played.raw"
    trigger = "\(scratch)/\(option)"
    // Without the limiter: the tests read the gain off a full-scale file.
    daemon = try DaemonProcess(
      limiter: "off",
      extraALSA: """
        pcm_type.rampd_flaky { lib "\(library)" }
        pcm.\(device) { type rampd_flaky; file "\(raw)"; \(option) "\(trigger)" }
        """,
      environment: ["RAMPD_OUTPUT_DEVICE": device])
  }

  /// A client subscribed to the device's events, and one that started a stream `a` playing a
  /// constant 1 in a loop.
  func playing() throws -> (watcher: LineClient, client: LineClient) {
    let watcher = try daemon.client()
    #expect(try watcher.request(["cmd": "subscribe", "events": ["device-failed", "device-recovered"]]).isOK)
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 2)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "a", "loop": true]).isOK)
    return (watcher, client)
  }

  func remove() { try? FileManager.default.removeItem(atPath: scratch) }
}

/// While rampd's device is lost (after `device-failed`), or idle without it: it is all but idle
/// for two seconds (at most `cpu` seconds of CPU; with `reopening`, the thread that reopens the
/// device apart, at most that much: its attempts' cost is mostly the ALSA plugin's, and grows
/// with the machine's load), `status` answers that the output is in `state`, and master.gain
/// takes `setting` for when it is back.
func expectQuietOutage(
  _ daemon: DaemonProcess, _ client: LineClient, setting: Double, state: JSONValue = "failed", cpu most: Double = 0.5,
  reopening: Double? = nil
) throws {
  let pid = daemon.process.processIdentifier
  let before = threadCPUSeconds(pid)
  #expect(!before.isEmpty, "no thread of \(pid) to measure")
  usleep(2_000_000)
  let spent = threadCPUSeconds(pid).map { ($0.key, $0.value - (before[$0.key] ?? 0)) }.filter { $0.1 > 0 }
  let recovery = spent.filter { $0.0.hasPrefix("rampd-recovery/") }.reduce(0) { $0 + $1.1 }
  let cpu = spent.reduce(0) { $0 + $1.1 } - (reopening == nil ? 0 : recovery)
  let threads = spent.sorted { $0.1 > $1.1 }.map { "\($0.0) \(Int($0.1 * 1e6)) µs" }.joined(separator: ", ")
  #expect(cpu < most, "\(cpu) s of CPU in 2 s without a device: \(threads)")
  if let reopening { #expect(recovery < reopening, "\(recovery) s of CPU reopening the device in 2 s: \(threads)") }
  let outage = try client.request(["cmd": "status"])
  #expect(outage.result["output"]?["state"] == state, "\(outage.serialized())")
  #expect(try client.request(["cmd": "set", "key": "master.gain", "value": .number(setting), "duration": 0]).isOK)
}
