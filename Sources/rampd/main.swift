print("rampd")
