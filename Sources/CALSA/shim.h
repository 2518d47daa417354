#include <alsa/asoundlib.h>
#include <poll.h>
#include <signal.h>
#include <time.h>

// glibc declares ppoll only under _GNU_SOURCE, which Swift's Glibc module is not built with. The
// render thread needs it: poll(2) counts whole milliseconds, too coarse to wait for the clock.
extern int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *sigmask);
