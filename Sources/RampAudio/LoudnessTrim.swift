import Dispatch
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Loudness-normalised playback: the loudness a file is brought to and the true peak it is kept
/// under.
public struct LoudnessTarget: Sendable, Equatable {
  /// LUFS.
  public var loudness: Double
  /// dBTP.
  public var ceiling: Double

  public init(loudness: Double, ceiling: Double) {
    self.loudness = loudness
    self.ceiling = ceiling
  }
}

/// The fixed gain a normalised file plays with, from its measurement: `target − integrated`,
/// lowered so that `true peak + trim` stays at or under the ceiling. A file without an integrated
/// loudness (silence, shorter than a gating block) plays at its own level: a trim of 0 dB.
///
/// It is applied as the file is decoded, before its audio reaches the render thread, under every
/// gain of the mix: `streams.<id>.gain` keeps its value, and fades, ducks and crossfades act on
/// the trimmed audio exactly as on any other.
public struct LoudnessTrim: Sendable, Equatable {
  public var target: LoudnessTarget
  public var loudness: Loudness
  /// dB, 0 when the file has no integrated loudness.
  public var decibels: Double
  /// The ceiling lowered the trim below `target − integrated`.
  public var limited: Bool
  /// The measurement came from the cache.
  public var cached: Bool

  public init(target: LoudnessTarget, loudness: Loudness, cached: Bool = false) {
    self.target = target
    self.loudness = loudness
    self.cached = cached
    guard loudness.integrated.isFinite else {
      decibels = 0
      limited = false
      return
    }
    let wanted = target.loudness - loudness.integrated
    let allowed = loudness.truePeak.isFinite ? target.ceiling - loudness.truePeak : wanted
    decibels = min(wanted, allowed)
    limited = allowed < wanted
  }

  /// The trim as a linear factor.
  public var factor: Float { Float(pow(10, decibels / 20)) }

  /// The loudness the file plays at, LUFS (its own when it has none to trim).
  public var result: Double { loudness.integrated + decibels }
}

/// Measures files for loudness-normalised playback, through a ``LoudnessCache`` (the one
/// `rampctl loudness` fills): a file measured once, by either, is not measured again. Safe from
/// any thread; never the render thread (a measurement reads the whole file).
public final class LoudnessMeter: Sendable {
  public let cachePath: String
  private let cache: Mutex<LoudnessCache?> = Mutex(nil)
  /// Files measured ahead (`measureAhead`), one at a time.
  private let ahead = DispatchQueue(label: "rampd-loudness", qos: .utility)

  public init(cachePath: String) { self.cachePath = cachePath }

  /// The loudness of the file at `path` and whether it was cached. A file not in the cache is
  /// read to its end here, and its measurement saved (a cache that cannot be written is left as
  /// it is: the file is measured again next time).
  ///
  /// - Throws: what ``Loudness/measure(_:progress:)`` throws.
  public func loudness(of path: String) throws(AudioError) -> (loudness: Loudness, cached: Bool) {
    let reader = try SoundFileReader(path: path)
    guard let identity = reader.identity else { return (try Loudness.measure(reader), false) }
    if let known = lookUp(identity) { return (known, true) }
    let loudness = try Loudness.measure(reader)
    // A file that changed while it was read is not cached under either identity.
    if reader.identity == identity {
      cache.withLock { cache in
        var updated = cache ?? LoudnessCache(loading: cachePath)
        updated[identity] = loudness
        try? updated.save()
        cache = updated
      }
    }
    return (loudness, false)
  }

  /// The trim for `path` at `target`.
  public func trim(for path: String, target: LoudnessTarget) throws(AudioError) -> LoudnessTrim {
    let (loudness, cached) = try loudness(of: path)
    return LoudnessTrim(target: target, loudness: loudness, cached: cached)
  }

  /// Measures `paths` in the background, one at a time, so that each is in the cache when its
  /// turn comes. Files that fail are left for their turn to report.
  public func measureAhead(_ paths: [String]) {
    guard !paths.isEmpty else { return }
    ahead.async { [self] in
      for path in paths { _ = try? loudness(of: path) }
    }
  }

  /// The cached measurement of `identity`: from memory, else from the file (which `rampctl
  /// loudness` or another process may have added to).
  private func lookUp(_ identity: FileIdentity) -> Loudness? {
    cache.withLock { cache in
      if let known = cache?[identity] { return known }
      let loaded = LoudnessCache(loading: cachePath)
      cache = loaded
      return loaded[identity]
    }
  }
}

/// What `Player.prepare` needs to normalise a file: the target and the meter that measures it.
public struct LoudnessNormalisation: Sendable {
  public var target: LoudnessTarget
  public var meter: LoudnessMeter

  public init(target: LoudnessTarget, meter: LoudnessMeter) {
    self.target = target
    self.meter = meter
  }

  func trim(for path: String) throws(AudioError) -> LoudnessTrim { try meter.trim(for: path, target: target) }
}
