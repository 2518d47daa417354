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

  /// Seconds of audio left in the device when a render thread that fills a device that rewinds
  /// wakes to refill it, unless `OutputConfiguration.marginTime` says otherwise: the margin against a
  /// late wake-up (on a loaded virtual machine one comes up to about 30 ms late). Latency does not
  /// depend on it (a change rewinds what the device holds); the rest of the buffer is filled per
  /// wake-up, so a longer buffer means fewer wake-ups.
  public static let rewindingLead = 0.05

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
