import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Everything the render thread owns, handed to commands that run on it between blocks.
public final class RenderState: @unchecked Sendable {
  public let engine: AnimationEngine
  public let sampleRate: Int
  public let channels: Int
  let master: PropertyHandle
  var streams: [PlayingStream] = []
  let events: SPSCQueue<PlayerEvent>
  /// What the render thread lets go of, on its way to the recovery thread, which frees it.
  let retired: SPSCQueue<Retired>
  /// Set when an event was posted in this block, so the loop rings the doorbell once.
  var posted = false
  /// Set when something was retired in this block, so the loop rings the recovery thread once.
  var retiredInBlock = false
  /// Counts what cannot be undone by rendering again (an event posted, a command run, something
  /// retired): a rewind goes no further back than its last change (`RewindHistory`).
  var irreversible = 0
  /// Events dropped on a full queue since the last `eventsLost` went out.
  var lostEvents = 0
  /// The values published at every block (`Player.publish`): room for `Player.publishedCapacity`
  /// is reserved, and the player refuses to publish more, so adding one never grows it.
  var published: ContiguousArray<PublishedValue> = []
  /// The duck rules, multiplied into their targets in the mix.
  public let ducks: DuckLayer
  /// The mix as it is output (after `master.gain` and the limiter or the clamp): `master.level.*`.
  let masterLevel: SignalLevel
  /// Some level is observed: the streams' and the master's meters are fed. Off, they cost
  /// nothing; turned on, they start from silence.
  var metersLevels = false
  /// The sample after the last one of audio a stream played before its file ended (0: none yet).
  public internal(set) var audioEnd: Int64 = 0
  /// The sample at which the last animation to end so far ended (0: none yet).
  public private(set) var settled: Int64 = 0

  /// The highest gain a `*.gain` property may take (linear; 1 is 0 dB).
  public let maxGain: Double

  init(
    engine: AnimationEngine, sampleRate: Int, channels: Int, maxGain: Double, events: SPSCQueue<PlayerEvent>,
    retired: SPSCQueue<Retired>
  ) throws {
    self.engine = engine
    self.sampleRate = sampleRate
    self.channels = channels
    self.events = events
    self.retired = retired
    master = try engine.define("master.gain", value: 1, range: 0...maxGain)
    self.maxGain = maxGain
    ducks = DuckLayer(sampleRate: Double(sampleRate), channels: channels, maxFrames: engine.maxBlockSize)
    masterLevel = SignalLevel(sampleRate: sampleRate, channels: channels)
    streams.reserveCapacity(Player.streamCapacity)
    published.reserveCapacity(Player.publishedCapacity)
  }

  /// Hands `object` to the recovery thread, which frees it once the render thread no longer
  /// holds it. Only a full queue (thousands retired in one block) lets go of it here.
  public func retire(_ object: AnyObject) { retire(.object(object)) }

  func retire(_ retired: Retired) {
    _ = self.retired.push(retired)
    retiredInBlock = true
    irreversible &+= 1
  }

  public var streamIDs: [String] { streams.map(\.id) }

  /// How many streams are in the mix. Allocation-free, unlike `streamIDs`.
  public var streamCount: Int { streams.count }

  /// The streams in the mix, for status replies (off the hot path: allocates).
  public var streamSnapshots: [StreamSnapshot] {
    (0..<streams.count).map { snapshot(ofStreamAt: $0).stream }
  }

  /// The `index`-th stream in the mix (0 ..< `streamCount`) and its gain. Allocation-free.
  public func snapshot(ofStreamAt index: Int) -> (stream: StreamSnapshot, gain: PropertyHandle) {
    let stream = streams[index]
    let length = stream.decoder.outputLength
    // A looping file's position counts within the file: it starts again from 0 at each loop.
    let position = stream.decoder.loops && length > 0 ? stream.position % length : stream.position
    return (
      StreamSnapshot(
        id: stream.id, path: stream.decoder.path, paused: stream.paused, stopping: stream.stopping,
        loops: stream.decoder.loops, seconds: Double(position) / Double(sampleRate),
        duration: Double(length) / Double(sampleRate), trim: stream.decoder.trim),
      stream.gain
    )
  }

  public func contains(stream id: String) -> Bool { stream(id) != nil }

  /// Whether stream `id` is in its stop ramp (false: it is not, or there is none). Allocation-free.
  public func isStopping(stream id: String) -> Bool { stream(id)?.stopping ?? false }

  /// Seconds of audio in stream `id`'s file (nil: no such stream).
  public func length(ofStream id: String) -> Double? {
    guard let stream = stream(id) else { return nil }
    return Double(stream.decoder.outputLength) / Double(sampleRate)
  }

  /// Stream `id`, if it is in the mix. Allocation-free (an index loop).
  func stream(_ id: String) -> PlayingStream? {
    var index = 0
    while index < streams.count {
      if streams[index].id == id { return streams[index] }
      index += 1
    }
    return nil
  }

  /// Hands a command's ticket back to the control side, after the events the command caused.
  public func complete(_ ticket: CommandTicket) {
    post(.commandCompleted(ticket))
  }

  /// Posts an event for the control side. Never blocks: a full queue drops it, and the count of
  /// events dropped goes out as `eventsLost` before the next event that fits.
  public func post(_ event: PlayerEvent) {
    if case .animationFinished(let report) = event { settled = max(settled, report.sample) }
    announceLostEvents()
    irreversible &+= 1
    if events.push(event) {
      posted = true
    } else {
      lostEvents += 1
    }
  }

  /// Posts `eventsLost` if events were dropped and there is room for it now.
  func announceLostEvents() {
    guard lostEvents > 0, events.push(.eventsLost(lostEvents)) else { return }
    lostEvents = 0
    posted = true
  }
}

/// A stream as a status reply shows it.
public struct StreamSnapshot: Sendable, Equatable {
  public let id: String
  public let path: String
  public let paused: Bool
  public let stopping: Bool
  public let loops: Bool
  /// Seconds of the file's audio played so far (at the output rate, after a seek: from there;
  /// within the file when it loops).
  public let seconds: Double
  /// Seconds of audio in the file playing (a queue's playing item), at the output rate.
  public let duration: Double
  /// The loudness trim of the file playing, when it is normalised.
  public let trim: LoudnessTrim?
}

/// A stream on the render thread: its decoder's ring, its gain, and the transport gain that
/// makes starting, pausing and stopping ramps instead of cuts.
final class PlayingStream {
  let id: String
  /// The file playing (a queue's playing item).
  var decoder: StreamDecoder
  /// The queue the stream plays, if it plays one.
  var queue: StreamQueue?
  let gain: PropertyHandle
  let transport: PropertyHandle
  /// Stereo balance, −1 (left) … +1 (right); only a two-channel output applies it.
  let pan: PropertyHandle
  var paused: Bool
  /// Paused, and silent since a decision point: its position holds.
  var holding = false
  var stopping = false
  /// A seek waiting for the ramp to silence (then the decoder is asked) or for the decoder.
  var pendingSeek: Int?
  var seekRequested = false
  /// The sample at which a seek's ramp out is over and the new position plays (the seek's own
  /// sample plus the ramp), set at the first span of the seek (`landSeeks`).
  var seekLanding: Int64?
  /// The sample at which the last seek landed: the refill is judged there, not only at a
  /// decision point.
  var landedAt: Int64 = -1
  /// Output frames of this stream's audio consumed, counted from the file's start.
  var position = 0
  /// The ring ran short: the stream ramped out and holds, silent and in place, until its ring has
  /// refilled (an underrun event was posted for it, unless a seek emptied the ring).
  var starved = false
  /// The underrun envelope: 1 while the ring keeps up, ramped to 0 over the audio left when it
  /// runs short, and back to 1 over the declick ramp once it has refilled.
  var supply: Float = 1
  /// Its audio as it goes into the mix (after its gain, transport and ducks, before pan):
  /// `streams.<id>.level.*`.
  let level: SignalLevel

  init(
    id: String, decoder: StreamDecoder, gain: PropertyHandle, transport: PropertyHandle, pan: PropertyHandle,
    paused: Bool, level: SignalLevel
  ) {
    self.id = id
    self.level = level
    self.decoder = decoder
    self.gain = gain
    self.transport = transport
    self.pan = pan
    self.paused = paused
  }

  /// Its file has played to the end (the ring empty, no seek to come, no next item of a queue):
  /// it leaves the mix after the block, and triggers nothing from now on.
  var isDrained: Bool {
    decoder.isFinished && decoder.ring.available == 0 && pendingSeek == nil && !(queue?.continues ?? false)
  }
}
