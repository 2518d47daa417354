// libmosquitto (Debian's libmosquitto-dev), the MQTT client rampd-mqtt is built on.
#include <mosquitto.h>
