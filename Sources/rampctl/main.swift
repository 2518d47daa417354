print("rampctl")
