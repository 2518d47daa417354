import Foundation
import RampEngine
import RampProtocol
import Testing

@testable import RampDaemon
@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Multi-room through Snapcast, with the files of config/snapcast as shipped (only the FIFO's path
/// and the ports changed): the real `rampd` plays into the `snapcast` ALSA PCM, which writes into
/// a FIFO; the real `snapserver` (Debian's) reads it; the real `snapclient` receives it over TCP
/// on 127.0.0.1 and plays it into a raw file (its `file` player, which keeps time like a sound
/// card). Nothing is published over mDNS: the processes get no D-Bus system bus, so snapserver's
/// Avahi client cannot reach a daemon.
///
/// snapserver and snapclient come from `script/setup`. When they are missing the test fails: it is
/// not skipped.
@Suite struct SnapcastTests {
  static let rate = 48_000
  /// The fade, ease-in-out from 1 to 0.
  static let fadeSeconds = 1.0
  /// What snapclient's `file` player writes at a time: 50 ms of audio, every 50 ms, each write
  /// 10 ms before its first sample is due (snapcast 0.26, client/player/file_player.cpp).
  static let playerChunkFrames = 2_400
  static let playerLeadSeconds = 0.010

  /// A fade-out played by rampd arrives at a snapclient's output with its shape, sample by sample,
  /// and as late as Snapcast's buffer says. The fade is scheduled with `at` for a known wall-clock
  /// time, and the snapclient's recording is watched as it grows, so the time each sample is due
  /// at the client's output is known: the latency, from `at` to the client, is measured.
  @Test(.timeLimit(.minutes(1))) func aFadeArrivesAtASnapclientWithItsShapeAndSnapcastsLatency() throws {
    let snapserverPath = try #require(
      SystemTool.path("snapserver"), "snapserver is not installed (script/setup installs it)")
    let snapclientPath = try #require(
      SystemTool.path("snapclient"), "snapclient is not installed (script/setup installs it)")
    let shipped = try ShippedSnapcastConfiguration()
    let directory = NSTemporaryDirectory() + "rampd-snapcast-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let fifo = "\(directory)/rampd.fifo"
    let heard = "\(directory)/heard.raw"
    // config/snapcast/snapcast.tmpfiles makes the FIFO; snapserver's source says mode=read.
    guard mkfifo(fifo, 0o600) == 0 else { throw HarnessError("mkfifo \(fifo): \(String(cString: strerror(errno)))") }
    try shipped.snapserver(fifo: fifo).write(toFile: "\(directory)/snapserver.conf", atomically: true, encoding: .utf8)
    let port = try freeLoopbackPort()
    // No D-Bus system bus, so no Avahi (snapserver 0.26 has no switch for it).
    let noAvahi = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory)/no-bus"]

    let server = try ChildProcess(
      snapserverPath,
      [
        "--config", "\(directory)/snapserver.conf", "--server.datadir=\(directory)",
        "--stream.bind_to_address=127.0.0.1", "--stream.port=\(port)", "--http.enabled=false",
        "--tcp.enabled=false", "--logging.sink=stderr",
      ], environment: noAvahi, niceness: -10)
    defer { server.stop() }
    try waitUntil("snapserver listens on 127.0.0.1:\(port)", log: server) {
      server.log.contains("Creating stream acceptor")
    }
    let client = try ChildProcess(
      snapclientPath,
      [
        "--host", "127.0.0.1", "--port", "\(port)", "--hostID", "rampd-test-\(getpid())",
        "--player", "file:filename=\(heard)", "--logsink", "stderr",
      ], environment: noAvahi, niceness: -10)
    defer { client.stop() }
    // The shipped configuration's output, without the limiter: the fade's shape is read off a
    // full-scale tone.
    var environment = try shipped.rampdOutputEnvironment()
    environment["RAMPD_OUTPUT_LIMITER"] = "off"
    let daemon = try DaemonProcess(extraALSA: shipped.asound(fifo: fifo), environment: environment)
    defer { daemon.stop() }
    let control = try daemon.client()
    let status = try control.request(["cmd": "status"])
    #expect(status.result["output"]?["device"] == "snapcast" && status.result["output"]?["format"] == "s16")
    #expect(status.result["output"]?["pacing"] == "device", "the pipe's reader keeps the time")

    let tone = try daemon.constantFile("one", seconds: 15)
    #expect(try control.request(["cmd": "play", "path": .string(tone), "stream": "tone"]).isOK)
    // The tone reaches the client a second or so later; half a second of it, steady, before the fade.
    try waitUntil("snapclient plays rampd's tone", timeout: 10, log: client) {
      fullScaleRun(in: (try? RecordedPCM(path: heard).left) ?? []) >= Self.rate / 2
    }

    // The fade starts at a wall-clock time given with `at`.
    let due = ((Date().timeIntervalSince1970 + 0.3) * 1000).rounded() / 1000
    let scheduled = try control.request([
      "cmd": "fade-out", "key": "streams.tone.gain", "duration": .number(Self.fadeSeconds), "curve": "ease-in-out",
      "at": .string(RFC3339.format(due)), "ack": "scheduled",
    ])
    #expect(scheduled.isOK, "\(scheduled.serialized())")
    // The recording's size, looked at every 2 ms until the fade and a little silence have arrived.
    var growth: [(time: Double, bytes: Int)] = []
    let watchUntil = due + Self.fadeSeconds + 2.8
    while Date().timeIntervalSince1970 < watchUntil {
      var info = stat()
      if stat(heard, &info) == 0 { growth.append((Date().timeIntervalSince1970, Int(info.st_size))) }
      usleep(2_000)
    }
    // What the pipe holds (64 KiB unless the system says otherwise): rampd keeps it full.
    let pipeReader = open(fifo, O_RDONLY | O_NONBLOCK)
    let pipeBytes = fcntl(pipeReader, 1032)  // F_GETPIPE_SZ
    close(pipeReader)
    daemon.stop()
    client.stop()
    server.stop()

    let recording = try RecordedPCM(path: heard)
    let left = recording.left
    // The same on both channels but for rampd's dither, drawn for each channel (1.5 LSB each).
    let channelsApart = zip(left, recording.right).reduce(0) { max($0, abs(Int($1.0) - Int($1.1))) }
    #expect(channelsApart <= 3, "the channels differ by \(channelsApart) LSB")
    let fade = try FadeMatch(in: left, seconds: Self.fadeSeconds, rate: Self.rate)
    // Snapcast carries 16-bit samples: rampd's rounding with TPDF dither leaves each within 1.5 LSB
    // of the curve (1.0 itself clips to 32767), and FLAC is lossless. snapclient does not resample:
    // it keeps clients in sync by dropping or repeating single frames, at most 0.05 % of them
    // (client/stream.cpp: rate ± 0.0005). Over the 1 s fade that is 24 frames, each moving the rest
    // of the fade by a frame, where the curve falls at most 1.72/s (ease-in-out at its middle); half
    // a frame more for the fit. Together 9.2e-4 (30 LSB); a curve off by 1 % of its duration misses
    // by 1.7e-2.
    let steepest = 1.72 / Double(Self.rate)
    let tolerance = 1.5 / 32_768 + (0.0005 * Self.fadeSeconds * Double(Self.rate) + 0.5) * steepest
    #expect(
      fade.misfit < tolerance,
      "off the ease-in-out curve by \(fade.misfit) (tolerance \(tolerance))\nsnapserver: \(server.log)\nsnapclient: \(client.log)"
    )
    #expect(fade.misfit > 0, "a 16-bit recording cannot match the curve exactly: the comparison is not looking")
    let before = left[max(fade.start - Self.rate / 2, 0)..<fade.start]
    #expect(
      before.count == Self.rate / 2 && before.allSatisfy { $0 == 32_767 },
      "full scale for 0.5 s before\nsnapserver: \(server.log)\nsnapclient: \(client.log)\nrampd: \(daemon.log)")
    let after = left[(fade.start + Int(Self.fadeSeconds * Double(Self.rate)))...].prefix(Self.rate / 5)
    #expect(after.count == Self.rate / 5 && after.allSatisfy { abs(Int($0)) <= 1 }, "silent after")

    // The client plays 48000 frames a second: a sample format that disagrees somewhere (snapserver
    // reading 44100 Hz, say) leaves the samples as they are but plays them at another speed.
    let watched = try #require(growth.last).time - growth[0].time
    let playedRate = Double(growth.last!.bytes - growth[0].bytes) / Double(recording.bytesPerFrame) / watched
    #expect(abs(playedRate / Double(Self.rate) - 1) < 0.02, "the client played \(playedRate) frames a second")

    // When the fade's first sample is due at the client's output: its 50 ms chunk was written
    // between two looks at the file, 10 ms before the chunk's first sample is due.
    let chunk = fade.start / Self.playerChunkFrames
    let chunkEnd = (chunk + 1) * Self.playerChunkFrames * recording.bytesPerFrame
    let written = try #require(growth.firstIndex { $0.bytes >= chunkEnd }, "the fade's chunk was seen written")
    #expect(written > 0, "the recording was watched before the fade's chunk was written")
    let seen = growth[written].time
    let uncertainty = written > 0 ? seen - growth[written - 1].time : 1
    let heardAt =
      seen + Self.playerLeadSeconds + Double(fade.start - chunk * Self.playerChunkFrames) / Double(Self.rate)
    let latency = heardAt - due
    let snapcastBuffer = shipped.snapserverBufferSeconds
    let rampdBuffer = Double(try #require(status.result["output"]?["bufferFrames"]?.int)) / Double(Self.rate)
    let pipe = Double(pipeBytes) / Double(Self.rate * recording.bytesPerFrame)
    print(
      "Snapcast: the fade is due at the snapclient's output \(String(format: "%.3f", latency)) s after its `at` "
        + "(to \(String(format: "%.3f", uncertainty)) s); snapserver's buffer \(snapcastBuffer) s, the pipe "
        + "\(String(format: "%.3f", pipe)) s, rampd's buffer \(rampdBuffer) s; within \(fade.misfit) of the curve")
    // rampd renders the fade at its `at`; the `file` plugin keeps back one buffer; the pipe holds
    // at most `pipe`: less a 20 ms chunk that snapserver has just read and a 10 ms period rampd
    // could not write yet, and less again while a busy machine keeps rampd from refilling it at
    // once; snapserver stamps each chunk as it reads it (on its 20 ms grid) and has it played its
    // buffer later; snapclient's player wakes every 50 ms, 10 ms ahead, on a timer of its own (20 ms
    // allowed for both timers). The estimate is late by at most the time between the last two looks
    // at the file. Seven runs, two beside other tests: 1.352 s to 1.379 s.
    let fullPipe = snapcastBuffer + rampdBuffer + pipe
    #expect(
      latency > snapcastBuffer + rampdBuffer - 0.02 - 0.02 && latency < fullPipe + 0.02 + uncertainty,
      "latency \(latency) s, expected \(snapcastBuffer + rampdBuffer - 0.04) s to \(fullPipe + 0.02) s")
  }
}

/// The files of config/snapcast, as shipped, with the places that differ on a test machine.
struct ShippedSnapcastConfiguration {
  static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("config/snapcast").path
  static let shippedFIFO = "/run/snapcast/rampd.fifo"
  let asoundText: String
  let snapserverText: String
  let rampdText: String

  init() throws {
    asoundText = try String(contentsOfFile: "\(Self.directory)/asound.conf", encoding: .utf8)
    snapserverText = try String(contentsOfFile: "\(Self.directory)/snapserver.conf", encoding: .utf8)
    rampdText = try String(contentsOfFile: "\(Self.directory)/rampd.toml", encoding: .utf8)
  }

  func asound(fifo: String) throws -> String {
    guard asoundText.contains("\"\(Self.shippedFIFO)\"") else { throw HarnessError("asound.conf names no FIFO") }
    return asoundText.replacingOccurrences(of: Self.shippedFIFO, with: fifo)
  }

  func snapserver(fifo: String) throws -> String {
    guard snapserverText.contains("pipe://\(Self.shippedFIFO)?") else {
      throw HarnessError("snapserver.conf reads no FIFO")
    }
    return snapserverText.replacingOccurrences(of: Self.shippedFIFO, with: fifo)
  }

  /// `buffer` of snapserver.conf's [stream], in seconds.
  var snapserverBufferSeconds: Double {
    let line = snapserverText.split(separator: "\n").first { $0.hasPrefix("buffer") }
    return line.flatMap { Double($0.split(separator: "=").last!.trimmingCharacters(in: .whitespaces)) }.map {
      $0 / 1000
    }
      ?? 1
  }

  /// rampd.toml's [output], read by rampd's own parser, as the `RAMPD_OUTPUT_*` variables that put
  /// it over the test daemon's file.
  func rampdOutputEnvironment() throws -> [String: String] {
    let configuration = try DaemonConfiguration.parse(toml: rampdText, source: "config/snapcast/rampd.toml")
    var environment: [String: String] = [:]
    for (key, value) in configuration.summary() where key.hasPrefix("output.") {
      let name = try #require(ConfigSchema.keysByPath[key]).environmentName
      environment[name] = value.hasPrefix("\"") ? String(value.dropFirst().dropLast()) : value
    }
    return environment
  }
}

/// What snapclient's `file` player wrote: raw S16_LE, 2 channels.
struct RecordedPCM {
  let bytesPerFrame = 4
  let left: [Int16]
  let right: [Int16]

  init(path: String) throws {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    let samples = data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)).map { Int16(littleEndian: $0) } }
    let frames = samples.count / 2
    left = (0..<frames).map { samples[2 * $0] }
    right = (0..<frames).map { samples[2 * $0 + 1] }
  }
}

/// The longest run of full-scale samples (1.0 as 16 bits) in `samples`.
func fullScaleRun(in samples: [Int16]) -> Int {
  var longest = 0
  var run = 0
  for sample in samples {
    run = sample == 32_767 ? run + 1 : 0
    longest = max(longest, run)
  }
  return longest
}

/// An ease-in-out fade from 1 to 0 found in 16-bit samples: the start that fits the curve best,
/// and how far from the curve the samples are there.
struct FadeMatch {
  let start: Int
  let misfit: Double

  init(in samples: [Int16], seconds: Double, rate: Int) throws {
    let length = Int(seconds * Double(rate))
    let curve = (0...length).map { 1 - TimingFunction.easeInEaseOut.value(at: Double($0) / Double(length)) }
    // The curve is symmetric: it crosses one half at its middle, where it is steepest. Only
    // silence follows the fade, so its middle is the last fall through one half.
    let half = try #require(
      samples.indices.dropFirst().last { samples[$0 - 1] >= 16_384 && samples[$0] < 16_384 },
      "nothing falls through one half")
    func worstError(from start: Int) -> Double {
      guard start >= 0, start + length < samples.count else { return .infinity }
      var worst = 0.0
      for k in 0...length { worst = max(worst, abs(Double(samples[start + k]) / 32_768 - curve[k])) }
      return worst
    }
    let middle = half - length / 2
    let candidates = (middle - 48)...(middle + 48)
    let misfits = candidates.map(worstError(from:))
    let best = try #require(misfits.indices.min { misfits[$0] < misfits[$1] })
    start = candidates.lowerBound + best
    misfit = misfits[best]
  }
}

/// A child process (snapserver, snapclient) with its standard error kept, stopped for sure.
final class ChildProcess {
  let process = Process()
  private let stderr = Pipe()
  private let sink = LogSink()
  var log: String { sink.text }

  /// `niceness` below 0 (where allowed: as root) runs it through `nice`, as Snapcast's services
  /// run: a snapserver starved of the CPU for 50 ms resyncs its stream, a gap every client plays.
  init(_ executable: String, _ arguments: [String], environment: [String: String], niceness: Int = 0) throws {
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if niceness != 0, let nice = SystemTool.path("nice") {
      // nice execs the command (the same process), at its normal priority when refused.
      process.executableURL = URL(fileURLWithPath: nice)
      process.arguments = ["-n", "\(niceness)", executable] + arguments
    }
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    process.standardOutput = FileHandle.nullDevice
    process.standardError = stderr
    sink.collect(from: stderr)
    try process.run()
  }

  /// SIGTERM, then SIGKILL when it has not exited within 3 s.
  func stop() {
    guard process.isRunning else { return }
    process.terminate()
    let deadline = Date().addingTimeInterval(3)
    while process.isRunning && Date() < deadline { usleep(10_000) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
  }

  deinit { stop() }
}

/// Polls `condition` every 20 ms for at most `timeout` seconds; the child's log says why not.
func waitUntil(_ what: String, timeout: Double = 5, log child: ChildProcess, _ condition: () -> Bool) throws {
  let deadline = Date().addingTimeInterval(timeout)
  while !condition() {
    guard child.process.isRunning, Date() < deadline else {
      throw HarnessError("\(what): not within \(timeout) s. Log:\n\(child.log)")
    }
    usleep(20_000)
  }
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
func freeLoopbackPort() throws -> Int {
  let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  defer { close(descriptor) }
  var address = loopback(port: 0)
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  let bound = withUnsafeMutablePointer(to: &address) { pointer in
    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
    }
  }
  guard bound else { throw HarnessError("no free port: \(String(cString: strerror(errno)))") }
  return Int(UInt16(bigEndian: address.sin_port))
}

private func loopback(port: Int) -> sockaddr_in {
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_port = UInt16(port).bigEndian
  address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
  return address
}
