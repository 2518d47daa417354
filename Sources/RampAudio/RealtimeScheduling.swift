#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Whether the render thread runs in real time, read from the kernel, with what it asked for and
/// what it was answered: the data `status` explains itself from.
public struct RealtimeScheduling: Sendable, Equatable {
  /// The render thread's policy is SCHED_FIFO or SCHED_RR, however it got there (its own request,
  /// or `chrt` from outside).
  public let granted: Bool
  /// Its real-time priority; 0 at normal priority.
  public let priority: Int
  /// RLIMIT_RTPRIO when the render thread asked (`Int.max`: unlimited); nil until it has.
  public let limit: Int?
  /// The kernel's error number refusing the request (or reading the limit); nil when none.
  public let error: Int32?

  public init(granted: Bool, priority: Int, limit: Int?, error: Int32?) {
    self.granted = granted
    self.priority = priority
    self.limit = limit
    self.error = error
  }

  init(thread: Int32, limit: Int, error: Int32) {
    var granted = false
    var priority = 0
    if thread > 0 {
      // SCHED_RESET_ON_FORK may be or-ed into the policy.
      let policy = sched_getscheduler(thread) & ~0x4000_0000
      var parameters = sched_param()
      if policy == SCHED_FIFO || policy == SCHED_RR, sched_getparam(thread, &parameters) == 0 {
        granted = true
        priority = Int(parameters.sched_priority)
      }
    }
    self.init(granted: granted, priority: priority, limit: limit < 0 ? nil : limit, error: error == 0 ? nil : error)
  }
}
