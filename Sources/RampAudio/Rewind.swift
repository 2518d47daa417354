import Synchronization

/// What a player needs to render again the audio the device holds and has not played: at the
/// start of each block written (a record), the sample, each stream's place in its ring and in
/// its file, and whether anything irreversible happened since (an event posted, a command run,
/// something retired: `RenderState.irreversible`). Rendering again from a record gives the same
/// samples as long as nothing irreversible happened since and every stream plays plainly (no
/// seek, underrun or ramp back in after one, no duck rule): animations are functions of the
/// sample clock, and the streams' rings keep what they read until the device has played it
/// (`RingBuffer.holds`). A rewind goes no further back than that, so every event and completion
/// is posted once, for what is finally heard.
///
/// Preallocated (records × streams); used by the render thread only.
final class RewindHistory: @unchecked Sendable {
  /// Whether the player keeps records at all (a device that may rewind).
  let enabled: Bool
  let capacity: Int
  let streamCapacity: Int
  private let samples: UnsafeMutablePointer<Int64>
  private let marks: UnsafeMutablePointer<Int>
  /// Every stream played plainly at the record's start.
  private let plain: UnsafeMutablePointer<Bool>
  private let streamCounts: UnsafeMutablePointer<Int>
  private let streams: UnsafeMutablePointer<UnsafeMutableRawPointer?>
  private let readPositions: UnsafeMutablePointer<Int>
  private let positions: UnsafeMutablePointer<Int>
  /// The oldest record's slot, and how many there are.
  private var first = 0
  private(set) var count = 0
  /// Where the newest record's block ended (its successor must start there), and whether every
  /// stream played plainly then; nil while a block is being rendered.
  private var lastEnd: (sample: Int64, plain: Bool)?
  /// A block of scratch for rendering again what is not written again (from a record to the
  /// rewind point).
  let scratch: RenderBuffers?
  /// Rewinds done, and frames rewritten by them (for status and tests).
  let rewinds = Atomic<Int>(0)
  let framesRewound = Atomic<Int>(0)
  /// Whether the device rewinds (published by the render thread for status).
  let active = Atomic<Bool>(false)

  init(enabled: Bool, blockFrames: Int, bufferFrames: Int, channels: Int) {
    self.enabled = enabled
    // The blocks the buffer holds, the one at the played position, and slack.
    capacity = enabled ? bufferFrames / max(blockFrames, 1) + 4 : 1
    streamCapacity = enabled ? Player.streamCapacity : 1
    samples = .allocate(capacity: capacity)
    marks = .allocate(capacity: capacity)
    plain = .allocate(capacity: capacity)
    streamCounts = .allocate(capacity: capacity)
    streams = .allocate(capacity: capacity * streamCapacity)
    readPositions = .allocate(capacity: capacity * streamCapacity)
    positions = .allocate(capacity: capacity * streamCapacity)
    scratch = enabled ? RenderBuffers(frames: blockFrames, channels: channels) : nil
    active.store(enabled, ordering: .relaxed)
  }

  deinit {
    samples.deallocate()
    marks.deallocate()
    plain.deallocate()
    streamCounts.deallocate()
    streams.deallocate()
    readPositions.deallocate()
    positions.deallocate()
    scratch?.deallocate()
  }

  private func slot(_ index: Int) -> Int { (first + index) % capacity }

  /// Forgets every record.
  func clear() {
    first = 0
    count = 0
    lastEnd = nil
  }

  /// Whether a stream plays plainly: what it renders depends on the sample clock and its ring
  /// alone.
  static func plain(_ stream: PlayingStream) -> Bool {
    stream.pendingSeek == nil && !stream.seekRequested && !stream.starved && stream.supply == 1
      && !(stream.paused && !stream.holding)
  }

  static func plain(_ state: RenderState) -> Bool {
    guard state.ducks.count == 0 else { return false }
    var index = 0
    while index < state.streams.count {
      if !plain(state.streams[index]) { return false }
      index += 1
    }
    return true
  }

  /// Before a block is rendered at `state.engine.now`: a record of where everything is (the
  /// limiter's state in its checkpoint of the record's slot). A block that does not follow the
  /// last one (the clock jumped: idle, a lost device) starts afresh.
  func begin(_ state: RenderState, limiter: TruePeakLimiter?) {
    let now = state.engine.now
    if count > 0, lastEnd?.sample != now { clear() }
    if count == capacity || state.streams.count > streamCapacity {
      // Full (cannot happen while the device plays: records are let go of as it does), or more
      // streams than reserved for: start afresh.
      clear()
    }
    let at = slot(count)
    limiter?.save(to: at)
    samples[at] = now
    marks[at] = state.irreversible
    plain[at] = Self.plain(state)
    streamCounts[at] = state.streams.count
    var index = 0
    while index < state.streams.count {
      let stream = state.streams[index]
      stream.decoder.ring.holds = true
      streams[at * streamCapacity + index] = Unmanaged.passUnretained(stream).toOpaque()
      readPositions[at * streamCapacity + index] = stream.decoder.ring.readPosition
      positions[at * streamCapacity + index] = stream.position
      index += 1
    }
    count += 1
    lastEnd = nil
  }

  /// After the block is written: where it ended, and, the device having played up to sample
  /// `played`, the records before it are let go of, and with them the audio the streams read
  /// before the newest of those (it is heard: never rendered again).
  func end(_ state: RenderState, played: Int64) {
    guard count > 0 else { return }
    lastEnd = (state.engine.now, Self.plain(state))
    var keep = 0
    while keep + 1 < count && samples[slot(keep + 1)] <= played { keep += 1 }
    if keep > 0 {
      first = slot(keep)
      count -= keep
    }
    let at = slot(0)
    guard samples[at] <= played else { return }
    var index = 0
    while index < streamCounts[at] {
      let pointer = streams[at * streamCapacity + index]
      var match = 0
      // The stream still in the mix (by identity; one that left is not touched).
      while match < state.streams.count {
        let stream = state.streams[match]
        if Unmanaged.passUnretained(stream).toOpaque() == pointer {
          stream.decoder.release(upTo: readPositions[at * streamCapacity + index])
          break
        }
        match += 1
      }
      index += 1
    }
  }

  /// The earliest sample a rewind may go back to: the start of the oldest record from which on
  /// nothing irreversible happened (`marks`, against `current`), every stream played plainly
  /// and the blocks follow one another up to `now`. Nil when there is none.
  func earliest(now: Int64, current: Int) -> Int64? {
    guard count > 0, let lastEnd, lastEnd.sample == now, lastEnd.plain else { return nil }
    var earliest: Int64?
    var index = count - 1
    while index >= 0 {
      let at = slot(index)
      guard marks[at] == current, plain[at] else { break }
      earliest = samples[at]
      index -= 1
    }
    return earliest
  }

  /// The newest record at or before `sample`: its index.
  func record(atOrBefore sample: Int64) -> Int? {
    var index = count - 1
    while index >= 0 {
      if samples[slot(index)] <= sample { return index }
      index -= 1
    }
    return nil
  }

  func sample(ofRecord index: Int) -> Int64 { samples[slot(index)] }

  /// Whether record `index`'s streams are `state`'s, in order, and each ring can read again
  /// from where the record has it.
  func canRestore(_ index: Int, _ state: RenderState) -> Bool {
    let at = slot(index)
    guard streamCounts[at] == state.streams.count else { return false }
    var stream = 0
    while stream < state.streams.count {
      let playing = state.streams[stream]
      guard Unmanaged.passUnretained(playing).toOpaque() == streams[at * streamCapacity + stream],
        playing.decoder.ring.canRewind(to: readPositions[at * streamCapacity + stream])
      else { return false }
      stream += 1
    }
    return true
  }

  /// Puts the streams and the clock back where record `index` has them, and forgets the records
  /// after it (they are rendered again).
  func restore(_ index: Int, _ state: RenderState, limiter: TruePeakLimiter?) {
    let at = slot(index)
    limiter?.restore(from: at)
    var stream = 0
    while stream < state.streams.count {
      let playing = state.streams[stream]
      playing.decoder.ring.rewind(to: readPositions[at * streamCapacity + stream])
      playing.position = positions[at * streamCapacity + stream]
      stream += 1
    }
    state.engine.rewind(to: samples[at])
    count = index + 1
    // The record's block is being rendered again from its start.
    lastEnd = nil
  }
}

extension RenderLoop {
  /// Render thread, before a block: records where it starts (`RewindHistory.begin`).
  func beginRewindableBlock() {
    guard rewindHistory.enabled else { return }
    rewindHistory.begin(state, limiter: limiter)
  }

  /// Render thread, after a block was written: records where it ended and lets go of what the
  /// device has played (`RewindHistory.end`).
  func endRewindableBlock() {
    guard rewindHistory.enabled else { return }
    guard let device, device.capabilities.rewindsNow else {
      // No rewind for now (a device lost, or not known to play in real time): the streams let go
      // of what they read at once.
      rewindHistory.clear()
      rewindHistory.active.store(false, ordering: .relaxed)
      var index = 0
      while index < state.streams.count {
        state.streams[index].decoder.ring.holds = false
        index += 1
      }
      return
    }
    rewindHistory.active.store(true, ordering: .relaxed)
    rewindHistory.end(state, played: playedSample(device))
  }

  /// The last sample the device has played, or an earlier one: from the sample-to-time mapping
  /// while the device runs (no call into the device), less a period for a mapping that
  /// follows a pointer moving in steps; else what the device says it still holds.
  func playedSample(_ device: any AudioOutput) -> Int64 {
    let now = state.engine.now
    guard heardClock.running else { return now - Int64(device.delayFrames + outputLatency) }
    let heard = heardClock.sample(at: monotonicNanoseconds()) - Double(output.periodFrames)
    return min(Int64(max(heard, -0x1p62)), now)
  }

  /// Render thread, before a command that may change what is heard runs now: when the device
  /// rewinds, the audio it holds beyond `rewindMargin` from what it plays (and no earlier than
  /// `sample`, the command's own, or than the history allows) is rewound, and the clock and the
  /// streams go back to its first sample, so the command applies there and what follows is
  /// rendered again with it. Allocation-free.
  func rewindBeforeCommand(at sample: Int64?) {
    let history = rewindHistory
    guard history.enabled, let device, case let capabilities = device.capabilities, capabilities.rewindsNow,
      let scratch = history.scratch
    else { return }
    let now = state.engine.now
    guard let earliest = history.earliest(now: now, current: state.irreversible) else { return }
    let rewindable = min(device.rewindableFrames(), capabilities.rewindFrames)
    var target = max(now - Int64(rewindable) + Int64(capabilities.rewindMarginFrames), earliest, sample ?? earliest)
    guard target < now, let record = history.record(atOrBefore: target), history.canRestore(record, state) else {
      return
    }
    let rewound = device.rewind(frames: Int(now - target))
    guard rewound > 0 else { return }
    target = now - Int64(rewound)
    history.restore(record, state, limiter: limiter)
    // From the record to the rewind point, the same samples as before (the device still holds
    // them): rendered again for the clock and the streams to get there, not written; split at the
    // decision points as the first render was (a pause's hold is decided there).
    while state.engine.now < target {
      var frames = min(scratch.frames, Int(target - state.engine.now))
      if decisionsPending {
        frames = min(frames, Self.decisionFrames - Int(state.engine.now % Int64(Self.decisionFrames)))
      }
      renderSpan(scratch, offset: 0, frames: frames)
    }
    link.published.store(state.engine.now, ordering: .releasing)
    history.rewinds.add(1, ordering: .relaxed)
    history.framesRewound.add(rewound, ordering: .relaxed)
  }

  /// Render thread, with device pacing on a device that rewinds, before a block is rendered: as
  /// long as the device has room for the block (`roomAhead`, asked of the device only once that
  /// runs out), returns at once, so blocks go out back to back until the buffer is full. Once it
  /// is, sleeps on the command bell until only `rewindingLead` frames are left ahead of what the
  /// device plays (a timer, as PulseAudio schedules a card: one wake-up per buffer less the lead,
  /// not per period), taking commands meanwhile: a change rewinds what the device holds, which
  /// leaves room, and the buffer is refilled at once. Returns true when it slept (a new batch of
  /// blocks starts); a device that does not rewind now returns true (its write blocks instead).
  @discardableResult
  func waitForRoomTakingCommands(on device: any AudioOutput, frames: Int) -> Bool {
    guard rewindHistory.enabled, device.capabilities.rewindsNow else { return true }
    if roomAhead >= frames { return false }
    guard var room = device.availableFrames() else { return true }
    let refill = max(output.bufferFrames - rewindingLead, frames)
    var waited = false
    while room < frames || waited && room < refill {
      waited = true
      let seconds = Double(refill - room) / Double(output.rate)
      if link.commandBell.wait(seconds: seconds) {
        takeCommands()
        flushEvents()
      }
      if !link.running.load(ordering: .relaxed) { break }
      guard let now = device.availableFrames() else { break }
      room = now
    }
    roomAhead = room
    return waited
  }

  /// Frames left ahead of what the device plays when a render thread that fills a device that
  /// rewinds wakes to refill it: `OutputConfiguration.marginTime`, by default
  /// `OutputCapabilities.rewindingLead` (within one period to the buffer less one period).
  var rewindingLead: Int {
    let most = max(output.bufferFrames - output.periodFrames, output.periodFrames)
    let lead = Int(((configuration.marginTime ?? OutputCapabilities.rewindingLead) * Double(output.rate)).rounded())
    return min(max(lead, output.periodFrames), most)
  }
}

extension Player {
  /// Seconds of audio a stream's ring keeps after reading it, at most, twice over (the ring's
  /// decoder wakes at half of it): what the device holds, when it may rewind; else 0.
  var heldSeconds: Double {
    rewindHistory.enabled ? 2 * Double(output.bufferFrames) / Double(output.rate) : 0
  }

  /// Whether the output rewinds (its device allows it and plays in real time), and the margin it
  /// keeps, in seconds: what `status.output` reports.
  public var outputRewind: (active: Bool, margin: Double, rewinds: Int) {
    (
      rewindHistory.active.load(ordering: .relaxed), OutputCapabilities.rewindMargin,
      rewindHistory.rewinds.load(ordering: .relaxed)
    )
  }
}
