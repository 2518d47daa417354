import CALSA

#if canImport(Glibc)
  import Glibc
#endif

/// Rewinding what the device holds and has not played yet (`snd_pcm_rewindable`,
/// `snd_pcm_rewind`): the render thread writes it again with a change applied, so the change is
/// heard within `rewindMargin` of the command, whatever the buffer. Allocation-free.
extension AlsaPCMOutput {
  /// ``OutputCapabilities/rewindMargin``.
  public static var rewindMargin: Double { OutputCapabilities.rewindMargin }

  /// ``OutputCapabilities/rewindingLead``.
  public static var rewindingLead: Double { OutputCapabilities.rewindingLead }

  /// `rewindMargin` in frames at the negotiated rate.
  public var rewindMarginFrames: Int { OutputCapabilities.rewindMarginFrames(rate: negotiated.rate) }

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
