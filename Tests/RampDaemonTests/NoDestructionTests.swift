import Foundation
import RampAudio
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// Nothing destroys a user's file: renders never write over their input and replace an output
/// only when they succeed; a second rampd touches nothing of the running one's. Every file that
/// must survive is compared byte for byte.
@Suite struct NoDestructionTests {
  /// A fresh directory, removed afterwards.
  func withDirectory(_ name: String = #function, _ body: (String) throws -> Void) throws {
    let directory =
      NSTemporaryDirectory() + "rampd-nodestroy-\(getpid())-\(name.filter(\.isLetter))-\(UInt32.random(in: 0...9999))"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try body(directory)
  }

  /// `seconds` of a constant `level` in both channels.
  func writeTone(_ path: String, seconds: Double, level: Float = 0.5, encoding: SampleEncoding = .pcm16) throws {
    let frames = Int(seconds * 48_000)
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: encoding)
    let block = [Float](repeating: level, count: 48_000 * 2)
    var done = 0
    while done < frames {
      let count = min(48_000, frames - done)
      try block.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: count) }
      done += count
    }
    try writer.close()
  }

  func bytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

  /// The hidden temporary files of a replacement in `directory`.
  func temporaries(in directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.contains(".tmp-") }
  }

  func rampctl(_ arguments: [String], in directory: String, environment: [String: String] = [:]) throws
    -> ProcessOutcome
  {
    try runProcess(
      Executables.rampctl, arguments,
      environment: childEnvironment.merging(environment) {
        $1
      }, directory: directory)
  }

  // MARK: Render

  /// The input named as the output, in every spelling, is refused with a usage error and left
  /// byte-identical.
  @Test func renderNeverWritesOverItsInput() throws {
    try withDirectory { directory in
      let input = "\(directory)/in.wav"
      try writeTone(input, seconds: 1)
      symlink(input, "\(directory)/link.wav")
      link(input, "\(directory)/hard.wav")
      let before = try #require(bytes(input))
      for output in [input, "in.wav", "./in.wav", "\(directory)/./in.wav", "link.wav", "\(directory)/hard.wav"] {
        let outcome = try rampctl(["render", "in.wav", output, "--fade-in", "0.5s"], in: directory)
        #expect(outcome.status == 64, "\(output): \(outcome)")
        #expect(outcome.stderr.contains("is the input"), "\(output): \(outcome)")
        #expect(bytes(input) == before, "\(output): the input changed")
        #expect(temporaries(in: directory).isEmpty)
      }
      // The other way round: the input through a link, the output its target.
      let outcome = try rampctl(["render", "link.wav", input, "--fade-in", "0.5s"], in: directory)
      #expect(outcome.status == 64 && bytes(input) == before, "\(outcome)")
    }
  }

  /// A render that fails, whatever the reason, leaves an existing output byte-identical and no
  /// temporary file; one that succeeds replaces it, keeping its permissions.
  @Test func aFailedRenderLeavesAnExistingOutputAsItWas() throws {
    try withDirectory { directory in
      try writeTone("\(directory)/in.wav", seconds: 1)
      try writeTone("\(directory)/out.wav", seconds: 2, level: 0.25)
      try writeTone("\(directory)/out.flac", seconds: 2, level: 0.25)
      chmod("\(directory)/out.wav", 0o640)
      try "not audio".write(toFile: "\(directory)/bad.wav", atomically: true, encoding: .utf8)
      // Valid lines; the second fails only when it runs, halfway through the render.
      try """
      {"at": 0, "cmd": "set", "key": "master.gain", "to": 0.5}
      {"at": 0.5, "cmd": "set", "key": "streams.nothing.gain", "to": 0.5}
      """.write(toFile: "\(directory)/fails.jsonl", atomically: true, encoding: .utf8)
      try #"{"at": 5, "cmd": "set", "key": "master.gain", "to": 0.5}"#
        .write(toFile: "\(directory)/late.jsonl", atomically: true, encoding: .utf8)
      try "{not json".write(toFile: "\(directory)/invalid.jsonl", atomically: true, encoding: .utf8)
      let wav = try #require(bytes("\(directory)/out.wav"))
      let flac = try #require(bytes("\(directory)/out.flac"))
      let failures: [[String]] = [
        ["render", "in.wav", "out.wav", "--script", "fails.jsonl"],
        ["render", "in.wav", "out.wav", "--script", "late.jsonl"],
        ["render", "in.wav", "out.wav", "--script", "invalid.jsonl"],
        ["render", "in.wav", "out.wav", "--script", "missing.jsonl"],
        ["render", "bad.wav", "out.wav"],
        ["render", "missing.wav", "out.wav"],
        ["render", "in.wav", "out.flac", "--encoding", "float"],
      ]
      for arguments in failures {
        let outcome = try rampctl(arguments, in: directory)
        #expect(outcome.status != 0, "\(arguments): \(outcome)")
        #expect(bytes("\(directory)/out.wav") == wav, "\(arguments): out.wav changed")
        #expect(bytes("\(directory)/out.flac") == flac, "\(arguments): out.flac changed")
        #expect(temporaries(in: directory).isEmpty, "\(arguments): \(temporaries(in: directory))")
      }
      let replaced = try rampctl(["render", "in.wav", "out.wav", "--fade-in", "0.5s"], in: directory)
      #expect(replaced.status == 0, "\(replaced)")
      let reader = try SoundFileReader(path: "\(directory)/out.wav")
      #expect(reader.frames == 48_000, "the 1 s render replaced the 2 s file")
      var status = stat()
      stat("\(directory)/out.wav", &status)
      #expect(status.st_mode & 0o777 == 0o640, "the output's permissions stay")
      #expect(temporaries(in: directory).isEmpty)
      // Through a symbolic link: its target is replaced, the link stays.
      symlink("out.wav", "\(directory)/link.wav")
      let throughLink = try rampctl(["render", "in.wav", "link.wav", "--fade-out", "0.5s"], in: directory)
      #expect(throughLink.status == 0, "\(throughLink)")
      var linkStatus = stat()
      lstat("\(directory)/link.wav", &linkStatus)
      #expect(linkStatus.st_mode & S_IFMT == S_IFLNK, "the link is still a link")
      #expect(bytes("\(directory)/out.wav") != bytes("\(directory)/in.wav"))
    }
  }

  /// Ctrl-C (SIGINT) or SIGTERM during a render: exit 75, the existing output as it was, no
  /// temporary file.
  @Test(arguments: [SIGINT, SIGTERM]) func anInterruptedRenderLeavesNothing(signal: Int32) throws {
    try withDirectory { directory in
      try writeTone("\(directory)/in.wav", seconds: 240)
      try writeTone("\(directory)/out.wav", seconds: 1, level: 0.25)
      let before = try #require(bytes("\(directory)/out.wav"))
      let process = Process()
      process.executableURL = URL(fileURLWithPath: Executables.rampctl)
      process.arguments = ["render", "in.wav", "out.wav", "--fade-out", "1s"]
      process.environment = childEnvironment
      process.currentDirectoryURL = URL(fileURLWithPath: directory)
      process.standardError = FileHandle.nullDevice
      try process.run()
      let deadline = Date().addingTimeInterval(20)
      while temporaries(in: directory).isEmpty && process.isRunning && Date() < deadline { usleep(1_000) }
      try #require(process.isRunning && !temporaries(in: directory).isEmpty, "the render was under way")
      kill(process.processIdentifier, signal)
      process.waitUntilExit()
      #expect(process.terminationStatus == 75)
      #expect(bytes("\(directory)/out.wav") == before)
      #expect(temporaries(in: directory).isEmpty, "\(temporaries(in: directory))")
    }
  }

  /// A 32-bit source (integer or float) rendered to FLAC becomes 24-bit, said on stderr.
  @Test(arguments: [SampleEncoding.pcm32, .float]) func aThirtyTwoBitSourceRendersToTwentyFourBitFLAC(
    encoding: SampleEncoding
  ) throws {
    try withDirectory { directory in
      try writeTone("\(directory)/in.wav", seconds: 0.5, encoding: encoding)
      let outcome = try rampctl(["render", "in.wav", "out.flac"], in: directory)
      #expect(outcome.status == 0, "\(outcome)")
      #expect(outcome.stderr.contains("writing 'pcm24'"), "\(outcome)")
      #expect(outcome.stderr.contains("'\(encoding.rawValue)'"), "\(outcome)")
      let reader = try SoundFileReader(path: "\(directory)/out.flac")
      #expect(reader.encoding == .pcm24)
      #expect(reader.formatName.hasPrefix("FLAC"))
      var samples = [Float](repeating: 0, count: 24_000 * 2)
      let read = try samples.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 24_000) }
      #expect(read == 24_000 && samples.allSatisfy { abs($0 - 0.5) < 1e-6 })
    }
  }

  /// A script line after the end of the render is an error naming the line and the length.
  @Test func aScriptLinePastTheEndIsAnError() throws {
    try withDirectory { directory in
      try writeTone("\(directory)/in.wav", seconds: 2)
      try """
      {"at": 1, "cmd": "set", "key": "master.gain", "to": 0.5, "duration": 0}
      {"at": "2s", "cmd": "set", "key": "master.gain", "to": 0.25, "duration": 0}
      {"at": "2.5s", "cmd": "fade", "key": "master.gain", "to": 0, "duration": "1s"}
      """.write(toFile: "\(directory)/s.jsonl", atomically: true, encoding: .utf8)
      let outcome = try rampctl(["render", "in.wav", "out.wav", "--script", "s.jsonl"], in: directory)
      #expect(outcome.status == 65, "\(outcome)")
      #expect(
        outcome.stderr.contains("s.jsonl:3: fade: at 2.5 s is after the end of the render, which is 2 s long"),
        "\(outcome)")
      #expect(!FileManager.default.fileExists(atPath: "\(directory)/out.wav"))
      // At the very end is still inside.
      try """
      {"at": "2s", "cmd": "set", "key": "master.gain", "to": 0.25, "duration": 0}
      """.write(toFile: "\(directory)/s.jsonl", atomically: true, encoding: .utf8)
      let atTheEnd = try rampctl(["render", "in.wav", "out.wav", "--script", "s.jsonl"], in: directory)
      #expect(atTheEnd.status == 0, "\(atTheEnd)")
    }
  }

  // MARK: A second rampd

  /// rampd with no device, playing a minute of tone into the embedded output file `wav`.
  func startPlaying(in directory: String, into wav: String) throws -> (Process, LineClient) {
    try writeTone("\(directory)/tone.wav", seconds: 60)
    let process = try startRampdWithoutADevice(in: directory, file: wav)
    let client = try LineClient(path: "\(directory)/s.sock")
    let played = try client.request(["cmd": "play", "path": .string("\(directory)/tone.wav")])
    guard played.isOK else {
      process.terminate()
      throw HarnessError("play refused: \(played.serialized())")
    }
    return (process, client)
  }

  /// A second rampd on the same socket, or on another socket sharing the state file or the
  /// embedded output file, is refused before it opens anything: the running daemon's WAV file
  /// keeps every byte it had and its state file is byte-identical.
  @Test func aSecondRampdTouchesNothing() throws {
    try withDirectory { directory in
      let wav = "\(directory)/out.wav"
      let state = "\(directory)/state.json"
      let (first, client) = try startPlaying(in: directory, into: wav)
      defer { if first.isRunning { first.terminate() } }
      usleep(700_000)
      let stateBefore = try #require(bytes(state))

      func second(_ socket: String, environment: [String: String], file: String = wav) throws -> String {
        let played = try #require(bytes(wav))
        let log = "\(directory)/second.log"
        let process = try startRampdWithoutADevice(
          in: directory, file: file, socket: socket, environment: environment, log: log)
        process.waitUntilExit()
        let message = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(process.terminationStatus == 69, "\(message)")
        // The WAV only grew: everything after its header is still there.
        let now = try #require(bytes(wav))
        #expect(now.count >= played.count, "the embedded output was truncated")
        #expect(now.prefix(played.count).dropFirst(44) == played.dropFirst(44), "the embedded output changed")
        #expect(bytes(state) == stateBefore, "the state file changed")
        return message
      }
      let sameSocket = try second("\(directory)/s.sock", environment: [:])
      #expect(sameSocket.contains("another rampd is already listening on \(directory)/s.sock"), "\(sameSocket)")
      let sharedState = try second("\(directory)/other.sock", environment: ["RAMPD_STATE_PATH": state])
      #expect(
        sharedState.contains("another rampd (pid \(first.processIdentifier), socket \(directory)/s.sock)"),
        "\(sharedState)")
      #expect(sharedState.contains("state file \(state)"), "\(sharedState)")
      let sharedFile = try second(
        "\(directory)/third.sock", environment: ["RAMPD_STATE_PATH": "\(directory)/third.json"])
      #expect(sharedFile.contains("plays into the embedded output file \(wav)"), "\(sharedFile)")
      #expect(!FileManager.default.fileExists(atPath: "\(directory)/other.sock"))
      #expect(!FileManager.default.fileExists(atPath: "\(directory)/third.json"), "its state file was not even read")
      #expect(try client.request(["cmd": "status"]).isOK, "the first one still serves")
      first.terminate()
      first.waitUntilExit()
      #expect(first.terminationStatus == 0)
    }
  }

  /// Two daemons starting on one socket at the same moment: the one that finds the socket's lock
  /// taken stops before it opens anything (it would have taken the other's fresh socket file for
  /// a stale one and removed it).
  @Test func aRampdStartingOnASocketBeingTakenStops() throws {
    try withDirectory { directory in
      let socket = "\(directory)/s.sock"
      // Another rampd, between its check and its bind, holds the lock.
      let other = open(socket + ".lock", O_RDWR | O_CREAT, 0o600)
      defer { close(other) }
      #expect(flock(other, LOCK_EX | LOCK_NB) == 0)
      _ = "pid 1, socket \(socket)\n".withCString { pwrite(other, $0, strlen($0), 0) }
      let log = "\(directory)/log"
      let process = try startRampdWithoutADevice(in: directory, file: "\(directory)/out.wav", log: log)
      process.waitUntilExit()
      let message = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
      #expect(process.terminationStatus == 69, "\(message)")
      #expect(message.contains("another rampd (pid 1, socket \(socket)) is starting on \(socket)"), "\(message)")
      for name in ["s.sock", "out.wav", "state.json", "state.json.lock"] {
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/\(name)"), "\(name) was created")
      }
    }
  }

  // MARK: The socket

  /// rampd reads RAMPD_SOCKET as rampctl does (RAMPD_SOCKET_PATH is an alias that loses to it):
  /// one export starts and reaches the same daemon.
  @Test func rampdListensWhereRampdSocketSays() throws {
    try withDirectory { directory in
      let socket = "\(directory)/exported.sock"
      let process = Process()
      process.executableURL = URL(fileURLWithPath: Executables.rampd)
      process.arguments = ["--device", "rampd_no_such_device", "--embedded-file", "\(directory)/out.wav"]
      process.environment = childEnvironment.merging([
        "RAMPD_SOCKET": socket, "RAMPD_SOCKET_PATH": "\(directory)/alias.sock",
        "RAMPD_STATE_PATH": "\(directory)/state.json",
      ]) { $1 }
      process.standardError = FileHandle.nullDevice
      try process.run()
      defer { if process.isRunning { process.terminate() } }
      for _ in 0..<400 where !FileManager.default.fileExists(atPath: socket) { usleep(10_000) }
      let status = try rampctl(["status", "--json"], in: directory, environment: ["RAMPD_SOCKET": socket])
      #expect(status.status == 0, "\(status)")
      #expect(!FileManager.default.fileExists(atPath: "\(directory)/alias.sock"))
      process.terminate()
      process.waitUntilExit()
    }
  }

  /// rampctl that cannot connect says how to start the daemon it looked for.
  @Test func theUnreachableHintNamesTheRightService() throws {
    try withDirectory { directory in
      let other = try rampctl(["status"], in: directory, environment: ["RAMPD_SOCKET": "\(directory)/none.sock"])
      #expect(other.status == 69)
      #expect(other.stderr.contains("`RAMPD_SOCKET=\(directory)/none.sock rampd`"), "\(other)")
      let user = try rampctl(["status"], in: directory, environment: ["XDG_RUNTIME_DIR": directory])
      if geteuid() == 0 {
        #expect(user.stderr.contains("systemctl start rampd"), "\(user)")
      } else {
        #expect(user.stderr.contains("systemctl --user start rampd"), "\(user)")
      }
    }
  }

  // MARK: The embedded output while it plays

  /// The embedded WAV file's header is kept true while rampd plays into it, so `rampctl envelope`
  /// (and libsndfile, sox, …) read what has been played so far.
  @Test func envelopeReadsTheEmbeddedOutputWhileItPlays() throws {
    try withDirectory { directory in
      let wav = "\(directory)/out.wav"
      let (process, _) = try startPlaying(in: directory, into: wav)
      defer { if process.isRunning { process.terminate() } }
      usleep(2_500_000)
      let reader = try SoundFileReader(path: wav)
      var info = stat()
      stat(wav, &info)
      let inFile = (Int64(info.st_size) - 44) / 4
      #expect(reader.frames > 48_000, "\(reader.frames) frames readable after 2.5 s")
      #expect(reader.frames <= inFile && reader.frames > inFile - 2 * 48_000, "\(reader.frames) of \(inFile)")
      let envelope = try rampctl(["envelope", wav, "--ascii"], in: directory)
      #expect(envelope.status == 0, "\(envelope)")
      #expect(process.isRunning, "still playing")
      // The tone's level (0.5) shows: a plot, not an empty file.
      #expect(
        envelope.stdout.contains("#") || envelope.stdout.contains("*") || envelope.stdout.contains("|"), "\(envelope)")
    }
  }
}
