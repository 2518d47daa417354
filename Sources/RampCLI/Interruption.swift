import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Ctrl-C as a flag instead of death, for the commands that wait (`--wait`, `watch`, `observe`,
/// `wait`, `batch`): they notice it between reads and exit with their own status and a clean
/// terminal line. Reads wake up at least every `DaemonConnection.pollSlice`, so the flag is seen
/// within that time even if the signal does not interrupt `poll`.
public enum Interruption {
  /// Set by the signal handler; an atomic store is async-signal-safe.
  private static let flag = Atomic<Bool>(false)

  /// Catches SIGINT and SIGTERM from now on.
  public static func catchSignals() {
    var action = sigaction()
    action.__sigaction_handler.sa_handler = { _ in Interruption.flag.store(true, ordering: .relaxed) }
    sigemptyset(&action.sa_mask)
    // No SA_RESTART: a blocked poll returns EINTR at once.
    action.sa_flags = 0
    sigaction(SIGINT, &action, nil)
    sigaction(SIGTERM, &action, nil)
    // A parent may have left them blocked (the mask is inherited): they would never arrive.
    var signals = sigset_t()
    sigemptyset(&signals)
    sigaddset(&signals, SIGINT)
    sigaddset(&signals, SIGTERM)
    pthread_sigmask(SIG_UNBLOCK, &signals, nil)
  }

  public static var happened: Bool { flag.load(ordering: .relaxed) }
}
