print("rampd-mqtt: not built yet")
