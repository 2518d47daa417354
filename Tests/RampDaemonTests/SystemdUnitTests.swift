import Foundation
import RampProtocol
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The systemd side of rampd, checked with systemd's own tools: the units as `script/install`
/// installs them (`systemd-analyze verify`, `systemd-analyze security`), socket activation of the
/// real `rampd` (`systemd-socket-activate`), and the install script itself (DESTDIR, idempotence,
/// uninstall, the sysusers entry read by `systemd-sysusers`).
///
/// A test that needs a tool the machine lacks is skipped and says which one; nothing else skips.
@Suite struct SystemdUnitTests {
  /// The system service may not be more exposed than this (`systemd-analyze security`: 0 is a
  /// perfect sandbox, 10 none; MPD's packaged unit scores 7.5).
  static let maximumExposure = 2.0

  // MARK: (a) systemd-analyze verify

  /// The system units, installed under a temporary prefix with the real binary, pass
  /// `systemd-analyze verify` without a single warning about them; their paths are filled in and
  /// name what was installed.
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func systemUnitsVerify() throws {
    let install = try Installation(prefix: true)
    let units = ["rampd.socket", "rampd.service", "rampd-web.service"].map { "\(install.systemUnitDirectory)/\($0)" }
    let outcome = try install.verify(units, user: false)
    #expect(outcome.status == 0, "\(outcome)")
    #expect(outcome.warnings(about: install.root).isEmpty, "\(outcome)")

    let service = try UnitFile(path: units[1])
    let execStart = try #require(service.value("Service", "ExecStart"))
    #expect(execStart == "\(install.prefix)/bin/rampd --config \(install.prefix)/etc/rampd/rampd.toml")
    #expect(FileManager.default.isExecutableFile(atPath: "\(install.prefix)/bin/rampd"))
    #expect(FileManager.default.fileExists(atPath: "\(install.prefix)/etc/rampd/rampd.toml"))
    for unit in units {
      let text = try String(contentsOfFile: unit, encoding: .utf8)
      #expect(!text.contains("@BINDIR@") && !text.contains("@SYSCONFDIR@"), "placeholders left in \(unit)")
    }
  }

  /// The same for the user units, through a user manager's view (`--user`).
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func userUnitsVerify() throws {
    let install = try Installation(prefix: true)
    let units = ["rampd.socket", "rampd.service", "rampd-web.service"].map { "\(install.userUnitDirectory)/\($0)" }
    let outcome = try install.verify(units, user: true)
    #expect(outcome.status == 0, "\(outcome)")
    #expect(outcome.warnings(about: install.root).isEmpty, "\(outcome)")
    let socket = try UnitFile(path: units[0])
    #expect(socket.value("Socket", "ListenStream") == "%t/rampd/rampd.sock")
    #expect(socket.value("Socket", "SocketMode") == "0600")
  }

  /// A unit with a typo does not pass: the check above can fail.
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func verifyCatchesAMisspelledSetting() throws {
    let install = try Installation(prefix: true)
    let service = "\(install.systemUnitDirectory)/rampd.service"
    let text = try String(contentsOfFile: service, encoding: .utf8)
    try #require(text.contains("\nProtectSystem=strict\n"))
    try text.replacingOccurrences(of: "ProtectSystem=strict", with: "ProtectSytem=strict")
      .write(toFile: service, atomically: true, encoding: .utf8)
    let outcome = try install.verify([service], user: false)
    #expect(outcome.warnings(about: install.root).contains { $0.contains("ProtectSytem") }, "\(outcome)")
  }

  /// The system units as the README describes them: notify with a watchdog, reload by SIGHUP,
  /// socket activation on /run/rampd/rampd.sock for the audio group, an unprivileged user, real
  /// time allowed.
  @Test func systemUnitSettings() throws {
    let service = try UnitFile(path: "\(Repository.root)/systemd/rampd.service")
    let expected: [(String, String)] = [
      ("Type", "notify"), ("NotifyAccess", "main"), ("ExecReload", "/bin/kill -HUP $MAINPID"),
      ("Restart", "on-failure"), ("StateDirectory", "rampd"), ("RuntimeDirectory", "rampd"),
      ("RuntimeDirectoryPreserve", "yes"), ("User", "rampd"), ("Group", "audio"),
      ("ExecStart", "@BINDIR@/rampd --config @SYSCONFDIR@/rampd/rampd.toml"), ("DeviceAllow", "char-alsa rw"),
      ("RestrictAddressFamilies", "AF_UNIX"), ("CapabilityBoundingSet", ""),
    ]
    for (key, value) in expected { #expect(service.value("Service", key) == value, "\(key)") }
    #expect(service.value("Service", "WatchdogSec") != nil)
    #expect(service.value("Service", "TimeoutStopSec") != nil)
    #expect(service.value("Service", "LimitRTPRIO").flatMap(Int.init) ?? 0 > 0, "real time allowed")
    #expect(service.value("Service", "LimitMEMLOCK") == "infinity", "rampd locks its memory only without a limit")
    #expect(service.value("Service", "RestrictRealtime") == nil, "the render thread needs real time")
    #expect(service.value("Unit", "Requires") == "rampd.socket")

    let socket = try UnitFile(path: "\(Repository.root)/systemd/rampd.socket")
    #expect(socket.value("Socket", "ListenStream") == "/run/rampd/rampd.sock")
    #expect(socket.value("Socket", "SocketMode") == "0660")
    #expect(socket.value("Socket", "SocketGroup") == "audio")

    let user = try UnitFile(path: "\(Repository.root)/systemd/user/rampd.service")
    #expect(user.value("Service", "Type") == "notify")
    #expect(user.value("Service", "User") == nil, "a user service runs as its user")
    #expect(user.value("Service", "LimitRTPRIO") == nil, "a user manager cannot raise limits; the unit would fail")
    #expect(user.value("Service", "LimitMEMLOCK") == nil, "a user manager cannot raise limits; the unit would fail")
  }

  // MARK: (b) systemd-analyze security

  /// The installed system service's overall exposure is at most `maximumExposure`, and real-time
  /// scheduling stays allowed (the one thing a better score must not cost).
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func systemServiceExposure() throws {
    let outcome = try SecurityReport.checkInstalled("rampd.service", maximum: Self.maximumExposure)
    #expect(outcome.stdout.contains("Service may acquire realtime scheduling"), "\(outcome.stdout)")
    #expect(outcome.stdout.contains("Service runs under a static non-root user identity"), "\(outcome.stdout)")
  }

  /// The parser reads systemd's line, and an exposed unit is found exposed.
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func exposureParserSeesAnExposedUnit() throws {
    #expect(SecurityReport.overallExposure("→ Overall exposure level for rampd.service: 0.6 SAFE 😀") == 0.6)
    let directory = try TemporaryDirectory("exposed")
    let unit = "\(directory.path)/bare.service"
    try "[Service]\nExecStart=/bin/true\n".write(toFile: unit, atomically: true, encoding: .utf8)
    let outcome = try Shell.run(
      SystemTool.path("systemd-analyze")!, ["security", "--offline=true", "--no-pager", unit])
    let exposure = try #require(SecurityReport.overallExposure(outcome.stdout), "\(outcome)")
    #expect(exposure > Self.maximumExposure)
  }

  // MARK: (c) socket activation

  /// `systemd-socket-activate` binds the socket and starts the real rampd on the first
  /// connection, passing the socket as fd 3 (LISTEN_FDS): the client gets the greeting and a
  /// pong, and rampd serves on what it inherited, not on the path of its configuration.
  @Test(.enabled(if: SystemTool.path("systemd-socket-activate") != nil, "systemd-socket-activate is not installed"))
  func socketActivationStartsRampd() throws {
    let activated = try ActivatedDaemon(configuredSocketName: "configured.sock")
    defer { activated.stop() }
    let client = try LineClient(path: activated.socket)
    #expect(client.greeting["hello"]?.stringValue == "rampd")
    #expect(client.greeting["protocol"] != nil)
    let pong = try client.request(["cmd": "ping"])
    #expect(pong.isOK, "\(pong.serialized())")
    #expect(pong.result["pong"] == .bool(true), "\(pong.serialized())")
    #expect(
      !FileManager.default.fileExists(atPath: "\(activated.directory.path)/configured.sock"),
      "rampd used the inherited socket instead of binding its own")
    // A second client on the same inherited socket: rampd keeps accepting.
    let second = try LineClient(path: activated.socket)
    #expect(try second.request(["cmd": "ping"]).isOK)
    #expect(activated.stop() == 0, "SIGTERM ends rampd cleanly: \(activated.log)")
    #expect(activated.log.contains("socket=fd 3"), "\(activated.log)")
  }

  /// Under systemd the inherited socket sits on rampd's own default path. When rampd stops, the
  /// socket file must stay: it belongs to rampd.socket, which keeps listening and starts rampd
  /// again on the next connection.
  @Test(.enabled(if: SystemTool.path("systemd-socket-activate") != nil, "systemd-socket-activate is not installed"))
  func inheritedSocketOutlivesRampd() throws {
    let activated = try ActivatedDaemon(configuredSocketName: "rampd.sock")
    defer { activated.stop() }
    #expect(try LineClient(path: activated.socket).request(["cmd": "ping"]).isOK)
    #expect(activated.stop() == 0, "\(activated.log)")
    var info = stat()
    #expect(lstat(activated.socket, &info) == 0, "the socket file is gone after rampd stopped")
    #expect((info.st_mode & S_IFMT) == S_IFSOCK)
  }

  // MARK: (d) script/install and script/uninstall

  /// Every file lands where systemd/README.md says, with the paths filled in; a second install
  /// changes nothing; uninstall removes every file and every directory it created; a second
  /// uninstall has nothing to do.
  @Test func installAndUninstallIntoDestdir() throws {
    let install = try Installation(prefix: false)
    let stage = install.root
    let installed = try install.files()
    #expect(installed == Set(Installation.documentedFiles), "\(installed.sorted())")

    for tool in ["rampd", "rampctl", "rampd-web"] {
      let installed = try Data(contentsOf: URL(fileURLWithPath: "\(stage)/usr/local/bin/\(tool)"))
      let built = try Data(contentsOf: URL(fileURLWithPath: "\(Executables.directory)/\(tool)"))
      #expect(installed == built, "\(tool) is the built binary")
      #expect(FileManager.default.isExecutableFile(atPath: "\(stage)/usr/local/bin/\(tool)"))
    }
    let service = try UnitFile(path: "\(stage)/usr/local/lib/systemd/system/rampd.service")
    #expect(service.value("Service", "ExecStart") == "/usr/local/bin/rampd --config /etc/rampd/rampd.toml")
    let userService = try UnitFile(path: "\(stage)/usr/local/lib/systemd/user/rampd.service")
    #expect(userService.value("Service", "ExecStart") == "/usr/local/bin/rampd --config /etc/rampd/rampd.toml")
    #expect(
      try String(contentsOfFile: "\(stage)/etc/rampd/rampd.toml", encoding: .utf8)
        == String(contentsOfFile: "\(Repository.root)/config/rampd.toml", encoding: .utf8))
    for page in ["rampd.1", "rampctl.1"] {
      #expect(
        try Data(contentsOf: URL(fileURLWithPath: "\(stage)/usr/local/share/man/man1/\(page)"))
          == Data(contentsOf: URL(fileURLWithPath: "\(Repository.root)/doc/\(page)")))
    }
    try checkCompletions(in: stage)

    // Idempotent: the same files, the same bytes.
    let before = try install.snapshot()
    let again = try install.run([])
    #expect(again.status == 0, "\(again)")
    #expect(try install.snapshot() == before)

    let removed = try install.run(["--uninstall"])
    #expect(removed.status == 0, "\(removed)")
    let left = try install.files()
    #expect(left.isEmpty, "left behind: \(left.sorted())")
    #expect(try FileManager.default.contentsOfDirectory(atPath: stage).isEmpty, "empty directories left behind")
    let twice = try install.run(["--uninstall"])
    #expect(twice.status == 0, "\(twice)")
    #expect(twice.stdout.contains("nothing to uninstall"), "\(twice)")
  }

  /// A configuration that exists is never overwritten nor removed; one installed by the script and
  /// edited since is kept by uninstall; an unedited one goes.
  @Test func configurationIsKeptWhenItIsTheAdministrators() throws {
    let mine = "# the administrator's\n[output]\ndevice = \"hw:1\"\n"
    let existing = try Installation(
      prefix: false,
      before: { stage in
        try FileManager.default.createDirectory(atPath: "\(stage)/etc/rampd", withIntermediateDirectories: true)
        try mine.write(toFile: "\(stage)/etc/rampd/rampd.toml", atomically: true, encoding: .utf8)
      })
    let config = "\(existing.root)/etc/rampd/rampd.toml"
    #expect(try String(contentsOfFile: config, encoding: .utf8) == mine, "install overwrote an existing configuration")
    #expect(try existing.run(["--uninstall"]).status == 0)
    #expect(
      try String(contentsOfFile: config, encoding: .utf8) == mine,
      "uninstall removed a configuration it did not install")

    let edited = try Installation(prefix: false)
    let editedConfig = "\(edited.root)/etc/rampd/rampd.toml"
    try "# edited\n".write(toFile: editedConfig, atomically: true, encoding: .utf8)
    #expect(try edited.run([]).status == 0)
    #expect(try String(contentsOfFile: editedConfig, encoding: .utf8) == "# edited\n", "reinstall overwrote an edit")
    let outcome = try edited.run(["--uninstall"])
    #expect(outcome.stdout.contains("kept (edited since it was installed)"), "\(outcome)")
    #expect(try edited.files() == ["etc/rampd/rampd.toml"])

    let untouched = try Installation(prefix: false)
    #expect(try untouched.run(["--uninstall"]).status == 0)
    #expect(!FileManager.default.fileExists(atPath: "\(untouched.root)/etc/rampd/rampd.toml"))
  }

  /// The installed sysusers.d entry, applied by `systemd-sysusers` to the staging root, creates
  /// the unprivileged `rampd` user the system service runs as, in the `audio` group.
  @Test(.enabled(if: SystemTool.path("systemd-sysusers") != nil, "systemd-sysusers is not installed"))
  func sysusersCreatesTheUser() throws {
    let install = try Installation(prefix: false)
    try FileManager.default.createDirectory(atPath: "\(install.root)/etc", withIntermediateDirectories: true)
    let outcome = try Shell.run(
      SystemTool.path("systemd-sysusers")!,
      ["--root=\(install.root)", "\(install.root)/usr/local/lib/sysusers.d/rampd.conf"])
    #expect(outcome.status == 0, "\(outcome)")
    let passwd = try String(contentsOfFile: "\(install.root)/etc/passwd", encoding: .utf8)
    let user = try #require(passwd.split(separator: "\n").first { $0.hasPrefix("rampd:") }, "\(passwd)")
    let fields = user.split(separator: ":", omittingEmptySubsequences: false)
    #expect(Int(fields[2]).map { $0 > 0 && $0 < 1000 } == true, "a system user: \(user)")
    #expect(fields[5] == "/var/lib/rampd")
    #expect(fields[6].hasSuffix("nologin"))
    let group = try String(contentsOfFile: "\(install.root)/etc/group", encoding: .utf8)
    let audio = try #require(group.split(separator: "\n").first { $0.hasPrefix("audio:") }, "\(group)")
    #expect(
      audio.split(separator: ":", omittingEmptySubsequences: false).last?.split(separator: ",").contains("rampd")
        == true)
  }

  /// Completions are the argument parsers' own, for the three tools and all three shells.
  func checkCompletions(in stage: String) throws {
    let share = "\(stage)/usr/local/share"
    for tool in ["rampd", "rampctl", "rampd-web"] {
      let bash = "\(share)/bash-completion/completions/\(tool)"
      #expect(try String(contentsOfFile: bash, encoding: .utf8).contains("-F _\(tool) \(tool)"), "\(bash)")
      #expect(try Shell.run("/bin/bash", ["-n", bash]).status == 0, "\(bash) parses")
      #expect(
        try String(contentsOfFile: "\(share)/zsh/site-functions/_\(tool)", encoding: .utf8).hasPrefix(
          "#compdef \(tool)"))
      let fish = try String(contentsOfFile: "\(share)/fish/vendor_completions.d/\(tool).fish", encoding: .utf8)
      #expect(fish.contains("complete -c '\(tool)'"), "\(tool).fish")
    }
    let rampctl = try String(contentsOfFile: "\(share)/bash-completion/completions/rampctl", encoding: .utf8)
    #expect(rampctl.contains("fade-out"), "rampctl's subcommands are completed")
  }
}

// MARK: - Support

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

/// `script/install` run with the built binaries (`--binaries`), never touching the system
/// (`--no-setup`): either with `--prefix` a temporary directory, so that the installed units name
/// real files (what `systemd-analyze verify` checks), or with `--destdir` one, as a package build
/// does (PREFIX stays /usr/local).
final class Installation {
  let directory: TemporaryDirectory
  /// Where the files land: the prefix, or the staging root.
  let root: String
  let usesPrefix: Bool
  var prefix: String { usesPrefix ? root : "/usr/local" }
  var systemUnitDirectory: String { "\(root)/\(usesPrefix ? "" : "usr/local/")lib/systemd/system" }
  var userUnitDirectory: String { "\(root)/\(usesPrefix ? "" : "usr/local/")lib/systemd/user" }

  /// What a DESTDIR install with the default PREFIX puts in DESTDIR (systemd/README.md lists it).
  static let documentedFiles = [
    "usr/local/bin/rampd", "usr/local/bin/rampctl", "usr/local/bin/rampd-web",
    "usr/local/lib/systemd/system/rampd.service", "usr/local/lib/systemd/system/rampd.socket",
    "usr/local/lib/systemd/system/rampd-web.service",
    "usr/local/lib/systemd/user/rampd.service", "usr/local/lib/systemd/user/rampd.socket",
    "usr/local/lib/systemd/user/rampd-web.service",
    "usr/local/lib/sysusers.d/rampd.conf",
    "etc/rampd/rampd.toml",
    "usr/local/share/man/man1/rampd.1", "usr/local/share/man/man1/rampctl.1", "usr/local/share/man/man1/rampd-web.1",
    "usr/local/share/bash-completion/completions/rampd", "usr/local/share/bash-completion/completions/rampctl",
    "usr/local/share/bash-completion/completions/rampd-web",
    "usr/local/share/zsh/site-functions/_rampd", "usr/local/share/zsh/site-functions/_rampctl",
    "usr/local/share/zsh/site-functions/_rampd-web",
    "usr/local/share/fish/vendor_completions.d/rampd.fish", "usr/local/share/fish/vendor_completions.d/rampctl.fish",
    "usr/local/share/fish/vendor_completions.d/rampd-web.fish",
    "usr/local/share/rampd/install-manifest",
  ]

  init(prefix: Bool, before: (String) throws -> Void = { _ in }) throws {
    directory = try TemporaryDirectory(prefix ? "prefix" : "destdir")
    usesPrefix = prefix
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
        Executables.directory, "--no-setup",
      ] + arguments,
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
  /// analysis succeeds and the overall exposure is at most `maximum`.
  @discardableResult
  static func checkInstalled(_ unit: String, maximum: Double) throws -> Shell.Outcome {
    let install = try Installation(prefix: true)
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
    var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("RAMPD_") }
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
