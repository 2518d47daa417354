import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Who may connect and what they may play: the real rampctl run as other users (setpriv drops
/// the test's root to a uid, gid and groups) against the real rampd, which tells them apart by the
/// kernel's record of the peer.
@Suite(
  .enabled(if: geteuid() == 0 && SystemTool.path("setpriv") != nil, "needs root and setpriv to act as other users"))
struct AccessTests {
  /// `nobody`, which no test configuration admits by default.
  static let stranger: UInt32 = 65534
  /// A group no account on the machine has.
  static let spareGroup: UInt32 = 48_123

  /// rampctl as `uid` with primary group `gid` and exactly `groups`, printing rampd's replies.
  func rampctl(
    as uid: UInt32, gid: UInt32 = stranger, groups: [UInt32] = [], _ arguments: [String], daemon: DaemonProcess
  ) throws -> ProcessOutcome {
    var environment = childEnvironment
    environment["RAMPD_SOCKET"] = daemon.socket
    let supplementary =
      groups.isEmpty ? ["--clear-groups"] : ["--groups=" + groups.map(String.init).joined(separator: ",")]
    return try runProcess(
      SystemTool.path("setpriv")!,
      ["--reuid=\(uid)", "--regid=\(gid)"] + supplementary + ["--", Executables.rampctl]
        + arguments + ["--json"], environment: environment)
  }

  /// A daemon whose socket anyone may open, so only the access rules decide; its directory can be
  /// entered by other users.
  func openDaemon(_ configuration: String = "", name: String = #function) throws -> DaemonProcess {
    let daemon = try DaemonProcess(name: name, extraConfiguration: configuration)
    // rampd sets the socket's mode just after binding it: wait until it says it listens, or its
    // chmod could come after this one.
    let deadline = Date().addingTimeInterval(10)
    while !daemon.readLog().contains("listening") && Date() < deadline { usleep(10_000) }
    chmod(daemon.directory, 0o755)
    chmod(daemon.socket, 0o666)
    return daemon
  }

  @Test func strangerIsRefusedInsteadOfGreeted() throws {
    let daemon = try openDaemon()
    let file = try daemon.constantFile("tone", seconds: 2)
    let outcome = try rampctl(as: Self.stranger, ["play", file], daemon: daemon)
    #expect(outcome.status == 77, "\(outcome)")
    #expect(outcome.stderr.contains("does not admit this user"), "\(outcome)")
    #expect(outcome.stderr.contains("uid \(Self.stranger)"), "the refusal names who: \(outcome)")
    // The daemon goes on serving those it admits.
    let client = try daemon.client()
    #expect(try client.request(["cmd": "status"])["ok"] == .bool(true))
    #expect(try client.request(["cmd": "status"])["result"]?["streams"] == .array([]), "nothing was played")
    _ = daemon.stop()
    #expect(daemon.readLog().contains("connection refused"), "the log says who was refused")
  }

  @Test func usersAndGroupsAdmit() throws {
    let daemon = try openDaemon(
      """
      [access]
      users = ["\(Self.stranger)"]
      groups = ["\(Self.spareGroup)"]
      """)
    #expect(try rampctl(as: Self.stranger, ["ping"], daemon: daemon).status == 0)
    // Another uid: by its primary group, by a supplementary one, and not without either.
    #expect(try rampctl(as: 4242, gid: Self.spareGroup, ["ping"], daemon: daemon).status == 0)
    #expect(try rampctl(as: 4242, gid: 4242, groups: [7777, Self.spareGroup], ["ping"], daemon: daemon).status == 0)
    let refused = try rampctl(as: 4242, gid: 4242, groups: [7777], ["ping"], daemon: daemon)
    #expect(refused.status == 77, "\(refused)")
  }

  /// A system daemon (the harness runs rampd as root, with no XDG_RUNTIME_DIR) gives its socket to
  /// `audio`, and admits that group's members.
  @Test func theSocketsGroupIsAdmitted() throws {
    let daemon = try openDaemon()
    var info = stat()
    #expect(stat(daemon.socket, &info) == 0)
    guard let audio = getgrnam("audio")?.pointee.gr_gid else {
      #expect(info.st_gid == getegid(), "without an audio group the socket keeps rampd's group")
      return
    }
    #expect(info.st_gid == audio)
    #expect(try rampctl(as: 4243, gid: audio, ["ping"], daemon: daemon).status == 0)
    #expect(try rampctl(as: 4243, gid: 4243, ["ping"], daemon: daemon).status == 77)
  }

  /// A user admitted by [access] plays only under the media roots: not outside, not through `..`
  /// or a link out, not a FIFO; root, on the same daemon, is held to the same roots.
  @Test func othersPlayOnlyUnderTheRoots() throws {
    let outside = try TemporaryDirectory("rampd-outside")
    let daemon = try openDaemon(
      """
      [access]
      users = ["\(Self.stranger)"]
      """)
    let media = daemon.directory + "/media"
    try FileManager.default.createDirectory(atPath: media, withIntermediateDirectories: true)
    let inside = try daemon.constantFile("media/in", seconds: 3)
    let escaped = try daemon.constantFile("out", seconds: 3)
    try FileManager.default.copyItem(atPath: escaped, toPath: outside.path + "/secret.wav")
    symlink(outside.path + "/secret.wav", media + "/link.wav")
    symlink(outside.path, media + "/linked-dir")
    mkfifo(media + "/fifo.wav", 0o644)
    // Reload with roots: the first daemon had none, which the next test covers.
    try """
    [access]
    users = ["\(Self.stranger)"]
    [media]
    roots = ["\(media)"]
    """.appendLine(toConfigurationOf: daemon)
    let watcher = try daemon.client()
    #expect(try watcher.request(["cmd": "subscribe", "events": ["config-reloaded"]])["ok"] == .bool(true))
    kill(daemon.process.processIdentifier, SIGHUP)
    let reloaded = try watcher.waitForEvent { $0["event"] == .string("config-reloaded") }
    #expect(reloaded["applied"]?.arrayValue?.contains(.string("media.roots")) == true, "\(reloaded)")

    let played = try rampctl(as: Self.stranger, ["play", media + "/in.wav", "--stream", "a"], daemon: daemon)
    #expect(played.status == 0, "\(played)")
    #expect(played.stdout.contains(inside), "\(played)")
    for (path, code) in [
      (escaped, "forbidden-path"), (media + "/../out.wav", "forbidden-path"), (media + "/link.wav", "forbidden-path"),
      (media + "/linked-dir/secret.wav", "forbidden-path"), (outside.path + "/secret.wav", "forbidden-path"),
      (media + "/fifo.wav", "file-error"), ("/dev/zero", "forbidden-path"),
    ] {
      let started = Date()
      let outcome = try rampctl(as: Self.stranger, ["play", path], daemon: daemon)
      #expect(outcome.status == 65, "\(path): \(outcome)")
      #expect(outcome.stderr.contains("rampctl: \(code):"), "\(path): \(outcome)")
      #expect(outcome.stderr.contains("(field: path)"), "\(path): \(outcome)")
      #expect(Date().timeIntervalSince(started) < 5, "\(path) was refused without blocking")
    }
    // Everything else is open to an admitted user.
    #expect(try rampctl(as: Self.stranger, ["set", "master.gain", "0.5"], daemon: daemon).status == 0)
    let client = try daemon.client()
    let streams = try client.request(["cmd": "status"])["result"]?["streams"]?.arrayValue ?? []
    #expect(streams.count == 1, "only the file under the root plays: \(streams)")
  }

  /// Without roots, root and rampd's own user may play any absolute path; others may play nothing.
  @Test func withoutRootsOthersPlayNothing() throws {
    let daemon = try openDaemon(
      """
      [access]
      users = ["*"]
      """)
    let file = try daemon.constantFile("tone", seconds: 3)
    let refused = try rampctl(as: Self.stranger, ["play", file], daemon: daemon)
    #expect(refused.status == 65, "\(refused)")
    #expect(refused.stderr.contains("forbidden-path"), "\(refused)")
    #expect(refused.stderr.contains("none are set"), "\(refused)")
    let client = try daemon.client()
    let reply = try client.request(["cmd": "play", "path": .string(file), "stream": "mine"])
    #expect(reply["ok"] == .bool(true), "root plays anything: \(reply)")
  }

  /// A connection that sends nothing, or trickles a line without ending it, is closed after the
  /// idle timeout with a `timeout` line; one that subscribes stays.
  @Test func idleConnectionsAreClosed() throws {
    let daemon = try DaemonProcess(
      extraConfiguration: """
        [limits]
        idle-timeout = "1s"
        """)
    let silent = try daemon.client()
    let trickling = try daemon.client()
    let listening = try daemon.client()
    #expect(try listening.request(["cmd": "subscribe"])["ok"] == .bool(true))
    let opened = Date()
    for byte in "{\"cm".utf8 {
      try trickling.send(raw: String(UnicodeScalar(byte)), newline: false)
      usleep(200_000)
    }
    let line = try silent.readLine()
    #expect(line["error"]?["code"] == .string("timeout"), "\(line)")
    let waited = Date().timeIntervalSince(opened)
    #expect(waited >= 0.9 && waited < 5, "closed after about a second, not \(waited) s")
    #expect(try trickling.readLine()["error"]?["code"] == .string("timeout"))
    usleep(300_000)
    #expect(silent.isClosedByPeer() && trickling.isClosedByPeer())
    #expect(try listening.request(["cmd": "ping"])["ok"] == .bool(true), "a subscriber is not idle")
  }

  @Test func animationsPerKeyPathIsALimit() throws {
    let daemon = try DaemonProcess(
      extraConfiguration: """
        [limits]
        animations-per-key-path = 3
        """)
    let client = try daemon.client()
    var codes: [String] = []
    for index in 0..<4 {
      let reply = try client.request([
        "cmd": "animate", "key": "master.gain", "name": .string("layer-\(index)"),
        "animation": ["type": "basic", "from": 0, "to": 0.5, "duration": 60, "additive": true],
      ])
      codes.append(reply["ok"] == .bool(true) ? "ok" : reply["error"]?["code"]?.stringValue ?? "?")
    }
    #expect(codes == ["ok", "ok", "ok", "limit-exceeded"])
  }

}

extension String {
  /// Adds these lines to a test daemon's configuration file (read again on SIGHUP).
  fileprivate func appendLine(toConfigurationOf daemon: DaemonProcess) throws {
    let path = daemon.directory + "/rampd.toml"
    let text = try String(contentsOfFile: path, encoding: .utf8)
    // The test's own sections replace the harness's of the same name.
    var kept: [Substring] = []
    var skipping = false
    let replaced = Set(split(separator: "\n").filter { $0.hasPrefix("[") })
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
      if line.hasPrefix("[") { skipping = replaced.contains(line) }
      if !skipping { kept.append(line) }
    }
    try (kept.joined(separator: "\n") + "\n" + self + "\n").write(toFile: path, atomically: true, encoding: .utf8)
  }
}
