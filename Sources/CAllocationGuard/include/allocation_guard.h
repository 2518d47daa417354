#ifndef RAMPD_ALLOCATION_GUARD_H
#define RAMPD_ALLOCATION_GUARD_H
/* Defined in a debug build only (RAMPD_ALLOCATION_GUARD): the allocator's entry points are
   replaced with counting wrappers around glibc's own. */
/// Heap allocations (malloc, calloc, realloc, memalign and friends) made so far by the calling
/// thread.
long rampd_allocations_on_this_thread(void);
/// Blocks freed (free with a non-null pointer) so far by the calling thread.
long rampd_frees_on_this_thread(void);
/// Sets swift-testing's hooks on thrown errors aside (they allocate), and puts them back.
void rampd_set_aside_throw_hooks(void);
void rampd_restore_throw_hooks(void);
/// Armed (true), any allocation or free on the calling thread traps, naming itself and printing
/// where. The render thread arms it for its loop (RampAudio calls it where it is defined).
void rampd_render_guard(_Bool armed);
#endif
