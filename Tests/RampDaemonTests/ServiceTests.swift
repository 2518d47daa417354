import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// What the service manager sees: sd_notify messages, reloads on SIGHUP, and a graceful stop on
/// SIGTERM that fades the audio out instead of cutting it.
@Suite(.serialized) struct ServiceTests {

  @Test func notifiesReadyWatchdogReloadingAndStopping() throws {
    let receiver = try NotifyReceiver()
    let daemon = try DaemonProcess(environment: [
      "NOTIFY_SOCKET": receiver.path, "WATCHDOG_USEC": "400000",
    ])
    let ready = try receiver.await { $0.contains("READY=1") }
    #expect(ready.contains("STATUS=idle"), "\(ready)")
    // Fed every 0.2 s while the render loop runs: at least 4 pings in a second.
    let start = Date()
    var pings = 0
    while Date().timeIntervalSince(start) < 1.0 {
      if let message = receiver.receive(timeout: 0.1), message.contains("WATCHDOG=1") { pings += 1 }
    }
    #expect(pings >= 4 && pings <= 7, "\(pings) watchdog pings in 1 s")
    // STATUS follows what plays.
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 5)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "news"]).isOK)
    let playing = try receiver.await { $0.contains("STATUS=playing 1 stream: news") }
    #expect(playing.contains("master.gain 1.000"))
    kill(daemon.process.processIdentifier, SIGHUP)
    let reloading = try receiver.await { $0.contains("RELOADING=1") }
    #expect(reloading.contains("MONOTONIC_USEC="))
    _ = try receiver.await { $0.contains("READY=1") }
    #expect(daemon.stop() == 0)
    while receiver.receive(timeout: 0.1) != nil {}
    #expect(receiver.seen.contains { $0.contains("STOPPING=1") })
  }

  @Test func logLinesCarryJournalPrioritiesUnderSystemd() throws {
    let daemon = try DaemonProcess(journal: true)
    let file = try daemon.constantFile("one", seconds: 0.2)
    #expect(try daemon.client().request(["cmd": "play", "path": .string(file)]).isOK)
    usleep(500_000)
    #expect(daemon.stop() == 0)
    let lines = daemon.log.split(separator: "\n").filter { !$0.hasPrefix("ALSA lib") }
    #expect(!lines.isEmpty && lines.allSatisfy { $0.range(of: #"^<[2-7]>"#, options: .regularExpression) != nil })
    #expect(lines.contains { $0.hasPrefix("<5>rampd") && $0.contains("listening") }, "\(lines)")
    #expect(lines.contains { $0.hasPrefix("<6>stream started") }, "\(lines)")
    // By hand (no journal), lines carry a timestamp and the level's name instead.
    let plain = try DaemonProcess()
    #expect(plain.stop() == 0)
    #expect(plain.log.contains(" notice rampd") && !plain.log.contains("<5>"), "\(plain.log)")
  }

  @Test func theRenderThreadRunsInRealTimeWhereTheLimitAllowsIt() throws {
    // Without the limit it degrades to normal priority, and says why.
    let plain = try DaemonProcess(realtimeLimit: 0)
    let pid = plain.process.processIdentifier
    var output = try plain.client().request(["cmd": "status"]).result["output"]
    #expect(output?["realtimePriority"]?.int == 0)
    #expect(renderThreadScheduling(pid)?.policy == SCHED_OTHER)
    let refused = output?["realtime"]
    #expect(refused?["granted"] == false && refused?["priority"]?.int == 0, "\(refused?.serialized() ?? "")")
    #expect(refused?["reason"] == "limit" && refused?["limit"]?.int == 0, "\(refused?.serialized() ?? "")")
    #expect(refused?["message"]?.stringValue?.contains("RLIMIT_RTPRIO is 0") == true)
    // What status says is what the kernel says of the thread now, whoever set it.
    if renderThreadMadeRealtime(pid) {
      output = try plain.client().request(["cmd": "status"]).result["output"]
      #expect(renderThreadScheduling(pid).map { [$0.policy, $0.priority] } == [SCHED_FIFO, 20])
      #expect(output?["realtime"]?["granted"] == true && output?["realtime"]?["priority"]?.int == 20)
      #expect(output?["realtimePriority"]?.int == 20, "\(output?.serialized() ?? "")")
    } else {
      print("sched_setscheduler refused here: status after chrt not checked")
    }
    #expect(plain.stop() == 0)
    // Raising RLIMIT_RTPRIO needs a hard limit that allows it (some containers pin it at 0).
    var hard = rlimit()
    getrlimit(__rlimit_resource_t(__RLIMIT_RTPRIO.rawValue), &hard)
    guard hard.rlim_max >= 20 else {
      print("RLIMIT_RTPRIO's hard limit is \(hard.rlim_max) here: SCHED_FIFO not checked")
      return
    }
    let allowed = try DaemonProcess(realtimeLimit: 20)
    output = try allowed.client().request(["cmd": "status"]).result["output"]
    #expect(output?["realtimePriority"]?.int == 20, "\(output?.serialized() ?? "")")
    #expect(output?["realtime"] == ["granted": true, "priority": 20, "limit": 20], "\(output?.serialized() ?? "")")
    // The kernel agrees: the render thread's policy is SCHED_FIFO, priority 20.
    let scheduling = renderThreadScheduling(allowed.process.processIdentifier)
    #expect(scheduling.map { [$0.policy, $0.priority] } == [SCHED_FIFO, 20], "\(String(describing: scheduling))")
    #expect(allowed.stop() == 0)
  }

  @Test func statusSaysWhetherMemoryIsLockedAsTheKernelCountsIt() throws {
    // Under a finite limit the process may not exceed, rampd does not lock (later mappings would
    // be refused) and says why. Root may exceed any limit with CAP_IPC_LOCK: taken away here.
    var launcher = ["/usr/bin/prlimit", "--memlock=8388608", "--"]
    if geteuid() == 0 { launcher += ["/usr/bin/setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"] }
    let limited = try DaemonProcess(launcher: launcher)
    let lock = try limited.client().request(["cmd": "status"]).result["output"]?["memoryLock"]
    #expect(lock?["granted"] == false && lock?["reason"] == "limit", "\(lock?.serialized() ?? "")")
    #expect(lock?["limit"]?.int == 8_388_608, "\(lock?.serialized() ?? "")")
    #expect(lock?["message"]?.stringValue?.contains("LimitMEMLOCK=infinity") == true)
    #expect(try memoryKiB(limited.process.processIdentifier, "VmLck") == 0)
    #expect(limited.stop() == 0)
    // As started here: locked or not, status agrees with the kernel's count of locked memory, and
    // names the limit the process has.
    let plain = try DaemonProcess()
    let pid = plain.process.processIdentifier
    let status = try #require(try plain.client().request(["cmd": "status"]).result["output"]?["memoryLock"])
    let locked = try memoryKiB(pid, "VmLck")
    #expect((status["granted"] == true) == (locked > 0), "\(status.serialized()), VmLck \(locked) kB")
    let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
    let soft = limits.split(separator: "\n").first { $0.hasPrefix("Max locked memory") }?
      .split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first
    #expect(status["limit"]?.int == soft.flatMap { Int($0) }, "\(status.serialized()), limit \(soft ?? "?")")
    if status["granted"] == true {
      print("memory locked: VmLck \(locked) kB, VmRSS \(try residentKiB(pid)) kB")
    } else {
      #expect(status["reason"] != nil && status["message"] != nil, "\(status.serialized())")
      print("memory not locked here: \(status.serialized())")
    }
    #expect(plain.stop() == 0)
  }

  @Test func sighupAppliesWhatItCanAndNamesWhatNeedsARestart() throws {
    let daemon = try DaemonProcess()
    let configuration = "\(daemon.directory)/rampd.toml"
    let original = try String(contentsOfFile: configuration, encoding: .utf8)
    let client = try daemon.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["config-reloaded"]]).isOK)
    #expect(try client.request(["cmd": "fade", "to": 0.5]).result["duration"]?.numberValue == 1)

    // A broken file is refused whole: no event, the old defaults stay, the daemon serves on.
    try (original + "\n[fade]\nduration = \"forever\"\n").write(
      toFile: configuration, atomically: true, encoding: .utf8)
    kill(daemon.process.processIdentifier, SIGHUP)
    usleep(300_000)
    #expect(try client.request(["cmd": "fade", "to": 0.6]).result["duration"]?.numberValue == 1)
    #expect(client.events.isEmpty)

    let changed = original.replacingOccurrences(of: "period = \"5ms\"", with: "period = \"10ms\"")
      .replacingOccurrences(of: "[fade]\n", with: "[fade]\nduration = \"2s\"\n")
    try changed.write(toFile: configuration, atomically: true, encoding: .utf8)
    kill(daemon.process.processIdentifier, SIGHUP)
    let event = try client.waitForEvent { $0["event"] == "config-reloaded" }
    #expect(event["applied"] == ["fade.duration"], "\(event.serialized())")
    #expect(event["restartRequired"] == ["output.period"], "\(event.serialized())")
    #expect(try client.request(["cmd": "fade", "to": 0.7]).result["duration"]?.numberValue == 2)
    let status = try client.request(["cmd": "status"])
    #expect(status.result["output"]?["periodFrames"]?.int == 240)
    #expect(daemon.stop() == 0)
    #expect(daemon.log.contains("fade.duration") && daemon.log.contains("output.period"), "\(daemon.log)")
  }

  @Test func sigtermFadesEveryStreamOutBeforeExiting() throws {
    let daemon = try DaemonProcess(limiter: "off", extraConfiguration: "[shutdown]\nfade = \"200ms\"")
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 10)
    #expect(try client.request(["cmd": "play", "path": .string(file)]).isOK)
    usleep(400_000)
    #expect(daemon.stop() == 0)
    let left = try daemon.played(channel: 0)
    let lastLoud = try #require(left.lastIndex { $0 > 0.999 })
    let end = try #require(left.lastIndex { $0 != 0 })
    // From full level to silence over the 200 ms fade (9600 frames), never by a jump.
    let length = end - lastLoud
    #expect(length > 9_000 && length < 10_000, "the fade took \(length) frames")
    var steepest: Float = 0
    for index in lastLoud..<end { steepest = max(steepest, abs(left[index + 1] - left[index])) }
    #expect(steepest < 0.001, "largest step \(steepest)")
    #expect(left[end] < 0.001)
  }

  @Test func aSecondSignalExitsAtOnce() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[shutdown]\nfade = \"10s\"")
    let client = try daemon.client()
    let file = try daemon.constantFile("one", seconds: 20)
    #expect(try client.request(["cmd": "play", "path": .string(file)]).isOK)
    usleep(200_000)
    let pid = daemon.process.processIdentifier
    let sent = Date()
    kill(pid, SIGTERM)
    usleep(300_000)
    #expect(daemon.process.isRunning, "still fading out")
    kill(pid, SIGTERM)
    daemon.process.waitUntilExit()
    let took = Date().timeIntervalSince(sent)
    #expect(took < 2, "exited after \(took) s")
    #expect(daemon.process.terminationStatus == 128 + SIGTERM)
  }
}

/// A datagram socket standing in for systemd's notification socket.
final class NotifyReceiver {
  let path: String
  private let descriptor: CInt
  private(set) var seen: [String] = []

  init() throws {
    path = NSTemporaryDirectory() + "rampd-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
    descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    let bound = UnixAddress(path)?.bind(descriptor) ?? -1
    guard bound == 0 else { throw HarnessError("bind \(path): \(String(cString: strerror(errno)))") }
  }

  deinit {
    close(descriptor)
    unlink(path)
  }

  /// The next message, or nil after `timeout` seconds.
  func receive(timeout: Double) -> String? {
    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    guard poll(&poller, 1, Int32(timeout * 1000)) > 0 else { return nil }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = recv(descriptor, &buffer, buffer.count, 0)
    guard count > 0 else { return nil }
    let message = String(decoding: buffer[..<count], as: UTF8.self)
    seen.append(message)
    return message
  }

  /// Waits for a message matching `match` (10 s at most).
  func await(_ match: (String) -> Bool) throws -> String {
    let deadline = Date().addingTimeInterval(10)
    while Date() < deadline {
      if let message = receive(timeout: 0.1), match(message) { return message }
    }
    throw HarnessError("no matching notification; saw \(seen)")
  }
}
