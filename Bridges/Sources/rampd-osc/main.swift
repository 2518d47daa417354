print("rampd-osc: not built yet")
