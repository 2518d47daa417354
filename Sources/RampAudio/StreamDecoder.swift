import Dispatch
import RampEngine
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Decodes a file ahead of playback on a thread of its own, so disk reads never stall the render
/// thread: libsndfile → libsoxr (when the file's rate differs from the output's) → channel map →
/// a `RingBuffer` of interleaved output frames. The render thread only ever reads the ring.
///
/// The decoder fills the ring, then sleeps until the consumer has read it down to half
/// (`lowWater`): `read` rings a bell then, once per refill, so an idle decoder costs nothing and a
/// busy one refills in large runs (about 0.7 s of audio for a one-second ring), however fast the
/// consumer goes. A seek or a cancellation rings it too.
public final class StreamDecoder: @unchecked Sendable {
  public let path: String
  /// The file opened, as the kernel names it (see `SoundFileReader.openedPath`).
  public let openedPath: String
  public let outputChannels: Int
  public let outputRate: Int
  /// The file's own rate and channels.
  public let fileRate: Int
  public let fileChannels: Int
  public let ring: RingBuffer
  public let loops: Bool
  /// Samples in the ring at or below which `read` wakes a decoder waiting for room: half of it.
  public let lowWater: Int

  private let reader: SoundFileReader
  /// The decoder thread's working blocks.
  private let scratch: DecodeScratch
  private let resampler: Resampler?
  private let channelMap: ChannelMap
  private let state = Atomic<Int>(State.running.rawValue)
  /// Written once, by the decoder thread, before it stores `State.failed` (releasing); read only
  /// after loading that state (acquiring). The state is the flag; no lock is shared with the
  /// render thread.
  private nonisolated(unsafe) var failure: AudioError?
  /// Not the Thread itself: it holds its closure, which holds the decoder, and a decoder holding
  /// it would never be freed (nor its file, ring and bell).
  private let started = Atomic<Bool>(false)
  /// A seek the consumer asked for, −1 when none: its generation in the bits above
  /// `positionBits`, the frame in the file below.
  private let seekRequest = Atomic<Int>(-1)
  /// The ring's write position when the last seek took effect (data before it is stale), tagged
  /// with that seek's generation as `seekRequest` is; −1 when none.
  private let seekMark = Atomic<Int>(-1)
  /// The generation of the consumer's latest seek request (consumer only): a mark of another
  /// generation answers an earlier seek, overtaken by a second before the decoder had sought.
  private var requestedGeneration = 0
  /// Positions (file frames, ring positions) below, generation above: 2⁴⁸ samples are 1.5 years
  /// of eight channels at 768 kHz.
  private static let positionBits = 48
  private static let positionMask = (1 << positionBits) - 1
  /// Tests: while true, a decoder that has sought waits before it publishes its mark.
  let holdSeekMarkForTesting = Atomic<Bool>(false)
  /// Rung by the consumer (room in the ring), by a seek and by a cancellation.
  private let bell: Bell
  /// What the decoder thread sleeps for (a `Waiting`): only a decoder waiting for room is rung
  /// by `read`, so a finished one is not woken at every block while its ring drains.
  private let waiting = Atomic<Int>(Waiting.nothing.rawValue)
  /// Rung when a consumer waiting in `awaitSamples` may go on. Set before `start`.
  var consumerBell: Bell?
  /// Samples that consumer waits for (0: none waits).
  private let consumerWants = Atomic<Int>(0)
  /// Tests: while true, the decoder thread decodes nothing, as if its disk had stalled.
  let stalledForTesting = Atomic<Bool>(false)
  /// The decoder thread's kernel id once it runs (tests read its `schedstat`).
  var threadID: Int32 { decoderThread.load(ordering: .acquiring) }
  private let decoderThread = Atomic<Int32>(0)
  /// The loudness trim multiplied into every sample decoded (nil: none). Set before `start`, and
  /// never after: the decoder thread and the render thread only read it.
  public private(set) var trim: LoudnessTrim?
  /// The file's length in output frames (at most 10¹⁵, whatever its header claims).
  public let outputLength: Int
  /// Frames decoded per read from the file.
  static let blockFrames = 4096
  /// The file rates decoded: a header outside them is damaged, and resampling from, say, 1 Hz
  /// would need gigabytes of buffer.
  public static let fileRates = 1000...768_000

  enum State: Int { case running, finished, failed, cancelled }
  private enum Waiting: Int { case nothing, room, command }

  /// Opens `path` (errors name it) and starts decoding into a ring holding `bufferSeconds`.
  public init(
    path: String, outputRate: Int, outputChannels: Int, bufferSeconds: Double = 1, loops: Bool = false,
    start: Bool = true
  ) throws(AudioError) {
    reader = try SoundFileReader(path: path)
    self.path = path
    openedPath = reader.openedPath
    self.outputRate = outputRate
    self.outputChannels = outputChannels
    self.loops = loops
    fileRate = reader.sampleRate
    fileChannels = reader.channels
    guard Self.fileRates.contains(fileRate) else {
      throw AudioError(
        .unreadableFile,
        "cannot read '\(path)': its sample rate, \(fileRate) Hz, is outside the \(Self.fileRates.lowerBound) to "
          + "\(Self.fileRates.upperBound) Hz rampd decodes.")
    }
    outputLength = Int(min(max((Double(reader.frames) * Double(outputRate) / Double(fileRate)).rounded(), 0), 1e15))
    resampler =
      reader.sampleRate == outputRate
      ? nil
      : try Resampler(inputRate: Double(reader.sampleRate), outputRate: Double(outputRate), channels: reader.channels)
    channelMap = try ChannelMap(inputChannels: reader.channels, outputChannels: outputChannels)
    scratch = DecodeScratch(
      fileRate: fileRate, fileChannels: fileChannels, outputRate: outputRate, outputChannels: outputChannels,
      resamplerInputRate: resampler?.inputRate)
    ring = RingBuffer(minimumCapacity: Int(Double(outputRate) * bufferSeconds) * outputChannels)
    lowWater = ring.capacity / 2
    bell = Bell()
    if start { self.start() }
  }

  /// Decodes the file trimmed by `trim` (`LoudnessTrim`). Before `start` only.
  public func normalise(_ trim: LoudnessTrim) {
    precondition(!started.load(ordering: .relaxed), "a decoder's trim is set before it starts")
    self.trim = trim
  }

  public func start() {
    guard !started.exchange(true, ordering: .relaxed) else { return }
    // The thread holds the decoder until it returns (cancelled, failed).
    startThread(named: "rampd-decoder") { [self] in run() }
  }

  /// Waits (on the calling thread, never the render thread) until the ring holds `seconds` of
  /// audio, is full, or decoding is over, so a stream starts without an underrun.
  public func waitUntilPrefilled(seconds: Double = 0.2, timeout: Double = 2) {
    let wanted = min(Int(seconds * Double(outputRate)) * outputChannels, ring.capacity)
    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout * 1e9)
    while ring.available < wanted && !isFinished && DispatchTime.now().uptimeNanoseconds < deadline {
      usleep(500)
    }
  }

  /// Consumer (the render thread): copies up to `count` samples out of the ring; returns how many
  /// there were. Once the ring is down to `lowWater` and the decoder sleeps waiting for room,
  /// wakes it (one ring of its bell per refill). Allocation-free and lock-free.
  @discardableResult
  public func read(into samples: UnsafeMutablePointer<Float>, count: Int) -> Int {
    let got = ring.read(into: samples, count: count)
    wakeIfLow()
    return got
  }

  /// Consumer: as `read`, in place (`RingBuffer.consume`).
  @discardableResult
  public func consume(count: Int, _ body: (UnsafePointer<Float>, _ offset: Int, _ count: Int) -> Void) -> Int {
    let got = ring.consume(count: count, body)
    wakeIfLow()
    return got
  }

  private func wakeIfLow() {
    // What the ring holds for the decoder's room: the unread audio and what is kept to be read
    // again (`RingBuffer.holds`).
    if ring.capacity - ring.space <= lowWater { wakeIfWaitingForRoom() }
  }

  /// Consumer: what was read before `position` (a `RingBuffer.readPosition`) may be overwritten;
  /// wakes the decoder if that made the room it waits for.
  public func release(upTo position: Int) {
    ring.release(upTo: position)
    wakeIfLow()
  }

  private func wakeIfWaitingForRoom() {
    // Pairs with the fence in `sleep(until:)`: either the decoder sees the room this read
    // made, or this sees the decoder asleep.
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    if waiting.load(ordering: .relaxed) == Waiting.room.rawValue,
      waiting.compareExchange(
        expected: Waiting.room.rawValue, desired: Waiting.nothing.rawValue, ordering: .relaxed
      ).exchanged
    {
      bell.ring()
    }
  }

  /// Consumer: asks for `consumerBell` to ring once the ring holds `count` samples (at most its
  /// capacity) or decoding is over. False when that is so already: nothing to wait for.
  func awaitSamples(_ count: Int) -> Bool {
    let wanted = min(max(count, 1), ring.capacity)
    consumerWants.store(wanted, ordering: .relaxed)
    // Pairs with the fence in `notifyConsumer`: either the decoder sees the wish, or this sees
    // what it wrote.
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    if ring.available >= wanted || isFinished {
      consumerWants.store(0, ordering: .relaxed)
      return false
    }
    wakeIfWaitingForRoom()
    return true
  }

  /// Decoder thread: rings the waiting consumer once what it waits for is there.
  private func notifyConsumer() {
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    let wanted = consumerWants.load(ordering: .relaxed)
    guard wanted > 0, ring.available >= wanted || isFinished else { return }
    if consumerWants.compareExchange(expected: wanted, desired: 0, ordering: .relaxed).exchanged {
      consumerBell?.ring()
    }
  }

  /// True once the whole file is in the ring (or decoding stopped); the stream ends when the ring
  /// is empty too.
  public var isFinished: Bool { state.load(ordering: .acquiring) != State.running.rawValue }

  /// The error that stopped decoding, if one did (a read error mid-file). Off the render thread:
  /// it copies the message.
  public var error: AudioError? { hasFailed ? failure : nil }

  /// Decoding stopped on an error (render thread: one atomic load).
  public var hasFailed: Bool { state.load(ordering: .acquiring) == State.failed.rawValue }

  /// Consumer: asks the decoder to continue from `frame` of the file (output-rate frames are
  /// converted to the file's rate). Until `takeSeekMark()` returns a mark, the ring still holds
  /// audio from before the seek.
  public func requestSeek(toOutputFrame frame: Int) {
    // Past the end is the end: the stream then finishes instead of failing on a bad seek. Clamped
    // before the conversion, which traps on a value beyond Int.
    let fileFrame = min(
      max((Double(frame) * Double(fileRate) / Double(outputRate)).rounded(), 0), Double(reader.frames),
      Double(Self.positionMask))
    requestedGeneration = (requestedGeneration + 1) & 0x7FFF
    seekMark.store(-1, ordering: .releasing)
    seekRequest.store(requestedGeneration << Self.positionBits | Int(fileFrame), ordering: .releasing)
    bell.ring()
  }

  /// Consumer: once the decoder has sought, the ring position from which its data is the new
  /// position's (discard up to it); nil while the seek is still pending.
  public func takeSeekMark() -> Int? {
    let mark = seekMark.load(ordering: .acquiring)
    guard mark >= 0, seekMark.compareExchange(expected: mark, desired: -1, ordering: .acquiringAndReleasing).exchanged
    else { return nil }
    // An earlier seek's mark: this seek's own follows once the decoder has taken it.
    guard mark >> Self.positionBits == requestedGeneration else { return nil }
    return mark & Self.positionMask
  }

  /// Consumer: a seek was asked for and its mark has not come yet (`takeSeekMark` would give nil).
  public var seekIsPending: Bool {
    let mark = seekMark.load(ordering: .acquiring)
    return mark < 0 || mark >> Self.positionBits != requestedGeneration
  }

  /// Stops the thread soon; safe from any thread.
  public func cancel() {
    // Not a loop over an array literal: the render thread cancels a stream that ends.
    _ = state.compareExchange(
      expected: State.running.rawValue, desired: State.cancelled.rawValue, ordering: .acquiringAndReleasing)
    _ = state.compareExchange(
      expected: State.finished.rawValue, desired: State.cancelled.rawValue, ordering: .acquiringAndReleasing)
    bell.ring()
  }

  /// Decoder thread: sleeps until the ring is down to `lowWater` (`room`) or, in any case, until
  /// a seek or a cancellation rings. The timeout is only a safety net (and keeps a consumer that
  /// reads `ring` directly, not through `read`, supplied): for room, half again the time the
  /// ring takes to fall to `lowWater` in real time.
  private func sleep(until reason: Waiting) {
    waiting.store(reason.rawValue, ordering: .relaxed)
    atomicMemoryFence(ordering: .sequentiallyConsistent)
    let filled = ring.capacity - ring.space
    let ready =
      (reason == .room && filled <= lowWater) || seekRequest.load(ordering: .relaxed) >= 0
      || state.load(ordering: .relaxed) == State.cancelled.rawValue
    if !ready {
      let samplesPerSecond = Double(outputRate * outputChannels)
      let timeout = reason == .room ? 1.5 * Double(filled - lowWater) / samplesPerSecond + 0.02 : 1
      bell.wait(seconds: timeout)
    }
    waiting.store(Waiting.nothing.rawValue, ordering: .relaxed)
  }

  /// NaN and infinite samples (a damaged float file) become silence here: in the mix, one would
  /// silence every other stream with it, whatever this stream's gain.
  static func silenceNonFinite(_ samples: UnsafeMutablePointer<Float>, count: Int) {
    var index = 0
    while index < count {
      if !samples[index].isFinite { samples[index] = 0 }
      index += 1
    }
  }

  private func run() {
    nameThisThread("rampd-decoder")
    flushSubnormalsOnThisThread()
    decoderThread.store(currentThreadID(), ordering: .releasing)
    let block = scratch.block
    let fileFrames = scratch.fileFrames
    let resampledCapacity = scratch.resampledCapacity
    let resampled = scratch.resampled
    let mapped = scratch.mapped
    // Failed or cancelled: a consumer waiting for samples waits no more.
    defer { notifyConsumer() }
    var pending = 0  // mapped samples not yet in the ring
    var pendingOffset = 0
    // Where they are: `mapped`, or the decoded samples themselves when the map is the identity.
    var pendingBase = mapped
    var endOfFile = false
    let samplesAreBounded = reader.samplesAreBounded
    let trimFactor = trim?.factor ?? 1
    // Runs until cancelled or failed; a finished decoder waits for a seek back.
    while true {
      let current = state.load(ordering: .acquiring)
      if current == State.cancelled.rawValue || current == State.failed.rawValue { break }
      if stalledForTesting.load(ordering: .relaxed) {
        usleep(1_000)
        continue
      }
      let requested = seekRequest.exchange(-1, ordering: .acquiringAndReleasing)
      if requested >= 0 {
        do {
          try reader.seek(toFrame: Int64(requested & Self.positionMask))
          resampler?.reset()
        } catch {
          failure = error
          state.store(State.failed.rawValue, ordering: .releasing)
          break
        }
        pending = 0
        endOfFile = false
        _ = state.compareExchange(
          expected: State.finished.rawValue, desired: State.running.rawValue, ordering: .acquiringAndReleasing)
        while holdSeekMarkForTesting.load(ordering: .relaxed)
          && state.load(ordering: .relaxed) != State.cancelled.rawValue
        {
          usleep(1_000)
        }
        let generation = requested >> Self.positionBits
        seekMark.store(generation << Self.positionBits | ring.writePosition & Self.positionMask, ordering: .releasing)
      }
      if pending > 0 {
        let written = ring.write(pendingBase + pendingOffset, count: pending)
        pending -= written
        pendingOffset += written
        notifyConsumer()
        if pending > 0 {
          // The ring is full: sleep until it is half empty, then refill it in one run.
          sleep(until: .room)
          continue
        }
      }
      if endOfFile {
        _ = state.compareExchange(
          expected: State.running.rawValue, desired: State.finished.rawValue, ordering: .acquiringAndReleasing)
        notifyConsumer()
        // Everything is in the ring: only a seek (back into the file) or the end wakes it.
        sleep(until: .command)
        continue
      }
      do {
        var frames = try reader.read(into: fileFrames, frames: block)
        if frames == 0 && loops {
          try reader.seek(toFrame: 0)
          frames = try reader.read(into: fileFrames, frames: block)
        }
        if !samplesAreBounded { Self.silenceNonFinite(fileFrames, count: frames * fileChannels) }
        var source = fileFrames
        if let resampler {
          // soxr may take the input in parts; offer the rest until it is all in.
          var offered = 0
          var produced = 0
          repeat {
            let result = try resampler.process(
              input: frames > 0 ? UnsafePointer(fileFrames + offered * fileChannels) : nil,
              inputFrames: frames - offered, output: resampled + produced * fileChannels,
              outputCapacity: resampledCapacity - produced)
            offered += result.consumed
            produced += result.produced
          } while frames > 0 && offered < frames && produced < resampledCapacity
          source = resampled
          if frames == 0 && produced == 0 { endOfFile = true }
          frames = produced
        } else if frames == 0 {
          endOfFile = true
        }
        if channelMap.isIdentity {
          pendingBase = source
        } else {
          channelMap.map(source, frames: frames, into: mapped)
          pendingBase = mapped
        }
        pending = frames * outputChannels
        // Filtering or folding huge (finite) samples can overflow.
        if !samplesAreBounded && pendingBase != fileFrames { Self.silenceNonFinite(pendingBase, count: pending) }
        if trimFactor != 1 { GainKernel.scale(pendingBase, by: trimFactor, count: pending) }
        pendingOffset = 0
      } catch {
        failure = error
        state.store(State.failed.rawValue, ordering: .releasing)
        break
      }
    }
  }
}

/// A decoder thread's working blocks: the file's frames, soxr's output, the channel map's output.
/// Owned by the decoder, not the thread's stack, so they live exactly as long as the decoder and
/// are reachable from it (LeakSanitizer, scanning at exit, need not find them on a sleeping
/// thread's stack).
private final class DecodeScratch {
  /// File frames read at a time: upsampling reads fewer, so a block stays about
  /// `StreamDecoder.blockFrames` output frames, whatever the ratio.
  let block: Int
  let resampledCapacity: Int
  let fileFrames: UnsafeMutablePointer<Float>
  let resampled: UnsafeMutablePointer<Float>
  let mapped: UnsafeMutablePointer<Float>

  init(fileRate: Int, fileChannels: Int, outputRate: Int, outputChannels: Int, resamplerInputRate: Double?) {
    let block = min(max(StreamDecoder.blockFrames * fileRate / outputRate, 16), StreamDecoder.blockFrames)
    let resampledCapacity = resamplerInputRate.map { 2 * Int(Double(block) * Double(outputRate) / $0) + 256 } ?? block
    self.block = block
    self.resampledCapacity = resampledCapacity
    fileFrames = .allocate(capacity: block * fileChannels)
    resampled = .allocate(capacity: resampledCapacity * fileChannels)
    mapped = .allocate(capacity: resampledCapacity * outputChannels)
  }

  deinit {
    fileFrames.deallocate()
    resampled.deallocate()
    mapped.deallocate()
  }
}
