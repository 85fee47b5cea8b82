"""Every public-data recipe end to end through the in-process engine, on the tiny synthetic data
(real HDF5 files, real accountant): each runs, accounts what it adds, and leaves its results."""

from __future__ import annotations

import json

import pytest
import torch

from fedpub.clients.local_training import LocalTrainingConfig, train_client
from fedpub.data import registry
from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.events import PoissonSampling
from fedpub.seeding import torch_generator
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config
from tests.simulations.test_stackoverflow_runs import _config as so_config

PUBLIC = {"public": {"fraction": 0.25, "seed": 0}}  # 4 of the 16 writers are public: N = 12


def _run(cfg):
    return run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name))


def _records(cfg):
    return [json.loads(x) for x in (cfg.output_dir / cfg.name / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "strategy, metric",
    [
        ({"name": "adadps", "public_clients_per_round": 2}, "precondition/preconditioner_max"),
        ({"name": "adadps", "precondition": {"placement": "server"}}, "precondition/preconditioner_mean"),
        ({"name": "pda_dpmd", "mirror": {"decay_rounds": 2}}, "mirror/alpha"),
        ({"name": "pdp", "projection": {"k": 3, "noise_space": "subspace"}}, "project/rank"),
        ({"name": "dope", "recenter": {"extended": True}, "precondition": {"placement": "server"}, "mirror": {}},
         "recenter/center_norm"),
    ],
)
def test_each_public_recipe_runs_and_costs_what_dp_fedavg_costs(tiny_emnist_dir, tmp_path, strategy, metric):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, data=PUBLIC, strategy=strategy)
    result = _run(cfg)
    records = _records(cfg)
    assert all(metric in r and r["public_cohort_used"] > 0 for r in records)
    assert result.epsilon == pytest.approx(epsilon_for(PoissonSampling(4 / 12), 0.8, 2, 1e-5))
    assert all(torch.isfinite(v).all() for v in result.params.values())


def test_client_side_adadps_trains_private_clients_with_the_public_preconditioner(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, data=PUBLIC, strategy={"name": "adadps"})
    experiment = build_experiment(cfg)
    core = experiment.strategy
    params = {k: v.detach().clone() for k, v in experiment.new_model().named_parameters()}
    state = core.init(params)
    assert core.payloads(state) == {}  # no public statistics yet: A = 1
    public = [{k: torch.full_like(v, 0.01 if k == "0.weight" else 0.03) for k, v in params.items()}]
    state = core.aggregate(params, [], state, 0, public_updates=public).state
    a = core.payloads(state)["preconditioner"]
    assert core.payloads(state, public=True) == {}  # public users train plain
    raw = {k: float(v.flatten()[0]) + 1e-3 for k, v in public[0].items()}  # bias-corrected |Δ| + eps
    mean = sum(raw[k] * params[k].numel() for k in params) / sum(v.numel() for v in params.values())
    for k in params:
        torch.testing.assert_close(a[k], torch.full_like(params[k], raw[k] / mean))  # scaled to mean 1


def test_a_unit_preconditioner_leaves_local_training_exactly_as_it_was(tiny_emnist_dir, tmp_path):
    experiment = build_experiment(tiny_config(tiny_emnist_dir, tmp_path))
    model = experiment.new_model()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    data = experiment.train.client_data(experiment.private_ids[0])
    config = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1)
    plain = train_client(model, params, data, config, torch_generator(1))
    ones = {k: torch.ones_like(v) for k, v in params.items()}
    unit = train_client(model, params, data, config, torch_generator(1), payloads={"preconditioner": ones})
    twos = {"preconditioner": {k: 2 * v for k, v in ones.items()}}
    halves = train_client(model, params, data, config, torch_generator(1), payloads=twos)
    for k in params:
        assert torch.equal(plain.update[k], unit.update[k])
    first_step = LocalTrainingConfig(epochs=1, batch_size=len(data), lr=0.1)  # one step: Δ/2 exactly
    one = train_client(model, params, data, first_step, torch_generator(1))
    two = train_client(model, params, data, first_step, torch_generator(1), payloads=twos)
    for k in params:
        torch.testing.assert_close(two.update[k], one.update[k] / 2)
    assert not torch.equal(halves.update["0.weight"], plain.update["0.weight"])


def test_ppsgd_spends_its_budget_then_reuses_the_model_on_public_data(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(
        tiny_emnist_dir, tmp_path, rounds=6, data=PUBLIC, privacy={"budget_epsilon": 10.0},
        strategy={"name": "ppsgd", "noise_multiplier": 0.7,
                  "public_schedule": {"budget_growth": 1.0, "noise_test_factor": 1e-9},  # always spend more
                  "model_reuse": {"epochs": 1, "prox_weight": 0.5}},
    )
    result = _run(cfg)
    records = _records(cfg)
    zs = [r["noise/noise_multiplier"] for r in records]
    assert all(later < earlier for earlier, later in zip(zs, zs[1:]))
    assert result.stopped_by_budget and result.rounds_done < 6
    assert records[-1]["epsilon"] <= 10.0 and result.epsilon <= 10.0
    released = torch.load(tmp_path / "tiny" / "released_model.pt")
    private = torch.load(tmp_path / "tiny" / "checkpoint.pt", weights_only=True)["params"]
    assert not torch.equal(released["0.weight"], private["0.weight"])
    for k in released:
        assert torch.equal(released[k], result.params[k])
    assert "private_eval_accuracy" in result.final_metrics and "model_reuse/train_loss" in result.final_metrics
    stored = RunDirectory(tmp_path / "tiny").read_final_metrics()
    assert stored.pop("evaluated_on") == "public users' test examples"  # data.public: its users' test examples
    assert stored == pytest.approx(result.final_metrics)
    assert "model reuse" in (tmp_path / "tiny" / "summary.md").read_text()


def test_a_budget_schedule_calibrated_to_a_target_spends_exactly_it(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(
        tiny_emnist_dir, tmp_path, rounds=4, privacy={"accountant": "rdp"},
        strategy={"noise_multiplier": None, "target_epsilon": 4.0,
                  "budget_schedule": {"boosted_rounds": 1, "boosted_noise_multiplier": 1.2}},
    )
    result = _run(cfg)
    zs = [r["noise/noise_multiplier"] for r in _records(cfg)]
    assert zs[0] == 1.2 and zs[1] == zs[2] == zs[3] != 1.2
    assert result.epsilon <= 4.0 and result.epsilon == pytest.approx(4.0, abs=1e-2)


def test_a_budget_schedule_at_a_ratio_of_the_calibrated_z(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(
        tiny_emnist_dir, tmp_path, rounds=4, privacy={"accountant": "rdp"},
        strategy={"noise_multiplier": None, "target_epsilon": 4.0,
                  "budget_schedule": {"boosted_rounds": 2, "boosted_noise_ratio": 0.8, "position": "last"}},
    )
    result = _run(cfg)
    zs = [r["noise/noise_multiplier"] for r in _records(cfg)]
    assert zs[0] == zs[1] and zs[2] == zs[3] == pytest.approx(0.8 * zs[0])
    assert result.epsilon <= 4.0 and result.epsilon == pytest.approx(4.0, abs=1e-2)


def test_warm_start_and_model_averaging(tiny_emnist_dir, tmp_path):
    warm = tiny_config(tiny_emnist_dir, tmp_path / "warm", rounds=2, data=PUBLIC,
                       strategy={"warm_start": {"epochs": 2, "lr": 0.1}, "model_average": {"kind": "window", "window": 1}})
    cold = tiny_config(tiny_emnist_dir, tmp_path / "cold", rounds=2, data=PUBLIC)
    warm_result, cold_result = _run(warm), _run(cold)
    records = _records(warm)
    assert "warm_start/train_loss" in records[0] and "warm_start/train_loss" not in records[1]
    assert not torch.equal(warm_result.params["0.weight"], cold_result.params["0.weight"])
    assert all(r["avg_eval_accuracy"] == r["eval_accuracy"] for r in records)  # a window of 1 is the last model
    assert warm_result.epsilon == cold_result.epsilon


def test_pda_dpmd_pretrains_on_public_data_unless_warm_start_is_null(tiny_emnist_dir, tmp_path):
    strategy = {"name": "pda_dpmd", "mirror": {"decay_rounds": 2}}
    warm = tiny_config(tiny_emnist_dir, tmp_path / "warm", rounds=1, data=PUBLIC, strategy=strategy)
    cold = tiny_config(tiny_emnist_dir, tmp_path / "cold", rounds=1, data=PUBLIC,
                       strategy={**strategy, "warm_start": None})
    _run(warm), _run(cold)
    assert "warm_start/train_loss" in _records(warm)[0]  # Algorithm 1, line 1
    assert "warm_start/train_loss" not in _records(cold)[0]


def test_shuffled_token_frequencies_permute_a_by_the_runs_seed_and_cost_the_same(tmp_path):
    """precondition.shuffle, the control shuffled A: the A values of the words that occur permuted among them (the
    run's seed draws the order: building it again gives the same A), the others left at the floor, the noise
    calibrated and the run priced as the unshuffled run's."""
    weight = registry.model("so_tag_logreg").bag_of_words_weight

    def built(shuffle: bool):
        cfg = so_config(tmp_path, "so_tag", "so_tag_logreg", name="adadps", noise_multiplier=None, target_epsilon=3.0,
                        precondition={"source": "token_frequency", "placement": "client", "shuffle": shuffle})
        experiment = build_experiment(cfg)
        params = {k: v.detach() for k, v in experiment.new_model().named_parameters()}
        return experiment, experiment.strategy.payloads(experiment.strategy.init(params))["preconditioner"][weight]

    (plain, a), (shuffled, shuffled_a), (_, again) = built(False), built(True), built(True)
    occurring = a[0] > a[0].min()  # the words in the data; the others sit at the floor
    assert 0 < int(occurring.sum()) < a.shape[1]
    assert torch.equal(shuffled_a[0, ~occurring], a[0, ~occurring])  # a word never seen keeps its floor
    assert torch.equal(shuffled_a[0, occurring].sort().values, a[0, occurring].sort().values)  # the same values
    assert not torch.equal(shuffled_a, a) and torch.equal(again, shuffled_a)
    assert shuffled.noise_multiplier == plain.noise_multiplier and shuffled.planned_event == plain.planned_event
    assert shuffled.strategy.public_cohort == plain.strategy.public_cohort == 0
    with pytest.raises(ValueError, match="shuffle permutes side information"):
        so_config(tmp_path, "so_tag", "so_tag_logreg", name="adadps", precondition={"shuffle": True})


def test_ema_averaging_survives_a_resume(tiny_emnist_dir, tmp_path):
    strategy = {"model_average": {"kind": "ema", "decay": 0.5}}
    whole = tiny_config(tiny_emnist_dir, tmp_path / "whole", rounds=3, strategy=strategy)
    _run(whole)
    part = tiny_config(tiny_emnist_dir, tmp_path / "part", rounds=3, strategy=strategy)
    experiment = build_experiment(part)

    class Stop(Exception):
        pass

    def stop_after_two(record):
        if record["round"] == 1:
            raise Stop

    with pytest.raises(Stop):
        run_in_process(experiment, RunDirectory(part.output_dir / part.name), on_round=stop_after_two)
    _run(part)
    assert _records(part)[-1]["avg_eval_accuracy"] == _records(whole)[-1]["avg_eval_accuracy"]


def test_token_frequency_adadps_on_stackoverflow_tags(tiny_emnist_dir, tmp_path):
    cfg = so_config(tmp_path, "so_tag", "so_tag_logreg", name="adadps",
                    precondition={"source": "token_frequency", "placement": "client"})
    experiment = build_experiment(cfg)
    params = {k: v.detach() for k, v in experiment.new_model().named_parameters()}
    a = experiment.strategy.payloads(experiment.strategy.init(params))["preconditioner"]
    words = a[registry.model("so_tag_logreg").bag_of_words_weight]
    assert words.shape[1] == experiment.train.num_features and torch.equal(a["0.bias"], torch.ones_like(a["0.bias"]))
    floor = torch.tensor(cfg.strategy.precondition.floor, dtype=words.dtype)  # the floor as the weights hold it
    assert bool(words.min() >= floor) and float(words.max()) > 1.0
    result = run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name))
    assert 0.0 <= result.final_metrics["eval_recall_at_5"] <= 1.0
    with pytest.raises(ValueError, match="so_tag_logreg"):
        build_experiment(tiny_config(tiny_emnist_dir, tmp_path, strategy={
            "name": "adadps", "precondition": {"source": "token_frequency"}}))


def test_the_papers_top_k_side_information_reaches_the_clients(tmp_path):
    """profile top_k from the config to the clients' A: the dataset's 3 most frequent vocabulary words at 1, every
    other word at 1/50, the bias at 1."""
    cfg = so_config(tmp_path, "so_tag", "so_tag_logreg", name="adadps",
                    precondition={"source": "token_frequency", "placement": "client", "profile": "top_k",
                                  "frequent_words": 3, "rare_scale": 50.0})
    experiment = build_experiment(cfg)
    params = {k: v.detach() for k, v in experiment.new_model().named_parameters()}
    a = experiment.strategy.payloads(experiment.strategy.init(params))["preconditioner"]
    words = a[registry.model("so_tag_logreg").bag_of_words_weight][0]
    assert int((words == 1.0).sum()) == 3 and torch.allclose(words[words != 1.0], torch.tensor(1 / 50))
    assert torch.equal(a["0.bias"], torch.ones_like(a["0.bias"]))
