"""The cohort trainer keeps, per (model, group size), the path its timed groups ran faster; it records the choice,
reuses a stored one, and its results are the forced paths' (timings come from an injected clock, not the machine)."""

import json

import pytest
import torch

from fedpub.clients import cohort_training
from fedpub.clients.cohort_training import CohortTrainer, model_signature
from fedpub.clients.local_training import LocalTrainingConfig
from fedpub.clients.path_choice import GroupKey, PathChooser
from fedpub.data.base import ClientData
from fedpub.models import build_model
from fedpub.models.seeded import model_params
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import Experiment, build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.flower.server_app import server_public_pool
from fedpub.simulations.run.session import RunSession
from fedpub.tasks import CLASSIFICATION
from tests.conftest import tiny_config


def test_group_sizes_are_keyed_by_power_of_two_buckets():
    assert [str(GroupKey.of("M", n)) for n in (1, 2, 3, 4, 7, 8, 15, 16, 200)] == [
        f"M × {bucket} users" for bucket in ("1", "2-3", "2-3", "4-7", "4-7", "8-15", "8-15", "16-31", "128-255")]
    assert GroupKey.of("M", 5) == GroupKey("M", 4) and GroupKey.of("a × b", 12).model == "a × b"


def test_the_chooser_keeps_the_smaller_total_after_its_trials_logs_it_and_round_trips_through_json():
    lines: list[str] = []
    chooser = PathChooser(trials=2, log=lines.append)
    key = GroupKey.of("M", 12)
    assert chooser.choice(key) is None and chooser.first(key) == "vectorised"
    assert chooser.record(key, {"vectorised": 0.035, "loop": 0.02}) is None  # one trial of two: still timing
    assert chooser.first(key) == "loop" and chooser.to_json() == {}
    # the loop lost the second group, but its total is smaller
    assert chooser.record(key, {"vectorised": 0.025, "loop": 0.03}) == "loop"
    assert chooser.record(key, {"vectorised": 0.0, "loop": 9.0}) == "loop"  # final: later timings change nothing
    assert lines == [f"cohort training: {key}: loop kept (vectorised 0.0600 s, loop 0.0500 s over 2 groups)"]
    stored = json.loads(json.dumps(chooser.to_json()))
    assert stored == {"M × 8-15 users": {"model": "M", "smallest_group": 8, "path": "loop",
                                         "seconds": {"vectorised": 0.06, "loop": 0.05}, "groups_timed": 2}}
    other = GroupKey.of("M", 100)  # one candidate twice as slow: decided on the first group
    assert chooser.record(other, {"vectorised": 0.05, "loop": 0.1}) == "vectorised"
    assert PathChooser(stored).choice(key) == "loop"
    assert PathChooser(stored).choice(GroupKey.of("M", 40)) is None  # another size is timed afresh
    assert chooser.implied("M", 3) == "loop" and chooser.implied("M", 100) == "vectorised"  # smaller / larger
    assert chooser.implied("M", 40) is None and chooser.implied("other model", 3) is None
    close = GroupKey.of("M", 40)  # vectorised 5 % faster: within the margin, the loop is kept
    chooser.record(close, {"vectorised": 0.95, "loop": 1.0})
    assert chooser.record(close, {"vectorised": 0.95, "loop": 1.0}) == "loop"
    clear = GroupKey.of("M", 1)  # 15 % faster: kept
    chooser.record(clear, {"vectorised": 0.85, "loop": 1.0})
    assert chooser.record(clear, {"vectorised": 0.85, "loop": 1.0}) == "vectorised"
    chooser.record(GroupKey.of("M", 200), {"vectorised": 0.3, "loop": 0.1})  # noise: the loop won a larger size
    assert chooser.implied("M", 100) is None  # the choices disagree: time it
    with pytest.raises(ValueError, match="path must be one of"):
        PathChooser({str(key): {**stored[str(key)], "path": "gpu"}})
    with pytest.raises(ValueError, match=r"missing \['model', 'smallest_group'\].*delete the run's paths.json"):
        PathChooser({str(key): {"path": "loop", "seconds": {}, "groups_timed": 1}})
    with pytest.raises(ValueError, match="needs seconds for"):
        chooser.record(key, {"loop": 1.0})


class _FakeClock:
    """Seconds that pass only when a path's work says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _slowed(monkeypatch, clock, *, vectorised_s=0.0, per_user_s=0.0):
    """Count the vectorised groups and the loop's users, each advancing ``clock`` by its fake cost."""
    calls = {"vectorised": 0, "loop": 0}
    group, client = cohort_training._train_group, cohort_training.train_client

    def timed_group(*args, **kwargs):
        calls["vectorised"] += 1
        clock.now += vectorised_s
        return group(*args, **kwargs)

    def timed_client(*args, **kwargs):
        calls["loop"] += 1
        clock.now += per_user_s
        return client(*args, **kwargs)

    monkeypatch.setattr(cohort_training, "_train_group", timed_group)
    monkeypatch.setattr(cohort_training, "train_client", timed_client)
    return calls


def _cohort(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(torch.rand(n, 1, 28, 28, generator=g), torch.randint(10, (n,), generator=g)) for n in sizes]


def _generators(count):
    return [torch.Generator().manual_seed(i) for i in range(count)]


@pytest.mark.parametrize(("vectorised_s", "per_user_s", "winner"), [(0.2, 0.07, "vectorised"), (0.5, 0.1, "loop")])
def test_the_trainer_times_both_paths_keeps_the_faster_and_gives_the_forced_paths_results(
    monkeypatch, vectorised_s, per_user_s, winner
):
    model = build_model("emnist_mlp", 10)
    config = LocalTrainingConfig(batch_size=16, lr=0.1)
    params, datas = model_params(model), _cohort([10, 12, 16, 9])  # one group of four one-step users
    forced = {path: CohortTrainer(model, config, CLASSIFICATION, path=path).train(params, datas, _generators(4))
              for path in ("vectorised", "loop")}
    clock, lines = _FakeClock(), []
    calls = _slowed(monkeypatch, clock, vectorised_s=vectorised_s, per_user_s=per_user_s)
    trainer = CohortTrainer(model, config, CLASSIFICATION, trials=2, clock=clock, log=lines.append)
    key = GroupKey.of(model_signature(model), 4)
    trainer.train(params, datas, _generators(4))  # the first vectorised group pays torch.func's set-up: not counted
    assert calls == {"vectorised": 1, "loop": 4} and trainer.choices() == {} and trainer.groups_timed == 1
    for trial in range(2):  # both paths on every timed group; the loop's results are kept
        results = trainer.train(params, datas, _generators(4))
        assert calls == {"vectorised": trial + 2, "loop": 4 * (trial + 2)}
        assert all(torch.equal(r.update[k], f.update[k]) for r, f in zip(results, forced["loop"]) for k in params)
    assert trainer.choices() == {str(key): {"model": key.model, "smallest_group": 4, "path": winner, "groups_timed": 2,
                                       "seconds": {"vectorised": round(2 * vectorised_s, 6),
                                                                   "loop": round(8 * per_user_s, 6)}}}
    kept = f"{winner} kept (vectorised {2 * vectorised_s:.4f} s, loop {8 * per_user_s:.4f} s over 2 groups)"
    assert lines == [f"cohort training: {key}: {kept}"]
    before = dict(calls)
    results = trainer.train(params, datas, _generators(4))  # decided: only the winner runs
    assert calls["vectorised"] - before["vectorised"] == (winner == "vectorised")
    assert calls["loop"] - before["loop"] == 4 * (winner == "loop")
    for r, f in zip(results, forced[winner]):
        assert all(torch.equal(r.update[k], f.update[k]) for k in params)
    # a trainer given the stored choices (a resumed run) times nothing
    resumed = CohortTrainer(model, config, CLASSIFICATION, stored=trainer.choices(), clock=clock)
    before = dict(calls)
    resumed.train(params, datas, _generators(4))
    assert calls["vectorised"] - before["vectorised"] + (calls["loop"] - before["loop"]) // 4 == 1


def test_a_timed_group_in_which_a_user_fails_is_not_counted(monkeypatch):
    model = build_model("emnist_mlp", 10)
    g = torch.Generator().manual_seed(0)
    broken = ClientData(torch.rand(8, 1, 5, 5, generator=g), torch.randint(10, (8,), generator=g))  # the model raises
    clock = _FakeClock()
    _slowed(monkeypatch, clock, vectorised_s=1.0)
    trainer = CohortTrainer(model, LocalTrainingConfig(batch_size=16), CLASSIFICATION, trials=1, clock=clock)
    results = trainer.train(model_params(model), [*_cohort([8]), broken], _generators(2))
    assert "RuntimeError" in results[1].error and trainer.choices() == {}


def test_a_run_records_its_choices_in_paths_json_resumes_with_them_and_trains_the_forced_paths_model(
    tiny_emnist_dir, tmp_path, monkeypatch
):
    forced = {}
    for path in ("vectorised", "loop"):
        cfg = tiny_config(tiny_emnist_dir, tmp_path / path, client={"path": path})
        forced[path] = run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name)).params
        assert RunDirectory(cfg.output_dir / cfg.name).load_paths() is None

    cfg = tiny_config(tiny_emnist_dir, tmp_path / "auto", client={"path": "auto"})
    run_dir, lines = RunDirectory(cfg.output_dir / cfg.name), []

    done = []

    def stop(record):
        done.append(record)
        if len(done) == cfg.rounds:  # the tiny run's choices are made in its last round
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # stopped before it finished, checkpointed
        run_in_process(build_experiment(cfg), run_dir, on_round=stop, log=lines.append)
    first = run_dir.load_paths()
    assert first, "the run made no choice: nothing to resume with"
    timed = [record["groups_timed"] for record in run_dir.read_diagnostics()]
    assert timed[0] > 0 and sum(timed) >= sum(entry["groups_timed"] for entry in first.values())
    given, original = [], Experiment.cohort_trainer

    def recording(self, model, *, stored=None, log=None):
        given.append(stored)
        return original(self, model, stored=stored, log=log)

    monkeypatch.setattr(Experiment, "cohort_trainer", recording)
    result = run_in_process(build_experiment(cfg), run_dir, log=lines.append)
    assert result.rounds_done == cfg.rounds and given == [first]  # the resumed run started from the stored choices
    stored = run_dir.load_paths()
    assert stored and all(entry["path"] in ("vectorised", "loop") for entry in stored.values())
    assert {k: stored[k] for k in first} == first
    assert sum(" kept (" in line for line in lines) == len(stored)  # each choice logged once
    for path in ("vectorised", "loop"):
        for name, value in result.params.items():
            torch.testing.assert_close(value, forced[path][name], rtol=1e-4, atol=1e-5)


def test_a_serverapps_public_pool_trains_with_the_sessions_stored_choices_and_the_session_saves_new_ones(
    tiny_emnist_dir, tmp_path
):
    """The Flower ServerApp trains the public users itself (``flower.public_users: server``) with the session's
    cohort trainer: a resumed run reuses the choices in ``paths.json``, and each recorded round saves new ones."""
    cfg = tiny_config(tiny_emnist_dir, tmp_path, client={"path": "auto"},
                      data={"public": {"fraction": 0.25, "seed": 0}},
                      strategy={"name": "dope", "clip_norm": 0.5, "noise_multiplier": 0.8,
                                "public_clients_per_round": 2, "sampling": {"kind": "poisson", "clients_per_round": 4}})
    experiment = build_experiment(cfg)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    key = GroupKey.of(model_signature(experiment.new_model()), 2)
    seconds = {"vectorised": 0.2, "loop": 0.1}
    stored = {str(key): {"model": key.model, "smallest_group": 2, "path": "loop", "seconds": seconds, "groups_timed": 2}}
    run_dir.root.mkdir(parents=True)
    run_dir.save_paths(stored)
    session = RunSession(experiment, run_dir)
    try:
        pool = server_public_pool(experiment, session)
        assert pool is not None and pool.trainer.choices() == stored
        other = GroupKey.of(key.model, 9)
        pool.trainer.chooser.record(other, {"vectorised": 0.1, "loop": 0.5})  # as a timed group of 9 would
        plan = session.driver.plan(0, session.state)
        outcome = session.driver.finish(plan, session.params, session.state, {}, pool.train(session.params, plan))
        session.record(0, outcome, [], 0)
    finally:
        session.close()
    assert set(run_dir.load_paths()) == {str(key), str(other)}
