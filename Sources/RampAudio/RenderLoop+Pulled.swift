import CLinux
import Synchronization

/// Who runs the render step while a live player plays into a pulled output: the render thread
/// (`home`), or the output's own thread (`lent`, and `stepping` while it is in a step). Exactly one
/// runs it at a time; each hand-over is a release store (or exchange) by the thread that lets go,
/// paired with an acquire load (or exchange) by the thread that takes it, so that whatever the
/// step's state holds (the engine, the schedule, the clocks, the device) the one that takes it
/// sees as the other left it.
///
/// - The render thread lends the step (`lend`: `home` → `lent`, releasing) and sleeps on `bell`.
/// - The output's thread takes it for one step (`beginStep`: `lent` → `stepping`, acquiring) and
///   gives it back after it (`endStep`: `stepping` → `lent`, releasing); or hands it home
///   (`stepping` → `home`, releasing, and rings `bell`) when nothing is left to play.
/// - The render thread takes it back (`recall`, the output failed or shutdown: `lent` → `home`,
///   acquiring; in a step, `stepping` → `recalled`, and the output's thread, at the step's end,
///   stores `home`, releasing, and rings `bell`). A call that finds it not lent renders silence.
final class PullHandOver: Sendable {
  static let home = 0
  static let lent = 1
  static let stepping = 2
  static let recalled = 3

  let state = Atomic<Int>(PullHandOver.home)
  /// Rung when the step comes home, when the output stops asking (``stopNotice``) and at
  /// shutdown: what the render thread sleeps on while the step is lent.
  let bell: Bell
  /// What the output tells when it stops asking.
  let stopNotice: PulledOutputStop

  init() {
    bell = Bell()
    stopNotice = PulledOutputStop(bell: bell)
  }

  /// The render thread lends the step.
  func lend() {
    state.store(Self.lent, ordering: .releasing)
  }

  /// The output's thread, before a step: false when the step is not lent (render silence).
  func beginStep() -> Bool {
    state.compareExchange(expected: Self.lent, desired: Self.stepping, ordering: .acquiring).exchanged
  }

  /// The output's thread, after a step: lent on, or home when `handBack` (or when recalled).
  func endStep(handBack: Bool) {
    if !handBack,
      state.compareExchange(expected: Self.stepping, desired: Self.lent, ordering: .releasing).exchanged
    {
      return
    }
    state.store(Self.home, ordering: .releasing)
    bell.ring()
  }

  /// Whether the step is home (acquiring: what the step did is seen).
  var isHome: Bool { state.load(ordering: .acquiring) == Self.home }

  /// The render thread takes the step back, waiting (on `bell`) for a step in progress to end:
  /// within a quantum, or at once if the output stopped calling.
  func recall() {
    while true {
      let (exchanged, found) = state.compareExchange(
        expected: Self.lent, desired: Self.home, ordering: .acquiring)
      if exchanged || found == Self.home {
        if !exchanged { _ = state.load(ordering: .acquiring) }
        return
      }
      _ = state.compareExchange(expected: Self.stepping, desired: Self.recalled, ordering: .relaxed)
      bell.wait(nanoseconds: 100_000_000)
    }
  }
}

extension RenderLoop {
  /// How a spell of lending the step to a pulled output ended.
  enum PulledEnd {
    /// The output handed it back: nothing is left to play.
    case idle
    /// The output stopped asking (or would not start).
    case failed
    /// Shutdown.
    case stopped
  }

  /// The render thread's side of a pulled output (``OutputCapabilities/Delivery/pull``): lends
  /// its step to the output (``PullHandOver``) and sleeps, without a timer, until the step comes
  /// back: the output idles, fails (handed to the recovery thread, as a pushed device that fails
  /// a write; the loop keeps time by the clock meanwhile) or shutdown. Idle, it sleeps as a pushed
  /// output's idle spell does (``idleIfNothingToRender(_:)``), letting the stream go.
  func playPulled(_ buffers: RenderBuffers) {
    switch lendStep() {
    case .idle:
      // What the output's thread rendered last was silence (it hands back only then).
      buffers.mix.update(repeating: 0, count: buffers.frames * buffers.channels)
      idleIfNothingToRender(buffers)
    case .failed:
      guard let device else { return }
      handOverLost(device)
    case .stopped:
      break
    }
  }

  private func lendStep() -> PulledEnd {
    guard let device else { return .stopped }
    let pull = link.pull
    pull.stopNotice.stopped.store(false, ordering: .relaxed)
    pullHandsBack = false
    pullThreadPrepared = false
    pull.lend()
    guard device.startPulling(self) else {
      pull.recall()
      return .failed
    }
    while true {
      if !link.running.load(ordering: .acquiring) {
        pull.recall()
        return .stopped
      }
      if pull.stopNotice.stopped.exchange(false, ordering: .acquiring) {
        // One notice serves every output: a late one from an output already handed over must
        // not fail this one, which says itself whether it can still be asked for frames.
        if device.availableFrames() == nil {
          pull.recall()
          return .failed
        }
      }
      if pull.isHome { return .idle }
      pull.bell.wait(nanoseconds: -1)
    }
  }

  /// ``PulledRender``: told that the output stopped asking, the render thread takes its step back.
  var stopNotice: PulledOutputStop? { link.pull.stopNotice }

  /// The step of a live pulled output, on the output's thread: only while lent to it, with
  /// allocations guarded as on the render thread (in a debug build one traps), silence otherwise.
  func renderPulledLive(into buffer: UnsafeMutablePointer<Float>, frames: Int, timing: PullTiming?) {
    let pull = link.pull
    guard pull.beginStep() else {
      buffer.update(repeating: 0, count: frames * output.channels)
      return
    }
    if !pullThreadPrepared {
      pullThreadPrepared = true
      flushSubnormalsOnThisThread()
      // The step runs here now: in real time as the render thread would (the output's library
      // may not have asked for it), once per thread, and `status` says this thread's scheduling.
      let thread = currentThreadID()
      if link.pullThread.load(ordering: .acquiring) != thread {
        raisePriority()
        link.pullThread.store(thread, ordering: .releasing)
      }
    }
    guarded = true
    rampd_guard_this_thread(true)
    if let timing, timing.slip > 0 { scheduleHeardLater(by: timing.slip) }
    do throws(AudioError) {
      try renderPulledBlocks(into: buffer, frames: frames, timing: timing)
    } catch {
      buffer.update(repeating: 0, count: frames * output.channels)
    }
    rampd_guard_this_thread(false)
    guarded = false
    pull.endStep(handBack: pullHandsBack)
  }

  /// The output played `frames` frames without the step (a gap of its graph): every sample from
  /// here on is heard that much later than the mapping the scheduled commands were placed by
  /// (`Player.sample(heardAt:)`) said, so they move that much earlier, each still heard at its
  /// time; one that would now be past runs at once. The commands submitted by then were placed
  /// by that mapping too: they are taken first.
  func scheduleHeardLater(by frames: Int) {
    takeCommands()
    scheduled.moveEarlier(by: Int64(frames))
  }

  /// After a live pulled buffer: the device's bookkeeping as after a pushed write (it played:
  /// recovered, or arrived), and whether the step goes home to idle: nothing to render, and the
  /// last two buffers silence (as ``idleIfNothingToRender(_:)`` asks of a pushed output).
  func pulledLiveDelivered(_ buffer: UnsafeMutablePointer<Float>, frames: Int, on device: any AudioOutput) {
    framesSinceOpen += frames
    devicePlays(device)
    guard device.capabilities.stopsWhenIdle, link.healthy.load(ordering: .relaxed), !(waiting && !onFallback),
      nothingToRender
    else {
      silentBlocksWritten = 0
      return
    }
    if scheduledTooSoonForIdle(releases: device.capabilities.releasesWhenIdle) { return }
    var index = 0
    while index < frames * output.channels {
      if buffer[index] != 0 {
        silentBlocksWritten = 0
        return
      }
      index += 1
    }
    silentBlocksWritten += 1
    if silentBlocksWritten >= 2 { pullHandsBack = true }
  }
}
