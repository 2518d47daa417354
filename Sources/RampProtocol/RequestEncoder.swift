import RampEngine

extension Request {
  /// The request as a client sends it: `Request.parse(request.json) == request`. Options at
  /// their defaults are left out, so lines stay short.
  public var json: JSONValue {
    var object = JSONObject()
    if let id { object["id"] = id }
    if let at { object["at"] = at.json }
    if ack == .scheduled && repeats == nil { object["ack"] = .string(ack.rawValue) }
    object["repeat"] = repeats?.json
    object["tag"] = tag.map(JSONValue.string)
    object["yield"] = yield.map(JSONValue.string)
    object["cmd"] = .string(command.name)
    command.encodeFields(into: &object)
    return .object(object)
  }
}

extension Command {
  fileprivate func encodeFields(into object: inout JSONObject) {
    switch self {
    case .ping, .version, .status: break
    case .play(let play):
      object["path"] = .string(play.path)
      object["stream"] = play.stream.map(JSONValue.string)
      object["gain"] = play.gain.map(JSONValue.number)
      object["fadeIn"] = play.fadeIn.map(JSONValue.number)
      object["curve"] = play.curve.map(Self.curve)
      if let space = play.space {
        AnimationWire.encodeSpace(space, key: "space", omittingAmplitude: false, into: &object)
      }
      if play.loop { object["loop"] = true }
      if play.paused { object["paused"] = true }
      object["queue"] = play.queue.map { .array($0.map(JSONValue.string)) }
      object["crossfade"] = play.crossfade.duration.map(JSONValue.number)
      object["crossfadeCurve"] = play.crossfade.curve.map(Self.curve)
      object["skipCrossfade"] = play.crossfade.skipDuration.map(JSONValue.number)
      object["skipCurve"] = play.crossfade.skipCurve.map(Self.curve)
      object["crossfadeLevel"] = play.crossfade.level.map(JSONValue.number)
      object["crossfadeWindow"] = play.crossfade.window.map(JSONValue.number)
      switch play.loudness {
      case .target(let lufs)?: object["loudness"] = .number(lufs)
      case .off?: object["loudness"] = "off"
      case nil: break
      }
    case .stop(let transport), .pause(let transport), .resume(let transport):
      object["stream"] = transport.stream.map(JSONValue.string)
      object["fade"] = transport.fade.map(JSONValue.number)
      object["curve"] = transport.curve.map(Self.curve)
    case .seek(let seek):
      object["stream"] = .string(seek.stream)
      object["position"] = .number(seek.position)
    case .fade(let fade):
      object["key"] = .string(fade.key)
      object["from"] = fade.from.map(JSONValue.number)
      object["to"] = .number(fade.to)
      object["duration"] = fade.duration.map(JSONValue.number)
      object["curve"] = fade.curve.map(Self.curve)
      if let space = fade.space {
        AnimationWire.encodeSpace(space, key: "space", omittingAmplitude: false, into: &object)
      }
      if fade.continuity != .value { object["continuity"] = .string(fade.continuity.rawValue) }
      object["name"] = fade.name.map(JSONValue.string)
      object["then"] = fade.then.map { .string($0.rawValue) }
    case .set(let set):
      object["key"] = .string(set.key)
      object["value"] = .number(set.value)
      object["duration"] = set.duration.map(JSONValue.number)
      object["curve"] = set.curve.map(Self.curve)
      if let space = set.space {
        AnimationWire.encodeSpace(space, key: "space", omittingAmplitude: false, into: &object)
      }
      object["continuity"] = set.continuity.map { .string($0.rawValue) }
    case .get(let key), .cancel(let key):
      object["key"] = .string(key)
    case .animate(let animate):
      object["key"] = .string(animate.key)
      object["name"] = .string(animate.name)
      object["animation"] = AnimationWire.json(animate.animation, isChild: false)
      if animate.continuity != .value { object["continuity"] = .string(animate.continuity.rawValue) }
    case .remove(let key, let name):
      object["key"] = .string(key)
      object["name"] = name.map(JSONValue.string)
    case .list(let prefix):
      object["prefix"] = prefix.map(JSONValue.string)
    case .subscribe(let events), .unsubscribe(let events):
      object["events"] = events.map { .array($0.map { .string($0.rawValue) }) }
    case .observe(let key, let rate):
      object["key"] = .string(key)
      object["rate"] = .number(rate)
    case .unobserve(let key):
      object["key"] = key.map(JSONValue.string)
    case .batch(let requests):
      object["commands"] = .array(requests.map(\.json))
    case .wait(let wait):
      object["animations"] = wait.animations.map { .array($0.map { .integer($0) }) }
      object["key"] = wait.key.map(JSONValue.string)
      object["timeout"] = wait.timeout.map(JSONValue.number)
    case .schedules: break
    case .unschedule(let schedule, let tag):
      object["schedule"] = schedule.map { .integer($0) }
      object["tag"] = tag.map(JSONValue.string)
    case .duckAdd(let rule):
      for (key, value) in Self.duckRule(rule) { object[key] = value }
    case .duckRemove(let name), .duck(let name, _):
      object["name"] = .string(name)
    case .duckList: break
    case .queueAdd(let stream, let paths):
      object["stream"] = .string(stream)
      object["paths"] = .array(paths.map(JSONValue.string))
    case .queueRemove(let stream, let index):
      object["stream"] = .string(stream)
      object["index"] = .integer(Int64(index))
    case .queueClear(let stream), .skip(let stream, _):
      object["stream"] = .string(stream)
    case .queueList(let stream):
      object["stream"] = stream.map(JSONValue.string)
    }
  }

  private static func curve(_ curve: TimingFunction) -> JSONValue { .string(AnimationWire.curveName(curve)) }

  /// A duck rule's fields, every one of them (`duck-add`, `duck-list`).
  public static func duckRule(_ rule: DuckRule) -> JSONObject {
    var object: JSONObject = [
      "name": .string(rule.name), "targets": .array(rule.targets.map(JSONValue.string)),
      "depth": .number(rule.depth), "attack": .number(rule.attack), "attackCurve": curve(rule.attackCurve),
      "hold": .number(rule.hold), "release": .number(rule.release), "releaseCurve": curve(rule.releaseCurve),
    ]
    object["trigger"] = rule.trigger.map(JSONValue.string)
    if let sidechain = rule.sidechain {
      object["threshold"] = .number(sidechain.threshold)
      object["detector"] = .string(sidechain.detector.rawValue)
      object["window"] = .number(sidechain.window)
      object["hysteresis"] = .number(sidechain.hysteresis)
    }
    return object
  }
}
