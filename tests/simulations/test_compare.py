"""``fedpub compare`` and ``fedpub report`` end to end: real 2-round runs on the tiny synthetic data."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from fedpub.config import ConfigError, dump_config
from fedpub.simulations.tools import compare
from fedpub.simulations.tools.cli import app
from fedpub.simulations.tools.compare import load_sweep, run_sweep
from fedpub.simulations.tools.compare_report import read_csv
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

runner = CliRunner()
# Fixed-size cohorts are accounted with RDP only: calibration and ledgers take a fraction of a second.
SPEEDY = {"rounds": 2, "eval_every": 1, "checkpoint_every": 2, "model": {"name": "emnist_mlp"},
          "strategy": {"sampling": {"kind": "fixed", "clients_per_round": 4}},
          "privacy": {"delta": 1e-5, "accountant": "rdp"}}
ADAM = {"strategy": {"server_optimizer": {"name": "adam", "lr": 0.01}}}


def _sweep_file(folder: Path, data_dir: Path, strategies: dict, epsilons=(2.0, 8.0), seeds=(0, 1), **base) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.yaml").write_text(dump_config(tiny_config(data_dir, folder / "runs", **{**SPEEDY, **base})))
    sweep = {"base": "base.yaml", "name": "cmp", "epsilons": list(epsilons), "seeds": list(seeds),
             "strategies": strategies}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    return folder / "sweep.yaml"


def _quiet() -> Console:
    return Console(file=io.StringIO())


@pytest.fixture(scope="module")
def swept(tiny_emnist_dir, tmp_path_factory):
    """A finished 2 strategies × 2 ε × 2 seeds sweep (8 runs)."""
    folder = tmp_path_factory.mktemp("sweep")
    path = _sweep_file(folder, tiny_emnist_dir, {"dp_fedavg": {}, "dp_fedadam": ADAM})
    with pytest.MonkeyPatch.context() as mp:  # the autouse per-test cache fixture does not reach module fixtures
        mp.setenv("FEDPUB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fedpub_cache"))
        result = run_sweep(load_sweep(path), console=_quiet())
    assert result.failures == []
    return path, folder / "runs" / "cmp"


def _table(markdown: str) -> dict[tuple[str, str], list[str]]:
    """The (strategy, ε) rows of compare.md's main table (not the paired section after it)."""
    main = markdown.split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in main.splitlines() if line.startswith("| ")]
    return {(r[0], r[1]): r[2:] for r in rows[1:]}


def test_the_sweep_merges_each_strategy_over_the_base(swept):
    sweep = load_sweep(swept[0])
    assert [r.config.name for r in sweep.runs[:2]] == ["dp_fedavg__eps2__seed0", "dp_fedavg__eps2__seed1"]
    adam = sweep.runs[-1]
    assert (adam.label, adam.target_epsilon, adam.seed) == ("dp_fedadam", 8.0, 1)
    strategy = adam.config.strategy
    assert strategy.server_optimizer.name == "adam" and strategy.clip_norm == 0.5  # override + base kept
    assert strategy.target_epsilon == 8.0 and strategy.noise_multiplier is None
    assert adam.config.output_dir == swept[1] / "runs" and adam.config.seed == 1


def test_the_sweep_writes_a_row_per_run_and_mean_and_std_over_seeds(swept):
    _, root = swept
    rows = read_csv(root / "compare.csv")
    assert list(rows[0]) == ["strategy", "target_epsilon", "seed", "epsilon", "delta", "noise_multiplier",
                             "rounds_done", "evaluated_on", "eval_accuracy", "eval_loss"]  # no diagnostic
    assert {r["evaluated_on"] for r in rows} == {"private users' test examples (not covered by DP)"}
    assert [(r["strategy"], r["target_epsilon"], r["seed"]) for r in rows] == [
        (s, e, seed) for s in ("dp_fedavg", "dp_fedadam") for e in (2.0, 8.0) for seed in (0, 1)
    ]
    for row in rows:
        run = root / "runs" / f"{row['strategy']}__eps{row['target_epsilon']:g}__seed{row['seed']}"
        assert row["epsilon"] == json.loads((run / "ledger.json").read_text())["epsilon"] <= row["target_epsilon"]
        assert row["rounds_done"] == 2 and row["delta"] == 1e-5 and row["noise_multiplier"] > 0
    table_md = (root / "compare.md").read_text()
    table = _table(table_md)
    assert list(table) == [(s, e) for s in ("dp_fedavg", "dp_fedadam") for e in ("2", "8")]
    for (label, epsilon), cells in table.items():
        group = [r for r in rows if r["strategy"] == label and r["target_epsilon"] == float(epsilon)]
        for cell, key in zip(cells, ("eval_accuracy", "eval_loss")):
            values = [r[key] for r in group]
            assert cell == f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"
        assert cells[2:] == [f"{group[0]['epsilon']:.4g}", f"{group[0]['noise_multiplier']:.4g}", "2"]
    assert "Hyper-parameter tuning is not counted in ε." in table_md and "δ = 1e-05" in table_md
    assert "Evaluated on private users' test examples (not covered by DP)." in table_md
    assert "wall" not in table_md.lower()  # diagnostics stay in each run's diagnostics.jsonl
    assert "## Against `dp_fedavg`, paired by seed" in table_md and "| dp_fedadam | 8 |" in table_md
    for plot in ("accuracy_vs_epsilon.png", "accuracy_vs_round.png"):
        assert (root / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerunning_a_finished_sweep_runs_nothing(swept):
    path, root = swept
    metrics = sorted((root / "runs").glob("*/metrics.jsonl"))
    before = [os.stat(m).st_mtime_ns for m in metrics]
    result = runner.invoke(app, ["compare", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("recorded, skipped") == 8 and "started" not in result.output
    assert [os.stat(m).st_mtime_ns for m in metrics] == before


def test_report_over_the_run_dirs_reproduces_the_sweep_table(swept, tmp_path):
    _, root = swept
    result = runner.invoke(app, ["report", *map(str, sorted((root / "runs").iterdir())), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert _table((tmp_path / "compare.md").read_text()) == _table((root / "compare.md").read_text())
    key = lambda r: (r["strategy"], r["target_epsilon"], r["seed"])  # noqa: E731
    assert sorted(read_csv(tmp_path / "compare.csv"), key=key) == sorted(read_csv(root / "compare.csv"), key=key)
    assert (tmp_path / "accuracy_vs_round.png").exists()


def test_report_labels_a_run_not_named_by_a_sweep_with_its_strategy(swept, tmp_path):
    run = shutil.copytree(swept[1] / "runs" / "dp_fedadam__eps8__seed0", tmp_path / "mine")
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "name": "mine"}))
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert list(_table((tmp_path / "compare.md").read_text())) == [("dp_fedavg", "8")]


def test_an_interrupted_sweep_resumes_and_skips_the_finished_runs(tiny_emnist_dir, tmp_path, monkeypatch):
    path = _sweep_file(tmp_path, tiny_emnist_dir, {"dp_fedavg": {}}, epsilons=[8.0], checkpoint_every=1)
    real = compare.run_experiment

    def interrupt_seed_one(experiment, backend, **kwargs):
        def stop(record):
            raise KeyboardInterrupt
        return real(experiment, backend, **{**kwargs, **({"on_round": stop} if experiment.config.seed == 1 else {})})

    monkeypatch.setattr(compare, "run_experiment", interrupt_seed_one)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(load_sweep(path), console=_quiet())
    monkeypatch.undo()
    root = tmp_path / "runs" / "cmp"
    assert [r["seed"] for r in read_csv(root / "compare.csv")] == [0]
    finished, cut = (root / f"runs/dp_fedavg__eps8__seed{seed}/metrics.jsonl" for seed in (0, 1))
    finished_mtime, first_round = os.stat(finished).st_mtime_ns, cut.read_text().splitlines()[0]

    console = _quiet()
    assert run_sweep(load_sweep(path), console=console).failures == []
    assert "seed 0: recorded, skipped" in console.file.getvalue()
    assert os.stat(finished).st_mtime_ns == finished_mtime
    lines = cut.read_text().splitlines()
    assert lines[0] == first_round and [json.loads(line)["round"] for line in lines] == [0, 1]  # resumed
    assert [r["seed"] for r in read_csv(root / "compare.csv")] == [0, 1]


def test_a_failed_run_is_reported_the_others_finish_and_the_exit_code_says_so(tiny_emnist_dir, tmp_path):
    broken = {"data": {"source": "emnist_h5", "path": str(tmp_path / "nowhere")}}
    path = _sweep_file(tmp_path, tiny_emnist_dir, {"broken": broken, "ok": {}}, epsilons=[8.0], seeds=[0])
    result = runner.invoke(app, ["compare", str(path)])
    assert result.exit_code == 1
    assert "1 of 2 runs failed" in result.output and "broken ε=8 seed 0:" in result.output
    assert "fed_emnist_digitsonly_train.h5" in result.output
    rows = read_csv(tmp_path / "runs" / "cmp" / "compare.csv")
    assert [r["strategy"] for r in rows] == ["ok"]
    again = runner.invoke(app, ["compare", str(path), "--fresh"])  # the recorded run starts over too
    assert again.exit_code == 1 and "ok ε=8 seed 0: started" in again.output and "skipped" not in again.output


@pytest.mark.parametrize(
    ("sweep", "expected"),
    [
        ({"epsilon": [1.0]}, "unknown key `epsilon`"),
        ({"strategies": {"dp": {"strategy": {"clip_nrm": 1}}}}, "strategies.dp over the inline base"),
        ({"strategies": {"dp": {"strategy": {"clip_nrm": 1}}}}, "unknown key `strategy.clip_nrm`"),
        ({"strategies": {"a__b": {}}}, "field `strategies`"),
        ({"epsilons": []}, "field `epsilons`"),
        ({"base": "missing.yaml"}, "field `base`: cannot read"),
    ],
)
def test_a_bad_sweep_file_names_the_field(tmp_path, sweep, expected):
    valid = {"base": {"strategy": {"sampling": {"clients_per_round": 4}}}, "epsilons": [1.0], "seeds": [0],
             "strategies": {"dp": {}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({**valid, **sweep}))
    with pytest.raises(ConfigError, match="sweep.yaml") as error:
        load_sweep(tmp_path / "sweep.yaml")
    assert expected in str(error.value)
    result = runner.invoke(app, ["compare", str(tmp_path / "sweep.yaml")])
    assert result.exit_code == 2 and expected in result.output


@pytest.mark.extended  # ~35 s: the sweep runs in process in the suite
def test_a_sweep_on_flower_simulation_records_the_in_process_results(tiny_emnist_dir, tmp_path, one_torch_thread):
    """``fedpub compare --backend flower``: DOPE (public users in the ServerApp's pool) runs on Flower simulation
    and its row holds the in-process run's ε and final metrics."""
    strategies = {"dope": {"strategy": {"name": "dope", "public_clients_per_round": 2}}}
    extra = {"data": {"public": {"fraction": 0.25, "seed": 0}},
             "flower": {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}}
    rows = {}
    for backend in ("inprocess", "flower"):
        path = _sweep_file(tmp_path / backend, tiny_emnist_dir, strategies, epsilons=(4.0,), seeds=(0,), **extra)
        result = runner.invoke(app, ["compare", str(path), "--backend", backend])
        assert result.exit_code == 0, result.output
        assert f"(backend {backend})" in result.output
        [rows[backend]] = read_csv(tmp_path / backend / "runs" / "cmp" / "compare.csv")
    for column in ("epsilon", "noise_multiplier", "rounds_done", "eval_accuracy", "eval_loss"):
        assert rows["flower"][column] == pytest.approx(rows["inprocess"][column], rel=1e-4), column


def test_an_unknown_backend_is_refused_naming_the_allowed_ones(tmp_path):
    result = runner.invoke(app, ["compare", str(tmp_path / "missing.yaml"), "--backend", "ray"])
    assert result.exit_code != 0 and "inprocess, flower" in result.output


def test_report_names_a_missing_run_and_says_when_runs_differ_in_data_or_rounds(swept, tmp_path):
    missing = runner.invoke(app, ["report", str(tmp_path / "nonexistent")])
    assert missing.exit_code != 0 and "nonexistent does not exist" in missing.output
    run = shutil.copytree(swept[1] / "runs" / "dp_fedadam__eps8__seed0", tmp_path / "longer")
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "rounds": 7}))
    result = runner.invoke(app, ["report", str(run), str(swept[1] / "runs" / "dp_fedavg__eps8__seed0"),
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "The runs differ in their data or rounds" in (tmp_path / "compare.md").read_text()
    assert "7 rounds" in (tmp_path / "compare.md").read_text()


def test_compare_md_pairs_each_strategy_with_the_first_by_seed():
    """The paired section: per-seed differences against the first strategy, their t interval and the seeds ahead,
    only over the seeds both ran; a strategy alone gives no section."""
    from fedpub.simulations.tools.compare_report import ComparedRun, paired_table

    def run(label: str, seed: int, accuracy: float) -> ComparedRun:
        return ComparedRun({"strategy": label, "target_epsilon": 2.0, "seed": seed, "epsilon": 2.0, "delta": 1e-5,
                            "noise_multiplier": 1.0, "eval_accuracy": accuracy}, [], "accuracy")

    runs = [run("base", s, a) for s, a in enumerate([0.50, 0.60, 0.70])]
    runs += [run("new", s, a) for s, a in enumerate([0.52, 0.63, 0.71, 0.99])]  # seed 3: no partner, left out
    table = paired_table(runs)
    diffs = [0.02, 0.03, 0.01]
    half = 4.302652729911275 * statistics.stdev(diffs) / math.sqrt(3)  # t(0.975, 2)
    assert f"| new | 2 | +0.0200 | [{0.02 - half:+.4f}, {0.02 + half:+.4f}] | 3 of 3 |" in table
    assert paired_table(runs[:3]) == ""
