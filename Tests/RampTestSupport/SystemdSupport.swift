import Foundation
import RampProtocol
import Testing

#if canImport(Glibc)
  import Glibc
#endif

enum Repository {
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path
}

enum SystemTool {
  /// The executable `name` on PATH (or in the usual system directories), if any.
  static func path(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
  }
}

enum Shell {
  typealias Outcome = ProcessOutcome

  static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws -> Outcome {
    try runProcess(
      executable, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
  }
}

extension ProcessOutcome {
  /// Lines of either stream that mention `marker` (a path of ours) or a rampd unit.
  func warnings(about marker: String) -> [String] {
    (stdout + "\n" + stderr).split(separator: "\n").map(String.init).filter {
      $0.contains(marker) || $0.contains("rampd")
    }
  }
}

/// A directory under the system's temporary directory, removed with the value.
final class TemporaryDirectory {
  let path: String
  init(_ name: String) throws {
    path = NSTemporaryDirectory() + "rampd-systemd-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  }
  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// `script/install` run with the built binaries (`--binaries`; rampd-web's with `--web-binaries`
/// when given, else `--without-web`; rampd-osc's and rampd-mqtt's with `--bridges-binaries` when
/// given, else `--without-bridges`), never touching the system
/// (`--no-setup`): either with `--prefix` a temporary directory, so that the installed units name
/// real files (what `systemd-analyze verify` checks), or with `--destdir` one, as a package build
/// does (PREFIX stays /usr/local).
final class Installation {
  let directory: TemporaryDirectory
  /// Where the files land: the prefix, or the staging root.
  let root: String
  let usesPrefix: Bool
  /// Where rampd-web was taken from, if it was installed.
  let web: String?
  /// Where rampd-osc and rampd-mqtt were taken from, if they were installed.
  let bridges: String?
  var prefix: String { usesPrefix ? root : "/usr/local" }
  var systemUnitDirectory: String { "\(root)/\(usesPrefix ? "" : "usr/local/")lib/systemd/system" }
  var userUnitDirectory: String { "\(root)/\(usesPrefix ? "" : "usr/local/")lib/systemd/user" }

  /// What a DESTDIR install with the default PREFIX puts in DESTDIR (systemd/README.md lists it),
  /// rampd-web's files left out.
  static let documentedFiles = [
    "usr/local/bin/rampd", "usr/local/bin/rampctl",
    "usr/local/lib/systemd/system/rampd.service", "usr/local/lib/systemd/system/rampd.socket",
    "usr/local/lib/systemd/user/rampd.service", "usr/local/lib/systemd/user/rampd.socket",
    "usr/local/lib/sysusers.d/rampd.conf",
    "etc/rampd/rampd.toml",
    "usr/local/share/man/man1/rampd.1", "usr/local/share/man/man1/rampctl.1",
    "usr/local/share/bash-completion/completions/rampd", "usr/local/share/bash-completion/completions/rampctl",
    "usr/local/share/zsh/site-functions/_rampd", "usr/local/share/zsh/site-functions/_rampctl",
    "usr/local/share/fish/vendor_completions.d/rampd.fish", "usr/local/share/fish/vendor_completions.d/rampctl.fish",
    "usr/local/share/rampd/install-manifest",
  ]
  /// What rampd-web adds to them.
  static let documentedWebFiles = [
    "usr/local/bin/rampd-web", "usr/local/lib/systemd/system/rampd-web.service",
    "usr/local/lib/systemd/user/rampd-web.service", "usr/local/share/man/man1/rampd-web.1",
    "usr/local/share/bash-completion/completions/rampd-web", "usr/local/share/zsh/site-functions/_rampd-web",
    "usr/local/share/fish/vendor_completions.d/rampd-web.fish",
  ]
  /// What rampd-osc and rampd-mqtt add to them.
  static let documentedBridgeFiles = ["rampd-osc", "rampd-mqtt"].flatMap { tool in
    [
      "usr/local/bin/\(tool)", "usr/local/lib/systemd/system/\(tool).service",
      "usr/local/lib/systemd/user/\(tool).service", "usr/local/share/man/man1/\(tool).1",
      "usr/local/share/bash-completion/completions/\(tool)", "usr/local/share/zsh/site-functions/_\(tool)",
      "usr/local/share/fish/vendor_completions.d/\(tool).fish",
    ]
  }

  /// `web`: the directory rampd-web is installed from; without one, rampd-web is left out.
  /// `bridges`: the same for rampd-osc and rampd-mqtt.
  init(
    prefix: Bool, web: String? = nil, bridges: String? = nil, before: (String) throws -> Void = { _ in }
  ) throws {
    directory = try TemporaryDirectory(prefix ? "prefix" : "destdir")
    usesPrefix = prefix
    self.web = web
    self.bridges = bridges
    root = "\(directory.path)/\(prefix ? "prefix" : "stage")"
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    try before(root)
    let outcome = try run([])
    guard outcome.status == 0 else { throw HarnessError("script/install failed: \(outcome)") }
  }

  func run(_ arguments: [String]) throws -> Shell.Outcome {
    try Shell.run(
      "/bin/bash",
      [
        "\(Repository.root)/script/install", usesPrefix ? "--prefix" : "--destdir", root, "--binaries",
        Executables.tools, "--no-setup",
      ] + (web.map { ["--web-binaries", $0] } ?? ["--without-web"])
        + (bridges.map { ["--bridges-binaries", $0] } ?? ["--without-bridges"]) + arguments,
      environment: ["PREFIX": "", "DESTDIR": "", "SYSCONFDIR": "", "BINDIR": ""])
  }

  /// `systemd-analyze verify` on installed units. The man pages they document must be found
  /// where they were installed (when `man` exists; else that check is left out).
  func verify(_ units: [String], user: Bool) throws -> Shell.Outcome {
    var arguments = ["verify", "--no-pager"]
    var environment: [String: String] = [:]
    if SystemTool.path("man") != nil {
      environment["MANPATH"] = "\(root)/\(usesPrefix ? "" : "usr/local/")share/man"
    } else {
      arguments.append("--man=no")
    }
    if user {
      arguments.append("--user")
      let runtime = "\(directory.path)/runtime"
      try FileManager.default.createDirectory(
        atPath: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
      environment["XDG_RUNTIME_DIR"] = runtime
    }
    return try Shell.run(SystemTool.path("systemd-analyze")!, arguments + units, environment: environment)
  }

  /// Every regular file under the root, relative to it.
  func files() throws -> Set<String> {
    guard let walker = FileManager.default.enumerator(atPath: root) else { return [] }
    var found: Set<String> = []
    while let path = walker.nextObject() as? String {
      var isDirectory: ObjCBool = false
      if FileManager.default.fileExists(atPath: "\(root)/\(path)", isDirectory: &isDirectory), !isDirectory.boolValue {
        found.insert(path)
      }
    }
    return found
  }

  /// Each file's bytes, for comparing two installs.
  func snapshot() throws -> [String: Data] {
    var contents: [String: Data] = [:]
    for file in try files() { contents[file] = try Data(contentsOf: URL(fileURLWithPath: "\(root)/\(file)")) }
    return contents
  }
}

/// A key = value view of a unit file (later assignments win; an empty one is kept as "").
struct UnitFile {
  private var entries: [String: String] = [:]

  init(path: String) throws {
    var section = ""
    for raw in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
      let line = raw.trimmingCharacters(in: .whitespaces)
      if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
      if line.hasPrefix("[") {
        section = String(line.dropFirst().dropLast())
        continue
      }
      guard let equals = line.firstIndex(of: "=") else { continue }
      let key = line[..<equals].trimmingCharacters(in: .whitespaces)
      entries["\(section).\(key)"] = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
    }
  }

  func value(_ section: String, _ key: String) -> String? { entries["\(section).\(key)"] }
}

enum SecurityReport {
  /// `systemd-analyze security --offline=true` on `unit` as `script/install` installs it: the
  /// analysis succeeds and the overall exposure is at most `maximum`. `web`, `bridges`: as in
  /// Installation.
  @discardableResult
  static func checkInstalled(_ unit: String, maximum: Double, web: String? = nil, bridges: String? = nil) throws
    -> Shell.Outcome
  {
    let install = try Installation(prefix: true, web: web, bridges: bridges)
    let outcome = try Shell.run(
      SystemTool.path("systemd-analyze")!,
      ["security", "--offline=true", "--no-pager", "\(install.systemUnitDirectory)/\(unit)"])
    #expect(outcome.status == 0, "\(outcome)")
    let exposure = try #require(overallExposure(outcome.stdout), "no overall exposure in \(outcome)")
    #expect(exposure <= maximum, "exposure \(exposure):\n\(outcome.stdout)")
    return outcome
  }

  /// The number in "Overall exposure level for NAME: 0.6 SAFE".
  static func overallExposure(_ report: String) -> Double? {
    for line in report.split(separator: "\n") where line.contains("Overall exposure level for") {
      guard let colon = line.lastIndex(of: ":") else { continue }
      let number = line[line.index(after: colon)...].split(separator: " ").first
      return number.flatMap { Double($0) }
    }
    return nil
  }
}

/// The real rampd started by `systemd-socket-activate` on the first connection, playing into
/// ALSA's file plugin over null (as the end-to-end tests do).
///
/// Spawned with posix_spawn, not Foundation's `Process`: systemd-socket-activate closes every
/// descriptor it does not pass on before it executes rampd, including the one `Process` watches
/// to learn that its child exited, and `Process` then blocks in waitpid on a live process, which
/// stalls every other `Process` in the test run.
final class ActivatedDaemon {
  let directory: TemporaryDirectory
  let socket: String
  private let child: SpawnedProcess
  private let errors: String
  private(set) var log = ""

  /// `configuredSocketName`: the `socket.path` of rampd's configuration, in the same directory;
  /// systemd-socket-activate always listens on `rampd.sock` there.
  init(configuredSocketName: String) throws {
    directory = try TemporaryDirectory("activate")
    let path = directory.path
    socket = "\(path)/rampd.sock"
    errors = "\(path)/rampd.log"
    try "pcm.rampd_e2e { type file; slave.pcm null; file \"\(path)/played.raw\"; format raw }\n"
      .write(toFile: "\(path)/asound.conf", atomically: true, encoding: .utf8)
    try """
    [socket]
    path = "\(path)/\(configuredSocketName)"
    [output]
    device = "rampd_e2e"
    format = "float"
    period = "5ms"
    buffer = "20ms"
    pacing = "clock"
    [embedded-output]
    enabled = false
    [state]
    path = "\(path)/state.json"
    """.write(toFile: "\(path)/rampd.toml", atomically: true, encoding: .utf8)
    var environment = childEnvironment
    environment.removeValue(forKey: "LISTEN_FDS")
    environment.removeValue(forKey: "LISTEN_PID")
    // systemd-socket-activate passes on only the variables it is told to (-E).
    child = try SpawnedProcess(
      SystemTool.path("systemd-socket-activate")!,
      [
        "-l", socket, "-E", "ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:\(path)/asound.conf",
        Executables.rampd, "--config", "\(path)/rampd.toml",
      ],
      environment: environment, standardError: errors)
    let deadline = Date().addingTimeInterval(10)
    while !FileManager.default.fileExists(atPath: socket) {
      guard child.exitStatus() == nil, Date() < deadline else {
        throw HarnessError("systemd-socket-activate did not listen: \(readLog())")
      }
      usleep(10_000)
    }
  }

  deinit { stop() }

  /// SIGTERM to the process (rampd once it was activated) and its exit status; SIGKILL if it
  /// has not exited within 10 s (then the status is that of the kill, not 0).
  @discardableResult
  func stop() -> Int32 {
    let status = child.stop(timeout: 10)
    _ = readLog()
    return status
  }

  @discardableResult
  private func readLog() -> String {
    log = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
    return log
  }
}

/// A child process started with posix_spawn: stdin and stdout on /dev/null, stderr appended to a
/// file, no other descriptor inherited, signals at their defaults and unblocked.
final class SpawnedProcess {
  let pid: pid_t
  private var status: Int32?

  init(_ executable: String, _ arguments: [String], environment: [String: String], standardError: String) throws {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, standardError, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    // glibc ≥ 2.34; the Glibc module does not declare it.
    typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, CInt) -> CInt
    if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
      _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
    }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    var allSignals = sigset_t()
    sigfillset(&allSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    posix_spawnattr_setsigdefault(&attributes, &allSignals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { for pointer in argv + envp { free(pointer) } }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    guard result == 0 else { throw HarnessError("posix_spawn \(executable): \(String(cString: strerror(result)))") }
    self.pid = pid
  }

  deinit { _ = stop(timeout: 10) }

  /// The exit status once the child has exited (128 + n for signal n), else nil.
  func exitStatus() -> Int32? {
    if let status { return status }
    var raw: Int32 = 0
    guard waitpid(pid, &raw, WNOHANG) == pid else { return nil }
    let signal = raw & 0x7f
    status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
    return status
  }

  /// SIGTERM, then SIGKILL after `timeout` seconds; the exit status.
  func stop(timeout: Double) -> Int32 {
    if let status = exitStatus() { return status }
    kill(pid, SIGTERM)
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if let status = exitStatus() { return status }
      usleep(10_000)
    }
    kill(pid, SIGKILL)
    while true {
      if let status = exitStatus() { return status }
      usleep(10_000)
    }
  }
}

/// `tool`'s completions as script/install puts them under `share` (`PREFIX/share`): the argument
/// parser's own for bash (which parses), zsh and fish.
func expectCompletions(of tool: String, under share: String) throws {
  let bash = "\(share)/bash-completion/completions/\(tool)"
  #expect(try String(contentsOfFile: bash, encoding: .utf8).contains("-F _\(tool) \(tool)"), "\(bash)")
  #expect(try Shell.run("/bin/bash", ["-n", bash]).status == 0, "\(bash) parses")
  #expect(
    try String(contentsOfFile: "\(share)/zsh/site-functions/_\(tool)", encoding: .utf8).hasPrefix("#compdef \(tool)"),
    "_\(tool)")
  let fish = try String(contentsOfFile: "\(share)/fish/vendor_completions.d/\(tool).fish", encoding: .utf8)
  #expect(fish.contains("complete -c '\(tool)'"), "\(tool).fish")
}
