"""Reproductions of the seed papers' experiments that need no download; each module is one command.

Importing the package applies the fedpub command's thread choice (:mod:`fedpub.simulations.tools.threads`) before a
reproduction's module imports torch: on a shared machine idle OpenMP threads sleep (``OMP_WAIT_POLICY=passive``)
unless the user set the wait policy. Without it a reproduction's in-process runs (``--jobs 1``) kept torch's two
spinning threads beside other busy processes, and a 45-second DOPE run took 11 minutes (issue 36's runs, beside
two other reproductions on 2 cores). :data:`THREADS` is what was chosen (nothing where torch was imported first,
e.g. in the tests)."""

from fedpub.simulations.tools.threads import apply_thread_choice

THREADS = apply_thread_choice()
