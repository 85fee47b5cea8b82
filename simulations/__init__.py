"""fedpub's app layer: everything that runs an experiment, in five rooms by job.

- :mod:`~fedpub.simulations.run`: one run from its config: the experiment's parts, the in-process engine, the
  session shared by every backend, the run directory, its lock, progress, tracking and summary, the Python API.
- :mod:`~fedpub.simulations.flower`: fedpub on Flower: the simulation runner, the production ``ServerApp``,
  SecAgg+ with server noise, the environment of Flower's processes, and a local deployment (``deploy``).
- :mod:`~fedpub.simulations.tools`: the ``fedpub`` command line and its commands that are not a run (data,
  audit, compare, report).
- :mod:`~fedpub.simulations.reproductions`: the seed papers' experiments, their judge and the results page.
- :mod:`~fedpub.simulations.benchmarks`: scripts that time and size the round and print tables.

``configs/`` holds the bundled experiment YAMLs. ``python -m fedpub.simulations`` is the ``fedpub`` command.
"""
