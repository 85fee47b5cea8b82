"""keep_freed_memory: a freed block stays in the process for the next round instead of going back to the kernel."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from fedpub.memory import keep_freed_memory

MIB = 2**20


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_block_stays_resident_for_later_allocations():
    assert keep_freed_memory()
    block = torch.ones(64 * MIB)  # 256 MiB, every page touched
    resident = _resident_bytes()
    del block
    kept = _resident_bytes()
    assert resident - kept < 16 * MIB  # glibc's default unmaps the block here: 256 MiB fewer resident
