"""The benchmarks' round on W workers: W torchrun ranks on this machine, each with its share of the cores, their
peak memory, and the scaling table's arithmetic (issue 35.4).

A benchmark measures its fedpub round on each worker count of ``--workers`` (:func:`parse_workers`) by starting
a small entry of its own module in fresh processes (:func:`launch`): one plain process for one worker (the
in-process engine), else ``python -m torch.distributed.run --nproc-per-node W --master-addr 127.0.0.1
--master-port <free>``, whose ranks share each round (:mod:`fedpub.simulations.run.distributed`: gloo on CPUs; on
a GPU machine NCCL, one GPU a rank, ``cuda:LOCAL_RANK``). Every worker count runs in processes of its own, so each
rank's peak RSS (:func:`peak_rss_by_rank`, gathered to rank 0) is that worker's alone. Each rank gets ``cores // W``
torch threads (at least one) unless ``OMP_NUM_THREADS`` is set (:func:`rank_environment`): W ranks then use the
cores one process used. The round's seconds are rank 0's; ``speedup`` is t1 / tW and ``scaling_efficiency`` t1 /
(W · tW) (:func:`speedup`, :func:`scaling_efficiency`): 1.0 is perfect scaling.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Mapping, Sequence

from fedpub.simulations.flower.deploy.processes import free_ports

MIB = 2**20


def parse_workers(text: str) -> list[int]:
    """``--workers``' worker counts (``1,2``), ascending; 1 must be among them (the speedup divides by its time).
    Anything else is refused with a message naming ``--workers``."""
    try:
        counts = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise ValueError(f"--workers must be worker counts separated by commas, e.g. 1,2; got {text!r}") from None
    if counts[0] < 1:
        raise ValueError(f"--workers counts must be at least 1; got {text!r}")
    if counts[0] != 1:
        raise ValueError(f"--workers must include 1 (speedup and scaling efficiency divide by its round); got {text!r}")
    return counts


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def rank_environment(workers: int, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of each of ``workers`` ranks: ``OMP_NUM_THREADS`` = cores // workers (at least 1) unless
    ``environ`` sets it (torchrun would otherwise give every rank one thread)."""
    env = dict(environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores() // workers)))
    return env


def launch(workers: int, program: Sequence[str], *, timeout: float) -> None:
    """Run ``python PROGRAM`` (``-m module args``) as one process, or as ``workers`` torchrun ranks on 127.0.0.1,
    with :func:`rank_environment`; a failure raises with the end of its output."""
    if workers == 1:
        command = [sys.executable, *program]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workers),
                   "--master-addr", "127.0.0.1", "--master-port", str(free_ports(1)[0]), *program]
    done = subprocess.run(command, capture_output=True, text=True, env=rank_environment(workers), timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # Linux reports KiB


def peak_rss_by_rank() -> list[float]:
    """Every rank's :func:`peak_rss_mib`, by rank (a collective when torch.distributed is initialised; else this
    process's alone)."""
    import torch.distributed as dist

    mine = peak_rss_mib()
    if not dist.is_initialized():
        return [mine]
    gathered: list[float] = [0.0] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered


def speedup(one: float, many: float) -> float:
    """t1 / tW: how many times faster the round is on W workers than on one."""
    return one / many


def scaling_efficiency(one: float, many: float, workers: int) -> float:
    """t1 / (W · tW): the speedup per worker (1.0: W workers make the round W times faster)."""
    return one / (workers * many)


def rss_note(by_rank: Sequence[float]) -> str:
    """Peak RSS by rank, MiB, ``/``-separated (``612/598``)."""
    return "/".join(f"{mib:.0f}" for mib in by_rank)


def load_average() -> float:
    """The machine's 1-minute load average (other processes' work beside the benchmark's)."""
    return round(os.getloadavg()[0], 1)


__all__ = ["launch", "load_average", "parse_workers", "peak_rss_by_rank", "peak_rss_mib", "rank_environment",
           "rss_note", "scaling_efficiency", "speedup"]
