import RampEngine

/// One request line: an optional id the reply echoes, an optional schedule, and a command.
public struct Request: Sendable, Equatable {
  /// Any JSON scalar the client chose (a number or a string, usually); echoed in the reply.
  public var id: JSONValue?
  public var at: Schedule?
  /// When a scheduled request is answered: when it takes effect (the default), or at once, when
  /// it is scheduled and saved (`"ack": "scheduled"`; it then survives a restart of rampd).
  public var ack: Acknowledgement
  public var command: Command
  /// `"repeat"`: the schedule comes back after each time it takes effect (it is then always
  /// answered at once, as with `"ack": "scheduled"`).
  public var repeats: Recurrence?
  /// `"tag"`: a label for the schedule, which `unschedule` can name.
  public var tag: String?
  /// `"yield"`: a key path; the schedule is dropped when a newer request that changes it arrives.
  public var yield: String?

  public init(
    id: JSONValue? = nil, at: Schedule? = nil, ack: Acknowledgement = .applied, repeats: Recurrence? = nil,
    tag: String? = nil, yield: String? = nil, _ command: Command
  ) {
    self.id = id
    self.at = at
    self.ack = ack
    self.repeats = repeats
    self.tag = tag
    self.yield = yield
    self.command = command
  }

  /// Whether it is kept as a schedule: it has `at` or `repeat`.
  public var isScheduled: Bool { at != nil || repeats != nil }
}

/// `"ack"`: what a scheduled request's reply waits for.
public enum Acknowledgement: String, Sendable, Equatable, CaseIterable {
  case applied, scheduled
}

public enum Command: Sendable, Equatable {
  case ping
  case version
  case status
  case play(Play)
  case stop(Transport)
  case pause(Transport)
  case resume(Transport)
  case seek(Seek)
  /// `fade`, `fade-in` and `fade-out` all parse to this; `Fade.kind` says which was sent.
  case fade(Fade)
  case set(SetValue)
  case get(key: String)
  case animate(Animate)
  case cancel(key: String)
  /// `name` nil removes every animation on the key path.
  case remove(key: String, name: String?)
  case list(prefix: String?)
  /// `events` nil means every kind.
  case subscribe(events: [EventKind]?)
  case unsubscribe(events: [EventKind]?)
  /// `rate` in Hz: how often the value is reported.
  case observe(key: String, rate: Double)
  /// `key` nil stops every observation of the connection.
  case unobserve(key: String?)
  /// Applied at one sample, all or nothing. Inner requests carry neither an id nor an `at`.
  case batch([Request])
  case wait(Wait)
  /// Lists the saved schedules with their next time.
  case schedules
  /// Removes saved schedules: the one with id `schedule`, or every one tagged `tag`.
  case unschedule(schedule: UInt64?, tag: String?)
  /// `duck-add`: a duck rule (one of the same name is replaced).
  case duckAdd(DuckRule)
  case duckRemove(name: String)
  case duckList
  /// `duck` (`on` true) and `unduck`: trigger a duck rule by hand, or stop doing so.
  case duck(name: String, on: Bool)
  /// `queue-add`: files appended to the queue of stream `stream`.
  case queueAdd(stream: String, paths: [String])
  /// `queue-remove`: the queue's item at `index` (from 0).
  case queueRemove(stream: String, index: Int)
  /// `queue-clear`: every item but the playing one.
  case queueClear(stream: String)
  /// `queue-list`: the queue of stream `stream` (nil: of every queue stream).
  case queueList(stream: String?)
  /// `next` (`forward` true) and `previous`: skip to the queue's next or previous item.
  case skip(stream: String, forward: Bool)

  /// The name on the wire (`fade-out`, `unobserve`).
  public var name: String {
    switch self {
    case .ping: return "ping"
    case .version: return "version"
    case .status: return "status"
    case .play: return "play"
    case .stop: return "stop"
    case .pause: return "pause"
    case .resume: return "resume"
    case .seek: return "seek"
    case .fade(let fade): return fade.kind.rawValue
    case .set: return "set"
    case .get: return "get"
    case .animate: return "animate"
    case .cancel: return "cancel"
    case .remove: return "remove"
    case .list: return "list"
    case .subscribe: return "subscribe"
    case .unsubscribe: return "unsubscribe"
    case .observe: return "observe"
    case .unobserve: return "unobserve"
    case .batch: return "batch"
    case .wait: return "wait"
    case .schedules: return "schedules"
    case .unschedule: return "unschedule"
    case .duckAdd: return "duck-add"
    case .duckRemove: return "duck-remove"
    case .duckList: return "duck-list"
    case .duck(_, let on): return on ? "duck" : "unduck"
    case .queueAdd: return "queue-add"
    case .queueRemove: return "queue-remove"
    case .queueClear: return "queue-clear"
    case .queueList: return "queue-list"
    case .skip(_, let forward): return forward ? "next" : "previous"
    }
  }

  /// Every command name the protocol knows, in PROTOCOL.md's order.
  public static let names = ProtocolSchema.commands.map(\.name)

  /// Commands a batch cannot hold: they are about the connection or about time passing, not
  /// about one sample.
  public static let notInBatch: Set<String> = [
    "batch", "wait", "subscribe", "unsubscribe", "observe", "unobserve", "schedules", "unschedule",
  ]
}

/// `play`: start a file as a new stream.
public struct Play: Sendable, Equatable {
  public var path: String
  /// The stream id (a key-path component, `[A-Za-z0-9_-]{1,64}`); nil lets the daemon choose one.
  public var stream: String?
  /// The stream's gain (`streams.<id>.gain`); nil keeps the configured default.
  public var gain: Double?
  /// Seconds of fade-in on the stream's transport level; nil starts at once (with a declick).
  public var fadeIn: Double?
  public var curve: TimingFunction?
  /// The value space of the fade-in; nil: amplitude.
  public var space: ValueSpace?
  public var loop: Bool
  /// Load and hold at the start, waiting for `resume`.
  public var paused: Bool
  /// The files that follow `path` in the stream's queue (nil: not a queue stream). A queue
  /// stream's `loop` loops the queue.
  public var queue: [String]?
  /// The crossfades between the queue's items: at an item's end, and on a skip (nil: the
  /// configured defaults).
  public var crossfade: Crossfade
  /// Loudness-normalised playback: the file (each item of a queue) is trimmed to this target
  /// (nil: the configured default, `playback.loudness` or `queue.loudness`).
  public var loudness: LoudnessChoice?

  public init(
    path: String, stream: String? = nil, gain: Double? = nil, fadeIn: Double? = nil, curve: TimingFunction? = nil,
    space: ValueSpace? = nil, loop: Bool = false, paused: Bool = false, queue: [String]? = nil,
    crossfade: Crossfade = Crossfade(), loudness: LoudnessChoice? = nil
  ) {
    self.loudness = loudness
    self.queue = queue
    self.crossfade = crossfade
    self.path = path
    self.stream = stream
    self.gain = gain
    self.fadeIn = fadeIn
    self.curve = curve
    self.space = space
    self.loop = loop
    self.paused = paused
  }
}

/// `play`'s `loudness`: a target in LUFS (within `HumanUnits.loudnessRange`), or `off`: the file
/// plays at its own level whatever the configured default.
public enum LoudnessChoice: Sendable, Equatable {
  case target(Double)
  case off

  /// The target, nil when off.
  public var target: Double? {
    if case .target(let lufs) = self { return lufs }
    return nil
  }
}

/// A queue stream's crossfades: their lengths in seconds and curves, nil where the configured
/// default applies.
public struct Crossfade: Sendable, Equatable {
  /// At an item's end (0: gapless).
  public var duration: Double?
  public var curve: TimingFunction?
  /// On a skip (`next`, `previous`).
  public var skipDuration: Double?
  public var skipCurve: TimingFunction?
  /// The level-triggered crossfade: the level (dBFS) below which an item's tail is quiet; the
  /// automatic crossfade starts where the quiet tail begins when that is earlier.
  public var level: Double?
  /// How many seconds at an item's end are looked at for a quiet tail.
  public var window: Double?

  public static let levelRange = -120.0...0.0
  public static let defaultWindow = 10.0
  public static let maximumWindow = 60.0

  public init(
    duration: Double? = nil, curve: TimingFunction? = nil, skipDuration: Double? = nil,
    skipCurve: TimingFunction? = nil, level: Double? = nil, window: Double? = nil
  ) {
    self.duration = duration
    self.curve = curve
    self.skipDuration = skipDuration
    self.skipCurve = skipCurve
    self.level = level
    self.window = window
  }
}

/// `stop`, `pause` and `resume`.
public struct Transport: Sendable, Equatable {
  /// Nil means every stream.
  public var stream: String?
  /// Seconds of fade on the transport level; nil means the configured default.
  public var fade: Double?
  public var curve: TimingFunction?

  public init(stream: String? = nil, fade: Double? = nil, curve: TimingFunction? = nil) {
    self.stream = stream
    self.fade = fade
    self.curve = curve
  }
}

public struct Seek: Sendable, Equatable {
  public var stream: String
  /// Seconds from the start of the file.
  public var position: Double

  public init(stream: String, position: Double) {
    self.stream = stream
    self.position = position
  }
}

/// `fade`, `fade-in` and `fade-out`: an explicit ramp of one key path to a value.
public struct Fade: Sendable, Equatable {
  public enum Kind: String, Sendable, CaseIterable {
    case fade
    case fadeIn = "fade-in"
    case fadeOut = "fade-out"
  }

  /// What a fade-out does to the transport when it ends.
  public enum Then: String, Sendable, CaseIterable {
    case stop, pause
  }

  public static let defaultKey = "master.gain"
  public static let defaultName = "fade"

  public var kind: Kind
  public var key: String
  /// Nil starts from the value audible when the fade takes effect.
  public var from: Double?
  public var to: Double
  /// Seconds; nil means the configured default, 0 a jump.
  public var duration: Double?
  public var curve: TimingFunction?
  public var space: ValueSpace?
  public var continuity: Continuity
  /// The animation's name on the key path; nil means `defaultName`.
  public var name: String?
  /// Only for `fade-out`.
  public var then: Then?

  public init(
    kind: Kind, key: String = Fade.defaultKey, from: Double? = nil, to: Double? = nil, duration: Double? = nil,
    curve: TimingFunction? = nil, space: ValueSpace? = nil, continuity: Continuity = .value, name: String? = nil,
    then: Then? = nil
  ) {
    self.kind = kind
    self.key = key
    self.from = from
    self.to = to ?? kind.defaultTarget ?? 0
    self.duration = duration
    self.curve = curve
    self.space = space
    self.continuity = continuity
    self.name = name
    self.then = then
  }
}

extension Fade.Kind {
  /// `fade-in` goes to 1 and `fade-out` to 0 unless told otherwise; `fade` must be told.
  public var defaultTarget: Double? {
    switch self {
    case .fade: return nil
    case .fadeIn: return 1
    case .fadeOut: return 0
    }
  }
}

/// `set`: change a model value through the implicit action (Core Animation's `actionForKey:`).
public struct SetValue: Sendable, Equatable {
  public var key: String
  public var value: Double
  /// Seconds; nil means the configured default transaction, 0 an instant change.
  public var duration: Double?
  public var curve: TimingFunction?
  public var space: ValueSpace?
  public var continuity: Continuity?
  /// The key the value came in, `value` or `to`, so that a refusal names the field the client
  /// sent. Not part of equality: both spell the same request.
  public var valueField: String

  public init(
    key: String, value: Double, duration: Double? = nil, curve: TimingFunction? = nil, space: ValueSpace? = nil,
    continuity: Continuity? = nil, valueField: String = "value"
  ) {
    self.key = key
    self.value = value
    self.duration = duration
    self.curve = curve
    self.space = space
    self.continuity = continuity
    self.valueField = valueField
  }

  public static func == (a: SetValue, b: SetValue) -> Bool {
    a.key == b.key && a.value == b.value && a.duration == b.duration && a.curve == b.curve && a.space == b.space
      && a.continuity == b.continuity
  }
}

/// `animate`: an explicit animation with every field of Core Animation's model.
///
/// The animation's top-level `timing.beginTime` is, as sent, seconds RELATIVE to the moment the
/// command takes effect (nil: at once); the daemon adds its clock before handing it to the
/// engine, which takes absolute times. Inside a group, begin times are relative to the group.
public struct Animate: Sendable, Equatable {
  public static let defaultName = "animation"

  public var key: String
  public var name: String
  public var animation: Animation
  public var continuity: Continuity

  public init(key: String, name: String = Animate.defaultName, animation: Animation, continuity: Continuity = .value) {
    self.key = key
    self.name = name
    self.animation = animation
    self.continuity = continuity
  }

  public static func == (a: Animate, b: Animate) -> Bool {
    a.key == b.key && a.name == b.name && a.continuity == b.continuity
      && AnimationWire.same(a.animation, b.animation)
  }
}

/// `wait`: reply when animations end (or the timeout passes).
public struct Wait: Sendable, Equatable {
  /// Ids from the replies of `fade`, `animate` and `set`.
  public var animations: [UInt64]?
  /// Wait for every animation on this key path when the wait takes effect.
  public var key: String?
  /// Seconds; nil means the configured default.
  public var timeout: Double?

  public init(animations: [UInt64]? = nil, key: String? = nil, timeout: Double? = nil) {
    self.animations = animations
    self.key = key
    self.timeout = timeout
  }
}

public enum EventKind: String, Sendable, CaseIterable {
  case animationStarted = "animation-started"
  case animationFinished = "animation-finished"
  case streamStarted = "stream-started"
  case streamEnded = "stream-ended"
  case deviceFailed = "device-failed"
  case deviceRecovered = "device-recovered"
  case configReloaded = "config-reloaded"
  case underrun
  case eventsLost = "events-lost"
  case scheduleApplied = "schedule-applied"
  case scheduleFailed = "schedule-failed"
  case duckStarted = "duck-started"
  case duckEnded = "duck-ended"
  case itemStarted = "item-started"
  case itemEnded = "item-ended"
  case limiterEngaged = "limiter-engaged"
}
