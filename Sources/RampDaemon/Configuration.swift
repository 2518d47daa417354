import FoundationEssentials
import Logging
import RampAudio
import RampEngine
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Everything `rampd` reads from its configuration file, the environment and its flags.
///
/// Layers, lowest first: built-in defaults < the file (`--config`) < environment variables
/// (`RAMPD_SECTION_KEY`) < overrides (flags). `init()` is the defaults; `load` and `parse` validate
/// every value and throw a `ConfigurationError` naming the source, the line and the key.
/// `config/rampd.toml` documents every key with its default, and `config/README.md` the rules.
public struct DaemonConfiguration: Sendable, Equatable {
  /// `[socket]`: where clients connect.
  public var socket = SocketSettings()
  /// `[output]`: the ALSA PCM (device, rate, channels, format, period, buffer, pacing, rewind).
  /// On a device that rewinds, the buffer is 200 ms unless said otherwise: robust against a
  /// render thread scheduled late, and a change is still heard within the rewind margin.
  public var output: OutputConfiguration = {
    var output = OutputConfiguration()
    output.rewindBufferTime = 0.2
    output.limiter.enabled = true
    return output
  }()
  /// `[output] wait`: a device that cannot be opened at start is opened again with backoff until
  /// it opens (the embedded output, when enabled, plays meanwhile). False: the embedded output
  /// for good, or an error when it is disabled.
  public var waitForDevice = true
  /// `[embedded-output]`: played into while the configured device cannot be opened.
  public var embeddedOutput = EmbeddedOutputSettings()
  /// `[fade]`: what `fade`, `fade-in` and `fade-out` use when a request leaves a field out.
  public var fades = FadeDefaults()
  /// `[implicit]`: the transaction a `set` without an animation gets (the implicit action).
  public var transaction = Transaction()
  /// `[gain] max`: the highest gain any key path may reach, in dB (0 dB unless raised, up to +24 dB).
  public var maxGainDecibels: Double = 0
  /// `[gain] declick`: seconds over which `remove`, `cancel` and other jumps are smoothed.
  public var declick: Double = 0.010
  /// `[[mixer]]`: ALSA simple mixer elements driven by `mixers.<name>.volume`.
  public var mixers: [MixerBindingConfiguration] = []
  /// `[[duck]]`: duck rules in force from the start.
  public var ducks: [DuckRule] = []
  /// `[playback]`: loudness-normalised playback.
  public var playback = PlaybackSettings()
  /// `[queue]`: the crossfades of a queue stream whose `play` leaves them out.
  public var queue = QueueDefaults()
  /// `[limits]`: what one daemon accepts from its clients.
  public var limits = Limits()
  /// `[media]`: which files `play` may open.
  public var media = MediaSettings()
  /// `[access]`: who may connect, checked with the peer's credentials.
  public var access = AccessSettings()
  /// `[log]`.
  public var log = LogSettings()
  /// `[state]`: where state is persisted.
  public var state = StateSettings()
  /// `[shutdown]`.
  public var shutdown = ShutdownSettings()

  /// The defaults.
  public init() {}

  /// `maxGainDecibels` as a linear amplitude (1 at 0 dB).
  public var maxGain: Double { pow(10, maxGainDecibels / 20) }

  public static func == (lhs: DaemonConfiguration, rhs: DaemonConfiguration) -> Bool {
    lhs.socket == rhs.socket && lhs.output == rhs.output && lhs.waitForDevice == rhs.waitForDevice
      && lhs.embeddedOutput == rhs.embeddedOutput
      && lhs.fades == rhs.fades && lhs.transaction.duration == rhs.transaction.duration
      && lhs.transaction.timingFunction == rhs.transaction.timingFunction
      && lhs.transaction.disableActions == rhs.transaction.disableActions
      && lhs.transaction.valueSpace == rhs.transaction.valueSpace
      && lhs.transaction.continuity == rhs.transaction.continuity && lhs.maxGainDecibels == rhs.maxGainDecibels
      && lhs.declick == rhs.declick && lhs.mixers == rhs.mixers && lhs.ducks == rhs.ducks && lhs.limits == rhs.limits
      && lhs.media == rhs.media && lhs.queue == rhs.queue && lhs.playback == rhs.playback
      && lhs.access == rhs.access && lhs.log == rhs.log && lhs.state == rhs.state
  }
}

/// `[socket]`.
public struct SocketSettings: Sendable, Equatable {
  /// Nil (or `""` in the file): `runtimeDirectory/rampd.sock` (see `DaemonConfiguration.runtimeDirectory`).
  public var path: String?
  /// Permission bits of the socket file (`"0660"` in the file); nil (`""`): see `resolvedMode`.
  public var mode: UInt16?
  /// Group owning the socket file; nil (`""`): see `resolvedGroup`. Existence is checked when
  /// the socket is created, not here, so a file can be checked on another machine.
  public var group: String?

  public init(path: String? = nil, mode: UInt16? = nil, group: String? = nil) {
    self.path = path
    self.mode = mode
    self.group = group
  }

  /// `path`, or the default for this process.
  public func resolvedPath(
    environment: [String: String] = ProcessInfo.processInfo.environment, isRoot: Bool = geteuid() == 0
  ) -> String {
    path ?? SocketLocation.defaultPath(environment: environment, isRoot: isRoot)
  }

  /// `mode`, or 0600 for a user's daemon (its socket under `$XDG_RUNTIME_DIR`), 0660 for a system one.
  public func resolvedMode(
    environment: [String: String] = ProcessInfo.processInfo.environment, isRoot: Bool = geteuid() == 0
  ) -> UInt16 {
    mode ?? (SocketLocation.isUserSession(environment: environment, isRoot: isRoot) ? 0o600 : 0o660)
  }

  /// `group`, or for a system daemon `audio` when that group exists (the group that may use sound
  /// devices is the natural one to drive them); a user's daemon keeps its own group.
  public func resolvedGroup(
    environment: [String: String] = ProcessInfo.processInfo.environment, isRoot: Bool = geteuid() == 0
  ) -> String? {
    if let group { return group }
    guard !SocketLocation.isUserSession(environment: environment, isRoot: isRoot) else { return nil }
    return Accounts.gid(Self.systemGroup) == nil ? nil : Self.systemGroup
  }

  public static let systemGroup = "audio"
}

/// `[access]`: who may connect besides root and rampd's own user, checked with the peer's
/// credentials (`SO_PEERCRED`) on top of the socket file's permissions. The socket's group is
/// always admitted: giving the socket to a group is a grant.
public struct AccessSettings: Sendable, Equatable {
  /// User names or uids; `"*"` admits whoever the socket file's permissions let connect.
  public var users: [String] = []
  /// Group names or gids: a client whose primary or supplementary group is listed is admitted.
  public var groups: [String] = []

  public init(users: [String] = [], groups: [String] = []) {
    self.users = users
    self.groups = groups
  }
}

/// `[embedded-output]`: on a machine with no usable sound card, play into a WAV file through ALSA's
/// `file` plugin, paced in real time, rather than fail.
public struct EmbeddedOutputSettings: Sendable, Equatable {
  /// False: a device that cannot be opened is an error, as with any other player.
  public var enabled = true
  /// Nil (or `""`): `output.wav` beside the socket (see `resolvedPath`).
  public var path: String?
  /// The file starts afresh once it holds this many seconds of audio, so it never grows past
  /// them (it lives in a tmpfs by default: memory); 0: it grows for as long as rampd runs.
  public var maxDuration: Double = 120

  public init(enabled: Bool = true, path: String? = nil, maxDuration: Double = 120) {
    self.enabled = enabled
    self.path = path
    self.maxDuration = maxDuration
  }

  /// `path`, or `output.wav` in the directory of the daemon's socket `socket` (its resolved
  /// path): `runtimeDirectory/output.wav` for the default socket, and beside a socket of its own
  /// for a daemon given one (`--socket`, `socket.path`), so two daemons never share the file. The
  /// runtime directory rather than the state's: the file is rewritten all the time and lives in
  /// a tmpfs there.
  public func resolvedPath(socket: String) -> String {
    path ?? directoryPart(of: socket) + "/output.wav"
  }
}

/// `[fade]`: the defaults of `fade`, `fade-in` and `fade-out`.
public struct FadeDefaults: Sendable, Equatable {
  /// Seconds.
  public var duration: Double = 1.0
  public var curve: TimingFunction = .easeInEaseOut
  public var space: ValueSpace = .amplitude
  /// The floor of the `db` value space when a request (or `space`, here or in `[implicit]`) says
  /// `db` without one: amplitudes at or below it are silence.
  public var decibelFloor: Double = ValueSpace.defaultDecibelFloor

  public init(
    duration: Double = 1.0, curve: TimingFunction = .easeInEaseOut, space: ValueSpace = .amplitude,
    decibelFloor: Double = ValueSpace.defaultDecibelFloor
  ) {
    self.duration = duration
    self.curve = curve
    self.space = space
    self.decibelFloor = decibelFloor
  }

  /// `db` at the configured floor.
  public var decibels: ValueSpace { .decibels(floor: decibelFloor) }
}

/// `[limits]`.
public struct Limits: Sendable, Equatable {
  /// Connections open at once; more are refused.
  public var clients = 64
  /// Longest request line, in bytes (newline excluded).
  public var lineLength = 65_536
  /// Streams playing (or paused) at once.
  public var streams = 16
  /// `observe` subscriptions per connection.
  public var observersPerClient = 16
  /// Highest `observe` rate, in Hz.
  public var maxObserveRate: Double = 200
  /// The sum of every `observe` rate, over all connections, in Hz: the timer wake-ups a second
  /// observing may cost the daemon.
  public var observeBudget: Double = 2000
  /// Commands scheduled with `at` and not yet applied, over all connections.
  public var pendingScheduled = 1024
  /// Animations on one key path at once (additive layers, keyframes, retargets still declicking).
  public var animationsPerKeyPath = 64
  /// Events the render thread may post before the daemon takes them (command replies included);
  /// beyond it events are dropped and announced with `events-lost`.
  public var eventQueue = 16_384
  /// Seconds a connection may go without a complete request before it is closed, unless it
  /// subscribes, observes or awaits a reply; 0 never closes one.
  public var idleTimeout: Double = 300

  public init(
    clients: Int = 64, lineLength: Int = 65_536, streams: Int = 16, observersPerClient: Int = 16,
    maxObserveRate: Double = 200, observeBudget: Double = 2000, pendingScheduled: Int = 1024,
    animationsPerKeyPath: Int = 64, idleTimeout: Double = 300, eventQueue: Int = 16_384
  ) {
    self.observeBudget = observeBudget
    self.animationsPerKeyPath = animationsPerKeyPath
    self.eventQueue = eventQueue
    self.idleTimeout = idleTimeout
    self.clients = clients
    self.lineLength = lineLength
    self.streams = streams
    self.observersPerClient = observersPerClient
    self.maxObserveRate = maxObserveRate
    self.pendingScheduled = pendingScheduled
  }
}

/// `[media]`.
public struct MediaSettings: Sendable, Equatable {
  /// Absolute directories `play` may open files under. Empty: any absolute path.
  public var roots: [String] = []

  public init(roots: [String] = []) { self.roots = roots }
}

/// `[log]`.
public struct LogSettings: Sendable, Equatable {
  public var level: Logger.Level = .info

  public init(level: Logger.Level = .info) { self.level = level }
}

/// `[shutdown]`.
public struct ShutdownSettings: Sendable, Equatable {
  /// Seconds over which SIGTERM or SIGINT fades every stream out before rampd exits (0: the
  /// declick ramp only).
  public var fade: Double = 0.3

  public init(fade: Double = 0.3) { self.fade = fade }
}

/// `[playback]`.
public struct PlaybackSettings: Sendable, Equatable {
  /// The loudness (LUFS) every `play` is normalised to unless it says otherwise; nil: off.
  public var loudness: Double?
  /// The true peak (dBTP) a normalised file's trim keeps it under.
  public var ceiling: Double = -1

  /// From well below any master's peak to full scale.
  public static let ceilingRange = -20.0...0.0

  public init() {}
}

/// `[state]`.
public struct StateSettings: Sendable, Equatable {
  /// Nil (or `""`): see `resolvedPath`.
  public var path: String?

  public init(path: String? = nil) { self.path = path }

  /// `path`, or `$XDG_STATE_HOME/rampd/state.json` (else `$HOME/.local/state/rampd/state.json`) for
  /// a user, `/var/lib/rampd/state.json` for root or when neither variable is set.
  public func resolvedPath(
    environment: [String: String] = ProcessInfo.processInfo.environment, isRoot: Bool = geteuid() == 0
  ) -> String {
    if let path { return path }
    return StateLocation.directory(name: "rampd", environment: environment, isRoot: isRoot) + "/state.json"
  }
}

extension DaemonConfiguration {
  /// Where the socket and the embedded output go by default: `$XDG_RUNTIME_DIR/rampd` when not
  /// root and `XDG_RUNTIME_DIR` is an absolute path, else `/run/rampd`.
  public static func runtimeDirectory(
    environment: [String: String] = ProcessInfo.processInfo.environment, isRoot: Bool = geteuid() == 0
  ) -> String {
    // The rule lives in RampProtocol so that rampctl finds the same socket.
    SocketLocation.runtimeDirectory(environment: environment, isRoot: isRoot)
  }

  /// Environment variables starting with `RAMPD_` that are not configuration keys as such.
  /// `RAMPD_CONFIG` is a configuration file path; `RAMPD_SOCKET` names the socket (`socket.path`)
  /// for rampd and rampctl alike, before its alias `RAMPD_SOCKET_PATH` (see
  /// `SocketLocation.environmentPath`); every other `RAMPD_*` must name a key.
  public static let reservedEnvironmentVariables: Set<String> = [
    "RAMPD_CONFIG", SocketLocation.variable, SocketLocation.aliasVariable,
  ]
}

/// A configuration value refused, naming where it came from.
///
/// `description`: `/etc/rampd/rampd.toml:12: output.rate: 1000 Hz is outside 8000...384000`,
/// `environment (RAMPD_OUTPUT_RATE): output.rate: expected an integer, got string "fast"`.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The file path, `environment (RAMPD_OUTPUT_RATE)`, or the flag (`--device`).
  public var source: String
  /// The line in the file, when known.
  public var line: Int?
  /// The key, `section.key` (`output.rate`, `mixer.master.card`), when the error concerns one.
  public var key: String?
  public var message: String
  /// The errors found after this one in the same configuration (every one is reported, not only
  /// the first), in the order of the layers and of the file's lines.
  public var more: [ConfigurationError] = []

  public init(source: String, line: Int? = nil, key: String? = nil, message: String) {
    self.source = source
    self.line = line
    self.key = key
    self.message = message
  }

  /// This error and every one after it, each on its own.
  public var all: [ConfigurationError] {
    var first = self
    first.more = []
    return [first] + more
  }

  /// Every error, one a line.
  public var description: String {
    all.map { error in
      var text = error.source
      if let line = error.line { text += ":\(line)" }
      text += ": "
      if let key = error.key { text += "\(key): " }
      return text + error.message
    }.joined(separator: "\n")
  }
}

/// The running configuration: replaced whole when rampd reloads, read by whoever needs a value
/// now (never the render thread).
public final class LiveConfiguration: Sendable {
  private let value: Mutex<DaemonConfiguration>

  public init(_ configuration: DaemonConfiguration) { value = Mutex(configuration) }

  public var current: DaemonConfiguration { value.withLock { $0 } }

  /// One setting, read in the lock without copying the whole configuration (a copy retains every
  /// string and array in it: measurable at tens of thousands of requests a second).
  public func read<Setting>(_ setting: (borrowing DaemonConfiguration) -> Setting) -> Setting {
    value.withLock { setting($0) }
  }

  func replace(with configuration: DaemonConfiguration) { value.withLock { $0 = configuration } }
}

extension DaemonConfiguration {
  /// What a player is given before it plays, live (`Daemon.start`) and offline (`rampctl render
  /// --config`) alike: the implicit transaction, which an animation given no duration takes, as
  /// in Core Animation; and the duck rules, the configuration's and then `savedDucks` (a live
  /// daemon's, from its state file).
  func setUp(_ player: Player, savedDucks: [DuckRule] = []) {
    player.submit(PreparedDefaultTransaction(transaction))
    for rule in ducks + savedDucks {
      player.submit(player.prepareDuckAddition(rule))
    }
  }
}
