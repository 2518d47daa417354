// Counting wrappers around glibc's allocator, and a guard that traps an allocation or free on a
// thread that armed it. Symbols defined in the executable take precedence over libc's, so every
// allocation in the process, Swift runtime included, comes through here. Compiled in a debug
// build only: the test binary counts the render path's allocations with it, and a debug build of
// rampd traps one on its render thread, so that every test that drives the daemon is also a test
// that the render thread neither allocates nor frees. A release build defines nothing here.
#ifdef RAMPD_ALLOCATION_GUARD
#define _GNU_SOURCE
#include <stddef.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "allocation_guard.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static __thread long allocations;
static __thread long frees;
/* The render thread's guard: set, an allocation or free on this thread traps. */
static __thread bool guarded;

void rampd_render_guard(bool armed) {
  /* The first backtrace loads the unwinder, which allocates. */
  void *frame;
  if (armed) backtrace(&frame, 1);
  guarded = armed;
}

/* The Swift runtime fills its caches (metadata, witness tables) the first time a path runs, on
   whichever thread runs it first: that is let through, as is what an ALSA plugin allocates.
   What Swift code allocates (objects, arrays, strings) comes through swift_slowAlloc, and traps. */
__attribute__((noinline)) static bool runtime_cache(void) {
  void *frames[8];
  int count = backtrace(frames, 8);
  /* frames[0] is here, [1] trap, [2] the wrapper: the allocator's caller, past C++'s `new`. */
  for (int index = 3; index < count; index++) {
    Dl_info info;
    if (!dladdr(frames[index], &info) || info.dli_fname == NULL) return false;
    /* C++'s `new`, C's formatting: who called them decides. */
    if (strstr(info.dli_fname, "libstdc++") != NULL || strstr(info.dli_fname, "/libc.so") != NULL) continue;
    /* An ALSA plugin's own (an audio server's client library): not rampd's to change. */
    if (strstr(info.dli_fname, "/alsa-lib/") != NULL || strstr(info.dli_fname, "libpulse") != NULL
        || strstr(info.dli_fname, "libpipewire") != NULL || strstr(info.dli_fname, "/spa-") != NULL)
      return true;
    if (strstr(info.dli_fname, "libswiftCore.so") == NULL) return false;
    if (info.dli_sname == NULL) return true;
    if (strcmp(info.dli_sname, "swift_slowAlloc") == 0 || strcmp(info.dli_sname, "swift_slowDealloc") == 0) continue;
    return strncmp(info.dli_sname, "swift_get", 9) == 0 || strncmp(info.dli_sname, "swift_once", 10) == 0
      || strstr(info.dli_sname, "Metadata") != NULL;
  }
  return false;
}

__attribute__((noinline)) static void trap(const char *what) {
  if (runtime_cache()) return;
  guarded = false;
  static const char prefix[] = "rampd: ";
  static const char suffix[] = " on the render thread (thread ";
  /* Which thread ran the render step: rampd-render, or an output's own (PipeWire's data loop). */
  char name[16] = "?";
  pthread_getname_np(pthread_self(), name, sizeof name);
  write(2, prefix, sizeof prefix - 1);
  write(2, what, strlen(what));
  write(2, suffix, sizeof suffix - 1);
  write(2, name, strlen(name));
  write(2, ")\n", 2);
  void *frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  abort();
}

long rampd_allocations_on_this_thread(void) { return allocations; }
long rampd_frees_on_this_thread(void) { return frees; }

void *malloc(size_t size) {
  allocations++;
  if (guarded) trap("allocation");
  return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
  allocations++;
  if (guarded) trap("allocation");
  return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
  allocations++;
  if (guarded) trap("allocation");
  return __libc_realloc(pointer, size);
}

void *memalign(size_t alignment, size_t size) {
  allocations++;
  if (guarded) trap("allocation");
  return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
  allocations++;
  if (guarded) trap("allocation");
  return __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
  allocations++;
  if (guarded) trap("allocation");
  void *pointer = __libc_memalign(alignment, size);
  if (pointer == NULL) return ENOMEM;
  *result = pointer;
  return 0;
}

void free(void *pointer) {
  if (pointer != NULL) {
    frees++;
    if (guarded) trap("free");
  }
  __libc_free(pointer);
}

// swift-testing hooks every error thrown in the process (the runtime's `swift_willThrow` hooks)
// to capture a backtrace, which allocates. rampd installs no such hook, so while a test counts the
// render thread's allocations the hooks are set aside: an error the engine throws there is then
// counted as rampd would make it.
extern void *_swift_willThrow;
extern void *_swift_willThrowTypedImpl;
// Tests run in parallel: the hooks stay aside while any of them counts.
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static int hooks_aside;
static void *saved_will_throw;
static void *saved_will_throw_typed;

void rampd_set_aside_throw_hooks(void) {
  pthread_mutex_lock(&hooks_lock);
  if (hooks_aside++ == 0) {
    saved_will_throw = __atomic_exchange_n(&_swift_willThrow, NULL, __ATOMIC_SEQ_CST);
    saved_will_throw_typed = __atomic_exchange_n(&_swift_willThrowTypedImpl, NULL, __ATOMIC_SEQ_CST);
  }
  pthread_mutex_unlock(&hooks_lock);
}

void rampd_restore_throw_hooks(void) {
  pthread_mutex_lock(&hooks_lock);
  if (--hooks_aside == 0) {
    __atomic_store_n(&_swift_willThrow, saved_will_throw, __ATOMIC_SEQ_CST);
    __atomic_store_n(&_swift_willThrowTypedImpl, saved_will_throw_typed, __ATOMIC_SEQ_CST);
  }
  pthread_mutex_unlock(&hooks_lock);
}
#endif
