#ifndef RAMPD_ALLOCATION_COUNTER_H
#define RAMPD_ALLOCATION_COUNTER_H
/// Heap allocations (malloc, calloc, realloc, memalign and friends) made so far by the calling
/// thread. Linked into the test binary only: it replaces the allocator's entry points with
/// counting wrappers around glibc's own.
long rampd_allocations_on_this_thread(void);
/// Blocks freed (free with a non-null pointer) so far by the calling thread.
long rampd_frees_on_this_thread(void);
/// Sets swift-testing's hooks on thrown errors aside (they allocate), and puts them back.
void rampd_set_aside_throw_hooks(void);
void rampd_restore_throw_hooks(void);
#endif
