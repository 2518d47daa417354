/* Linux interfaces Glibc's Swift module leaves out. */
#include <sys/eventfd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* A futex word shared by one waiter and any number of ringers: 0 quiet, 1 rung, 2 the waiter
   sleeps. A ring costs a system call only when the waiter sleeps; a ring before the wait is not
   lost. Swift's Atomic has no address to give the kernel, hence these few lines of C. */
enum { rampd_bell_quiet = 0, rampd_bell_rung = 1, rampd_bell_sleeping = 2 };

static inline void rampd_bell_ring(uint32_t *word) {
  if (__atomic_exchange_n(word, rampd_bell_rung, __ATOMIC_ACQ_REL) == rampd_bell_sleeping)
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Sleeps until rung or `nanoseconds` pass (negative: no limit); takes the ring. True when rung. */
static inline bool rampd_bell_wait(uint32_t *word, int64_t nanoseconds) {
  uint32_t expected = rampd_bell_quiet;
  if (__atomic_compare_exchange_n(word, &expected, rampd_bell_sleeping, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    struct timespec timeout = {(time_t)(nanoseconds / 1000000000), (long)(nanoseconds % 1000000000)};
    /* Returns at once if a ring came between the exchange and the call (the word is no longer 2). */
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, rampd_bell_sleeping, nanoseconds < 0 ? NULL : &timeout,
            NULL, 0);
  }
  return __atomic_exchange_n(word, rampd_bell_quiet, __ATOMIC_ACQ_REL) == rampd_bell_rung;
}

/* The calling thread's kernel id (gettid(2)): one system call, no allocation. */
static inline int32_t rampd_thread_id(void) { return (int32_t)syscall(SYS_gettid); }

/* Defined only where allocations are guarded (a debug build of rampd, the test binary:
   Sources/CAllocationGuard): with `armed` true, any allocation or free on the calling thread
   traps. */
extern void rampd_render_guard(bool armed) __attribute__((weak));

static inline void rampd_guard_this_thread(bool armed) {
  if (rampd_render_guard) rampd_render_guard(armed);
}
