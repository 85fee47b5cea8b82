"""OpenMP's wait policy for torch's threads, chosen by the command line before torch is imported.

torch's CPU kernels run on libgomp's threads (one per core: torch's default thread count). By default libgomp's
threads spin, busy, for a while after each parallel kernel, waiting for the next. On a machine shared with other
busy processes a spinning thread holds a core that another needs, and every kernel then waits for a thread the
scheduler has put aside. Measured on this 2-core machine (issue 35; the throughput benchmark's cells at 50 users
of 5-30 examples, median of 3 steady rounds, 2 threads, spinning against sleeping; the load average is other
processes' work): at load 10 the MLP's bare training loop took 9.5 s a round against 0.60 s, fedpub's round
1.7 s against 0.12 s; at load 7 the CNN's 32.5 s against 0.50 s and 15.6 s against 0.69 s; at load 3 the MLP's
0.77 s against 0.060 s and 0.35 s against 0.090 s, the CNN's 1.8 s against 0.43 s and 8.9 s against 0.81 s. One
thread instead of two, both sleeping, was neither faster nor slower beyond the machine's noise. The machine was
never idle then (load 2.5 or more). On a nearly idle machine the other way round: sleeping threads pay a wake-up
per parallel kernel (median of 3 steady rounds at 200 users, 2 threads, load about 1 from the probe itself: the MLP's
fedpub round 0.25 s sleeping against 0.20 s spinning, the CNN's 1.42 s against 0.50 s). OpenMP reads its settings
once, when torch loads it, so only the command line, before anything imports torch, can choose them, and it chooses
for the machine as it finds it: :func:`apply_thread_choice` sets ``OMP_WAIT_POLICY=passive`` (threads sleep) when
other processes keep at least :data:`BUSY_LOAD` cores busy, and leaves libgomp's spinning default otherwise; a
user's ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is always kept (and the machine is then not measured). The load is
measured as it is now (:func:`machine_load`: the busy cores over :data:`SAMPLE_SECONDS`, from ``/proc/stat``),
since the load average still counts work that ended up to a minute before (measured: 0.67 right after a test suite
ended, on an idle machine); where ``/proc/stat`` is missing (macOS) the one-minute load average stands in, and the
line says which was used. The wait
policy changes when threads sleep, never what they compute, so following the load costs no reproducibility. The
thread count stays torch's default unless ``OMP_NUM_THREADS`` is set: the count changes how a float32 sum is split
between threads, so a seeded run on another count differs in its last bits, and a count that followed the load
would make a run's results depend on what else ran beside it. A machine that becomes busy after the run started
keeps the choice made at its start.

:func:`thread_line` says at the start of a run what was chosen and why.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field

WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
"""The variables by which a user chooses libgomp's wait policy; either, set, is left as it is."""
BUSY_LOAD = 0.5
"""The load (before this run starts) from which the machine counts as shared: about half a core kept busy by other
processes."""
SAMPLE_SECONDS = 0.2
"""How long :func:`machine_load` watches the cores: 40 ticks of the kernel's 100 Hz clock on 2 cores."""
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat's cpu line: user nice system [idle iowait] irq softirq steal


@dataclass(frozen=True)
class MachineLoad:
    """How busy the machine is: ``cores`` kept busy by other processes, and how that was measured."""

    cores: float
    measured_by: str


def _cpu_ticks(stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all cores together, from ``/proc/stat``'s text."""
    ticks = [int(value) for value in stat.split("\n", 1)[0].split()[1:9]]
    busy = sum(ticks[i] for i in _BUSY_FIELDS)
    return busy, busy + ticks[3] + ticks[4]


def busy_cores(stat_before: str, stat_after: str, cores: int) -> float:
    """The cores kept busy between two readings of ``/proc/stat``: the busy share of every core's ticks, times
    ``cores``."""
    (busy_before, total_before), (busy_after, total_after) = _cpu_ticks(stat_before), _cpu_ticks(stat_after)
    return (busy_after - busy_before) / max(total_after - total_before, 1) * cores


def machine_load(sample_seconds: float = SAMPLE_SECONDS, stat_path: str = "/proc/stat") -> MachineLoad:
    """The cores other processes keep busy now (:func:`busy_cores` over ``sample_seconds``, while this process
    sleeps); the one-minute load average where ``stat_path`` cannot be read."""
    try:
        with open(stat_path) as stat:
            before = stat.read()
        time.sleep(sample_seconds)
        with open(stat_path) as stat:
            after = stat.read()
    except OSError:
        return MachineLoad(os.getloadavg()[0], "one-minute load average")
    return MachineLoad(busy_cores(before, after, os.cpu_count() or 1), f"busy cores over {sample_seconds:g} s")


@dataclass(frozen=True)
class ThreadChoice:
    """The variables the command line sets before torch is imported, and why (in a few words)."""

    reason: str
    variables: dict[str, str] = field(default_factory=dict)


def choose_threads(environ: Mapping[str, str], torch_imported: bool,
                   load: Callable[[], MachineLoad] = machine_load) -> ThreadChoice:
    """The wait policy and thread count for a process whose environment is ``environ`` on a machine as busy as
    ``load()`` says (called only when the choice depends on it): the user's settings where given; else sleeping
    threads on a busy machine and libgomp's spinning default on an idle one; torch's default count; nothing when
    torch is already imported (OpenMP has read its settings)."""
    if torch_imported:
        return ThreadChoice("torch was imported before fedpub's command line: OpenMP's settings are the process's")
    count = ("count as set (OMP_NUM_THREADS)" if "OMP_NUM_THREADS" in environ
             else "count torch's default, one per core (OMP_NUM_THREADS sets it)")
    given = [f"{name}={environ[name]}" for name in WAIT_VARIABLES if name in environ]
    if given:
        return ThreadChoice(f"{count}; wait policy as set ({', '.join(given)})")
    found = load()
    measured = f"{found.measured_by} {found.cores:.2f}"
    if found.cores >= BUSY_LOAD:
        return ThreadChoice(f"{count}; idle threads sleep (OMP_WAIT_POLICY=passive: the machine is shared, {measured} "
                            f">= {BUSY_LOAD}, and spinning threads slow a shared machine's rounds up to 10x)",
                            {"OMP_WAIT_POLICY": "passive"})
    return ThreadChoice(f"{count}; idle threads spin, OpenMP's default (the machine is idle, {measured} < {BUSY_LOAD}; "
                        "OMP_WAIT_POLICY=passive makes them sleep)")


def apply_thread_choice(environ: MutableMapping[str, str] = os.environ) -> ThreadChoice:
    """Choose (:func:`choose_threads`) and set the variables in ``environ``: call before torch is imported."""
    choice = choose_threads(environ, "torch" in sys.modules)
    environ.update(choice.variables)
    return choice


def thread_line(choice: ThreadChoice, threads: int) -> str:
    """The run's one line on its threads: how many torch uses, and why."""
    return f"torch threads: {threads}; {choice.reason}"


__all__ = ["BUSY_LOAD", "SAMPLE_SECONDS", "MachineLoad", "ThreadChoice", "WAIT_VARIABLES",
           "apply_thread_choice", "busy_cores", "choose_threads", "machine_load", "thread_line"]
