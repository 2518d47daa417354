import Synchronization

/// What an output negotiated when it opened: the format the render thread works in (rate,
/// channels, period and buffer in frames, sample format), what it is (`device`, `kind`) and who
/// keeps time (`pacing`). ALSA's outputs (``AlsaPCMOutput``) and the offline render's
/// (``SinkOutput``) each say their own.
public struct NegotiatedOutput: Sendable, Equatable {
  /// The name the output was opened by (an ALSA PCM name; `render` for an offline render).
  public var device: String
  /// Never `.auto`.
  public var format: OutputConfiguration.SampleFormat
  /// May differ from the requested rate: render at this rate.
  public var rate: Int
  public var channels: Int
  public var periodFrames: Int
  public var bufferFrames: Int
  /// Never `.auto`.
  public var pacing: OutputConfiguration.Pacing
  /// What the output is (an ALSA chain's ``OutputChain/kind``, or ``OutputKind/render``).
  public var kind: OutputKind

  public init(
    device: String, format: OutputConfiguration.SampleFormat, rate: Int, channels: Int, periodFrames: Int,
    bufferFrames: Int, pacing: OutputConfiguration.Pacing, kind: OutputKind
  ) {
    self.device = device
    self.format = format
    self.rate = rate
    self.channels = channels
    self.periodFrames = periodFrames
    self.bufferFrames = bufferFrames
    self.pacing = pacing
    self.kind = kind
  }

  /// Frames left ahead of what plays when a writer that fills the buffer several blocks at a
  /// time wakes to refill it: ``AlsaPCMOutput/refillLead(bufferFrames:periodFrames:rate:margin:)``.
  public func refillLead(margin: Double?) -> Int {
    AlsaPCMOutput.refillLead(bufferFrames: bufferFrames, periodFrames: periodFrames, rate: rate, margin: margin)
  }
}

/// What an output can do, as it says it: the render loop decides its pacing, its rewinds, its
/// idle spells and how it reads the heard clock from this, never from the output's kind or name.
/// May change once the output has played (an ALSA device is known to have a clock only after the
/// first write), so the render thread asks again at each block; reading it allocates nothing.
public struct OutputCapabilities: Sendable, Equatable {
  /// Who keeps time.
  public enum Clock: Sendable, Equatable {
    /// The output's own: a delivery waits for room (a sound card, an audio server's stream).
    case own
    /// rampd's (CLOCK_MONOTONIC): the output takes blocks as fast as they come and the writer
    /// keeps them at most a buffer ahead of the clock (``secondsUntilWritable``: ALSA's `null`,
    /// the embedded WAV output).
    case ours
    /// None: the output takes blocks as fast as they are rendered and nothing is ever late, so
    /// the render waits for every stream's audio instead (an offline render, ALSA's `null` under
    /// device pacing).
    case none
  }

  /// Who moves the blocks.
  public enum Delivery: Sendable, Equatable {
    /// The render thread renders a block and hands it over (``AudioOutput/writeBlock(_:frames:clamped:)``).
    case push
    /// The output asks for a block, of the frames it wants, on its own thread, and the render
    /// step runs there (``PulledRender/renderPulled(into:frames:timing:)``).
    case pull
  }

  public var clock: Clock
  public var delivery: Delivery
  /// Whether what the output holds may ever be rewritten (the player then keeps what a rewind
  /// needs, ``RewindHistory``), whether or not it may be now.
  public var mayRewind: Bool
  /// How far back a rewind may reach now, in frames (0: not now). What the output holds at a
  /// given moment is ``AudioOutput/rewindableFrames()``.
  public var rewindFrames: Int
  /// Frames next to play that a rewind never rewrites (the render thread must render them again
  /// before the output reaches them).
  public var rewindMarginFrames: Int
  /// Whether the render thread may stop delivering while nothing plays (``AudioOutput/stopForIdle()``).
  public var stopsWhenIdle: Bool
  /// Whether an output stopped for idle is also closed, and opened again when something is to
  /// play: an audio server's client, whose open stream keeps the server's graph running.
  public var releasesWhenIdle: Bool
  /// Whether the position it reports wanders more than a clock drifts (an audio server's client
  /// while the server settles its latency), so the heard clock bounds its drift (``HeardClock``).
  public var boundsHeardDrift: Bool

  public init(
    clock: Clock, delivery: Delivery = .push, mayRewind: Bool = false, rewindFrames: Int = 0,
    rewindMarginFrames: Int = 0, stopsWhenIdle: Bool = false, releasesWhenIdle: Bool = false,
    boundsHeardDrift: Bool = false
  ) {
    self.clock = clock
    self.delivery = delivery
    self.mayRewind = mayRewind
    self.rewindFrames = rewindFrames
    self.rewindMarginFrames = rewindMarginFrames
    self.stopsWhenIdle = stopsWhenIdle
    self.releasesWhenIdle = releasesWhenIdle
    self.boundsHeardDrift = boundsHeardDrift
  }

  /// Whether a rewind may happen now.
  public var rewindsNow: Bool { rewindFrames > 0 }

  /// Seconds of what an output holds that are never rewritten: what it plays next, which the
  /// render thread must render and write again before the output reaches it. 3 ms: rendering a
  /// block of the mix takes well under a millisecond; the rest covers a render thread scheduled
  /// late.
  public static let rewindMargin = 0.003

  /// Seconds of audio left in an output that rewinds when its render thread wakes to refill it,
  /// unless `OutputConfiguration.marginTime` says otherwise: the margin against a late wake-up (on
  /// a loaded virtual machine one comes up to about 30 ms late). Latency does not depend on it (a
  /// change rewinds what the output holds); the rest of the buffer is filled per wake-up, so a
  /// longer buffer means fewer wake-ups.
  public static let rewindingLead = 0.05

  /// ``rewindMargin`` in frames at `rate`.
  public static func rewindMarginFrames(rate: Int) -> Int { Int((rewindMargin * Double(rate)).rounded(.up)) }
}

/// When the buffer a pulled output asks for is heard, as the output's own clock says it at the
/// moment it asks: the same mapping a pushed output gives after a write
/// (``AudioOutput/heardPosition()``), with this buffer counted as written.
public struct PullTiming: Sendable, Equatable {
  /// Frames handed over (this buffer's included) not yet heard at `nanoseconds`: the last frame
  /// of this buffer is heard `delay` frames after it.
  public var delay: Int
  /// CLOCK_MONOTONIC nanoseconds.
  public var nanoseconds: Int64
  /// The output skipped frames since the last buffer it asked for (an xrun of its graph): the
  /// heard clock starts a new run, and it counts as an underrun.
  public var discontinuity: Bool
  /// Frames the output played without this renderer since its last buffer (its graph's gap):
  /// what was placed by the last timing is heard that much later. 0 without a gap.
  public var slip: Int

  public init(delay: Int, nanoseconds: Int64, discontinuity: Bool = false, slip: Int = 0) {
    self.delay = delay
    self.nanoseconds = nanoseconds
    self.discontinuity = discontinuity
    self.slip = slip
  }
}

/// The render step a pulled output calls from its own (real-time) thread: the commands that are
/// due, the block of `frames` frames rendered into `buffer` (interleaved float, clamped to
/// [−1, 1], `negotiated.channels` per frame), the values published, the heard clock fed from
/// `timing`. Allocation-free, lock-free, and it waits for no other thread unless the output has
/// no clock (``OutputCapabilities/Clock/none``), where it waits for the streams' audio as a push
/// render does. Implemented by the render loop.
///
/// Live, the render loop lends its step to the output and takes it back (the output failed, or
/// nothing is left to play); while it is lent the output's thread alone runs it. A call that
/// comes while it is not lent renders silence.
public protocol PulledRender: AnyObject, Sendable {
  func renderPulled(into buffer: UnsafeMutablePointer<Float>, frames: Int, timing: PullTiming?) throws(AudioError)
  /// Whom the output tells that it stopped asking for good (its server went away, its stream
  /// failed), from any thread but the one that pulls; nil for a renderer that need not hear it.
  var stopNotice: PulledOutputStop? { get }
}

extension PulledRender {
  public var stopNotice: PulledOutputStop? { nil }
}

/// How a pulled output tells its renderer, from any thread, that it stopped asking for good: a
/// flag and a bell, with no lock and no allocation, so that the render thread can hand it to the
/// output (``AudioOutput/startPulling(_:)``) as it lends its step.
public final class PulledOutputStop: Sendable {
  let stopped = Atomic<Bool>(false)
  let bell: Bell

  init(bell: Bell) { self.bell = bell }

  /// The output stopped asking.
  public func announce() {
    stopped.store(true, ordering: .releasing)
    bell.ring()
  }
}

/// An output: what the render loop and the device recovery know of one. Opened with a format
/// (by its own initialiser: it negotiates ``negotiated``), it takes the mix a block at a time
/// (pushed: ``writeBlock(_:frames:clamped:)``; or pulled: it calls a ``PulledRender`` on its own
/// thread), says when what it was given is heard (``heardPosition()``), may be stopped while idle
/// and closed. ``capabilities`` says which of these it does.
///
/// Owned by one thread at a time (the render thread while it plays; the recovery thread once
/// handed over): not `Sendable`, no locks. A class, so the render thread holds it as a reference:
/// calling it through `any AudioOutput` boxes nothing. Every method the render thread calls is
/// allocation-free and logs nothing.
public protocol AudioOutput: AnyObject {
  /// What the output negotiated when it opened.
  var negotiated: NegotiatedOutput { get }
  /// What it can do now.
  var capabilities: OutputCapabilities { get }

  // MARK: Delivery

  /// Pushed delivery: takes `frames` interleaved frames (`negotiated.channels` per frame),
  /// waiting for room on its own clock. `clamped`: every sample is within [−1, 1], none NaN.
  /// False when the output failed (``failure`` says why, built by whoever asks).
  func writeBlock(_ interleaved: UnsafePointer<Float>, frames: Int, clamped: Bool) -> Bool
  /// With ``OutputCapabilities/Clock/ours``: seconds to wait before `frames` more may be written
  /// (0 once they fit in the buffer ahead of the clock), or until only `refill` frames are left
  /// ahead; 0 on any other clock.
  func secondsUntilWritable(frames: Int, refillAt refill: Int?) -> Double
  /// Frames the output has room for now; nil on an error (the next delivery reports it).
  func availableFrames() -> Int?
  /// Pulled delivery: from now on the output asks `renderer` for its blocks, on its own thread.
  /// False for an output that is pushed.
  func startPulling(_ renderer: any PulledRender) -> Bool

  // MARK: Heard

  /// Where the output is in what it was given: `delay` frames given are not yet heard at
  /// `nanoseconds` (CLOCK_MONOTONIC). Nil while it does not play in real time.
  func heardPosition() -> (delay: Int, nanoseconds: Int64)?
  /// Frames given and not yet heard, for latency reporting.
  var delayFrames: Int { get }
  /// Underruns (and skips) the output counted since it opened.
  var underruns: Int { get }

  // MARK: Rewind

  /// Frames the output holds that a rewind may take back now (0 on any error).
  func rewindableFrames() -> Int
  /// Takes back `frames` frames of what the output holds: the next delivery goes where they
  /// were. Returns how many were taken back.
  func rewind(frames: Int) -> Int

  // MARK: Idle and end

  /// Stops the output, which has played what it holds but its last silence, until the next
  /// deliveries start it again.
  func stopForIdle()
  /// After ``stopForIdle()``: the output is to start at `nanoseconds` (monotonic) exactly. False
  /// when it cannot.
  func start(at nanoseconds: Int64) -> Bool
  /// Plays out what it was given.
  func drain()
  /// Closes it without draining. Idempotent.
  func close()

  // MARK: Failure

  /// Why the last delivery failed: built by whoever asks, off the render thread.
  var failure: AudioError { get }
  /// Set by the render thread as it hands a failed output over: its failure is news (it was
  /// playing), for the thread that takes it over to announce.
  var announcesFailure: Bool { get set }
}

/// Opens an output for the device recovery: the configured one, or the fallback.
public typealias OutputOpener = @Sendable (OutputConfiguration) throws(AudioError) -> any AudioOutput
