// liblo, the OSC library rampd-osc reads and writes OSC messages with (Debian's liblo-dev).
#include <lo/lo.h>
