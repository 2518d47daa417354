print("rampbench")
