import Logging
import RampAudio
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What a layer sets before the layers are combined: the configuration, plus the value spaces
/// written as plain `db`, whose floor is `fade.db-floor` once every layer has been read.
struct ConfigBuilder {
  enum Space: Equatable {
    case fixed(ValueSpace)
    /// `db` without a floor: `fade.db-floor`.
    case decibelsAtDefaultFloor
  }

  var configuration = DaemonConfiguration()
  var fadeSpace = Space.fixed(.amplitude)
  var implicitSpace = Space.fixed(.amplitude)

  init() {}

  func finished() -> DaemonConfiguration {
    var result = configuration
    let floor = configuration.fades.decibelFloor
    func resolve(_ space: Space) -> ValueSpace {
      switch space {
      case .fixed(let space): return space
      case .decibelsAtDefaultFloor: return .decibels(floor: floor)
      }
    }
    result.fades.space = resolve(fadeSpace)
    result.transaction.valueSpace = resolve(implicitSpace)
    return result
  }
}

/// One key of the file, `section.name`, with how to read it and how to write it back.
struct ConfigKey: Sendable {
  let section: String
  let name: String
  let apply: @Sendable (inout ConfigBuilder, ConfigValue) throws(ValueProblem) -> Void
  /// The value as TOML text.
  let render: @Sendable (DaemonConfiguration) -> String
  /// The value may be `""` for a default computed at run time (a path under `$XDG_RUNTIME_DIR`).
  var computedDefault = false

  var path: String { "\(section).\(name)" }
  /// `RAMPD_OUTPUT_DEVICE`, `RAMPD_LIMITS_LINE_LENGTH`.
  var environmentName: String {
    "RAMPD_" + "\(section)_\(name)".uppercased().replacing("-", with: "_")
  }
}

/// Every section and key, in the order of `config/rampd.toml`.
enum ConfigSchema {
  static let sections = [
    "socket", "output", "embedded-output", "fade", "playback", "implicit", "gain", "mixer", "duck", "queue", "limits",
    "media",
    "access", "log",
    "state", "shutdown",
  ]
  /// Sections that are arrays of tables (`[[mixer]]`).
  static let arraySections: Set<String> = ["mixer", "duck"]

  static let keys: [ConfigKey] =
    socket + output + embeddedOutput + fade + playback + implicit + gain + queue + limits + media + access + log + state
    + shutdown

  static let keysByPath: [String: ConfigKey] = Dictionary(uniqueKeysWithValues: keys.map { ($0.path, $0) })
  static let keysByEnvironmentName: [String: ConfigKey] = Dictionary(
    uniqueKeysWithValues: keys.map { ($0.environmentName, $0) })

  static func keys(in section: String) -> [ConfigKey] { keys.filter { $0.section == section } }

  // MARK: Sections

  static let socket: [ConfigKey] = [
    ConfigKey(
      section: "socket", name: "path",
      apply: { builder, value throws(ValueProblem) in
        let path = try ConfigParse.optionalAbsolutePath(value)
        if let path, path.utf8.count > 107 {
          throw ValueProblem("\(path.utf8.count) bytes is longer than a Unix socket path can be (107 bytes)")
        }
        builder.configuration.socket.path = path
      },
      render: { ConfigText.quoted($0.socket.path ?? "") }, computedDefault: true),
    ConfigKey(
      section: "socket", name: "mode",
      apply: { builder, value throws(ValueProblem) in
        if case .string(let text) = value, text.isEmpty {
          builder.configuration.socket.mode = nil
        } else {
          builder.configuration.socket.mode = try ConfigParse.fileMode(value)
        }
      },
      render: { ConfigText.quoted($0.socket.mode.map(ConfigText.mode) ?? "") }, computedDefault: true),
    ConfigKey(
      section: "socket", name: "group",
      apply: { builder, value throws(ValueProblem) in
        let group = try ConfigParse.optionalString(value)
        if let group, group.contains(where: { $0 == "/" || $0 == ":" || $0.isWhitespace || $0 == "\0" }) {
          throw ValueProblem("\(ConfigText.quoted(group)) is not a group name")
        }
        builder.configuration.socket.group = group
      },
      render: { ConfigText.quoted($0.socket.group ?? "") }, computedDefault: true),
  ]

  static let output: [ConfigKey] = [
    outputKey(
      "device", render: { ConfigText.quoted($0.device) },
      set: { output, value throws(ValueProblem) in
        output.device = try ConfigParse.string(value)
      }),
    outputKey(
      "rate", render: { "\($0.sampleRate)" },
      set: { output, value throws(ValueProblem) in
        output.sampleRate = try ConfigParse.sampleRate(value)
      }),
    outputKey(
      "channels", render: { "\($0.channels)" },
      set: { output, value throws(ValueProblem) in
        output.channels = try ConfigParse.integer(value)
      }),
    outputKey(
      "format", render: { ConfigText.quoted($0.format.rawValue) },
      set: { output, value throws(ValueProblem) in
        output.format = try ConfigParse.choice(
          value, OutputConfiguration.SampleFormat.allCases.map { ($0.rawValue, $0) })
      }),
    outputKey(
      "period", render: { ConfigText.durationValue($0.periodTime) },
      set: { output, value throws(ValueProblem) in
        output.periodTime = try ConfigParse.duration(value)
      }),
    outputKey(
      "buffer", render: { ConfigText.durationValue($0.bufferTime) },
      set: { output, value throws(ValueProblem) in
        output.bufferTime = try ConfigParse.duration(value)
      }),
    outputKey(
      "pacing", render: { ConfigText.quoted($0.pacing.rawValue) },
      set: { output, value throws(ValueProblem) in
        output.pacing = try ConfigParse.choice(value, OutputConfiguration.Pacing.allCases.map { ($0.rawValue, $0) })
      }),
    outputKey(
      "margin", render: { $0.marginTime.map(ConfigText.durationValue) ?? ConfigText.quoted("") }, computedDefault: true,
      set: { output, value throws(ValueProblem) in
        // "": half the buffer in whole periods (50 ms on a device that rewinds).
        if case .string(let text) = value, text.isEmpty {
          output.marginTime = nil
        } else {
          output.marginTime = try ConfigParse.duration(value)
        }
      }),
    outputKey(
      "rewind", render: { ConfigText.quoted($0.rewind.rawValue) },
      set: { output, value throws(ValueProblem) in
        output.rewind = try ConfigParse.choice(value, OutputConfiguration.Rewind.allCases.map { ($0.rawValue, $0) })
      }),
    outputKey(
      "rewind-buffer", render: { ConfigText.durationValue($0.rewindBufferTime) },
      set: { output, value throws(ValueProblem) in
        output.rewindBufferTime = try ConfigParse.duration(value)
      }),
    outputKey(
      "pipewire-role", render: { ConfigText.quoted($0.pipewire.role) },
      set: { output, value throws(ValueProblem) in
        output.pipewire.role = try ConfigParse.string(value)
      }),
    outputKey(
      "pipewire-target", render: { ConfigText.quoted($0.pipewire.target) },
      set: { output, value throws(ValueProblem) in
        output.pipewire.target = try ConfigParse.string(value)
      }),
    outputKey(
      "pipewire-quantum", render: { "\($0.pipewire.quantum)" },
      set: { output, value throws(ValueProblem) in
        output.pipewire.quantum = try ConfigParse.integer(value)
      }),
    outputKey(
      "limiter",
      render: { $0.limiter.enabled ? ConfigText.truePeakValue($0.limiter.ceilingDecibels) : ConfigText.quoted("off") },
      set: { output, value throws(ValueProblem) in
        if case .string(let text) = value, text.trimmingWhitespace().lowercased() == "off" {
          output.limiter.enabled = false
          return
        }
        output.limiter.ceilingDecibels = try ConfigParse.truePeak(value, in: LimiterSettings.ceilingRange)
        output.limiter.enabled = true
      }),
    outputKey(
      "limiter-lookahead", render: { ConfigText.durationValue($0.limiter.lookAhead) },
      set: { output, value throws(ValueProblem) in
        output.limiter.lookAhead = try ConfigParse.duration(value)
      }),
    outputKey(
      "limiter-release", render: { ConfigText.durationValue($0.limiter.release) },
      set: { output, value throws(ValueProblem) in
        output.limiter.release = try ConfigParse.duration(value)
      }),
    ConfigKey(
      section: "output", name: "wait",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.waitForDevice = try ConfigParse.boolean(value)
      },
      render: { "\($0.waitForDevice)" }),
  ]

  /// An `[output]` key: sets the field, then checks it alone with `OutputConfiguration.validate()`
  /// (so its messages are the audio layer's). The buffer against two periods is checked once every
  /// layer has been read.
  private static func outputKey(
    _ name: String, render: @escaping @Sendable (OutputConfiguration) -> String, computedDefault: Bool = false,
    set: @escaping @Sendable (inout OutputConfiguration, ConfigValue) throws(ValueProblem) -> Void
  ) -> ConfigKey {
    ConfigKey(
      section: "output", name: name,
      apply: { builder, value throws(ValueProblem) in
        try set(&builder.configuration.output, value)
        // The field alone, on a probe whose other fields cannot fail the cross checks.
        var probe = OutputConfiguration(periodTime: 0.001, bufferTime: 10)
        try set(&probe, value)
        if name == "buffer" && probe.bufferTime < 2 * probe.periodTime { probe.periodTime = probe.bufferTime / 2 }
        if name == "period" { probe.bufferTime = 10 }
        do throws(AudioError) {
          try probe.validate()
        } catch {
          if error.field == name, let problem = error.problem { throw ValueProblem(problem) }
        }
      },
      render: { render($0.output) }, computedDefault: computedDefault)
  }

  static let embeddedOutput: [ConfigKey] = [
    ConfigKey(
      section: "embedded-output", name: "enabled",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.embeddedOutput.enabled = try ConfigParse.boolean(value)
      },
      render: { "\($0.embeddedOutput.enabled)" }),
    ConfigKey(
      section: "embedded-output", name: "path",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.embeddedOutput.path = try ConfigParse.optionalAbsolutePath(value)
      },
      render: { ConfigText.quoted($0.embeddedOutput.path ?? "") }, computedDefault: true),
    ConfigKey(
      section: "embedded-output", name: "max-duration",
      apply: { builder, value throws(ValueProblem) in
        let seconds = try ConfigParse.duration(value, in: 0...86_400)
        guard seconds == 0 || seconds >= 1 else {
          throw ValueProblem("\(ConfigText.duration(seconds)) is under 1 s (0 lets the file grow without bound)")
        }
        builder.configuration.embeddedOutput.maxDuration = seconds
      },
      render: { ConfigText.durationValue($0.embeddedOutput.maxDuration) }),
  ]

  static let fade: [ConfigKey] = [
    ConfigKey(
      section: "fade", name: "duration",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.fades.duration = try ConfigParse.duration(value, in: 0...86_400)
      },
      render: { ConfigText.durationValue($0.fades.duration) }),
    ConfigKey(
      section: "fade", name: "curve",
      apply: { builder, value throws(ValueProblem) in builder.configuration.fades.curve = try curve(value) },
      render: { ConfigText.quoted($0.fades.curve.description) }),
    ConfigKey(
      section: "fade", name: "space",
      apply: { builder, value throws(ValueProblem) in builder.fadeSpace = try space(value) },
      render: { renderSpace($0.fades.space, $0) }),
    ConfigKey(
      section: "fade", name: "db-floor",
      apply: { builder, value throws(ValueProblem) in
        let floor = try ConfigParse.decibels(value)
        guard floor >= -200 && floor < 0 else {
          throw ValueProblem("\(ConfigText.number(floor)) dB is outside -200 dB..<0 dB")
        }
        builder.configuration.fades.decibelFloor = floor
      },
      render: { ConfigText.decibelValue($0.fades.decibelFloor) }),
  ]

  static let playback: [ConfigKey] = [
    ConfigKey(
      section: "playback", name: "loudness",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.playback.loudness = try ConfigParse.loudness(value)
      },
      render: { $0.playback.loudness.map(ConfigText.loudnessValue) ?? ConfigText.quoted("off") }),
    ConfigKey(
      section: "playback", name: "loudness-ceiling",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.playback.ceiling = try ConfigParse.truePeak(value, in: PlaybackSettings.ceilingRange)
      },
      render: { ConfigText.truePeakValue($0.playback.ceiling) }),
  ]

  static let queue: [ConfigKey] = [
    ConfigKey(
      section: "queue", name: "crossfade",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.queue.crossfade = try ConfigParse.duration(value, in: 0...3600)
      },
      render: { ConfigText.durationValue($0.queue.crossfade) }),
    ConfigKey(
      section: "queue", name: "crossfade-curve",
      apply: { builder, value throws(ValueProblem) in builder.configuration.queue.curve = try curve(value) },
      render: { ConfigText.quoted($0.queue.curve.description) }),
    ConfigKey(
      section: "queue", name: "skip-crossfade",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.queue.skipCrossfade = try ConfigParse.duration(value, in: 0...3600)
      },
      render: { ConfigText.durationValue($0.queue.skipCrossfade) }),
    ConfigKey(
      section: "queue", name: "skip-curve",
      apply: { builder, value throws(ValueProblem) in builder.configuration.queue.skipCurve = try curve(value) },
      render: { ConfigText.quoted($0.queue.skipCurve.description) }),
    ConfigKey(
      section: "queue", name: "crossfade-level",
      apply: { builder, value throws(ValueProblem) in
        if case .string("off") = value {
          builder.configuration.queue.level = nil
          return
        }
        let level = try ConfigParse.decibels(value)
        guard Crossfade.levelRange.contains(level) else {
          throw ValueProblem("\(ConfigText.number(level)) dB is outside -120 dB...0 dB (or \"off\")")
        }
        builder.configuration.queue.level = level
      },
      render: { $0.queue.level.map(ConfigText.decibelValue) ?? ConfigText.quoted("off") }),
    ConfigKey(
      section: "queue", name: "crossfade-window",
      apply: { builder, value throws(ValueProblem) in
        let seconds = try ConfigParse.duration(value, in: 0...Crossfade.maximumWindow)
        guard seconds > 0 else { throw ValueProblem("must be above 0, got 0 s") }
        builder.configuration.queue.window = seconds
      },
      render: { ConfigText.durationValue($0.queue.window) }),
    ConfigKey(
      section: "queue", name: "loudness",
      apply: { builder, value throws(ValueProblem) in
        if case .string("playback") = value {
          builder.configuration.queue.loudness = nil
          return
        }
        builder.configuration.queue.loudness = try ConfigParse.loudness(value).map(LoudnessChoice.target) ?? .off
      },
      render: { configuration in
        switch configuration.queue.loudness {
        case nil: return ConfigText.quoted("playback")
        case .off?: return ConfigText.quoted("off")
        case .target(let lufs)?: return ConfigText.loudnessValue(lufs)
        }
      }),
  ]

  static let implicit: [ConfigKey] = [
    ConfigKey(
      section: "implicit", name: "duration",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.transaction.duration = try ConfigParse.duration(value, in: 0...3600)
      },
      render: { ConfigText.durationValue($0.transaction.duration) }),
    ConfigKey(
      section: "implicit", name: "curve",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.transaction.timingFunction = try curve(value)
      },
      render: { ConfigText.quoted($0.transaction.timingFunction.description) }),
    ConfigKey(
      section: "implicit", name: "space",
      apply: { builder, value throws(ValueProblem) in builder.implicitSpace = try space(value) },
      render: { renderSpace($0.transaction.valueSpace, $0) }),
    ConfigKey(
      section: "implicit", name: "continuity",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.transaction.continuity = try ConfigParse.choice(
          value, Continuity.allCases.map { ($0.rawValue, $0) })
      },
      render: { ConfigText.quoted($0.transaction.continuity.rawValue) }),
    ConfigKey(
      section: "implicit", name: "instant",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.transaction.disableActions = try ConfigParse.boolean(value)
      },
      render: { "\($0.transaction.disableActions)" }),
  ]

  static let gain: [ConfigKey] = [
    ConfigKey(
      section: "gain", name: "max",
      apply: { builder, value throws(ValueProblem) in
        let decibels = try ConfigParse.decibels(value)
        guard decibels <= 24 else {
          throw ValueProblem("+\(ConfigText.number(decibels)) dB is above the +24 dB ceiling")
        }
        guard decibels >= -60 else {
          throw ValueProblem("\(ConfigText.number(decibels)) dB is below -60 dB (nothing would be audible)")
        }
        builder.configuration.maxGainDecibels = decibels
      },
      render: { ConfigText.decibelValue($0.maxGainDecibels) }),
    ConfigKey(
      section: "gain", name: "declick",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.declick = try ConfigParse.duration(value, in: 0.001...0.5)
      },
      render: { ConfigText.durationValue($0.declick) }),
  ]

  static let limits: [ConfigKey] = [
    limitKey("clients", \.clients, parse: count(in: 1...4096)),
    limitKey(
      "line-length", \.lineLength,
      parse: { value throws(ValueProblem) in
        let bytes = try ConfigParse.byteCount(value)
        try ConfigParse.check(bytes, in: 1024...16_777_216, unit: " bytes")
        return bytes
      }),
    limitKey("streams", \.streams, parse: count(in: 1...Player.streamCapacity)),
    limitKey("observers-per-client", \.observersPerClient, parse: count(in: 0...1024)),
    limitKey("max-observe-rate", \.maxObserveRate, parse: hertz(in: 1...1000), render: ConfigText.number),
    limitKey("observe-budget", \.observeBudget, parse: hertz(in: 1...100_000), render: ConfigText.number),
    limitKey("pending-scheduled", \.pendingScheduled, parse: count(in: 0...1_000_000)),
    limitKey("animations-per-key-path", \.animationsPerKeyPath, parse: count(in: 1...1024)),
    limitKey(
      "idle-timeout", \.idleTimeout,
      parse: { value throws(ValueProblem) in try ConfigParse.duration(value, in: 0...604_800) },
      render: ConfigText.durationValue),
    limitKey("event-queue", \.eventQueue, parse: count(in: 16...1_048_576)),
  ]

  /// A `[limits]` key: `parse` reads and checks the value for `field`, `render` writes it back
  /// as TOML (by default as Swift prints it: an integer).
  private static func limitKey<Value>(
    _ name: String, _ field: WritableKeyPath<Limits, Value> & Sendable,
    parse: @escaping @Sendable (ConfigValue) throws(ValueProblem) -> Value,
    render: @escaping @Sendable (Value) -> String = { "\($0)" }
  ) -> ConfigKey {
    ConfigKey(
      section: "limits", name: name,
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.limits[keyPath: field] = try parse(value)
      },
      render: { render($0.limits[keyPath: field]) })
  }

  /// An integer within `range`.
  private static func count(in range: ClosedRange<Int>) -> @Sendable (ConfigValue) throws(ValueProblem) -> Int {
    { value throws(ValueProblem) in try ConfigParse.integer(value, in: range) }
  }

  /// A rate in Hz within `range`.
  private static func hertz(in range: ClosedRange<Double>) -> @Sendable (ConfigValue) throws(ValueProblem) -> Double {
    { value throws(ValueProblem) in
      let rate = try ConfigParse.hertz(value)
      guard range.contains(rate) else {
        throw ValueProblem(
          "\(ConfigText.number(rate)) Hz is outside"
            + " \(ConfigText.number(range.lowerBound))...\(ConfigText.number(range.upperBound)) Hz")
      }
      return rate
    }
  }

  static let media: [ConfigKey] = [
    ConfigKey(
      section: "media", name: "roots",
      apply: { builder, value throws(ValueProblem) in
        let roots = try ConfigParse.stringList(value)
        for (index, root) in roots.enumerated() {
          guard !root.isEmpty else { throw ValueProblem("item \(index + 1) is empty") }
          do throws(ValueProblem) {
            try ConfigParse.checkAbsolutePath(root)
          } catch {
            throw ValueProblem("item \(index + 1): \(error.message)")
          }
        }
        builder.configuration.media.roots = roots
      },
      render: { "[" + $0.media.roots.map(ConfigText.quoted).joined(separator: ", ") + "]" })
  ]

  static let access: [ConfigKey] = [
    ConfigKey(
      section: "access", name: "users",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.access.users = try accountList(value, allowingAnyone: true)
      },
      render: { "[" + $0.access.users.map(ConfigText.quoted).joined(separator: ", ") + "]" }),
    ConfigKey(
      section: "access", name: "groups",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.access.groups = try accountList(value, allowingAnyone: false)
      },
      render: { "[" + $0.access.groups.map(ConfigText.quoted).joined(separator: ", ") + "]" }),
  ]

  /// Names or numeric ids. Whether a name exists is checked when rampd starts, not here, so a file
  /// can be checked on another machine.
  private static func accountList(_ value: ConfigValue, allowingAnyone: Bool) throws(ValueProblem) -> [String] {
    let names = try ConfigParse.stringList(value)
    for (index, name) in names.enumerated() {
      if name == "*" {
        guard allowingAnyone else { throw ValueProblem("item \(index + 1): \"*\" (anyone) belongs in access.users") }
        continue
      }
      guard !name.isEmpty, !name.contains(where: { $0 == "/" || $0 == ":" || $0.isWhitespace || $0 == "\0" }) else {
        throw ValueProblem("item \(index + 1): \(ConfigText.quoted(name)) is not a name or a number")
      }
    }
    return names
  }

  static let log: [ConfigKey] = [
    ConfigKey(
      section: "log", name: "level",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.log.level = try ConfigParse.choice(value, Logger.Level.allCases.map { ($0.rawValue, $0) })
      },
      render: { ConfigText.quoted($0.log.level.rawValue) })
  ]

  static let state: [ConfigKey] = [
    ConfigKey(
      section: "state", name: "path",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.state.path = try ConfigParse.optionalAbsolutePath(value)
      },
      render: { ConfigText.quoted($0.state.path ?? "") }, computedDefault: true)
  ]

  static let shutdown: [ConfigKey] = [
    ConfigKey(
      section: "shutdown", name: "fade",
      apply: { builder, value throws(ValueProblem) in
        builder.configuration.shutdown.fade = try ConfigParse.duration(value, in: 0...10)
      },
      render: { ConfigText.durationValue($0.shutdown.fade) })
  ]

  // MARK: [[mixer]]

  /// The keys of one `[[mixer]]` table.
  static let mixerKeys:
    [(name: String, apply: @Sendable (inout MixerBindingConfiguration, ConfigValue) throws(ValueProblem) -> Void)] = [
      ("name", { mixer, value throws(ValueProblem) in mixer.name = try ConfigParse.string(value) }),
      ("card", { mixer, value throws(ValueProblem) in mixer.card = try ConfigParse.string(value) }),
      ("element", { mixer, value throws(ValueProblem) in mixer.element = try ConfigParse.string(value) }),
      ("index", { mixer, value throws(ValueProblem) in mixer.index = try ConfigParse.integer(value) }),
      ("rate", { mixer, value throws(ValueProblem) in mixer.controlRate = try ConfigParse.hertz(value) }),
      ("min-db", { mixer, value throws(ValueProblem) in mixer.minimumDecibels = try ConfigParse.decibels(value) }),
    ]
  /// `MixerBindingConfiguration.validate()` names fields its own way; these are the file's keys.
  static let mixerFieldNames = ["minimum-db": "min-db"]

  static func renderMixer(_ mixer: MixerBindingConfiguration) -> [(String, String)] {
    [
      ("name", ConfigText.quoted(mixer.name)), ("card", ConfigText.quoted(mixer.card)),
      ("element", ConfigText.quoted(mixer.element)), ("index", "\(mixer.index)"),
      ("rate", ConfigText.number(mixer.controlRate)), ("min-db", ConfigText.decibelValue(mixer.minimumDecibels)),
    ]
  }

  // MARK: Helpers

  static func curve(_ value: ConfigValue) throws(ValueProblem) -> TimingFunction {
    let text = try ConfigParse.string(value)
    do {
      return try TimingFunction(parsing: text)
    } catch {
      throw ValueProblem(error.field == "curve" || error.field == nil ? error.message : error.description)
    }
  }

  static func space(_ value: ConfigValue) throws(ValueProblem) -> ConfigBuilder.Space {
    let text = try ConfigParse.string(value)
    let plain = text.trimmingWhitespace().lowercased()
    if plain == "db" || plain == "decibels" { return .decibelsAtDefaultFloor }
    do {
      return .fixed(try ValueSpace(parsing: text))
    } catch {
      throw ValueProblem(error.message)
    }
  }

  static func renderSpace(_ space: ValueSpace, _ configuration: DaemonConfiguration) -> String {
    if case .decibels(let floor?) = space {
      return ConfigText.quoted(floor == configuration.fades.decibelFloor ? "db" : "db(\(ConfigText.number(floor)))")
    }
    return ConfigText.quoted(space.description)
  }

}
