/// How a retarget treats what was audible before it.
public enum Continuity: String, CaseIterable, Sendable {
  /// The value is continuous: the new animation starts from the presentation value.
  case value
  /// The slope is continuous too: a correction that fades out over the new animation carries
  /// the old rate of change into it (the additive trick UIKit adopted), so a retarget is inaudible.
  case slope
}

/// `CATransaction`: the implicit animation a model change gets.
public struct Transaction: Sendable {
  /// Seconds. 0, like `disableActions`, makes the change instant.
  public var duration: Double
  public var timingFunction: TimingFunction
  public var disableActions: Bool
  public var valueSpace: ValueSpace
  public var continuity: Continuity
  public var completion: (@Sendable (Bool) -> Void)?

  public init(
    duration: Double = 0.25, timingFunction: TimingFunction = .default, disableActions: Bool = false,
    valueSpace: ValueSpace = .amplitude, continuity: Continuity = .value,
    completion: (@Sendable (Bool) -> Void)? = nil
  ) {
    self.duration = duration
    self.timingFunction = timingFunction
    self.disableActions = disableActions
    self.valueSpace = valueSpace
    self.continuity = continuity
    self.completion = completion
  }

  /// Changes apply at the next sample, with no animation.
  public static let instant = Transaction(duration: 0, disableActions: true)
}

/// An animation's end, as a completion block or a delegate would hear of it.
public struct CompletionReport: Sendable, Equatable {
  /// The id `add` returned.
  public let id: UInt64
  public let key: String
  public let keyPath: String
  /// True when the active duration ran out; false when it was removed or replaced first.
  public let finished: Bool
  /// The engine sample at which it ended.
  public let sample: Int64
  /// The engine's own or its user's internal one (a removal's smoothing ramp, a stream's start
  /// ramp), not a client's: no client hears of it, whatever its key.
  public let isInternal: Bool
  /// Why it ended.
  public let ending: Ending

  /// Why an animation ended.
  public enum Ending: Sendable, Equatable {
    /// Its active duration ran out (`finished` true).
    case completed
    /// A later change of its property took over: an animation under the same name, or any later
    /// non-additive animation or model change when this one is not additive. `by`: the id of the
    /// animation that took over (nil: an instant change of the model value).
    case superseded(by: UInt64?)
    /// Removed (`remove`, `cancel`), or its property was.
    case removed
  }

  public init(
    id: UInt64, key: String, keyPath: String, finished: Bool, sample: Int64, isInternal: Bool = false,
    ending: Ending? = nil
  ) {
    self.id = id
    self.key = key
    self.keyPath = keyPath
    self.finished = finished
    self.sample = sample
    self.isInternal = isInternal
    self.ending = ending ?? (finished ? .completed : .removed)
  }
}

/// One animation in flight, for `list`.
public struct AnimationStatus: Sendable, Equatable {
  public let id: UInt64
  public let key: String
  public let keyPath: String
  public let kind: String
  public let isAdditive: Bool
  public let beginSample: Int64
  /// Nil when it never ends (infinite repeat or speed 0).
  public let endSample: Int64?
  /// Fraction of the active duration elapsed, 0 to 1 (nil when it never ends).
  public let progress: Double?
}

/// Key paths: dot-separated names of letters, digits, `_` and `-`, like `streams.s1.gain`.
public enum KeyPath {
  public static let maximumLength = 256

  /// The name rule: a byte one component of a key path may hold (ASCII letters, digits, `_`, `-`).
  /// Stream ids, mixer names and every other name that becomes a key path component follow it.
  @inline(__always)
  public static func isNameByte(_ byte: UInt8) -> Bool {
    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
      || byte == 0x5F || byte == 0x2D
  }

  /// Whether `name` can be one component of a key path: not empty, every byte by the name rule.
  public static func isName(_ name: some StringProtocol) -> Bool {
    !name.isEmpty && name.utf8.allSatisfy(isNameByte)
  }

  public static func validate(_ keyPath: String) throws(EngineError) {
    guard !keyPath.isEmpty, keyPath.utf8.count <= maximumLength else {
      throw EngineError(
        .invalidKeyPath, field: "key", "a key path must have 1 to \(maximumLength) characters")
    }
    // One pass over the bytes, without splitting (it runs for every request that names a key).
    var componentLength = 0
    var valid = true
    for byte in keyPath.utf8 {
      if byte == 0x2E {
        valid = valid && componentLength > 0
        componentLength = 0
      } else {
        valid = valid && isNameByte(byte)
        componentLength += 1
      }
    }
    guard valid, componentLength > 0 else {
      throw EngineError(
        .invalidKeyPath, field: "key",
        "'\(keyPath)' is not a key path: use dot-separated names of letters, digits, '_' and '-'")
    }
  }
}
