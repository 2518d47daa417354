// Counting wrappers around glibc's allocator, linked into the test binary so that a test can
// prove the render path allocates nothing. Symbols defined in the executable take precedence
// over libc's, so every allocation in the process, Swift runtime included, comes through here.
#include <stddef.h>
#include <errno.h>
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
