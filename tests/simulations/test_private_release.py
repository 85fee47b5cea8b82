"""What a run releases holds only what DP covers, and its noise and cohorts are secret when they must be.

* A secret run's noise cannot be rebuilt from its config (every derivation of the config's seed an attacker could
  try leaves the whole noise), its cohorts cannot be predicted, and no released file holds its privacy seed; a
  resumed secret run goes on with its checkpointed seed.
* A reproducible run is rebuilt exactly from its config, says so in its ledger and summary, and runs of a sweep
  (other names) never share draws unless given one ``privacy.draws_key`` (the arms of a comparison).
* Neighbouring runs (with and without one private user) release files that differ only in what DP covers (the
  model's evaluation, the noised clip) and in what the population size N sets (m = qN, the noise std z·C/m, and
  the summary's N, m, q lines), which fedpub treats as public, as McMahan et al. (2018) do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import pytest
import torch

from fedpub import tree
from fedpub.privacy.randomness import PrivacyRandomness
from fedpub.seeding import derive_seed
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

RELEASED = ("config.yaml", "metrics.jsonl", "ledger.json", "summary.md", "final_metrics.json")
DIAGNOSTICS = ("cohort_sampled", "cohort_failed", "cohort_size", "clipped_fraction", "norm_mean", "norm_median",
               "norm_max", "train_loss", "train_accuracy", "examples", "wall_time", "groups_timed")


def _run(cfg, experiment=None, **kwargs):
    return run_in_process(experiment or build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name), **kwargs)


def _released_text(root: Path) -> str:
    return "".join((root / name).read_text() for name in RELEASED)


def _noise_of_round_zero(experiment) -> dict[str, torch.Tensor]:
    """What the noise step adds in round 0 when every sampled user's update is zero: the noise itself."""
    core = experiment.strategy
    params = {k: v.detach() for k, v in experiment.new_model().state_dict().items()}
    zeros = [tree.zeros_like(params)] * 4
    outcome = core.aggregate(params, zeros, core.init(params), 0)
    return tree.sub(outcome.params, params)


def test_a_secret_runs_noise_and_cohorts_cannot_be_rebuilt_from_its_config(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, privacy={"randomness": "secret"})
    secret = build_experiment(cfg)
    assert secret.randomness.secret
    noise = _noise_of_round_zero(secret)
    # an attacker holding config.yaml tries every seed it could derive from it: the reproducible derivation,
    # the config's seed itself; each guess leaves about √2 times the noise's norm, never a small residue
    for guess in (derive_seed(cfg.seed, cfg.name, "privacy"), cfg.seed):
        rebuilt = _noise_of_round_zero(secret.with_randomness(PrivacyRandomness(secret=False, seed=guess)))
        residue = tree.global_norm(tree.sub(noise, rebuilt)) / tree.global_norm(noise)
        assert residue > 1.2
    # the same config twice: other noise, other cohorts
    again = build_experiment(cfg)
    assert tree.global_norm(tree.sub(noise, _noise_of_round_zero(again))) / tree.global_norm(noise) > 1.2
    cohorts = [[e.strategy.sample_cohort(e.private_ids, t) for t in range(10)] for e in (secret, again)]
    assert cohorts[0] != cohorts[1]

    result = _run(cfg, secret)
    root = result.run_dir.root
    assert json.loads((root / "ledger.json").read_text())["randomness"].startswith("secret")
    assert "Randomness: secret" in (root / "summary.md").read_text()
    assert str(secret.randomness.seed) not in _released_text(root)  # the seed is in the checkpoint only
    assert result.run_dir.load_checkpoint()["privacy_randomness"] == secret.randomness.to_dict()


def test_a_resumed_secret_run_draws_from_its_checkpointed_seed(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path / "cut", privacy={"randomness": "secret"})

    def stop_after_round_one(record):
        if record["round"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(cfg, on_round=stop_after_round_one)
    seed = RunDirectory(cfg.output_dir / cfg.name).load_checkpoint()["privacy_randomness"]
    resumed = _run(cfg)  # a new process would draw a new secret seed: the checkpoint's wins
    assert resumed.run_dir.load_checkpoint()["privacy_randomness"] == seed
    whole_cfg = tiny_config(tiny_emnist_dir, tmp_path / "whole", privacy={"randomness": "secret"})
    whole = _run(whole_cfg, build_experiment(whole_cfg).with_randomness(PrivacyRandomness.from_dict(seed)))
    for k in whole.params:
        assert torch.equal(resumed.params[k], whole.params[k])


def test_a_reproducible_run_is_rebuilt_from_its_config_and_says_so(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path / "a")
    experiment = build_experiment(cfg)
    assert not experiment.randomness.secret
    assert tree.global_norm(tree.sub(_noise_of_round_zero(experiment), _noise_of_round_zero(build_experiment(cfg)))) == 0
    other_run = build_experiment(cfg.model_copy(update={"name": "tiny_other"}))  # e.g. another run of a sweep
    noise = _noise_of_round_zero(experiment)
    assert tree.global_norm(tree.sub(noise, _noise_of_round_zero(other_run))) / tree.global_norm(noise) > 1.2

    first = _run(cfg, experiment)
    second = _run(tiny_config(tiny_emnist_dir, tmp_path / "b"))
    for k in first.params:
        assert torch.equal(first.params[k], second.params[k])
    root = first.run_dir.root
    assert "NOT private against anyone holding its config.yaml" in json.loads((root / "ledger.json").read_text())[
        "randomness"]
    assert "NOT private against anyone holding its config.yaml" in (root / "summary.md").read_text()


def test_runs_given_one_draws_key_share_their_noise_and_a_secret_run_refuses_the_key(tiny_emnist_dir, tmp_path):
    """privacy.draws_key (issue 45): two arms of a comparison (other names) draw the same noise and cohorts when
    given one key, and other noise under other keys; a secret run cannot share draws, so it refuses the key."""
    cfg = tiny_config(tiny_emnist_dir, tmp_path / "a")
    privacy = cfg.privacy.model_copy(update={"draws_key": "arms__eps2__seed0"})
    arm_a = build_experiment(cfg.model_copy(update={"name": "arm_a", "privacy": privacy}))
    arm_b = build_experiment(cfg.model_copy(update={"name": "arm_b", "privacy": privacy}))
    noise = _noise_of_round_zero(arm_a)
    assert tree.global_norm(tree.sub(noise, _noise_of_round_zero(arm_b))) == 0
    ids = list(arm_a.private_ids)
    assert arm_a.strategy.sampling.draw(ids, arm_a.randomness.seed, 3) == arm_b.strategy.sampling.draw(
        ids, arm_b.randomness.seed, 3)
    other = build_experiment(cfg.model_copy(update={
        "name": "arm_a", "privacy": cfg.privacy.model_copy(update={"draws_key": "arms__eps2__seed1"})}))
    assert tree.global_norm(tree.sub(noise, _noise_of_round_zero(other))) / tree.global_norm(noise) > 1.2
    secret = cfg.privacy.model_copy(update={"draws_key": "k", "randomness": "secret"})
    with pytest.raises(ValueError, match="privacy.draws_key shares reproducible draws"):
        build_experiment(cfg.model_copy(update={"privacy": secret}))


def test_the_secure_sampler_is_refused_for_a_reproducible_run(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, privacy={"noise_sampler": "opendp", "randomness": "reproducible"})
    with pytest.raises(ValueError, match="privacy.noise_sampler `opendp`.*cannot serve a reproducible run"):
        build_experiment(cfg)


def _without_user(source: Path, target: Path, user: str) -> Path:
    """A copy of the TFF files in ``source`` without ``user`` (its training and its test examples)."""
    shutil.copytree(source, target)
    for path in target.glob("*.h5"):
        with h5py.File(path, "a") as f:
            del f["examples"][user]
    return target


def _differing(a: dict, b: dict) -> set[str]:
    assert a.keys() == b.keys()
    return {k for k in a if a[k] != b[k]}


def test_neighbouring_runs_release_files_that_differ_only_in_what_dp_covers(tiny_emnist_dir, tmp_path):
    """With and without one private user, same seed and sampling rate: the same ledger, and records whose keys
    are the same and whose differing values are the evaluation, the noised clip and what N sets. By default (no
    public users) the evaluation is on held-out evaluation users, the same ones with or without the private user."""
    overrides = {
        "data": {"source": "emnist_h5", "eval_users": "auto"},
        "strategy": {"sampling": {"kind": "poisson", "sampling_rate": 0.3},
                     "adaptive_clip": {"count_noise_std": 1.0}},
    }
    cfg = tiny_config(tiny_emnist_dir, tmp_path / "with", **overrides)
    experiment = build_experiment(cfg)
    removed = experiment.private_ids[-1]  # a private user (in N), not an evaluation user
    smaller = _without_user(tiny_emnist_dir, tmp_path / "data_without", removed)
    neighbour_cfg = tiny_config(smaller, tmp_path / "without", **overrides)
    neighbour = build_experiment(neighbour_cfg)
    assert neighbour.private_ids == experiment.private_ids[:-1]
    assert experiment.evaluation_ids and neighbour.evaluation_ids == experiment.evaluation_ids
    assert experiment.eval_users.ids == neighbour.eval_users.ids and experiment.eval_users.kind == "evaluation"
    assert not set(experiment.evaluation_ids) & set(experiment.private_ids)

    runs = [_run(c, e) for c, e in ((cfg, experiment), (neighbour_cfg, neighbour))]
    roots = [r.run_dir.root for r in runs]
    ledgers = [json.loads((root / "ledger.json").read_text()) for root in roots]
    assert ledgers[0] == ledgers[1]  # the same q, z and rounds: the same event and ε

    covered = {"eval_loss", "eval_accuracy", "clip/clip_norm", "clip/next_clip_norm", "clip/noisy_unclipped_fraction"}
    set_by_n = {"aggregate/expected_cohort", "noise/noise_std"}
    records = [RunDirectory(root).read_metrics() for root in roots]
    for a, b in zip(*records, strict=True):
        assert _differing(a, b) <= covered | set_by_n, _differing(a, b)
        assert not {key.split("/")[-1] for key in a} & set(DIAGNOSTICS)  # those are in diagnostics.jsonl
    finals = [RunDirectory(root).read_final_metrics() for root in roots]
    assert _differing(*finals) <= covered
    assert finals[0]["evaluated_on"] == "test examples of users outside N (held out, never trained on)"

    configs = [(root / "config.yaml").read_text().splitlines() for root in roots]
    changed_keys = [a.split(":")[0].strip() for a, b in zip(*configs, strict=True) if a != b]
    assert changed_keys == ["output_dir", "path"]  # where the run is written and where its data is
    summaries = [(root / "summary.md").read_text().splitlines() for root in roots]
    changed = [a.split("|")[1].strip() for a, b in zip(*summaries, strict=True) if a != b]
    assert set(changed) <= {"final test accuracy", "final test loss", "private users N", "sampling"}, changed
    table = [line for line in summaries[0] if line.startswith("|")]
    assert table and not any("wall" in line.lower() for line in table)  # a diagnostic: in diagnostics.jsonl only
    diagnostics = RunDirectory(roots[0]).read_diagnostics()
    assert {"cohort_sampled", "clip/clipped_fraction", "train_loss", "examples"} <= diagnostics[0].keys()
