"""The results page (simulations/reproductions/results_page.py): built from the claims.json records found under a
runs folder, with every claim's verdict and statistics beside the paper's figure, the tables and figures copied
beside the page, and the seed papers without a record listed as missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpub.simulations.reproductions.judge import ClaimJudgement, judge_cell
from fedpub.simulations.reproductions.results_page import main
from fedpub.simulations.reproductions.results_record import ClaimRecord, ReproductionRecord, write_claims_json


def _record(folder: Path, name: str, seed_paper: str, better: list[float], paper_figure: str) -> None:
    judged = ClaimJudgement((judge_cell("ε=1", better, [0.50, 0.51, 0.52]),))
    (folder / "plots").mkdir(parents=True)
    (folder / "compare.md").write_text(f"# table of {name}\n")
    (folder / "plots" / "acc.png").write_bytes(b"\x89PNG not really")
    write_claims_json(folder, ReproductionRecord(
        name=name, seed_paper=seed_paper, title=f"title {name}", paper=f"paper {name}", command=f"python -m {name}",
        quick=False, seeds=3, wall_time_s=90.0, tuning=f"tuning {name}",
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
    assert "| 003 | dope_table7 | A beats B in dope_table7 | **reproduced** | 84.7 vs 82.2 % |" in page
    assert "| 002 | adadps_stackoverflow | A beats B in adadps_stackoverflow | **not reproduced** | +5 points |" in page
    assert "0.8100 ± 0.0058 (n=3)" in page  # the judge's statistics, from the sentence
    assert "tuning dope_table7" in page and "python -m adadps_stackoverflow" in page and "90 s" in page
    assert "![plots/acc.png](results/dope_table7/plots/acc.png)" in page
    assert (out.parent / "results" / "dope_table7" / "plots" / "acc.png").is_file()
    assert (out.parent / "results" / "adadps_stackoverflow" / "compare.md").read_text() == "# table of adadps_stackoverflow\n"
    assert "**Missing:**" in page and "000, 001, 004" in page and "seed 000 runs on another branch" in page


def test_two_records_of_one_reproduction_are_refused(tmp_path):
    _record(tmp_path / "a", "dope_table7", "003", [0.8, 0.81, 0.82], "x")
    _record(tmp_path / "b", "dope_table7", "003", [0.8, 0.81, 0.82], "x")
    with pytest.raises(ValueError, match="more than one claims.json"):
        main(["--runs", str(tmp_path), "--out", str(tmp_path / "results.md")])
