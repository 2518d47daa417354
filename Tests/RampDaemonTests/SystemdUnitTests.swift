import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

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
    let units = ["rampd.socket", "rampd.service"].map { "\(install.systemUnitDirectory)/\($0)" }
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
    let units = ["rampd.socket", "rampd.service"].map { "\(install.userUnitDirectory)/\($0)" }
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

    let installedRampd = try Data(contentsOf: URL(fileURLWithPath: "\(stage)/usr/local/bin/rampd"))
    #expect(
      installedRampd == (try Data(contentsOf: URL(fileURLWithPath: "\(Executables.tools)/rampd"))),
      "rampd is the built binary")
    #expect(FileManager.default.isExecutableFile(atPath: "\(stage)/usr/local/bin/rampd"))
    // rampctl is rampd run by that name, as the package installs it.
    #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "\(stage)/usr/local/bin/rampctl") == "rampd")
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
          == Data(contentsOf: URL(fileURLWithPath: "\(Repository.root)/docs/\(page)")))
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

  /// Completions are the argument parsers' own, for both tools and all three shells (rampd-web's:
  /// Tests/RampWebTests).
  func checkCompletions(in stage: String) throws {
    let share = "\(stage)/usr/local/share"
    for tool in ["rampd", "rampctl"] { try expectCompletions(of: tool, under: share) }
    let rampctl = try String(contentsOfFile: "\(share)/bash-completion/completions/rampctl", encoding: .utf8)
    #expect(rampctl.contains("fade-out"), "rampctl's subcommands are completed")
  }
}
