import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What the render thread reports: animation completions, streams ending, output trouble.
public enum PlayerEvent: Sendable, Equatable {
  case animationFinished(CompletionReport)
  case streamEnded(id: String, reason: StreamEndReason)
  case streamStarted(id: String, path: String)
  case underrun(stream: String)
  /// The device failed; the message says how. Rendering goes on against the wall clock while the
  /// device is reopened with backoff.
  case deviceFailed(String)
  /// A new device is open and playing again; the name of the ALSA device.
  case deviceRecovered(String)
  /// The configured device, which did not open at start and was waited for, is open and playing;
  /// the name of the ALSA device.
  case deviceArrived(String)
  /// A command's ticket, posted by `RenderState.complete` after the command ran: its results
  /// travel in the ticket, in order with the events around it.
  case commandCompleted(CommandTicket)
  /// The event queue was full: this many events (not tickets, which always have room) were
  /// dropped since the last announcement. Posted once there is room again, before the next event.
  /// Whoever waited for a lost event (an animation's end) must look again.
  case eventsLost(Int)
  /// Duck rule `rule` began its attack at `sample` (`DuckLayer`).
  case duckStarted(rule: String, sample: Int64)
  /// Duck rule `rule`'s release ended at `sample`: its targets are back at their model values.
  case duckEnded(rule: String, sample: Int64)
  /// Queue item `item` of stream `stream` began to be heard at `sample` (`StreamQueue`).
  case itemStarted(stream: String, item: UInt64, sample: Int64)
  /// Queue item `item` was last heard before `sample`: it played to its end or its fade out (a
  /// crossfade, a skip) is over, or its stream stopped or failed (`reason`).
  case itemEnded(stream: String, item: UInt64, sample: Int64, reason: ItemEndReason)
  /// The master limiter lowered the gain in the block from `sample`, by up to
  /// `reductionDecibels`, after a second or more of leaving it alone.
  case limiterEngaged(sample: Int64, reductionDecibels: Double)
}

/// What a command hands back from the render thread. Subclass it to carry results; the render
/// thread writes them before posting the ticket, the event consumer reads them after.
open class CommandTicket: @unchecked Sendable, Equatable {
  public init() {}
  public static func == (a: CommandTicket, b: CommandTicket) -> Bool { a === b }
}

public enum StreamEndReason: String, Sendable {
  /// The file played to its end.
  case finished
  /// Stopped by a command (after its fade-out).
  case stopped
  /// Decoding failed mid-file.
  case failed
}

/// A stream a transport command acted on, and the id of its ramp (for waiting on it).
public struct TransportChange: Sendable, Equatable {
  public let stream: String
  public let animation: UInt64?
}

/// A command prepared off the render thread and committed on it, between blocks: plain data
/// (files opened, animations compiled, key paths built, room reserved for what it did). `commit`
/// neither allocates, frees, locks nor waits; the control side reads what it recorded afterwards
/// (a ticket the commit posts, say). The object is let go of on the recovery thread.
public protocol RenderCommand: AnyObject, Sendable {
  func commit(_ state: RenderState)
  /// False for a command that only reads (a query): on a device that rewinds, nothing is
  /// rewound for it, and a rewind for a later command may go back past it.
  var changesSound: Bool { get }
}

extension RenderCommand {
  public var changesSound: Bool { true }
}
