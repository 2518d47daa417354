import RampEngine
import Testing

@testable import RampProtocol

/// Builds JSON values and requests from a list of numbers in [0, 1], so PropertyBased can
/// generate and shrink them (the approach of RampEngineTests' AnimationRecipe): every number
/// picks a kind, a field, an option or a value.
struct Recipe {
  var numbers: [Double]
  var cursor = 0

  init(numbers: [Double]) { self.numbers = numbers }

  mutating func next() -> Double {
    defer { cursor += 1 }
    return numbers.isEmpty ? 0.5 : numbers[cursor % numbers.count]
  }

  mutating func pick<T>(_ choices: [T]) -> T { choices[min(Int(next() * Double(choices.count)), choices.count - 1)] }

  mutating func chance(_ probability: Double) -> Bool { next() < probability }

  mutating func maybe<T>(_ make: (inout Recipe) -> T) -> T? { chance(0.5) ? make(&self) : nil }

  // MARK: JSON

  mutating func number() -> Double {
    switch pick([0, 1, 2, 3, 4]) {
    case 0: return (next() * 2000 - 1000).rounded()
    case 1: return next() * 2 - 1
    case 2: return pick([0, -0.0, 1e308, -1e-300, .leastNonzeroMagnitude, 9.007199254740994e15, 0.1, 1.0 / 3])
    case 3: return next() * 1e20
    default: return next() * 1e-7
    }
  }

  mutating func string() -> String {
    let palette: [String] = ["a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\u{0}", "\u{1F}", "é", "😀", "\u{2028}", "日"]
    return (0..<Int(next() * 8)).map { _ in pick(palette) }.joined()
  }

  mutating func json(depth: Int = 0) -> JSONValue {
    switch pick(depth < 4 ? [0, 1, 2, 3, 4, 5] : [0, 1, 2, 3]) {
    case 0: return .null
    case 1: return .bool(chance(0.5))
    case 2: return .number(number())
    case 3: return .string(string())
    case 4: return .array((0..<Int(next() * 4)).map { _ in json(depth: depth + 1) })
    default:
      var object = JSONObject()
      for index in 0..<Int(next() * 4) { object[string() + "\(index)"] = json(depth: depth + 1) }
      return .object(object)
    }
  }

  // MARK: Requests

  mutating func keyPath() -> String { pick(["master.gain", "streams.s1.gain", "mixers.master.volume", "x"]) }

  mutating func identifier() -> String { pick(["s1", "main", "alarm_2", "A-b", String(repeating: "x", count: 64)]) }

  mutating func seconds() -> Double { pick([0, 0.25, 2.5, 1800, next() * 10]) }

  mutating func curve() -> TimingFunction {
    switch pick([0, 1, 2, 3]) {
    case 0: return pick([.linear, .easeIn, .easeOut, .easeInEaseOut, .default])
    case 1: return .cubicBezier(UnitBezier(next(), next() * 4 - 2, next(), next() * 4 - 2))
    case 2: return .steps(2 + Int(next() * 10), pick(StepPosition.allCases))
    default: return .fade(pick(FadeShape.allCases))
    }
  }

  mutating func space() -> ValueSpace { pick([.amplitude, .power, .decibels, .decibels(floor: -96.5)]) }

  mutating func schedule() -> Schedule {
    chance(0.5) ? .delay(seconds()) : .date((next() * 4e9).rounded() + pick([0, 0.5, 0.125, next()]))
  }

  mutating func request() -> Request {
    let command = command(inBatch: false)
    // Only commands that act at a sample can be scheduled (batch included).
    let schedulable = command.name == "batch" || !Command.notInBatch.contains(command.name)
    var request = Request(
      id: maybe { $0.pick([7, "abc", 0.5, true]) }, at: schedulable ? maybe { $0.schedule() } : nil, command)
    if schedulable, chance(0.25) {
      let days = Set((0..<7).filter { _ in chance(0.6) }).union([1])
      request.repeats =
        chance(0.5) ? .every(seconds: 1 + (next() * 1000).rounded()) : .daily(seconds: Int(next() * 86_399), days: days)
      if case .daily = request.repeats { request.at = nil }
      request.ack = .scheduled
      request.tag = maybe { $0.identifier() }
      request.yield = maybe { $0.keyPath() }
    }
    return request
  }

  mutating func command(inBatch: Bool) -> Command {
    let names = inBatch ? Command.names.filter { !Command.notInBatch.contains($0) } : Command.names
    switch pick(names) {
    case "ping": return .ping
    case "version": return .version
    case "status": return .status
    case "play":
      return .play(
        Play(
          path: pick(["/srv/a.flac", "b c.wav", "日本.ogg"]), stream: maybe { $0.identifier() },
          gain: maybe { $0.next() }, fadeIn: maybe { $0.seconds() }, curve: maybe { $0.curve() },
          loop: chance(0.5), paused: chance(0.5)))
    case "stop": return .stop(transport())
    case "pause": return .pause(transport())
    case "resume": return .resume(transport())
    case "seek": return .seek(Seek(stream: identifier(), position: seconds()))
    case "fade", "fade-in", "fade-out":
      let kind = pick(Fade.Kind.allCases)
      let key = keyPath()
      return .fade(
        Fade(
          kind: kind, key: key, from: maybe { $0.next() }, to: kind == .fade ? next() : maybe { $0.next() },
          duration: maybe { $0.seconds() }, curve: maybe { $0.curve() }, space: maybe { $0.space() },
          continuity: pick(Continuity.allCases), name: maybe { $0.identifier() },
          then: kind == .fadeOut && RequestParser.isTransportKey(key) ? maybe { $0.pick(Fade.Then.allCases) } : nil))
    case "set":
      return .set(
        SetValue(
          key: keyPath(), value: next() * 2 - 1, duration: maybe { $0.seconds() }, curve: maybe { $0.curve() },
          space: maybe { $0.space() }, continuity: maybe { $0.pick(Continuity.allCases) }))
    case "get": return .get(key: keyPath())
    case "animate":
      return .animate(
        Animate(key: keyPath(), name: identifier(), animation: animation(), continuity: pick(Continuity.allCases)))
    case "cancel": return .cancel(key: keyPath())
    case "remove": return .remove(key: keyPath(), name: maybe { $0.identifier() })
    case "list": return .list(prefix: maybe { $0.pick(["streams.", "", "master"]) })
    case "subscribe": return .subscribe(events: maybe { $0.events() })
    case "unsubscribe": return .unsubscribe(events: maybe { $0.events() })
    case "observe": return .observe(key: keyPath(), rate: pick([20, 0.5, 1000, 60]))
    case "unobserve": return .unobserve(key: maybe { $0.keyPath() })
    case "batch": return .batch((0..<(1 + Int(next() * 3))).map { _ in Request(command(inBatch: true)) })
    case "schedules": return .schedules
    case "unschedule":
      return chance(0.5)
        ? .unschedule(schedule: UInt64(next() * 1000), tag: nil) : .unschedule(schedule: nil, tag: identifier())
    case "duck-add":
      let trigger = maybe { $0.identifier() + $0.pick(["", "*"]) }
      let sidechain =
        trigger == nil
        ? nil
        : maybe {
          DuckRule.Sidechain(
            threshold: -$0.next() * 120, detector: $0.pick(DuckRule.Sidechain.Detector.allCases),
            window: 0.001 + $0.next() * 4, hysteresis: $0.next() * 24)
        }
      return .duckAdd(
        DuckRule(
          name: identifier(), targets: pick([["master.gain"], ["streams.bed.gain", "master.gain"]]), trigger: trigger,
          sidechain: sidechain, depth: 0.5 + next() * 100, attack: seconds(), attackCurve: curve(), hold: seconds(),
          release: seconds(), releaseCurve: curve()))
    case "duck-remove": return .duckRemove(name: identifier())
    case "duck-list": return .duckList
    case "duck", "unduck": return .duck(name: identifier(), on: chance(0.5))
    case "queue-add": return .queueAdd(stream: identifier(), paths: [pick(["/srv/a.flac", "b c.wav", "日本.ogg"])])
    case "queue-remove": return .queueRemove(stream: identifier(), index: pick([0, 1, 7]))
    case "queue-clear": return .queueClear(stream: identifier())
    case "queue-list": return .queueList(stream: maybe { $0.identifier() })
    case "next", "previous": return .skip(stream: identifier(), forward: chance(0.5))
    default:
      let byIDs = chance(0.5)
      return .wait(
        Wait(
          animations: byIDs ? [UInt64(next() * 1000), 9_007_199_254_740_991] : nil, key: byIDs ? nil : keyPath(),
          timeout: maybe { $0.seconds() }))
    }
  }

  mutating func transport() -> Transport {
    Transport(stream: maybe { $0.identifier() }, fade: maybe { $0.seconds() }, curve: maybe { $0.curve() })
  }

  mutating func events() -> [EventKind] { (0..<(1 + Int(next() * 3))).map { _ in pick(EventKind.allCases) } }

  /// A valid animation of every kind, with every option somewhere.
  mutating func animation(depth: Int = 0) -> Animation {
    let space = space()
    // dB and power have no negative values.
    let value = { (recipe: inout Recipe) -> Double in space == .amplitude ? recipe.next() * 2 - 1 : recipe.next() }
    let content: Animation.Content
    switch pick(depth < 2 ? [0, 1, 2, 3] : [0, 1, 2]) {
    case 0:
      // to − by could be negative, which dB and power refuse.
      let fields = pick(
        [(true, true, false), (true, false, true), (false, false, false)]
          + (space == .amplitude ? [(false, true, true)] : []))
      content = .basic(
        BasicAnimation(
          from: fields.0 ? value(&self) : nil, to: fields.1 ? value(&self) : nil, by: fields.2 ? next() : nil))
    case 1:
      let count = 1 + Int(next() * 5)
      let mode = pick(KeyframeAnimation.CalculationMode.allCases)
      var keyframes = KeyframeAnimation(values: (0..<count).map { _ in value(&self) }, calculationMode: mode)
      if chance(0.6) {
        var times = (0..<count).map { _ in next() }.sorted()
        times[0] = 0
        if count > 1 { times[count - 1] = 1 }
        keyframes.keyTimes = times
      }
      if mode == .linear || mode == .cubic, chance(0.5) {
        keyframes.timingFunctions = (0..<(count - 1)).map { _ in curve() }
      }
      if mode == .cubic {
        keyframes.tensionValues = maybe { r in (0..<count).map { _ in r.next() * 2 - 1 } }
        keyframes.continuityValues = maybe { r in (0..<count).map { _ in r.next() * 2 - 1 } }
        keyframes.biasValues = maybe { r in (0..<count).map { _ in r.next() * 2 - 1 } }
      }
      content = .keyframes(keyframes)
    case 2:
      let parameters = SpringParameters(
        mass: pick([1, 0.5, 3]), stiffness: pick([100, 20, 800]), damping: pick([0, 10, 40]),
        initialVelocity: pick([0, 2, -1]), allowsOverdamping: chance(0.5))
      content = .spring(SpringAnimation(from: maybe { value(&$0) }, to: value(&self), parameters: parameters))
    default:
      content = .group(
        (0..<(1 + Int(next() * 3))).map { _ in
          var child = animation(depth: depth + 1)
          child.keyPath = maybe { $0.keyPath() }
          return child
        })
    }
    var timing = MediaTiming()
    timing.beginTime = maybe { $0.pick([0, 0.5, -0.25, 3]) }
    timing.duration = pick([0, 0.3, 2])
    timing.speed = pick([1, 0.5, 2, 0])
    timing.timeOffset = pick([0, 0.1])
    switch pick([0, 1, 2]) {
    case 0: timing.repeatCount = pick([2.5, .infinity])
    case 1: timing.repeatDuration = pick([4, .infinity])
    default: break
    }
    timing.autoreverses = chance(0.3)
    timing.fillMode = pick(FillMode.allCases)
    timing.removedOnCompletion = chance(0.7)
    return Animation(
      content, timing: timing, timingFunction: curve(), additive: chance(0.3), cumulative: chance(0.3),
      valueSpace: space)
  }
}

/// Parses a request line, failing the test on a refusal.
func request(_ line: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> Request {
  switch Request.parse(line: line).result {
  case .success(let request): return request
  case .failure(let error):
    Issue.record("refused \(line): \(error)", sourceLocation: sourceLocation)
    throw error
  }
}

/// The refusal of a request line (nil when it parsed).
func refusal(_ line: String) -> ProtocolError? {
  if case .failure(let error) = Request.parse(line: line).result { return error }
  return nil
}

extension Animation {
  func with(_ change: (inout Animation) -> Void) -> Animation {
    var copy = self
    change(&copy)
    return copy
  }
}
