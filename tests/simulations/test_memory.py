"""The allocator tuning of fedpub.simulations.run.memory is opt-in: the engine leaves glibc's malloc alone unless asked, and
when asked a freed block stays in the process for the next round instead of going back to the kernel.

The tuning is process-wide and cannot be undone, so each case runs in a child process: this one keeps its
allocator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedpub.config import dump_config
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

REPO_ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20

CHILD = """
import os, sys
from pathlib import Path
import torch
from fedpub.config import load_config
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory

def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

config = load_config(Path(sys.argv[1]))
run_in_process(build_experiment(config), RunDirectory(config.output_dir / config.name), tune_allocator=sys.argv[2] == "on")
block = torch.ones(64 * 2**20)  # 256 MiB, every page touched
before = resident()
del block
print(before - resident())
"""


def _released_after_a_run(config: Path, tune_allocator: bool) -> int:
    """Bytes handed back to the kernel when a 256 MiB block is freed after a run of the engine."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(config), "on" if tune_allocator else "off"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.parametrize("tune_allocator", [False, True])
def test_the_engine_tunes_the_allocator_only_when_asked(tiny_emnist_dir, tmp_path, tune_allocator):
    config = tmp_path / "tiny.yaml"
    config.write_text(dump_config(tiny_config(tiny_emnist_dir, tmp_path, rounds=1)))
    released = _released_after_a_run(config, tune_allocator)
    if tune_allocator:
        assert released < 16 * MIB  # kept for the next round's buffers
    else:
        assert released > 200 * MIB  # glibc's default: the block is unmapped when freed
