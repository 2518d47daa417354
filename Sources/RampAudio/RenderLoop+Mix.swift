import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

extension RenderLoop {
  /// One block into `buffers.mix`, as the render thread renders it (split where a command is due
  /// and at the decision points, `renderScheduled`). Allocation-free: the render thread's hot path.
  func renderBlock(_ buffers: RenderBuffers) {
    renderScheduled(buffers)
  }

  /// Frames [offset, offset + frames) of the block. Allocation-free.
  func renderSpan(_ buffers: RenderBuffers, offset: Int, frames: Int) {
    let channels = buffers.channels
    let mix = buffers.mix + offset * channels
    let audio = buffers.audio
    let gain = buffers.gain
    let ramp = buffers.ramp
    let engine = state.engine
    let now = engine.now
    let ducks = state.ducks
    let metering = state.metersLevels
    // What waits for a condition is decided at the decision points only: the grid's samples
    // (`renderScheduled` splits the block there when something may be decided) and those at which
    // a command changed what is heard (a trigger stream's play, `duck`, a seek).
    let deciding = now % Int64(Self.decisionFrames) == 0 || changedAt == now
    if deciding { ducks.begin(state, now: now) }
    mix.update(repeating: 0, count: frames * channels)
    // Index loop, not for-in: an unspecialised iterator allocates in a debug build.
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if stream.pendingSeek != nil && stream.supply == 0 {
        // Ramped out; the decoder has yet to seek (`landSeeks`): silent, in place.
        if metering { stream.level.addSilence(frames: frames) }
        continue
      }
      if stream.paused {
        // Paused: the position holds once the ramp to silence is over (seen at a decision point,
        // so where it holds does not depend on the blocks).
        if deciding {
          engine.render(stream.transport, start: now, count: 1, into: ramp)
          stream.holding = ramp[0] == 0
        }
        if stream.holding {
          if metering { stream.level.addSilence(frames: frames) }
          continue
        }
      } else {
        stream.holding = false
      }
      let wanted = frames * channels
      let decoder = stream.decoder
      let available = decoder.ring.available
      let finished = decoder.isFinished
      if stream.starved {
        // Holding, silent and in place, until the ring has refilled (judged at a decision point,
        // for the same reason as a seek's mark).
        guard deciding || stream.landedAt == now,
          finished || available >= min(refillFrames * channels, decoder.ring.capacity)
        else {
          if metering { stream.level.addSilence(frames: frames) }
          continue
        }
        stream.starved = false
      }
      // The ring cannot cover this span and a ramp out after it: ramp out now, at the declick
      // ramp's pace (faster only if the audio runs out first), rather than cut to silence
      // mid-waveform when it runs dry.
      let starving = !finished && available < (frames + declickFrames) * channels
      let seeking = stream.pendingSeek != nil
      let got: Int
      let centred = channels != 2 || engine.restingValue(stream.pan) == 0
      if centred, !starving, !seeking, stream.supply == 1,
        stream.queue?.isQuiet(stream, frames: frames) ?? true,
        let level = engine.restingValue(stream.gain),
        let transport = engine.restingValue(stream.transport),
        let duck = ducks.restingFactor(stream: stream.id, from: now)
      {
        // At rest, the usual case between fades: one gain for the block, mixed straight from the
        // ring (a missing sample would add 0 × gain, nothing).
        let constant = Float(level) * Float(transport)
        got = stream.decoder.consume(count: wanted) { samples, offset, count in
          ducks.listen(stream.id, samples, offset: offset, count: count, gain: constant)
          if metering { stream.level.add(samples, samples: count, constant: constant * duck) }
          GainKernel.accumulate(samples, gain: constant * duck, count: count, into: mix + offset)
        }
      } else {
        var taken = wanted
        var envelope = SupplyRamp.in
        if starving {
          // Only the audio the ramp needs is taken: the rest stays for when the stream resumes.
          let have = min(available / channels, frames)
          let needed = Int((stream.supply * Float(declickFrames)).rounded(.up))
          envelope = have < needed && have < frames ? .outOverAudio : .out
          taken = min(have, needed) * channels
        } else if seeking {
          envelope = .out
        }
        got =
          stream.queue?.read(stream, into: audio, count: taken, now: now, state: state) { retire(.object($0)) }
          ?? decoder.read(into: audio, count: taken)
        if got < wanted { (audio + got).update(repeating: 0, count: wanted - got) }
        if starving || seeking || stream.supply < 1 {
          applySupply(stream, to: audio, frames: got / channels, channels: channels, ramp: envelope)
        }
        engine.render(stream.gain, start: now, count: frames, into: gain)
        engine.render(stream.transport, start: now, count: frames, into: ramp)
        GainKernel.multiply(gain, by: ramp, count: frames)
        ducks.listen(stream.id, audio, gain: gain, frames: frames)
        ducks.apply(stream: stream.id, start: now, count: frames, to: gain)
        if metering { stream.level.add(audio, samples: frames * channels, gains: gain) }
        if centred {
          GainKernel.accumulate(audio, gain: gain, frames: frames, channels: channels, into: mix)
        } else {
          engine.render(stream.pan, start: now, count: frames, into: ramp)
          GainKernel.accumulateBalanced(audio, gain: gain, balance: ramp, frames: frames, into: mix)
        }
      }
      stream.position += got / channels
      if got > 0 && finished && decoder.ring.available == 0 {
        // Where the stream's last audio ends: how long a render of the whole show lasts.
        state.audioEnd = max(state.audioEnd, now + Int64(got / channels))
      }
      if starving && stream.supply == 0 {
        // One event per shortfall, not one per block: a starved stream must not flood the queue
        // that carries replies.
        state.post(.underrun(stream: stream.id))
        stream.starved = true
      }
    }
    engine.render(state.master, start: now, count: frames, into: gain)
    ducks.applyToMaster(start: now, count: frames, to: gain)
    GainKernel.apply(mix, gain: gain, frames: frames, channels: channels, into: mix)
    if let limiter {
      limiter.process(mix, frames: frames)
      noteLimiter(limiter, now: now, frames: frames)
    }
    // Under a limiter, a no-op: its ceiling is at most 0 dBTP.
    GainKernel.clamp(mix, count: frames * channels)
    if metering { state.masterLevel.add(mix, samples: frames * channels) }
    ducks.end(frames: frames) { retire(.object($0)) }
    engine.advance(by: frames)
    drainCompletions()
  }

  /// Before the span at the engine's clock: each seek's jump, on its own sample. A seek ramps its
  /// stream out over the declick ramp from the seek's sample (`renderSpan`); the new position
  /// plays from the sample where that ramp is over (`seekLanding`, where `renderScheduled` splits
  /// the block), ramping in. The decoder is asked for it at once when the ring holds the ramp's
  /// audio and has room beside it for the new position's refill (a stream playing no queue), so
  /// it is ready by then; otherwise once the ramp is over. At the landing the stale audio is
  /// dropped: without a clock after waiting for the decoder (and then, in `renderScheduled`, for
  /// its refill), so the jump lands there at any block size; with a clock, if the decoder has
  /// sought by then, else at the first span at which it has. Returns whether a seek landed now.
  /// Allocation-free.
  func landSeeks(_ ramp: UnsafeMutablePointer<Float>) -> Bool {
    let engine = state.engine
    let now = engine.now
    let channels = output.channels
    var landed = false
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      guard let frame = stream.pendingSeek else { continue }
      let decoder = stream.decoder
      if stream.supply > 0 {
        // Silent anyway (paused): nothing to ramp out.
        engine.render(stream.transport, start: now, count: 1, into: ramp)
        if ramp[0] == 0 && engine.restingValue(stream.transport) == 0 { stream.supply = 0 }
      }
      let rampFrames = Int((stream.supply * Float(declickFrames)).rounded(.up))
      if stream.seekLanding == nil { stream.seekLanding = now + Int64(rampFrames) }
      if !stream.seekRequested {
        // Early, the decoder writes the new position after the audio the ramp out still reads
        // (no more than it holds now), into the room the ring has.
        let early =
          stream.queue == nil && stream.supply == 1 && decoder.ring.available >= rampFrames * channels
          && decoder.ring.space >= refillFrames * channels
        if stream.supply == 0 || early {
          decoder.requestSeek(toOutputFrame: frame)
          stream.seekRequested = true
        }
      }
      guard stream.supply == 0, stream.seekRequested else { continue }
      if waitsForDecoders {
        while decoder.seekIsPending && !decoder.hasFailed && link.running.load(ordering: .relaxed) { usleep(100) }
      }
      guard let mark = decoder.takeSeekMark() else { continue }
      decoder.ring.discard(upTo: mark)
      stream.pendingSeek = nil
      stream.seekRequested = false
      stream.seekLanding = nil
      stream.queue?.moved(stream, from: stream.position, to: frame)
      stream.position = frame
      // The ring may hold little of the new position yet: the stream waits for it to refill (no
      // underrun: nothing was cut) and ramps in.
      stream.starved = true
      stream.landedAt = now
      landed = true
    }
    return landed
  }

  /// The first sample after `now` at which a seek's ramp out is over (nil: none).
  func nextSeekLanding(after now: Int64) -> Int64? {
    var first: Int64?
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      index += 1
      if stream.pendingSeek != nil, let landing = stream.seekLanding, landing > now {
        first = min(first ?? landing, landing)
      }
    }
    return first
  }

  /// Publishes the limiter's reduction, and posts `limiterEngaged` when it lowers the gain after
  /// a second or more of leaving it alone. Allocation-free.
  func noteLimiter(_ limiter: TruePeakLimiter, now: Int64, frames: Int) {
    link.limiterReduction.store(limiter.reductionDecibels.bitPattern, ordering: .relaxed)
    let (engaged, deepest) = limiter.takeEngaged()
    guard engaged else { return }
    if limiterLastLowered.map({ now - $0 >= Int64(output.rate) }) ?? true {
      link.limiterEngagements.add(1, ordering: .relaxed)
      state.post(.limiterEngaged(sample: now, reductionDecibels: deepest))
    }
    limiterLastLowered = now + Int64(frames)
  }

  /// Posts the engine's completion reports and hands what ended to the recovery thread.
  func drainCompletions() {
    state.engine.drainCompletions(
      retiring: { retire(.object($0)) }, { report in state.post(.animationFinished(report)) })
  }

  enum SupplyRamp {
    /// Down to 0 over the frames given: the last audio before an underrun.
    case outOverAudio
    /// Down towards 0 at the declick ramp's pace: before a seek.
    case out
    /// Up towards 1 at the declick ramp's pace.
    case `in`
  }

  /// Applies a stream's envelope to `frames` frames of its audio. Allocation-free.
  func applySupply(
    _ stream: PlayingStream, to audio: UnsafeMutablePointer<Float>, frames: Int, channels: Int, ramp: SupplyRamp
  ) {
    var level = stream.supply
    let step = ramp == .outOverAudio ? level / Float(max(frames, 1)) : 1 / Float(declickFrames)
    var frame = 0
    while frame < frames {
      switch ramp {
      case .outOverAudio: level = frame == frames - 1 ? 0 : max(level - step, 0)
      case .out: level = max(level - step, 0)
      case .in: level = min(level + step, 1)
      }
      var channel = 0
      while channel < channels {
        audio[frame * channels + channel] *= level
        channel += 1
      }
      frame += 1
    }
    // A ramp out that ends within a rounding error of silence ends in silence.
    stream.supply = ramp == .outOverAudio || (ramp == .out && level < 1e-5) ? 0 : level
  }

  /// Streams whose file ended (ring empty) or whose stop ramp is over leave the mix.
  func finishStreams() {
    let engine = state.engine
    var index = state.streams.count - 1
    while index >= 0 {
      let stream = state.streams[index]
      let drained = stream.isDrained
      var stopped = false
      if stream.stopping {
        var level: Float = 1
        engine.render(stream.transport, start: engine.now, count: 1, into: &level)
        stopped = level == 0
      }
      if drained || stopped {
        stream.cancelDecoders()
        let reason: StreamEndReason = stopped ? .stopped : (stream.decoder.hasFailed ? .failed : .finished)
        let itemReason: ItemEndReason = stopped ? .stopped : (reason == .failed ? .failed : .finished)
        stream.queue?.streamEnded(stream, reason: itemReason, at: engine.now, state: state)
        state.post(.streamEnded(id: stream.id, reason: reason))
        // By handle: no key path is built or matched.
        engine.undefine(stream.gain)
        engine.undefine(stream.transport)
        engine.undefine(stream.pan)
        // The decoder (its ring, soxr state, file) is freed off this thread.
        retire(.object(stream))
        state.streams.remove(at: index)
        publishedHandlesStale = true
      }
      index -= 1
    }
  }
}
