"""The bad-input matrix (issue 44, item 7): bad inputs across the YAML config, the CLI's options, the Python API, the
table and dict sources, Flower node configs and replies, checkpoints and the scale-out environment, each run as a
user would run it, and each checked the same way:

- the exit code (the ``fedpub`` command through its real entry point, :func:`~fedpub.simulations.tools.cli.main`)
  or the exception type (Python);
- at most five lines printed, no traceback;
- the field, option or file named;
- nothing spent: no ``ledger.json`` and no run directory anywhere under the test's folder;
- no user's data: every example of the planted table holds the value :data:`PLANTED` (and every user id the text
  :data:`PLANTED_ID`), which no output may contain.

A case is one row of :data:`CASES`: how it is run, and the words its message must contain."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from typer.testing import CliRunner

import fedpub
from fedpub.simulations.tools import cli

PLANTED = 31337.25
"""The value planted in every example: printed, it would read 31337."""
PLANTED_ID = "zqxplanted"
"""The text every user id of the planted table starts with."""
USERS, CLASSES = 12, 10
TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}


def planted_table(path: Path) -> Path:
    """A Parquet table of :data:`USERS` users (4 to 6 rows each) in the layout ``data.source: table`` reads, every
    example holding :data:`PLANTED`, with extra columns that each bad case can point a field at."""
    rng = np.random.default_rng(7)
    user = [f"{PLANTED_ID}{u:02d}" for u in range(USERS) for _ in range(4 + u % 3)]
    rows = len(user)
    x = rng.random((rows, 28 * 28)).astype(np.float32)
    x[:, 0] = PLANTED
    label = rng.integers(0, CLASSES, rows)
    public_int = [u % 3 for u in range(USERS) for _ in range(4 + u % 3)]
    table = pa.table({
        "uid": user,
        "pixels": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 28 * 28),
        "pixels_null": pa.array([None if i == 2 else list(row) for i, row in enumerate(x)], pa.list_(pa.float32())),
        "label": label,
        "label_null": pa.array([None if i == 3 else int(v) for i, v in enumerate(label)], pa.int64()),
        "label_text": [f"class {v}" for v in label],
        "label_float": label.astype(np.float64) + 0.5,
        "public_int": public_int,
        "public_text": ["yes" if p else "no" for p in public_int],
        "public_null": pa.array([None if p == 1 else p == 2 for p in public_int], pa.bool_()),
        "public_bool": [p == 2 for p in public_int],
    })
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "part-0.parquet")
    return path


def table_config(root: Path, **sections: Any) -> dict[str, Any]:
    """A valid config over the planted table (an MLP of :data:`CLASSES` outputs, DP-FedAvg, 2 rounds), its run
    directory under ``root / "runs"``; ``sections`` replace or extend its sections (a dict merges one level)."""
    raw: dict[str, Any] = {
        "name": "matrix", "seed": 0, "rounds": 2, "eval_every": 1, "output_dir": str(root / "runs"), "device": "cpu",
        "data": {"source": "table", "path": str(root / "table"), "table": {"user": "uid", "x": "pixels", "y": "label"},
                 "evaluation": {"fraction": 0.3}},
        "model": {"factory": "fedpub.models.emnist:Mlp", "kwargs": {"num_classes": CLASSES}},
        "client": {"epochs": 1, "batch_size": 4, "lr": 0.05, "path": "loop"},
        "strategy": {"name": "dp_fedavg", "clip_norm": 0.5, "noise_multiplier": 0.8,
                     "sampling": {"kind": "poisson", "clients_per_round": 3}},
        "privacy": {"delta": 1e-3},
    }
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


@dataclass(frozen=True)
class Case:
    """One bad input: ``run(root)`` (``root`` holds the planted table under ``table/``) returns what a user saw: the
    exit code or exception, and the text printed or the message."""

    name: str
    run: Callable[[Path], tuple[int | type[BaseException], str]]
    expect: int | type[BaseException]
    names: str
    """A regular expression the output must match: the field, option or file named."""
    marks: tuple[Any, ...] = field(default=())


def fedpub_command(*args: str, env: dict[str, str] | None = None) -> Callable[[Path], tuple[int, str]]:
    """The ``fedpub`` command with ``args`` (``{root}`` in them replaced), through :func:`cli.main` as the installed
    script runs it: its exit code and everything it printed."""

    def run(root: Path) -> tuple[int, str]:
        argv = ["fedpub", *(a.replace("{root}", str(root)) for a in args)]
        environment = {"XDG_STATE_HOME": str(root / "state"), "OMP_WAIT_POLICY": "passive", **(env or {})}
        saved = sys.argv
        sys.argv = argv
        try:
            with CliRunner().isolation(env=environment) as (stdout, stderr, _):
                try:
                    cli.main()
                    code = 0
                except SystemExit as exit:
                    code = exit.code if isinstance(exit.code, int) else 1
                printed = stdout.getvalue().decode() + stderr.getvalue().decode()
        finally:
            sys.argv = saved
        return code, printed

    return run


def run_config(raw: dict[str, Any] | str, *options: str, env: dict[str, str] | None = None
               ) -> Callable[[Path], tuple[int, str]]:
    """``fedpub run CONFIG`` on ``raw`` (a mapping dumped as YAML, or YAML text with ``{root}`` placeholders)."""

    def run(root: Path) -> tuple[int, str]:
        text = raw.replace("{root}", str(root)) if isinstance(raw, str) else yaml.safe_dump(raw, sort_keys=False)
        (root / "config.yaml").write_text(text)
        return fedpub_command("run", str(root / "config.yaml"), *options, env=env)(root)

    return run


def with_table(**sections: Any) -> Callable[[Path], tuple[int, str]]:
    """``fedpub run`` on the planted table's config with ``sections`` changed."""
    return lambda root: run_config(table_config(root, **sections))(root)


def python(call: Callable[[Path], Any]) -> Callable[[Path], tuple[type[BaseException] | int, str]]:
    """``call(root)`` from Python: the type of the exception it raised and its message (0, "" when none)."""

    def run(root: Path) -> tuple[type[BaseException] | int, str]:
        try:
            call(root)
        except Exception as error:  # noqa: BLE001 — what the user sees is what is checked
            return type(error), str(error)
        return 0, ""

    return run


def users(root: Path, **changes: Any) -> dict[Any, tuple[Any, Any]]:
    """The planted table's users as a ``{user_id: (x, y)}`` mapping for ``fedpub.run(data=...)``."""
    g = torch.Generator().manual_seed(0)
    out: dict[Any, tuple[Any, Any]] = {}
    for u in range(USERS):
        x = torch.rand(5, 1, 28, 28, generator=g)
        x[:, 0, 0, 0] = PLANTED
        out[f"{PLANTED_ID}{u:02d}"] = (x, torch.randint(0, CLASSES, (5,), generator=g))
    out.update(changes)
    return out


def run_python_users(data: Callable[[Path], Any], **sections: Any) -> Callable[[Path], Any]:
    def call(root: Path) -> Any:
        raw = table_config(root, data={"source": "python", "evaluation": {"fraction": 0.3}}, **sections)
        return fedpub.run(raw, output_dir=root / "runs", data=data(root))

    return call


CASES: list[Case] = [
    # -- the YAML file -----------------------------------------------------------------------------------------
    Case("yaml_syntax_error", run_config("name: [unclosed\nrounds: 2\n"), 2, r"config\.yaml"),
    Case("yaml_empty_file", run_config(""), 2, r"config\.yaml"),
    Case("yaml_a_list", run_config("- 1\n- 2\n"), 2, r"config\.yaml"),
    Case("yaml_duplicate_key", lambda root: _yaml_with(root, "\nstrategy:\n  noise_multiplier: 0.05\n"), 2,
         r"duplicate key `strategy`"),
    Case("yaml_duplicate_nested_key", lambda root: _yaml_with(root, "", nested="  noise_multiplier: 0.05\n"), 2,
         r"duplicate key `strategy\.noise_multiplier`"),
    Case("noise_multiplier_true", with_table(strategy={"noise_multiplier": True}), 2, r"strategy\.noise_multiplier"),
    Case("clip_norm_yes_text", with_table(strategy={"clip_norm": "yes"}), 2, r"strategy\.clip_norm"),
    Case("preload_one", with_table(data={"preload": 1}), 2, r"data\.preload"),
    Case("tensorboard_text", with_table(tracking={"tensorboard": "yes"}), 2, r"tracking\.tensorboard"),
    Case("name_dot_dot", with_table(name=".."), 2, r"name"),
    Case("name_with_a_separator", with_table(name="../elsewhere"), 2, r"name"),
    Case("rounds_beyond_any_run", with_table(rounds=10**12), 2, r"rounds"),
    Case("table_public_integers", with_table(data={"table": {"user": "uid", "x": "pixels", "public": "public_int"}}),
         2, r"data\.table\.public"),
    Case("table_public_yes_no", with_table(data={"table": {"user": "uid", "x": "pixels", "public": "public_text"}}),
         2, r"data\.table\.public"),
    Case("table_public_with_nulls",
         with_table(data={"table": {"user": "uid", "x": "pixels", "public": "public_null"}}), 2,
         r"data\.table\.public"),
    Case("hub_dataset_offline", lambda root: _offline_hub(root), 2, r"data\.table\.hub 'flwrlabs/femnist'"),
    Case("unknown_top_level_key", with_table(roundz=3), 2, r"roundz"),
    Case("unknown_nested_key", with_table(strategy={"clipnorm": 1.0}), 2, r"strategy\.clipnorm"),
    Case("rounds_zero", with_table(rounds=0), 2, r"rounds"),
    Case("rounds_negative", with_table(rounds=-3), 2, r"rounds"),
    Case("rounds_a_string", with_table(rounds="many"), 2, r"rounds"),
    Case("unknown_recipe", with_table(strategy={"name": "fedsgd"}), 2, r"strategy\.name"),
    Case("negative_clip_norm", with_table(strategy={"clip_norm": -1.0}), 2, r"strategy\.clip_norm"),
    Case("negative_noise", with_table(strategy={"noise_multiplier": -0.5}), 2, r"strategy\.noise_multiplier"),
    Case("both_noise_and_target", with_table(strategy={"target_epsilon": 2.0}), 2, r"target_epsilon|noise_multiplier"),
    Case("delta_one", with_table(privacy={"delta": 1.0}), 2, r"privacy\.delta|δ"),
    Case("delta_above_one_over_n", with_table(privacy={"delta": 0.5}), 2, r"privacy\.delta|δ"),
    Case("unknown_accountant", with_table(privacy={"accountant": "moments"}), 2, r"privacy\.accountant"),
    Case("sampling_rate_above_one",
         with_table(strategy={"sampling": {"kind": "poisson", "sampling_rate": 1.5}}), 2, r"sampling_rate"),
    Case("cohort_above_population",
         with_table(strategy={"sampling": {"kind": "fixed", "clients_per_round": 500}}), 2, r"clients_per_round"),
    Case("unknown_source", with_table(data={"source": "mnist_csv"}), 2, r"data\.source"),
    Case("table_path_missing", with_table(data={"path": "/nonexistent/table"}), 2, r"/nonexistent/table"),
    Case("table_user_column_missing", with_table(data={"table": {"user": "writer", "x": "pixels"}}), 2,
         r"data\.table\.user"),
    Case("unknown_device", with_table(device="tpu:0"), 2, r"device"),
    # -- the model -----------------------------------------------------------------------------------------------
    Case("factory_module_missing", with_table(model={"factory": "no_such_module.models:make", "kwargs": {}}), 2,
         r"model\.factory"),
    Case("factory_not_a_reference", with_table(model={"factory": "not a reference", "kwargs": {}}), 2,
         r"model\.factory"),
    Case("model_name_and_factory", with_table(model={"name": "emnist_small_cnn"}), 2, r"model\.(name|factory)"),
    Case("factory_kwarg_typo", with_table(model={"kwargs": {"num_clases": CLASSES}}), 2, r"model\.kwargs"),
    Case("factory_too_few_outputs", with_table(model={"kwargs": {"num_classes": 5}}), 2, r"model\.factory"),
    Case("factory_of_a_non_module", lambda root: _own_factory(root, "def make():\n    return 'not a model'\n"), 2,
         r"model\.factory"),
    Case("factory_that_raises", lambda root: _own_factory(root, "def make():\n    raise TypeError('no')\n"), 2,
         r"model\.factory"),
    Case("factory_of_another_input", lambda root: _own_factory(
        root, "import torch\ndef make():\n    return torch.nn.Linear(3, 10)\n"), 2, r"model\.factory"),
    Case("label_column_with_a_null", with_table(data={"table": {"user": "uid", "x": "pixels", "y": "label_null"}}),
         2, r"data\.table\.y 'label_null' .* 1 null value"),
    Case("x_column_with_a_null", with_table(data={"table": {"user": "uid", "x": "pixels_null", "y": "label"}}), 2,
         r"data\.table\.x 'pixels_null' .* 1 null value"),
    Case("label_column_of_text", with_table(data={"table": {"user": "uid", "x": "pixels", "y": "label_text"}}), 2,
         r"data\.table\.y|label_text"),
    Case("label_column_of_floats", with_table(data={"table": {"user": "uid", "x": "pixels", "y": "label_float"}}),
         2, r"data\.table\.y|label_float"),
    Case("python_ids_colliding_as_text",
         python(run_python_users(lambda root: {**users(root), 1: users(root)[f"{PLANTED_ID}00"],
                                               "1": users(root)[f"{PLANTED_ID}01"]})), ValueError, r"data|ids?"),
    Case("python_float_labels",
         python(run_python_users(lambda root: users(root, **{f"{PLANTED_ID}00": (torch.rand(5, 1, 28, 28),
                                                                              torch.rand(5))}))), ValueError,
         r"label|y"),
    Case("python_user_without_examples",
         python(run_python_users(lambda root: users(root, **{f"{PLANTED_ID}00": (torch.rand(0, 1, 28, 28),
                                                                              torch.zeros(0, dtype=torch.long))}))),
         ValueError, r"no examples|without examples|0 examples|empty"),
    # -- evaluation: "test" only of examples no training touched -----------------------------------------------
    Case("eval_public_without_test_split",
         with_table(data={"public": {"fraction": 0.25}, "eval_users": "public"}), 2, r"data\.eval_users `public`"),
    Case("eval_all_without_test_split", with_table(data={"eval_users": "all"}), 2, r"data\.eval_users `all`"),
    Case("no_evaluation_user_held_out", with_table(data={"evaluation": {"fraction": 0.01}}), 2,
         r"data\.evaluation\.fraction"),
    # -- the CLI's options ----------------------------------------------------------------------------------------
    Case("unknown_backend", lambda root: run_config(table_config(root), "--backend", "ray")(root), 2, r"--backend"),
    Case("set_without_equals", lambda root: run_config(table_config(root), "--set", "rounds")(root), 2, r"--set|KEY"),
    Case("set_unknown_key", lambda root: run_config(table_config(root), "--set", "strategy.nois=1")(root), 2,
         r"strategy\.nois"),
    Case("set_bad_value", lambda root: run_config(table_config(root), "--set", "rounds=[1, 2")(root), 2,
         r"--set|rounds"),
    Case("config_file_missing", fedpub_command("run", "{root}/absent.yaml"), 2, r"absent\.yaml"),
    Case("account_q_above_one", fedpub_command("account", "-T", "10", "-z", "1.0", "--q", "1.5"), 2, r"q|sampling"),
    Case("account_q_and_population",
         fedpub_command("account", "-T", "10", "-z", "1.0", "--q", "0.1", "--population", "100", "--cohort", "10"),
         2, r"--q.*--population|--population.*--q"),
    Case("calibrate_negative_epsilon", fedpub_command("calibrate", "-e", "-1", "-T", "10", "--q", "0.1"), 2,
         r"epsilon|ε|-e"),
    Case("flower_backend_under_torchrun",
         lambda root: run_config(table_config(root), "--backend", "flower", env=TORCHRUN)(root), 2, r"torchrun"),
    Case("opendp_under_torchrun",
         lambda root: run_config(table_config(root, privacy={"noise_sampler": "opendp", "randomness": "secret"}),
                                 env=TORCHRUN)(root), 2, r"privacy\.noise_sampler"),
    Case("torchrun_restarts",
         lambda root: run_config(table_config(root), env={**TORCHRUN, "TORCHELASTIC_MAX_RESTARTS": "2"})(root), 2,
         r"--max-restarts"),
    Case("torchrun_partial_environment", lambda root: run_config(table_config(root), env={"RANK": "0"})(root), 2,
         r"WORLD_SIZE"),
    Case("data_verify_missing_path", fedpub_command("data", "verify", "{root}/nothing"), 2, r"nothing"),
    Case("report_missing_run", fedpub_command("report", "{root}/no_run"), 2, r"no_run"),
    # -- the Python API -------------------------------------------------------------------------------------------
    Case("python_config_of_wrong_type", python(lambda root: fedpub.run(42)), TypeError, r"config"),
    Case("python_unknown_backend",
         python(lambda root: fedpub.run(table_config(root), backend="threads")), ValueError, r"backend"),
    Case("python_data_with_table_source",
         python(lambda root: fedpub.run(table_config(root), data=users(root))), ValueError, r"data\.source"),
    Case("python_model_lambda",
         python(lambda root: fedpub.run(table_config(root), model=lambda: torch.nn.Linear(2, 2))), ValueError,
         r"top level"),
    Case("python_data_not_a_mapping",
         python(run_python_users(lambda root: [1, 2, 3])), TypeError, r"fedpub\.run\(data=\.\.\.\)"),
    Case("python_data_without_users", python(run_python_users(lambda root: {})), ValueError, r"no users"),
    Case("python_labels_2d",
         python(run_python_users(lambda root: users(root, **{f"{PLANTED_ID}00": (torch.rand(5, 1, 28, 28),
                                                                              torch.zeros(5, 2, dtype=torch.long))}))),
         ValueError, r"labels|\(N,\)"),
    Case("strategy_public_nodes_text", python(lambda root: _from_config(public_nodes="false")), TypeError,
         r"public_nodes="),
    Case("strategy_diagnostics_text", python(lambda root: _from_config(diagnostics="off")), TypeError,
         r"diagnostics="),
    Case("strategy_unknown_recipe", python(lambda root: _from_config(strategy={"name": "fedsgd"})), ValueError,
         r"strategy\.name|name"),
    Case("strategy_private_ids_mismatch", python(lambda root: _from_config(private_ids=["a", "b"])), ValueError,
         r"private_ids"),
    # -- Flower node configs and replies --------------------------------------------------------------------------
    Case("node_public_flag_yes", python(lambda root: _privacy_flag("yes")), ValueError, r"public"),
    Case("node_public_flag_one", python(lambda root: _privacy_flag(1)), ValueError, r"public"),
    Case("node_public_flag_none", python(lambda root: _privacy_flag(None)), ValueError, r"public"),
    Case("reply_payloads_a_string", python(lambda root: _name_list("preconditioner")), ValueError,
         r"payloads"),
    Case("reply_payloads_repeated", python(lambda root: _name_list(["a", "a"])), ValueError, r"payloads"),
]


def _yaml_with(root: Path, after: str, nested: str = "") -> tuple[int, str]:
    """``fedpub run`` on the planted table's config written as YAML text with ``after`` appended and ``nested``
    inserted at the end of its ``strategy`` section: a key given twice."""
    text = yaml.safe_dump(table_config(root), sort_keys=False)
    if nested:
        head, _, tail = text.partition("privacy:")
        text = head + nested + "privacy:" + tail
    return run_config(text + after)(root)


def _offline_hub(root: Path) -> tuple[int, str]:
    """``femnist_hf.yaml``'s data by its Hub name on a machine without the Hub: Hugging Face's offline mode (set on
    its libraries, which read the environment once, when first imported)."""
    import datasets.config
    import huggingface_hub.constants

    offline = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        table = {"hub": "flwrlabs/femnist", "user": "writer_id", "x": "image", "y": "character"}
        return run_config(table_config(root, data={"source": "huggingface", "table": table}))(root)
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = offline


def _own_factory(root: Path, source: str) -> tuple[int, str]:
    """``fedpub run`` with ``model.factory: mymodels:make``, the module written in the current folder (``root``)."""
    (root / "mymodels.py").write_text(source)
    return run_config(table_config(root, model={"factory": "mymodels:make", "kwargs": {}}))(root)


def _from_config(strategy: dict[str, Any] | None = None, **options: Any) -> Any:
    from fedpub.strategies.flower import FedpubStrategy

    recipe = {"name": "dp_fedavg", "clip_norm": 1.0, "noise_multiplier": 1.0,
              "sampling": {"kind": "poisson", "sampling_rate": 0.5}, **(strategy or {})}
    return FedpubStrategy.from_config(recipe, population=4, rounds=2, seed=0, **options)


def _privacy_flag(value: object) -> bool:
    from fedpub.flags import privacy_flag

    return privacy_flag(value, key="public", source="node 7's node config")


def _name_list(value: object) -> tuple[str, ...]:
    from fedpub.flags import name_list

    return name_list(value, key="payloads", source="a reply of node 7")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The case's folder, also the current one (a default ``output_dir`` lands there), holding the planted table."""
    planted_table(tmp_path / "table")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks) for c in CASES])
def test_a_bad_input_is_refused_in_a_few_lines_naming_it_with_nothing_spent_and_no_data(case: Case, root: Path):
    got, printed = case.run(root)
    if isinstance(case.expect, int):
        assert got == case.expect, printed
    else:
        assert isinstance(got, type) and issubclass(got, case.expect), (got, printed)
    lines = printed.strip().splitlines()
    assert 1 <= len(lines) <= 5, printed
    assert "Traceback" not in printed, printed
    assert re.search(case.names, printed), printed
    assert "31337" not in printed and PLANTED_ID not in printed, printed
    spent = sorted(str(p.relative_to(root)) for p in root.rglob("ledger.json"))
    assert spent == [] and not (root / "runs").exists(), spent


def test_the_matrix_holds_at_least_sixty_bad_inputs():
    assert len(CASES) >= 60 and len({c.name for c in CASES}) == len(CASES)


def test_the_planted_table_is_valid_and_runs(root: Path):
    """The controls: the planted table itself runs (so every case's refusal is its one change's), and the marker
    check can fail (the planted value is in the data a user's error could print)."""
    result = fedpub.run(table_config(root), output_dir=root / "runs")
    assert result.rounds_done == 2 and result.epsilon > 0
    x = pq.read_table(root / "table" / "part-0.parquet").column("pixels").to_pylist()
    assert all(row[0] == PLANTED for row in x)
