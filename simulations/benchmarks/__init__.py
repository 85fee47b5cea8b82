"""Benchmarks: scripts that time or size one part of fedpub (the round, the accountant, the noise, the data
readers, against the bare loop and pfl-research) and print a table; speed targets live here, never in tests.

Importing the package applies the fedpub command's thread choice (:mod:`fedpub.simulations.tools.threads`: idle
OpenMP threads sleep, ``OMP_WAIT_POLICY=passive``, unless the user set the wait policy) before a benchmark's module
imports torch, so a benchmark measures the round as ``fedpub run`` runs it; :data:`THREADS` is what was chosen (a
benchmark prints it in its table's header; nothing is chosen where torch was imported first, e.g. in the tests)."""

from fedpub.simulations.tools.threads import apply_thread_choice

THREADS = apply_thread_choice()
