import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

extension RenderLoop {
  /// With clock pacing, until the next block may be written, sleeps on the command bell: a
  /// command arriving meanwhile is applied at once (to the next block, whose first sample is the
  /// engine's now) and its reply leaves, instead of waiting for the next block start. Blocks go
  /// out back to back while they fit in the buffer ahead of the clock; once it is full, the
  /// sleep lasts until only the margin is left ahead (`refillLead`), so one wake-up serves
  /// (buffer − margin) of audio. With device pacing the write itself blocks; commands then wait
  /// for the block boundary. Returns true when it waited (a new batch of blocks starts).
  func takeCommandsWhileWaiting(for device: any AudioOutput, frames: Int) -> Bool {
    var waited = false
    while link.running.load(ordering: .relaxed) {
      let wait = device.secondsUntilWritable(frames: frames, refillAt: refillLead(on: device))
      if wait <= 0 { break }
      waited = true
      guard link.commandBell.wait(seconds: wait) else { continue }
      takeCommands()
      flushEvents()
    }
    return waited
  }

  /// With device pacing, a stream whose decoder is behind is waited for instead of played as
  /// silence while the device has audio queued to cover the wait (less a period, the margin), and
  /// without limit on a device that has no clock: it takes audio as fast as it comes, so nothing
  /// is late for it, and what it records is the whole file. Commands are taken meanwhile.
  func waitForStreams(on device: any AudioOutput, frames: Int) {
    let noClock = device.capabilities.clock == .none
    if noClock {
      waitForEveryStream(frames: frames)
      return
    }
    // Monotonic nanoseconds the wait may last until (nil: no limit), reckoned at the first wait.
    var deadline: Int64?
    var reckoned = noClock
    while link.running.load(ordering: .relaxed), let decoder = firstDecoderBehind(frames: frames) {
      // A decoder woken once per half ring, not once per block, when nothing limits the wait.
      let enough = (frames + declickFrames) * output.channels
      guard decoder.awaitSamples(noClock ? max(decoder.lowWater, enough) : enough) else { continue }
      if !reckoned {
        reckoned = true
        let covered = device.delayFrames - output.periodFrames
        guard covered > 0 else { return }
        deadline = monotonicNanoseconds() + Int64(covered) * 1_000_000_000 / Int64(output.rate)
      }
      // Without a limit, it still looks again now and then (a decoder stuck on a slow disk).
      let left = deadline.map { $0 - monotonicNanoseconds() } ?? 100_000_000
      guard left > 0 else { return }
      if link.commandBell.wait(nanoseconds: left) {
        takeCommands()
        flushEvents()
      }
    }
  }

  /// Without a clock (a sink, or a device that takes audio as fast as it comes) nothing is ever
  /// late, so before a block the render thread waits until every stream can play it as if its
  /// decoder were infinitely fast: the ring holds the block and the ramp after it (a starved
  /// stream: the refill it waits for), and a seek asked for has landed. What is rendered then does
  /// not depend on the decoders' timing: an offline render, or the recording of rampd on such a
  /// device, is the same every time. Commands are taken meanwhile.
  func waitForEveryStream(frames: Int) {
    while link.running.load(ordering: .relaxed) {
      var index = 0
      var behind: StreamDecoder?
      var needed = 0
      var installing = false
      while index < state.streams.count && behind == nil {
        let stream = state.streams[index]
        index += 1
        let decoder = stream.decoder
        if decoder.hasFailed { continue }
        if stream.pendingSeek != nil {
          if stream.seekRequested && decoder.seekIsPending {
            behind = decoder
            needed = 0
          }
          continue
        }
        let ahead = stream.starved ? max(refillFrames, frames + declickFrames) : frames + declickFrames
        if let queue = stream.queue, let wait = queue.behind(stream, frames: frames, ahead: ahead) {
          // A queue's next item the daemon has yet to install: commands are taken until it is.
          guard let decoder = wait.decoder else {
            if link.commandBell.wait(seconds: 0.01) { takeCommands() }
            flushEvents()
            installing = true
            break
          }
          behind = decoder
          needed = wait.needed
          break
        }
        if decoder.isFinished { continue }
        needed = min(ahead * output.channels, decoder.ring.capacity)
        if decoder.ring.available < needed { behind = decoder }
      }
      if installing { continue }
      guard let decoder = behind else { return }
      if needed == 0 {
        // A seek lands within a read of the file: polled, there is no bell for it.
        usleep(100)
        continue
      }
      guard decoder.awaitSamples(max(decoder.lowWater, needed)) else { continue }
      if link.commandBell.wait(seconds: 0.1) {
        takeCommands()
        flushEvents()
      }
    }
  }

  /// The first stream that plays (not paused, not seeking) and whose decoder has less than a
  /// block and the ramp out after it ready while still decoding (less would start an underrun).
  /// `playingOnly: false`: any stream, paused or seeking too.
  func firstDecoderBehind(frames: Int, playingOnly: Bool = true) -> StreamDecoder? {
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if playingOnly && (stream.paused || stream.pendingSeek != nil) { continue }
      let decoder = stream.decoder
      if !decoder.isFinished && decoder.ring.available < (frames + declickFrames) * output.channels { return decoder }
    }
    return nil
  }

  /// Without a device to block on, keeps the blocks rendered at most a buffer ahead of the clock,
  /// as a device would hold them: once the buffer is full it sleeps until one block is left ahead
  /// (a wake-up up to a block late keeps the clock), then blocks go out back to back, a buffer's
  /// worth per wake-up, and a command still lands within a buffer. After an outage of the render
  /// thread itself the clock re-anchors.
  func keepTime(frames: Int) {
    idleClock.wait(toWrite: frames, lead: max(frames, output.bufferFrames), refill: frames)
    idleClock.advance(by: frames)
  }

  /// Whether a stream plays (or ramps towards a pause): time then follows the streams.
  var streamsPlaying: Bool {
    var index = 0
    while index < state.streams.count {
      if !state.streams[index].paused { return true }
      index += 1
    }
    return false
  }

  /// Frames left ahead of the clock when a render thread paced by the clock wakes to refill
  /// `device`'s buffer (``NegotiatedOutput/refillLead(margin:)``), in the buffer as
  /// `device` negotiated it: a fallback's may differ from the configured device's.
  func refillLead(on device: any AudioOutput) -> Int {
    device.negotiated.refillLead(margin: configuration.marginTime)
  }

  // MARK: Idle

  /// Nothing to render but silence until a command comes: no command waits, no stream plays
  /// (every one paused and still, none seeking), no animation runs or waits to begin.
  var nothingToRender: Bool {
    guard link.commands.isEmpty, !state.engine.isAnimating, !state.engine.hasPendingCompletions else { return false }
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if !stream.paused || stream.stopping || stream.pendingSeek != nil { return false }
    }
    return true
  }

  /// When nothing is to be rendered (`nothingToRender`) on a device that may stop
  /// (`OutputCapabilities.stopsWhenIdle`): lets the device play what it holds, stops it before it
  /// runs dry (what it still holds is the last block, silence), then sleeps until a command
  /// comes or a scheduled one must be rendered, without a timer. A command during the play-out
  /// ends it with the device still running. On waking, the sample clock catches up with the
  /// time spent idle as the device will play it (the mapping of samples to time extrapolated,
  /// plus the resume latency last measured), so an `at` time keeps its meaning; the device
  /// starts again once it holds two blocks (`AudioOutput.stopForIdle`), its first sample
  /// being silence or the command's ramp: no click. Allocation-free.
  func idleIfNothingToRender(_ buffers: RenderBuffers) {
    guard self.device != nil else {
      idleWithoutDevice()
      return
    }
    // No local holds the device from here on: one that lasted through the sleep below would
    // keep the recovery thread from freeing a device let go of while idle (it waits for the
    // last reference, `LastReferenceKeeper`), and waking every 10 ms to look again.
    guard let stopped = stopDeviceForIdle(buffers) else { return }
    defer { link.idling.store(false, ordering: .sequentiallyConsistent) }
    let (releases, lead, lastHeard) = (stopped.releases, stopped.lead, stopped.lastHeard)
    let nanosecondsPerFrame = 1e9 / Double(output.rate)
    link.stoppedIdle.store(true, ordering: .relaxed)
    defer { link.stoppedIdle.store(false, ordering: .relaxed) }
    let deadline = scheduled.firstSample.map { first in
      heardClock.known
        ? heardClock.nanoseconds(of: first) - lead
        : HeardClock.clamped(Double(lastHeard) + Double(first - state.engine.now) * nanosecondsPerFrame) - lead
    }
    // True only once the deadline has passed; false when a change came (or shutdown).
    let scheduledWake = sleepAnsweringReads(until: deadline)
    let woken = monotonicNanoseconds()
    // How long the command that ended the idle waited for this thread to wake.
    let arrived = link.idleEndedAt.load(ordering: .relaxed)
    let wakeLateness = arrived > 0 ? max(woken - arrived, 0) : 0
    guard link.running.load(ordering: .relaxed) else { return }
    if releases {
      guard let reopened = reopenParked() else {
        // Not opened again: time goes on without it from where the idle spell ends.
        catchUp(from: lastHeard, nanosecondsPerFrame: nanosecondsPerFrame)
        return
      }
      reopenNanoseconds = monotonicNanoseconds() - woken
      link.measuredReopen.store(reopenNanoseconds, ordering: .relaxed)
      reopened.stopForIdle()
    }
    guard let device = self.device else {
      catchUp(from: lastHeard, nanosecondsPerFrame: nanosecondsPerFrame)
      return
    }
    let wake = monotonicNanoseconds()
    var heardFrom = wake + resumeNanoseconds
    // Woken for a scheduled command, with time to spare: the device starts at a set moment
    // (after the two blocks it starts with are rendered), so its sample clock is where the
    // mapping says, whatever this wake-up's latency.
    let startMargin: Int64 = 5_000_000
    let timed = scheduledWake && device.start(at: wake + startMargin)
    // The device starts with output frame `now`; the engine's sample `now` is heard the limiter's
    // latency later.
    if timed { heardFrom = wake + startMargin + Int64(Double(outputLatency) * nanosecondsPerFrame) }
    let behind =
      heardClock.known
      ? heardClock.sample(at: heardFrom) - Double(state.engine.now)
      : Double(heardFrom - lastHeard) / nanosecondsPerFrame
    if behind >= 1 { state.engine.advance(by: Int(min(behind, 1e18))) }
    // A timed start says nothing of the latency of a command's wake-up.
    resumed = timed ? nil : (wake, state.engine.now, wakeLateness)
    batchStart = nil
  }

  /// What `stopDeviceForIdle` leaves for the idle spell.
  struct IdleStop {
    /// The device was let go of, to be opened again on waking.
    var releases: Bool
    /// How long before a scheduled command the device must run again, in nanoseconds.
    var lead: Int64
    /// When the last sample written is heard.
    var lastHeard: Int64
  }

  /// Once two blocks of silence are written and no command waits: lets the device play what it
  /// holds, stops it, and (a device of an audio server) hands it to the recovery thread to be
  /// closed. Nil when the idle spell does not begin; otherwise `link.idling` is left true, for
  /// the caller to clear when the spell ends.
  private func stopDeviceForIdle(_ buffers: RenderBuffers) -> IdleStop? {
    guard let device else { return nil }
    // The configured device, once it opened after start, plays until it is known to play
    // (`waiting` ends), so it is not let go of untried.
    let capabilities = device.capabilities
    guard capabilities.stopsWhenIdle, link.healthy.load(ordering: .relaxed), !(waiting && !onFallback),
      nothingToRender
    else {
      silentBlocksWritten = 0
      return nil
    }
    let nanosecondsPerFrame = 1e9 / Double(output.rate)
    // A device of an audio server is let go of while idle: a stream that is merely stopped keeps
    // the server's graph running (and waking) for nothing.
    let releases = capabilities.releasesWhenIdle
    let lead = idleLead(releases: releases)
    if scheduledTooSoonForIdle(releases: releases) { return nil }
    // The device stops a period before it would run dry, cutting the last block written. Two
    // blocks of silence are written first, so what it cuts is silence with a block to spare: the
    // end of a stream before them is heard whole even when the heard clock is a little early.
    var index = 0
    while index < buffers.frames * buffers.channels {
      if buffers.mix[index] != 0 {
        silentBlocksWritten = 0
        return nil
      }
      index += 1
    }
    silentBlocksWritten += 1
    guard silentBlocksWritten >= 2 else { return nil }
    link.idleEndedAt.store(0, ordering: .relaxed)
    // Pairs with `Player.push`: either it sees `idling` and rings, or the command is seen here.
    link.idling.store(true, ordering: .sequentiallyConsistent)
    let now = monotonicNanoseconds()
    // When the last sample written is heard; the device stops a period before.
    let lastHeard =
      heardClock.known
      ? heardClock.nanoseconds(of: state.engine.now - Int64(outputLatency))
      : now + Int64(Double(device.delayFrames) * nanosecondsPerFrame)
    let period = Int64(Double(output.periodFrames) * nanosecondsPerFrame)
    guard link.commands.isEmpty, sleepIdle(until: lastHeard - period) else {
      link.idling.store(false, ordering: .sequentiallyConsistent)
      return nil
    }
    device.stopForIdle()
    heardClock.restart()
    // The idle spell is a jump in the clock the limiter does not see: it starts again from
    // silence, as the output did (two silent blocks written, each longer than its delay line at
    // the default look-ahead and period).
    limiter?.reset()
    limiterLastLowered = nil
    // The recovery thread closes it, and opens it again when asked (`reopenParked`).
    if releases { handOver(device, to: link.parkedDevices) }
    return IdleStop(releases: releases, lead: lead, lastHeard: lastHeard)
  }

  /// How long before a scheduled command a device stopped for idle must run again (opened again
  /// first if it is let go of while idle), in nanoseconds.
  func idleLead(releases: Bool) -> Int64 {
    Int64(Double(output.bufferFrames + 2 * output.periodFrames) * 1e9 / Double(output.rate)) + resumeNanoseconds
      + (releases ? reopenNanoseconds : 0)
  }

  /// A scheduled command comes too soon for an idle spell: within two leads.
  func scheduledTooSoonForIdle(releases: Bool) -> Bool {
    guard let first = scheduled.firstSample else { return false }
    return Double(first - state.engine.now) * 1e9 / Double(output.rate) < Double(2 * idleLead(releases: releases))
  }

  /// With no device (lost, waited for without an embedded output, or not opened again after an
  /// idle spell) and nothing to render: sleeps until a command, a device to take or a scheduled
  /// command's time comes, instead of keeping time a block at a time for nobody. Meanwhile the
  /// mapping of samples to time is the clock's, published for `at` times; on waking the sample
  /// clock catches up with the time slept, as `keepTime` would have counted it. Allocation-free.
  func idleWithoutDevice() {
    guard nothingToRender else { return }
    let nanosecondsPerFrame = 1e9 / Double(output.rate)
    let lead = Int64(Double(output.bufferFrames + 2 * output.periodFrames) * nanosecondsPerFrame)
    if let first = scheduled.firstSample, Double(first - state.engine.now) * nanosecondsPerFrame < Double(2 * lead) {
      return
    }
    link.idling.store(true, ordering: .sequentiallyConsistent)
    defer { link.idling.store(false, ordering: .sequentiallyConsistent) }
    guard link.commands.isEmpty, !deviceNews else { return }
    // When the last sample counted is due on the clock.
    let now = monotonicNanoseconds()
    let lastDue = idleClock.started ? max(idleClock.due(frame: idleClock.written), now) : now
    link.heard.store(sample: Double(state.engine.now), at: lastDue, rate: 1 / nanosecondsPerFrame, delay: -1)
    link.stoppedIdle.store(true, ordering: .relaxed)
    defer { link.stoppedIdle.store(false, ordering: .relaxed) }
    let deadline = scheduled.firstSample.map {
      HeardClock.clamped(Double(lastDue) + Double($0 - state.engine.now) * nanosecondsPerFrame) - lead
    }
    _ = sleepAnsweringReads(until: deadline)
    let behind = Double(monotonicNanoseconds() - lastDue) / nanosecondsPerFrame
    if behind >= 1 { state.engine.advance(by: Int(min(behind, 1e18))) }
    idleClock.reset()
    limiter?.reset()
    limiterLastLowered = nil
    batchStart = nil
  }

  /// After an idle spell that ends without a device: the sample clock catches up with the time
  /// spent idle (by the mapping of samples to time while it is known; else from `lastHeard`, when
  /// the last sample written was heard), so an `at` time keeps its meaning.
  func catchUp(from lastHeard: Int64, nanosecondsPerFrame: Double) {
    let now = monotonicNanoseconds()
    let behind =
      heardClock.known
      ? heardClock.sample(at: now) - Double(state.engine.now) : Double(now - lastHeard) / nanosecondsPerFrame
    if behind >= 1 { state.engine.advance(by: Int(min(behind, 1e18))) }
    batchStart = nil
  }

  /// Sleeps until `deadline` as `sleepIdle` does, answering the requests that only read (a
  /// `status`, a `list`) as they come: they change nothing heard, so the device stays stopped
  /// and the thread asleep. False when a command that may change the sound came (or shutdown),
  /// true once the deadline has passed.
  func sleepAnsweringReads(until deadline: Int64?) -> Bool {
    while link.running.load(ordering: .relaxed) {
      if sleepIdle(until: deadline) { return true }
      var answered = false
      while link.events.freeSlots > link.eventReserve, let command = link.commands.first {
        guard !command.changesSound, (command.sample ?? 0) <= state.engine.now else { break }
        _ = link.commands.pop()
        run(command)
        answered = true
      }
      if answered { flushEvents() }
      if !link.commands.isEmpty || deviceNews { return false }
    }
    return false
  }

  /// Asks the recovery thread for the parked device again and sleeps until it comes (opening
  /// is a few milliseconds for an audio server's device). Nil when it could not be opened in
  /// `reopenLimit` (the recovery thread then goes on trying, with backoff, as for a lost device,
  /// and the loop keeps time meanwhile) or at shutdown.
  func reopenParked() -> (any AudioOutput)? {
    link.deviceWanted.store(true, ordering: .releasing)
    link.recoveryBell.ring()
    let limit = monotonicNanoseconds() + Self.reopenLimit
    while link.running.load(ordering: .relaxed) {
      if let fresh = link.freshDevices.pop() {
        use(fresh)
        if let device { return device }
        continue
      }
      let left = limit - monotonicNanoseconds()
      if left <= 0 || !link.deviceFailures.isEmpty { break }
      _ = link.deviceReady.wait(nanoseconds: left)
    }
    return nil
  }

  /// How long the render thread waits for a parked device to open again before it counts it
  /// as lost.
  static let reopenLimit: Int64 = 2_000_000_000

  /// The recovery thread has news for an idle render thread: a device opened that it takes (the
  /// configured device waited for since start: it wakes to play into it, and go idle there, so
  /// `status` stops saying it waits; or any device while it has none), or, while it has none, a
  /// failure to post as an event.
  var deviceNews: Bool {
    (waiting || device == nil) && !link.freshDevices.isEmpty || device == nil && !link.deviceFailures.isEmpty
  }

  /// Sleeps on the command bell until `deadline` (monotonic nanoseconds; nil: none). False when
  /// a command or a device to take (`deviceNews`) came first, or the player stops;
  /// true once the deadline has passed.
  func sleepIdle(until deadline: Int64?) -> Bool {
    while link.running.load(ordering: .relaxed) {
      if !link.commands.isEmpty || deviceNews { return false }
      var left: Int64 = -1
      if let deadline {
        left = deadline - monotonicNanoseconds()
        if left <= 0 { return true }
      }
      link.commandBell.wait(nanoseconds: left)
    }
    return false
  }
}
