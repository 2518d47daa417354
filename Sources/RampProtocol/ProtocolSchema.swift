import RampEngine

/// The protocol's description: every command, every animation type and the fields each takes,
/// with what a field holds. The parser takes the keys a command or an animation object accepts
/// from here (any other key is `unknown-field`), and tools that write requests (the structure-aware
/// fuzzer) derive them from here, so the two cannot disagree. PROTOCOL.md §3 to §6 describe the
/// same fields for people.
public enum ProtocolSchema {
  /// What a field's value is.
  public indirect enum Kind: Sendable, Equatable {
    /// Seconds, finite, not negative, at most `MediaTiming.horizon`.
    case seconds
    /// Seconds of either sign, at most `MediaTiming.horizon` from 0.
    case time
    /// Any finite number (a value, a gain, a rate).
    case number
    /// A number not negative, or the string "inf".
    case countOrInfinity
    case bool
    /// Free text, up to `bytes` bytes (a path, a prefix).
    case text(bytes: Int)
    /// A stream id or an animation name, `[A-Za-z0-9_-]{1,64}`.
    case identifier
    /// A key path (`master.gain`, `streams.<id>.gain`).
    case keyPath
    /// A timing function: a name or `cubic-bezier(…)`, `steps(…)`.
    case curve
    /// A value space: "amplitude", "power", "db".
    case space
    /// One of these strings.
    case choice([String])
    /// A scalar the reply echoes (a number or a string).
    case scalar
    /// `at`: seconds from now (at most `Schedule.maximumDelay`) or an RFC 3339 date.
    case schedule
    /// An array of `element`, at most `limit` entries.
    case array(of: Kind, limit: Int)
    /// An animation object (`ProtocolSchema.animation`).
    case animation
    /// A request object, as a batch holds one.
    case command
    /// An animation id from a reply: a whole number, 0 to 2^53.
    case animationID
    /// An event kind (`EventKind`).
    case eventKind
    /// `repeat`: an object of `recurrenceFields`.
    case recurrence
    /// A schedule id from a reply: a whole number, 0 to 2^53.
    case scheduleID
  }

  public struct Field: Sendable, Equatable {
    public let name: String
    public let kind: Kind
    /// Without it the request is refused (`missing-field`).
    public let required: Bool

    init(_ name: String, _ kind: Kind, required: Bool = false) {
      self.name = name
      self.kind = kind
      self.required = required
    }
  }

  /// The fields every request may carry, whatever its command.
  public static let requestFields = [
    Field("id", .scalar), Field("cmd", .choice(Command.names), required: true), Field("at", .schedule),
    Field("ack", .choice(Acknowledgement.allCases.map(\.rawValue))), Field("repeat", .recurrence),
    Field("tag", .identifier), Field("yield", .keyPath),
  ]

  /// The fields of a `repeat` object.
  public static let recurrenceFields = [
    Field("time", .text(bytes: 8)), Field("days", .array(of: .choice(Recurrence.dayNames), limit: 7)),
    Field("every", .seconds),
  ]

  private static let transport = [Field("stream", .identifier), Field("fade", .seconds), Field("curve", .curve)]
  private static let fade = [
    Field("key", .keyPath), Field("from", .number), Field("to", .number), Field("duration", .seconds),
    Field("curve", .curve), Field("space", .space), Field("dbFloor", .number), continuity,
    Field("name", .identifier), Field("then", .choice(Fade.Then.allCases.map(\.rawValue))),
  ]
  private static let continuity = Field("continuity", .choice(Continuity.allCases.map(\.rawValue)))
  private static let events = [Field("events", .array(of: .eventKind, limit: EventKind.allCases.count))]
  private static let duckName = [Field("name", .identifier, required: true)]
  /// `duck-add`'s fields, which a `[[duck]]` table of the configuration takes too.
  public static let duckRule = [
    Field("name", .identifier, required: true),
    Field("targets", .array(of: .keyPath, limit: DuckRule.maximumTargets), required: true),
    Field("trigger", .text(bytes: ProtocolLimits.identifierBytes + 1)), Field("threshold", .number),
    Field("detector", .choice(DuckRule.Sidechain.Detector.allCases.map(\.rawValue))), Field("window", .seconds),
    Field("hysteresis", .number), Field("depth", .number), Field("attack", .seconds), Field("attackCurve", .curve),
    Field("hold", .seconds), Field("release", .seconds), Field("releaseCurve", .curve),
  ]

  /// Every command and its own fields (besides `requestFields`), in PROTOCOL.md's order.
  public static let commands: [(name: String, fields: [Field])] = [
    ("ping", []),
    ("version", []),
    ("status", []),
    (
      "play",
      [
        Field("path", .text(bytes: ProtocolLimits.pathBytes), required: true), Field("stream", .identifier),
        Field("gain", .number), Field("fadeIn", .seconds), Field("curve", .curve), Field("space", .space),
        Field("dbFloor", .number), Field("loop", .bool), Field("paused", .bool),
        Field("queue", .array(of: .text(bytes: ProtocolLimits.pathBytes), limit: ProtocolLimits.queueCount)),
        Field("crossfade", .seconds), Field("crossfadeCurve", .curve), Field("skipCrossfade", .seconds),
        Field("skipCurve", .curve), Field("crossfadeLevel", .number), Field("crossfadeWindow", .seconds),
        Field("loudness", .scalar),
      ]
    ),
    ("stop", transport),
    ("pause", transport),
    ("resume", transport),
    ("seek", [Field("stream", .identifier, required: true), Field("position", .seconds, required: true)]),
    ("fade", fade),
    ("fade-in", fade),
    ("fade-out", fade),
    (
      "set",
      [
        Field("key", .keyPath, required: true), Field("value", .number), Field("to", .number),
        Field("duration", .seconds), Field("curve", .curve), Field("space", .space), Field("dbFloor", .number),
        continuity,
      ]
    ),
    ("get", [Field("key", .keyPath, required: true)]),
    (
      "animate",
      [
        Field("key", .keyPath, required: true), Field("name", .identifier),
        Field("animation", .animation, required: true), continuity,
      ]
    ),
    ("cancel", [Field("key", .keyPath, required: true)]),
    ("remove", [Field("key", .keyPath, required: true), Field("name", .identifier)]),
    ("list", [Field("prefix", .text(bytes: ProtocolLimits.stringBytes))]),
    ("subscribe", events),
    ("unsubscribe", events),
    ("observe", [Field("key", .keyPath, required: true), Field("rate", .number)]),
    ("unobserve", [Field("key", .keyPath)]),
    ("batch", [Field("commands", .array(of: .command, limit: ProtocolLimits.batchCount), required: true)]),
    (
      "wait",
      [
        Field("animations", .array(of: .animationID, limit: ProtocolLimits.arrayCount)), Field("key", .keyPath),
        Field("timeout", .seconds),
      ]
    ),
    ("schedules", []),
    ("unschedule", [Field("schedule", .scheduleID), Field("tag", .identifier)]),
    ("duck-add", duckRule),
    ("duck-remove", duckName),
    ("duck-list", []),
    ("duck", duckName),
    ("unduck", duckName),
    (
      "queue-add",
      [
        Field("stream", .identifier, required: true),
        Field(
          "paths", .array(of: .text(bytes: ProtocolLimits.pathBytes), limit: ProtocolLimits.queueCount),
          required: true),
      ]
    ),
    ("queue-remove", [Field("stream", .identifier, required: true), Field("index", .number, required: true)]),
    ("queue-clear", [Field("stream", .identifier, required: true)]),
    ("queue-list", [Field("stream", .identifier)]),
    ("next", [Field("stream", .identifier, required: true)]),
    ("previous", [Field("stream", .identifier, required: true)]),
  ]

  /// The fields of command `name` (besides `requestFields`).
  public static func fields(of name: String) -> [Field] {
    commands.first { $0.name == name }?.fields ?? []
  }

  // MARK: Animations

  /// An animation object's `type`s.
  public static let animationTypes = ["basic", "keyframe", "spring", "group"]

  /// `CAMediaTiming`'s fields, which every animation object takes.
  public static let timingFields = [
    Field("beginTime", .time), Field("duration", .seconds), Field("speed", .number), Field("timeOffset", .time),
    Field("repeatCount", .countOrInfinity), Field("repeatDuration", .countOrInfinity), Field("autoreverses", .bool),
    Field("fillMode", .choice(FillMode.allCases.map(\.rawValue))), Field("removedOnCompletion", .bool),
  ]

  /// Every animation object's fields, whatever its type.
  public static let commonAnimationFields =
    [Field("type", .choice(animationTypes), required: true)] + timingFields + [
      Field("timingFunction", .curve), Field("additive", .bool), Field("cumulative", .bool),
      Field("valueSpace", .space), Field("dbFloor", .number),
    ]

  /// Only a group's children take it: the key path the child animates (default: the group's).
  public static let childField = Field("keyPath", .keyPath)

  private static let ends = [Field("from", .number), Field("to", .number), Field("by", .number)]
  private static let values = Kind.array(of: .number, limit: ProtocolLimits.arrayCount)

  /// The fields of each `type` (besides `commonAnimationFields`). A spring with `bounce` is the
  /// perceptual form (`perceptualSpringFields`); without, the physical one.
  public static let animationFields: [String: [Field]] = [
    "basic": ends,
    "keyframe": [
      Field("values", values, required: true), Field("keyTimes", values),
      Field("timingFunctions", .array(of: .curve, limit: ProtocolLimits.arrayCount)),
      Field("calculationMode", .choice(KeyframeAnimation.CalculationMode.allCases.map(\.rawValue))),
      Field("tensionValues", values), Field("continuityValues", values), Field("biasValues", values),
    ],
    "spring":
      ends + [
        Field("mass", .number), Field("stiffness", .number), Field("damping", .number),
        Field("initialVelocity", .number), Field("allowsOverdamping", .bool),
      ],
    "group": [Field("animations", .array(of: .animation, limit: ProtocolLimits.groupCount), required: true)],
  ]

  /// A spring given by its duration and bounce (`duration` is then required).
  public static let perceptualSpringFields =
    ends + [Field("bounce", .number, required: true), Field("initialVelocity", .number)]
}
