import Foundation
import Testing

@testable import RampTestSupport

/// rampd-osc's and rampd-mqtt's systemd units, checked as rampd-web's are (WebUnitTests):
/// installed by script/install beside rampd's with the bridges these tests run (`--bridges-binaries`),
/// passing `systemd-analyze verify` and `systemd-analyze security`; a DESTDIR install puts exactly
/// the documented files there and uninstall takes them all away.
@Suite struct BridgeUnitTests {
  static let tools = ["rampd-osc", "rampd-mqtt"]
  /// Sandboxed as rampd-web.service (which may score 1.5), with no state directory.
  static let maximumExposure = 1.5

  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func systemServiceExposure() throws {
    for tool in Self.tools {
      try SecurityReport.checkInstalled(
        "\(tool).service", maximum: Self.maximumExposure, bridges: Executables.directory)
    }
  }

  /// The settings systemd/README.md describes: a transient user in `audio`, localhost only; the
  /// user units on the user's own socket, reading the user's configuration directory.
  @Test func unitSettings() throws {
    for tool in Self.tools {
      let short = tool.dropFirst("rampd-".count)
      let service = try UnitFile(path: "\(Repository.root)/systemd/\(tool).service")
      let expected: [(String, String)] = [
        ("ExecStart", "@BINDIR@/\(tool) --socket /run/rampd/rampd.sock"),
        ("EnvironmentFile", "-@SYSCONFDIR@/rampd/\(short).env"), ("DynamicUser", "yes"),
        ("SupplementaryGroups", "audio"), ("RestartPreventExitStatus", "64"), ("IPAddressAllow", "localhost"),
        ("IPAddressDeny", "any"), ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("CapabilityBoundingSet", ""), ("NoNewPrivileges", "yes"),
      ]
      for (key, value) in expected { #expect(service.value("Service", key) == value, "\(tool): \(key)") }
      #expect(service.value("Unit", "Documentation")?.hasPrefix("man:\(tool)(1)") == true, "\(tool)")

      let user = try UnitFile(path: "\(Repository.root)/systemd/user/\(tool).service")
      #expect(user.value("Service", "ExecStart") == "@BINDIR@/\(tool) --socket %t/rampd/rampd.sock", "\(tool)")
      #expect(user.value("Service", "EnvironmentFile") == "-%E/rampd/\(short).env", "\(tool)")
      #expect(user.value("Service", "User") == nil, "a user service runs as its user")
      #expect(user.value("Service", "DynamicUser") == nil, "a user manager cannot make users")
      #expect(user.value("Install", "WantedBy") == "default.target", "\(tool)")
    }
  }

  /// script/install with the bridges: their system and user units pass `systemd-analyze verify`
  /// beside rampd's (their man pages found where they were installed), without a warning.
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func installedUnitsVerify() throws {
    let install = try Installation(prefix: true, bridges: Executables.directory)
    for user in [false, true] {
      let directory = user ? install.userUnitDirectory : install.systemUnitDirectory
      let units = ["rampd.socket", "rampd.service"] + Self.tools.map { "\($0).service" }
      let outcome = try install.verify(units.map { "\(directory)/\($0)" }, user: user)
      #expect(outcome.status == 0, "\(outcome)")
      #expect(outcome.warnings(about: install.root).isEmpty, "\(outcome)")
      for tool in Self.tools {
        let service = try UnitFile(path: "\(directory)/\(tool).service")
        #expect(service.value("Service", "ExecStart")?.hasPrefix("\(install.prefix)/bin/\(tool) --socket ") == true)
      }
    }
  }

  /// A DESTDIR install with the bridges puts exactly the documented files there: the built
  /// binaries, their man pages, their completions for the three shells; uninstall removes them all.
  @Test func installAndUninstallIntoDestdir() throws {
    let install = try Installation(prefix: false, bridges: Executables.directory)
    let stage = install.root
    #expect(try install.files() == Set(Installation.documentedFiles + Installation.documentedBridgeFiles))
    let share = "\(stage)/usr/local/share"
    for tool in Self.tools {
      // rampd run by the bridge's name, as the package installs it.
      #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "\(stage)/usr/local/bin/\(tool)") == "rampd")
      #expect(
        try Data(contentsOf: URL(fileURLWithPath: "\(share)/man/man1/\(tool).1"))
          == Data(contentsOf: URL(fileURLWithPath: "\(Repository.root)/docs/\(tool).1")), "\(tool).1")
      try expectCompletions(of: tool, under: share)
    }

    let removed = try install.run(["--uninstall"])
    #expect(removed.status == 0, "\(removed)")
    #expect(try install.files().isEmpty)
  }
}

/// The bridges, shipped in the package beside rampd, use Foundation's essentials only, as rampd
/// and rampctl do (NoICUTests): no symbol of Foundation's internationalisation, so a static build
/// holds none of ICU's 37 MB. RAMPD_BRIDGES_RELEASE names a static release build's directory to
/// check for ICU's data too.
@Suite struct BridgesNoICUTests {
  @Test(arguments: BridgeUnitTests.tools)
  func usesNoInternationalisation(_ tool: String) throws {
    try NoICU.expectNoInternationalisation("\(Executables.directory)/\(tool)")
  }

  @Test(
    .enabled(if: ProcessInfo.processInfo.environment["RAMPD_BRIDGES_RELEASE"] != nil),
    arguments: BridgeUnitTests.tools)
  func holdsNoICUData(_ tool: String) throws {
    let directory = try #require(ProcessInfo.processInfo.environment["RAMPD_BRIDGES_RELEASE"])
    try NoICU.expectNoICUData("\(directory)/\(tool)")
  }
}
