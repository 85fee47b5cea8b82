"""The round on many workers (``simulations/run/distributed.py``): real torchrun (``python -m torch.distributed.run``)
on 127.0.0.1 with gloo, two ranks, against the one-process run of the same configs: the same ledger and ε for
every recipe and cohort rule, the model within float rounding, the noise added once; a rank killed mid-round stops
the run cleanly and the rerun resumes to the same model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fedpub.config import ExperimentConfig, dump_config
from fedpub.models.seeded import model_params
from fedpub.simulations.flower.deploy.processes import free_ports
from fedpub.simulations.run.backends import check_backend
from fedpub.simulations.run.distributed import Launch, launched, rank_device, split_by_work
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

PUBLIC = {"public": {"fraction": 0.25, "seed": 0}}  # 4 of the 16 writers public: N = 12
BASE = {"clip_norm": 0.5, "noise_multiplier": 0.8}
RECIPES: dict[str, dict[str, Any]] = {
    "dp_fedavg": {"strategy": {**BASE, "name": "dp_fedavg", "sampling": {"clients_per_round": 4}}},
    "dope_adaptive_clip_average": {"data": PUBLIC, "strategy": {
        **BASE, "name": "dope", "adaptive_clip": {"count_noise_std": 1.0}, "model_average": {},
        "sampling": {"clients_per_round": 4}}},
    "adadps_client_fixed_size": {"data": PUBLIC, "privacy": {"accountant": "rdp"}, "strategy": {
        **BASE, "name": "adadps", "public_clients_per_round": 3,
        "sampling": {"kind": "fixed", "clients_per_round": 4}}},
    "pdp": {"data": PUBLIC, "strategy": {**BASE, "name": "pdp", "sampling": {"clients_per_round": 4}}},
    "pda_dpmd_warm_start_budget": {"data": PUBLIC, "strategy": {
        **BASE, "name": "pda_dpmd", "budget_schedule": {"boosted_rounds": 1, "boosted_noise_multiplier": 0.5},
        "sampling": {"clients_per_round": 4}}},
    "ppsgd_model_reuse": {"data": PUBLIC, "privacy": {"budget_epsilon": 30.0},
                          "strategy": {**BASE, "name": "ppsgd", "sampling": {"clients_per_round": 4}}},
    "dp_ftrl_epoch_blocks": {"privacy": {"accountant": "rdp"},
                             "strategy": {**BASE, "name": "dp_ftrl", "sampling": {"clients_per_round": 4}}},
    "dope_banded_mf_cyclic": {"data": PUBLIC, "strategy": {
        **BASE, "name": "dope", "noise": {"kind": "banded_mf", "bands": 2, "factorization": "bsr"},
        "sampling": {"kind": "cyclic_poisson", "clients_per_round": 4, "groups": 2}}},
}
SECRET = {"privacy": {"randomness": "secret"}, "strategy": {**BASE, "sampling": {"clients_per_round": 4}}}
"""A deployment's privacy randomness: rank 0's seed from the OS, sent to the other ranks, never released."""
NOISE = {"rounds": 1, "client": {"lr": 1e-9}, "strategy": {**BASE, "sampling": {"clients_per_round": 4}}}
"""Updates of about 1e-9: the released change of the model is the noise on the mean, std z·C/m = 0.1."""


def _torchrun(configs: list[Path], *, kill_rank: int = -1, kill_round: int = -1,
              ranks: int = 2) -> subprocess.CompletedProcess:
    """``fedpub run`` of each config in turn by ``ranks`` ranks on 127.0.0.1 (gloo, or NCCL for configs on CUDA;
    faults.py: SIGKILL one mid-round)."""
    return _launch(["-m", "tests.simulations.faults", "torchrun", str(kill_rank), str(kill_round), *map(str, configs)],
                   ranks=ranks)


def _launch(program: list[str], *, ranks: int = 2) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node RANKS ... PROGRAM`` on 127.0.0.1."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-addr",
               "127.0.0.1", "--master-port", str(free_ports(1)[0]), *program]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def _config(data_dir: Path, out: Path, overrides: dict[str, Any]) -> ExperimentConfig:
    return tiny_config(data_dir, out, rounds=2, **overrides)


def _write(cfg: ExperimentConfig, path: Path) -> Path:
    path.write_text(dump_config(cfg))
    return path


def _checkpoint(cfg: ExperimentConfig) -> dict[str, Any]:
    return torch.load(cfg.output_dir / cfg.name / "checkpoint.pt", weights_only=True)


def _released(cfg: ExperimentConfig) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (cfg.output_dir / cfg.name / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def two_ranks(tiny_emnist_dir, tmp_path_factory):
    """Every recipe and the noise config, run by two ranks in one torchrun launch: (configs by recipe, output)."""
    root = tmp_path_factory.mktemp("two_ranks")
    os.environ.setdefault("FEDPUB_CACHE_DIR", str(root / "cache"))
    configs = {name: _config(tiny_emnist_dir, root / name, overrides) for name, overrides in RECIPES.items()}
    configs["noise"] = tiny_config(tiny_emnist_dir, root / "noise", **NOISE)
    configs["secret"] = _config(tiny_emnist_dir, root / "secret", SECRET)
    done = _torchrun([_write(cfg, root / f"{name}.yaml") for name, cfg in configs.items()])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return configs, done


def _assert_one_process_releases_the_same(ranked: dict[str, ExperimentConfig], out: Path) -> float:
    """Each config of ``ranked`` (already run by torchrun's ranks) run again in this process: the same ledger and
    accountant, released ε and clip/noise figures, the model within float rounding. Returns the largest difference
    of a model entry."""
    gap = 0.0
    for name, cfg in ranked.items():
        alone = cfg.model_copy(update={"output_dir": out / name})
        run_in_process(build_experiment(alone), RunDirectory(alone.output_dir / alone.name))
        one, two = _checkpoint(alone), _checkpoint(cfg)
        assert (alone.output_dir / "tiny/ledger.json").read_text() == (cfg.output_dir / "tiny/ledger.json").read_text()
        assert one["accountant"] == two["accountant"], name
        for key, value in one["params"].items():
            gap = max(gap, float((value - two["params"][key].to(value.device)).abs().max()))
            assert torch.allclose(value, two["params"][key].to(value.device), rtol=1e-4, atol=1e-6), (name, key)
        for released_alone, released_ranked in zip(_released(alone), _released(cfg), strict=True):
            assert released_alone.keys() == released_ranked.keys(), name
            assert released_alone["epsilon"] == released_ranked["epsilon"], name
            for key in (k for k in released_alone if k.startswith("clip/") or k.endswith("noise_multiplier")):
                assert released_alone[key] == pytest.approx(released_ranked[key], rel=1e-5), (name, key)
    return gap


def test_two_ranks_release_what_one_process_releases_for_every_recipe(two_ranks, tmp_path):
    configs, _ = two_ranks
    _assert_one_process_releases_the_same(
        {name: cfg for name, cfg in configs.items() if name not in ("noise", "secret")}, tmp_path)
    assert not any((cfg.output_dir / cfg.name / "paths.json").exists() for cfg in configs.values())  # path: loop


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_nccl_rank_on_a_gpu_releases_what_one_process_on_it_releases_for_every_recipe(tiny_emnist_dir, tmp_path):
    """NCCL reduces CUDA tensors only: every collective of the round (the sum, the counts, the objects) on the GPU
    (one rank: the machines lent here have one GPU). Measured on an H200: the models within 3e-8."""
    os.environ.setdefault("FEDPUB_CACHE_DIR", str(tmp_path / "cache"))
    configs = {name: _config(tiny_emnist_dir, tmp_path / "ranked" / name, {**overrides, "device": "cuda"})
               for name, overrides in RECIPES.items()}
    done = _torchrun([_write(cfg, tmp_path / f"{name}.yaml") for name, cfg in configs.items()], ranks=1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    gap = _assert_one_process_releases_the_same(configs, tmp_path / "alone")
    print(f"NCCL rank vs one process on {torch.cuda.get_device_name()}: largest model difference {gap:.3g}")


def test_the_noise_is_added_once(two_ranks):
    cfg = two_ranks[0]["noise"]
    before = model_params(build_experiment(cfg).new_model())
    after = _checkpoint(cfg)["params"]
    change = torch.cat([(after[k] - before[k]).flatten() for k in before]).double()
    expected = 0.8 * 0.5 / 4  # z · C / m, the mean's noise; twice the draw (or two draws) would be 2x (or √2 x)
    assert change.numel() > 10_000
    assert change.std().item() == pytest.approx(expected, rel=0.05)
    assert abs(change.mean().item()) < 4 * expected / change.numel() ** 0.5


def test_a_secret_seed_is_shared_by_the_ranks_and_released_nowhere(two_ranks):
    """Every round starts with the ranks checking they hold the same model, so two rounds finished means the
    follower drew rank 0's cohorts and noise; the seed is in the server-private checkpoint only."""
    cfg = two_ranks[0]["secret"]
    checkpoint = _checkpoint(cfg)
    assert checkpoint["rounds_done"] == 2 and checkpoint["privacy_randomness"]["secret"] is True
    seed = str(checkpoint["privacy_randomness"]["seed"])
    run = cfg.output_dir / cfg.name
    released = [path for path in run.rglob("*") if path.is_file() and path.name != "checkpoint.pt"]
    assert {"metrics.jsonl", "ledger.json", "config.yaml"} <= {path.name for path in released}
    assert not [path for path in released if seed in path.read_bytes().decode("utf-8", "replace")]
    assert "secret" in (run / "ledger.json").read_text()
    before = model_params(build_experiment(cfg).new_model())
    assert any(not torch.equal(before[k], checkpoint["params"][k]) for k in before)


def test_a_killed_rank_stops_the_run_cleanly_and_the_rerun_resumes_to_the_same_model(two_ranks, tmp_path):
    whole = two_ranks[0]["dp_fedavg"]  # its two rounds uninterrupted
    cfg = whole.model_copy(update={"output_dir": tmp_path})
    path = _write(cfg, tmp_path / "run.yaml")
    killed = _torchrun([path], kill_rank=1, kill_round=1)
    output = killed.stdout + killed.stderr
    assert killed.returncode != 0
    assert "rank 0 of 2: gathering round 1's public updates failed, so another rank stopped" in output, output[-3000:]
    assert "rank      : 1 (local_rank: 1)" in output and "SIGKILL" in output  # torchrun's report names it
    run = tmp_path / cfg.name
    assert [r["round"] for r in _released(cfg)] == [0]
    assert _checkpoint(cfg)["rounds_done"] == 1
    assert not list(run.glob(".*.tmp")) and not (run / "summary.md").exists()
    resumed = _launch(["-m", "fedpub.simulations", "run", str(path)])  # the README's command
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming from round 1" in resumed.stdout
    for key, value in _checkpoint(whole)["params"].items():
        assert torch.equal(value, _checkpoint(cfg)["params"][key]), key
    assert [r["round"] for r in _released(cfg)] == [0, 1]
    assert _released(cfg)[1]["epsilon"] == _released(whole)[1]["epsilon"]


def test_the_split_gives_the_largest_users_first_to_the_least_loaded_rank():
    assert split_by_work([5, 9, 1, 4, 4], 2) == [[1, 4], [0, 2, 3]]  # 9 | 5, 4 | then 4 on the tie, 1 to rank 1
    assert split_by_work([3, 3], 4) == [[0], [1], [], []]
    shares = split_by_work(list(range(20)), 3)
    assert sorted(i for share in shares for i in share) == list(range(20))
    loads = [sum(share) for share in shares]
    assert max(loads) - min(loads) <= 1


def test_torchrun_is_found_in_its_environment_and_what_it_cannot_run_is_refused():
    assert launched({}) is None
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    assert launched(env) == Launch(rank=1, world_size=2, local_rank=1)
    with pytest.raises(ValueError, match="sets RANK but not WORLD_SIZE, LOCAL_RANK"):
        launched({"RANK": "0"})
    with pytest.raises(ValueError, match="backend 'flower' runs its clients in its own processes"):
        check_backend("flower", torchrun=True)
    assert check_backend("inprocess", torchrun=True) == "inprocess"
    launch = Launch(0, 2, 0)
    assert rank_device(launch, torch.device("cpu"), "cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="device: cuda:1 names one GPU"):
        rank_device(launch, torch.device("cuda", 1), "cuda:1")
    with pytest.raises(ValueError, match="device: mps cannot be shared"):
        rank_device(launch, torch.device("mps"), "mps")
