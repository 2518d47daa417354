import CLinux

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A wake-up from any thread to one that sleeps waiting for it: a futex word. `ring` never
/// blocks, makes a system call only when the waiter sleeps, and a ring before the wait is not
/// lost. Neither side allocates or locks, so the render thread may ring or wait. A sleep on it
/// costs the kernel less than `poll` on a descriptor (no descriptor to look up, no poll table),
/// which a render thread pays at every wake-up.
final class Bell: @unchecked Sendable {
  /// The futex word (`rampd_bell_*` in CLinux); atomics only, and the word never moves.
  private let word: UnsafeMutablePointer<UInt32>

  init() {
    word = .allocate(capacity: 1)
    word.initialize(to: 0)
  }

  deinit { word.deallocate() }

  func ring() { rampd_bell_ring(word) }

  /// Sleeps until rung or `nanoseconds` pass (negative: no limit), then takes the ring. True when
  /// rung.
  @discardableResult
  func wait(nanoseconds: Int64) -> Bool { rampd_bell_wait(word, nanoseconds) }

  /// Sleeps until rung or `seconds` pass (negative: no limit). True when rung.
  @discardableResult
  func wait(seconds: Double) -> Bool {
    // Rounded up to whole microseconds: a deadline computed in seconds has then passed on waking.
    wait(nanoseconds: seconds < 0 ? -1 : Int64((min(seconds, 3600) * 1e6).rounded(.up)) * 1000)
  }
}

/// A bell with a descriptor, for a waiter that sleeps in `poll` on other descriptors too (or an
/// event loop that watches it): a non-blocking, close-on-exec eventfd. `ring` never blocks and a
/// ring before the wait is not lost: the count waits in the eventfd until the waiter reads it.
/// Neither side allocates or locks, so the render thread may ring it.
final class DescriptorBell: @unchecked Sendable {
  let descriptor: Int32

  /// `purpose` names the bell in the error thrown when none can be made (out of descriptors).
  init(_ purpose: String, code: AudioError.Code = .device) throws(AudioError) {
    descriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
    guard descriptor >= 0 else {
      throw AudioError(code, "cannot create the \(purpose) eventfd: \(String(cString: strerror(errno)))")
    }
  }

  deinit { close(descriptor) }

  func ring() {
    var one: UInt64 = 1
    _ = write(descriptor, &one, 8)
  }

  /// Sleeps until rung or `milliseconds` pass (negative: no limit), then takes the rings.
  /// True when rung.
  @discardableResult
  func wait(milliseconds: Int32) -> Bool {
    var waiting = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    guard poll(&waiting, 1, milliseconds) > 0 else { return false }
    drain()
    return true
  }

  /// Sleeps until rung, `other` (a descriptor) is readable, or `milliseconds` pass (negative: no
  /// limit), then takes the rings. True when `other` is readable.
  func wait(milliseconds: Int32, orReadable other: CInt) -> Bool {
    var descriptors = (
      pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0), pollfd(fd: other, events: Int16(POLLIN), revents: 0)
    )
    let ready = withUnsafeMutableBytes(of: &descriptors) { bytes in
      poll(bytes.baseAddress!.assumingMemoryBound(to: pollfd.self), 2, milliseconds)
    }
    guard ready > 0 else { return false }
    if descriptors.0.revents != 0 { drain() }
    return descriptors.1.revents & Int16(POLLIN) != 0
  }

  /// Takes the rings without waiting: one read resets the count.
  func drain() {
    var count: UInt64 = 0
    _ = read(descriptor, &count, 8)
  }
}

/// Milliseconds for `poll` from seconds, rounded up (a wait that ends early would cost a
/// second wake-up), at least 1 and at most an hour.
func pollMilliseconds(_ seconds: Double) -> Int32 {
  Int32(min(max((seconds * 1000).rounded(.up), 1), 3_600_000))
}

/// The kernel's id of the calling thread (its directory under `/proc/self/task`): tests read
/// the thread's `schedstat` with it. A system call; no allocation.
func currentThreadID() -> Int32 { rampd_thread_id() }

/// Flushes subnormal floats to zero on the calling thread, results (FTZ) and inputs (DAZ): a
/// fade towards a decibel floor or a filter's decaying tail would otherwise produce subnormal
/// gains and samples, which cost a hundred times a normal multiply on x86. Call it once when a
/// render or decoder thread starts (it lasts for the thread; libsoxr's SIMD code obeys it too).
public func flushSubnormalsOnThisThread() {
  var environment = fenv_t()
  guard fegetenv(&environment) == 0 else { return }
  #if arch(x86_64)
    // MXCSR: flush-to-zero (bit 15) and denormals-are-zero (bit 6).
    environment.__mxcsr |= 0x8040
  #elseif arch(arm64)
    // FPCR.FZ (bit 24): both, on AArch64.
    environment.__fpcr |= 1 << 24
  #endif
  fesetenv(&environment)
}
