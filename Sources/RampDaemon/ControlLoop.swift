import Foundation
import NIOCore
import NIOPosix

/// The one executor of the daemon's control side: the event loop that serves the connections.
///
/// Every request, reply, event, timer and saved schedule is handled on it, so the control side's
/// state (subscriptions, waits, schedules) is plain data owned by the loop (`NIOLoopBoundBox`),
/// with no locks. What may wait for the disk (opening and measuring a file, syncing the state
/// file) runs on `blocking`'s threads and comes back to the loop with its result.
///
/// An offline render runs the whole show as one task on a loop of its own, with no pool: its
/// blocking work is done in place, so each line is handed to the player before the render goes on.
public struct ControlLoop: Sendable {
  public let eventLoop: EventLoop
  /// Where blocking work runs; nil: in place (an offline render).
  private let blocking: NIOThreadPool?

  public init(eventLoop: EventLoop, blocking: NIOThreadPool?) {
    self.eventLoop = eventLoop
    self.blocking = blocking
  }

  /// A loop on a thread of its own, with no pool: for an offline render and for tests that drive
  /// a controller from their own thread (`run`).
  public static func standalone() -> (ControlLoop, MultiThreadedEventLoopGroup) {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    return (ControlLoop(eventLoop: group.next(), blocking: nil), group)
  }

  public var inLoop: Bool { eventLoop.inEventLoop }

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

  /// Runs `work` where blocking is allowed, then `then` with its result on the loop. With no
  /// pool, or when `inPlace`, both run at once, here.
  public func offload<T: Sendable>(
    inPlace: Bool = false, _ work: @escaping @Sendable () -> T, then: @escaping @Sendable (T) -> Void
  ) {
    guard let blocking, !inPlace else {
      then(work())
      return
    }
    blocking.runIfActive(eventLoop: eventLoop, work).whenComplete { result in
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
    eventLoop.scheduleTask(in: .nanoseconds(Int64(min(max(seconds, 0), 1e9) * 1e9)), body)
  }
}
