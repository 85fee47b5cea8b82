"""Client side: the one local-training function every backend uses."""
