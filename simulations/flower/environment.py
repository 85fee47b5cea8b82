"""The environment every Flower process fedpub starts runs in: offline, with no telemetry, no update check and
no runtime dependency installation. One set of switches for the Simulation Engine (this process and its Ray
workers, :func:`offline_flower_environment`) and for a local deployment's SuperLink, SuperNodes and ``flwr``
CLI (:func:`fedpub.simulations.flower.deploy.processes.deployment_env`).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

FLOWER_OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
"""Flower's switches that keep it from reaching the network."""


def offline_flower_environment() -> None:
    """Turn off Flower's telemetry, update check and runtime dependency installation in this process and the
    ones it starts (unless already set), and Ray's log deduplication, so that each virtual node's lines show."""
    for key, value in {**FLOWER_OFFLINE_ENV, "RAY_DEDUP_LOGS": "0"}.items():
        os.environ.setdefault(key, value)


RAY_ACCELERATOR_TIP = "Tip: In future versions of Ray, Ray will no longer override accelerator"
"""The start of the ``FutureWarning`` ``ray.init`` gives in every driver. Its only switch,
``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0``, also changes what it warns about (actors with ``num_gpus: 0`` would see
the GPUs), so the warning itself is filtered instead."""

RUN_SIMULATION_DEPRECATION = "DEPRECATED FEATURE: The `run_simulation` function is deprecated"
"""Flower 1.42's notice on ``flwr.simulation.run_simulation``. It names ``flwr run`` as its replacement, which is a
CLI driving a SuperLink (``python -m fedpub.simulations.flower.deploy.local --simulation``), not an in-process call: the Python
API has no other entry point to the Simulation Engine, so ``fedpub run --backend flower`` keeps it."""


class _DropMessages(logging.Filter):
    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_flower_logging(*, in_process_simulation: bool = False) -> None:
    """Flower's log as fedpub shows it: each line once, no DEBUG, no Ray accelerator tip (and, for the in-process
    simulation, no ``run_simulation`` deprecation notice). Idempotent.

    Flower's logger ``flwr`` has its own console handler (INFO) but also passes its records (DEBUG included) up to
    the root logger, which has no handler until someone calls ``logging.basicConfig()``. absl does, the first time
    dp_accounting logs a warning (the RDP accountant's non-converging fractional orders), even one
    ``absl.logging.set_verbosity`` drops: from then on every Flower line came out twice and DEBUG lines once, in
    the root's ``INFO:flwr:`` format. So Flower's records stop at its own handler, as Flower does in notebooks."""
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.propagate = False
    if in_process_simulation and not any(isinstance(f, _DropMessages) for f in flwr_logger.filters):
        flwr_logger.addFilter(_DropMessages(RUN_SIMULATION_DEPRECATION))
    warnings.filterwarnings("ignore", message=re.escape(RAY_ACCELERATOR_TIP), category=FutureWarning)


FINAL_RESULTS = "Final results:"
"""The line after which Flower's ``Strategy.start`` logs its ``Result``: every round's metrics again, a page per
hundred rounds, which fedpub has already written to ``metrics.jsonl`` and sums up in ``summary.md``."""


class _DropFrom(logging.Filter):
    """Drops every record from the first whose message is ``first`` on."""

    def __init__(self, first: str) -> None:
        super().__init__()
        self.first, self.dropping = first, False

    def filter(self, record: logging.LogRecord) -> bool:
        self.dropping = self.dropping or record.getMessage() == self.first
        return not self.dropping


@contextmanager
def without_final_results() -> Iterator[None]:
    """Flower's log inside the block, less the ``Final results`` dump that ends ``Strategy.start``."""
    logger = logging.getLogger("flwr")
    drop = _DropFrom(FINAL_RESULTS)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
