"""Ctrl-C between a reproduction's steps: a stop request that is honoured at the next step, never lost.

Inside a run the engine turns SIGINT/SIGTERM into "stop after this round, checkpointed", and a sweep's worker pool
into "start no further run". Between them — reading finished runs back, training the public-only control, the
round-0 starts, judging — Python's default raised KeyboardInterrupt wherever the main thread happened to be, and
where that was a finalizer (a weakref callback) the interpreter printed it and carried on: the Ctrl-C was lost.
While :func:`stops_between_steps` is active the first signal is only recorded and :func:`check`, called before each
step (:func:`~.federated.run_one`, each kept row), raises it there; a second signal raises at once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from fedpub.simulations.run.stop_signals import stop_signals_to

_requests: list[str] = []
"""The signals received while :func:`stops_between_steps` is active (their names)."""


def _request(signum: int, frame: object) -> None:
    if _requests:
        raise KeyboardInterrupt
    _requests.append(signal.Signals(signum).name)
    os.write(2, f"\n{_requests[0]}: stopping before the next step (the finished runs are kept); send it again to "
                "stop at once\n".encode())


@contextmanager
def stops_between_steps() -> Iterator[None]:
    """While in the block, SIGINT and SIGTERM are recorded for :func:`check` (main thread only: elsewhere signals
    cannot be caught and keep their usual effect); a run's engine installs its own handler for its rounds."""
    _requests.clear()
    try:
        with stop_signals_to(_request):
            yield
    finally:
        _requests.clear()


def check() -> None:
    """Raise KeyboardInterrupt if a stop was requested (a no-op outside :func:`stops_between_steps`)."""
    if _requests:
        raise KeyboardInterrupt(f"{_requests[0]} received")
