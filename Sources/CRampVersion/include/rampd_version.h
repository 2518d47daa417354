#ifndef RAMPD_VERSION_H
#define RAMPD_VERSION_H

/// rampd's version: RAMPD_VERSION from the environment of the build (script/package sets it from
/// `git describe`), else RAMPD_BASE_VERSION.
const char *rampd_version(void);

#endif
