"""The next round's Gaussian noise drawn while the cohort trains: standard normal draws made ahead of time, in a
background thread, from a copy of the noise generator's state.

DP-FedAvg's server adds N(0, σ²I) to the sum of the clipped updates (McMahan et al. 2018): one draw per
parameter, every round. For a 5M-parameter bag-of-words model that is 5M draws, about 30 ms on one CPU core,
as long as a small cohort's whole local training. The draws depend only on the generator's state, which is known
as soon as the last round's noise is drawn, so :func:`prefetch_normals` starts drawing the next round's then, and
:func:`standard_normals` hands them over when the very same request comes (the same generator state, shapes and
dtypes), setting the generator to the state the draws left it in. Any other request draws in place. The noise is
therefore bit for bit the noise drawn without prefetching, from the same stream; only when it is drawn changes.

One prefetch is held at a time (the last one asked for); on the CPU only (a GPU draws its noise in a fraction of
the time, from a generator of its own, :func:`~fedpub.steps.gaussian_noise.standard_normal`). The drawing thread
uses one core: ``normal_`` with a generator runs on the calling thread alone. Training in the same process
meanwhile must leave it that core (:func:`core_left_for_draws`): torch's intra-op threads wait for each other at
the end of every parallel kernel, so with one of them sharing its core with the draws every kernel waits for that
one. On 2 cores, 10 users of the 5M-parameter bag-of-words logistic regression trained in 25.6 ms a round beside
the draws on 2 threads (14.0 ms without draws), and the whole round took 55 ms, more than the 47 ms without
prefetching; on 1 thread beside the draws they trained in 14.5 ms and the round took 32 ms.

The drawing thread is not a daemon: a process that exits while it draws (a script that aggregates its last round
and returns) waits for it, instead of finalizing the interpreter under a thread inside torch, which aborted such
scripts with ``terminate called without an active exception`` (issue 32: 13 of 20 runs of a one-round script
with a 2M-parameter model). It stops after the tensor it is drawing once the main thread has ended, and
:func:`cancel_prefetch` stops and joins it when its owner is done (the engine, at the end of a run).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

Spec = tuple[torch.Size, torch.dtype]
"""The shape and dtype of one tensor of draws."""


def draw_normals(specs: Sequence[Spec], generator: torch.Generator) -> list[torch.Tensor]:
    """N(0, 1) draws on the CPU for each spec in turn, from ``generator`` (advanced past them)."""
    # normal_(generator=...) draws exactly what torch.normal with that generator draws, in half the time
    return [torch.empty(shape, dtype=dtype).normal_(generator=generator) for shape, dtype in specs]


@dataclass
class _Prefetch:
    state: torch.Tensor
    specs: tuple[Spec, ...]
    thread: threading.Thread | None = None
    draws: list[torch.Tensor] | None = None
    end_state: torch.Tensor | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Draw every spec in turn, unless cancelled or the main thread ends first (then ``draws`` stays None:
        nobody is left to take them, or a taker draws in place)."""
        generator = torch.Generator()
        generator.set_state(self.state)
        draws = []
        for spec in self.specs:
            if self.cancelled.is_set() or not threading.main_thread().is_alive():
                return
            draws += draw_normals([spec], generator)
        self.draws, self.end_state = draws, generator.get_state()


_lock = threading.Lock()
_pending: _Prefetch | None = None


def prefetch_normals(specs: Sequence[Spec], state: torch.Tensor) -> None:
    """Start drawing, in a background thread, what :func:`standard_normals` would draw for ``specs`` from a CPU
    generator in ``state``; it replaces any prefetch not yet taken."""
    global _pending
    job = _Prefetch(state.clone(), tuple(specs))
    job.thread = threading.Thread(target=job.run, name="fedpub-noise-prefetch")  # joined at exit: not a daemon
    with _lock:
        replaced, _pending = _pending, job
    if replaced is not None:
        replaced.cancelled.set()
    job.thread.start()


def cancel_prefetch() -> None:
    """Stop the prefetch not yet taken, if any (after the tensor it is drawing), and wait for its thread to end."""
    global _pending
    with _lock:
        job, _pending = _pending, None
    if job is not None and job.thread is not None:
        job.cancelled.set()
        job.thread.join()


SPARE_CORE_DRAWS = 1_000_000
"""A prefetch of at least this many draws (about 3.5 ms on one core) gets a core of its own
(:func:`core_left_for_draws`). A smaller one ends soon after it starts, and taking a core from training for the
whole round costs more than it gives: with the small CNN's 18,378 draws still pending (the drawing thread had not
yet been given Python's lock) when its 50 users began training, they trained on one thread, 30 % slower."""


def drawing(at_least: int = 0) -> bool:
    """Whether a prefetch of at least ``at_least`` draws is drawing now (its thread has not finished)."""
    job = _pending
    if job is None or job.thread is None or not job.thread.is_alive():
        return False
    return sum(shape.numel() for shape, _ in job.specs) >= at_least


@contextlib.contextmanager
def core_left_for_draws() -> Iterator[None]:
    """Inside the block, when a prefetch of :data:`SPARE_CORE_DRAWS` or more is drawing, torch's intra-op
    threads one fewer (at least one), so the drawing thread keeps a core of its own; the count is restored after
    the block."""
    threads = torch.get_num_threads()
    if threads < 2 or not drawing(SPARE_CORE_DRAWS):
        yield
        return
    torch.set_num_threads(threads - 1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def standard_normals(specs: Sequence[Spec], generator: torch.Generator) -> list[torch.Tensor]:
    """N(0, 1) draws on the CPU for each spec in turn from ``generator``, which is left past them: those a
    prefetch made from the generator's current state for the same specs (waiting for it to finish), else drawn now."""
    global _pending
    with _lock:
        job, _pending = _pending, None
    if job is not None and job.specs == tuple(specs) and torch.equal(job.state, generator.get_state()):
        assert job.thread is not None  # set before the job is pending
        job.thread.join()
        if job.draws is not None and job.end_state is not None:  # else the thread failed: draw here instead
            generator.set_state(job.end_state)
            return job.draws
    return draw_normals(specs, generator)
