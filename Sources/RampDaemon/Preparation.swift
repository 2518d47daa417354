import RampAudio
import RampEngine
import RampProtocol
import Synchronization

/// Turns commands into operations: everything that can be checked without the render thread's
/// state is checked here, with the configuration's defaults and limits; files are opened here.
struct Preparation: Sendable {
  let live: LiveConfiguration
  var configuration: DaemonConfiguration { live.current }
  let player: Player
  let streamNames: StreamNames
  let streamCeiling = StreamCeiling()
  /// The queues of the streams that play one.
  let queues = QueueBook()
  /// Measures files for `loudness` (cached next to the state file).
  let loudnessMeter: LoudnessMeter

  /// `elapsed`: seconds a fade is already under way (a saved schedule applied late). `confined`:
  /// for a client that may play only files under the media roots.
  func prepare(_ command: Command, elapsed: Double = 0, confined: Bool = false) throws(ProtocolError) -> Operation {
    switch command {
    case .ping:
      return .answer(["pong": true])
    case .version:
      return .answer(Self.versionResult)
    case .play(let play):
      return try prepare(play, confined: confined)
    case .stop(let transport):
      return prepareTransport(.stop, transport)
    case .pause(let transport):
      return prepareTransport(.pause, transport)
    case .resume(let transport):
      return prepareTransport(.resume, transport)
    case .seek(let seek):
      return .seek(seek)
    case .fade(let fade):
      return try prepare(fade, elapsed: elapsed)
    case .set(let set):
      return try prepare(set)
    case .get(let key):
      try Self.checkAddressable(key)
      return .query(Query(.get(key: key), player: player))
    case .animate(let animate):
      return try prepare(animate)
    case .cancel(let key):
      try Self.checkAddressable(key)
      return .cancel(key: key)
    case .remove(let key, let name):
      try Self.checkAddressable(key)
      do throws(EngineError) {
        let declick = try PreparedAnimation.declickRamp(
          seconds: configuration.declick, sampleRate: Double(player.output.rate))
        return .remove(key: key, name: name, declick: declick)
      } catch {
        throw ProtocolError(error)
      }
    case .list(let prefix):
      return .query(Query(.list(prefix: prefix, below: prefix.map { $0 + "." }), player: player))
    case .status:
      return .query(
        Query(.status, player: player, streams: streamCeiling.capacity(limit: configuration.limits.streams)))
    case .duckAdd, .duckRemove, .duckList, .duck:
      return prepareDuck(command)
    case .queueAdd, .queueRemove, .queueClear, .queueList, .skip:
      return try prepareQueueCommand(command, confined: confined)
    case .subscribe, .unsubscribe, .observe, .unobserve, .batch, .wait, .schedules, .unschedule:
      throw ProtocolError(.internalError, field: "cmd", "'\(command.name)' is handled by the session")
    }
  }

  static let versionResult: JSONValue = [
    "server": .string(Greeting.server), "version": .string(RampdVersion.current),
    "protocol": .integer(ProtocolVersion.current),
  ]

  /// What a duration of 0 stands for when an animation gives none: the implicit transaction's.
  private var defaultDuration: Double { live.read { $0.transaction.duration } }

  private var sampleRate: Double { Double(player.output.rate) }

  // MARK: Streams

  private func prepare(_ play: Play, confined: Bool) throws(ProtocolError) -> Operation {
    // One copy of the live configuration for the whole request (each read takes its lock).
    let configuration = configuration
    let media = configuration.media
    let path = try Self.resolve(play.path, in: media, field: "path", confined: confined)
    let admit = { (opened: String) throws(ProtocolError) in
      guard media.contains(openedPath: opened) else {
        throw ProtocolError(
          .forbiddenPath, field: "path", MediaPathError(path: play.path, reason: .outsideRoots).description)
      }
    }
    let gain = try acceptedGain(play.gain ?? 1, field: "gain")
    let id = play.stream ?? streamNames.next()
    let normalisation = loudness(of: play, in: configuration)
    let queue = try prepareQueue(play, first: path, confined: confined, loudness: normalisation)
    let stream: PreparedStream
    do {
      stream = try player.prepare(
        path, id: id, gain: gain, fadeIn: play.fadeIn ?? 0, curve: play.curve ?? configuration.fades.curve,
        space: play.space ?? .amplitude, loop: play.loop && queue == nil, paused: play.paused, queue: queue,
        loudness: normalisation, admit: admit)
    } catch let error as ProtocolError {
      throw error
    } catch let error as AudioError {
      throw ProtocolError(.fileError, field: "path", error.message)
    } catch let error as EngineError {
      throw ProtocolError(error)
    } catch {
      throw ProtocolError(.fileError, field: "path", "\(error)")
    }
    streamCeiling.admit(limit: configuration.limits.streams)
    return .play(stream, limit: configuration.limits.streams)
  }

  /// The loudness `play` normalises to: its own `loudness`, else `queue.loudness` for a queue
  /// (unless it is `playback`), else `playback.loudness`; nil: none.
  func loudness(of play: Play, in configuration: DaemonConfiguration) -> LoudnessNormalisation? {
    let choice =
      play.loudness ?? (play.queue != nil ? configuration.queue.loudness : nil)
      ?? configuration.playback.loudness.map(LoudnessChoice.target)
    guard let lufs = choice?.target else { return nil }
    return LoudnessNormalisation(
      target: LoudnessTarget(loudness: lufs, ceiling: configuration.playback.ceiling), meter: loudnessMeter)
  }

  /// A loudness trim as `play`'s reply and `status` show it.
  static func describe(_ trim: LoudnessTrim) -> JSONValue {
    func number(_ value: Double) -> JSONValue { value.isFinite ? .number(value) : .null }
    var object: JSONObject = [
      "target": .number(trim.target.loudness), "ceiling": .number(trim.target.ceiling),
      "integrated": number(trim.loudness.integrated), "truePeak": number(trim.loudness.truePeak),
      "range": .number(trim.loudness.range), "trim": .number(trim.decibels), "limited": .bool(trim.limited),
      "cached": .bool(trim.cached),
    ]
    // Played at its own level, and why.
    if let unmeasured = trim.loudness.unmeasured { object["unmeasured"] = .string(unmeasured.rawValue) }
    return .object(object)
  }

  private func prepareTransport(_ kind: PreparedTransport.Kind, _ transport: Transport) -> Operation {
    .transport(
      player.prepareTransport(
        kind, transport.stream, fade: transport.fade ?? 0, curve: transport.curve ?? .linear,
        capacity: streamCeiling.capacity(limit: configuration.limits.streams)),
      field: "stream")
  }

  // MARK: Ramps

  /// A fade's length: the configured default when it gives none, at least the declick ramp.
  func duration(of fade: Fade) -> Double {
    max(fade.duration ?? configuration.fades.duration, configuration.declick)
  }

  private func prepare(_ fade: Fade, elapsed: Double = 0) throws(ProtocolError) -> Operation {
    // A fade of 0 s is as quick as is click-free: the declick ramp.
    let full = duration(of: fade)
    // A transport fade cannot start part-way: what is left of it runs.
    let duration = fade.then == nil ? full : max(full - elapsed, configuration.declick)
    let curve = fade.curve ?? configuration.fades.curve
    let space = fade.space ?? configuration.fades.space
    if let then = fade.then {
      // The fade runs on the transport, so the gains keep their values for the next play.
      let stream: String?
      if fade.key == "master.gain" {
        stream = nil
      } else if let owner = InternalKeyPath.stream(of: fade.key), fade.key.hasSuffix(".gain") {
        stream = owner
      } else {
        throw ProtocolError(
          .invalidField, field: "then",
          "'then' needs key master.gain (every stream) or streams.<id>.gain, not \(fade.key)")
      }
      return .transport(
        player.prepareTransport(
          then == .stop ? .stop : .pause, stream, fade: duration, curve: curve, space: space,
          capacity: streamCeiling.capacity(limit: configuration.limits.streams)),
        field: "key")
    }
    try Self.checkAddressable(fade.key)
    var to = fade.to
    var from = fade.from
    if InternalKeyPath.isGain(fade.key) {
      to = try acceptedGain(to, field: "to")
      if let given = from { from = try acceptedGain(given, field: "from") }
    }
    let name = fade.name ?? Fade.defaultName
    var animation = Animation.basic(from: from, to: to, duration: duration, timingFunction: curve)
    animation.valueSpace = space
    do throws(EngineError) {
      // Begun `elapsed` seconds ago, it is as far along as it would be had it started on time.
      let prepared = try PreparedAnimation(
        animation, forKey: name, to: fade.key, continuity: fade.continuity,
        begin: elapsed > 0 ? .afterCommit(-elapsed) : .now, sampleRate: sampleRate,
        defaultDuration: defaultDuration)
      return .fade(
        Operation.FadePlan(
          key: fade.key, to: to, from: from, duration: duration, name: name, animation: prepared))
    } catch {
      throw ProtocolError(error)
    }
  }

  private func prepare(_ set: SetValue) throws(ProtocolError) -> Operation {
    try Self.checkAddressable(set.key)
    let value = InternalKeyPath.isGain(set.key) ? try acceptedGain(set.value, field: set.valueField) : set.value
    var transaction = live.read { $0.transaction }
    if let duration = set.duration {
      transaction.duration = duration
      if duration > 0 { transaction.disableActions = false }
    }
    if let curve = set.curve { transaction.timingFunction = curve }
    if let space = set.space { transaction.valueSpace = space }
    if let continuity = set.continuity { transaction.continuity = continuity }
    do throws(EngineError) {
      // master.gain always exists and its range is checked above; an instant change starts no
      // animation, so the engine has nothing left to refuse.
      let action = try PreparedAnimation.implicitAction(
        to: value, on: set.key, transaction: transaction, sampleRate: sampleRate)
      return .set(Operation.SetPlan(key: set.key, value: value, field: set.valueField, action: action))
    } catch {
      throw ProtocolError(error)
    }
  }

  private func prepare(_ animate: Animate) throws(ProtocolError) -> Operation {
    try Self.checkAddressable(animate.key)
    try Self.checkChildrenAddressable(animate.animation, field: "animation")
    do throws(EngineError) {
      // On the wire a begin time counts from when the command takes effect.
      let prepared = try PreparedAnimation(
        animate.animation, forKey: animate.name, to: animate.key, continuity: animate.continuity,
        begin: animate.animation.timing.beginTime.map { .afterCommit($0) } ?? .now, sampleRate: sampleRate,
        defaultDuration: defaultDuration)
      return .animate(Operation.AnimatePlan(key: animate.key, name: animate.name, animation: prepared))
    } catch {
      throw ProtocolError(error, field: error.field.map { "animation.\($0)" })
    }
  }

  // MARK: Checks

  /// `value` as a gain: refused below 0 or above `gain.max`, and the maximum itself when it is
  /// above by no more than a rounding error (a level in dB converted on another path), which
  /// the engine, which holds the property to its range, would refuse.
  private func acceptedGain(_ value: Double, field: String) throws(ProtocolError) -> Double {
    let maximum = live.read { $0.maxGain }
    guard value >= 0 else {
      throw ProtocolError(
        outOfRange: .gainMinimum, value: value, field: field, detail: "is below the minimum gain 0")
    }
    guard value <= maximum * (1 + 1e-12) else {
      let decibels = JSONValue.format(configuration.maxGainDecibels)
      throw ProtocolError(
        outOfRange: .gainMaximum, value: value, field: field,
        detail: "is above the maximum gain \(JSONValue.format(maximum)) (\(decibels) dB; raise "
          + "gain.max to allow more)")
    }
    return min(value, maximum)
  }

  /// Transport ramps belong to the daemon: addressing them would fight `pause` and `stop`.
  static func checkAddressable(_ key: String, field: String = "key") throws(ProtocolError) {
    if InternalKeyPath.isInternal(key) {
      throw ProtocolError(
        .unknownKeyPath, field: field, "'\(key)' is internal to the daemon; use pause, resume and stop")
    }
  }

  /// A group's children may name their own key paths: not a transport either.
  static func checkChildrenAddressable(_ animation: Animation, field: String) throws(ProtocolError) {
    guard case .group(let children) = animation.content else { return }
    for (index, child) in children.enumerated() {
      let childField = "\(field).animations[\(index)]"
      if let path = child.keyPath { try checkAddressable(path, field: childField + ".keyPath") }
      try checkChildrenAddressable(child, field: childField)
    }
  }

  /// Render thread: whether `key` names a property, and `value` is in its range.
  static func checkKey(_ key: String, value: Double? = nil, field: String = "value", in state: RenderState)
    -> CommandRefusal?
  {
    guard let handle = state.engine.handleIfDefined(key) else { return .unknownKey(key) }
    let range = state.engine.range(handle)
    if let value, !range.contains(value) { return .outOfRange(key: key, value: value, range: range, field: field) }
    return nil
  }

  static func checkStream(_ id: String, field: String = "stream", in state: RenderState) -> CommandRefusal? {
    state.contains(stream: id) ? nil : .unknownStream(id, field: field)
  }

  /// A seek lands inside the file: its very end is allowed (the stream ends there), beyond is refused.
  static func checkPosition(_ position: Double, of id: String, in state: RenderState) -> CommandRefusal? {
    guard let length = state.length(ofStream: id), position > length else { return nil }
    return .pastEnd(stream: id, position: position, length: length)
  }

  /// Why a key path names nothing, and what was likely meant, among the key paths `defined`:
  /// `streams.master.gain` (typed as `master`) is probably `master.gain`; `master.gian` is
  /// `master.gain` misspelt.
  static func hint(_ key: String, defined: some Collection<String>) -> String {
    let known = defined.filter { !InternalKeyPath.isInternal($0) }
    // A playing stream's key paths (its transport among them) are defined while it plays.
    if let stream = InternalKeyPath.stream(of: key), !defined.contains(where: { $0.hasPrefix("streams.\(stream).") }) {
      let meant = known.first { $0.hasPrefix(stream + ".") } ?? Suggestion.closest(to: key, among: known)
      return " (no stream '\(stream)' is playing\(meant.map { "; did you mean \($0)?" } ?? ""))"
    }
    return Suggestion.closest(to: key, among: known).map { " (did you mean \($0)?)" } ?? ""
  }

  // MARK: Results

  static func describe(_ status: AnimationStatus) -> JSONValue {
    [
      "id": .integer(status.id), "name": .string(status.key), "kind": .string(status.kind),
      "additive": .bool(status.isAdditive), "begin": .integer(status.beginSample),
      "end": status.endSample.map { .integer($0) } ?? .null,
      "progress": status.progress.map { .number($0) } ?? .null,
    ]
  }

}

/// Names for streams a `play` did not name: s1, s2, …
final class StreamNames: Sendable {
  private let counter = Mutex<Int>(0)

  func next() -> String {
    counter.withLock { value in
      value += 1
      return "s\(value)"
    }
  }
}

public enum RampdVersion {
  public static let current = RampdBuild.version
}
