// The declaration of libFuzzer's driver is all there is: see include/FuzzDriver.h.
#include "FuzzDriver.h"
