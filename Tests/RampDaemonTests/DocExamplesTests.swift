import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// The documents' examples, run: README.md's and systemd/README.md's shell and Python blocks in
/// order, as root and as an ordinary user paste them, and PROTOCOL.md's JSON exchanges, each request sent to a real rampd playing into ALSA's
/// `file` plugin and its reply compared with the documented one. A block that cannot run here
/// says why in the document (`<!-- example: skip (…) -->`, DocBlock), so a doc that stops being
/// true turns this suite red.
@Suite struct DocExamplesTests {
  /// README.md, then systemd/README.md: every `sh` and `python` block, in order, as a user who
  /// has run the quick start pastes them: with `rampd` and `rampctl` on PATH from the build
  /// directory, in an empty directory of their own, once as root and once as an ordinary user
  /// (DocReader), each with the environment they have (no `RAMPD_SOCKET`; `XDG_RUNTIME_DIR` only
  /// for the user), so that rampd and every example find the socket by the default rule. They run
  /// in a DocSandbox, where those default paths are the run's own.
  @Test(
    .enabled(if: geteuid() == 0, "runs the examples as root and as a user it creates, in a namespace: needs root"),
    arguments: DocReader.allCases)
  func documentExamplesRun(as reader: DocReader) throws {
    let directory = NSTemporaryDirectory() + "rampd-readme-\(reader)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try FileManager.default.createDirectory(atPath: "\(directory)/namespace", withIntermediateDirectories: true)
    let sandbox = try DocSandbox(reader, scratch: "\(directory)/namespace")
    let work = "\(directory)/work"
    let home = "\(directory)/home"
    let output = "\(directory)/out"
    for path in [work, home, output] {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
      try sandbox.own(path)
    }
    // ALSA's default device is a file PCM over null: what rampd plays lands in played.raw, never
    // on a sound card (or a sound server's default) this machine might have.
    let recording = "\(output)/played.raw"
    try AlsaConfiguration.withoutHooks().write(toFile: "\(directory)/alsa.conf", atomically: true, encoding: .utf8)
    try "pcm.!default { type file; slave.pcm null; file \"\(recording)\"; format raw }\n".write(
      toFile: "\(directory)/asound.conf", atomically: true, encoding: .utf8)
    var environment = ProcessInfo.processInfo.environment.filter {
      !$0.key.hasPrefix("RAMPD_") && !$0.key.hasPrefix("XDG_") && !$0.key.hasPrefix("LISTEN_")
    }
    switch reader {
    case .root:
      environment["PATH"] = Executables.directory + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
    case .user:
      // What a login gives: the user's names, the standard PATH, the runtime directory.
      environment["PATH"] = Executables.directory + ":/usr/local/bin:/usr/bin:/bin"
      environment["USER"] = DocSandbox.userName
      environment["LOGNAME"] = DocSandbox.userName
      environment["XDG_RUNTIME_DIR"] = sandbox.runtimeDirectory
    }
    environment["HOME"] = home
    environment["ALSA_CONFIG_PATH"] = "\(directory)/alsa.conf:\(directory)/asound.conf"
    // What `pip install ./clients/python` gives: the rampd module, the package's own source.
    environment["PYTHONPATH"] = "\(Markdown.root)/clients/python"
    // Where rampd listens and rampctl connects by default, for this reader.
    let socket = SocketLocation.defaultPath(environment: environment, isRoot: reader == .root)

    var daemon: BlockProcess?
    defer { daemon?.signal(SIGKILL) }
    var installation: Installation?
    for name in ["README.md", "systemd/README.md"] {
      var ran = 0
      for block in Markdown.blocks(try Markdown.read(name)) {
        let place = "\(name):\(block.line) (as \(reader))"
        #expect(block.unknownMarkers.isEmpty, "\(place): unknown example markers \(block.unknownMarkers)")
        if let reason = block.skipReason {
          #expect(reason.hasPrefix("(") && reason.count > 4, "\(place): a skipped block says why, in parentheses")
          continue
        }
        let arguments: [String]
        switch block.language {
        case "sh": arguments = ["bash", "-e", "-o", "pipefail", "-c", block.text]
        case "python": arguments = ["python3", "-"]
        default:
          Issue.record("\(place): a \(block.language) block is not run; mark it <!-- example: skip (why) -->")
          continue
        }
        var blockEnvironment = environment
        if block.has("installed") {
          if installation == nil { installation = try Installation(prefix: true) }
          blockEnvironment["PREFIX"] = installation?.prefix
        }
        let process = try BlockProcess(
          sandbox.command(arguments, directory: work), stdin: block.language == "python" ? block.text : nil,
          environment: blockEnvironment, directory: work)
        ran += 1
        if block.has("daemon") {
          #expect(daemon == nil, "\(place): a second daemon block")
          daemon = process
          let deadline = Date().addingTimeInterval(30)
          while (try? LineClient(path: sandbox.outside(socket))) == nil {
            guard process.process.isRunning, Date() < deadline else {
              throw HarnessError("\(place): the daemon did not listen on \(socket)\n\(process.text)")
            }
            usleep(20_000)
          }
          continue
        }
        if block.has("until-interrupted") {
          usleep(1_500_000)
          #expect(process.process.isRunning, "\(place): ended before Ctrl-C\n\(process.text)")
          process.signal(SIGINT)
          let status = process.wait(timeout: 10)
          #expect(
            status == 0, "\(place): Ctrl-C should end it with 0, got \(String(describing: status))\n\(process.text)")
          continue
        }
        let status = process.wait(timeout: 120)
        #expect(status == 0, "\(place): exit \(String(describing: status))\n\(block.text)\n\(process.text)")
      }
      #expect(ran >= (name == "README.md" ? 10 : 1), "only \(ran) \(name) blocks ran")
    }
    let running = try #require(daemon, "README.md starts no daemon for its examples")
    #expect(running.process.isRunning, "rampd ended during the examples\n\(running.text)")
    // It played: the file PCM holds audio that is not all silence.
    let played = (try? Data(contentsOf: URL(fileURLWithPath: recording))) ?? Data()
    #expect(played.contains { $0 != 0 }, "nothing audible was played (\(played.count) bytes)")
    // Ctrl-C at the daemon's terminal fades out and exits 0, as the README says.
    running.signal(SIGINT)
    #expect(running.wait(timeout: 15) == 0, "rampd on Ctrl-C\n\(running.text)")
  }

  /// PROTOCOL.md: every JSON block in order on one connection. A request line is sent as
  /// written (files under /srv/music are the test's own, generated with sox), and its reply must
  /// have the shape of the reply line that follows it in the block (same members, types, `ok`
  /// and error); a request without a documented reply must be accepted. Animation ids
  /// in requests stand for the ids the documented replies gave out earlier.
  @Test func protocolExchangesRun() throws {
    let directory = NSTemporaryDirectory() + "rampd-protocol-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    let music = "\(directory)/music"
    try FileManager.default.createDirectory(atPath: music, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let daemon = try DaemonProcess(
      environment: [
        // The status example shows the embedded output: a device that cannot be opened.
        "RAMPD_OUTPUT_DEVICE": "rampd_no_such_device", "RAMPD_EMBEDDED_OUTPUT_ENABLED": "true",
        "RAMPD_EMBEDDED_OUTPUT_PATH": "\(directory)/output.wav",
      ], reusing: directory,
      // And a session that allows neither real time nor locking memory, as a terminal's usually does.
      launcher: ["/usr/bin/prlimit", "--rtprio=0", "--memlock=8388608", "--"]
        + (geteuid() == 0 ? ["/usr/bin/setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"] : []))
    defer { daemon.stop() }
    let document = try Markdown.read("PROTOCOL.md")
    for name in Set(document.matches(of: /\/srv\/music\/([A-Za-z0-9_.-]+)/).map { String($0.1) }) {
      let made = try runProcess(
        "/usr/bin/env", ["sox", "-n", "-r", "48000", "-c", "2", "\(music)/\(name)", "synth", "70", "sine", "440"])
      #expect(made.status == 0, "sox \(name): \(made)")
    }
    let client = try daemon.client()
    var ids: [Double: Double] = [:]
    var exchanges = 0

    func send(_ line: String) throws -> JSONValue {
      var request = try JSON.parse(line.replacingOccurrences(of: "/srv/music/", with: "\(music)/"))
      if case .array(let listed)? = request["animations"] {
        request = request.setting(
          "animations", .array(listed.map { .number(ids[$0.numberValue ?? -1] ?? $0.numberValue ?? 0) }))
      }
      try client.send(raw: request.serialized())
      while true {
        let reply = try client.readLine()
        if reply["event"] == nil { return reply }
      }
    }

    for block in Markdown.blocks(document) where block.language == "json" {
      let place = "PROTOCOL.md:\(block.line)"
      #expect(block.unknownMarkers.isEmpty, "\(place): unknown example markers \(block.unknownMarkers)")
      if block.skipReason != nil { continue }
      for given in block.givens {
        let reply = try send(given)
        #expect(reply.isOK, "\(place): given \(given): \(reply.serialized())")
      }
      let lines = block.text.split(separator: "\n").map(String.init)
      var index = 0
      while index < lines.count {
        let line = try JSON.parse(lines[index])
        index += 1
        if line["hello"] != nil {
          #expect(shapeMismatch(expected: line, actual: client.greeting) == nil, "\(place): greeting")
          continue
        }
        if line["ok"] != nil {
          Issue.record("\(place): \(lines[index - 1]) answers no request; give the request or mark the block skip")
          continue
        }
        guard line["cmd"] != nil else { continue }  // An event: its order is the daemon's tests' business.
        let reply = try send(lines[index - 1])
        exchanges += 1
        #expect(reply["id"] == line["id"], "\(place): \(lines[index - 1]) got \(reply.serialized())")
        // The documented reply: the next line that is not an event (play's stream-started comes first).
        while index < lines.count, (try? JSON.parse(lines[index]))?["event"] != nil { index += 1 }
        guard index < lines.count, let documented = try? JSON.parse(lines[index]), documented["ok"] != nil,
          documented["id"] == line["id"]
        else {
          #expect(
            reply.isOK,
            "\(place): \(lines[index - 1]) was refused: \(reply.serialized())\nrampd: \(daemon.log.suffix(1500))")
          continue
        }
        index += 1
        if let mismatch = shapeMismatch(expected: documented, actual: reply) {
          Issue.record(
            "\(place): \(lines[index - 2])\n  documented \(lines[index - 1])\n  got \(reply.serialized())\n  \(mismatch)"
          )
        }
        recordIDs(documented: documented["result"], actual: reply["result"], into: &ids)
      }
    }
    #expect(exchanges >= 35, "only \(exchanges) PROTOCOL.md requests ran")
    #expect(daemon.process.isRunning)
  }

  /// Remembers which id the daemon gave for each animation id the document shows, so that a later
  /// `wait` on the documented ids waits on the real ones.
  private func recordIDs(documented: JSONValue?, actual: JSONValue?, into ids: inout [Double: Double]) {
    if let want = documented?["animation"]?.numberValue, let got = actual?["animation"]?.numberValue {
      ids[want] = got
    }
    if case .array(let want)? = documented?["animations"], case .array(let got)? = actual?["animations"] {
      for (one, other) in zip(want, got) {
        if let one = one.numberValue, let other = other.numberValue { ids[one] = other }
      }
    }
    if case .array(let want)? = documented?["results"], case .array(let got)? = actual?["results"] {
      for (one, other) in zip(want, got) { recordIDs(documented: one, actual: other, into: &ids) }
    }
  }
}

extension JSONValue {
  fileprivate func setting(_ key: String, _ value: JSONValue) -> JSONValue {
    guard case .object(var object) = self else { return self }
    object[key] = value
    return .object(object)
  }
}
