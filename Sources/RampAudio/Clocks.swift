#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

// The clocks the player reads, without allocating (the render thread reads them too).

/// CLOCK_REALTIME in seconds since the epoch: the wall clock an `at` time is given on.
func realtimeSeconds() -> Double {
  var time = timespec()
  clock_gettime(CLOCK_REALTIME, &time)
  return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// CLOCK_MONOTONIC in seconds.
func monotonicSeconds() -> Double {
  var time = timespec()
  clock_gettime(CLOCK_MONOTONIC, &time)
  return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// Sleeps until CLOCK_MONOTONIC reads `deadline` nanoseconds.
func sleepUntil(nanoseconds deadline: Int64) {
  var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
  while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &time, nil) == EINTR {}
}

/// CLOCK_MONOTONIC in nanoseconds.
func monotonicNanoseconds() -> Int64 {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}
