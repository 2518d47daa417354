import RampAudio
import RampEngine
import RampProtocol
import RampSystem
import TOMLKit

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

extension DaemonConfiguration {
  /// The configuration from its layers, lowest first: built-in defaults < `file` < `environment`
  /// (`RAMPD_SECTION_KEY`: `RAMPD_OUTPUT_DEVICE`, `RAMPD_LIMITS_LINE_LENGTH`) < `overrides`
  /// (`"section.key": "value"`, e.g. `["output.device": "hw:1"]`, from flags).
  ///
  /// - `file`: nil reads no file (defaults, environment and overrides only); a file that was
  ///   asked for and cannot be read is an error.
  /// - `environment`: the whole process environment may be passed; only `RAMPD_*` variables are
  ///   read, and every one of them must name a key (but `reservedEnvironmentVariables`).
  /// - `flags`: the flag that set an override key, for messages (`["output.device": "--device"]`);
  ///   without one the source is `command line (output.device)`.
  ///
  /// Environment values and overrides are strings read by the same rules as TOML strings.
  /// Mixer bindings come from the file only.
  public static func load(
    file: String?, environment: [String: String], overrides: [String: String], flags: [String: String] = [:]
  ) throws(ConfigurationError) -> DaemonConfiguration {
    var layers = ConfigLayers()
    if let file {
      try layers.applyFile(toml: readFile(file), source: file)
    }
    layers.applyEnvironment(environment)
    layers.applyOverrides(overrides, flags: flags)
    return try layers.finish()
  }

  /// Defaults < the TOML text. `source` names it in errors (a path, `test`).
  public static func parse(toml: String, source: String) throws(ConfigurationError) -> DaemonConfiguration {
    var layers = ConfigLayers()
    try layers.applyFile(toml: toml, source: source)
    return try layers.finish()
  }

  /// The file's contents as UTF-8 text, or an error naming the file and the reason.
  static func readFile(_ path: String) throws(ConfigurationError) -> String {
    func fail(_ what: String, _ code: Int32) -> ConfigurationError {
      ConfigurationError(source: path, message: "\(what): \(String(cString: strerror(code)))")
    }
    guard let handle = fopen(path, "r") else { throw fail("cannot open the configuration file", errno) }
    defer { fclose(handle) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
      let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, handle) }
      let code = errno
      if count < chunk.count && ferror(handle) != 0 { throw fail("cannot read the configuration file", code) }
      bytes += chunk[0..<count]
      if bytes.count > 16 << 20 {
        throw ConfigurationError(source: path, message: "the configuration file is larger than 16 MiB")
      }
      if count < chunk.count { break }
    }
    guard let text = String(validating: bytes, as: UTF8.self) else {
      throw ConfigurationError(source: path, message: "the configuration file is not UTF-8 text")
    }
    return text
  }
}

/// Where a value came from; `rank` orders the layers (file 1, environment 2, overrides 3).
struct ConfigOrigin: Sendable, Equatable {
  var source: String
  var line: Int?
  var rank: Int
}

/// The layers read so far, applied in order onto the defaults. A value that is refused is
/// recorded and the rest read on, so that every error is reported at once (`finish`).
struct ConfigLayers {
  var builder = ConfigBuilder()
  /// The last layer that set each key (`output.buffer`).
  var origins: [String: ConfigOrigin] = [:]
  /// Every error met so far, in order.
  var problems: [ConfigurationError] = []

  mutating func apply(_ key: ConfigKey, _ value: ConfigValue, _ origin: ConfigOrigin) {
    // A refused value leaves the key as it was, so no later check reports it again.
    let before = builder
    do {
      try key.apply(&builder, value)
    } catch {
      builder = before
      problems.append(
        ConfigurationError(source: origin.source, line: origin.line, key: key.path, message: error.message))
      return
    }
    origins[key.path] = origin
  }

  /// The combined configuration, after the checks that involve more than one key; or every
  /// error met, the first with the others in `more`.
  func finish() throws(ConfigurationError) -> DaemonConfiguration {
    var problems = problems
    let result = builder.finished()
    do {
      try result.output.validate()
    } catch {
      let key = error.field.map { "output.\($0)" } ?? "output"
      let message = error.problem ?? error.message
      // The buffer is checked against the period, the margin against both: blame the latest layer.
      let involved =
        switch key {
        case "output.buffer": ["output.buffer", "output.period"]
        case "output.margin": ["output.margin", "output.buffer", "output.period"]
        default: [key]
        }
      let origin =
        involved.compactMap { origins[$0] }.max(by: { $0.rank < $1.rank })
        ?? ConfigOrigin(source: "defaults", line: nil, rank: 0)
      problems.append(ConfigurationError(source: origin.source, line: origin.line, key: key, message: message))
    }
    if var first = problems.first {
      first.more = Array(problems.dropFirst())
      throw first
    }
    return result
  }

  // MARK: Environment and overrides

  mutating func applyEnvironment(_ environment: [String: String]) {
    for name in environment.keys.sorted()
    where name.hasPrefix("RAMPD_") && !DaemonConfiguration.reservedEnvironmentVariables.contains(name) {
      let source = "environment (\(name))"
      guard let key = ConfigSchema.keysByEnvironmentName[name] else {
        if name.hasPrefix("RAMPD_MIXER_") {
          problems.append(
            ConfigurationError(
              source: source, message: "mixer bindings are configured in the file only ([[mixer]] tables)"))
          continue
        }
        let known = ConfigSchema.keys.map(\.environmentName)
        let hint = Suggestion.closest(to: name, among: known).map { " (did you mean \($0)?)" } ?? ""
        problems.append(ConfigurationError(source: source, message: "not a configuration variable\(hint)"))
        continue
      }
      apply(key, .string(environment[name]!), ConfigOrigin(source: source, line: nil, rank: 2))
    }
    // The socket: the same variables, in the same order, as rampctl reads.
    if let socket = SocketLocation.environmentPath(environment), let key = ConfigSchema.keysByPath["socket.path"] {
      apply(key, .string(socket.path), ConfigOrigin(source: "environment (\(socket.variable))", line: nil, rank: 2))
    }
  }

  mutating func applyOverrides(_ overrides: [String: String], flags: [String: String]) {
    for path in overrides.keys.sorted() {
      let source = flags[path] ?? "command line (\(path))"
      guard let key = ConfigSchema.keysByPath[path] else {
        if path == "mixer" || path.hasPrefix("mixer.") {
          problems.append(
            ConfigurationError(
              source: source, key: path,
              message: "mixer bindings are configured in the file only ([[mixer]] tables)"))
          continue
        }
        let hint =
          Suggestion.closest(to: path, among: ConfigSchema.keys.map(\.path)).map { " (did you mean \($0)?)" } ?? ""
        problems.append(ConfigurationError(source: source, key: path, message: "unknown key\(hint)"))
        continue
      }
      apply(key, .string(overrides[path]!), ConfigOrigin(source: source, line: nil, rank: 3))
    }
  }

  // MARK: The file

  private enum FileEntry {
    case set(ConfigKey, ConfigValue)
    case mixer(Int, TOMLTable)
    case duck(Int, TOMLTable)
    case problem(key: String?, message: String)
  }

  mutating func applyFile(toml: String, source: String) throws(ConfigurationError) {
    let root: TOMLTable
    do {
      root = try TOMLTable(string: toml)
    } catch let error as TOMLParseError {
      throw ConfigurationError(
        source: source, line: error.source.begin.line, message: "not valid TOML: \(error.description)")
    } catch {
      throw ConfigurationError(source: source, message: "not valid TOML: \(error)")
    }
    let index = SourceIndex(toml)

    // Everything the file says, checked in the order of its lines so the first error reported is
    // the first one in the file.
    var entries: [(line: Int?, entry: FileEntry)] = []
    for name in root.keys {
      guard let value = root[name] else { continue }
      if ConfigSchema.arraySections.contains(name) {
        guard value.type == .array, let array = value.array else {
          entries.append(
            (
              index.keyLines[name] ?? index.headerLines[name],
              .problem(key: name, message: "expected [[\(name)]] tables, got \(Self.convert(value).described)")
            ))
          continue
        }
        for (position, element) in array.enumerated() {
          if element.type == .table, let table = element.table {
            let line = index.headerLines["\(name)#\(position)"] ?? index.keyLines[name]
            entries.append((line, name == "duck" ? .duck(position, table) : .mixer(position, table)))
          } else {
            entries.append(
              (
                index.keyLines[name],
                .problem(
                  key: "\(name) #\(position + 1)", message: "expected a table, got \(Self.convert(element).described)")
              ))
          }
        }
      } else if ConfigSchema.sections.contains(name) {
        guard value.type == .table, let table = value.table else {
          entries.append(
            (
              index.keyLines[name],
              .problem(key: name, message: "expected a table [\(name)], got \(Self.convert(value).described)")
            ))
          continue
        }
        for keyName in table.keys {
          guard let keyValue = table[keyName] else { continue }
          let line = index.keyLines["\(name).\(keyName)"] ?? index.headerLines["\(name).\(keyName)"]
          if let key = ConfigSchema.keysByPath["\(name).\(keyName)"] {
            entries.append((line, .set(key, Self.convert(keyValue))))
          } else {
            entries.append(
              (
                line,
                .problem(
                  key: "\(name).\(keyName)",
                  message: Suggestions.unknownKey(
                    keyName, section: name, known: ConfigSchema.keys(in: name).map(\.name)))
              ))
          }
        }
      } else if value.type == .table {
        let hint =
          Suggestion.closest(to: name, among: ConfigSchema.sections).map { " (did you mean [\($0)]?)" } ?? ""
        let sections = ConfigSchema.sections.map { ConfigSchema.arraySections.contains($0) ? "[[\($0)]]" : "[\($0)]" }
        entries.append(
          (
            index.headerLines[name] ?? index.firstLine(under: name),
            .problem(
              key: nil,
              message: "unknown section [\(name)]\(hint)"
                + (hint.isEmpty ? "; the sections are \(sections.joined(separator: ", "))" : ""))
          ))
      } else {
        let owners = ConfigSchema.keys.filter { $0.name == name }.map(\.path)
        let hint = owners.isEmpty ? "" : " (did you mean \(owners.joined(separator: " or "))?)"
        entries.append(
          (
            index.keyLines[name],
            .problem(key: name, message: "unknown key at the top level: keys belong in a [section]\(hint)")
          ))
      }
    }

    var mixers: [(MixerBindingConfiguration, ConfigOrigin)] = []
    var ducks: [DuckRule] = []
    for (line, entry) in entries.sorted(by: { ($0.line ?? .max) < ($1.line ?? .max) }) {
      let origin = ConfigOrigin(source: source, line: line, rank: 1)
      switch entry {
      case .set(let key, let value):
        apply(key, value, origin)
      case .problem(let key, let message):
        problems.append(ConfigurationError(source: source, line: line, key: key, message: message))
      case .mixer(let position, let table):
        let mixer: MixerBindingConfiguration
        do { mixer = try Self.mixer(position, table, index: index, origin: origin) } catch {
          problems.append(error)
          continue
        }
        if let (_, earlier) = mixers.first(where: { $0.0.name == mixer.name }) {
          problems.append(
            ConfigurationError(
              source: source, line: index.keyLines["mixer#\(position).name"] ?? line,
              key: "mixer.\(mixer.name).name",
              message: "a mixer named '\(mixer.name)' is already bound" + (earlier.line.map { " (line \($0))" } ?? "")))
          continue
        }
        guard mixers.count < Player.mixerCapacity else {
          problems.append(
            ConfigurationError(
              source: source, line: line, key: "mixer.\(mixer.name)",
              message: "\(Player.mixerCapacity) mixers are already bound, the most allowed"))
          continue
        }
        mixers.append((mixer, origin))
      case .duck(let position, let table):
        do {
          let rule = try ConfigSchema.duck(position, table, index: index, origin: origin)
          guard !ducks.contains(where: { $0.name == rule.name }) else {
            problems.append(
              ConfigurationError(
                source: source, line: index.keyLines["duck#\(position).name"] ?? line, key: "duck.\(rule.name).name",
                message: "a duck rule named '\(rule.name)' is already configured"))
            continue
          }
          ducks.append(rule)
        } catch {
          problems.append(error)
        }
      }
    }
    builder.configuration.mixers = mixers.map(\.0)
    builder.configuration.ducks = ducks
  }

  /// One `[[mixer]]` table: every key known, `name` and `element` present, `validate()` passed.
  private static func mixer(_ position: Int, _ table: TOMLTable, index: SourceIndex, origin: ConfigOrigin)
    throws(ConfigurationError) -> MixerBindingConfiguration
  {
    var mixer = MixerBindingConfiguration(name: "", card: "default", element: "")
    let prefix = "mixer#\(position)"
    var label = "mixer #\(position + 1)"
    func line(_ key: String) -> Int? { index.keyLines["\(prefix).\(key)"] ?? origin.line }
    func fail(_ key: String?, _ message: String) -> ConfigurationError {
      ConfigurationError(
        source: origin.source, line: key.map(line) ?? origin.line, key: key.map { "\(label).\($0)" } ?? label,
        message: message)
    }

    // `name` first, so the other errors can say which binding they concern.
    let names = table.keys.sorted { name1, name2 in
      if (name1 == "name") != (name2 == "name") { return name1 == "name" }
      return (line(name1) ?? .max) < (line(name2) ?? .max)
    }
    for name in names {
      guard let value = table[name] else { continue }
      guard let key = ConfigSchema.mixerKeys.first(where: { $0.name == name }) else {
        throw fail(
          name, Suggestions.unknownKey(name, section: "[mixer]", known: ConfigSchema.mixerKeys.map(\.name)))
      }
      do {
        try key.apply(&mixer, convert(value))
      } catch {
        throw fail(name, error.message)
      }
      if name == "name" && KeyPath.isName(mixer.name) { label = "mixer.\(mixer.name)" }
    }
    if table["name"] == nil {
      throw fail(nil, "missing key 'name' (the binding's key path is mixers.<name>.volume)")
    }
    if table["element"] == nil {
      throw fail(nil, "missing key 'element' (a simple mixer element, as `amixer scontrols` lists it)")
    }
    do {
      try mixer.validate()
    } catch {
      guard let field = error.field, let problem = error.problem else { throw fail(nil, error.message) }
      throw fail(ConfigSchema.mixerFieldNames[field] ?? field, problem)
    }
    return mixer
  }

  static func convert(_ value: TOMLValueConvertible) -> ConfigValue {
    switch value.type {
    case .string: return .string(value.string ?? "")
    case .int: return .integer(value.int ?? 0)
    case .double: return .float(value.double ?? .nan)
    case .bool: return .boolean(value.bool ?? false)
    case .array: return .array(value.array.map { $0.map(convert) } ?? [])
    case .table: return .other("table")
    case .date: return .other("date")
    case .time: return .other("time")
    case .dateTime: return .other("date-time")
    }
  }
}

/// Lines of keys and headers in TOML text, found by scanning (TOMLKit keeps no positions).
///
/// `keyLines["output.rate"]` for `rate = …` under `[output]` (or `output.rate = …` at the top);
/// `[[mixer]]` tables are numbered: `headerLines["mixer#0"]`, `keyLines["mixer#0.card"]`.
struct SourceIndex {
  var keyLines: [String: Int] = [:]
  var headerLines: [String: Int] = [:]

  init(_ text: String) {
    var current = ""
    var arrayCounts: [String: Int] = [:]
    var lineNumber = 0
    for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
      lineNumber += 1
      let line = raw.trimmingWhitespace()
      if line.isEmpty || line.hasPrefix("#") { continue }
      if line.hasPrefix("[[") {
        guard let end = line.firstRange(of: "]]") else { continue }
        let name = Self.normalizedKey(line[line.index(line.startIndex, offsetBy: 2)..<end.lowerBound])
        let count = arrayCounts[name, default: 0]
        arrayCounts[name] = count + 1
        current = "\(name)#\(count)"
        if headerLines[current] == nil { headerLines[current] = lineNumber }
        if headerLines[name] == nil { headerLines[name] = lineNumber }
        continue
      }
      if line.hasPrefix("[") {
        guard let end = line.firstIndex(of: "]") else { continue }
        current = Self.normalizedKey(line[line.index(after: line.startIndex)..<end])
        if headerLines[current] == nil { headerLines[current] = lineNumber }
        continue
      }
      guard let equals = line.firstIndex(of: "=") else { continue }
      let key = Self.normalizedKey(line[..<equals])
      let full = current.isEmpty ? key : "\(current).\(key)"
      if keyLines[full] == nil { keyLines[full] = lineNumber }
    }
  }

  /// The first key line under a table named by dotted keys only (`ouput.rate = 1` at the top).
  func firstLine(under name: String) -> Int? {
    keyLines.filter { $0.key.hasPrefix(name + ".") }.map(\.value).min()
  }

  /// `output . "rate"` → `output.rate`.
  static func normalizedKey(_ text: Substring) -> String {
    text.split(separator: ".", omittingEmptySubsequences: false)
      .map { $0.trimmingWhitespace().trimming { $0 == "\"" || $0 == "'" } }
      .joined(separator: ".")
  }
}

/// "Did you mean …?": a typo must not be silently ignored, and the error should say what was meant.
enum Suggestions {
  /// The message for `name`, unknown in `section` (`output`, or `[mixer]` for a mixer table).
  static func unknownKey(_ name: String, section: String, known: [String]) -> String {
    let isMixer = section == "[mixer]"
    if let near = Suggestion.closest(to: name, among: known) {
      return "unknown key (did you mean \(isMixer ? near : "\(section).\(near)")?)"
    }
    if !isMixer {
      let elsewhere = ConfigSchema.keys.filter { $0.name == name && $0.section != section }.map(\.path)
      if !elsewhere.isEmpty {
        return "unknown key in [\(section)] (did you mean \(elsewhere.joined(separator: " or "))?)"
      }
    }
    let header = isMixer ? "[[mixer]]" : "[\(section)]"
    return "unknown key; the keys of \(header) are \(known.joined(separator: ", "))"
  }
}
