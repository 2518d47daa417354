import Foundation
import Logging
import RampEngine
import RampProtocol
import Synchronization
import Testing

@testable import RampDaemon
@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

// MARK: - Helpers

/// Keeps what a logger logs.
private final class LogRecorder: Sendable {
  private let entries = Mutex<[(level: Logger.Level, message: String)]>([])

  var logger: Logger { Logger(label: "rampd.state.test") { _ in RecordingHandler(recorder: self) } }

  func append(_ level: Logger.Level, _ message: String) { entries.withLock { $0.append((level, message)) } }

  func messages(_ level: Logger.Level) -> [String] {
    entries.withLock { $0.filter { $0.level == level }.map(\.message) }
  }

  var warnings: [String] { messages(.warning) }
}

private struct RecordingHandler: LogHandler {
  let recorder: LogRecorder
  var metadata: Logger.Metadata = [:]
  var metadataProvider: Logger.MetadataProvider?
  var logLevel: Logger.Level = .trace

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) { recorder.append(event.level, event.message.description) }
}

/// mkdtemp: a new directory whose name starts with `prefix`.
private func makeTemporaryDirectory(_ prefix: String) -> String? {
  var template = Array((prefix + "XXXXXX").utf8CString)
  return template.withUnsafeMutableBufferPointer { buffer in
    mkdtemp(buffer.baseAddress!).map { String(cString: $0) }
  }
}

/// Runs `body` with a fresh directory, removed afterwards.
private func withScratch<T>(_ body: (String) throws -> T) throws -> T {
  guard let directory = makeTemporaryDirectory(FileManager.default.temporaryDirectory.path + "/rampd-state-") else {
    throw POSIXError(.init(rawValue: errno) ?? .EIO)
  }
  defer { try? FileManager.default.removeItem(atPath: directory) }
  return try body(directory)
}

private func contents(_ path: String) -> [UInt8]? {
  FileManager.default.contents(atPath: path).map { [UInt8]($0) }
}

private func put(_ bytes: [UInt8], at path: String) {
  let written = FileManager.default.createFile(atPath: path, contents: Data(bytes))
  precondition(written, "cannot write \(path)")
}

private func put(_ text: String, at path: String) { put(Array(text.utf8), at: path) }

private func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

/// The names in `directory` that start with `prefix`, sorted.
private func names(in directory: String, startingWith prefix: String) -> [String] {
  ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasPrefix(prefix) }.sorted()
}

/// The permission bits of a file.
private func mode(_ path: String) -> mode_t {
  var status = stat()
  guard stat(path, &status) == 0 else { return 0 }
  return status.st_mode & 0o7777
}

/// Polls `condition` until it holds or `timeout` seconds pass.
private func eventually(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
  let deadline = Date().addingTimeInterval(timeout)
  while Date() < deadline {
    if condition() { return true }
    usleep(2_000)
  }
  return condition()
}

/// Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN, as here and in CI).
private let canMountTmpfs: Bool = {
  guard let directory = makeTemporaryDirectory("/tmp/rampd-mount-probe-") else { return false }
  defer { rmdir(directory) }
  guard mount("tmpfs", directory, "tmpfs", 0, "size=16k") == 0 else { return false }
  umount2(directory, Int32(MNT_DETACH))
  return true
}()

/// Mounts a tmpfs of `size` at `directory`, runs `body`, and unmounts it, also when `body` throws.
private func withTmpfs<T>(at directory: String, size: String, _ body: () throws -> T) throws -> T {
  guard mkdir(directory, 0o755) == 0, mount("tmpfs", directory, "tmpfs", 0, "size=\(size)") == 0 else {
    throw POSIXError(.init(rawValue: errno) ?? .EPERM)
  }
  defer {
    if umount(directory) != 0 { umount2(directory, Int32(MNT_DETACH)) }
  }
  return try body()
}

/// A state with something of everything: odd key paths, extreme numbers, nested requests,
/// escapes, the largest id, two schedules due at the same time.
private let richState = PersistentState(
  values: [
    "master.gain": 0.5,
    "mixers.master.volume": 0.123_456_789_012_345_67,
    "streams.music.gain": 1e-300,
    "streams.bed.pan": -0.75,
    "mixers.Größe \"quoted\" \\ ✓.volume": 3.0e10,
    "streams.s1.gain": Double.leastNonzeroMagnitude,
    "streams.s2.gain": 0.1 + 0.2,
  ],
  schedules: [
    PersistedSchedule(
      id: 1,
      request: [
        "cmd": "fade", "key": "master.gain", "to": 0, "duration": 2.5, "curve": "cubic-bezier(0.1,1,1,0.2)",
      ],
      due: 1_768_980_600.125),
    PersistedSchedule(
      id: 7,
      request: [
        "cmd": "batch",
        "commands": [
          ["cmd": "play", "path": "/srv/audio/jingle\n\"1\".wav", "stream": "j", "fadeIn": 0.2] as JSONValue,
          ["cmd": "set", "key": "streams.music.gain", "to": 0.25, "instant": true, "note": .null] as JSONValue,
        ],
      ],
      due: 1_768_980_600.125, from: 0.333_333_333_333_333_3, confined: true),
    PersistedSchedule(
      id: 9_007_199_254_740_992,
      request: [
        "cmd": "animate", "key": "master.gain", "keyframes": [1, 0.5, 1], "keyTimes": [0, 0.5, 1],
        "repeatCount": 1e9, "label": "\u{2028}tab\t✓ 🎚\u{0}",
      ],
      due: 4_102_444_800.000_001, from: 0),
  ])

/// `richState` with `count` more values: about 35 bytes each in the file.
private func largeState(_ count: Int) -> PersistentState {
  var state = richState
  for index in 0..<count { state.values["streams.s\(index).gain"] = Double(index) / Double(count) }
  return state
}

/// A valid file around `values` and `schedules` (JSON text).
private func file(values: String = "{}", schedules: String = "[]", extra: String = "") -> String {
  #"{"version":1,"savedAt":"2026-01-21T07:30:00Z","values":\#(values),"schedules":\#(schedules)\#(extra)}"#
}

// MARK: - The store

/// StateStore: round trip, missing, truncated and corrupt files, bad entries, full and read-only
/// file systems, stale temporary files. StateSaver: coalescing, rate, flush, failures.
@Suite struct StateStoreTests {
  @Test func aRichStateRoundTrips() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      let log = LogRecorder()
      let store = StateStore(path: path, logger: log.logger)
      let before = Date().timeIntervalSince1970
      try store.save(richState)
      #expect(store.load() == richState)
      #expect(StateStore(path: path, logger: log.logger).load() == richState)
      #expect(log.warnings == [])
      #expect(names(in: directory, startingWith: "") == ["state.json"])
      #expect(mode(path) == 0o600)

      // The file as documented: JSON with a version, a savedAt and one line per entry.
      let text = String(decoding: contents(path) ?? [], as: UTF8.self)
      let json = try JSON.parse(text, maxDepth: 64)
      #expect(json["version"] == 1)
      let stamp = try #require(json["savedAt"]?.stringValue)
      #expect(stamp.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/) != nil, "\(stamp)")
      let savedAt = try #require(RFC3339.parse(stamp))
      #expect(savedAt >= before.rounded(.down) && savedAt <= Date().timeIntervalSince1970 + 1)
      #expect(json["values"]?.objectValue?.count == richState.values.count)
      #expect(json["schedules"]?.arrayValue?.count == 3)
      #expect(text.hasPrefix("{\n  \"version\": 1,\n  \"savedAt\": \""))
      #expect(text.contains("\n    \"master.gain\": 0.5,\n"))
      #expect(text.components(separatedBy: "\"confined\":true").count == 2, "written for the confined one only")
      #expect(text.split(separator: "\n").count == 6 + richState.values.count + 3 + 2)

      // A second save replaces the first.
      var next = richState
      next.values["master.gain"] = 0.25
      next.schedules.removeFirst()
      try store.save(next)
      #expect(store.load() == next)
      try store.save(PersistentState())
      #expect(store.load() == PersistentState())
      #expect(names(in: directory, startingWith: "") == ["state.json"])
    }
  }

  @Test func aMissingFileIsAnEmptyState() throws {
    try withScratch { directory in
      let log = LogRecorder()
      #expect(StateStore(path: directory + "/state.json", logger: log.logger).load() == PersistentState())
      #expect(StateStore(path: directory + "/no/such/dir/state.json", logger: log.logger).load() == PersistentState())
      #expect(log.warnings == [])
      #expect(names(in: directory, startingWith: "") == [])
    }
  }

  @Test func saveCreatesTheDirectoryPrivately() throws {
    try withScratch { directory in
      let path = directory + "/state/rampd/state.json"
      let store = StateStore(path: path, logger: LogRecorder().logger)
      try store.save(richState)
      #expect(mode(directory + "/state") == 0o700)
      #expect(mode(directory + "/state/rampd") == 0o700)
      #expect(mode(path) == 0o600)
      #expect(store.load() == richState)
    }
  }

  /// Every prefix of a valid file: either the whole document is there (only trailing whitespace
  /// is missing) and the state comes back equal, or the file is moved aside, byte for byte, and
  /// the state is empty.
  @Test func aFileTruncatedAtEveryOffset() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      let log = LogRecorder()
      let store = StateStore(path: path, logger: log.logger)
      try store.save(richState)
      let full = try #require(contents(path))
      let lastByte = try #require(full.lastIndex { ![0x20, 0x0A, 0x09, 0x0D].contains($0) })
      #expect(full.count > 500)
      var corruptLoads = 0
      for cut in 0...full.count {
        for name in names(in: directory, startingWith: "state.json.corrupt-") {
          unlink(directory + "/" + name)
        }
        let prefix = Array(full[..<cut])
        put(prefix, at: path)
        let loaded = store.load()
        let aside = names(in: directory, startingWith: "state.json.corrupt-")
        if cut > lastByte {
          #expect(loaded == richState, "cut at \(cut) of \(full.count)")
          #expect(aside == [] && exists(path), "cut at \(cut) of \(full.count)")
        } else {
          corruptLoads += 1
          #expect(loaded == PersistentState(), "cut at \(cut) of \(full.count)")
          #expect(!exists(path), "cut at \(cut) of \(full.count): the file was not moved aside")
          #expect(aside.count == 1, "cut at \(cut) of \(full.count)")
          if let name = aside.first {
            #expect(contents(directory + "/" + name) == prefix, "cut at \(cut): the moved file differs")
          }
          let warning = log.warnings.last ?? ""
          #expect(warning.contains(path) && warning.contains("moved it to \(path).corrupt-"), "\(warning)")
        }
      }
      #expect(corruptLoads == lastByte + 1)
      #expect(log.warnings.count == corruptLoads)
    }
  }

  struct Garbage: Sendable, CustomTestStringConvertible {
    var name: String
    var bytes: [UInt8]
    /// In the warning.
    var problem: String
    var testDescription: String { name }

    init(_ name: String, _ text: String, _ problem: String) {
      self.init(name, Array(text.utf8), problem)
    }

    init(_ name: String, _ bytes: [UInt8], _ problem: String) {
      self.name = name
      self.bytes = bytes
      self.problem = problem
    }
  }

  static let garbage: [Garbage] = {
    var random: UInt64 = 0x9E37_79B9_7F4A_7C15
    let binary = (0..<2048).map { _ -> UInt8 in
      random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      return UInt8(truncatingIfNeeded: random >> 56)
    }
    let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
    return [
      Garbage("an empty file", "", "it is empty"),
      Garbage("only whitespace", " \n\t\r\n", "it is empty"),
      Garbage("binary", binary, "it is not UTF-8 text"),
      Garbage("NUL bytes", [0, 0, 0, 0], "bad JSON at line 1, column 1"),
      Garbage(
        "invalid UTF-8 in a key", Array(file().utf8.prefix(1)) + [0x22, 0xC3, 0x28, 0x22] + Array(":1}".utf8),
        "not UTF-8"),
      Garbage("NaN as text", file(values: #"{"master.gain":NaN}"#), "bad JSON"),
      Garbage("Infinity as text", file(values: #"{"master.gain":-Infinity}"#), "bad JSON"),
      Garbage("a number that overflows", file(values: #"{"master.gain":1e999}"#), "bad JSON"),
      Garbage("version 2", file().replacingOccurrences(of: #""version":1"#, with: #""version":2"#), "version is 2"),
      Garbage(
        "the version as a string", file().replacingOccurrences(of: #""version":1"#, with: #""version":"1""#),
        #"version is the string "1""#),
      Garbage("no version", file().replacingOccurrences(of: #""version":1,"#, with: ""), #"no "version""#),
      Garbage(
        "no savedAt", file().replacingOccurrences(of: #""savedAt":"2026-01-21T07:30:00Z","#, with: ""), #"no "savedAt""#
      ),
      Garbage("a bad savedAt", file().replacingOccurrences(of: "07:30:00Z", with: "07:30"), "not an RFC 3339"),
      Garbage("no values", #"{"version":1,"savedAt":"2026-01-21T07:30:00Z","schedules":[]}"#, #"no "values""#),
      Garbage("values as an array", file(values: "[1]"), #""values" is an array, not an object"#),
      Garbage("schedules as an object", file(schedules: "{}"), #""schedules" is an object, not an array"#),
      Garbage("schedules as null", file(schedules: "null"), #""schedules" is null"#),
      Garbage("ducks as an object", file(extra: #","ducks":{}"#), #""ducks" is an object, not an array"#),
      Garbage("ducks as a string", file(extra: #","ducks":"talk""#), #""ducks" is the string "talk", not an array"#),
      Garbage("a top-level array", "[" + file() + "]", "an array, not an object"),
      Garbage("a top-level string", #""state""#, "not an object"),
      Garbage("trailing garbage", file() + " x", "bad JSON at line 1"),
      Garbage("two documents", file() + "\n" + file(), "bad JSON at line 2, column 1"),
      Garbage("a duplicate key", file(values: #"{"master.gain":1,"master.gain":0}"#), "bad JSON"),
      Garbage("a trailing comma", file(values: #"{"master.gain":1,}"#), "bad JSON"),
      Garbage("deep nesting", file(extra: #","x":"# + deep), "nested deeper"),
      Garbage("a truncated line", "{\n  \"version\": 1,\n  \"savedAt\": \"2026", "bad JSON at line 3"),
      Garbage(
        "a truncated file", "{\n  \"version\": 1,\n  \"values\": {",
        "bad JSON at line 3, column 14: expected a key in double quotes, got end of file"),
      // The parser's words for the end of a line become the file's; a key that says them stays.
      Garbage(
        "a duplicate key naming the end of a line", file(values: #"{"end of line":1,"end of line":0}"#),
        #"duplicate key "end of line""#),
    ]
  }()

  @Test(arguments: garbage) func aCorruptFileIsMovedAside(_ garbage: Garbage) throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      put(garbage.bytes, at: path)
      let log = LogRecorder()
      let store = StateStore(path: path, logger: log.logger)
      #expect(store.load() == PersistentState())
      #expect(!exists(path))
      let aside = names(in: directory, startingWith: "state.json.corrupt-")
      #expect(aside.count == 1)
      if let name = aside.first {
        #expect(contents(directory + "/" + name) == garbage.bytes)
        // <path>.corrupt-YYYYMMDDTHHMMSSZ
        #expect(name.wholeMatch(of: /state\.json\.corrupt-\d{8}T\d{6}Z/) != nil, "\(name)")
      }
      #expect(log.warnings.count == 1)
      let warning = log.warnings.first ?? ""
      #expect(warning.contains("state file \(path) is unusable"), "\(warning)")
      #expect(warning.contains(garbage.problem), "\(warning)")
      // The next save starts afresh and is read back.
      try store.save(richState)
      #expect(store.load() == richState)
    }
  }

  @Test func twoCorruptFilesInOneSecondKeepBoth() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      let store = StateStore(path: path, logger: LogRecorder().logger)
      for text in ["first", "second", "third"] {
        put(text, at: path)
        #expect(store.load() == PersistentState())
      }
      let aside = names(in: directory, startingWith: "state.json.corrupt-")
      #expect(aside.count == 3)
      let kept = Set(aside.compactMap { contents(directory + "/" + $0) }.map { String(decoding: $0, as: UTF8.self) })
      #expect(kept == ["first", "second", "third"])
    }
  }

  @Test func aDirectoryInPlaceOfTheFileIsMovedAside() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      mkdir(path, 0o700)
      let log = LogRecorder()
      #expect(StateStore(path: path, logger: log.logger).load() == PersistentState())
      #expect(log.warnings.first?.contains("it is not a regular file") == true, "\(log.warnings)")
      #expect(!exists(path))
      #expect(names(in: directory, startingWith: "state.json.corrupt-").count == 1)
    }
  }

  /// One bad entry costs that entry, with a warning quoting it; the rest of the file is kept.
  @Test func badEntriesAreDroppedAlone() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      let values = #"{"master.gain":0.5,"":1,"mixers.a.volume":"loud","streams.x.gain":null,"mixers.b.volume":0.25}"#
      let schedules = """
        [
        {"id":3,"due":200,"request":{"cmd":"fade","to":0}},
        {"id":1,"due":100,"from":0.5,"request":{"cmd":"fade-in"}},
        {"id":3,"due":50,"request":{"cmd":"stop"}},
        {"id":-1,"due":1,"request":{"cmd":"stop"}},
        {"id":1.5,"due":1,"request":{"cmd":"stop"}},
        {"id":"4","due":1,"request":{"cmd":"stop"}},
        {"id":1e20,"due":1,"request":{"cmd":"stop"}},
        {"due":1,"request":{"cmd":"stop"}},
        {"id":5,"due":"soon","request":{"cmd":"stop"}},
        {"id":6,"request":{"cmd":"stop"}},
        {"id":7,"due":1,"from":"x","request":{"cmd":"stop"}},
        {"id":8,"due":1,"request":{"to":0}},
        {"id":9,"due":1,"request":{"cmd":7}},
        {"id":10,"due":1,"request":[]},
        {"id":11,"due":1,"request":{"cmd":"fade","at":5}},
        {"id":13,"due":1},
        42, "x", null,
        {"id":12,"due":1,"request":{"cmd":"set","key":"master.gain","to":1},"comment":"unknown members are ignored"}
        ]
        """
      put(file(values: values, schedules: schedules, extra: #","futureMember":true"#), at: path)
      let log = LogRecorder()
      let state = StateStore(path: path, logger: log.logger).load()
      #expect(state.values == ["master.gain": 0.5, "mixers.b.volume": 0.25])
      #expect(
        state.schedules == [
          PersistedSchedule(id: 12, request: ["cmd": "set", "key": "master.gain", "to": 1], due: 1),
          PersistedSchedule(id: 1, request: ["cmd": "fade-in"], due: 100, from: 0.5),
          PersistedSchedule(id: 3, request: ["cmd": "fade", "to": 0], due: 200),
        ])
      #expect(exists(path))
      #expect(names(in: directory, startingWith: "state.json.corrupt-") == [])
      let warnings = log.warnings
      #expect(warnings.count == 3 + 17, "\(warnings)")
      #expect(warnings.allSatisfy { $0.hasPrefix("state file \(path): dropped ") })
      #expect(warnings.contains { $0.contains("the value of mixers.a.volume: expected a finite number") })
      #expect(
        warnings.contains {
          $0.contains(
            #"schedules[2]: the id 3 is used by an earlier schedule: {"id":3,"due":50,"request":{"cmd":"stop"}}"#)
        })
      #expect(warnings.contains { $0.contains(#"schedules[14]: the request has "at""#) })
      #expect(warnings.contains { $0.contains(#"schedules[16]: expected an object, got 42"#) })
    }
  }

  /// Duck rules added at run time come back field for field; a rule `duck-add` would refuse, one
  /// that is not an object and one that repeats a name are dropped alone, quoted in a warning.
  @Test func duckRulesRoundTripAndBadOnesAreDroppedAlone() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      let log = LogRecorder()
      let store = StateStore(path: path, logger: log.logger)
      var state = richState
      state.ducks = [
        DuckRule(
          name: "talk", targets: ["streams.bed.gain", "master.gain"], trigger: "voice*",
          sidechain: .init(threshold: -30, detector: .peak, window: 0.08, hysteresis: 3), depth: 9, attack: 0.25,
          attackCurve: .easeIn, hold: 0, release: 2, releaseCurve: .fade(.qsin)),
        DuckRule(name: "manual", targets: ["master.gain"]),
      ]
      try store.save(state)
      #expect(store.load() == state)
      let text = String(decoding: contents(path) ?? [], as: UTF8.self)
      #expect(text.contains("\n  \"ducks\": [\n    {"), "one rule a line")
      #expect(log.warnings == [])
      // Without rules the member is not written: the file reads as it did before rules were kept.
      try store.save(richState)
      #expect(!String(decoding: contents(path) ?? [], as: UTF8.self).contains("ducks"))

      let ducks = """
        [
        {"name":"a","targets":["master.gain"],"depth":-6},
        {"name":"b","targets":["master.gain"],"deph":3},
        "c",
        {"name":"d","targets":["streams.bed.gain"],"depth":6},
        {"name":"d","targets":["master.gain"]},
        {"targets":["master.gain"]}
        ]
        """
      put(file(values: #"{"master.gain":0.5}"#, extra: #","ducks":"# + ducks), at: path)
      let loaded = StateStore(path: path, logger: log.logger).load()
      #expect(loaded.values == ["master.gain": 0.5])
      #expect(loaded.ducks == [DuckRule(name: "d", targets: ["streams.bed.gain"], depth: 6)])
      let warnings = log.warnings
      #expect(warnings.count == 5, "\(warnings)")
      #expect(warnings.allSatisfy { $0.hasPrefix("state file \(path): dropped ducks[") }, "\(warnings)")
      #expect(warnings.contains { $0.contains("ducks[0]: depth") && $0.contains(#""depth":-6"#) }, "\(warnings)")
      #expect(warnings.contains { $0.contains("ducks[1]:") && $0.contains("deph") }, "\(warnings)")
      #expect(warnings.contains { $0.contains(#"ducks[2]: expected an object, got the string "c""#) }, "\(warnings)")
      #expect(warnings.contains { $0.contains("ducks[4]: the name d is used by an earlier rule") }, "\(warnings)")
      #expect(warnings.contains { $0.contains("ducks[5]:") && $0.contains("name") }, "\(warnings)")
      #expect(names(in: directory, startingWith: "state.json.corrupt-") == [])
    }
  }

  struct Invalid: Sendable, CustomTestStringConvertible {
    var testDescription: String
    var state: PersistentState
  }

  static let invalidStates: [Invalid] = {
    let good = PersistedSchedule(id: 1, request: ["cmd": "stop"], due: 10)
    func with(_ change: (inout PersistedSchedule) -> Void) -> PersistentState {
      var schedule = good
      change(&schedule)
      return PersistentState(schedules: [schedule])
    }
    return [
      Invalid(testDescription: "a NaN value", state: PersistentState(values: ["master.gain": .nan])),
      Invalid(testDescription: "an infinite value", state: PersistentState(values: ["master.gain": -.infinity])),
      Invalid(testDescription: "an empty key path", state: PersistentState(values: ["": 1])),
      Invalid(testDescription: "an infinite due", state: with { $0.due = .infinity }),
      Invalid(testDescription: "a NaN from", state: with { $0.from = .nan }),
      Invalid(testDescription: "an id above 2^53", state: with { $0.id = 9_007_199_254_740_994 }),
      Invalid(testDescription: "no cmd", state: with { $0.request = ["to": 1] }),
      Invalid(testDescription: "an empty cmd", state: with { $0.request = ["cmd": ""] }),
      Invalid(testDescription: "an at", state: with { $0.request["at"] = 5 }),
      Invalid(testDescription: "an id in the request", state: with { $0.request["id"] = 5 }),
      Invalid(
        testDescription: "a NaN deep in the request", state: with { $0.request["keyframes"] = [1, .number(.nan)] }),
      Invalid(testDescription: "two schedules with one id", state: PersistentState(schedules: [good, good])),
      Invalid(
        testDescription: "two duck rules with one name",
        state: PersistentState(ducks: [DuckRule(name: "a", targets: ["master.gain"]), DuckRule(name: "a", targets: [])])
      ),
    ]
  }()

  @Test(arguments: invalidStates) func anInvalidStateIsRefused(_ invalid: Invalid) throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      let store = StateStore(path: path, logger: LogRecorder().logger)
      try store.save(richState)
      let error = #expect(throws: StateStoreError.self) { try store.save(invalid.state) }
      #expect(error?.code == 0)
      #expect(error?.description.hasPrefix("cannot save state to \(path): ") == true, "\(String(describing: error))")
      #expect(store.load() == richState)
      #expect(names(in: directory, startingWith: "") == ["state.json"])
    }
  }

  /// A save onto a full file system fails with ENOSPC and leaves the previous file, and no
  /// temporary file.
  @Test(.enabled(if: canMountTmpfs, "mounting a tmpfs needs root with CAP_SYS_ADMIN, not permitted here"))
  func aFullFileSystemKeepsThePreviousState() throws {
    try withScratch { directory in
      let mountPoint = directory + "/fs"
      try withTmpfs(at: mountPoint, size: "64k") {
        let path = mountPoint + "/rampd/state.json"
        let log = LogRecorder()
        let store = StateStore(path: path, logger: log.logger)
        try store.save(richState)

        // Fill what is left.
        let filler = mountPoint + "/filler"
        let descriptor = open(filler, O_WRONLY | O_CREAT, 0o600)
        try #require(descriptor >= 0)
        let block = [UInt8](repeating: 0x55, count: 4096)
        var code: Int32 = 0
        while code == 0 {
          if block.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) < 0 { code = errno }
        }
        close(descriptor)
        #expect(code == ENOSPC)

        let large = largeState(1000)
        let error = #expect(throws: StateStoreError.self) { try store.save(large) }
        #expect(error?.code == ENOSPC)
        #expect(error?.path == path)
        let description = error?.description ?? ""
        #expect(description.hasPrefix("cannot save state to \(path): "), "\(description)")
        #expect(description.hasSuffix(": No space left on device"), "\(description)")
        #expect(names(in: mountPoint + "/rampd", startingWith: "") == ["state.json"])
        #expect(store.load() == richState)
        #expect(log.warnings == [])

        // With room again, the large state saves.
        unlink(filler)
        try store.save(large)
        #expect(store.load() == large)
      }
      #expect(!exists(mountPoint + "/rampd"), "the tmpfs is still mounted")
    }
  }

  /// A read-only directory: root ignores permissions, so as root it is a read-only mount.
  @Test(.enabled(if: geteuid() != 0 || canMountTmpfs, "as root this needs a tmpfs mount, not permitted here"))
  func aReadOnlyDirectoryKeepsThePreviousState() throws {
    try withScratch { directory in
      let root = geteuid() == 0
      let stateDirectory = directory + "/fs"
      let check = {
        let path = stateDirectory + "/state.json"
        let log = LogRecorder()
        let store = StateStore(path: path, logger: log.logger)
        try store.save(richState)
        put("garbage", at: stateDirectory + "/bad.json")
        if root {
          try #require(mount("tmpfs", stateDirectory, "tmpfs", UInt(MS_REMOUNT | MS_RDONLY), "size=64k") == 0)
        } else {
          chmod(stateDirectory, 0o555)
        }
        defer { if !root { chmod(stateDirectory, 0o755) } }

        let error = #expect(throws: StateStoreError.self) { try store.save(largeState(10)) }
        #expect(error?.code == (root ? EROFS : EACCES))
        #expect(
          error?.description.hasPrefix("cannot save state to \(path): creating \(stateDirectory)/.state.json.tmp-")
            == true)
        #expect(store.load() == richState)
        #expect(names(in: stateDirectory, startingWith: "") == ["bad.json", "state.json"])

        // A corrupt file that cannot be moved aside: an empty state and a warning, no crash.
        let bad = StateStore(path: stateDirectory + "/bad.json", logger: log.logger)
        #expect(bad.load() == PersistentState())
        #expect(log.warnings.count == 1)
        #expect(log.warnings.first?.contains("could not be moved aside") == true, "\(log.warnings)")
        #expect(exists(stateDirectory + "/bad.json"))
      }
      if root {
        try withTmpfs(at: stateDirectory, size: "64k", check)
      } else {
        mkdir(stateDirectory, 0o755)
        try check()
      }
    }
  }

  @Test func staleTemporaryFilesAreRemoved() throws {
    try withScratch { directory in
      let path = directory + "/state.json"
      // A pid above any pid_max runs no process.
      let dead: pid_t = 99_999_999
      #expect(kill(dead, 0) != 0 && errno == ESRCH)
      let files = [
        ".state.json.tmp-\(dead)", ".state.json.tmp-\(getpid())", ".state.json.tmp-\(getppid())",
        ".state.json.tmp-\(dead)-2", ".state.json.tmp-x", ".other.json.tmp-\(dead)",
      ]
      for name in files { put("partial", at: directory + "/" + name) }
      let store = StateStore(path: path, logger: LogRecorder().logger)
      #expect(store.load() == PersistentState())
      #expect(
        names(in: directory, startingWith: "")
          == [".other.json.tmp-\(dead)", ".state.json.tmp-\(getppid())", ".state.json.tmp-x"])
    }
  }
}

// MARK: - The saver

extension StateStoreTests {
  private static func state(_ gain: Double) -> PersistentState {
    var state = richState
    state.values["master.gain"] = gain
    return state
  }

  @Test func theSaverCoalescesManyUpdatesIntoFewWrites() throws {
    try withScratch { directory in
      let store = StateStore(path: directory + "/state.json", logger: LogRecorder().logger)
      let saver = StateSaver(store: store, interval: 0.5, logger: LogRecorder().logger)
      defer { saver.close() }
      for index in 1...2000 { saver.update(Self.state(Double(index))) }
      // The first change is written promptly; the rest wait for the interval.
      #expect(eventually(timeout: 5) { saver.statistics.writes >= 1 })
      #expect(saver.flush())
      #expect(store.load() == Self.state(2000))
      let statistics = saver.statistics
      #expect(statistics.writes >= 1 && statistics.writes <= 3, "\(statistics)")
      #expect(statistics.failures == 0 && statistics.lastError == nil)
      // Nothing pending: flush writes nothing.
      #expect(saver.flush())
      #expect(saver.statistics.writes == statistics.writes)
    }
  }

  @Test func theSaverWritesAtMostOncePerInterval() throws {
    try withScratch { directory in
      let store = StateStore(path: directory + "/state.json", logger: LogRecorder().logger)
      let saver = StateSaver(store: store, interval: 1.0, logger: LogRecorder().logger)
      defer { saver.close() }
      saver.update(Self.state(0.1))
      #expect(eventually(timeout: 2) { saver.statistics.writes == 1 })
      let firstWrite = Date()
      #expect(store.load() == Self.state(0.1))
      saver.update(Self.state(0.2))
      saver.update(Self.state(0.3))
      usleep(200_000)
      #expect(saver.statistics.writes == 1)
      #expect(store.load() == Self.state(0.1))
      #expect(eventually(timeout: 5) { saver.statistics.writes == 2 })
      #expect(Date().timeIntervalSince(firstWrite) >= 0.8)
      #expect(store.load() == Self.state(0.3))
      usleep(100_000)
      #expect(saver.statistics.writes == 2)
    }
  }

  @Test func flushWritesTheLatestStateAtOnce() throws {
    try withScratch { directory in
      let store = StateStore(path: directory + "/state.json", logger: LogRecorder().logger)
      let saver = StateSaver(store: store, interval: 60, logger: LogRecorder().logger)
      defer { saver.close() }
      saver.update(Self.state(0.1))
      #expect(eventually(timeout: 2) { saver.statistics.writes == 1 })
      saver.update(Self.state(0.2))
      saver.update(Self.state(0.3))
      #expect(store.load() == Self.state(0.1))
      #expect(saver.flush())
      #expect(store.load() == Self.state(0.3))
      #expect(saver.statistics.writes == 2)
      // close writes what is pending too, and later updates wait for a flush.
      saver.update(Self.state(0.4))
      #expect(saver.close())
      #expect(store.load() == Self.state(0.4))
      saver.update(Self.state(0.5))
      usleep(50_000)
      #expect(store.load() == Self.state(0.4))
      #expect(saver.flush())
      #expect(store.load() == Self.state(0.5))
    }
  }

  @Test func updatesFromManyThreads() throws {
    try withScratch { directory in
      let store = StateStore(path: directory + "/state.json", logger: LogRecorder().logger)
      let saver = StateSaver(store: store, interval: 0.001, logger: LogRecorder().logger)
      DispatchQueue.concurrentPerform(iterations: 4) { thread in
        for index in 0..<300 {
          saver.update(Self.state(Double(thread * 1000 + index)))
          if index % 50 == 0 { saver.flush() }
        }
      }
      saver.update(Self.state(-1))
      #expect(saver.close())
      #expect(store.load() == Self.state(-1))
      #expect(saver.statistics.failures == 0)
    }
  }

  /// A failing write is logged once however often it fails, retried on the next change and by
  /// flush, and its recovery is logged once.
  @Test func failuresAreLoggedOncePerDistinctError() throws {
    try withScratch { directory in
      // The state directory's parent is a file: ENOTDIR, as root too.
      let blocker = directory + "/blocker"
      put("not a directory", at: blocker)
      let path = blocker + "/state.json"
      let log = LogRecorder()
      let store = StateStore(path: path, logger: log.logger)
      let saver = StateSaver(store: store, interval: 0.001, logger: log.logger)
      defer { saver.close() }
      for index in 1...5 {
        saver.update(Self.state(Double(index)))
        #expect(!saver.flush())
      }
      saver.update(Self.state(6))
      #expect(eventually(timeout: 5) { saver.statistics.failures >= 6 })
      usleep(50_000)
      // No retry loop: nothing changed, nothing written.
      let failures = saver.statistics.failures
      usleep(200_000)
      #expect(saver.statistics.failures == failures)
      #expect(saver.statistics.lastError?.code == ENOTDIR)
      #expect(saver.statistics.lastError?.path == path)
      #expect(log.warnings.count == 1, "\(log.warnings)")
      #expect(log.warnings.first?.hasPrefix("cannot save state to \(path): ") == true, "\(log.warnings)")

      // A different error is logged too.
      unlink(blocker)
      mkdir(blocker, 0o700)
      mkdir(path, 0o700)
      saver.update(Self.state(7))
      #expect(!saver.flush())
      #expect(log.warnings.count == 2, "\(log.warnings)")

      // Once the cause is gone, flush retries the state that failed; recovery is logged once.
      rmdir(path)
      #expect(saver.flush())
      #expect(store.load() == Self.state(7))
      #expect(saver.statistics.lastError == nil)
      #expect(log.messages(.notice) == ["saved state to \(path) again"])
      #expect(log.warnings.count == 2)
    }
  }

  @Test func theSaverRetriesOnTheNextChange() throws {
    try withScratch { directory in
      let blocker = directory + "/blocker"
      put("not a directory", at: blocker)
      let path = blocker + "/state.json"
      let log = LogRecorder()
      let store = StateStore(path: path, logger: log.logger)
      let saver = StateSaver(store: store, interval: 0.01, logger: log.logger)
      defer { saver.close() }
      saver.update(Self.state(1))
      #expect(eventually(timeout: 5) { saver.statistics.failures == 1 })
      unlink(blocker)
      saver.update(Self.state(2))
      #expect(eventually(timeout: 5) { saver.statistics.writes == 1 })
      #expect(store.load() == Self.state(2))
      #expect(saver.statistics.failures == 1)
    }
  }
}

/// The levels journal: the model values a change writes, unsynced, before it is acknowledged, read
/// back over the state file when they are the newer.
@Suite struct LevelsJournalTests {
  private static let schedule = PersistedSchedule(id: 7, request: ["cmd": "ping"], due: 1_000)

  @Test func aNewerJournalRefinesTheStateFile() throws {
    try withScratch { directory in
      let log = LogRecorder()
      let store = StateStore(path: directory + "/state.json", logger: log.logger)
      try store.save(PersistentState(values: ["master.gain": 0.5], schedules: [Self.schedule], sequence: 3))
      #expect(store.journal(values: ["master.gain": 0.25, "mixers.m.volume": 0.75], sequence: 4))
      let loaded = StateStore(path: directory + "/state.json", logger: log.logger).load()
      #expect(loaded.values == ["master.gain": 0.25, "mixers.m.volume": 0.75] && loaded.sequence == 4)
      #expect(loaded.schedules == [Self.schedule], "schedules come from the state file")
    }
  }

  @Test func anOlderJournalIsIgnored() throws {
    try withScratch { directory in
      let log = LogRecorder()
      let store = StateStore(path: directory + "/state.json", logger: log.logger)
      #expect(store.journal(values: ["master.gain": 0.25], sequence: 2))
      try store.save(PersistentState(values: ["master.gain": 0.5], sequence: 3))
      let loaded = store.load()
      #expect(loaded.values == ["master.gain": 0.5] && loaded.sequence == 3)
    }
  }

  @Test func eachEntryReplacesTheLastWhateverItsLength() throws {
    try withScratch { directory in
      let log = LogRecorder()
      let store = StateStore(path: directory + "/state.json", logger: log.logger)
      try store.save(PersistentState(values: ["master.gain": 1], sequence: 1))
      #expect(
        store.journal(values: ["master.gain": 0.123456789, "mixers.a.volume": 0.5, "mixers.b.volume": 1], sequence: 2))
      #expect(store.journal(values: ["master.gain": 0], sequence: 3))
      #expect(
        String(decoding: contents(store.journalPath) ?? [], as: UTF8.self)
          == #"{"sequence":3,"values":{"master.gain":0}}"# + "\n")
      #expect(store.load().values == ["master.gain": 0])
    }
  }

  /// A power cut can leave anything there: the state file's levels are used, with a warning.
  @Test func aTornJournalIsIgnored() throws {
    try withScratch { directory in
      let log = LogRecorder()
      let store = StateStore(path: directory + "/state.json", logger: log.logger)
      try store.save(PersistentState(values: ["master.gain": 0.5], sequence: 3))
      for torn in [
        #"{"sequence":9,"values":{"master.gain":0."#, "\0\0\0\0",
        #"{"sequence":9,"values":{"master.gain":"x"}}"# + "\n",
      ] {
        put(torn, at: store.journalPath)
        #expect(store.load().values == ["master.gain": 0.5], "\(torn)")
      }
      #expect(log.warnings.count == 3 && log.warnings.allSatisfy { $0.contains("journal") }, "\(log.warnings)")
    }
  }

  /// Changes are journaled when replies are about to be sent (`Persistence.writeJournal`), not one
  /// by one: the changes acknowledged in one turn of the event loop cost one write, of the latest.
  @Test func changesAcknowledgedTogetherAreJournaledInOneWrite() throws {
    try withScratch { directory in
      let log = LogRecorder()
      let store = StateStore(path: directory + "/state.json", logger: log.logger)
      let saver = StateSaver(store: store, interval: 3600, logger: log.logger)
      defer { saver.close() }
      let persistence = Persistence(saver: saver, restored: PersistentState(values: ["master.gain": 1], sequence: 1))
      persistence.acknowledgeEarly("master.gain", value: 0.25)
      persistence.acknowledgeEarly("master.gain", value: 0.5)
      #expect(!exists(store.journalPath), "nothing is written before the replies go")
      persistence.writeJournal()
      #expect(
        String(decoding: contents(store.journalPath) ?? [], as: UTF8.self)
          == #"{"sequence":3,"values":{"master.gain":0.5}}"# + "\n")
      // Nothing changed since: no write (the file, emptied in place, stays empty).
      truncate(store.journalPath, 0)
      persistence.writeJournal()
      #expect(contents(store.journalPath) == [])
      persistence.acknowledgeEarly("master.gain", value: 0.75)
      persistence.writeJournal()
      #expect(
        String(decoding: contents(store.journalPath) ?? [], as: UTF8.self)
          == #"{"sequence":4,"values":{"master.gain":0.75}}"# + "\n")
    }
  }

  /// Deleting the state file (or a damaged one) starts afresh: the journal alone is not trusted.
  @Test func aJournalWithoutAUsableStateFileIsDropped() throws {
    try withScratch { directory in
      let log = LogRecorder()
      let store = StateStore(path: directory + "/state.json", logger: log.logger)
      #expect(store.journal(values: ["master.gain": 0.25], sequence: 4))
      #expect(store.load() == PersistentState())
      #expect(!exists(store.journalPath))
      #expect(store.journal(values: ["master.gain": 0.25], sequence: 4))
      #expect(exists(store.journalPath))
      put("{ not json", at: store.path)
      #expect(store.load() == PersistentState())
      #expect(!exists(store.journalPath))
    }
  }
}
