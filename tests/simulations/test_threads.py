"""The command line's OpenMP choice: sleeping threads on a shared machine and spinning ones on an idle one unless the
user chose, the user's thread count kept, nothing
changed once torch is loaded, and the CLI module loads without torch so that its choice can take effect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedpub.simulations.tools.threads import (
    BUSY_LOAD,
    MachineLoad,
    apply_thread_choice,
    busy_cores,
    choose_threads,
    machine_load,
    thread_line,
)

BUSY_NOW = "busy cores over 0.2 s"


def test_on_a_shared_machine_idle_threads_sleep_and_the_count_is_torchs_default():
    choice = choose_threads({"PATH": "/bin"}, torch_imported=False, load=lambda: MachineLoad(BUSY_LOAD, BUSY_NOW))
    assert choice.variables == {"OMP_WAIT_POLICY": "passive"}
    assert "torch's default, one per core" in choice.reason and "OMP_WAIT_POLICY=passive" in choice.reason
    assert f"the machine is shared, busy cores over 0.2 s {BUSY_LOAD:.2f} >= {BUSY_LOAD}" in choice.reason


def test_on_an_idle_machine_openmp_keeps_its_spinning_default():
    choice = choose_threads({"PATH": "/bin"}, torch_imported=False, load=lambda: MachineLoad(0.1, BUSY_NOW))
    assert choice.variables == {}
    assert "idle threads spin, OpenMP's default (the machine is idle, busy cores over 0.2 s 0.10 < 0.5" in choice.reason


@pytest.mark.parametrize("given", [{"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "10000"}])
@pytest.mark.parametrize("load", [0.0, 8.0])
def test_a_wait_policy_the_user_set_is_kept_and_the_machine_not_measured(given, load):
    measured: list[MachineLoad] = []
    choice = choose_threads(given, torch_imported=False,
                            load=lambda: measured.append(MachineLoad(load, BUSY_NOW)) or measured[-1])
    assert choice.variables == {} and measured == []
    name, value = next(iter(given.items()))
    assert f"wait policy as set ({name}={value})" in choice.reason


def test_the_users_thread_count_wins_and_idle_threads_still_sleep():
    choice = choose_threads({"OMP_NUM_THREADS": "1"}, torch_imported=False, load=lambda: MachineLoad(3.0, BUSY_NOW))
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


@pytest.mark.parametrize("package", ["benchmarks", "reproductions"])
def test_the_benchmarks_and_reproductions_apply_the_choice_before_torch_loads(package):
    """A fresh process importing the package (as ``python -m fedpub.simulations.<package>.<module>`` does first): the
    choice is made with torch not yet loaded, and what it chose is in the environment OpenMP reads."""
    code = (
        "import os, sys\n"
        f"from fedpub.simulations.{package} import THREADS\n"
        "assert 'torch' not in sys.modules, 'the package imports torch'\n"
        "print(os.environ.get('OMP_WAIT_POLICY', '-'), THREADS.variables.get('OMP_WAIT_POLICY', '-'), THREADS.reason)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    in_environment, chosen, *reason = out.stdout.split()
    assert in_environment == chosen and "torch was imported" not in " ".join(reason)


def _stat(busy: int, idle: int) -> str:
    """A ``/proc/stat`` whose all-core line has ``busy`` ticks spread over its busy fields and ``idle`` idle ticks."""
    return f"cpu  {busy // 2} 0 {busy - busy // 2} {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"


def test_the_load_is_the_busy_share_of_the_cores_between_two_readings():
    """30 of 40 ticks busy is 3/4 of every core: 1.5 of 2 cores (user, system, irq... count; idle and iowait not)."""
    before, after = _stat(busy=1000, idle=5000), _stat(busy=1030, idle=5010)
    assert busy_cores(before, after, cores=2) == pytest.approx(1.5)
    assert busy_cores(before, before, cores=2) == 0.0


def test_without_proc_stat_the_load_average_stands_in_and_is_named(tmp_path):
    load = machine_load(sample_seconds=0.0, stat_path=str(tmp_path / "missing"))
    assert load.measured_by == "one-minute load average" and load.cores == pytest.approx(os.getloadavg()[0], abs=1.0)


def test_the_real_machine_is_measured_from_its_cores():
    """On Linux the sample reads ``/proc/stat``: a number of cores between none and all of them."""
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat on this system")
    load = machine_load()
    assert load.measured_by == BUSY_NOW and 0.0 <= load.cores <= (os.cpu_count() or 1)
