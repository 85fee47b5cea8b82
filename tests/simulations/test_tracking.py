"""Experiment trackers (the config's ``tracking``) against the real libraries: TensorBoard's event files read back
with its EventAccumulator, an MLflow run in a SQLite store read with MlflowClient, a W&B offline run's transaction
log read record by record. Each gets the released records at their rounds, the config and the final figures, never
a diagnostics key; a missing library is refused naming the field; a resumed run continues the same runs; a
tracker that fails mid-run is dropped with one warning and the run finishes; tracking off changes nothing."""

from __future__ import annotations

import json
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import fedpub
from fedpub.config import ConfigError, TrackingConfig, dump_config, parse_config
from fedpub.simulations.tools.cli import app
from fedpub.simulations.run.session import run_changes
from fedpub.simulations.run.tracking import configured_trackers
from tests.conftest import tiny_config

INSTALL = "pip install 'fedpub[tracking]'"


def _run(data_dir: Path, tmp_path: Path, tracking: dict[str, Any], **kwargs: Any) -> fedpub.Result:
    return fedpub.run(tiny_config(data_dir, tmp_path / "runs", tracking=tracking), **kwargs)


def _diagnostics_keys(result: fedpub.Result) -> set[str]:
    """The keys only diagnostics.jsonl has (cohort_sampled, clipped_fraction, train_loss, wall_time, ...)."""
    keys = set().union(*result.diagnostics) - set().union(*result.metrics)
    assert {"cohort_sampled", "train_loss"} <= keys
    return keys


def _released(result: fedpub.Result) -> dict[str, dict[int, float | str]]:
    """metrics.jsonl's values by key and round."""
    values: dict[str, dict[int, float | str]] = {}
    for record in result.metrics:
        for key, value in record.items():
            if key != "round":
                values.setdefault(key, {})[record["round"]] = value
    return values


def _final(result: fedpub.Result) -> dict[str, float | str]:
    final_metrics = json.loads((result.run_dir / "final_metrics.json").read_text())
    return {f"final/{k}": v for k, v in {**final_metrics, "epsilon": result.epsilon, "delta": result.delta}.items()}


# -- TensorBoard ------------------------------------------------------------------------------------------------


def _tensorboard(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return events


def test_tensorboard_gets_the_released_records_at_their_rounds_and_the_config(tiny_emnist_dir, tmp_path):
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    result = _run(tiny_emnist_dir, tmp_path, {"tensorboard": True})
    events = _tensorboard(result.run_dir)
    scalars = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    texts = {tag: {e.step: e.tensor_proto.string_val[0].decode() for e in events.Tensors(tag)}
             for tag in events.Tags()["tensors"]}
    expected = {**_released(result), **{k: {2: v} for k, v in _final(result).items()}}
    numbers = {k: v for k, v in expected.items() if not isinstance(next(iter(v.values())), str)}
    assert scalars.keys() == numbers.keys()
    for key, by_round in numbers.items():
        assert scalars[key] == pytest.approx(by_round, rel=1e-6), key  # float32 in the event files
    labels = {f"{k}/text_summary": v for k, v in expected.items() if k not in numbers}
    assert texts == labels and "final/evaluated_on/text_summary" in texts
    assert not (scalars.keys() | texts.keys()) & _diagnostics_keys(result)
    # stamped with the round, never the clock: round durations grow with the private realised cohort size
    assert all(e.wall_time == e.step for tag in events.Tags()["scalars"] for e in events.Scalars(tag))
    assert all(e.wall_time == e.step for tag in events.Tags()["tensors"] for e in events.Tensors(tag))
    plugin = HParamsPluginData.FromString(events.SummaryMetadata("_hparams_/session_start_info").plugin_data.content)
    hparams = plugin.session_start_info.hparams
    assert hparams["strategy.clip_norm"].number_value == 0.5 and hparams["name"].string_value == "tiny"
    assert not any(key.startswith("tracking.") for key in hparams)


# -- MLflow -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the module's tests (creating its tables takes a few seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _mlflow_run_id(run_dir: Path) -> str:
    (run_id,) = [v for k, v in json.loads((run_dir / "tracking.json").read_text()).items() if k.startswith("mlflow")]
    return run_id


def test_mlflow_gets_the_config_the_released_records_at_their_rounds_and_the_final_figures(
    tiny_emnist_dir, tmp_path, mlflow_uri
):
    from mlflow.tracking import MlflowClient

    result = _run(tiny_emnist_dir, tmp_path, {"mlflow": {"tracking_uri": mlflow_uri, "experiment": "fedpub-tests"}})
    client = MlflowClient(mlflow_uri)
    run = client.get_run(_mlflow_run_id(result.run_dir))
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny"
    assert client.get_experiment(run.info.experiment_id).name == "fedpub-tests"
    expected = _released(result)
    for key, by_round in expected.items():
        if key == "evaluated_on":
            continue
        history = client.get_metric_history(run.info.run_id, key)
        assert {m.step: m.value for m in history} == pytest.approx(by_round), key
        assert all(m.timestamp == m.step for m in history), key  # the round, never the clock
    final = _final(result)
    numbers = {k for k, v in final.items() if not isinstance(v, str)}
    assert run.data.metrics.keys() == (expected.keys() - {"evaluated_on"}) | numbers
    assert {k: run.data.metrics[k] for k in numbers} == pytest.approx({k: final[k] for k in numbers})
    assert run.data.tags["evaluated_on"] == result.metrics[-1]["evaluated_on"] == final["final/evaluated_on"]
    params = run.data.params
    assert params["strategy.clip_norm"] == "0.5" and params["rounds"] == "3" and params["name"] == "tiny"
    assert not any(key.startswith("tracking.") for key in params)
    reached = run.data.metrics.keys() | params.keys() | run.data.tags.keys()
    assert not reached & _diagnostics_keys(result)


def test_a_tracker_that_fails_mid_run_is_dropped_with_one_warning_and_the_run_finishes(
    tiny_emnist_dir, tmp_path, mlflow_uri
):
    """The MLflow run is deleted after round 0 (a real failure of the real client: it refuses to log to a deleted
    run); TensorBoard, beside it, gets every round."""
    from mlflow.tracking import MlflowClient

    def delete_the_mlflow_run(record: dict[str, Any]) -> None:
        if record["round"] == 0:
            MlflowClient(mlflow_uri).delete_run(_mlflow_run_id(tmp_path / "runs" / "tiny"))

    tracking = {"tensorboard": True, "mlflow": {"tracking_uri": mlflow_uri, "experiment": "fedpub-tests"}}
    with pytest.warns(RuntimeWarning, match=r"tracking\.mlflow failed \(MlflowException: .*deleted.*\); the run goes "
                                            r"on without it") as warned:
        result = _run(tiny_emnist_dir, tmp_path, tracking, on_round=delete_the_mlflow_run)
    assert len([w for w in warned if "tracking." in str(w.message)]) == 1
    assert [r["round"] for r in result.metrics] == [0, 1, 2] and (result.run_dir / "summary.md").is_file()
    assert [e.step for e in _tensorboard(result.run_dir).Scalars("eval_accuracy")] == [0, 1, 2]


# -- Weights & Biases -------------------------------------------------------------------------------------------


def _children() -> list[str]:
    """The names of this process's live child processes."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, ppid = text[text.rindex(")") + 2:].split()[:2]
        if int(ppid) == os.getpid() and state != "Z":
            names.append(text[text.index("(") + 1:text.rindex(")")])
    return names


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """W&B without a network or an account, its own files under ``tmp_path``; its service process is stopped
    (``wandb.teardown``) and checked gone afterwards."""
    import wandb

    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    wandb.teardown()
    assert "wandb-core" not in _children()


def _wandb_records(run_file: Path) -> list[Any]:
    """The records of a W&B run's transaction log (``run-<id>.wandb``: a LevelDB-style log of 32 KiB blocks, each
    chunk a 7-byte header — CRC, length, type — then its bytes; a record is one ``Record`` protobuf)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, block = run_file.read_bytes(), 32768
    assert data[:4] == b":W&B"
    position, pending, records = 7, b"", []
    while position + 7 <= len(data):
        room = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position:position + 7]) if room >= 7 else (0, 0, 0)
        if kind == 0:  # the rest of a block too short for a header, or zero padding
            position += room
            continue
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            records.append(Record.FromString(pending))
            pending = b""
    return records


def _wandb_run(run_dir: Path, offline_dir: str) -> dict[str, Any]:
    """A W&B offline run's id, config, history rows by step and summary, from its transaction log."""
    (run_file,) = (run_dir / "wandb" / offline_dir).glob("run-*.wandb")
    run: dict[str, Any] = {"history": {}, "summary": {}}
    for record in _wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["id"], run["tags"] = record.run.run_id, list(record.run.tags)
            run["config"] = {u.key: json.loads(u.value_json) for u in record.run.config.update}
        elif kind == "history":
            row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
            run["history"][row["_step"]] = {k: v for k, v in row.items() if not k.startswith("_")}
        elif kind == "summary":
            run["summary"] |= {"/".join(u.nested_key) or u.key: json.loads(u.value_json) for u in record.summary.update}
    return run


def _offline_dirs(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))


def test_wandb_offline_gets_the_config_the_released_records_at_their_rounds_and_the_final_figures(
    tiny_emnist_dir, tmp_path, wandb_offline
):
    tracking = {"wandb": {"project": "fedpub-tests", "mode": "offline", "tags": ["tiny"]}}
    with pytest.warns(UserWarning, match="W&B stamps each round's record with the time it arrives"):
        result = _run(tiny_emnist_dir, tmp_path, tracking)  # said at its start: a diagnostic outside DP
    (offline_dir,) = _offline_dirs(result.run_dir)
    run = _wandb_run(result.run_dir, offline_dir)
    assert offline_dir.endswith(run["id"]) and run["tags"] == ["tiny"]
    assert run["config"]["strategy"]["clip_norm"] == 0.5 and "tracking" not in run["config"]
    final = _final(result)
    released = [{k: v for k, v in r.items() if k != "round"} for r in result.metrics]
    assert run["history"] == {0: released[0], 1: released[1], 2: released[2] | final}
    assert {k: run["summary"][k] for k in final} == final
    reached = set().union(*run["history"].values()) | run["summary"].keys() | run["config"].keys()
    assert not reached & _diagnostics_keys(result)


# -- resuming, refusing, off by default -------------------------------------------------------------------------


class _Stop(Exception):
    pass


def test_a_resumed_run_continues_the_same_wandb_and_mlflow_runs_and_may_change_its_tracking(
    tiny_emnist_dir, tmp_path, mlflow_uri, wandb_offline
):
    """Stopped after round 0 (checkpointed), then run again with only ``tracking`` changed (a W&B tag, TensorBoard
    on): resumed, not refused as another config, into the same W&B and MLflow runs; TensorBoard from round 1."""
    from mlflow.tracking import MlflowClient

    def stop(record: dict[str, Any]) -> None:
        raise _Stop

    wandb = {"project": "fedpub-tests", "mode": "offline"}
    mlflow = {"tracking_uri": mlflow_uri, "experiment": "fedpub-tests"}
    with pytest.raises(_Stop):
        _run(tiny_emnist_dir, tmp_path, {"wandb": wandb, "mlflow": mlflow}, on_round=stop)
    run_dir = tmp_path / "runs" / "tiny"
    ids = json.loads((run_dir / "tracking.json").read_text())
    client = MlflowClient(mlflow_uri)
    assert client.get_run(_mlflow_run_id(run_dir)).info.status == "KILLED"

    resumed = _run(tiny_emnist_dir, tmp_path, {"tensorboard": True, "wandb": {**wandb, "tags": ["resumed"]},
                                               "mlflow": mlflow})
    assert [r["round"] for r in resumed.metrics] == [0, 1, 2]
    assert json.loads((run_dir / "tracking.json").read_text()) == ids
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["tracking"]["tensorboard"] is True
    run = client.get_run(_mlflow_run_id(run_dir))
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval_accuracy")] == [0, 1, 2]
    first, second = (_wandb_run(run_dir, d) for d in _offline_dirs(run_dir))
    assert first["id"] == second["id"] and sorted(first["history"]) == [0] and sorted(second["history"]) == [1, 2]
    assert [e.step for e in _tensorboard(run_dir).Scalars("eval_accuracy")] == [1, 2]


def test_only_a_change_of_tracking_keeps_a_run_the_same():
    stored = dump_config(parse_config({}))
    assert run_changes(stored, dump_config(parse_config({"tracking": {"tensorboard": True}}))) == []
    without = yaml.safe_dump({k: v for k, v in yaml.safe_load(stored).items() if k != "tracking"}, sort_keys=False)
    assert run_changes(without, stored) == []  # a run directory written before fedpub had trackers
    assert run_changes(stored, dump_config(parse_config({"rounds": 7, "tracking": {"tensorboard": True}}))) == [
        "rounds"]
    assert run_changes(stored, stored.replace("rounds: 40", "rounds:   40")) == ["its layout"]


@pytest.mark.parametrize(
    ("tracking", "module"),
    [({"tensorboard": True}, "tensorboard"), ({"wandb": {"project": "p"}}, "wandb"),
     ({"mlflow": {"experiment": "e"}}, "mlflow")],
    ids=["tensorboard", "wandb", "mlflow"],
)
def test_a_tracker_whose_library_is_missing_is_refused_before_anything_runs(
    tiny_emnist_dir, tmp_path, monkeypatch, tracking, module
):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail, as when it is not installed
    field = f"tracking.{next(iter(tracking))}"
    with pytest.raises(ConfigError, match=re.escape(f"{field} needs the {module} package: {INSTALL}")):
        _run(tiny_emnist_dir, tmp_path, tracking)
    assert not (tmp_path / "runs").exists()
    config = tmp_path / "exp.yaml"
    config.write_text(dump_config(tiny_config(tiny_emnist_dir, tmp_path / "runs", tracking=tracking)))
    done = CliRunner().invoke(app, ["run", str(config), "--dry-run"])
    assert done.exit_code == 2 and f"error: {field} needs the {module} package: {INSTALL}" in done.output
    assert not (tmp_path / "runs").exists()


def test_tracking_is_off_by_default_and_a_run_without_it_writes_what_it_did(tiny_emnist_dir, tmp_path):
    assert parse_config({}).tracking == TrackingConfig(tensorboard=False, wandb=None, mlflow=None)
    assert configured_trackers(parse_config({}).tracking) == []
    result = fedpub.run(tiny_config(tiny_emnist_dir, tmp_path / "runs"))
    assert sorted(p.name for p in result.run_dir.iterdir()) == [
        "accuracy.png", "checkpoint.pt", "config.yaml", "diagnostics.jsonl", "final_metrics.json", "ledger.json",
        "metrics.jsonl", "summary.md"]
