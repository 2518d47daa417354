import RampEngine

/// One duck rule as the render thread runs it: the rule, its envelope (the factor multiplied into
/// its targets), where it is in its cycle, and its sidechain. Made off the render thread
/// (`Player.prepareDuck`), which allocates its storage; freed off it too (retired by the player).
public final class DuckState: @unchecked Sendable {
  public let rule: DuckRule
  let name: String
  let factor: Double
  let attackFrames: Int64
  let holdFrames: Int64
  let releaseFrames: Int64
  let ducksMaster: Bool
  /// The ids of the streams whose gains it lowers.
  let streamTargets: ContiguousArray<String>
  /// The trigger: a stream id, or the start of one (`voice*` → `voice`, `triggerIsPrefix`).
  let trigger: String?
  let triggerIsPrefix: Bool
  let detector: LevelDetector?
  /// The trigger streams' sum as mixed, for the detector: one block (render thread only).
  let bus: UnsafeMutablePointer<Float>
  let busCapacity: Int
  var busUsed = false

  var envelope = DuckEnvelope()
  var phase = Phase.idle
  /// Set by `duck`, cleared by `unduck`.
  var manual = false
  /// Removed by `duck-remove`: it releases, then leaves.
  var removed = false

  enum Phase: Equatable {
    case idle
    /// The trigger is active: attacking or held down.
    case ducked
    /// The trigger ended: down until the sample given, then the release.
    case holding(until: Int64)
    case releasing
  }

  init(_ rule: DuckRule, sampleRate: Double, channels: Int, maxFrames: Int) {
    self.rule = rule
    name = rule.name
    factor = rule.factor
    func frames(_ seconds: Double) -> Int64 { Int64((seconds * sampleRate).rounded()) }
    attackFrames = frames(rule.attack)
    holdFrames = frames(rule.hold)
    releaseFrames = frames(rule.release)
    ducksMaster = rule.targets.contains("master.gain")
    streamTargets = ContiguousArray(
      rule.targets.compactMap { target in
        let parts = target.split(separator: ".")
        return parts.count == 3 && parts[0] == "streams" ? String(parts[1]) : nil
      })
    if let pattern = rule.trigger, pattern.hasSuffix("*") {
      trigger = String(pattern.dropLast())
      triggerIsPrefix = true
    } else {
      trigger = rule.trigger
      triggerIsPrefix = false
    }
    detector = rule.sidechain.map { LevelDetector($0, sampleRate: sampleRate) }
    busCapacity = detector == nil ? 1 : maxFrames * channels
    bus = .allocate(capacity: busCapacity)
    bus.initialize(repeating: 0, count: busCapacity)
  }

  deinit { bus.deallocate() }

  /// Whether the rule lowers stream `id`. Allocation-free.
  @inline(__always) func targets(stream id: String) -> Bool {
    var index = 0
    while index < streamTargets.count {
      if streamTargets[index] == id { return true }
      index += 1
    }
    return false
  }

  /// Whether stream `id` is one of its trigger streams. Allocation-free.
  @inline(__always) func isTriggered(by id: String) -> Bool {
    guard let trigger else { return false }
    return triggerIsPrefix ? id.hasPrefix(trigger) : id == trigger
  }

  /// Where the rule is, for `duck-list`.
  public var phaseName: String {
    switch phase {
    case .idle: return "idle"
    case .ducked: return "ducked"
    case .holding: return "holding"
    case .releasing: return "releasing"
    }
  }
}

/// A duck rule's state as `duck-list` shows it.
public struct DuckSnapshot: Sendable {
  public let rule: DuckRule
  /// `idle`, `ducked`, `holding` or `releasing`.
  public let phase: String
  /// Whether `duck` holds it down.
  public let manual: Bool
  /// The factor its targets are multiplied by now (1: not ducking).
  public let level: Double
}

/// The duck rules, on the render thread: a layer of gain factors multiplied into their targets in
/// the mix, after the targets' own (model and animated) values. It never touches a target's model
/// value. Where rules overlap on a target, the deepest wins: the target is multiplied by the
/// smallest of their factors, sample by sample.
///
/// The player calls `begin` at the mix's decision points only (every `RenderLoop.decisionFrames`
/// samples, and where a command changed what is heard: triggers are looked at, attacks and
/// releases start, events go out), and each span `listen` for every stream it mixes (the
/// sidechains hear it), `apply` for every gain it renders, and `end` (the detectors take the
/// span). None of them allocates, frees or locks. A trigger acts at the first decision point at
/// or after it: on the sample of the command that set it off (a trigger stream's `play`, `duck`),
/// within 64 samples (1.3 ms at 48 kHz) of a level detector's or of a trigger stream's end; the
/// same sample whatever the blocks.
public final class DuckLayer {
  /// Rules at once.
  public static let capacity = 64
  let sampleRate: Double
  let channels: Int
  let maxFrames: Int
  private var rules: ContiguousArray<DuckState> = []
  /// Removed rules that have released, to be handed off this thread to be freed.
  private var leaving: ContiguousArray<DuckState> = []
  /// The factors of the rules on one target, the smallest so far.
  private let factors: UnsafeMutablePointer<Float>

  init(sampleRate: Double, channels: Int, maxFrames: Int) {
    self.sampleRate = sampleRate
    self.channels = channels
    self.maxFrames = maxFrames
    rules.reserveCapacity(Self.capacity)
    leaving.reserveCapacity(Self.capacity)
    factors = .allocate(capacity: maxFrames)
  }

  deinit { factors.deallocate() }

  // MARK: Commands (render thread, between blocks)

  /// What `add` did.
  public enum Addition {
    case added
    /// The rule of the same name it replaced, for the caller to hand off this thread (with its
    /// command's ticket) to be freed there.
    case replaced(DuckState)
    /// `capacity` rules exist.
    case full
  }

  /// Adds a rule; one of the same name is replaced, its level and cycle carried over (a rule
  /// ducking now moves to the new depth over the new attack). Neither allocates nor frees.
  public func add(_ state: DuckState, now: Int64) -> Addition {
    if let index = index(of: state.name) {
      let old = rules[index]
      state.envelope = old.envelope
      state.phase = old.phase
      state.manual = old.manual
      if state.phase != .idle && state.phase != .releasing {
        state.envelope.ramp(to: state.factor, frames: state.attackFrames, curve: state.rule.attackCurve, at: now)
      }
      rules[index] = state
      return .replaced(old)
    }
    guard rules.count < Self.capacity else { return .full }
    rules.append(state)
    return .added
  }

  /// Removes rule `name`: it releases (without its hold) and then leaves. False when unknown.
  public func remove(_ name: String) -> Bool {
    guard let index = index(of: name) else { return false }
    let state = rules[index]
    state.removed = true
    state.manual = false
    return true
  }

  /// `duck` (true) or `unduck` (false) rule `name`. False when unknown.
  public func setManual(_ name: String, _ on: Bool) -> Bool {
    guard let index = index(of: name) else { return false }
    rules[index].manual = on
    return true
  }

  public func contains(_ name: String) -> Bool { index(of: name) != nil }

  /// Rule `name` (not removed), for tests.
  func rule(named name: String) -> DuckState? { index(of: name).map { rules[$0] } }

  /// The rule named `name` (not removed). An index loop: a generic search allocates its iterator
  /// in a debug build.
  private func index(of name: String) -> Int? {
    var index = 0
    while index < rules.count {
      if rules[index].name == name && !rules[index].removed { return index }
      index += 1
    }
    return nil
  }

  /// Rules in the layer, those still releasing after `duck-remove` included.
  public var count: Int { rules.count }

  /// The `index`-th rule (0 ..< `count`) as `duck-list` shows it at `sample`; nil when it was
  /// removed. Allocation-free.
  public func snapshot(at index: Int, sample: Int64) -> DuckSnapshot? {
    let rule = rules[index]
    guard !rule.removed else { return nil }
    return DuckSnapshot(
      rule: rule.rule, phase: rule.phaseName, manual: rule.manual, level: rule.envelope.value(at: sample))
  }

  // MARK: The mix (render thread, allocation-free)

  /// At the start of a span: each rule's trigger decides whether it attacks, holds or releases.
  func begin(_ state: RenderState, now: Int64) {
    var index = 0
    while index < rules.count {
      let rule = rules[index]
      index += 1
      let active = !rule.removed && (rule.manual || triggerActive(rule, streams: state.streams))
      if active {
        if rule.phase == .idle || rule.phase == .releasing {
          if rule.phase == .idle { state.post(.duckStarted(rule: rule.name, sample: now)) }
          rule.envelope.ramp(to: rule.factor, frames: rule.attackFrames, curve: rule.rule.attackCurve, at: now)
        }
        rule.phase = .ducked
        continue
      }
      if rule.phase == .ducked {
        rule.phase = .holding(until: now + (rule.removed ? 0 : rule.holdFrames))
      }
      if case .holding(let until) = rule.phase, now >= until {
        rule.envelope.ramp(to: 1, frames: rule.releaseFrames, curve: rule.rule.releaseCurve, at: now)
        rule.phase = .releasing
      }
      if rule.phase == .releasing, rule.envelope.isResting(from: now) {
        rule.phase = .idle
        state.post(.duckEnded(rule: rule.name, sample: rule.envelope.end))
      }
    }
    retireRemoved()
  }

  /// Moves removed rules that have released to `leaving`.
  private func retireRemoved() {
    var index = rules.count - 1
    while index >= 0 {
      let rule = rules[index]
      if rule.removed && rule.phase == .idle && leaving.count < leaving.capacity {
        leaving.append(rule)
        rules.remove(at: index)
      }
      index -= 1
    }
  }

  private func triggerActive(_ rule: DuckState, streams: [PlayingStream]) -> Bool {
    if let detector = rule.detector { return detector.active }
    guard rule.trigger != nil else { return false }
    var index = 0
    while index < streams.count {
      let stream = streams[index]
      index += 1
      if !stream.paused && !stream.stopping && !stream.isDrained && rule.isTriggered(by: stream.id) { return true }
    }
    return false
  }

  /// A stream's audio as mixed (`count` samples at `offset` into the span, at one gain): the
  /// sidechains it triggers hear it.
  func listen(_ id: String, _ samples: UnsafePointer<Float>, offset: Int, count: Int, gain: Float) {
    var index = 0
    while index < rules.count {
      let rule = rules[index]
      index += 1
      guard rule.detector != nil, rule.isTriggered(by: id), offset + count <= rule.busCapacity else { continue }
      GainKernel.accumulate(samples, gain: gain, count: count, into: rule.bus + offset)
      rule.busUsed = true
    }
  }

  /// The same with a gain per frame.
  func listen(_ id: String, _ audio: UnsafePointer<Float>, gain: UnsafePointer<Float>, frames: Int) {
    var index = 0
    while index < rules.count {
      let rule = rules[index]
      index += 1
      guard rule.detector != nil, rule.isTriggered(by: id), frames * channels <= rule.busCapacity else { continue }
      GainKernel.accumulate(audio, gain: gain, frames: frames, channels: channels, into: rule.bus)
      rule.busUsed = true
    }
  }

  /// The factor stream `id`'s gain is multiplied by over a span from `start` when it holds still
  /// (1 when no rule lowers it), else nil.
  func restingFactor(stream id: String, from start: Int64) -> Float? {
    var factor = 1.0
    var index = 0
    while index < rules.count {
      let rule = rules[index]
      index += 1
      guard rule.targets(stream: id) else { continue }
      guard rule.envelope.isResting(from: start) else { return nil }
      factor = min(factor, rule.envelope.to)
    }
    return Float(factor)
  }

  /// Multiplies stream `id`'s gains for samples [start, start + count) by its duck factor.
  func apply(stream id: String, start: Int64, count: Int, to gain: UnsafeMutablePointer<Float>) {
    apply(start: start, count: count, to: gain) { $0.targets(stream: id) }
  }

  /// Multiplies the master gains for samples [start, start + count) by its duck factor.
  func applyToMaster(start: Int64, count: Int, to gain: UnsafeMutablePointer<Float>) {
    apply(start: start, count: count, to: gain) { $0.ducksMaster }
  }

  private func apply(
    start: Int64, count: Int, to gain: UnsafeMutablePointer<Float>, where targeted: (DuckState) -> Bool
  ) {
    let count = min(count, maxFrames)
    var found = false
    var index = 0
    while index < rules.count {
      let rule = rules[index]
      index += 1
      guard targeted(rule), !(rule.envelope.isResting(from: start) && rule.envelope.to == 1) else { continue }
      if !found {
        factors.update(repeating: 1, count: count)
        found = true
      }
      var i = 0
      while i < count {
        factors[i] = min(factors[i], Float(rule.envelope.value(at: start + Int64(i))))
        i += 1
      }
    }
    if found { GainKernel.multiply(gain, by: factors, count: count) }
  }

  /// At the end of a span of `frames`: the detectors take what their streams played (silence
  /// from a stream that did not play), and rules that have left are handed to `retire`.
  func end(frames: Int, retire: (AnyObject) -> Void) {
    var index = 0
    while index < rules.count {
      let rule = rules[index]
      index += 1
      guard let detector = rule.detector else { continue }
      let count = min(frames * channels, rule.busCapacity)
      detector.process(rule.bus, frames: count / channels, channels: channels)
      if rule.busUsed {
        rule.bus.update(repeating: 0, count: count)
        rule.busUsed = false
      }
    }
    while let gone = leaving.popLast() { retire(gone) }
  }
}
