"""SecAgg+ as a transport over the round driver's two halves (``simulations/flower/secagg_dp.py``).

Fast: the device's contribution is the in-process per-user map of the same user over C_t; the quantisation cannot
wrap and its error stays under one level per user; what SecAgg+ cannot run is refused by name. Slow (real Flower
simulation, real Ray, real dp-accounting): each recipe it runs gives the in-process model and ledger, and the secure
sum is the plain sum of the users' mapped updates within the stated quantisation bound; and DOPE with a public user
runs on a real SuperLink and SuperNodes."""

from __future__ import annotations

import dataclasses
import json
import sys

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, Metadata, RecordDict
from dp_accounting.rdp import rdp_privacy_accountant
from typer.testing import CliRunner

import fedpub
from fedpub import recipe_registry
from fedpub.clients.client_app import runtime, train_user
from fedpub.clients.public_training import PooledPublicTrainer
from fedpub import protocol as key
from fedpub.config import dump_config, parse_config
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from fedpub.models.seeded import model_params
from fedpub.run_phases import RunPhases
from fedpub.steps.project import project_onto
from fedpub.strategy import usable_rows
from fedpub.simulations.flower.deploy.flwr_cli import flwr_run
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import VENV_BIN
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.tools.cli import app
from fedpub.simulations.flower.secagg_dp import (
    RunOptions,
    SecAggRound,
    check_supported,
    contribution,
    decode_payloads,
    decode_values,
    device_chain,
    encode_payloads,
    encode_values,
    public_train_reply,
    quantisation_for,
    round_clip_norm,
    run_secagg_simulation,
    tally_names,
)
from tests.conftest import tiny_config

PUBLIC = {"public": {"fraction": 0.25, "seed": 0}}  # 4 of the 16 writers are public: N = 12
FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}
FIXED = {"sampling": {"kind": "fixed", "clients_per_round": 3}}
ADAPTIVE = {"adaptive_clip": {"target_quantile": 0.5, "learning_rate": 0.2, "count_noise_std": 2.0}}
RECIPES = {  # every part whose per-user map runs on the device, each at least once
    "dope+adaptive_clip": {"name": "dope", "public_clients_per_round": 2, **ADAPTIVE},
    "adadps_server+budget_schedule": {"name": "adadps", "public_clients_per_round": 2,
                                      "precondition": {"placement": "server"},
                                      "budget_schedule": {"boosted_rounds": 1, "boosted_noise_multiplier": 0.6}},
    "ppsgd": {"name": "ppsgd", "public_clients_per_round": 2,
              "public_schedule": {"budget_growth": 1.0, "noise_test_factor": 1e-9},
              "model_reuse": {"epochs": 1, "prox_weight": 0.5}},
    "dp_ftrl+recenter": {"name": "dp_ftrl", "public_clients_per_round": 2, "recenter": {},
                         "sampling": {"kind": "epoch_blocks", "clients_per_round": 4}},
    "pdp": {"name": "pdp", "public_clients_per_round": 2, "projection": {"k": 2, "noise_space": "subspace"}},
    # banded MF's noise step after the secure sum, b = 2 on cyclic fixed-size cohorts: 3 of one of 2 groups a round
    "dope+banded_mf_b2": {"name": "dope", "public_clients_per_round": 2,
                          "sampling": {"kind": "cyclic_fixed", "clients_per_round": 3, "groups": 2},
                          "noise": {"kind": "banded_mf", "bands": 2, "factorization": "bsr"}},
}
PRIVACY = {"ppsgd": {"budget_epsilon": 100.0}}


def _config(data_dir, out_dir, recipe, flower=FLOWER):
    return tiny_config(data_dir, out_dir, rounds=3, data=PUBLIC, strategy={**FIXED, **RECIPES[recipe]},
                       flower=flower, privacy={"delta": 1e-5, "accountant": "rdp", **PRIVACY.get(recipe, {})})


def test_the_device_contribution_is_the_in_process_per_user_map_over_c(tiny_emnist_dir, tmp_path):
    """DOPE with adaptive clipping, round 0: the values a device is sent (encoded as the TRAIN config carries them)
    give, on the device's own chain, the in-process per-user map of the user's update divided by C_t, and the
    unclipped bit as its tally."""
    config = _config(tiny_emnist_dir, tmp_path, "dope+adaptive_clip")
    experiment = build_experiment(config)
    core, params = experiment.strategy, model_params(experiment.new_model())
    rt = runtime(config)
    public = {c: dict(train_user(rt, c, params, 0, public=True).update) for c in experiment.public_ids[:2]}
    prep = core.prepare_round(params, core.init(params), 0, sampled=3, public_updates=list(public.values()))
    values = {n: prep.chain.values[n] for n, s in core.aggregator.steps if s.user and s.user.apply}
    assert set(values) == {"recenter", "clip"} and float(torch.cat(
        [v.flatten() for v in values["recenter"]["center"].values()]).norm()) > 0
    sent = decode_values(encode_values(values))
    chain = device_chain(config, core.population, experiment.noise_multiplier)
    names = tally_names(core.aggregator, values, params)
    assert names == ["clip/unclipped"]
    c = round_clip_norm(values)
    for cid in experiment.private_ids[:3]:
        update = dict(train_user(rt, cid, params, 0).update)
        mine = contribution(chain, update, params, sent, names)
        expected = core.per_user(usable_rows([update], params), prep)
        for k, v in expected.updates.stacked().items():
            torch.testing.assert_close(mine.scaled_update[k] * c, v[0].double(), rtol=0, atol=1e-7)
        assert mine.tallies == expected.tally_sums()
    payloads = {"preconditioner": {k: torch.rand(v.shape) for k, v in params.items()}}
    decoded = decode_payloads(encode_payloads(payloads))
    assert all(torch.equal(decoded["preconditioner"][k], v) for k, v in payloads["preconditioner"].items())


def test_a_device_projects_onto_the_public_basis_it_is_sent_and_passes_a_round_without_one(tiny_emnist_dir,
                                                                                          tmp_path):
    """Public-subspace projection, round 0: the basis V travels in the TRAIN config (r = 2 directions, by parameter
    name), and the device's map is the in-process projection then clip, over C_t; a round whose public users gave
    nothing sends no basis (None) and the device leaves the update unprojected, as in process."""
    config = _config(tiny_emnist_dir, tmp_path, "pdp")
    experiment = build_experiment(config)
    core, params = experiment.strategy, model_params(experiment.new_model())
    rt = runtime(config)
    public = [dict(train_user(rt, c, params, 0, public=True).update) for c in experiment.public_ids[:2]]
    chain = device_chain(config, core.population, experiment.noise_multiplier)
    updates = [dict(train_user(rt, c, params, 0).update) for c in experiment.private_ids[:3]]
    for public_updates, rank in ((public, 2), ([], 0)):
        prep = core.prepare_round(params, core.init(params), 0, sampled=3, public_updates=public_updates)
        values = {n: prep.chain.values[n] for n, s in core.aggregator.steps if s.user and s.user.apply}
        sent = decode_values(encode_values(values))
        basis = sent["project"]["basis"]
        assert (basis is None) if rank == 0 else all(len(v) == rank for v in basis.values())
        c = round_clip_norm(values)
        for update in updates:
            mine = contribution(chain, update, params, sent, tally_names(core.aggregator, values, params))
            expected = core.per_user(usable_rows([update], params), prep)
            for k, v in expected.updates.stacked().items():
                torch.testing.assert_close(mine.scaled_update[k] * c, v[0].double(), rtol=0, atol=1e-7)
        if rank:  # the projected update lies in span(V): projecting it again changes nothing
            row = {k: v * c for k, v in mine.scaled_update.items()}
            again = project_onto({k: v.float() for k, v in row.items()}, basis)
            for k in row:
                torch.testing.assert_close(again[k].double(), row[k], rtol=0, atol=1e-6)


def test_a_device_refuses_an_update_its_maps_leave_above_c(tiny_emnist_dir, tmp_path):
    config = _config(tiny_emnist_dir, tmp_path, "dope+adaptive_clip")
    experiment = build_experiment(config)
    params = model_params(experiment.new_model())
    chain = device_chain(config, experiment.strategy.population, experiment.noise_multiplier)
    zero = {k: torch.zeros_like(v) for k, v in params.items()}
    nan = {**zero, next(iter(zero)): torch.full_like(next(iter(zero.values())), float("nan"))}
    values = {"recenter": {"center": zero}, "clip": {"clip_norm": 0.5}}
    with pytest.raises(ValueError, match="not finite"):
        contribution(chain, nan, params, values, ["clip/unclipped"])
    with pytest.raises(ValueError, match="the server expects"):
        contribution(chain, zero, params, values, [])
    with pytest.raises(ValueError, match="no finite clip norm"):
        contribution(chain, zero, params, {"recenter": {"center": zero}, "clip": {"clip_norm": float("inf")}},
                     ["clip/unclipped"])


@pytest.mark.parametrize("cohort", [2, 3, 50])
def test_quantisation_range_keeps_m_extreme_replies_from_wrapping_within_one_level_each(cohort):
    """Flower's own quantise → sum mod M → dequantise, as the workflow does it, without the masks (they cancel): m
    replies at the extremes ±1 sum to ±m within m levels (the stated bound); twice that T would wrap."""
    from flwr.common.secure_aggregation.ndarrays_arithmetic import parameters_mod
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    q = quantisation_for(cohort)

    def secure_sum(q_range):
        reply = [np.array([1.0, -1.0, 0.0, 0.3141592653589793])]
        total = sum(quantize(reply, q.clipping_range, q_range)[0].astype(np.int64) for _ in range(cohort))
        [recovered] = dequantize(parameters_mod([total], q.modulus_range), q.clipping_range, q_range)
        return recovered - (cohort - 1) * q.clipping_range

    expected = np.array([cohort, -cohort, 0.0, cohort * 0.3141592653589793])
    assert cohort * q.quantization_range < q.modulus_range
    error = np.abs(secure_sum(q.quantization_range) - expected).max()
    assert error <= q.max_sum_error(cohort)
    assert q.max_sum_error(cohort, 0.5) == pytest.approx(0.5 * cohort * 2 / q.quantization_range)
    if 2 * q.quantization_range < 2**31:  # (the clients' rounding casts to int32)
        assert 2 * q.quantization_range * cohort >= q.modulus_range
        assert not np.allclose(secure_sum(2 * q.quantization_range), expected)


def test_what_secagg_cannot_run_is_refused_by_name(tiny_emnist_dir, tmp_path, monkeypatch):
    poisson = tiny_config(tiny_emnist_dir, tmp_path, strategy={"sampling": {"kind": "poisson", "clients_per_round": 2}})
    with pytest.raises(ValueError, match="sampling.kind: fixed"):
        check_supported(poisson)
    banded = tiny_config(tiny_emnist_dir, tmp_path, strategy={
        "sampling": {"kind": "cyclic_poisson", "clients_per_round": 2, "groups": 2},
        "noise": {"kind": "banded_mf", "bands": 2}})
    with pytest.raises(ValueError, match="sampling.kind: fixed .cyclic_fixed in place of cyclic_poisson"):
        check_supported(banded)
    check_supported(_config(tiny_emnist_dir, tmp_path, "dope+banded_mf_b2"))  # its fixed-size form runs
    preloaded = _config(tiny_emnist_dir, tmp_path, "dope+adaptive_clip").model_dump(mode="json")
    with pytest.raises(ValueError, match="data.preload: false"):
        check_supported(parse_config({**preloaded, "data": {**preloaded["data"], "preload": True}}))
    check_supported(_config(tiny_emnist_dir, tmp_path, "dope+adaptive_clip"))
    tracked = _config(tiny_emnist_dir, tmp_path, "dope+adaptive_clip").model_dump(mode="json")
    check_supported(parse_config({**tracked, "tracking": {"tensorboard": True}}))  # the run session reports
    plain = Message(RecordDict({key.ARRAYS: ArrayRecord(), key.CONFIG: ConfigRecord(
        {key.ROUND: 0, key.CLIENT_ID: "f0000_00", key.PUBLIC: False})}), metadata=Metadata(
        run_id=1, message_id="m", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="", created_at=0.0,
        ttl=60.0, message_type=MessageType.TRAIN))
    with pytest.raises(ValueError, match="is private: its update goes only through SecAgg"):
        public_train_reply(plain, None, parse_config(tracked))  # a private user never replies in the clear
    server_only = tuple(dataclasses.replace(p, transports=("in_process",)) if p.section == "recenter" else p
                        for p in recipe_registry.PARTS)
    monkeypatch.setattr(recipe_registry, "PARTS", server_only)  # a part whose per-user map no device runs
    with pytest.raises(ValueError, match=r"does not run strategy.recenter \(transport `flower_secagg`"):
        check_supported(_config(tiny_emnist_dir, tmp_path, "dope+adaptive_clip"))


def test_fedpub_run_with_backend_secagg_refuses_what_secagg_cannot_run_before_reading_data(tiny_emnist_dir,
                                                                                           tmp_path):
    poisson = tmp_path / "poisson.yaml"
    poisson.write_text(dump_config(tiny_config(tiny_emnist_dir / "absent", tmp_path / "runs")))
    result = CliRunner().invoke(app, ["run", str(poisson), "--backend", "secagg"])
    assert result.exit_code == 2 and "strategy.sampling.kind: fixed" in result.output, result.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "absent").exists()
    with pytest.raises(ValueError, match="sampling.kind: fixed"):
        fedpub.run(tiny_config(tiny_emnist_dir, tmp_path / "api"), backend="secagg")


@pytest.mark.slow
def test_fedpub_run_with_backend_secagg_releases_the_in_process_run(tiny_emnist_dir, tmp_path, one_torch_thread):
    """The user's way in: ``fedpub.run(config, backend="secagg")`` runs the SecAgg+ transport (2 rounds of
    DP-FedAvg, 3 users a round) and gives the in-process run's ledger and model; each round's record reaches
    ``on_round``."""
    def config(where):
        return tiny_config(tiny_emnist_dir, tmp_path / where, rounds=2, strategy=FIXED, flower=FLOWER,
                           privacy={"delta": 1e-5, "accountant": "rdp"})

    local = fedpub.run(config("local"))
    records: list[dict] = []
    secure = fedpub.run(config("secagg"), backend="secagg", on_round=records.append)
    assert [r["round"] for r in records] == [0, 1] and secure.epsilon == pytest.approx(local.epsilon)
    assert json.loads((secure.run_dir / "ledger.json").read_text()) == json.loads(
        (local.run_dir / "ledger.json").read_text())
    for k, v in local.model.state_dict().items():
        torch.testing.assert_close(secure.model.state_dict()[k], v, rtol=1e-5, atol=1e-6)


def _last_private_model(root):
    """The last round's global model w_T (the checkpoint's: before any model reuse)."""
    return torch.load(root / "checkpoint.pt", weights_only=True)["params"]


def _records(root):
    return [json.loads(x) for x in (root / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("recipe, public_users", [  # the suite runs DOPE + adaptive clipping; -m extended the rest
    ("dope+adaptive_clip", "server"),
    *(pytest.param(r, "server", marks=pytest.mark.extended) for r in RECIPES if r != "dope+adaptive_clip"),
    pytest.param("dope+adaptive_clip", "nodes", marks=pytest.mark.extended),
])
def test_every_recipe_with_secagg_gives_the_in_process_model_and_ledger(tiny_emnist_dir, tmp_path, recipe,
                                                                        public_users, one_torch_thread):
    """3 rounds, 3 private users a round (DP-FTRL: blocks of 4), 2 public users trained in the server's pool or on
    their own nodes (outside SecAgg+): the secure sum of each round is the plain sum of the survivors' mapped updates
    within k·2·C_t/T, and the run (its run directory, ledger, released records, last global model) is the in-process
    run's up to float32 rounding; its released model is the run phase (model reuse) of that model."""
    local_cfg, secure_cfg = (_config(tiny_emnist_dir, tmp_path / where, recipe,
                                     flower={**FLOWER, "public_users": public_users})
                             for where in ("local", "secagg"))
    local = run_in_process(build_experiment(local_cfg), RunDirectory(local_cfg.output_dir / local_cfg.name))
    rounds: list[SecAggRound] = []
    remote = run_secagg_simulation(secure_cfg, RunOptions(on_round=rounds.append))
    assert remote.rounds_done == local.rounds_done == 3 and [r.round for r in rounds] == [0, 1, 2]
    experiment = build_experiment(secure_cfg)
    assert [r.cohort for r in rounds] == [experiment.strategy.sample_cohort(experiment.private_ids, t)
                                          for t in range(3)]  # the cohort rule's users (cyclic: one group a round)
    local_dir, secure_dir = local.run_dir.root, remote.run_dir.root
    private_model = _last_private_model(secure_dir)
    for k, v in _last_private_model(local_dir).items():
        torch.testing.assert_close(private_model[k], v, rtol=1e-5, atol=1e-6)
    # the released model: the in-process run phase on the SecAgg+ run's own w_T (PPSGD's model reuse trains a
    # noisy model for an epoch, which can grow the secure sum's 1e-9 rounding into 1e-4 differences)
    trainer = PooledPublicTrainer(experiment.new_model(), experiment.public_data, experiment.public_ids,
                                  experiment.task, secure_cfg.seed)
    released, _ = RunPhases.from_config(secure_cfg.strategy).after_rounds(private_model, trainer)
    for k, v in released.items():
        torch.testing.assert_close(remote.params[k], v, rtol=0, atol=1e-7)
    assert json.loads((secure_dir / "ledger.json").read_text()) == json.loads((local_dir / "ledger.json").read_text())
    records, secure_records = _records(local_dir), _records(secure_dir)
    for name in ("public_cohort_used", "noise/noise_multiplier", "epsilon", "clip/clip_norm"):
        assert [r.get(name) for r in secure_records] == [r.get(name) for r in records], name
    reused = "model_reuse" in RECIPES[recipe]  # the released model's own metrics: of the model checked above
    final = {k: v for k, v in local.final_metrics.items() if not (reused and k.startswith("eval_"))}
    assert {k: remote.final_metrics[k] for k in final} == pytest.approx(final, rel=1e-4)
    assert (secure_dir / "checkpoint.pt").exists() and (secure_dir / "summary.md").exists()
    if RECIPES[recipe].get("public_clients_per_round"):
        assert all(r["public_cohort_used"] == 2 for r in secure_records)  # the public users really took part

    # the round-0 secure sum against the plain sum of the same users' mapped updates (the device's own code)
    core, params, rt = experiment.strategy, model_params(experiment.new_model()), runtime(secure_cfg)
    first = rounds[0]
    public = [dict(train_user(rt, c, params, 0, public=True).update)
              for c in core.sample_public_cohort(experiment.public_ids, 0)]
    prep = core.prepare_round(params, core.init(params), 0, sampled=len(first.cohort), public_updates=public)
    mapped = core.per_user(usable_rows([dict(train_user(rt, c, params, 0).update) for c in first.cohort], params),
                           prep)
    plain = {k: v.double().sum(dim=0) for k, v in mapped.updates.stacked().items()}
    error = max(float((first.secure_sum[k] - plain[k]).abs().max()) for k in plain)
    bound = quantisation_for(len(first.cohort)).max_sum_error(first.survivors, first.clip_norm)
    print(f"\n{recipe}: round 0 secure sum vs plain sum, max |error| {error:.3g} (bound k·2·C_t/T = {bound:.3g})")
    assert error <= bound
    assert first.tallies == pytest.approx(mapped.tally_sums(), abs=quantisation_for(len(first.cohort)).max_sum_error(
        first.survivors))


SECAGG_APP = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedpub-secagg"
version = "0.1.0"
dependencies = ["fedpub"]

[tool.flwr.app]
publisher = "fedpub"

[tool.flwr.app.components]
serverapp = "fedpub.simulations.flower.secagg_dp:server_app"
clientapp = "fedpub.simulations.flower.secagg_dp:client_app"

[tool.flwr.app.config]
config = "{config}"
"""


@pytest.mark.slow
@pytest.mark.extended  # ~2.5 min of real processes: -m extended
@pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX-only")
@pytest.mark.skipif(not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed")
def test_dope_with_public_users_on_a_real_superlink_with_secagg(tmp_path):
    """A real SuperLink and 4 ``flower-supernode`` processes (one per writer; f0000_01 is public, N = 3), ``flwr run``
    of an app whose components are this transport's: 2 rounds of DOPE, 2 private users a round summed by SecAgg+, the
    public user trained in the server's pool (its node is never sent a TRAIN message); the run directory is written
    as any deployment's (secret seed, no diagnostics) and ε is dp-accounting's for fixed-size sampling."""
    users = {"num_writers": 4, "min_examples": 6, "max_examples": 12, "seed": 1}
    write_synthetic_emnist(tmp_path / "data", SyntheticEmnistSpec(**users))
    config = tiny_config(
        tmp_path / "data", tmp_path / "runs", rounds=2, data={"synthetic": users, "eval_clients": 3,
                                                             "public": {"fraction": 0.25, "seed": 0}},
        strategy={"name": "dope", "public_clients_per_round": 1, "noise_multiplier": 1.0,
                  "sampling": {"kind": "fixed", "clients_per_round": 2}},
        privacy={"delta": 1e-5, "accountant": "rdp"}, flower={"node_wait_timeout": 60, "round_timeout": 120},
    )
    config_path = tmp_path / "exp.yaml"
    config_path.write_text(dump_config(config))
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "pyproject.toml").write_text(SECAGG_APP.format(config=config_path.resolve()))
    users_in_order = list(build_experiment(config).train.client_ids)
    deployment = LocalDeployment(tmp_path / "deploy", num_nodes=len(users_in_order), cwd=tmp_path)
    with deployment:
        result = flwr_run(deployment.registry, config_path, env=deployment.cli_env, app_dir=app_dir,
                          log_path=deployment.logs / "flwr-run.log", timeout=300, echo=False, cwd=tmp_path)
    assert result.returncode == 0 and result.status == "finished:completed", result.output[-3000:]
    assert "Secure aggregation completed" in result.output or "SecAgg+" in result.output, result.output[-3000:]
    root = config.output_dir / config.name
    records = _records(root)
    assert [r["round"] for r in records] == [0, 1]
    assert [r["public_cohort_used"] for r in records] == [1, 1]
    assert all(r["recenter/center_norm"] > 0 for r in records)
    assert json.loads((root / "ledger.json").read_text())["randomness"].startswith("secret")
    assert not (root / "diagnostics.jsonl").exists() and (root / "checkpoint.pt").exists()
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    round_event = dp_event.SampledWithoutReplacementDpEvent(3, 2, dp_event.GaussianDpEvent(0.5))
    accountant.compose(dp_event.SelfComposedDpEvent(round_event, 2))
    assert records[-1]["epsilon"] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    public_node = users_in_order.index("f0000_01")
    public_log = (deployment.logs / f"supernode-{public_node}.log").read_text(errors="replace")
    assert "Receiving: train message" not in public_log, public_log[-3000:]


class _Stop(Exception):
    """Stops a run after a released round (as a crash of the ServerApp would)."""


@pytest.mark.slow
@pytest.mark.extended  # the in-process and Flower resumes run in the suite
def test_a_secagg_run_stopped_after_a_round_resumes_from_its_checkpoint(tiny_emnist_dir, tmp_path, one_torch_thread):
    """DOPE with adaptive clipping (its C_t and count-noise generator in the checkpointed state): the ServerApp dies
    after round 0 was released; running the config again resumes at round 1 and ends at the in-process model."""
    local_cfg, secure_cfg = (_config(tiny_emnist_dir, tmp_path / where, "dope+adaptive_clip")
                             for where in ("local", "secagg"))

    def stop(outcome: SecAggRound) -> None:
        raise _Stop(f"stopped after round {outcome.round}")

    with pytest.raises(_Stop, match="stopped after round 0"):
        run_secagg_simulation(secure_cfg, RunOptions(on_round=stop))
    root = secure_cfg.output_dir / secure_cfg.name
    assert torch.load(root / "checkpoint.pt", weights_only=False)["rounds_done"] == 1
    rounds: list[SecAggRound] = []
    remote = run_secagg_simulation(secure_cfg, RunOptions(on_round=rounds.append))
    assert [r.round for r in rounds] == [1, 2] and remote.rounds_done == 3
    local = run_in_process(build_experiment(local_cfg), RunDirectory(local_cfg.output_dir / local_cfg.name))
    for k in local.params:
        torch.testing.assert_close(remote.params[k], local.params[k], rtol=1e-5, atol=1e-6)
    assert [r["round"] for r in _records(root)] == [0, 1, 2]
    assert json.loads((root / "ledger.json").read_text()) == json.loads(
        (local.run_dir.root / "ledger.json").read_text())
