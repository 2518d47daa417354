import RampEngine

/// One item of a stream's queue made ready off the render thread (`Player.prepareQueueItem`):
/// its file open and its decoder prefilled, so the render thread only switches to it.
public final class QueueItem: @unchecked Sendable {
  /// The item's id in the daemon's queue (events name it).
  public let id: UInt64
  public let path: String
  /// Whether another item follows this one in the queue (installed later): the stream does not
  /// end when this one does.
  public let followed: Bool
  /// The output frame where its quiet tail begins (`QuietTail`), when the queue's crossfade is
  /// level-triggered and it has one.
  public let quietStart: Int?
  let unstarted: UnstartedDecoder
  var decoder: StreamDecoder { unstarted.decoder }

  init(id: UInt64, path: String, followed: Bool, quietStart: Int?, unstarted: UnstartedDecoder) {
    self.id = id
    self.path = path
    self.followed = followed
    self.quietStart = quietStart
    self.unstarted = unstarted
  }

  /// Seconds of audio in the item's file.
  public var seconds: Double { Double(decoder.outputLength) / Double(decoder.outputRate) }
}

/// Why a queue item was last heard (`PlayerEvent.itemEnded`).
public enum ItemEndReason: String, Sendable {
  /// Played to its end, or faded out by the crossfade at its end.
  case finished
  /// Faded out by a skip (`next`, `previous`).
  case skipped
  /// Its stream was stopped (after the stop's fade), while it played or faded out.
  case stopped
  /// Its stream ended because decoding failed.
  case failed
}

/// A crossfade between two items: its length in output frames and its curve (the incoming item
/// ramps 0 → 1 along it, the outgoing 1 → 0 along it, mirrored in time for a fade shape, as an
/// engine ramp does: with `qsin` the squares of the two sum to 1, with `linear` the two do).
public struct CrossfadeShape: Sendable, Equatable {
  public var frames: Int64
  public var curve: TimingFunction

  public init(frames: Int64, curve: TimingFunction) {
    self.frames = max(frames, 0)
    self.curve = curve
  }
}

/// A queue stream on the render thread: the playing item (the stream's decoder, at the level of
/// its fade-in), the next item once the daemon has installed it, and the outgoing items of a
/// crossfade still fading out. Items follow one another sample-exactly: without a crossfade the
/// next item's first frame follows the last frame of the one before in the same block; with one,
/// the next starts `automatic.frames` before the end of the playing item and the two ramps run
/// together; when the playing item has a quiet tail (a level-triggered crossfade, `QuietTail`)
/// that begins earlier, the automatic transition starts there instead. A skip (`skip`)
/// crossfades over `manual.frames` (at least the declick ramp), and a skip during a crossfade
/// retargets every ramp from the level it has reached, so nothing jumps. An outgoing item whose
/// audio ends before its fade-out would is faded out over what is left of it (its ramp shortened
/// to end where its audio does, as an automatic crossfade's does), never cut.
///
/// The ramps run on the stream's own clock (`clock`): the samples it has played, which hold
/// while the stream holds its place (paused, waiting for its decoder, seeking), so a crossfade
/// paused midway resumes where it was, both items at the levels they had.
///
/// Made off the render thread (`Player.prepareQueue`), which allocates its storage; none of its
/// methods called on the render thread allocates, frees, locks or waits.
public final class StreamQueue: @unchecked Sendable {
  /// Outgoing items fading out at once; a skip beyond that cuts the quietest.
  public static let voiceCapacity = 4
  public let automatic: CrossfadeShape
  public let manual: CrossfadeShape
  /// The playing item's id.
  public internal(set) var item: UInt64
  /// Where the playing item's quiet tail begins (output frames), if it has one.
  var quietStart: Int?
  /// The next item, once installed.
  var next: QueueItem?
  /// Another item follows the playing one (installed or still to come).
  var expectsNext: Bool
  /// The version of the daemon's queue the installed next item was chosen from: an install
  /// chosen from an older one (overtaken by a change to the queue) is dropped.
  var generation: UInt64 = 0
  /// The last item's end was announced.
  private var lastEnded = false
  /// The playing item's level: 1, or its crossfade's ramp in.
  var incoming = DuckEnvelope(level: 1)
  /// Where the playing item's frame 0 lies on the stream's clock (`clock`).
  private var base: Int64 = 0
  var voices: ContiguousArray<Voice>
  var voiceCount = 0
  /// One block of an outgoing item's audio.
  private let scratch: UnsafeMutablePointer<Float>
  private let scratchCapacity: Int

  struct Voice {
    var decoder: StreamDecoder?
    var envelope = DuckEnvelope(level: 0)
    var item: UInt64 = 0
    /// Faded out by a skip (else by an item's end).
    var skipped = false
    /// Frames of its audio still to come, as far as its file's length tells.
    var remaining = 0
  }

  init(
    item: UInt64, followed: Bool, next: QueueItem?, automatic: CrossfadeShape, manual: CrossfadeShape, maxSamples: Int,
    quietStart: Int? = nil
  ) {
    self.item = item
    self.quietStart = quietStart
    self.next = next
    expectsNext = followed
    self.automatic = automatic
    self.manual = manual
    voices = ContiguousArray(repeating: Voice(), count: Self.voiceCapacity)
    scratchCapacity = max(maxSamples, 1)
    scratch = .allocate(capacity: scratchCapacity)
    scratch.initialize(repeating: 0, count: scratchCapacity)
  }

  deinit { scratch.deallocate() }

  /// The frame of the playing item (`length` frames long) where the automatic transition to the
  /// next begins: the crossfade's length before its end, or where its quiet tail begins when that
  /// is earlier; nil: where its audio ends (gapless).
  func transitionStart(_ length: Int) -> Int? {
    let crossfade = automatic.frames > 0 ? length - Int(automatic.frames) : nil
    guard let quietStart else { return crossfade }
    return min(crossfade ?? quietStart, quietStart)
  }

  /// The stream's clock, which the queue's ramps run on: the samples the stream has played (its
  /// position within the playing item, counted on from where the item started). It holds while
  /// the stream holds its place. Rendering again from a rewind's record (which keeps the
  /// position) finds it where it was.
  func clock(_ stream: PlayingStream) -> Int64 { base + Int64(stream.position) }

  /// The stream's position moves from `from` to `to` without playing what lies between (a seek):
  /// the clock does not.
  func moved(_ stream: PlayingStream, from: Int, to: Int) { base += Int64(from - to) }

  /// Whether the stream's block can be mixed straight from the playing item's ring: no crossfade
  /// under way, and neither the item's end nor a crossfade's start within the block.
  func isQuiet(_ stream: PlayingStream, frames: Int) -> Bool {
    guard voiceCount == 0, incoming.isResting(from: clock(stream)) else { return false }
    let decoder = stream.decoder
    if decoder.isFinished && decoder.ring.available < frames * decoder.outputChannels && !lastEnded { return false }
    guard next != nil || expectsNext, let start = transitionStart(decoder.outputLength) else { return true }
    return stream.position + frames < start
  }

  /// Whether the stream goes on once the playing item's audio is over: another item follows.
  var continues: Bool { next != nil || expectsNext || voiceCount > 0 }

  /// `count` samples of the stream's audio into `audio` (what the player would read from the
  /// stream's ring): the playing item's, at its level, continued into the next item where it
  /// ends or its crossfade starts, with the outgoing items mixed in. Returns how many samples
  /// hold audio (the rest is silence). Allocation-free.
  func read(
    _ stream: PlayingStream, into audio: UnsafeMutablePointer<Float>, count: Int, now: Int64, state: RenderState,
    retire: (AnyObject) -> Void
  ) -> Int {
    let channels = stream.decoder.outputChannels
    let frames = count / channels
    // The ramps' clock at the block's first frame (events are posted at the output's sample).
    let time = clock(stream)
    var done = 0
    var extent = 0
    // The frames of the block the outgoing items are mixed into so far: up to a transition
    // within the block before it retargets their ramps, so the frames before it keep the old ones.
    var mixed = 0
    while done < frames {
      let decoder = stream.decoder
      let itemFrame = stream.position + done
      var limit = frames - done
      if let next, let start = transitionStart(decoder.outputLength) {
        if itemFrame >= start {
          if voiceCount > 0 {
            mixVoices(stream, into: audio, from: mixed, to: done, now: now, time: time, state: state, retire: retire)
            extent = max(extent, done)
          }
          mixed = done
          begin(
            next, in: stream, shape: automatic, skipped: false, at: time + Int64(done), sample: now + Int64(done),
            offset: done, state: state, retire: retire)
          continue
        }
        limit = min(limit, start - itemFrame)
      }
      let wanted = limit * channels
      let got = decoder.read(into: audio + done * channels, count: wanted)
      if got < wanted { (audio + done * channels + got).update(repeating: 0, count: wanted - got) }
      let gotFrames = got / channels
      if !incoming.isResting(from: time + Int64(done)) {
        Self.multiply(
          audio + done * channels, frames: gotFrames, channels: channels, by: incoming, from: time + Int64(done))
      }
      if gotFrames > 0 { extent = done + gotFrames }
      if got < wanted && decoder.isFinished && decoder.ring.available == 0, let next {
        // The item is over: the next one's first frame follows its last.
        done += gotFrames
        if voiceCount > 0 {
          mixVoices(stream, into: audio, from: mixed, to: done, now: now, time: time, state: state, retire: retire)
          extent = max(extent, done)
        }
        mixed = done
        begin(
          next, in: stream, shape: CrossfadeShape(frames: 0, curve: .linear), skipped: false, at: time + Int64(done),
          sample: now + Int64(done), offset: done, state: state, retire: retire)
        continue
      }
      if got < wanted && decoder.isFinished && decoder.ring.available == 0 && !expectsNext && !lastEnded {
        // The last item is over: the stream ends after this block.
        lastEnded = true
        state.post(.itemEnded(stream: stream.id, item: item, sample: now + Int64(done + gotFrames), reason: .finished))
      }
      if got < wanted { break }
      done += limit
    }
    if voiceCount > 0 {
      mixVoices(stream, into: audio, from: mixed, to: frames, now: now, time: time, state: state, retire: retire)
      extent = frames
    }
    return extent * channels
  }

  /// A skip to `item` (render thread): the playing item and any still fading out ramp to
  /// silence over the manual crossfade (at least `minimumFrames`), from the level each has
  /// reached; `item` ramps in. The installed next item is handed back (`replaced`), and an
  /// outgoing item cut for room (`cut`), to be let go of off the render thread. Allocation-free.
  func skip(
    to item: QueueItem, in stream: PlayingStream, at sample: Int64, minimumFrames: Int64, state: RenderState,
    replaced: inout QueueItem?, cut: inout AnyObject?
  ) {
    replaced = next
    next = nil
    let shape = CrossfadeShape(frames: max(manual.frames, minimumFrames), curve: manual.curve)
    // The outgoing decoder is kept by its voice; only a voice cut for room is let go of.
    begin(
      item, in: stream, shape: shape, skipped: true, at: clock(stream), sample: sample, offset: 0, state: state,
      retire: { cut = $0 })
  }

  /// Switches the stream to `item` at `time` on the stream's clock, the output's `sample` (frame
  /// `offset` of the block being read). Every ramp goes on from the level it has reached there:
  /// the outgoing ones to silence over the crossfade, or over what is left of their audio when
  /// that is shorter; without a crossfade (gapless), the new item takes on the playing one's level
  /// and its ramp in, if any.
  private func begin(
    _ item: QueueItem, in stream: PlayingStream, shape: CrossfadeShape, skipped: Bool, at time: Int64,
    sample: Int64, offset: Int, state: RenderState, retire: (AnyObject) -> Void
  ) {
    let outgoing = stream.decoder
    if shape.frames > 0 {
      var index = 0
      while index < voiceCount {
        voices[index].envelope.ramp(to: 0, frames: shape.frames, curve: shape.curve, at: time)
        voices[index].envelope.end(by: time + Int64(max(voices[index].remaining, 0)), at: time)
        index += 1
      }
      if voiceCount == Self.voiceCapacity,
        let cut = endVoice(quietest(at: time), in: stream, at: sample, state: state)
      {
        retire(cut)
        voices[voiceCount].decoder = nil
      }
      let remaining = max(outgoing.outputLength - (stream.position + offset), 0)
      var envelope = incoming
      envelope.ramp(to: 0, frames: shape.frames, curve: shape.curve, at: time)
      envelope.end(by: time + Int64(remaining), at: time)
      voices[voiceCount] = Voice(
        decoder: outgoing, envelope: envelope, item: self.item, skipped: skipped, remaining: remaining)
      voiceCount += 1
      incoming = DuckEnvelope(level: 0)
      incoming.ramp(to: 1, frames: shape.frames, curve: shape.curve, at: time)
    } else {
      state.post(.itemEnded(stream: stream.id, item: self.item, sample: sample, reason: .finished))
      outgoing.cancel()
      retire(outgoing)
    }
    item.unstarted.joined = true
    stream.decoder = item.decoder
    // The player adds the frames read in this block to the position: the new item's count. Its
    // frame 0 lies at `time` on the clock.
    stream.position = -offset
    base = time
    self.item = item.id
    quietStart = item.quietStart
    expectsNext = item.followed
    lastEnded = false
    if next === item {
      next = nil
      retire(item)
    }
    state.post(.itemStarted(stream: stream.id, item: item.id, sample: sample))
  }

  /// Mixes the outgoing items into frames [`from`, `to`) of `audio`, each at its ramp's level
  /// (`time`: the clock at the block's first frame, `now` the output's sample); one whose ramp is
  /// over or whose audio has run out ends. A ramp that would outlast its item's audio (a file
  /// shorter than its header said) is shortened to end with it, once the decoder has read the
  /// file's last frame. Allocation-free.
  private func mixVoices(
    _ stream: PlayingStream, into audio: UnsafeMutablePointer<Float>, from first: Int, to frames: Int, now: Int64,
    time: Int64, state: RenderState, retire: (AnyObject) -> Void
  ) {
    guard first < frames else { return }
    var index = 0
    while index < voiceCount {
      guard let decoder = voices[index].decoder else {
        index += 1
        continue
      }
      let channels = decoder.outputChannels
      let start = time + Int64(first)
      if decoder.isFinished {
        voices[index].remaining = decoder.ring.available / channels
        voices[index].envelope.end(by: start + Int64(voices[index].remaining), at: start)
      }
      let envelope = voices[index].envelope
      let wanted = min((frames - first) * channels, scratchCapacity)
      let got = envelope.isResting(from: start) && envelope.to == 0 ? 0 : decoder.read(into: scratch, count: wanted)
      voices[index].remaining -= got / channels
      let out = audio + first * channels
      var frame = 0
      while frame < got / channels {
        let level = Float(envelope.value(at: start + Int64(frame)))
        var channel = 0
        while channel < channels {
          out[frame * channels + channel] += scratch[frame * channels + channel] * level
          channel += 1
        }
        frame += 1
      }
      let over = envelope.isResting(from: time + Int64(frames)) && envelope.to == 0
      let drained = got < wanted && decoder.isFinished && decoder.ring.available == 0
      if over || drained {
        // On the output's samples: the clock runs with them through the block.
        let heard = Int64(first + got / channels)
        let end = now + (over ? min(envelope.end - time, heard) : heard)
        retire(decoder)
        _ = endVoice(index, in: stream, at: max(end, now), state: state)
        voices[voiceCount].decoder = nil
        continue
      }
      index += 1
    }
  }

  /// Ends outgoing item `index`: its decoder stops and is handed back (the caller retires it,
  /// so the slot lets go of it without freeing it here); the last voice takes its place.
  private func endVoice(_ index: Int, in stream: PlayingStream, at sample: Int64, state: RenderState) -> StreamDecoder?
  {
    let decoder = voices[index].decoder
    decoder?.cancel()
    state.post(
      .itemEnded(
        stream: stream.id, item: voices[index].item, sample: sample,
        reason: voices[index].skipped ? .skipped : .finished
      ))
    voiceCount -= 1
    // Not `swapAt`: unspecialised in a debug build, it boxes a voice (an allocation and a free).
    if index != voiceCount {
      let voice = voices[index]
      voices[index] = voices[voiceCount]
      voices[voiceCount] = voice
    }
    return decoder
  }

  private func quietest(at sample: Int64) -> Int {
    var best = 0
    var index = 1
    while index < voiceCount {
      if voices[index].envelope.value(at: sample) < voices[best].envelope.value(at: sample) { best = index }
      index += 1
    }
    return best
  }

  /// The decoder the render thread must wait for before a block when it waits for every stream
  /// (a device without a clock), and the samples it waits for; `installing` when the next item
  /// is due within the block but the daemon has not installed it yet.
  func behind(_ stream: PlayingStream, frames: Int, ahead: Int) -> (
    decoder: StreamDecoder?, needed: Int, installing: Bool
  )? {
    let decoder = stream.decoder
    let channels = decoder.outputChannels
    if next == nil && expectsNext {
      let ending = decoder.isFinished && decoder.ring.available < frames * channels
      let fading = transitionStart(decoder.outputLength).map { stream.position + frames >= $0 } ?? false
      if ending || fading { return (nil, 0, true) }
    }
    if let next, !next.decoder.isFinished,
      next.decoder.ring.available < min(ahead * channels, next.decoder.ring.capacity)
    {
      return (next.decoder, min(ahead * channels, next.decoder.ring.capacity), false)
    }
    var index = 0
    while index < voiceCount {
      if let voice = voices[index].decoder, !voice.isFinished,
        voice.ring.available < min(frames * channels, voice.ring.capacity)
      {
        return (voice, min(frames * channels, voice.ring.capacity), false)
      }
      index += 1
    }
    return nil
  }

  /// The stream leaves the mix at `sample`: the playing item, unless its end was announced (a
  /// last item whose audio ran out exactly at a block's end was not), and every one still
  /// fading out (when stopped) end there, for `reason`. Allocation-free.
  func streamEnded(_ stream: PlayingStream, reason: ItemEndReason, at sample: Int64, state: RenderState) {
    if !lastEnded {
      lastEnded = true
      state.post(.itemEnded(stream: stream.id, item: item, sample: sample, reason: reason))
    }
    var index = 0
    while index < voiceCount {
      state.post(.itemEnded(stream: stream.id, item: voices[index].item, sample: sample, reason: reason))
      index += 1
    }
  }

  /// Stops every decoder the queue holds (its stream has ended).
  func cancelAll() {
    next?.decoder.cancel()
    var index = 0
    while index < voiceCount {
      voices[index].decoder?.cancel()
      index += 1
    }
  }

  private static func multiply(
    _ audio: UnsafeMutablePointer<Float>, frames: Int, channels: Int, by envelope: DuckEnvelope, from start: Int64
  ) {
    var frame = 0
    while frame < frames {
      let level = Float(envelope.value(at: start + Int64(frame)))
      var channel = 0
      while channel < channels {
        audio[frame * channels + channel] *= level
        channel += 1
      }
      frame += 1
    }
  }
}

/// The next item made ready for a queue stream (`Player.prepareInstall`): committed on the render
/// thread, it becomes the stream's next item if the stream still plays the item it was chosen
/// after. The next item it replaces is kept here, to be let go of off the render thread.
public final class QueueInstall: RenderCommand, @unchecked Sendable {
  public let stream: String
  /// The playing item it was chosen after.
  public let after: UInt64
  /// The version of the queue it was chosen from (`StreamQueue.generation`).
  public let generation: UInt64
  private var item: QueueItem?
  private let followed: Bool
  private var replaced: QueueItem?
  /// Whether it was installed (written by the commit).
  public private(set) var installed = false

  /// `item` nil: nothing follows the playing item (the queue was cleared, say).
  public init(stream: String, after: UInt64, generation: UInt64, item: QueueItem?) {
    self.stream = stream
    self.generation = generation
    self.after = after
    self.item = item
    followed = item != nil
  }

  public func commit(_ state: RenderState) {
    guard let playing = state.stream(stream), let queue = playing.queue, queue.item == after,
      generation >= queue.generation
    else { return }
    queue.generation = generation
    replaced = queue.next
    queue.next = item
    queue.expectsNext = followed
    installed = true
  }
}

/// A skip made ready off the render thread (`next`, `previous`): the item to skip to, opened and
/// prefilled. Committed on the render thread, allocation-free.
public final class QueueSkip: @unchecked Sendable {
  public let stream: String
  public let item: QueueItem
  private let minimumFrames: Int64
  private var replaced: QueueItem?
  private var cut: AnyObject?
  /// The sample the skip took effect at (written by the commit).
  public private(set) var sample: Int64 = 0

  init(stream: String, item: QueueItem, minimumFrames: Int64) {
    self.stream = stream
    self.item = item
    self.minimumFrames = minimumFrames
  }

  /// Whether stream `stream` plays a queue (render thread).
  public func check(_ state: RenderState) -> Bool { state.stream(stream)?.queue != nil }

  /// Skips (render thread). False when the stream does not play a queue.
  @discardableResult
  public func commit(_ state: RenderState) -> Bool {
    guard let playing = state.stream(stream), let queue = playing.queue else { return false }
    sample = state.engine.now
    queue.skip(
      to: item, in: playing, at: sample, minimumFrames: minimumFrames, state: state, replaced: &replaced, cut: &cut)
    return true
  }
}

extension Player {
  /// An item of a queue, made ready: its file opened (errors name it), its decoder prefilled.
  /// `admit` checks the path the file was opened by, as `prepare`'s does.
  /// With `tail` (a level-triggered crossfade), its quiet tail is found here, off the render
  /// thread, while the decoder prefills. With `loudness`, it is measured (or its measurement
  /// read from the cache) before it decodes: the daemon opens an item while the one before it
  /// plays, so its measurement is done ahead of its turn.
  public func prepareQueueItem(
    _ path: String, id: UInt64, followed: Bool, tail: QuietTail.Trigger? = nil,
    loudness: LoudnessNormalisation? = nil, admit: (_ openedPath: String) throws -> Void = { _ in }
  ) throws -> QueueItem {
    let decoder = try StreamDecoder(
      path: path, outputRate: output.rate, outputChannels: output.channels, bufferSeconds: 1, start: false)
    try admit(decoder.openedPath)
    if let loudness { decoder.normalise(try loudness.trim(for: decoder.openedPath)) }
    decoder.consumerBell = link.commandBell
    decoder.start()
    // The tail is quiet as heard: below the threshold once trimmed.
    let heard = tail.map {
      QuietTail.Trigger(threshold: $0.threshold - (decoder.trim?.decibels ?? 0), window: $0.window)
    }
    let quietStart = heard.flatMap { QuietTail.start(of: decoder.openedPath, $0, outputRate: output.rate) }
    decoder.waitUntilPrefilled()
    return QueueItem(
      id: id, path: path, followed: followed, quietStart: quietStart, unstarted: UnstartedDecoder(decoder))
  }

  /// The render-thread part of a queue stream (given to `prepare`): the crossfades in seconds;
  /// `quietStart`: where the first item's quiet tail begins (`QuietTail.start`).
  public func prepareQueue(
    item: UInt64, followed: Bool, next: QueueItem?, automatic: (seconds: Double, curve: TimingFunction),
    manual: (seconds: Double, curve: TimingFunction), quietStart: Int? = nil
  ) -> StreamQueue {
    let rate = Double(output.rate)
    return StreamQueue(
      item: item, followed: followed, next: next,
      automatic: CrossfadeShape(frames: Int64((automatic.seconds * rate).rounded()), curve: automatic.curve),
      manual: CrossfadeShape(frames: Int64((manual.seconds * rate).rounded()), curve: manual.curve),
      maxSamples: max(output.periodFrames, 64) * output.channels, quietStart: quietStart)
  }

  /// A skip of stream `stream` to `item`, over at least the declick ramp.
  public func prepareSkip(_ stream: String, to item: QueueItem) -> QueueSkip {
    QueueSkip(stream: stream, item: item, minimumFrames: Int64(declickFrames))
  }
}

extension RenderState {
  /// Whether stream `id` plays a queue. Allocation-free.
  public func playsQueue(_ id: String) -> Bool { stream(id)?.queue != nil }
}

extension PlayingStream {
  /// Stops the stream's decoders: the playing item's and its queue's.
  func cancelDecoders() {
    decoder.cancel()
    queue?.cancelAll()
  }
}
