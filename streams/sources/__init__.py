"""Where samples come from besides live exporters: the simulator, history exports."""
