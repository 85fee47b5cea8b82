"""The command line's OpenMP choice: sleeping threads on a shared machine and spinning ones on an idle one unless the
user chose, the user's thread count kept, nothing
changed once torch is loaded, and the CLI module loads without torch so that its choice can take effect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedpub.simulations.tools.threads import BUSY_LOAD, apply_thread_choice, choose_threads, thread_line


def test_on_a_shared_machine_idle_threads_sleep_and_the_count_is_torchs_default():
    choice = choose_threads({"PATH": "/bin"}, torch_imported=False, load=BUSY_LOAD)
    assert choice.variables == {"OMP_WAIT_POLICY": "passive"}
    assert "torch's default, one per core" in choice.reason and "OMP_WAIT_POLICY=passive" in choice.reason
    assert f"load {BUSY_LOAD:.2f} >= {BUSY_LOAD}" in choice.reason


def test_on_an_idle_machine_openmp_keeps_its_spinning_default():
    choice = choose_threads({"PATH": "/bin"}, torch_imported=False, load=0.1)
    assert choice.variables == {}
    assert "idle threads spin, OpenMP's default (the machine is idle, load 0.10 < 0.5" in choice.reason


@pytest.mark.parametrize("given", [{"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "10000"}])
@pytest.mark.parametrize("load", [0.0, 8.0])
def test_a_wait_policy_the_user_set_is_kept(given, load):
    choice = choose_threads(given, torch_imported=False, load=load)
    assert choice.variables == {}
    name, value = next(iter(given.items()))
    assert f"wait policy as set ({name}={value})" in choice.reason


def test_the_users_thread_count_wins_and_idle_threads_still_sleep():
    choice = choose_threads({"OMP_NUM_THREADS": "1"}, torch_imported=False, load=3.0)
    assert choice.variables == {"OMP_WAIT_POLICY": "passive"} and "count as set (OMP_NUM_THREADS)" in choice.reason
    assert thread_line(choice, 1).startswith("torch threads: 1; count as set")


def test_once_torch_is_loaded_nothing_is_set_and_the_line_says_so():
    environ: dict[str, str] = {}
    choice = apply_thread_choice(environ)  # this process has torch
    assert environ == {} and choice.variables == {} and "torch was imported before" in choice.reason


def test_the_choice_is_in_the_environment_before_torch_loads_openmp():
    """A fresh process: the CLI module imports no torch, so the choice made in main() reaches libgomp."""
    code = (
        "import os, sys\n"
        "import fedpub.simulations.tools.cli\n"
        "assert 'torch' not in sys.modules, 'the CLI module imports torch'\n"
        "from fedpub.simulations.tools.threads import apply_thread_choice\n"
        "choice = apply_thread_choice()\n"
        "print(os.environ.get('OMP_WAIT_POLICY', '-'), choice.variables.get('OMP_WAIT_POLICY', '-'), choice.reason)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    in_environment, chosen, *reason = out.stdout.split()
    assert in_environment == chosen and chosen in ("passive", "-")  # whichever the load chose, it is set
    assert ("idle threads sleep" in " ".join(reason)) == (chosen == "passive")
