import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What the render thread lets go of: handed to the recovery thread, which frees it, so the
/// render thread never does.
enum Retired {
  case object(AnyObject)
  case command(PlayerCommand)
}

/// A command for the render thread, run between blocks at `sample` (exactly: the block is split
/// there) or, when nil, before the next block: a prepared command, or (in tests only) a closure,
/// which may allocate.
struct PlayerCommand {
  let sample: Int64?
  let work: Work

  enum Work {
    case command(any RenderCommand)
    case closure(@Sendable (RenderState) -> Void)
  }

  /// Whether it may change what is heard (a closure may do anything).
  var changesSound: Bool {
    switch work {
    case .command(let command): command.changesSound
    case .closure: true
    }
  }
}

/// A device on its way between the render and recovery threads, and whether it is the fallback
/// (played into while the configured device is waited for) or the configured one.
struct HeldDevice {
  let device: any AudioOutput
  let fallback: Bool
}

/// The wait for a configured device that did not open at start, as the recovery thread saw it.
struct DeviceWaitReport {
  /// Attempts to open it so far, the one at start included.
  var attempts = 0
  /// Monotonic seconds of the next attempt (nil: none planned, the device is open).
  var nextAttempt: Double?
  /// Why the last attempt failed.
  var failure = ""
  /// What the configured device negotiated, once it opened.
  var opened: NegotiatedOutput?
}

/// What a player's threads share, and nothing else: the control side (`Player`), the render
/// thread (`RenderLoop`) and the thread that reopens a lost device (`DeviceRecovery`) hand each
/// other commands, events, retired objects and devices through these lock-free queues, wake each
/// other with these bells and read each other's progress in these atomics. Everything in it is
/// immutable or atomic, so it is `Sendable` as it is.
final class RenderLink: Sendable {
  /// Commands from the control side to the render thread.
  let commands = SPSCQueue<PlayerCommand>(minimumCapacity: 4096)
  /// Several control threads may submit; the render thread is the only consumer and never locks.
  /// Held under the same lock: values' unpublications that found the queue full, handed on with
  /// the next command or publication (`Player.unpublish`).
  let submitLock = Mutex<[PreparedPublication]>([])
  /// A completed command's ticket is its reply, which must not be dropped: commands are taken
  /// only while this queue keeps `eventReserve` slots free (for the events and tickets of the
  /// commands taken, scheduled ones coming due and the engine's own), and otherwise wait in
  /// theirs until the control side has caught up.
  let events: SPSCQueue<PlayerEvent>
  /// Half the event queue.
  let eventReserve: Int
  /// Rung by the render thread after posting events; `waitForEvents` sleeps on it.
  let doorbell: DescriptorBell
  /// The other way: `submit` rings it, so a render thread waiting for the clock wakes to take
  /// the command at once.
  let commandBell: Bell
  /// Rung when the render thread hands over a dead device (and at shutdown): a recovery thread
  /// with a healthy device sleeps on it, without waking.
  let recoveryBell: DescriptorBell
  /// False once shutdown is asked for (or an offline player has finished).
  let running = Atomic<Bool>(false)
  /// Set by the render thread as it ends (its device drained and closed).
  let finished = Atomic<Bool>(false)
  /// Finished animations, commands run and streams gone, on their way to the recovery thread
  /// to be freed there (render thread → recovery thread).
  let retired = SPSCQueue<Retired>(minimumCapacity: 4096)
  // Device loss: the render thread hands the dead device over, the recovery thread hands a new one back.
  let deadDevices = SPSCQueue<HeldDevice>(minimumCapacity: 4)
  /// Healthy devices handed over after `configuration.reopenAfter`, to be closed and opened afresh.
  let retiredDevices = SPSCQueue<HeldDevice>(minimumCapacity: 4)
  /// Why a device was lost, or why one retired on schedule could not be opened again: put in
  /// words on the recovery thread, so the render thread posts them without building a string.
  let deviceFailures = SPSCQueue<String>(minimumCapacity: 8)
  /// Devices let go of while idle (an audio server's, whose stream would keep its graph
  /// running): the recovery thread closes them, and opens the device again once `deviceWanted`.
  let parkedDevices = SPSCQueue<HeldDevice>(minimumCapacity: 4)
  /// Set by the render thread when it wakes with its device parked.
  let deviceWanted = Atomic<Bool>(false)
  /// Rung by the recovery thread when the device wanted is open (or could not be opened).
  let deviceReady: Bell
  /// Nanoseconds a parked device took to open again, as last measured (−1: not yet).
  let measuredReopen = Atomic<Int64>(-1)
  /// Devices opened again, from the recovery thread to the render thread.
  let freshDevices = SPSCQueue<HeldDevice>(minimumCapacity: 4)
  /// The configured device has not played since start: the recovery thread opens it with
  /// backoff, and the fallback (if any) plays meanwhile. Cleared by the render thread once the
  /// configured device has taken two buffers.
  let waiting = Atomic<Bool>(false)
  /// The device written to (or lost) is the fallback.
  let usingFallback = Atomic<Bool>(false)
  /// The render thread writes to the configured device, opened after start.
  let usingLateDevice = Atomic<Bool>(false)
  /// What the recovery thread knows of the wait for the configured device (it writes, the control
  /// side reads; the render thread never touches it).
  let waitReport = Mutex<DeviceWaitReport>(DeviceWaitReport())
  /// Set by the recovery thread as it ends.
  let recoveryFinished = Atomic<Bool>(false)
  /// Which sample is heard when, as the render thread last measured it (`HeardClock`).
  let heard = HeardClock.Shared()
  /// The render thread sleeps, idle, and listens for commands (`submit` then rings it).
  let idling = Atomic<Bool>(false)
  /// The device is stopped while nothing plays.
  let stoppedIdle = Atomic<Bool>(false)
  /// Nanoseconds from the command that ended the idle to its first sample heard, as last measured
  /// (−1: not yet).
  let measuredResume = Atomic<Int64>(-1)
  /// When the first command of the current idle spell was submitted (monotonic nanoseconds; 0:
  /// none yet): the render thread's own wake-up comes later, by however long the scheduler takes.
  let idleEndedAt = Atomic<Int64>(0)
  /// The render thread's kernel id once it runs.
  let renderThread = Atomic<Int32>(0)
  /// The kernel id of the output's thread that runs the render step while it is lent (a pulled
  /// output's); 0 when the output pushes, or once a pulled output is lost.
  let pullThread = Atomic<Int32>(0)
  /// Blocks rendered.
  let blockCount = Atomic<Int>(0)
  /// The sample the next block starts at, published after each block: what `at` times count from.
  let published = Atomic<Int64>(0)
  /// Device underruns recovered so far, lost devices' included.
  let underrunCount = Atomic<Int>(0)
  /// False while the device is lost and being reopened.
  let healthy = Atomic<Bool>(true)
  /// The device is known to take samples as fast as they come (no clock of its own).
  let noClock = Atomic<Bool>(false)
  /// The render thread's RLIMIT_RTPRIO when it asked for real time (-1: not yet asked, `Int.max`:
  /// unlimited): its request's bound.
  let realtimeLimit = Atomic<Int>(-1)
  /// What the kernel answered the render thread's request for SCHED_FIFO (0: granted or not asked).
  let realtimeError = Atomic<Int32>(0)
  /// The master limiter's gain reduction at the last block's end, dB (its bit pattern), and the
  /// times it engaged after a second or more without lowering anything.
  let limiterReduction = Atomic<UInt64>(0.0.bitPattern)
  let limiterEngagements = Atomic<Int>(0)
  /// The sample from which the meters measure (they start from silence when some level comes to
  /// be published), −1 while none is: a level read after it by a whole window is the signal's.
  let meteringSince = Atomic<Int64>(-1)
  /// Who runs the render step while a pulled output plays (``PullHandOver``).
  let pull = PullHandOver()

  init(eventCapacity: Int) throws {
    events = SPSCQueue<PlayerEvent>(minimumCapacity: max(eventCapacity, 16))
    eventReserve = events.capacity / 2
    doorbell = try DescriptorBell("event")
    commandBell = Bell()
    recoveryBell = try DescriptorBell("recovery")
    deviceReady = Bell()
  }

  /// Frees what the render thread let go of (the recovery thread does, and an offline player's
  /// caller between blocks).
  func reapRetired() {
    while retired.pop() != nil {}
  }
}
