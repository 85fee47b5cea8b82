"""Tuning of the reproductions (simulations/reproductions/tuning.py) and their claims.json records
(results_record.py): a grid whose edges grow toward an optimum outside it, a flag when they cannot grow enough,
the budget counted once per point, and a record that round-trips and refuses a broken schema."""

from __future__ import annotations

import dataclasses
import math

import pytest

from fedpub.simulations.reproductions.judge import RULE, ClaimJudgement, welch_difference
from fedpub.simulations.reproductions.results_record import (
    ClaimRecord,
    ReproductionRecord,
    read_claims_json,
    write_claims_json,
)
from fedpub.simulations.reproductions.tuning import (
    Axis,
    Tuning,
    at_low_edge,
    at_point,
    low_edges,
    tune,
    tune_jointly,
)


def _peak(lr_opt: float, clip_opt: float):
    """A validation score peaked at (lr_opt, clip_opt), concave in log lr and in clip; it counts its calls."""
    calls: list[dict[str, float]] = []

    def score(point):
        calls.append(dict(point))
        return -(math.log10(point["lr"] / lr_opt) ** 2) - (point["clip"] - clip_opt) ** 2

    return score, calls


def test_an_axis_whose_best_is_on_the_edge_grows_until_the_optimum_is_inside():
    score, calls = _peak(lr_opt=1.0, clip_opt=1.0)  # lr's optimum is two ×10 steps above the first grid
    tuning = tune([Axis("lr", (0.001, 0.01)), Axis("clip", (0.5, 1.0, 1.5), "linear")], score,
                  higher_is_better=True, max_extensions=3)
    assert tuning.best == {"lr": 1.0, "clip": 1.0}
    assert tuning.grid["lr"] == pytest.approx((0.001, 0.01, 0.1, 1.0, 10.0))
    assert tuning.grid["clip"] == (0.5, 1.0, 1.5)  # clip's best was inside: never extended
    assert tuning.on_edge == () and tuning.extensions == 3
    assert tuning.evaluations == len(calls) == 5 * 3  # each point scored once, the extensions included
    assert len({tuple(sorted(c.items())) for c in calls}) == len(calls)


def test_a_best_still_on_the_edge_after_the_extensions_is_flagged():
    score, calls = _peak(lr_opt=1e6, clip_opt=0.0)  # both optima far outside: lr above, clip below
    tuning = tune([Axis("lr", (0.01, 0.1)), Axis("clip", (3.0, 4.0), "linear")], score,
                  higher_is_better=True, max_extensions=2)
    assert tuning.extensions == 2
    assert tuning.grid["lr"] == pytest.approx((0.01, 0.1, 1.0, 10.0))  # log: ×10 a time, upward
    assert tuning.grid["clip"] == pytest.approx((1.0, 2.0, 3.0, 4.0))  # linear: −1 a time, downward
    assert tuning.best["lr"] == pytest.approx(10.0) and tuning.best["clip"] == 1.0
    assert tuning.on_edge == ("lr", "clip") and tuning.evaluations == len(calls) == 4 * 4
    assert "flagged" in tuning.markdown() and "lr, clip" in tuning.markdown()


def test_lower_is_better_no_extensions_and_a_diverged_point_counts_as_worst():
    losses = {0.1: 1.0, 1.0: math.nan, 10.0: 2.0}  # lr = 1 diverged; lower is better
    tuning = tune([Axis("lr", (0.1, 1.0, 10.0))], lambda p: losses[p["lr"]], higher_is_better=False,
                  max_extensions=0)
    assert tuning.best == {"lr": 0.1} and tuning.best_score == 1.0
    assert tuning.on_edge == ("lr",) and tuning.evaluations == 3 and tuning.extensions == 0


def test_a_single_value_axis_is_held_fixed_and_never_flagged():
    tuning = tune([Axis("clip", (1.0,)), Axis("lr", (0.1, 1.0, 10.0))], lambda p: -abs(p["lr"] - 1.0),
                  higher_is_better=True)
    assert tuning.best == {"clip": 1.0, "lr": 1.0} and tuning.on_edge == () and tuning.evaluations == 3


def test_the_paragraph_names_the_grid_choice_budget_validation_and_epsilon():
    tuning = tune([Axis("lr", (0.1, 1.0, 10.0))], lambda p: -abs(p["lr"] - 1.0), higher_is_better=True)
    text = tuning.markdown()
    for part in ("lr ∈ {0.1, 1, 10}", "lr = 1", "3 grid points evaluated", "validation data", "not counted in ε",
                 "No chosen value is on its grid's edge"):
        assert part in text


@pytest.mark.parametrize(
    ("axis", "message"),
    [
        (lambda: Axis("lr", ()), "at least one value"),
        (lambda: Axis("lr", (1.0, 0.1)), "strictly increasing"),
        (lambda: Axis("lr", (0.0, 1.0)), "positive"),
        (lambda: Axis("lr", (0.1, 1.0), "cubic"), "'log' or 'linear'"),
    ],
)
def test_a_bad_axis_is_refused_naming_it(axis, message):
    with pytest.raises(ValueError, match=message):
        axis()


def _record(**changes) -> ReproductionRecord:
    judged = ClaimJudgement((welch_difference("ε=1", [0.8, 0.81, 0.82], [0.7, 0.71, 0.72]),), paper_effect=0.025)
    record = ReproductionRecord(
        name="dope_table7", seed_paper="003", title="Seed 003", paper="Nasr et al. 2023", command="python -m x",
        quick=True, seeds=3, wall_time_s=1.5, tuning="none", rule=RULE,
        claims=(ClaimRecord.of("A beats B", "a", "b", judged, "84.7 vs 82.2"),),
        tables=("compare.md",), figures=("plots/acc.png",),
    )
    return dataclasses.replace(record, **changes)


def test_a_record_round_trips_through_claims_json(tmp_path):
    record = _record()
    path = write_claims_json(tmp_path, record)
    assert path == tmp_path / "claims.json"
    assert read_claims_json(path) == record
    claim = record.claims[0]
    assert claim.verdict == "supports" and "d = +0.1000" in claim.sentence and claim.power == "64%"
    assert claim.ci.startswith("ε=1: +0.1000 [") and claim.gates == "1 of 1 cells testable"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seed_paper": "7"}, "seed_paper"),
        ({"tables": ("/abs/compare.md",)}, "tables"),
        ({"figures": ("../up.png",)}, "figures"),
    ],
)
def test_a_record_breaking_the_schema_is_refused_naming_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        _record(**changes)
    with pytest.raises(ValueError, match="verdict"):
        ClaimRecord("t", "a", "b", "won", "s", "p", "", "", "")  # not one of the judge's outcomes


def test_a_claims_json_with_an_unknown_field_is_refused(tmp_path):
    path = write_claims_json(tmp_path, _record())
    path.write_text(path.read_text().replace('"quick"', '"quik"'))
    with pytest.raises(ValueError, match="quik"):
        read_claims_json(path)


def test_the_arms_of_a_claim_tune_on_one_union_grid_with_equal_budgets():
    """Issue 45: apart, arm a's lr axis grows upward and b's downward, so they end on different grids and budgets;
    jointly, each extension is made for both, both score every point of the union grid, no point twice."""
    axes = [Axis("lr", (0.01, 0.1)), Axis("clip", (0.5, 1.0, 1.5), "linear")]
    (score_a, calls_a), (score_b, calls_b) = _peak(lr_opt=1.0, clip_opt=1.0), _peak(lr_opt=0.001, clip_opt=1.0)
    apart = [tune(axes, score, higher_is_better=True) for score in (_peak(1.0, 1.0)[0], _peak(0.001, 1.0)[0])]
    assert apart[0].grid["lr"] != apart[1].grid["lr"]
    joint = tune_jointly(axes, {"a": score_a, "b": score_b}, higher_is_better=True, max_extensions=3)
    assert joint["a"].grid == joint["b"].grid and joint["a"].grid["lr"] == pytest.approx((1e-4, 1e-3, 0.01, 0.1, 1.0,
                                                                                          10.0))
    assert joint["a"].best == {"lr": 1.0, "clip": 1.0} and joint["b"].best == {"lr": 0.001, "clip": 1.0}
    assert joint["a"].evaluations == joint["b"].evaluations == 6 * 3
    assert len(calls_a) == len(calls_b) == 18  # each point scored once per arm, never again at a later extension
    assert joint["a"].extensions == joint["b"].extensions == 2


def test_arms_with_different_axes_share_the_grid_of_those_they_have():
    """An arm without the clip axis scores the lr grid alone (no clip value is chosen for it, and a clip it does not
    have never grows the grid), and its lr extensions grow the lr axis of the arm that has both."""
    axes = [Axis("lr", (0.01, 0.1)), Axis("clip", (0.5, 1.0, 1.5), "linear")]
    score_a, calls_a = _peak(lr_opt=1.0, clip_opt=1.0)
    calls_b: list[float] = []

    def score_b(point):
        calls_b.append(point["lr"])
        return -abs(math.log10(point["lr"]) - math.log10(0.001))

    joint = tune_jointly(axes, {"a": score_a, "b": score_b}, higher_is_better=True, max_extensions=3,
                         uses={"b": ("lr",)})
    assert joint["b"].best == {"lr": 0.001} and set(joint["b"].grid) == {"lr"}
    assert joint["a"].grid["lr"] == joint["b"].grid["lr"] == pytest.approx((1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0))
    assert joint["a"].grid["clip"] == (0.5, 1.0, 1.5) and joint["a"].best == {"lr": 1.0, "clip": 1.0}
    assert joint["b"].evaluations == len(calls_b) == 6 and joint["a"].evaluations == 18
    with pytest.raises(ValueError, match="uses"):
        tune_jointly(axes, {"a": score_a}, higher_is_better=True, uses={"a": ("momentum",)})


def test_a_choice_at_the_grids_low_edge_is_named():
    score, _ = _peak(lr_opt=1e-6, clip_opt=1.0)  # the private step wants to be switched off
    tuning = tune([Axis("lr", (0.01, 0.1)), Axis("clip", (0.5, 1.0, 1.5), "linear"), Axis("fixed", (3.0,))], score,
                  higher_is_better=True, max_extensions=1)
    assert tuning.best["lr"] == tuning.grid["lr"][0] == pytest.approx(0.001)
    assert at_low_edge(tuning, ("lr", "clip", "fixed")) == ("lr",)



def test_a_run_at_another_arms_point_reads_its_own_tuning_only_where_that_tuned_the_step():
    def tuned_to(lr: float, name: str = "lr") -> Tuning:
        return tune([Axis(name, (0.01, 0.1, 1.0))], lambda v: -abs(v[name] - lr), higher_is_better=True,
                    max_extensions=0)

    tunings = {("a", "c1"): tuned_to(1.0), ("b", "c1"): tuned_to(0.01),
               (at_point("a", "b"), "c1"): tuned_to(0.1),  # a's step re-tuned at b's point: its own
               (at_point("b", "a"), "c1"): tuned_to(0.01, "λ")}  # another axis tuned at a's step: a's edges
    edges = low_edges(("a", "b", at_point("a", "b"), at_point("b", "a"), at_point("a", "zz")), tunings, "lr")
    assert edges["a"] == {"c1": ()} and edges["b"] == {"c1": ("lr",)}
    assert edges[at_point("a", "b")] == {"c1": ()} and edges[at_point("b", "a")] == {"c1": ()}
    assert at_point("a", "zz") not in edges  # an owner with no tuning: nothing to read
