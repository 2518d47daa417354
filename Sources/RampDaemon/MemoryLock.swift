#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// rampd's memory locked into RAM (`mlockall`), so that no page the render thread touches is paged
/// out and read back from disk while a period waits for it.
public struct MemoryLock: Sendable, Equatable {
  public let granted: Bool
  /// RLIMIT_MEMLOCK, bytes (`Int.max`: unlimited).
  public let limit: Int
  /// Whether `mlockall` was called: not under a finite limit the process may not exceed.
  public let attempted: Bool
  /// Its error number when it failed.
  public let error: Int32?

  /// Locks the process's memory, present and future, where that cannot starve it. Called once,
  /// as the daemon starts.
  ///
  /// Pages are locked as they are first touched (MCL_ONFAULT), not all at once: the address space
  /// holds thread stacks and malloc arenas reserved far beyond what is used, which would otherwise
  /// all become resident.
  public static func lockAll() -> MemoryLock {
    var limit = rlimit()
    guard getrlimit(__rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue), &limit) == 0 else {
      return MemoryLock(granted: false, limit: 0, attempted: false, error: errno)
    }
    let bytes = limit.rlim_cur == rlim_t.max ? Int.max : Int(clamping: limit.rlim_cur)
    if bytes != Int.max && !mayLockBeyond(bytes) {
      return MemoryLock(granted: false, limit: bytes, attempted: false, error: nil)
    }
    guard mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == 0 else {
      return MemoryLock(granted: false, limit: bytes, attempted: true, error: errno)
    }
    return MemoryLock(granted: true, limit: bytes, attempted: true, error: nil)
  }

  /// Whether the kernel lets this process lock more than `limit` bytes (CAP_IPC_LOCK). With
  /// MCL_FUTURE every later mapping counts against the limit, so under a finite one that it may
  /// not exceed, a new thread's stack or a decoder's buffer would one day be refused. Asked with
  /// a locked mapping just over the limit, inaccessible, so nothing is made resident.
  private static func mayLockBeyond(_ limit: Int) -> Bool {
    let size = limit + Int(getpagesize())
    guard
      let mapping = mmap(nil, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_LOCKED, -1, 0),
      mapping != MAP_FAILED
    else { return false }
    munmap(mapping, size)
    return true
  }
}
