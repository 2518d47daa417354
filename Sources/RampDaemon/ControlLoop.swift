import NIOCore
import NIOPosix

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The one executor of the daemon's control side: the event loop that serves the connections.
///
/// Every request, reply, event, timer and saved schedule is handled on it, so the control side's
/// state (subscriptions, waits, schedules) is plain data owned by the loop (`NIOLoopBoundBox`),
/// with no locks. What may wait for the disk runs on a lane of `BlockingLanes` and comes back to
/// the loop with its result.
///
/// An offline render runs the whole show as one task on a loop of its own, with no pool: its
/// blocking work is done in place, so each line is handed to the player before the render goes on.
public struct ControlLoop: Sendable {
  public let eventLoop: EventLoop
  /// Where blocking work runs; nil: in place (an offline render).
  private let blocking: BlockingLanes?

  public init(eventLoop: EventLoop, blocking: BlockingLanes?) {
    self.eventLoop = eventLoop
    self.blocking = blocking
  }

  /// A loop on a thread of its own, with no pool: for an offline render and for tests that drive
  /// a controller from their own thread (`run`).
  public static func standalone() -> (ControlLoop, MultiThreadedEventLoopGroup) {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    return (ControlLoop(eventLoop: group.next(), blocking: nil), group)
  }

  /// Runs `body` on the loop: in place when called there, else as the loop's next task.
  public func execute(_ body: @escaping @Sendable () -> Void) {
    if eventLoop.inEventLoop {
      body()
    } else {
      eventLoop.execute(body)
    }
  }

  /// Runs `body` on the loop and waits for its result: for callers off the loop that must
  /// know (start-up, shutdown, a test's thread). Never called on the loop's own tasks' behalf
  /// from another loop task: on the loop it runs in place.
  public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
    if eventLoop.inEventLoop { return try body() }
    return try eventLoop.submit(body).wait()
  }

  /// Runs `work` on `lane`, then `then` with its result on the loop. With no lanes, both run at
  /// once, here.
  public func offload<T: Sendable>(
    _ lane: BlockingLanes.Lane, _ work: @escaping @Sendable () -> T, then: @escaping @Sendable (T) -> Void = { _ in }
  ) {
    guard let blocking else {
      then(work())
      return
    }
    blocking.pool(lane).runIfActive(eventLoop: eventLoop, work).whenComplete { result in
      switch result {
      case .success(let value): then(value)
      // The pool stopped (rampd is stopping): what was not done is not done.
      case .failure: return
      }
    }
  }

  /// Runs `body` on the loop after `seconds`.
  @discardableResult
  public func after(_ seconds: Double, _ body: @escaping @Sendable () -> Void) -> Scheduled<Void> {
    eventLoop.scheduleTask(in: Self.timeAmount(seconds), body)
  }

  /// `seconds` as the loop counts time (at least 0, at most 10⁹ s).
  static func timeAmount(_ seconds: Double) -> TimeAmount {
    .nanoseconds(Int64(min(max(seconds, 0), 1e9) * 1e9))
  }
}

/// Where the control side's blocking work runs, in lanes that do not wait for each other.
public final class BlockingLanes: Sendable {
  public enum Lane: Sendable {
    /// Opening and measuring the files a request plays: two at once, so one slow file does not
    /// hold up every other connection's.
    case files
    /// Opening the next item of a queue, one after another: never behind a request's measurement,
    /// so a gapless queue's next item is installed in time.
    case queue
    /// Syncing the state file (a schedule, the duck rules): one at a time, so saves complete, and
    /// come back to the loop, in the order they were asked for.
    case disk
  }

  private let files = NIOThreadPool(numberOfThreads: 2)
  private let queue = NIOThreadPool(numberOfThreads: 1)
  private let disk = NIOThreadPool(numberOfThreads: 1)

  public init() {}

  func pool(_ lane: Lane) -> NIOThreadPool {
    switch lane {
    case .files: files
    case .queue: queue
    case .disk: disk
    }
  }

  public func start() {
    for pool in [files, queue, disk] { pool.start() }
  }

  /// Waits for the work under way (a measurement, a sync) to end; what has not started is dropped.
  public func shutdown() {
    for pool in [files, queue, disk] { try? pool.syncShutdownGracefully() }
  }
}
