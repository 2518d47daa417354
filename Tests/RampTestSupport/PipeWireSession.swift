import Foundation
import RampProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// A PipeWire of the test's own, as a desktop login has one, with no sound card and no systemd: a
/// private `XDG_RUNTIME_DIR`, a session D-Bus, `pipewire`, `wireplumber`, and a null sink made
/// with `pw-cli create-node` that `pw-record` records from. A client that has `environment`
/// reaches it, through ALSA's `pipewire` PCM (pipewire-alsa) or, with `pulse`, ALSA's `pulse`
/// PCM (pipewire-pulse), or natively (libpipewire, `PipeWireStream`).
final class PipeWireSession {
  static let sink = "rampd-test-sink"
  let runtime: String
  let environment: [String: String]
  private var bus: Process?
  private var servers: [Process] = []
  /// Whether `pipewire-pulse` serves PulseAudio clients too (ALSA's `pulse` PCM).
  private let pulse: Bool

  /// `started` false: the bus only, the audio servers left for `start`.
  init(name: String = #function, pulse: Bool = false, started: Bool = true) throws {
    self.pulse = pulse
    runtime =
      NSTemporaryDirectory()
      + "rampd-pw-\(getpid())-\(name.prefix { $0.isLetter })-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(
      atPath: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    environment = [
      "XDG_RUNTIME_DIR": runtime, "DBUS_SESSION_BUS_ADDRESS": "unix:path=\(runtime)/bus",
      // Its configuration and state in the test's directory, not the user's.
      "XDG_CONFIG_HOME": "\(runtime)/config", "XDG_STATE_HOME": "\(runtime)/state", "HOME": runtime,
      "PIPEWIRE_RUNTIME_DIR": runtime, "PULSE_RUNTIME_PATH": "\(runtime)/pulse",
    ]
    let bus = try launch("dbus-daemon", ["--session", "--nofork", "--address=unix:path=\(runtime)/bus"], log: "dbus")
    self.bus = bus
    try waitFor("the session bus") { FileManager.default.fileExists(atPath: "\(runtime)/bus") }
    if started { try start() }
  }

  deinit {
    // Killed, not asked: wireplumber may take its time over SIGTERM, and nothing of theirs is kept.
    stop()
    if let bus, bus.isRunning {
      Glibc.kill(bus.processIdentifier, SIGKILL)
      bus.waitUntilExit()
    }
    try? FileManager.default.removeItem(atPath: runtime)
  }

  /// Starts the audio server and the session manager, and makes the null sink.
  func start() throws {
    servers = [try launch("pipewire", [], log: "pipewire")]
    try waitFor("pipewire's socket") { FileManager.default.fileExists(atPath: "\(runtime)/pipewire-0") }
    servers.append(try launch("wireplumber", [], log: "wireplumber"))
    if pulse {
      servers.append(try launch("pipewire-pulse", [], log: "pipewire-pulse"))
      try waitFor("pipewire-pulse's socket") { FileManager.default.fileExists(atPath: "\(runtime)/pulse/native") }
    }
    try makeSink()
  }

  /// Makes the null sink, and waits until the session manager takes it as the default.
  func makeSink() throws {
    let made = try runProcess(
      "/usr/bin/pw-cli",
      [
        "create-node", "adapter",
        "{ factory.name=support.null-audio-sink node.name=\(Self.sink) media.class=Audio/Sink object.linger=true"
          + " audio.position=[FL FR] audio.rate=48000 }",
      ], environment: fullEnvironment)
    guard made.status == 0 else { throw HarnessError("pw-cli create-node: \(made)") }
    // The sink is usable once the session manager has taken it as the default.
    try waitFor("the null sink as the default") {
      let status = try? runProcess("/usr/bin/wpctl", ["inspect", "@DEFAULT_AUDIO_SINK@"], environment: fullEnvironment)
      return status?.status == 0 && status?.stdout.contains(Self.sink) == true
    }
  }

  /// Removes the null sink, as unplugging the only sound card does: the streams linked to it
  /// are left with nothing to play into.
  func removeSink() throws {
    let removed = try runProcess("/usr/bin/pw-cli", ["destroy", Self.sink], environment: fullEnvironment)
    guard removed.status == 0 else { throw HarnessError("pw-cli destroy: \(removed)") }
    try waitFor("the null sink gone") { (try? sinkState()) == .some(nil) }
  }

  /// The PipeWire server's process id while it runs.
  var serverPID: pid_t? { servers.first.map(\.processIdentifier) }

  /// The state of the null sink's node (`running`, `idle`, `suspended`), from `pw-dump`.
  func sinkState() throws -> String? {
    let dump = try runProcess("/usr/bin/pw-dump", [], environment: fullEnvironment)
    guard dump.status == 0, case .array(let objects) = try JSON.parse(dump.stdout, maxDepth: 64) else {
      throw HarnessError("pw-dump: \(dump.status)")
    }
    for object in objects where object["type"] == "PipeWire:Interface:Node" {
      if object["info"]?["props"]?["node.name"] == .string(Self.sink) { return object["info"]?["state"]?.stringValue }
    }
    return nil
  }

  /// Kills the server and the session manager (SIGKILL), as a crash does, or a restart that
  /// does not wait for its clients.
  func stop() {
    for server in servers.reversed() where server.isRunning {
      Glibc.kill(server.processIdentifier, SIGKILL)
      server.waitUntilExit()
    }
    servers = []
    try? FileManager.default.removeItem(atPath: "\(runtime)/pipewire-0")
    try? FileManager.default.removeItem(atPath: "\(runtime)/pipewire-0.lock")
    try? FileManager.default.removeItem(atPath: "\(runtime)/pulse")
  }

  /// Records `seconds` of what the null sink plays, as interleaved stereo floats.
  func record(seconds: Double) throws -> [Float] {
    let recording = try startRecording()
    usleep(UInt32(seconds * 1e6))
    return try recording.finish()
  }

  /// Starts recording what the null sink plays; `finish` returns it.
  func startRecording() throws -> Recording {
    let wav = "\(runtime)/recorded-\(UInt32.random(in: 0...UInt32.max)).wav"
    let recorder = Process()
    recorder.executableURL = URL(fileURLWithPath: "/usr/bin/pw-record")
    recorder.arguments = ["--target", Self.sink, "--format", "f32", "--rate", "48000", "--channels", "2", wav]
    recorder.environment = fullEnvironment
    recorder.standardOutput = FileHandle.nullDevice
    recorder.standardError = FileHandle.nullDevice
    try recorder.run()
    return Recording(recorder: recorder, file: wav)
  }

  struct Recording {
    let recorder: Process
    let file: String

    /// Stops the recorder; what it recorded, as interleaved stereo floats.
    func finish() throws -> [Float] {
      recorder.interrupt()
      recorder.waitUntilExit()
      let raw = file + ".raw"
      let converted = try runProcess("/usr/bin/sox", [file, "-t", "f32", raw])
      guard converted.status == 0 else { throw HarnessError("sox: \(converted)") }
      let data = try Data(contentsOf: URL(fileURLWithPath: raw))
      return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }
  }

  /// Starts recording the null sink's monitor, for `seconds` at most, with `Tests/Fixtures/pw_clock_recorder.c`,
  /// which stamps every cycle with the graph's clock and first plays `clicks` clicks of its own
  /// to calibrate the monitor against (every 25 cycles from the 10th), asking for a quantum of
  /// `quantum` frames (the monitor lags a cycle: the quantum must stay what it was then).
  func startClockRecording(seconds: Double, clicks: Int, quantum: Int) throws -> ClockRecording {
    let program = "\(runtime)/pw_clock_recorder"
    if !FileManager.default.isExecutableFile(atPath: program) {
      try Fixture.compileProgram("pw_clock_recorder.c", to: program, package: "libpipewire-0.3")
    }
    let file = "\(runtime)/clocked-\(UInt32.random(in: 0...UInt32.max))"
    let recorder = try LoggedProcess(
      program, [Self.sink, "\(quantum)", "\(seconds)", "\(clicks)", file], environment: fullEnvironment)
    return ClockRecording(recorder: recorder, file: file)
  }

  struct ClockRecording {
    let recorder: LoggedProcess
    let file: String

    /// Stops the recorder (SIGTERM); what it recorded.
    func finish() throws -> ClockedRecording {
      recorder.process.terminate()
      recorder.process.waitUntilExit()
      guard recorder.process.terminationStatus == 0 else { throw HarnessError("pw_clock_recorder: \(recorder.log)") }
      let data = try Data(contentsOf: URL(fileURLWithPath: file + ".raw"))
      var recording = ClockedRecording(left: data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) })
      for line in try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n") {
        let fields = line.split(separator: " ")
        switch fields.first {
        case "cycle":
          recording.cycles.append(
            .init(now: Int64(fields[1])!, ticks: UInt64(fields[2])!, frames: Int(fields[3])!, first: Int(fields[4])!))
        case "click": recording.clicks.append(Int64(fields[1])!)
        default: throw HarnessError("pw_clock_recorder wrote '\(line)'")
        }
      }
      return recording
    }
  }

  var fullEnvironment: [String: String] {
    childEnvironment.merging(environment) { $1 }
  }

  private func launch(_ program: String, _ arguments: [String], log: String) throws -> Process {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/\(program)")
    process.arguments = arguments
    process.environment = fullEnvironment
    _ = FileManager.default.createFile(atPath: "\(runtime)/\(log).log", contents: nil)
    let output = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(runtime)/\(log).log"))
    process.standardOutput = output
    process.standardError = output
    try process.run()
    return process
  }

  private func waitFor(_ what: String, timeout: Double = 15, _ ready: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while !ready() {
      guard Date() < deadline else { throw HarnessError("\(what) did not come up within \(timeout) s in \(runtime)") }
      usleep(50_000)
    }
  }
}

/// What `pw_clock_recorder` recorded at the sink's monitor: the left channel, each cycle's graph
/// clock, and when PipeWire said each of its clicks would be played.
struct ClockedRecording {
  struct Cycle {
    /// CLOCK_MONOTONIC ns at the cycle's start, as `pw_stream_get_time_n` gave it.
    var now: Int64
    var ticks: UInt64
    var frames: Int
    /// The index in `left` of the cycle's first frame.
    var first: Int
  }
  var left: [Float]
  var cycles: [Cycle] = []
  var clicks: [Int64] = []
  static let rate = 48_000.0

  /// The first frame of a run of at least `length` frames at `level` from `start`.
  func firstRun(of level: Float, from start: Int = 0, length: Int = 64) -> Int? {
    var run = 0
    for index in start..<left.count {
      run = abs(left[index] - level) < 1e-6 ? run + 1 : 0
      if run == length { return index - length + 1 }
    }
    return nil
  }

  /// When the monitor handed frame `index` of `left` over (CLOCK_MONOTONIC ns): its cycle's start
  /// plus its place in the cycle.
  func handedOver(_ index: Int) -> Int64? {
    guard let cycle = cycles.last(where: { $0.first <= index }), index < cycle.first + cycle.frames else { return nil }
    return cycle.now + Int64((Double(index - cycle.first) * 1e9 / Self.rate).rounded())
  }

  /// How long after the sink played a frame the monitor hands it over, in ns, from the clicks:
  /// each click's frame as handed over against when PipeWire said it would be played. Nil when
  /// the clicks were not all found in silence; `spread` is the largest difference between clicks.
  func monitorLag() -> (lag: Int64, spread: Int64)? {
    var lags: [Int64] = []
    var from = 0
    for heard in clicks {
      guard let index = left[from...].firstIndex(where: { $0 > 0.9 }), let handed = handedOver(index) else {
        return nil
      }
      lags.append(handed - heard)
      from = index + 1
    }
    guard let low = lags.min(), let high = lags.max(), lags.count == clicks.count, !lags.isEmpty else { return nil }
    return (lags.sorted()[lags.count / 2], high - low)
  }
}
