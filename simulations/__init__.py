"""Running experiments: the in-process round loop, run directories, and (later) Flower runners."""
