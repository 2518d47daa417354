import Foundation
import Testing

@testable import RampTestSupport

/// rampd-web's systemd units, checked as rampd's are (SystemdUnitTests): sandboxed about as
/// tightly, reaching rampd's socket through the audio group, IP to and from localhost only;
/// installed by script/install beside rampd's; its man page.
@Suite struct WebUnitTests {
  /// rampd-web needs AF_INET and a network, which rampd does without; still no more exposed than
  /// this (it scores 1.0; rampd 0.6).
  static let maximumExposure = 1.5

  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func systemServiceExposure() throws {
    try SecurityReport.checkInstalled("rampd-web.service", maximum: Self.maximumExposure, web: Executables.directory)
  }

  /// The settings the README and systemd/README.md describe.
  @Test func unitSettings() throws {
    let service = try UnitFile(path: "\(Repository.root)/systemd/rampd-web.service")
    let expected: [(String, String)] = [
      ("ExecStart", "@BINDIR@/rampd-web --socket /run/rampd/rampd.sock"),
      ("EnvironmentFile", "-@SYSCONFDIR@/rampd/web.env"), ("DynamicUser", "yes"), ("SupplementaryGroups", "audio"),
      ("RestartPreventExitStatus", "64 73"), ("IPAddressAllow", "localhost"), ("IPAddressDeny", "any"),
      ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"), ("CapabilityBoundingSet", ""),
      ("PrivateDevices", "yes"), ("NoNewPrivileges", "yes"), ("StateDirectory", "rampd-web"),
      ("StateDirectoryMode", "0700"),
    ]
    for (key, value) in expected { #expect(service.value("Service", key) == value, "\(key)") }
    #expect(service.value("Unit", "Wants") == "rampd.socket")

    let user = try UnitFile(path: "\(Repository.root)/systemd/user/rampd-web.service")
    #expect(user.value("Service", "ExecStart") == "@BINDIR@/rampd-web --socket %t/rampd/rampd.sock")
    #expect(user.value("Service", "User") == nil, "a user service runs as its user")
    #expect(user.value("Service", "StateDirectory") == "rampd-web", "its token apart from the system unit's")
    #expect(user.value("Service", "RestrictAddressFamilies") == "AF_UNIX AF_INET AF_INET6")
  }

  /// script/install with rampd-web (`--web-binaries`, the build these tests run in): its system
  /// and user units pass `systemd-analyze verify` beside rampd's, without a warning about them.
  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func installedUnitsVerify() throws {
    let install = try Installation(prefix: true, web: Executables.directory)
    for user in [false, true] {
      let directory = user ? install.userUnitDirectory : install.systemUnitDirectory
      let units = ["rampd.socket", "rampd.service", "rampd-web.service"].map { "\(directory)/\($0)" }
      let outcome = try install.verify(units, user: user)
      #expect(outcome.status == 0, "\(outcome)")
      #expect(outcome.warnings(about: install.root).isEmpty, "\(outcome)")
      let service = try UnitFile(path: units[2])
      #expect(service.value("Service", "ExecStart")?.hasPrefix("\(install.prefix)/bin/rampd-web --socket ") == true)
    }
  }

  /// A DESTDIR install with rampd-web puts exactly the documented files there, rampd-web's the
  /// built binary, its man page and its completions for the three shells; uninstall removes
  /// them all.
  @Test func installAndUninstallIntoDestdir() throws {
    let install = try Installation(prefix: false, web: Executables.directory)
    let stage = install.root
    #expect(try install.files() == Set(Installation.documentedFiles + Installation.documentedWebFiles))
    // rampd-web is rampd run by that name, as the package installs it.
    #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "\(stage)/usr/local/bin/rampd-web") == "rampd")
    #expect(
      try Data(contentsOf: URL(fileURLWithPath: "\(stage)/usr/local/share/man/man1/rampd-web.1"))
        == Data(contentsOf: URL(fileURLWithPath: "\(Repository.root)/docs/rampd-web.1")))
    try expectCompletions(of: "rampd-web", under: "\(stage)/usr/local/share")

    let removed = try install.run(["--uninstall"])
    #expect(removed.status == 0, "\(removed)")
    #expect(try install.files().isEmpty)
  }

  /// docs/rampd-web.1 holds every help text of rampd-web, and groff reads it without a warning.
  @Test func manPage() throws {
    try ManPage.checkEveryHelpText("rampd-web", binary: Executables.rampdWeb, atLeast: 5)
    try ManPage.checkRendersWithoutWarnings("rampd-web")
  }
}

/// rampd-web uses Foundation's essentials only, as rampd and rampctl do (NoICUTests): no symbol
/// of Foundation's internationalisation, so a static build holds none of ICU's 37 MB.
/// RAMPD_WEB_RELEASE names a static release build's directory to check for ICU's data too.
@Suite struct WebNoICUTests {
  @Test func usesNoInternationalisation() throws {
    try NoICU.expectNoInternationalisation(Executables.rampdWeb)
  }

  @Test func holdsNoICUData() throws {
    try NoICU.expectNoICUData(Executables.rampdWeb)
    if let directory = ProcessInfo.processInfo.environment["RAMPD_WEB_RELEASE"] {
      try NoICU.expectNoICUData("\(directory)/rampd-web")
    }
  }
}
