"""No NaN or Inf is ever released (issue 44, item 4): every recipe's short in-process run, and a PPSGD run whose
public updates are all refused (the round has no public norm), leave run files whose every number is finite. Each
file of the run directory is read as a user would read it: JSON and JSON-lines parsed (a NaN or Infinity token
fails the parse), YAML loaded, the Markdown summary scanned for the words nan and inf."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedpub.recipe_registry import RECIPE_NAMES
from fedpub.round_driver import PublicUpdateRefused
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

PUBLIC = {"public": {"fraction": 0.25, "seed": 0}}
NEEDS_PUBLIC = {"dope", "adadps", "pdp", "pda_dpmd", "ppsgd"}
PRIVACY = {"delta": 1e-5, "budget_epsilon": 100.0}  # PPSGD's schedule spends faster as it goes: a budget bounds it
OWN = {"pdp": {"projection": {"k": 2}}, "dp_ftrl": {"sampling": {"kind": "epoch_blocks", "clients_per_round": 4}}}
ACCOUNTANT = {"dp_ftrl": {"accountant": "rdp"}}  # tree aggregation is priced by RDP only


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"a non-finite number {token} was released")


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def non_finite_in(run_dir: Path) -> list[str]:
    """The files of ``run_dir`` holding a number that is not finite (NaN, ±Inf), with what was found."""
    found = []
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace") if path.suffix in (".json", ".jsonl", ".yaml", ".md") else ""
        try:
            if path.suffix == ".json":
                values = [json.loads(text, parse_constant=_refuse_constant)]
            elif path.suffix == ".jsonl":
                values = [json.loads(line, parse_constant=_refuse_constant) for line in text.splitlines() if line]
            elif path.suffix == ".yaml":
                values = [yaml.safe_load(text)]
            elif path.suffix == ".md":
                values = [re.findall(r"(?<![\w.])-?(?:nan|inf)(?![\w])", text, flags=re.IGNORECASE)]
                if values[0]:
                    found.append(f"{path.name}: {values[0]}")
                continue
            else:
                continue
        except ValueError as error:
            found.append(f"{path.name}: {error}")
            continue
        bad = [n for n in _numbers(values) if not math.isfinite(n)]
        if bad:
            found.append(f"{path.name}: {bad[:3]}")
    return found


@pytest.mark.parametrize("recipe", RECIPE_NAMES)
def test_no_recipe_releases_a_number_that_is_not_finite(tiny_emnist_dir, tmp_path, recipe):
    strategy = {"name": recipe, **({"public_clients_per_round": 2} if recipe in NEEDS_PUBLIC else {}),
                **OWN.get(recipe, {})}
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, data=PUBLIC, strategy=strategy,
                      privacy={**PRIVACY, **ACCOUNTANT.get(recipe, {})})
    run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name))
    assert non_finite_in(cfg.output_dir / cfg.name) == []


def test_ppsgd_whose_public_updates_are_all_refused_releases_no_nan(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, data=PUBLIC, privacy=PRIVACY,
                      strategy={"name": "ppsgd", "public_clients_per_round": 2})
    experiment = build_experiment(cfg)
    refusing = dataclasses.replace(experiment, strategy=dataclasses.replace(experiment.strategy,
                                                                            public_update_bound=1e-30))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_in_process(refusing, RunDirectory(cfg.output_dir / cfg.name))
    assert any(issubclass(w.category, PublicUpdateRefused) and "none of the 2 sampled public users" in str(w.message)
               for w in caught)  # the case under test happened
    assert non_finite_in(cfg.output_dir / cfg.name) == []


def test_the_scan_finds_a_planted_nan(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"round": 0, "x": NaN}\n')
    (tmp_path / "summary.md").write_text("| ε | inf |\n")
    assert len(non_finite_in(tmp_path)) == 2
