"""Benchmarks: scripts that time or size one part of fedpub (the round, the accountant, the noise, the data
readers, against the bare loop and pfl-research) and print a table; speed targets live here, never in tests."""
