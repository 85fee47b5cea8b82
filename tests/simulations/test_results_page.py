"""The results page (simulations/reproductions/results_page.py): built from the claims.json records found under a
runs folder, with every claim's verdict and statistics beside the paper's figure, the tables and figures copied
beside the page, and the seed papers without a record listed as missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fedpub.simulations.reproductions.judge import RULE, ClaimJudgement, welch_difference
from fedpub.simulations.reproductions.results_page import main
from fedpub.simulations.reproductions.results_record import (
    ClaimRecord,
    ReproductionRecord,
    read_claims_json,
    write_claims_json,
)


def _record(folder: Path, name: str, seed_paper: str, better: list[float], paper_figure: str,
            quick: bool = False) -> None:
    judged = ClaimJudgement((welch_difference("ε=1", better, [0.50, 0.51, 0.52]),), paper_effect=0.02)
    (folder / "plots").mkdir(parents=True)
    (folder / "compare.md").write_text(f"# table of {name}\n")
    (folder / "plots" / "acc.png").write_bytes(b"\x89PNG not really")
    write_claims_json(folder, ReproductionRecord(
        name=name, seed_paper=seed_paper, title=f"title {name}", paper=f"paper {name}", command=f"python -m {name}",
        quick=quick, seeds=3, wall_time_s=90.0, tuning=f"tuning {name}", rule=RULE,
        claims=(ClaimRecord.of(f"A beats B in {name}", "a", "b", judged, paper_figure),),
        tables=("compare.md",), figures=("plots/acc.png",),
    ))


def test_the_page_is_built_from_every_claims_json_with_statistics_and_copied_assets(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "docs" / "results.md"
    _record(runs / "dope_table7", "dope_table7", "003", [0.80, 0.81, 0.82], "84.7 vs 82.2 %")
    _record(runs / "adadps_stackoverflow", "adadps_stackoverflow", "002", [0.49, 0.53, 0.51], "+5 points")
    assert main(["--runs", str(runs), "--out", str(out), "--note", "seed 000 runs on another branch"]) == out
    page = out.read_text()
    assert page.index("Seed 002") < page.index("Seed 003")  # by seed paper
    assert ("| 003 | dope_table7 | A beats B in dope_table7 | **supports (power 46% at the paper's effect: the effect "
            "seen is not the paper's size)** | ε=1: +0.3000 [+0.2773, +0.3227] (paper's effect +0.02) | 46% | 1 of 1 "
            "cells testable | 84.7 vs 82.2 % |") in page
    assert ("| 002 | adadps_stackoverflow | A beats B in adadps_stackoverflow | **inconclusive (power 19% at the "
            "paper's effect)** |") in page and "| +5 points |" in page
    assert "0.8100 ± 0.0058 (n=3)" in page  # the judge's statistics, from the sentence
    assert "tuning dope_table7" in page and "python -m adadps_stackoverflow" in page and "90 s" in page
    assert "![plots/acc.png](results/dope_table7/plots/acc.png)" in page
    assert (out.parent / "results" / "dope_table7" / "plots" / "acc.png").is_file()
    assert (out.parent / "results" / "adadps_stackoverflow" / "compare.md").read_text() == "# table of adadps_stackoverflow\n"
    assert "**Missing:**" in page and "000, 001, 004" in page and "seed 000 runs on another branch" in page


def test_two_records_of_one_reproduction_are_refused(tmp_path):
    _record(tmp_path / "a", "dope_table7", "003", [0.8, 0.81, 0.82], "x")
    _record(tmp_path / "b", "dope_table7", "003", [0.8, 0.81, 0.82], "x")
    with pytest.raises(ValueError, match="more than one full claims.json"):
        main(["--runs", str(tmp_path), "--out", str(tmp_path / "results.md")])


def test_a_regeneration_keeps_the_committed_records_until_the_runs_have_a_better_one(tmp_path):
    out = tmp_path / "docs" / "results.md"
    first, second = tmp_path / "first", tmp_path / "second"
    _record(first / "dope_table7", "dope_table7", "003", [0.80, 0.81, 0.82], "full dope")
    _record(first / "adadps_stackoverflow", "adadps_stackoverflow", "002", [0.80, 0.81, 0.82], "full adadps")
    main(["--runs", str(first), "--out", str(out)])
    assert (out.parent / "results" / "dope_table7" / "claims.json").is_file()

    # the runs are gone; a quick run of one reproduction and a full run of the other are new
    _record(second / "quick" / "dope_table7", "dope_table7", "003", [0.50, 0.51, 0.52], "quick dope", quick=True)
    _record(second / "adadps_stackoverflow", "adadps_stackoverflow", "002", [0.49, 0.50, 0.51], "new adadps")
    main(["--runs", str(second), "--out", str(out)])
    page = out.read_text()
    assert "| 003 | dope_table7 | A beats B in dope_table7 | **supports (power" in page and "| full dope |" in page
    assert "new adadps" in page and "full adadps" not in page  # a new full run replaces the committed one
    assert (out.parent / "results" / "dope_table7" / "plots" / "acc.png").is_file()  # its figure kept with it
    assert not (out.parent / "results.new").exists() and not (out.parent / "results.old").exists()

    # with nothing under the runs the page is the same
    before = page
    main(["--runs", str(tmp_path / "none"), "--out", str(out)])
    assert out.read_text().replace(str(tmp_path / "none"), "RUNS") == before.replace(str(second), "RUNS")


def test_of_a_full_and_a_quick_run_of_one_reproduction_the_full_one_is_shown(tmp_path):
    _record(tmp_path / "runs" / "dope_table7", "dope_table7", "003", [0.80, 0.81, 0.82], "full")
    _record(tmp_path / "runs" / "quick" / "dope_table7", "dope_table7", "003", [0.5, 0.5, 0.5], "quick", quick=True)
    main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "results.md")])
    page = (tmp_path / "results.md").read_text()
    assert "| full |" in page and "| quick |" not in page and "dope_table7 (quick)" not in page


def test_a_reading_is_shown_only_beside_the_run_it_was_written_for(tmp_path):
    runs, out, readings = tmp_path / "runs", tmp_path / "docs" / "results.md", tmp_path / "readings.yaml"
    _record(runs / "dope_table7", "dope_table7", "003", [0.80, 0.81, 0.82], "x")
    _record(runs / "adadps_stackoverflow", "adadps_stackoverflow", "002", [0.49, 0.53, 0.51], "y")
    readings.write_text("dope_table7:\n  run: python -m dope_table7 (3 seeds)\n  reading: Prefer DOPE here.\n"
                        "adadps_stackoverflow:\n  run: python -m adadps_stackoverflow --seeds 9 (9 seeds)\n"
                        "  reading: An old run's advice.\n")
    main(["--runs", str(runs), "--out", str(out), "--readings", str(readings)])
    page = out.read_text()
    assert "*For a user choosing a strategy:* Prefer DOPE here." in page
    assert "An old run's advice" not in page
    assert ("*For a user choosing a strategy:* none for this run yet (the one written was for "
            "`python -m adadps_stackoverflow --seeds 9 (9 seeds)`).") in page
    readings.write_text("dope_table7:\n  reading: no run named\n")
    with pytest.raises(ValueError, match="exactly the keys run and reading; not so for \\['dope_table7'\\]"):
        main(["--runs", str(runs), "--out", str(out), "--readings", str(readings)])


def test_a_record_judged_under_an_earlier_rule_is_marked_with_that_rule(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "docs" / "results.md"
    _record(runs / "dope_table7", "dope_table7", "003", [0.80, 0.81, 0.82], "84.7 vs 82.2 %")
    main(["--runs", str(runs), "--out", str(out)])
    assert "†" not in out.read_text()
    path = runs / "dope_table7" / "claims.json"
    write_claims_json(path.parent, dataclasses.replace(read_claims_json(path), rule="the rule of issue 36"))
    main(["--runs", str(runs), "--out", str(out)])
    page = out.read_text()
    assert "| 003 | dope_table7 | A beats B in dope_table7 | **supports (power" in page and "size) †** |" in page
    assert "*Judged under an earlier rule* (†: its outcomes carry that rule's meaning" in page
    assert "): the rule of issue 36" in page and "† Judged under an earlier rule of the judge" in page
