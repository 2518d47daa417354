import Foundation
import Testing

/// rampd-web's systemd units, checked as rampd's are (SystemdUnitTests: `systemd-analyze verify`
/// runs on them there): sandboxed about as tightly, reaching rampd's socket through the audio
/// group, IP to and from localhost only.
@Suite struct WebUnitTests {
  /// rampd-web needs AF_INET and a network, which rampd does without; still no more exposed than
  /// this (it scores 1.0; rampd 0.6).
  static let maximumExposure = 1.5

  @Test(.enabled(if: SystemTool.path("systemd-analyze") != nil, "systemd-analyze is not installed"))
  func systemServiceExposure() throws {
    try SecurityReport.checkInstalled("rampd-web.service", maximum: Self.maximumExposure)
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
}
