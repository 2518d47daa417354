import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

/// `rampctl loudness`, the real binary, against ffmpeg's `ebur128` filter on files of every kind
/// made by sox and espeak-ng (script/setup installs all three; a missing one fails the test), and
/// its cache and bad input.
@Suite struct LoudnessTests {
  /// A directory with the files and the state directory the cache goes to.
  final class Workspace {
    let directory: TemporaryDirectory
    var path: String { directory.path }
    var state: String { directory.path + "/state" }
    var cache: String { state + "/loudness.cache" }

    init() throws { directory = try TemporaryDirectory("loudness") }

    /// `rampctl loudness ARGUMENTS` in the workspace, its cache in the workspace's state directory.
    func rampctl(_ arguments: [String]) throws -> ProcessOutcome {
      var environment = childEnvironment
      environment["STATE_DIRECTORY"] = state
      return try runProcess(Executables.rampctl, ["loudness"] + arguments, environment: environment, directory: path)
    }

    /// `--json`'s objects by path.
    func measure(_ files: [String], extra: [String] = []) throws -> (ProcessOutcome, [String: JSONValue]) {
      let outcome = try rampctl(["--json"] + extra + files)
      var byPath: [String: JSONValue] = [:]
      for line in outcome.stdout.split(separator: "\n") {
        let object = try JSON.parse(String(line))
        if let path = object["path"]?.stringValue { byPath[path] = object }
      }
      return (outcome, byPath)
    }

    func tool(_ name: String, _ arguments: [String]) throws {
      let path = try #require(SystemTool.path(name), "\(name) is not installed (script/setup installs it)")
      let outcome = try runProcess(path, arguments, directory: self.path)
      guard outcome.status == 0 else { throw HarnessError("\(name) \(arguments): \(outcome)") }
    }

    /// sox from nothing (`-n`), without dither (silence stays digital silence) and with the same
    /// noise every run (`-R`), so a failure reproduces. The true peaks of noise that reaches up to
    /// the Nyquist frequency are where the two meters' oversampling filters differ: on 20 s of
    /// sox's noise at 48 kHz, new each time, libebur128 read pink noise 0.01 to 0.29 dB under
    /// ffmpeg (one noise file of this test's, unseeded, once 0.37 dB), white noise 0.7 to 1.0 dB.
    func sox(_ arguments: [String], input: [String] = []) throws {
      try tool("sox", ["-R", "-D"] + input + ["-n"] + arguments)
    }
  }

  /// What ffmpeg's `ebur128=peak=true` says in its summary: I (LUFS; −70 when nothing passed
  /// the gate) and Peak (dBFS of the true peak, −inf for digital silence).
  static func ffmpeg(_ file: String, in directory: String) throws -> (integrated: Double, truePeak: Double) {
    let ffmpeg = try #require(SystemTool.path("ffmpeg"), "ffmpeg is not installed (script/setup installs it)")
    let outcome = try runProcess(
      ffmpeg, ["-nostats", "-hide_banner", "-i", file, "-af", "ebur128=peak=true", "-f", "null", "-"],
      directory: directory)
    guard outcome.status == 0 else { throw HarnessError("ffmpeg on \(file): \(outcome)") }
    let summary = try #require(outcome.stderr.components(separatedBy: "Summary:").last, "no summary: \(outcome)")
    func value(_ label: String) throws -> Double {
      let line = try #require(
        summary.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(label) },
        "no \(label) in ffmpeg's summary: \(summary)")
      let word = try #require(line.split(separator: " ").dropFirst().first, "\(line)")
      return try #require(Double(word), "\(line)")
    }
    return (try value("I:"), try value("Peak:"))
  }

  /// Integrated loudness within 0.1 LU and true peak within 0.2 dB of ffmpeg's, for speech, pink
  /// noise, sines (one whose true peak lies 3 dB above its samples), mono, 44.1 kHz, 22.05 kHz,
  /// 5.1 (each channel at its own level, so the LFE and the surround weights count), silence and
  /// a file under 0.4 s, all measured by one run of rampctl (in parallel).
  @Test func agreesWithFFmpeg() throws {
    let work = try Workspace()
    try work.tool(
      "espeak-ng",
      [
        "-w", "speech.wav",
        "Every item at the loudness you asked for, and nothing ever clips. The levels rampd fades between are "
          + "measured by the reference library of the field.",
      ])
    try work.sox(["-r", "48000", "-c", "2", "-b", "24", "pink.wav", "synth", "20", "pinknoise", "vol", "0.5"])
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "sine.wav", "synth", "6", "sine", "997", "vol", "-9dB"])
    // A quarter of the sample rate, 45° off the samples: they peak at −3 dB, the wave at 0 dB.
    // Faded in and out: a sine that starts at full level overshoots in any resampler.
    try work.sox([
      "-r", "48000", "-c", "1", "-e", "float", "-b", "32", "intersample.wav", "synth", "3", "sine", "12000", "0",
      "12.5", "fade", "0.05", "3", "0.05",
    ])
    try work.sox(["-r", "48000", "-c", "1", "-b", "16", "mono.wav", "synth", "5", "pinknoise", "vol", "0.3"])
    try work.sox(["-r", "44100", "-c", "2", "-b", "16", "cd.wav", "synth", "8", "brownnoise", "vol", "0.4"])
    try work.sox(
      [
        "-b", "24", "surround.wav", "synth", "6", "pinknoise", "vol", "0.4", "remix", "1", "2v0.5", "3v0.7", "4v1.0",
        "5v0.3", "6v0.2",
      ], input: ["-r", "48000", "-c", "6"])
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "silence.wav", "trim", "0", "4"])
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "short.wav", "synth", "0.3", "sine", "440", "vol", "0.5"])
    let files = [
      "speech.wav", "pink.wav", "sine.wav", "intersample.wav", "mono.wav", "cd.wav", "surround.wav",
      "silence.wav", "short.wav",
    ]

    let (outcome, measured) = try work.measure(files)
    #expect(outcome.status == 0, "\(outcome)")
    for file in files {
      let reference = try Self.ffmpeg(file, in: work.path)
      let ours = try #require(measured[file], "no line for \(file): \(outcome)")
      #expect(ours["cached"] == false)
      switch file {
      case "silence.wav", "short.wav":
        #expect(reference.integrated <= -70, "ffmpeg measured \(file) at \(reference.integrated) LUFS")
        #expect(ours["integrated"] == .null, "\(file): \(ours)")
        #expect(ours["unmeasured"] == (file == "short.wav" ? "too-short" : "silent"), "\(file): \(ours)")
      default:
        let integrated = try #require(ours["integrated"]?.numberValue, "\(file): \(ours)")
        #expect(
          abs(integrated - reference.integrated) <= 0.1, "\(file): \(integrated) LUFS, ffmpeg \(reference.integrated)")
        #expect(ours["unmeasured"] == nil)
      }
      if reference.truePeak == -.infinity {
        #expect(ours["truePeak"] == .null, "\(file): \(ours)")
      } else {
        let peak = try #require(ours["truePeak"]?.numberValue, "\(file): \(ours)")
        #expect(abs(peak - reference.truePeak) <= 0.2, "\(file): \(peak) dBTP, ffmpeg \(reference.truePeak)")
      }
    }
    // The file whose true peak is not a sample's: a sample peak would be 3 dB low.
    let intersample = try #require(measured["intersample.wav"]?["truePeak"]?.numberValue)
    #expect(abs(intersample) <= 0.2, "true peak \(intersample) dBTP, the wave's is 0 (its samples' -3)")
    #expect(measured["surround.wav"]?["channels"] == 6 && measured["speech.wav"]?["sampleRate"] == 22050)
  }

  /// A file is measured once: the second run takes the cache's value (planted there, a value no
  /// measurement of the file gives), a file whose modification time changed is measured again,
  /// `--no-cache` measures without the cache, and a corrupt cache is ignored, said, and written anew.
  @Test func measuredOnceByFileIdentity() throws {
    let work = try Workspace()
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "a.wav", "synth", "2", "sine", "440", "vol", "0.5"])
    let (first, one) = try work.measure(["a.wav"])
    #expect(first.status == 0 && one["a.wav"]?["cached"] == false, "\(first)")
    let measured = try #require(one["a.wav"]?["integrated"]?.numberValue)

    var lines = try String(contentsOfFile: work.cache, encoding: .utf8).split(separator: "\n").map(String.init)
    #expect(lines.count == 2 && lines[0].hasPrefix("rampd-loudness-cache "), "\(lines)")
    var fields = lines[1].split(separator: " ").map(String.init)
    fields[7] = "-42.5"
    lines[1] = fields.joined(separator: " ")
    try (lines.joined(separator: "\n") + "\n").write(toFile: work.cache, atomically: true, encoding: .utf8)
    let (second, two) = try work.measure(["a.wav"])
    #expect(second.status == 0 && two["a.wav"]?["cached"] == true, "\(second)")
    #expect(two["a.wav"]?["integrated"] == -42.5, "the cache's value, not a measurement: \(second)")

    let (bypassed, three) = try work.measure(["a.wav"], extra: ["--no-cache"])
    #expect(bypassed.status == 0 && three["a.wav"]?["cached"] == false, "\(bypassed)")
    #expect(three["a.wav"]?["integrated"]?.numberValue == measured)

    try FileManager.default.setAttributes(
      [.modificationDate: Date().addingTimeInterval(10)], ofItemAtPath: work.path + "/a.wav")
    let (touched, four) = try work.measure(["a.wav"])
    #expect(touched.status == 0 && four["a.wav"]?["cached"] == false, "measured again once changed: \(touched)")
    #expect(four["a.wav"]?["integrated"]?.numberValue == measured)

    try "rampd-loudness-cache 1 libebur128 1.2.6\n1 2 three\n".write(
      toFile: work.cache, atomically: true, encoding: .utf8)
    let (corrupt, five) = try work.measure(["a.wav"])
    #expect(corrupt.status == 0 && five["a.wav"]?["integrated"]?.numberValue == measured, "\(corrupt)")
    #expect(
      corrupt.stderr.contains("ignoring the cache \(work.cache) (line 2 is not an entry); it is written anew"),
      "\(corrupt)")
    let (after, six) = try work.measure(["a.wav"])
    #expect(after.status == 0 && after.stderr.isEmpty && six["a.wav"]?["cached"] == true, "rewritten: \(after)")
  }

  /// A cache that cannot be written (its directory would be under a file) is said on standard
  /// error; the measurements are printed and the exit status is 0.
  @Test func anUnwritableCacheIsNotFatal() throws {
    let work = try Workspace()
    try work.sox(["-r", "48000", "-c", "1", "-b", "16", "a.wav", "synth", "1", "sine", "440"])
    try "not a directory".write(toFile: work.state, atomically: true, encoding: .utf8)
    let (outcome, measured) = try work.measure(["a.wav"])
    #expect(outcome.status == 0 && measured["a.wav"]?["integrated"]?.numberValue != nil, "\(outcome)")
    #expect(!outcome.stderr.contains("ignoring"), "\(outcome)")
    #expect(outcome.stderr.contains("cannot write the loudness cache '\(work.cache)'"), "\(outcome)")
  }

  /// A missing file, a directory, a file that is not audio and an empty one are each told on
  /// standard error, named, and make the exit status 65; the files between them are measured. A
  /// silent file and one under 0.4 s are measurements: -inf with the reason, exit status 0.
  @Test func badInputIsToldPerFile() throws {
    let work = try Workspace()
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "good.wav", "synth", "1", "sine", "440", "vol", "0.5"])
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "silence.wav", "trim", "0", "1"])
    try work.sox(["-r", "48000", "-c", "2", "-b", "16", "short.wav", "synth", "0.2", "sine", "440"])
    try "not audio".write(toFile: work.path + "/junk.wav", atomically: true, encoding: .utf8)
    #expect(FileManager.default.createFile(atPath: work.path + "/empty.wav", contents: Data()))
    try FileManager.default.createDirectory(atPath: work.path + "/folder.wav", withIntermediateDirectories: false)

    let table = try work.rampctl(["missing.wav", "good.wav", "folder.wav", "junk.wav", "empty.wav", "short.wav"])
    #expect(table.status == 65, "\(table)")
    for message in [
      "rampctl: loudness: cannot read 'missing.wav': No such file or directory.",
      "rampctl: loudness: cannot read 'folder.wav': it is a directory, not an audio file.",
      "rampctl: loudness: cannot read 'junk.wav': ", "rampctl: loudness: cannot read 'empty.wav': ",
    ] {
      #expect(table.stderr.contains(message), "\(message)\n\(table)")
    }
    let rows = table.stdout.split(separator: "\n").map(String.init)
    #expect(rows.count == 3 && rows[0].hasPrefix("INTEGRATED"), "\(table)")
    #expect(rows.contains { $0.contains(" LUFS") && !$0.contains("-inf") && $0.hasSuffix("good.wav") }, "\(table)")
    #expect(
      rows.contains {
        $0.hasPrefix(" -inf LUFS") && $0.hasSuffix("short.wav (too short: under the 0.4 s a measurement needs)")
      },
      "\(table)")

    let (json, measured) = try work.measure(["missing.wav", "silence.wav", "junk.wav"])
    #expect(json.status == 65, "\(json)")
    #expect(measured["missing.wav"]?["error"]?["code"] == "unreadable-file", "\(json)")
    #expect(measured["junk.wav"]?["error"]?["code"] == "unreadable-file", "\(json)")
    let silence = try #require(measured["silence.wav"], "\(json)")
    #expect(silence["integrated"] == .null && silence["truePeak"] == .null && silence["unmeasured"] == "silent")

    let unmeasured = try work.rampctl(["silence.wav", "short.wav"])
    #expect(unmeasured.status == 0 && unmeasured.stderr.isEmpty, "\(unmeasured)")
    let silent = unmeasured.stdout.split(separator: "\n").first {
      $0.hasSuffix("silence.wav (silent: below the -70 LUFS gate)")
    }
    #expect(silent?.hasPrefix(" -inf LUFS  0.0 LU") == true && silent?.contains(" -inf dBTP") == true, "\(unmeasured)")
  }
}
