#ifndef RAMPD_FUZZ_DRIVER_H
#define RAMPD_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

// libFuzzer's driver (in the runtime `-sanitize=fuzzer` links): parses libFuzzer's flags from
// argv and runs `callback` on each input. rampd's fuzz target calls it from its own main, since
// SwiftPM gives every executable a main of the module's.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
