"""Allocator tuning, opt-in: keeping freed memory in the process, so that a simulation's per-round buffers are not
page-faulted in again every round.

It is **process-wide** and cannot be undone: glibc's ``mallopt`` changes how every thread of the process
allocates from then on, and the process keeps its peak resident memory until it exits. So fedpub never turns it
on by itself: the in-process engine applies it only when asked (``run_in_process(..., tune_allocator=True)``),
and the throughput benchmark turns it on for its whole process and says so in its report.

A round of the in-process engine allocates, and frees, buffers the size of the cohort's updates: the vectorised
groups' parameters and gradients, and the users' updates (50 users × 5M parameters: 1 GB each). (The figures below
were measured when a round also wrote a stacked and a clipped copy, before :mod:`fedpub.cohort_updates`, and before
bag-of-words users sent only the columns of their words, :mod:`fedpub.clients.input_columns`.) glibc serves blocks
that large with a fresh ``mmap`` and returns them to the kernel on ``free``, so each round pays the kernel to fault
in and zero every page again; on 2 CPU cores that costs more than the arithmetic (a 1 GB ``torch.stack``: 0.5 s
instead of 0.09 s). With ``mmap`` off for the heap and no trimming, freed blocks stay in the process and serve later
rounds. Measured on the tag-prediction logistic regression (5M parameters), 1 torch thread: 50 users per round over
40 rounds, 2.75 s per round instead of 4.64 s, peak RSS 5.23 GB instead of 5.27 GB; 200 users per round (4 GB per
copy of the cohort's updates), 12.8 s instead of 29.9 s over rounds 1-4 (about 9 s once the heap holds the largest
cohort's buffers), peak RSS 16.8 GB instead of 19.1 GB. The RSS does not grow from round to round, but the process
keeps its peak until it exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER = -1
"""M_TRIM_THRESHOLD -1: never trim (a threshold of 2 GB would still hand a 4 GB free top back to the kernel)."""


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep and reuse freed memory (``mallopt``: no mmap-served blocks, no trimming), for the
    whole process until it exits. True when it took effect; False where there is no glibc (macOS, Windows,
    musl): nothing changes there."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER))
