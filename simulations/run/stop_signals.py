"""Where SIGINT and SIGTERM go while a block runs: the one install-and-restore that the run engine (stop after the
round under way), a sweep's worker pool (start no further run) and a reproduction (stop before its next step) share.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_signals_to(handler: Callable[[int, object], None]) -> Iterator[None]:
    """While in the block, SIGINT and SIGTERM call ``handler`` (main thread only: elsewhere signals cannot be caught
    and keep their usual effect); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, restored in previous.items():
            signal.signal(sig, restored)
