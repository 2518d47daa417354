import RampProtocol

/// rampd's replies and events as people read them. Every function takes the `result` object as
/// sent and tolerates members that are missing (an older daemon) or new (a newer one).
public enum ReplyText {
  /// `0.501187 (-6.02 dB)` for gains; the bare number for other properties.
  public static func level(_ value: Double, key: String) -> String {
    let number = HumanUnits.format(gain: value)
    return isGain(key) ? "\(number) (\(HumanUnits.format(decibels: value)))" : number
  }

  /// Key paths whose values are amplitudes: `master.gain`, `streams.<id>.gain`, transports.
  public static func isGain(_ key: String) -> Bool { key.hasSuffix(".gain") || key.hasSuffix(".transport") }

  // MARK: Properties

  /// `get`: `master.gain = 0.5 (-6.02 dB), audible 0.73 (-2.73 dB), range 0...1`.
  public static func property(_ result: JSONValue) -> String {
    let key = result["key"]?.stringValue ?? "?"
    if result["model"] == nil, let value = result["value"]?.numberValue {
      return "\(key) = \(measured(value, key: key))"
    }
    let model = result["model"]?.numberValue ?? .nan
    let audible = result["presentation"]?.numberValue ?? .nan
    var text = "\(key) = \(level(model, key: key))"
    if audible != model { text += ", audible \(level(audible, key: key))" }
    if let range = result["range"]?.arrayValue, range.count == 2, let low = range[0].numberValue,
      let high = range[1].numberValue
    {
      text += ", range \(HumanUnits.format(gain: low))...\(HumanUnits.format(gain: high))"
    }
    return text
  }

  /// A level or the limiter's reduction as `get` reads it: `-20.0 dBFS peak`, `-23.0 LUFS`,
  /// `1.5 dB reduction`.
  static func measured(_ value: Double, key: String) -> String {
    if key.hasSuffix(".level.peak") { return ProgressLine.level(value, "dBFS peak") }
    if key.hasSuffix(".level.momentary") { return ProgressLine.level(value, "LUFS") }
    return HumanUnits.trimmedFixed(value, decimals: 1) + " dB reduction"
  }

  /// `list`: one row per key path, then its animations indented beneath it.
  public static func list(_ result: JSONValue) -> String {
    let properties = result["properties"]?.arrayValue ?? []
    guard !properties.isEmpty else { return "no key paths" }
    var rows: [[String]] = [["KEY PATH", "MODEL", "AUDIBLE"]]
    var notes: [Int: [String]] = [:]
    for property in properties {
      let key = property["key"]?.stringValue ?? "?"
      let model = property["model"]?.numberValue ?? .nan
      let audible = property["presentation"]?.numberValue ?? .nan
      rows.append([key, level(model, key: key), level(audible, key: key)])
      notes[rows.count - 1] = (property["animations"]?.arrayValue ?? []).map(animation)
    }
    return table(rows, notes: notes)
  }

  /// `#3 fade (basic) 42%` or `#3 loop (keyframe) endless`.
  static func animation(_ status: JSONValue) -> String {
    let id = status["id"].map(number) ?? "?"
    let name = status["name"]?.stringValue ?? "?"
    var text = "#\(id) \(name)"
    if let kind = status["kind"]?.stringValue { text += " (\(kind)\(status["additive"] == true ? ", additive" : ""))" }
    if let progress = status["progress"]?.numberValue {
      text += " " + HumanUnits.format(gain: (progress * 100).rounded(), decimals: 0) + "%"
    } else if status["end"] == .null {
      text += " endless"
    }
    return text
  }

  // MARK: Status

  /// `status`: the daemon, its output, and a table of streams.
  public static func status(_ result: JSONValue) -> String {
    var lines: [String] = []
    var head = "rampd \(result["version"]?.stringValue ?? "?")"
    if let uptime = result["uptime"]?.numberValue { head += ", up \(HumanUnits.format(duration: uptime.rounded()))" }
    if let clients = result["clients"]?.numberValue, clients > 0 {
      head += ", \(number(.number(clients))) client(s) connected"
    }
    lines.append(head)
    if let master = result["master"] { lines.append("master gain " + levels(master, key: "master.gain")) }
    if let output = result["output"] {
      var text = "output \(output["device"]?.stringValue ?? "?")"
      if let kind = output["kind"]?.stringValue { text += " (\(kind))" }
      if let rate = output["rate"] { text += ", \(number(rate)) Hz" }
      if let channels = output["channels"] { text += ", \(number(channels)) ch" }
      if let format = output["format"]?.stringValue { text += ", \(format)" }
      if let period = output["periodFrames"], let buffer = output["bufferFrames"] {
        text += ", period \(number(period)) / buffer \(number(buffer)) frames"
      }
      if let pacing = output["pacing"]?.stringValue { text += ", paced by \(pacing)" }
      if let state = output["state"]?.stringValue {
        // `state` says whether the device works; `idle` whether anything is sent to it now.
        text += state == "playing" && output["idle"] == true ? ", idle" : ", \(state)"
      }
      if let underruns = output["underruns"] { text += ", \(number(underruns)) underrun(s)" }
      lines.append(text)
      if let realtime = output["realtime"] {
        lines.append(
          realtime["granted"] == true
            ? "render thread: real-time priority \(realtime["priority"].map(number) ?? "?")"
            : "render thread: normal priority: \(realtime["message"]?.stringValue ?? "?")")
      }
      if let lock = output["memoryLock"] {
        lines.append(
          lock["granted"] == true ? "memory: locked" : "memory: not locked: \(lock["message"]?.stringValue ?? "?")")
      }
      if let limiter = output["limiter"] {
        if let ceiling = limiter["ceiling"]?.numberValue {
          let reduction = limiter["reduction"]?.numberValue ?? 0
          let now = reduction > 0 ? "lowering the output \(JSONValue.format(reduction)) dB" : "at rest"
          lines.append(
            "limiter: \(JSONValue.format(ceiling)) dBTP, \(now), engaged \(limiter["engagements"].map(number) ?? "?") time(s)"
          )
        } else {
          lines.append("limiter: off")
        }
      }
      if output["embedded"] == true, let file = output["file"]?.stringValue {
        let requested = output["requestedDevice"]?.stringValue.map { " (\($0) could not be opened)" } ?? ""
        lines.append("embedded output: playing into \(file)\(requested)")
      }
      if let waiting = output["waiting"], let device = waiting["device"]?.stringValue {
        var line = "waiting for \(device): \(waiting["attempts"].map(number) ?? "?") attempt(s)"
        if let next = waiting["nextAttempt"] { line += ", next in \(number(next)) s" }
        if let error = waiting["error"]?.stringValue, !error.isEmpty { line += "; last: \(error)" }
        lines.append(line)
      }
    }
    let streams = result["streams"]?.arrayValue ?? []
    if streams.isEmpty {
      lines.append("no streams")
    } else {
      // An older rampd sends no gains: no column for them then.
      let gains = streams.contains { $0["gain"] != nil }
      let normalised = streams.contains { $0["loudness"] != nil }
      var rows = [
        ["STREAM", "STATE"] + (gains ? ["GAIN"] : []) + (normalised ? ["LOUDNESS"] : []) + ["POSITION", "LOOP", "PATH"]
      ]
      for stream in streams {
        let state =
          stream["stopping"] == true ? "stopping" : stream["paused"] == true ? "paused" : "playing"
        let seconds = { (value: Double) in HumanUnits.format(duration: (value * 10).rounded() / 10) }
        var position = stream["position"]?.numberValue.map(seconds)
        if let duration = stream["duration"]?.numberValue { position = (position ?? "?") + " / " + seconds(duration) }
        let id = stream["stream"]?.stringValue ?? "?"
        let gain = stream["gain"].map { levels($0, key: "streams.\(id).gain") } ?? "?"
        rows.append(
          [id, state] + (gains ? [gain] : []) + (normalised ? [stream["loudness"].map(loudness) ?? "-"] : []) + [
            position ?? "?", stream["loop"] == true ? "yes" : "no", stream["path"]?.stringValue ?? "?",
          ])
      }
      lines.append(table(rows))
      for stream in streams where stream["queue"] != nil {
        lines.append(queue(stream["stream"]?.stringValue ?? "?", stream["queue"]))
      }
    }
    let ducks = result["ducks"]?.arrayValue ?? []
    if !ducks.isEmpty { lines.append(Self.ducks(ducks)) }
    let scheduled = result["scheduled"]?.arrayValue ?? []
    if !scheduled.isEmpty {
      let dues = scheduled.compactMap { $0["due"]?.stringValue.flatMap(RFC3339.parse) }
      var text = "\(scheduled.count) scheduled"
      if let next = dues.min() { text += ", next at \(HumanUnits.format(localTime: next))" }
      lines.append(text + ":")
      for entry in scheduled { lines.append("    " + schedule(entry)) }
    }
    return lines.joined(separator: "\n")
  }

  /// A stream's loudness trim as `play` and `status` give it: `-24.1 LUFS +6.1 dB`, `(limited)`
  /// when the true-peak ceiling lowered the trim; `own level (silent)` for a file without an
  /// integrated loudness.
  public static func loudness(_ value: JSONValue) -> String {
    if let unmeasured = value["unmeasured"]?.stringValue {
      return "own level (\(unmeasured.replacing("-", with: " ")))"
    }
    let integrated = value["integrated"]?.numberValue.map { HumanUnits.trimmed($0, decimals: 1) } ?? "?"
    let trim = value["trim"]?.numberValue ?? 0
    let sign = trim > 0 ? "+" : ""
    return "\(integrated) LUFS \(sign)\(HumanUnits.trimmed(trim, decimals: 1)) dB"
      + (value["limited"] == true ? " (limited)" : "")
  }

  /// A queue as `queue-list`, `queue-add` and `status` give it: a heading, then one line per
  /// item, the playing one marked `>`, those still fading out `<`.
  public static func queue(_ stream: String, _ queue: JSONValue?) -> String {
    let items = queue?["items"]?.arrayValue ?? []
    var rows = [["", "#", "duration", "file"]]
    for item in items {
      rows.append([
        item["playing"] == true ? ">" : item["fading"] == true ? "<" : "", number(item["index"] ?? .null),
        HumanUnits.format(duration: item["duration"]?.numberValue ?? 0), item["path"]?.stringValue ?? "?",
      ])
    }
    let loop = queue?["loop"] == true ? " (loops)" : ""
    return "queue of \(stream)\(loop):\n" + table(rows)
  }

  /// Duck rules (from `duck-list` or `status`), a table: name, targets, trigger, depth, phase and
  /// the level their targets are lowered to now.
  public static func ducks(_ ducks: [JSONValue]) -> String {
    var rows = [["rule", "targets", "trigger", "depth", "phase", "level"]]
    for duck in ducks {
      var trigger = duck["trigger"]?.stringValue ?? "-"
      if let threshold = duck["threshold"]?.numberValue {
        trigger += " > \(JSONValue.format(threshold)) dB \(duck["detector"]?.stringValue ?? "")"
      }
      if duck["manual"] == true { trigger += " (duck)" }
      rows.append([
        duck["name"]?.stringValue ?? "?",
        (duck["targets"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ","), trigger,
        "-\(JSONValue.format(duck["depth"]?.numberValue ?? 0)) dB", duck["phase"]?.stringValue ?? "?",
        HumanUnits.format(decibels: duck["level"]?.numberValue ?? 1),
      ])
    }
    return table(rows)
  }

  /// One saved schedule (from `status` or `schedules`):
  /// `#3 play at 2026-11-23 07:00:00.000 +01:00, weekdays 07:00 [alarm]`, and `; failed at …: code:
  /// message` when a repeating one was last refused when its time came.
  public static func schedule(_ entry: JSONValue) -> String {
    let id = entry["schedule"].map(number) ?? "?"
    let due = entry["due"]?.stringValue.flatMap(RFC3339.parse).map { HumanUnits.format(localTime: $0) } ?? "?"
    var text = "#\(id) \(entry["cmd"]?.stringValue ?? "?") at \(due)"
    if let repeats = entry["repeat"], repeats != .null, let recurrence = try? Recurrence(json: repeats) {
      text += ", \(recurrence.summary)"
    }
    if let tag = entry["tag"]?.stringValue { text += " [\(tag)]" }
    if entry["started"] == true { text += " (under way)" }
    if let failure = entry["lastFailure"], case .object = failure {
      let when = failure["at"]?.stringValue.flatMap(RFC3339.parse).map { HumanUnits.format(localTime: $0) } ?? "?"
      text += "; failed at \(when): \(failure["code"]?.stringValue ?? "?"): \(failure["message"]?.stringValue ?? "?")"
    }
    return text
  }

  /// `0.5 (-6.02 dB)`, and `, audible 0.42 (-7.5 dB)` while a ramp moves it, from `model`/`audible`.
  static func levels(_ value: JSONValue, key: String) -> String {
    let model = value["model"]?.numberValue ?? .nan
    var text = level(model, key: key)
    if let audible = value["audible"]?.numberValue, audible != model { text += ", audible \(level(audible, key: key))" }
    return text
  }

  // MARK: Events

  /// One event on one line: `stream-ended s1 (stopped)`, `value master.gain 0.5 (-6.02 dB) @48000`.
  public static func event(_ event: Event) -> String {
    switch event {
    case .animationStarted(let id, let key, let name, let sample):
      return "animation-started #\(id) \(name) on \(key) @\(sample)"
    case .animationFinished(let id, let key, let name, _, let sample, let ending, let by):
      let why =
        switch ending {
        case .completed: ""
        case .superseded: " (superseded by " + (by.map { "#\($0)" } ?? "an instant change") + ")"
        case .removed: " (removed before its end)"
        }
      return "animation-finished #\(id) \(name) on \(key) @\(sample)\(why)"
    case .streamStarted(let stream, let path):
      return "stream-started \(stream) \(path)"
    case .streamEnded(let stream, let reason, let message):
      return "stream-ended \(stream) (\(reason.rawValue))" + (message.map { ": \($0)" } ?? "")
    case .deviceFailed(let message):
      return "device-failed: \(message)"
    case .deviceRecovered(let device):
      return "device-recovered \(device)"
    case .configReloaded(let applied, let restartRequired):
      let changed = applied.isEmpty ? "nothing changed" : "applied " + applied.joined(separator: ", ")
      let later = restartRequired.isEmpty ? "" : "; restart needed for " + restartRequired.joined(separator: ", ")
      return "config-reloaded: " + changed + later
    case .underrun(let stream):
      return "underrun" + (stream.map { " \($0)" } ?? " (output device)")
    case .eventsLost(let count):
      return "events-lost \(count) (the daemon's event queue was full)"
    case .scheduleApplied(let schedule, let cmd, let tag, let next):
      return "schedule-applied #\(schedule) \(cmd)" + (tag.map { " [\($0)]" } ?? "")
        + (next.map { "; next at " + HumanUnits.format(localTime: $0) } ?? "")
    case .scheduleFailed(let schedule, let cmd, let tag, let error, let next):
      return "schedule-failed #\(schedule) \(cmd)" + (tag.map { " [\($0)]" } ?? "") + ": \(error.code.rawValue): "
        + error.message + (next.map { "; next at " + HumanUnits.format(localTime: $0) } ?? "")
    case .duckStarted(let rule, let sample):
      return "duck-started \(rule) @\(sample)"
    case .duckEnded(let rule, let sample):
      return "duck-ended \(rule) @\(sample)"
    case .itemStarted(let stream, let item, let path, let sample):
      return "item-started \(stream) #\(item) \(path) @\(sample)"
    case .itemEnded(let stream, let item, let path, let reason, let sample):
      return "item-ended \(stream) #\(item) \(path) (\(reason)) @\(sample)"
    case .limiterEngaged(let reduction, let sample):
      return "limiter-engaged -\(JSONValue.format((reduction * 100).rounded() / 100)) dB @\(sample)"
    case .value(let key, let value, let sample):
      return "value \(key) \(level(value, key: key)) @\(sample)"
    }
  }

  // MARK: Helpers

  /// A JSON number as people write it (`3`, `0.5`), anything else serialised.
  public static func number(_ value: JSONValue) -> String {
    if let number = value.numberValue { return HumanUnits.format(gain: number, decimals: 6) }
    return value.serialized()
  }

  /// Columns padded to their widest cell; `notes` are indented lines after a row.
  public static func table(_ rows: [[String]], notes: [Int: [String]] = [:]) -> String {
    let columns = rows.map(\.count).max() ?? 0
    var widths = [Int](repeating: 0, count: columns)
    for row in rows {
      for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
    }
    var lines: [String] = []
    for (rowIndex, row) in rows.enumerated() {
      var line = ""
      for (index, cell) in row.enumerated() {
        let isLast = index == row.count - 1
        line += isLast ? cell : cell + String(repeating: " ", count: widths[index] - cell.count + 2)
      }
      lines.append(line)
      for note in notes[rowIndex] ?? [] { lines.append("    " + note) }
    }
    return lines.joined(separator: "\n")
  }
}
