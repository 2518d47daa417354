import Dispatch
import RampAudio
import RampProtocol
import Synchronization

/// `rampctl loudness`: files measured in parallel (as many at a time as there are cores), each
/// looked up in the cache first, and what to print of them.
public enum LoudnessSurvey {
  /// What became of one file.
  public struct Entry: Sendable {
    public var path: String
    public var outcome: Result<Loudness, AudioError>
    /// Whether the measurement came from the cache.
    public var cached = false
  }

  /// How far the measurement has come, shared between the measuring threads and the one that
  /// draws it.
  public final class Progress: Sendable {
    private struct File {
      var done: Int64 = 0
      /// Frames the file declares; 0 until it is open (or when it is cached or failed).
      var total: Int64 = 0
      var finished = false
    }
    private let files: Mutex<[File]>

    public init(files: Int) { self.files = Mutex(Array(repeating: File(), count: files)) }

    func opened(_ index: Int, frames: Int64) { files.withLock { $0[index].total = max(frames, 0) } }
    func read(_ index: Int, frames: Int64) { files.withLock { $0[index].done = frames } }
    func finished(_ index: Int) { files.withLock { $0[index].finished = true } }

    /// `loudness: 2/5 files, 43%`: files finished, and the share of the frames of the open
    /// files read (a file of unknown length counts as unfinished).
    public var text: String {
      files.withLock { files in
        let finished = files.filter(\.finished).count
        var text = "loudness: \(finished)/\(files.count) files"
        let open = files.filter { !$0.finished && $0.total > 0 && $0.total < Int64(1) << 40 }
        let total = open.reduce(Int64(0)) { $0 + $1.total }
        if total > 0 {
          let done = open.reduce(Int64(0)) { $0 + min($1.done, $1.total) }
          text += ", \(done * 100 / total)% of " + (open.count == 1 ? "the file" : "\(open.count) files") + " read"
        }
        return text
      }
    }
  }

  /// Measures `paths` (in parallel) and returns them in their order, taking what `cache` holds
  /// and adding to it what was measured.
  public static func measure(_ paths: [String], cache: inout LoudnessCache?, progress: Progress? = nil) -> [Entry] {
    let known = cache?.entries ?? [:]
    let results = Mutex([Entry?](repeating: nil, count: paths.count))
    let measured = Mutex([FileIdentity: Loudness]())
    DispatchQueue.concurrentPerform(iterations: paths.count) { index in
      let path = paths[index]
      defer { progress?.finished(index) }
      if let identity = FileIdentity(path: path), let loudness = known[identity] {
        results.withLock { $0[index] = Entry(path: path, outcome: .success(loudness), cached: true) }
        return
      }
      let outcome: Result<Loudness, AudioError>
      do throws(AudioError) {
        let reader = try SoundFileReader(path: path)
        let before = reader.identity
        progress?.opened(index, frames: reader.frames)
        let loudness = try Loudness.measure(reader) { frames in
          progress?.read(index, frames: frames)
          return true
        }
        // A file that changed while it was read is not cached under either identity.
        if let before, before == reader.identity { measured.withLock { $0[before] = loudness } }
        outcome = .success(loudness)
      } catch {
        outcome = .failure(error)
      }
      results.withLock { $0[index] = Entry(path: path, outcome: outcome) }
    }
    for (identity, loudness) in measured.withLock({ $0 }) { cache?[identity] = loudness }
    return results.withLock { $0.map { $0! } }
  }

  /// The state file's directory's sibling for measurements: `<rampd's state directory>/loudness.cache`.
  public static func cachePath(environment: [String: String], isRoot: Bool) -> String {
    StateLocation.directory(name: "rampd", environment: environment, isRoot: isRoot) + "/loudness.cache"
  }

  // MARK: Output

  /// The table: one row per file measured (failures are told on standard error), a note after
  /// a file that has no integrated loudness.
  ///
  ///     INTEGRATED     RANGE  TRUE PEAK  DURATION  FILE
  ///     -23.0 LUFS    5.2 LU  -1.0 dBTP  3m20s     speech.wav
  ///      -inf LUFS    0.0 LU   -inf dBTP 10s       silence.wav (silent: below the -70 LUFS gate)
  public static func table(_ entries: [Entry]) -> String {
    let rows: [[String]] = entries.compactMap { entry in
      guard case .success(let loudness) = entry.outcome else { return nil }
      var file = entry.path
      if let unmeasured = loudness.unmeasured { file += " (" + note(unmeasured) + ")" }
      return [
        number(loudness.integrated) + " LUFS", number(loudness.range) + " LU", number(loudness.truePeak) + " dBTP",
        HumanUnits.format(duration: (loudness.duration * 1000).rounded() / 1000), file,
      ]
    }
    guard !rows.isEmpty else { return "" }
    let header = ["INTEGRATED", "RANGE", "TRUE PEAK", "DURATION", "FILE"]
    let all = [header] + rows
    let widths = (0..<header.count).map { column in all.map { $0[column].count }.max() ?? 0 }
    return all.map { row in
      row.indices.map { column in
        let cell = row[column]
        let pad = String(repeating: " ", count: widths[column] - cell.count)
        // Numbers right-aligned, so their units line up; the duration and the file left.
        if column == row.count - 1 { return cell }
        return column < 3 ? pad + cell : cell + pad
      }.joined(separator: "  ")
    }.joined(separator: "\n") + "\n"
  }

  /// One JSON object per file, in the order given (see README's "Loudness").
  public static func json(_ entry: Entry) -> JSONValue {
    var object: JSONObject = ["path": .string(entry.path)]
    switch entry.outcome {
    case .success(let loudness):
      object["integrated"] = loudness.integrated.isFinite ? .number(loudness.integrated) : .null
      object["range"] = .number(loudness.range)
      object["truePeak"] = loudness.truePeak.isFinite ? .number(loudness.truePeak) : .null
      object["duration"] = .number(loudness.duration)
      object["sampleRate"] = .integer(loudness.sampleRate)
      object["channels"] = .integer(loudness.channels)
      if let unmeasured = loudness.unmeasured { object["unmeasured"] = .string(unmeasured.rawValue) }
      object["cached"] = .bool(entry.cached)
    case .failure(let error):
      object["error"] = ["code": .string(error.code.rawValue), "message": .string(error.message)]
    }
    return .object(object)
  }

  static func note(_ unmeasured: Loudness.Unmeasured) -> String {
    switch unmeasured {
    case .tooShort: return "too short: under the 0.4 s a measurement needs"
    case .silent: return "silent: below the -70 LUFS gate"
    }
  }

  /// One decimal, as meters show it; `-inf` for −infinity.
  static func number(_ value: Double) -> String {
    guard value.isFinite else { return value < 0 ? "-inf" : "inf" }
    return HumanUnits.trimmedFixed(value, decimals: 1)
  }
}
