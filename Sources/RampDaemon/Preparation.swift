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

  /// `elapsed`: seconds a fade is already under way (a saved schedule applied late). `confined`:
  /// for a client that may play only files under the media roots.
  func prepare(_ command: Command, elapsed: Double = 0, confined: Bool = false) throws(ProtocolError) -> Operation {
    switch command {
    case .ping:
      return Operation { _, _ in ["pong": true] }
    case .version:
      return Operation { _, _ in Self.versionResult }
    case .play(let play):
      return try prepare(play, confined: confined)
    case .stop(let transport):
      return prepareTransport(transport, stop: true)
    case .pause(let transport):
      return prepareTransport(transport, stop: false)
    case .resume(let transport):
      return prepareResume(transport)
    case .seek(let seek):
      let player = player
      return Operation(
        check: { state in
          Self.checkStream(seek.stream, in: state) ?? Self.checkPosition(seek.position, of: seek.stream, in: state)
        },
        apply: { state, _ in
          player.seek(seek.stream, to: seek.position, in: state)
          return ["stream": .string(seek.stream), "position": .number(seek.position)]
        })
    case .fade(let fade):
      return try prepare(fade, elapsed: elapsed)
    case .set(let set):
      return try prepare(set)
    case .get(let key):
      try Self.checkAddressable(key)
      return Operation(check: { Self.checkKey(key, in: $0) }, apply: { state, _ in Self.describe(key, in: state) })
    case .animate(let animate):
      return try prepare(animate)
    case .cancel(let key):
      try Self.checkAddressable(key)
      return Operation(
        check: { Self.checkKey(key, in: $0) },
        apply: { state, _ throws(ProtocolError) in
          do throws(EngineError) {
            try state.engine.cancel(key)
            return ["key": .string(key), "value": .number(try state.engine.model(key))]
          } catch {
            throw ProtocolError(error)
          }
        })
    case .remove(let key, let name):
      try Self.checkAddressable(key)
      let declick = configuration.declick
      return Operation(
        check: { Self.checkKey(key, in: $0) },
        apply: { state, _ throws(ProtocolError) in
          do throws(EngineError) {
            if let name {
              try state.engine.removeAnimation(forKey: name, from: key, declick: declick)
            } else {
              try state.engine.removeAllAnimations(from: key, declick: declick)
            }
            return ["key": .string(key), "value": .number(try state.engine.model(key))]
          } catch {
            throw ProtocolError(error, field: error.code == .unknownAnimation ? "name" : nil)
          }
        })
    case .list(let prefix):
      return Operation { state, _ in Self.list(prefix: prefix, in: state) }
    case .status:
      return Operation { state, _ in
        [
          "sample": .integer(state.engine.now),
          "master": Self.level("master.gain", in: state),
          "streams": .array(state.streamSnapshots.map { Self.describe($0, in: state) }),
        ]
      }
    case .duckAdd, .duckRemove, .duckList, .duck:
      return prepareDuck(command)
    case .subscribe, .unsubscribe, .observe, .unobserve, .batch, .wait, .schedules, .unschedule:
      throw ProtocolError(.internalError, field: "cmd", "'\(command.name)' is handled by the session")
    }
  }

  static let versionResult: JSONValue = [
    "server": .string(Greeting.server), "version": .string(RampdVersion.current),
    "protocol": .integer(ProtocolVersion.current),
  ]

  // MARK: Streams

  private func prepare(_ play: Play, confined: Bool) throws(ProtocolError) -> Operation {
    // One copy of the live configuration for the whole request (each read takes its lock).
    let configuration = configuration
    let path: String
    let media = configuration.media
    do {
      path = try media.resolve(play.path, confined: confined)
    } catch {
      switch error.reason {
      case .outsideRoots, .relativeWithoutRoots, .confinedWithoutRoots:
        throw ProtocolError(.forbiddenPath, field: "path", error.description)
      default: throw ProtocolError(.fileError, field: "path", error.description)
      }
    }
    let admit = { (opened: String) throws(ProtocolError) in
      guard media.contains(openedPath: opened) else {
        throw ProtocolError(
          .forbiddenPath, field: "path", MediaPathError(path: play.path, reason: .outsideRoots).description)
      }
    }
    let gain = play.gain ?? 1
    try checkGain(gain, field: "gain")
    let id = play.stream ?? streamNames.next()
    let start: @Sendable (RenderState) -> Result<Void, EngineError>
    do {
      start = try player.prepare(
        path, id: id, gain: gain, fadeIn: play.fadeIn ?? 0, curve: play.curve ?? configuration.fades.curve,
        space: play.space ?? .amplitude, loop: play.loop, paused: play.paused, admit: admit)
    } catch let error as ProtocolError {
      throw error
    } catch let error as AudioError {
      throw ProtocolError(.fileError, field: "path", error.message)
    } catch {
      throw ProtocolError(.fileError, field: "path", "\(error)")
    }
    let limit = configuration.limits.streams
    return Operation(
      check: { state in
        if state.contains(stream: id) {
          return ProtocolError(.streamExists, field: "stream", "a stream '\(id)' is already playing")
        }
        if state.streamIDs.count >= limit {
          return ProtocolError(
            .limitExceeded, field: "stream", "\(limit) streams are playing, the most allowed (limits.streams)")
        }
        return nil
      },
      apply: { state, ticket throws(ProtocolError) in
        if case .failure(let error) = start(state) { throw ProtocolError(error) }
        let fadeIn = try? state.engine.animations(on: "streams.\(id).gain").first { $0.key == "fade-in" }
        if let fadeIn {
          ticket.events.append(
            .animationStarted(id: fadeIn.id, key: fadeIn.keyPath, name: fadeIn.key, sample: fadeIn.beginSample))
        }
        return ["stream": .string(id), "path": .string(path), "animation": fadeIn.map { .integer($0.id) } ?? .null]
      })
  }

  private func prepareTransport(_ transport: Transport, stop: Bool) -> Operation {
    transportOperation(
      stream: transport.stream, fade: transport.fade ?? 0, curve: transport.curve ?? .linear, space: .amplitude,
      stop: stop)
  }

  /// `field`: what named the stream (a fade-out's `key`).
  private func transportOperation(
    stream: String?, fade: Double, curve: TimingFunction, space: ValueSpace, stop: Bool, field: String = "stream"
  ) -> Operation {
    let player = player
    return Operation(
      check: { state in stream.flatMap { Self.checkStream($0, field: field, in: state) } },
      apply: { state, ticket in
        let changes =
          stop
          ? player.stop(stream, fade: fade, curve: curve, space: space, in: state)
          : player.pause(stream, fade: fade, curve: curve, space: space, in: state)
        return Self.describe(changes)
      })
  }

  private func prepareResume(_ transport: Transport) -> Operation {
    let player = player
    let stream = transport.stream
    let fade = transport.fade ?? 0
    let curve = transport.curve ?? .linear
    return Operation(
      check: { state in stream.flatMap { Self.checkStream($0, in: state) } },
      apply: { state, _ in
        Self.describe(player.resume(stream, fade: fade, curve: curve, in: state))
      })
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
      return transportOperation(
        stream: stream, fade: duration, curve: curve, space: space, stop: then == .stop, field: "key")
    }
    try Self.checkAddressable(fade.key)
    if InternalKeyPath.isGain(fade.key) {
      try checkGain(fade.to, field: "to")
      if let from = fade.from { try checkGain(from, field: "from") }
    }
    let key = fade.key
    let name = fade.name ?? Fade.defaultName
    var animation = Animation.basic(from: fade.from, to: fade.to, duration: duration, timingFunction: curve)
    animation.valueSpace = space
    let continuity = fade.continuity
    let animationToAdd = animation
    return Operation(
      check: { state in
        Self.checkKey(key, value: fade.to, field: "to", in: state)
          ?? fade.from.flatMap { Self.checkKey(key, value: $0, field: "from", in: state) }
      },
      apply: {
        state, ticket throws(ProtocolError) in
        let engine = state.engine
        do throws(EngineError) {
          // The model becomes the target, so the value stays there when the fade is over; the
          // fade starts from the value audible now, so nothing jumps.
          var ramp = animationToAdd
          if case .basic(let basic) = ramp.content, basic.from == nil {
            ramp.content = .basic(BasicAnimation(from: try engine.presentation(key), to: basic.to))
          }
          // Begun `elapsed` seconds ago, it is as far along as it would be had it started on time.
          if elapsed > 0 { ramp.timing.beginTime = Double(engine.now) / engine.sampleRate - elapsed }
          try engine.set(key, to: fade.to, transaction: .instant)
          let id = try engine.add(ramp, forKey: name, to: key, continuity: continuity)
          ticket.events.append(.animationStarted(id: id, key: key, name: name, sample: engine.now))
          return [
            "key": .string(key), "animation": .integer(id), "to": .number(fade.to), "duration": .number(duration),
          ]
        } catch {
          throw ProtocolError(error)
        }
      })
  }

  private func prepare(_ set: SetValue) throws(ProtocolError) -> Operation {
    try Self.checkAddressable(set.key)
    if InternalKeyPath.isGain(set.key) { try checkGain(set.value, field: set.valueField) }
    var transaction = live.read { $0.transaction }
    if let duration = set.duration {
      transaction.duration = duration
      if duration > 0 { transaction.disableActions = false }
    }
    if let curve = set.curve { transaction.timingFunction = curve }
    if let space = set.space { transaction.valueSpace = space }
    if let continuity = set.continuity { transaction.continuity = continuity }
    let chosen = transaction
    let key = set.key
    // master.gain always exists and its range is checked above; an instant change starts no
    // animation, so the engine has nothing left to refuse.
    let instant = chosen.disableActions || chosen.duration == 0
    // Built here rather than on the render thread, where an instant change starts no animation.
    let instantResult: JSONValue = ["key": .string(key), "animation": .null, "value": .number(set.value)]
    return Operation(
      check: { state in Self.checkKey(key, value: set.value, field: set.valueField, in: state) },
      foregoneResult: key == "master.gain" && instant ? instantResult : nil,
      apply: {
        state, ticket throws(ProtocolError) in
        do throws(EngineError) {
          guard let id = try state.engine.set(key, to: set.value, transaction: chosen) else { return instantResult }
          ticket.events.append(
            .animationStarted(id: id, key: key, name: AnimationEngine.implicitActionKey, sample: state.engine.now))
          return ["key": .string(key), "animation": .integer(id), "value": .number(set.value)]
        } catch {
          throw ProtocolError(error)
        }
      })
  }

  private func prepare(_ animate: Animate) throws(ProtocolError) -> Operation {
    try Self.checkAddressable(animate.key)
    try Self.checkChildrenAddressable(animate.animation, field: "animation")
    let key = animate.key
    let name = animate.name
    let animation = animate.animation
    let continuity = animate.continuity
    return Operation(
      check: { state in Self.checkKey(key, in: state) },
      apply: { state, ticket throws(ProtocolError) in
        let engine = state.engine
        var placed = animation
        // On the wire a begin time counts from when the command takes effect.
        if let begin = placed.timing.beginTime {
          placed.timing.beginTime = Double(engine.now) / engine.sampleRate + begin
        }
        do throws(EngineError) {
          let id = try engine.add(placed, forKey: name, to: key, continuity: continuity)
          let begin = (try? engine.animations(on: key).first { $0.id == id }?.beginSample) ?? engine.now
          ticket.events.append(.animationStarted(id: id, key: key, name: name, sample: begin))
          return ["key": .string(key), "animation": .integer(id)]
        } catch {
          throw ProtocolError(error, field: error.field.map { "animation.\($0)" })
        }
      })
  }

  // MARK: Checks

  private func checkGain(_ value: Double, field: String) throws(ProtocolError) {
    let maximum = live.read { $0.maxGain }
    guard value >= 0 else {
      throw ProtocolError(.outOfRange, field: field, "a gain must be at least 0, got \(JSONValue.format(value))")
    }
    guard value <= maximum * (1 + 1e-12) else {
      let decibels = JSONValue.format(configuration.maxGainDecibels)
      throw ProtocolError(
        .outOfRange, field: field,
        "\(JSONValue.format(value)) is above the maximum gain \(JSONValue.format(maximum)) (\(decibels) dB; raise "
          + "gain.max to allow more)")
    }
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

  static func checkKey(_ key: String, value: Double? = nil, field: String = "value", in state: RenderState)
    -> ProtocolError?
  {
    guard state.engine.contains(key) else {
      return ProtocolError(.unknownKeyPath, field: "key", "no property '\(key)'\(Self.hint(key, in: state))")
    }
    if let value, let range = try? state.engine.range(key), !range.contains(value) {
      return ProtocolError(
        .outOfRange, field: field, "\(value) is outside \(key)'s range \(range.lowerBound)...\(range.upperBound)")
    }
    return nil
  }

  static func checkStream(_ id: String, field: String = "stream", in state: RenderState) -> ProtocolError? {
    state.contains(stream: id)
      ? nil : ProtocolError(.unknownStream, field: field, "no stream '\(id)' is playing")
  }

  /// A seek lands inside the file: its very end is allowed (the stream ends there), beyond is refused.
  static func checkPosition(_ position: Double, of id: String, in state: RenderState) -> ProtocolError? {
    guard let length = state.length(ofStream: id), position > length else { return nil }
    return ProtocolError(
      .outOfRange, field: "position",
      "position: \(JSONValue.format(position)) s is past the end of stream '\(id)', whose file is"
        + " \(JSONValue.format((length * 1000).rounded() / 1000)) s long")
  }

  /// Why a key path names nothing, and what was likely meant: `streams.master.gain` (typed as
  /// `master`) is probably `master.gain`; `master.gian` is `master.gain` misspelt.
  private static func hint(_ key: String, in state: RenderState) -> String {
    let known = state.engine.keyPaths.filter { !InternalKeyPath.isInternal($0) }
    if let stream = InternalKeyPath.stream(of: key), !state.contains(stream: stream) {
      let meant = known.first { $0.hasPrefix(stream + ".") } ?? Suggestion.closest(to: key, among: known)
      return " (no stream '\(stream)' is playing\(meant.map { "; did you mean \($0)?" } ?? ""))"
    }
    return Suggestion.closest(to: key, among: known).map { " (did you mean \($0)?)" } ?? ""
  }

  // MARK: Results

  static func describe(_ key: String, in state: RenderState) -> JSONValue {
    let engine = state.engine
    let range = (try? engine.range(key)) ?? 0...0
    return [
      "key": .string(key),
      "model": .number((try? engine.model(key)) ?? .nan),
      "presentation": .number((try? engine.presentation(key)) ?? .nan),
      "range": [.number(range.lowerBound), .number(range.upperBound)],
      "sample": .integer(engine.now),
    ]
  }

  static func list(prefix: String?, in state: RenderState) -> JSONValue {
    let engine = state.engine
    let keys = engine.keyPaths.filter { key in
      !InternalKeyPath.isInternal(key) && (prefix.map { key == $0 || key.hasPrefix($0 + ".") } ?? true)
    }
    let properties: [JSONValue] = keys.map { key in
      var object = describe(key, in: state).objectValue ?? JSONObject()
      object["sample"] = nil
      object["animations"] = .array(((try? engine.animations(on: key)) ?? []).map(describe))
      return .object(object)
    }
    return ["sample": .integer(engine.now), "properties": .array(properties)]
  }

  static func describe(_ status: AnimationStatus) -> JSONValue {
    [
      "id": .integer(status.id), "name": .string(status.key), "kind": .string(status.kind),
      "additive": .bool(status.isAdditive), "begin": .integer(status.beginSample),
      "end": status.endSample.map { .integer($0) } ?? .null,
      "progress": status.progress.map { .number($0) } ?? .null,
    ]
  }

  static func describe(_ stream: StreamSnapshot, in state: RenderState) -> JSONValue {
    [
      "stream": .string(stream.id), "path": .string(stream.path), "paused": .bool(stream.paused),
      "stopping": .bool(stream.stopping), "loop": .bool(stream.loops), "position": .number(stream.seconds),
      "gain": level("streams.\(stream.id).gain", in: state),
    ]
  }

  /// `{"model": 0.5, "audible": 0.42}`: where a gain is going and what plays now.
  static func level(_ key: String, in state: RenderState) -> JSONValue {
    [
      "model": .number((try? state.engine.model(key)) ?? .nan),
      "audible": .number((try? state.engine.presentation(key)) ?? .nan),
    ]
  }

  static func describe(_ changes: [TransportChange]) -> JSONValue {
    [
      "streams": .array(changes.map { .string($0.stream) }),
      "animations": .array(changes.compactMap { $0.animation.map { .integer($0) } }),
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
  public static let current = "0.2.0"
}
