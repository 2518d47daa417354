import Logging
import RampAudio
import RampEngine
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// What rampd remembers across restarts.
public struct PersistentState: Equatable, Sendable {
  /// Model values by key path (`master.gain`, `mixers.<name>.volume`).
  public var values: [String: Double]
  /// Acknowledged scheduled commands, soonest first.
  public var schedules: [PersistedSchedule]
  /// Duck rules added at run time (`duck-add`), in the order added (`Persistence.restoreDucks`).
  public var ducks: [DuckRule]
  /// Counts the changes of `values`, so that the newer of the state file and the levels journal
  /// (`StateStore.journal`) can be told apart. 0: never counted (not written to the file).
  public var sequence: UInt64

  public init(
    values: [String: Double] = [:], schedules: [PersistedSchedule] = [], ducks: [DuckRule] = [], sequence: UInt64 = 0
  ) {
    self.values = values
    self.schedules = schedules
    self.ducks = ducks
    self.sequence = sequence
  }

  public var isEmpty: Bool { values.isEmpty && schedules.isEmpty && ducks.isEmpty }
}

/// An acknowledged scheduled command, as it is kept across restarts.
public struct PersistedSchedule: Equatable, Sendable {
  /// The daemon's schedule id.
  public var id: UInt64
  /// The request object as received, without `"id"` and `"at"`; it has a string `"cmd"`.
  public var request: JSONObject
  /// The wall-clock time it takes effect, seconds since the Unix epoch.
  public var due: Double
  /// For a ramp already under way: the value it started from.
  public var from: Double?
  /// Asked by a client that may play only files under the media roots; so is the restored one.
  public var confined: Bool
  /// A repeating schedule's last refusal when its time came: when (Unix seconds), and why.
  public var lastFailure: Failure?

  public struct Failure: Equatable, Sendable {
    public var at: Double
    public var error: ProtocolError
  }

  public init(
    id: UInt64, request: JSONObject, due: Double, from: Double? = nil, confined: Bool = false,
    lastFailure: Failure? = nil
  ) {
    self.id = id
    self.request = request
    self.due = due
    self.from = from
    self.confined = confined
    self.lastFailure = lastFailure
  }
}

/// Why a state could not be saved. The previous state file is left as it was, except when the
/// directory could not be synced after the rename (the new file is then in place, but may not
/// survive a power cut).
public struct StateStoreError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The state file.
  public var path: String
  /// The `errno` of the call that failed, or 0 when the state itself cannot be written (a NaN
  /// value, a request without `"cmd"`…).
  public var code: Int32
  /// One line naming the state file, the step and the reason:
  /// `cannot save state to /var/lib/rampd/state.json: writing /var/lib/rampd/state.json.tmp-42:
  /// No space left on device`.
  public var description: String

  init(path: String, code: Int32, step: String) {
    self.path = path
    self.code = code
    self.description = "cannot save state to \(path): \(step)" + (code == 0 ? "" : ": " + errorText(code))
  }
}

/// The durable state file of rampd: model values and acknowledged scheduled commands.
///
/// `save` is atomic (a temporary file in the same directory, synced, renamed over the state
/// file, the directory synced), so after a crash or a power cut the file holds either the old
/// state or the new one, never a mixture. `load` never fails: a file it cannot use is moved
/// aside with a warning and rampd starts empty, because a daemon that refuses to start over a
/// damaged state file is worse than one that forgets its volume.
///
/// Saves and loads through one store are serialised (they share the temporary file's name).
public final class StateStore: Sendable {
  /// The state file.
  public let path: String
  /// The levels journal: `<path>.levels` (see `journal`).
  public var journalPath: String { path + ".levels" }
  private let logger: Logger
  private let lock = Mutex<Void>(())
  /// The journal's descriptor (-1 until opened) and the last error logged; apart from `lock`, so a
  /// journal write never waits for a save's fsync.
  private let journalFile = Mutex<(descriptor: Int32, logged: String?, length: Int)>((-1, nil, 0))

  public init(path: String, logger: Logger) {
    self.path = path
    self.logger = logger
  }

  deinit {
    journalFile.withLock { file in
      if file.descriptor >= 0 { close(file.descriptor) }
    }
  }

  /// The directory holding the state file.
  var directory: String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    return slash == path.startIndex ? "/" : String(path[..<slash])
  }

  // MARK: Load

  /// The saved state. A missing file gives an empty state. An unreadable, corrupt or truncated
  /// file, one of another version or with members of the wrong type is moved aside (renamed to
  /// `<path>.corrupt-<UTC time>`, such as `state.json.corrupt-20260121T073000Z`), a warning names
  /// the file and the problem, and the state is empty. A single bad value or scheduled command in
  /// an otherwise good file is dropped with a warning that quotes it (see `StateFile`).
  ///
  /// Also removes temporary files (`<path>.tmp-<pid>`) that a process which no longer runs left
  /// behind when it crashed in the middle of a save.
  public func load() -> PersistentState {
    lock.withLock { _ in loadLocked() }
  }

  private func loadLocked() -> PersistentState {
    removeStaleTemporaries()
    let bytes: [UInt8]
    switch readFile() {
    case .missing:
      logger.info("no state file at \(path) yet; starting with an empty state")
      // A journal refines a state file; alone (the file deleted to start afresh), it is stale.
      dropJournal()
      return PersistentState()
    case .unusable(let problem):
      dropJournal()
      return setAside(problem)
    case .read(let contents):
      bytes = contents
    }
    let decoded: StateFile.Decoded
    do {
      decoded = try StateFile.decode(bytes)
    } catch {
      dropJournal()
      return setAside(error.message)
    }
    for problem in decoded.dropped {
      logger.warning("state file \(path): dropped \(problem)")
    }
    logger.info(
      "restored \(decoded.state.values.count) values and \(decoded.state.schedules.count) scheduled commands from \(path)"
    )
    return withJournal(decoded.state)
  }

  private func dropJournal() {
    journalFile.withLock { file in
      unlink(journalPath)
      if file.descriptor >= 0 { close(file.descriptor) }
      file.descriptor = -1
    }
  }

  /// The levels from the journal, when it holds later ones than the state file.
  private func withJournal(_ state: PersistentState) -> PersistentState {
    guard let journal = readJournal(), journal.sequence > state.sequence else { return state }
    var merged = state
    merged.values = journal.values
    merged.sequence = journal.sequence
    logger.info("restored \(journal.values.count) values from \(journalPath), newer than the state file's")
    return merged
  }

  private func readJournal() -> (values: [String: Double], sequence: UInt64)? {
    let descriptor = open(journalPath, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return nil }
    defer { close(descriptor) }
    var bytes = [UInt8](repeating: 0, count: StateFile.maxJournalBytes)
    let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
    // One line; anything after it was left by a longer, older entry.
    guard count > 0, let end = bytes[..<count].firstIndex(of: 0x0A),
      let entry = StateFile.decodeJournal(Array(bytes[..<end]))
    else {
      logger.warning("levels journal \(journalPath) is unreadable; using the state file's levels")
      return nil
    }
    return entry
  }

  /// Writes the model values to the levels journal, `<path>.levels`, in place and without
  /// syncing: a few microseconds, so it is done before a change is acknowledged, and the change
  /// then survives the process being killed (the kernel has it). The state file, synced and
  /// renamed, is written later by the saver; `load` takes the journal's values when its
  /// `sequence` is the higher. A power cut may lose the journal's latest write (or leave it
  /// unreadable, and then it is ignored): the state file's levels are then restored, as they
  /// were at most one save interval earlier. False when the write failed (logged once per error).
  @discardableResult
  public func journal(values: [String: Double], sequence: UInt64) -> Bool {
    let bytes = StateFile.encodeJournal(values: values, sequence: sequence)
    let (written, message) = journalFile.withLock { file -> (Bool, (Logger.Level, String)?) in
      var problem: String?
      if file.descriptor < 0 {
        file.descriptor = open(journalPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        // Whatever an earlier daemon left there is cut after the first entry.
        file.length = Int.max
        if file.descriptor < 0 { problem = "cannot open \(journalPath): \(errorText(errno))" }
      }
      if problem == nil {
        let count = bytes.withUnsafeBytes { pwrite(file.descriptor, $0.baseAddress, $0.count, 0) }
        if count != bytes.count {
          problem = "cannot write \(journalPath): " + (count < 0 ? errorText(errno) : "short write")
        }
      }
      if let problem {
        defer { file.logged = problem }
        return (
          false, file.logged == problem ? nil : (.warning, "\(problem); levels are saved with the state file only")
        )
      }
      // A shorter entry than the last leaves the old tail after its newline: trimmed if possible.
      if bytes.count < file.length { _ = ftruncate(file.descriptor, off_t(bytes.count)) }
      file.length = bytes.count
      defer { file.logged = nil }
      return (true, file.logged == nil ? nil : (.notice, "wrote the levels journal \(journalPath) again"))
    }
    if let (level, text) = message { logger.log(level: level, "\(text)") }
    return written
  }

  private enum ReadOutcome {
    case missing
    case unusable(String)
    case read([UInt8])
  }

  private func readFile() -> ReadOutcome {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else {
      let code = errno
      return code == ENOENT ? .missing : .unusable("cannot open it: \(errorText(code))")
    }
    defer { close(descriptor) }
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { return .unusable("cannot stat it: \(errorText(errno))") }
    guard status.st_mode & S_IFMT == S_IFREG else { return .unusable("it is not a regular file") }
    guard status.st_size <= StateFile.maxBytes else {
      return .unusable("it is \(status.st_size) bytes long, more than the \(StateFile.maxBytes) a state file may be")
    }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(Int(status.st_size))
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
      let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
      if count < 0 {
        if errno == EINTR { continue }
        return .unusable("cannot read it: \(errorText(errno))")
      }
      if count == 0 { return .read(bytes) }
      bytes += chunk[..<count]
      guard bytes.count <= StateFile.maxBytes else {
        return .unusable("it is more than the \(StateFile.maxBytes) bytes a state file may be")
      }
    }
  }

  /// Renames the state file to `<path>.corrupt-<UTC time>` and returns an empty state.
  private func setAside(_ problem: String) -> PersistentState {
    var stamp = String(RFC3339.format(wallClock().rounded(.down)).filter { $0 != "-" && $0 != ":" })
    var target = "\(path).corrupt-\(stamp)"
    // Two bad files within a second: the second is `…Z-2`, and so on.
    var attempt = 1
    while access(target, F_OK) == 0 && attempt < 1000 {
      attempt += 1
      stamp = String(stamp.prefix { $0 != "-" }) + "-\(attempt)"
      target = "\(path).corrupt-\(stamp)"
    }
    if rename(path, target) == 0 {
      _ = ReplacementFile.syncDirectory(directory)
      logger.warning(
        "state file \(path) is unusable (\(problem)); moved it to \(target) and starting with an empty state")
    } else {
      // The next save replaces it.
      let reason = errorText(errno)
      logger.warning(
        "state file \(path) is unusable (\(problem)) and could not be moved aside (\(reason)); starting with an empty state"
      )
    }
    return PersistentState()
  }

  /// Removes the temporary files of saves (`.<name>.tmp-<pid>`) whose process no longer runs (or
  /// is this one: saves are serialised with loads, so none of this process's is in use).
  private func removeStaleTemporaries() {
    for file in ReplacementFile.removeStale(beside: path, includingOwn: true) {
      logger.info("removed \(file), left by an interrupted save")
    }
  }

  // MARK: Save

  /// Writes `state` atomically (``ReplacementFile``): `.<name>.tmp-<pid>` in the same directory,
  /// synced, renamed over `path`, then the directory synced. Creates the directory (mode 0700) when it is missing. On
  /// failure (a full disk, a read-only file system, permissions) the previous file is intact,
  /// the temporary file is removed, and the error names the path and the reason.
  ///
  /// A state that `load` would not read back (a NaN value, an empty key path, an id above 2^53,
  /// a request without a string `"cmd"`, two schedules with one id) is refused with code 0.
  public func save(_ state: PersistentState) throws(StateStoreError) {
    if let problem = StateFile.problem(in: state) {
      throw StateStoreError(path: path, code: 0, step: problem)
    }
    let bytes = Array(StateFile.encode(state, savedAt: wallClock().rounded(.down)).utf8)
    try lock.withLock { _ throws(StateStoreError) in try writeAtomically(bytes) }
  }

  private func writeAtomically(_ bytes: [UInt8]) throws(StateStoreError) {
    try makeDirectory(directory)
    do throws(ReplacementFile.Failure) {
      let file = try ReplacementFile(replacing: path, mode: 0o600)
      let code = writeAll(bytes, to: file.descriptor)
      guard code == 0 else {
        file.discard()
        throw ReplacementFile.Failure(path: path, step: "writing \(file.temporaryPath)", code: code)
      }
      try file.commit()
    } catch {
      throw StateStoreError(path: path, code: error.code, step: error.step)
    }
  }

  /// Creates `directory` and its missing parents, mode 0700 (less the umask).
  private func makeDirectory(_ directory: String) throws(StateStoreError) {
    var status = stat()
    if stat(directory, &status) == 0 {
      guard status.st_mode & S_IFMT == S_IFDIR else {
        throw StateStoreError(path: path, code: ENOTDIR, step: "using the directory \(directory)")
      }
      return
    }
    guard errno == ENOENT else { throw failure("using the directory \(directory)") }
    if let slash = directory.lastIndex(of: "/"), slash != directory.startIndex {
      try makeDirectory(String(directory[..<slash]))
    }
    guard mkdir(directory, 0o700) == 0 || errno == EEXIST else { throw failure("creating the directory \(directory)") }
  }

  private func failure(_ step: String) -> StateStoreError { StateStoreError(path: path, code: errno, step: step) }
}

/// Writes all of `bytes`: 0, or the errno (EIO if the file takes no more).
private func writeAll(_ bytes: [UInt8], to descriptor: Int32) -> Int32 {
  var written = 0
  while written < bytes.count {
    let count = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, $0.count - written) }
    if count < 0 && errno == EINTR { continue }
    guard count > 0 else { return count == 0 ? EIO : errno }
    written += count
  }
  return 0
}

private func errorText(_ code: Int32) -> String { String(cString: strerror(code)) }

/// Seconds since the Unix epoch.
private func wallClock() -> Double {
  var now = timespec()
  clock_gettime(CLOCK_REALTIME, &now)
  return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

// MARK: - The file format

/// The state file: JSON, read and written with RampProtocol's own parser and serializer.
///
/// ```json
/// {
///   "version": 1,
///   "savedAt": "2026-01-21T07:30:00Z",
///   "values": {
///     "master.gain": 0.5,
///     "mixers.master.volume": 0.8
///   },
///   "ducks": [
///     {"name":"talk","targets":["streams.bed.gain"],"trigger":"voice*","depth":12,"attack":0.2,…}
///   ],
///   "schedules": [
///     {"id":12,"due":1768980600.5,"request":{"cmd":"fade","key":"master.gain","to":0,"duration":2}},
///     {"id":13,"due":1768984200,"from":0.25,"request":{"cmd":"fade-in","duration":1800}}
///   ]
/// }
/// ```
///
/// One value and one schedule a line, values sorted by key path, so the file reads well and
/// diffs well. `version` is required and must be 1; `savedAt` (RFC 3339, informational) is
/// required; members this version does not know are ignored, so a later version 1 writer may
/// add optional ones. A schedule is `id` (a whole number from 0 to 2^53, unique), `due` (Unix
/// seconds), `request` (an object with a string `cmd`, without `id` or `at`) and an optional
/// `from`. `ducks` (optional, written only when there are some) holds the duck rules added at run
/// time, each with `duck-add`'s fields (`Command.duckRule`), names unique.
///
/// What makes the whole file unusable (it is then moved aside): not UTF-8, not JSON (NaN,
/// Infinity, a number that overflows, a truncated file are all not JSON), not an object, a
/// missing or other `version`, a missing or bad `savedAt`, `values` not an object, `schedules`
/// or `ducks` not an array. What drops just one entry, with a warning that quotes it: a value
/// that is not a finite number or has an empty key path; a schedule that is not an object or has
/// a bad `id`, `due`, `from` or `request`, or repeats an earlier id; a duck rule that `duck-add`
/// would refuse or that repeats an earlier name. Decision: an entry is independent of its
/// neighbours, so one bad scheduled command (a hand edit, a future field's wrong type) should
/// not cost the volume and every other alarm; the warning keeps the dropped entry's text, so
/// nothing is lost silently. A damaged file never reaches this point: truncation or garbage
/// breaks the JSON, and the file goes aside whole.
enum StateFile {
  static let version = 1
  /// A file longer than this is not read (1,000,000 scheduled commands, the most
  /// `limits.pending-scheduled` allows, take about 150 MB).
  static let maxBytes = 256 << 20
  /// 2^53: ids are JSON numbers, exact up to here.
  static let maxID = 9_007_199_254_740_992.0
  /// A request may nest as deep as the protocol parser allows; in the file it sits three levels
  /// down (the file, `schedules`, the schedule).
  static let maxRequestDepth = JSON.defaultMaxDepth

  struct Problem: Error {
    var message: String
    init(_ message: String) { self.message = message }
  }

  struct Decoded {
    var state: PersistentState
    /// One line per dropped entry: where, what, and the entry's JSON.
    var dropped: [String]
  }

  // MARK: Encoding

  static func encode(_ state: PersistentState, savedAt: Double) -> String {
    var text = "{\n  \"version\": \(version),\n"
    text += "  \"savedAt\": \(JSONValue.string(RFC3339.format(savedAt)).serialized()),\n"
    if state.sequence > 0 { text += "  \"sequence\": \(state.sequence),\n" }
    let values = state.values.sorted { $0.key < $1.key }.map {
      "    \(JSONValue.string($0.key).serialized()): \(JSONValue.number($0.value).serialized())"
    }
    text += values.isEmpty ? "  \"values\": {},\n" : "  \"values\": {\n" + values.joined(separator: ",\n") + "\n  },\n"
    if !state.ducks.isEmpty {
      let ducks = state.ducks.map { "    " + JSONValue.object(Command.duckRule($0)).serialized() }
      text += "  \"ducks\": [\n" + ducks.joined(separator: ",\n") + "\n  ],\n"
    }
    let schedules = state.schedules.map { "    " + json($0).serialized() }
    text +=
      schedules.isEmpty
      ? "  \"schedules\": []\n" : "  \"schedules\": [\n" + schedules.joined(separator: ",\n") + "\n  ]\n"
    return text + "}\n"
  }

  private static func json(_ schedule: PersistedSchedule) -> JSONValue {
    var object: JSONObject = ["id": .integer(schedule.id), "due": .number(schedule.due)]
    if let from = schedule.from { object["from"] = .number(from) }
    if schedule.confined { object["confined"] = .bool(true) }
    if let failure = schedule.lastFailure {
      object["lastFailure"] = ["at": .number(failure.at), "error": failure.error.json]
    }
    object["request"] = .object(schedule.request)
    return .object(object)
  }

  /// Why `state` cannot be written so that `decode` reads it back, or nil.
  static func problem(in state: PersistentState) -> String? {
    for (key, value) in state.values {
      if key.isEmpty { return "a value has an empty key path" }
      if !value.isFinite { return "the value of \(key) is \(value), not a finite number" }
    }
    var ids = Set<UInt64>()
    for schedule in state.schedules {
      if Double(schedule.id) > maxID { return "schedule \(schedule.id): the id is above 2^53" }
      if !ids.insert(schedule.id).inserted { return "two schedules have the id \(schedule.id)" }
      if let problem = problem(schedule) { return "schedule \(schedule.id): \(problem)" }
    }
    var names = Set<String>()
    for rule in state.ducks where !names.insert(rule.name).inserted { return "two duck rules are named \(rule.name)" }
    return nil
  }

  private static func problem(_ schedule: PersistedSchedule) -> String? {
    if !schedule.due.isFinite { return "due is \(schedule.due), not a finite number" }
    if let from = schedule.from, !from.isFinite { return "from is \(from), not a finite number" }
    if let failure = schedule.lastFailure, !failure.at.isFinite {
      return "lastFailure.at is \(failure.at), not a finite number"
    }
    return problem(request: schedule.request)
  }

  private static func problem(request: JSONObject) -> String? {
    guard let command = request["cmd"] else { return "the request has no \"cmd\"" }
    guard case .string(let name) = command, !name.isEmpty else { return "the request's \"cmd\" is not a command name" }
    for key in ["id", "at"] where request.contains(key) { return "the request has \"\(key)\", which is not kept" }
    if let problem = problem(in: .object(request), depth: 1) { return "the request \(problem)" }
    return nil
  }

  /// Numbers the serializer cannot write (it would write null) and nesting the parser refuses.
  private static func problem(in value: JSONValue, depth: Int) -> String? {
    guard depth <= maxRequestDepth else { return "is nested deeper than \(maxRequestDepth) levels" }
    switch value {
    case .number(let number): return number.isFinite ? nil : "holds \(number), which JSON cannot write"
    case .null, .bool, .string: return nil
    case .array(let elements):
      return elements.lazy.compactMap { problem(in: $0, depth: depth + 1) }.first
    case .object(let object):
      return object.lazy.compactMap { problem(in: $0.value, depth: depth + 1) }.first
    }
  }

  // MARK: The levels journal

  /// The most a journal entry may take (a few hundred bytes in practice).
  static let maxJournalBytes = 1 << 20

  /// One line: `{"sequence":12,"values":{"master.gain":0.5}}` and a newline.
  static func encodeJournal(values: [String: Double], sequence: UInt64) -> [UInt8] {
    // Written for every turn of the event loop that acknowledges a change: built as bytes.
    var bytes: [UInt8] = []
    bytes.reserveCapacity(64 + values.count * 48)
    bytes.append(contentsOf: journalHead)
    JSONValue.integer(sequence).write(into: &bytes)
    bytes.append(contentsOf: journalValues)
    var first = true
    func member(_ key: String, _ value: Double) {
      if !first { bytes.append(UInt8(ascii: ",")) }
      first = false
      JSONValue.string(key).write(into: &bytes)
      bytes.append(UInt8(ascii: ":"))
      JSONValue.number(value).write(into: &bytes)
    }
    // Keys in order, so equal values give equal entries; one value (master.gain alone, the usual
    // case) needs no sorted copy of the keys.
    if values.count == 1, let only = values.first {
      member(only.key, only.value)
    } else {
      for key in values.keys.sorted() { member(key, values[key]!) }
    }
    bytes.append(contentsOf: journalTail)
    return bytes
  }

  private static let journalHead = Array(#"{"sequence":"#.utf8)
  private static let journalValues = Array(#","values":{"#.utf8)
  private static let journalTail = Array("}}\n".utf8)

  /// The entry, or nil when it is not one (a torn or foreign file).
  static func decodeJournal(_ bytes: [UInt8]) -> (values: [String: Double], sequence: UInt64)? {
    guard let text = String(validating: bytes, as: UTF8.self), let entry = try? JSON.parse(text),
      let sequence = entry["sequence"].flatMap(wholeNumber), sequence >= 1, case .object(let members)? = entry["values"]
    else { return nil }
    var values: [String: Double] = [:]
    for (key, value) in members {
      guard !key.isEmpty, case .number(let number) = value, number.isFinite else { return nil }
      values[key] = number
    }
    return (values, sequence)
  }

  /// A JSON number that is a whole number from 0 to 2^53 (exact as a double), or nil.
  static func wholeNumber(_ value: JSONValue) -> UInt64? {
    guard case .number(let number) = value, number >= 0, number <= maxID, number == number.rounded() else { return nil }
    return UInt64(number)
  }

  // MARK: Decoding

  static func decode(_ bytes: [UInt8]) throws(Problem) -> Decoded {
    guard bytes.contains(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) else { throw Problem("it is empty") }
    guard let text = String(validating: bytes, as: UTF8.self) else { throw Problem("it is not UTF-8 text") }
    let document: JSONValue
    do {
      document = try JSON.parse(text, maxDepth: maxRequestDepth + 3, end: "end of file")
    } catch {
      throw Problem(jsonMessage(error, text: bytes))
    }
    guard case .object(let top) = document else { throw Problem("it holds \(describe(document)), not an object") }
    guard let version = top["version"] else { throw Problem("it has no \"version\"") }
    guard case .number(let number) = version, number == Double(Self.version) else {
      throw Problem("its version is \(describe(version)); this rampd reads version \(Self.version)")
    }
    guard let savedAt = top["savedAt"] else { throw Problem("it has no \"savedAt\"") }
    guard let stamp = savedAt.stringValue, RFC3339.parse(stamp) != nil else {
      throw Problem("\"savedAt\" is \(describe(savedAt)), not an RFC 3339 date and time")
    }
    guard let valuesMember = top["values"] else { throw Problem("it has no \"values\"") }
    guard case .object(let values) = valuesMember else {
      throw Problem("\"values\" is \(describe(valuesMember)), not an object")
    }
    guard let schedulesMember = top["schedules"] else { throw Problem("it has no \"schedules\"") }
    guard case .array(let entries) = schedulesMember else {
      throw Problem("\"schedules\" is \(describe(schedulesMember)), not an array")
    }
    var duckEntries: [JSONValue] = []
    if let ducksMember = top["ducks"] {
      guard case .array(let entries) = ducksMember else {
        throw Problem("\"ducks\" is \(describe(ducksMember)), not an array")
      }
      duckEntries = entries
    }

    var decoded = Decoded(state: PersistentState(), dropped: [])
    if let member = top["sequence"] {
      if let sequence = wholeNumber(member) {
        decoded.state.sequence = sequence
      } else {
        decoded.dropped.append("\"sequence\": expected a whole number, got \(describe(member))")
      }
    }
    for (key, value) in values {
      if key.isEmpty {
        decoded.dropped.append("a value with an empty key path: \(quote(value))")
      } else if case .number(let number) = value, number.isFinite {
        decoded.state.values[key] = number
      } else {
        decoded.dropped.append("the value of \(key): expected a finite number, got \(describe(value))")
      }
    }
    var ids = Set<UInt64>()
    for (index, entry) in entries.enumerated() {
      do throws(Problem) {
        let schedule = try decodeSchedule(entry)
        guard ids.insert(schedule.id).inserted else {
          throw Problem("the id \(schedule.id) is used by an earlier schedule")
        }
        decoded.state.schedules.append(schedule)
      } catch {
        decoded.dropped.append("schedules[\(index)]: \(error.message): \(quote(entry))")
      }
    }
    var names = Set<String>()
    for (index, entry) in duckEntries.enumerated() {
      do throws(Problem) {
        guard case .object(let object) = entry else { throw Problem("expected an object, got \(describe(entry))") }
        let rule: DuckRule
        do throws(ProtocolError) { rule = try DuckRule.parse(object) } catch { throw Problem(error.message) }
        guard names.insert(rule.name).inserted else {
          throw Problem("the name \(rule.name) is used by an earlier rule")
        }
        decoded.state.ducks.append(rule)
      } catch {
        decoded.dropped.append("ducks[\(index)]: \(error.message): \(quote(entry))")
      }
    }
    // Soonest first; ties in id order, which is the order the daemon acknowledged them.
    decoded.state.schedules.sort { ($0.due, $0.id) < ($1.due, $1.id) }
    return decoded
  }

  private static func decodeSchedule(_ entry: JSONValue) throws(Problem) -> PersistedSchedule {
    guard case .object(let object) = entry else { throw Problem("expected an object, got \(describe(entry))") }
    guard let idMember = object["id"] else { throw Problem("no \"id\"") }
    guard let id = wholeNumber(idMember) else {
      throw Problem("\"id\" is \(describe(idMember)), not a whole number from 0 to 2^53")
    }
    guard let dueMember = object["due"] else { throw Problem("no \"due\"") }
    guard case .number(let due) = dueMember, due.isFinite else {
      throw Problem("\"due\" is \(describe(dueMember)), not a number of seconds")
    }
    var from: Double?
    if let fromMember = object["from"] {
      guard case .number(let value) = fromMember, value.isFinite else {
        throw Problem("\"from\" is \(describe(fromMember)), not a number")
      }
      from = value
    }
    var confined = false
    if let confinedMember = object["confined"] {
      guard case .bool(let value) = confinedMember else {
        throw Problem("\"confined\" is \(describe(confinedMember)), not true or false")
      }
      confined = value
    }
    var lastFailure: PersistedSchedule.Failure?
    if let failureMember = object["lastFailure"] {
      guard case .number(let at)? = failureMember["at"], at.isFinite,
        let error = try? ProtocolError(parsing: failureMember["error"])
      else {
        throw Problem(
          "\"lastFailure\" is \(describe(failureMember)), not an object with a time \"at\" and an \"error\"")
      }
      lastFailure = PersistedSchedule.Failure(at: at, error: error)
    }
    guard let requestMember = object["request"] else { throw Problem("no \"request\"") }
    guard case .object(let request) = requestMember else {
      throw Problem("\"request\" is \(describe(requestMember)), not an object")
    }
    if let problem = problem(request: request) { throw Problem(problem) }
    return PersistedSchedule(
      id: id, request: request, due: due, from: from, confined: confined, lastFailure: lastFailure)
  }

  /// What a JSON value is, for messages: `the string "loud"`, `an array`, `null`.
  private static func describe(_ value: JSONValue) -> String {
    switch value {
    case .null: return "null"
    case .bool(let flag): return flag ? "true" : "false"
    case .number(let number): return JSONValue.number(number).serialized()
    case .string: return "the string \(quote(value))"
    case .array: return "an array"
    case .object: return "an object"
    }
  }

  /// A value's JSON, cut to 400 characters.
  private static func quote(_ value: JSONValue) -> String {
    let text = value.serialized()
    return text.count <= 400 ? text : text.prefix(400) + "…"
  }

  /// The parser reports a byte offset; a state file has many lines, so the offset becomes a
  /// line and a column.
  private static func jsonMessage(_ error: ProtocolError, text bytes: [UInt8]) -> String {
    guard let offset = error.offset.map({ min($0, bytes.count) }), let problem = error.problem else {
      return error.message
    }
    let line = bytes[..<offset].count { $0 == 0x0A } + 1
    let lineStart = bytes[..<offset].lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
    return "bad JSON at line \(line), column \(offset - lineStart + 1): \(problem)"
  }
}
