/* Linux interfaces Glibc's Swift module leaves out. */
#include <sys/eventfd.h>
