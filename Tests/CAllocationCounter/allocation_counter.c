// Counting wrappers around glibc's allocator, linked into the test binary so that a test can
// prove the render path allocates nothing. Symbols defined in the executable take precedence
// over libc's, so every allocation in the process, Swift runtime included, comes through here.
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include "allocation_counter.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static __thread long allocations;
static __thread long frees;

long rampd_allocations_on_this_thread(void) { return allocations; }
long rampd_frees_on_this_thread(void) { return frees; }

void *malloc(size_t size) {
  allocations++;
  return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
  allocations++;
  return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
  allocations++;
  return __libc_realloc(pointer, size);
}

void *memalign(size_t alignment, size_t size) {
  allocations++;
  return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
  allocations++;
  return __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
  allocations++;
  void *pointer = __libc_memalign(alignment, size);
  if (pointer == NULL) return ENOMEM;
  *result = pointer;
  return 0;
}

void free(void *pointer) {
  if (pointer != NULL) frees++;
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
