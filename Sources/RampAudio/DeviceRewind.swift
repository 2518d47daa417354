import CALSA

#if canImport(Glibc)
  import Glibc
#endif

/// Rewinding what the device holds and has not played yet (`snd_pcm_rewindable`,
/// `snd_pcm_rewind`): the render thread writes it again with a change applied, so the change is
/// heard within `rewindMargin` of the command, whatever the buffer. Allocation-free.
extension AlsaPCMOutput {
  /// Seconds of what the device holds that are never rewritten: what it plays next, which the
  /// render thread must render and write again before the device reaches it. 3 ms: rendering a
  /// block of the mix takes well under a millisecond; the rest covers a render thread scheduled
  /// late.
  public static let rewindMargin = 0.003

  /// `rewindMargin` in frames at the negotiated rate.
  public var rewindMarginFrames: Int { Int((Self.rewindMargin * Double(negotiated.rate)).rounded(.up)) }

  /// Whether a rewind may happen now: the chain allows it (`allowsRewind`) and the device is
  /// known to play in real time (it held audio after the first write).
  public var rewindsNow: Bool { allowsRewind && stopsWhenIdle }

  /// Frames the device holds and may rewind (`snd_pcm_rewindable` after `snd_pcm_avail`, which
  /// brings its pointer up to date); 0 on any error.
  public func rewindableFrames() -> Int {
    guard let pcm, snd_pcm_avail(pcm) >= 0 else { return 0 }
    return max(Int(snd_pcm_rewindable(pcm)), 0)
  }

  /// Rewinds `frames` frames of what the device holds: they are not played, and the next write
  /// goes where they were. Returns how many were rewound (0 on any error).
  public func rewind(frames: Int) -> Int {
    guard let pcm, frames > 0 else { return 0 }
    return max(Int(snd_pcm_rewind(pcm, snd_pcm_uframes_t(frames))), 0)
  }

  /// Frames the device has room for now (`snd_pcm_avail`); nil on an error (the next write
  /// recovers it).
  public func availableFrames() -> Int? {
    guard let pcm else { return nil }
    let frames = snd_pcm_avail(pcm)
    return frames < 0 ? nil : Int(frames)
  }
}
