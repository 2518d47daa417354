#include "rampd_version.h"

// The version of a build that is not a package's; script/version starts from it when the
// history has no tag.
#define RAMPD_BASE_VERSION "0.2.0"

// A C string set on the compiler's command line, which Swift's -D cannot carry: Package.swift
// passes RAMPD_VERSION through, and a change of it recompiles this file alone.
#ifndef RAMPD_VERSION
#define RAMPD_VERSION RAMPD_BASE_VERSION
#endif

const char *rampd_version(void) { return RAMPD_VERSION; }
