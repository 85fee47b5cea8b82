"""Seed 003 (Nasr et al. 2023, "Effectively using public data in privacy preserving machine learning"), DOPE-SGD's
recentering on a CPU mechanism proxy (fedpub issue 45, item 5, 003): Table 7's arms in federated form on federated
mean estimation, where a run takes milliseconds, beside the decisive CNN run that needs a GPU (:mod:`.dope_table7`).

**The proxy.** Every user u has an optimum θ_u = θ* + s·ξ_u/√D (‖θ*‖ = 1, ξ_u standard normal in D dimensions, so
users disagree by about s), and its local training reaches it: from the global model w its update is
Δ_u = θ_u − w. The population loss is ½E‖w − θ_u‖², its excess over θ* is ½‖w − θ*‖² (the headline, exact). 2 % of
the users are public (in distribution: λ = ∞, as Table 7), every one of them trains each round; private users are
Poisson-sampled at rate m/N and the server steps w ← w + η·Δ̄ for T rounds from w = 0. With c the public users' mean
update and the noise N(0, z²C²I) on the sum of m expected private users:

- ``dp_fedavg_all``: every user private (N + k of them, rate m/(N + k)), Δ̄ = (Σ clip(Δ_u, C) + noise)/m;
- ``dp_fedavg_only_private`` (the paper's only-private arm): the private users' noisy mean, the public mean averaged
  in at weight k/(m + k);
- ``dope``: Δ̄ = c + (Σ clip(Δ_u − c, C) + noise)/m (fedpub's ``dope`` recipe, λ = ∞);
- ``dope_no_recentering``: Δ̄ = c + (Σ clip(Δ_u, C) + noise)/m, the recentering removed alone
  (``recenter.clip_around_center: false``);
- ``public_only``: the public users' mean optimum (the model trained on them alone).

Each round is fedpub's own (the tests check the noiseless rounds against fedpub's DOPE and DP-FedAvg strategies).
z is calibrated by fedpub's accountant (PLD, Poisson, user level) so each arm's T rounds cost ε at δ = 1e-5, the
all-users arm over its larger population. The mechanism can act here: far from θ*, updates are long and alike, so
clipping around zero at a small C throws their common part away while clipping around the public mean keeps it.

**Tuning, seeds and judging** (issue 45's rule): every private arm tunes (η, C) on one union grid
(:func:`~.tuning.tune_jointly`) on :data:`TUNING_DRAWS` draws disjoint from the test seeds; every claim is judged at
the arms' own points and with both arms at the other's (the compared arm's) point. A seed is one draw of users and
one stream of cohorts and noise shared by the arms (common random numbers: one uniform per user and one standard
normal a round, thresholded and scaled per arm). A cell is testable where DP-SGD (on all users, or on the private
ones) beats public-only by :data:`LEARNS_MARGIN` (DOPE left out of the gate, as in :mod:`.dope_table7`) and no arm's
tuned η sits at its grid's low edge. Table 7's ε = 0.5 / 1 / 2 / 4, 50 seeds (a full run takes seconds).

**What it cannot say**: a proxy is not EMNIST; its effect sizes are in excess loss, not accuracy points, and say
whether the mechanism acts, not how much it gains on the paper's data.

    python -m fedpub.simulations.reproductions.dope_proxy [--seeds 50] [--epsilons 0.5,1,2,4] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from dp_accounting import dp_event

from fedpub.atomic import write_text_atomic
from fedpub.privacy.calibration import calibrate
from fedpub.privacy.events import PoissonSampling, neighboring_relation, run_event
from fedpub.seeding import torch_generator
from fedpub.simulations.reproductions.judge import RULE, Beats, PrivateStepOn
from fedpub.simulations.reproductions.paired import PairedClaim, judgement, paired_line, write_paired_json
from fedpub.simulations.reproductions.results_record import (
    ClaimRecord,
    ReproductionRecord,
    default_out,
    write_claims_json,
)
from fedpub.simulations.reproductions.tuning import Axis, Tuning, at_point, low_edges, split_point, tune_jointly

NAME = "dope_proxy"
DTYPE = torch.float64
PRIVATE_ARMS = ("dp_fedavg_all", "dp_fedavg_only_private", "dope", "dope_no_recentering")
RECENTERED = ("dope", "dope_no_recentering")
"""The arms that add the public mean c at DOPE's weight (outside the noisy sum)."""


@dataclass(frozen=True)
class Setting:
    """The users, the cohort, the rounds and δ."""

    dim: int = 400
    private: int = 2000
    public: int = 40  # 2 % of the users, Table 7's share
    cohort: int = 100  # m: private users expected a round
    rounds: int = 10
    spread: float = 0.5  # s: how far users' optima lie apart
    delta: float = 1e-5
    accountant: Literal["pld", "rdp"] = "pld"

    def population(self, arm: str) -> int:
        """The users the arm treats as private."""
        return self.private + self.public if arm == "dp_fedavg_all" else self.private


@dataclass(frozen=True)
class Users:
    """θ* (D,), the private users' optima (N, D) and the public users' (k, D)."""

    optimum: torch.Tensor
    private: torch.Tensor
    public: torch.Tensor


def make_users(setting: Setting, seed: int | str) -> Users:
    """One draw: θ* a uniformly random direction of norm 1, every user's optimum around it."""
    gen = torch_generator(NAME, seed, "users")
    optimum = torch.randn(setting.dim, generator=gen, dtype=DTYPE)
    optimum /= optimum.norm()
    users = optimum + setting.spread / math.sqrt(setting.dim) * torch.randn(
        setting.private + setting.public, setting.dim, generator=gen, dtype=DTYPE)
    return Users(optimum, users[:setting.private], users[setting.private:])


def noise_multiplier(setting: Setting, arm: str, epsilon: float, cache_dir: Path | None = None) -> float:
    """z such that the arm's T Poisson rounds at rate m / its population cost ε at δ (user level)."""
    sampling = PoissonSampling(setting.cohort / setting.population(arm))
    return calibrate(lambda z: run_event(sampling, [dp_event.GaussianDpEvent(z)], setting.rounds),
                     neighboring_relation(sampling), epsilon, setting.delta, setting.accountant, cache_dir)


def clipped(updates: torch.Tensor, clips: torch.Tensor) -> torch.Tensor:
    """Each update (last dim) scaled to norm at most its row's clip (``clips`` broadcast to updates[..., :1])."""
    return updates * torch.clamp(clips / updates.norm(dim=-1, keepdim=True).clamp_min(1e-300), max=1.0)


def aggregate(arm: str, updates: torch.Tensor, center: torch.Tensor, clips: torch.Tensor, noise: torch.Tensor,
              setting: Setting) -> torch.Tensor:
    """Δ̄ of one round for every (η, C) row: ``updates`` (G, b, D) of the round's private users, ``center`` (G, D) the
    public users' mean update, ``clips`` (G,), ``noise`` (G, D) already scaled by z·C."""
    around = updates - center[:, None] if arm == "dope" else updates
    mean = (clipped(around, clips[:, None, None]).sum(1) + noise) / setting.cohort
    if arm == "dp_fedavg_only_private":
        m, k = setting.cohort, setting.public
        return (m * mean + k * center) / (m + k)
    return mean + center if arm in RECENTERED else mean


def train(arm: str, setting: Setting, users: Users, lrs: torch.Tensor, clips: torch.Tensor, z: float,
          stream: int | str) -> torch.Tensor:
    """The final models (G, D) of T rounds at the (η, C) rows; ``stream`` names the cohorts and noise (the same
    uniforms and normals for every arm of a seed: an arm of N + k users thresholds all N + k uniforms at its rate,
    the others the first N)."""
    gen = torch_generator(NAME, stream, "rounds")
    everyone = torch.cat([users.private, users.public])
    pool = everyone if arm == "dp_fedavg_all" else users.private
    rate = setting.cohort / setting.population(arm)
    model = torch.zeros(lrs.numel(), setting.dim, dtype=DTYPE)
    for _ in range(setting.rounds):
        chosen = torch.rand(everyone.shape[0], generator=gen, dtype=DTYPE)[:pool.shape[0]] < rate
        standard = torch.randn(setting.dim, generator=gen, dtype=DTYPE)
        center = users.public.mean(0) - model
        updates = pool[chosen][None] - model[:, None]
        model = model + lrs[:, None] * aggregate(arm, updates, center, clips, z * clips[:, None] * standard, setting)
    return model


def excess(model: torch.Tensor, users: Users) -> torch.Tensor:
    """½‖w − θ*‖² per model: the population loss's excess, exact."""
    return 0.5 * (model - users.optimum).square().sum(-1)


def rates(point: Mapping[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """A tuned point's (η, C) as the one-row tensors :func:`train` takes."""
    return torch.tensor([point["lr"]], dtype=DTYPE), torch.tensor([point["C"]], dtype=DTYPE)


LR_GRID = (0.1, 0.3, 1.0)
CLIP_GRID = (0.03, 0.1, 0.3, 1.0)
TUNING_DRAWS = 3
MAX_EXTENSIONS = 3


def tune_arms(setting: Setting, draws: Sequence[Users], zs: Mapping[str, float],
              grid: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Tuning]:
    """(η, C) of every private arm, jointly on one union grid, by the mean excess over the tuning draws."""
    def scorer(arm: str) -> Callable[[Mapping[str, float]], float]:
        def score(point: Mapping[str, float]) -> float:
            lr, clip = rates(point)
            losses = [float(excess(train(arm, setting, users, lr, clip, zs[arm], f"tune{i}"), users)[0])
                      for i, users in enumerate(draws)]
            return statistics.fmean(losses) if all(map(math.isfinite, losses)) else math.inf

        return score

    return tune_jointly([Axis("lr", grid[0]), Axis("C", grid[1])], {arm: scorer(arm) for arm in PRIVATE_ARMS},
                        higher_is_better=False, max_extensions=MAX_EXTENSIONS)


COMPARED = (("dope", "dp_fedavg_all"), ("dope", "dp_fedavg_only_private"), ("dope", "dope_no_recentering"))
"""(better, worse) of every claim: each also judged with ``better`` at ``worse``'s tuned point."""



def arms() -> tuple[str, ...]:
    return (*PRIVATE_ARMS, *(at_point(b, w) for b, w in COMPARED), "public_only")


def cell_name(epsilon: float) -> str:
    return f"ε={epsilon:g}"


@dataclass(frozen=True)
class Outcome:
    values: dict[str, dict[str, dict[int, float]]]
    tunings: dict[tuple[str, str], Tuning]
    noise: dict[str, dict[str, float]]


def run(setting: Setting, epsilons: Sequence[float], seeds: int, tuning_draws: int,
        grid: tuple[tuple[float, ...], tuple[float, ...]], log: Callable[[str], None] = print) -> Outcome:
    """Tune every arm per ε, then run every arm on every seed."""
    values: dict[str, dict[str, dict[int, float]]] = {arm: {} for arm in arms()}
    tunings: dict[tuple[str, str], Tuning] = {}
    noise: dict[str, dict[str, float]] = {}
    draws = [make_users(setting, f"tune{i}") for i in range(tuning_draws)]
    tests = [make_users(setting, seed) for seed in range(seeds)]
    for epsilon in epsilons:
        cell, tick = cell_name(epsilon), time.perf_counter()
        zs = noise[cell] = {arm: noise_multiplier(setting, arm, epsilon) for arm in PRIVATE_ARMS}
        joint = tune_arms(setting, draws, zs, grid)
        tunings.update({(arm, cell): t for arm, t in joint.items()})
        for arm in arms():
            if arm == "public_only":
                values[arm][cell] = {seed: float(excess(users.public.mean(0), users))
                                     for seed, users in enumerate(tests)}
                continue
            trained, owner = split_point(arm)
            lr, clip = rates(joint[owner].best)
            values[arm][cell] = {seed: float(excess(train(trained, setting, users, lr, clip, zs[trained], seed),
                                                    users)[0])
                                 for seed, users in enumerate(tests)}
        log(f"{cell} (z {zs['dope']:.3f}, all users {zs['dp_fedavg_all']:.3f}) [{time.perf_counter() - tick:.0f} s]: "
            + ", ".join(f"{arm} {statistics.fmean(values[arm][cell].values()):.5f}" for arm in arms()))
    return Outcome(values, tunings, noise)


TABLE7 = ("Table 7 (EMNIST, 2 % public users, user level): DOPE-SGD 84.7 / 85.2 / 86.0 / 87.1 % against DP-SGD (all) "
          "82.2 / 83.4 / 85.0 / 86.2 % and DP-SGD (only-private) 83.1 / 84.6 / 85.5 / 86.4 % at ε = 0.5 / 1 / 2 / 4")
LEARNS_MARGIN = 0.0003
"""How much lower (in excess loss) than public-only a DP-SGD arm must end for the private users to matter (public-only
ends near s²/(2k) ≈ 0.003 here)."""


def claims(epsilons: Sequence[float], tunings: Mapping[tuple[str, str], Tuning] | None = None) -> list[PairedClaim]:
    """Table 7's two claims and the control that removes the recentering alone, each at the arms' own points and
    with both at the compared arm's; gated on private training beating public-only and on no arm's η at its grid's
    low edge; the gate's own row."""
    cells = tuple(cell_name(e) for e in epsilons)
    learns = Beats(("dp_fedavg_all", "dp_fedavg_only_private"), "public_only", LEARNS_MARGIN, "public only",
                   higher_is_better=False)

    def step_on(*ran: str) -> tuple[PrivateStepOn, ...]:
        if not tunings:
            return ()
        return (PrivateStepOn(ran, at_low_edge=low_edges(ran, tunings, "lr")),)

    texts = {"dp_fedavg_all": "DOPE-SGD beats DP-SGD on all users (Table 7)",
             "dp_fedavg_only_private": "DOPE-SGD beats DP-SGD on the private users only, the public mean averaged in "
                                       "(Table 7's only-private arm)",
             "dope_no_recentering": "DOPE-SGD beats DOPE with the recentering removed (the public mean still added at "
                                    "DOPE's weight): the recentering alone"}
    found = []
    for better, worse in COMPARED:
        figure = TABLE7 if worse != "dope_no_recentering" else "none: a mechanism control the paper does not run"
        found += [PairedClaim(texts[worse], better, worse, cells, paper_figure=figure,
                              gates=(learns, *step_on(better, worse))),
                  PairedClaim(f"{texts[worse]} — both at {worse}'s tuned (η, C)", at_point(better, worse), worse,
                              cells, paper_figure=figure, gates=(learns, *step_on(at_point(better, worse), worse)))]
    found.append(PairedClaim("Gate: DP-SGD on the private users beats public only", "dp_fedavg_only_private",
                             "public_only", cells, role="gate"))
    return found


TITLE = "Seed 003, DOPE-SGD's recentering on a CPU mechanism proxy (federated mean estimation, Table 7's arms)"
PAPER = ("Nasr et al. 2023, \"Effectively using public data in privacy preserving machine learning\", Alg. 2, eq. 2 "
         "and Table 7 (EMNIST, 2 % public users, user-level DP).")


def write_outputs(out: Path, outcome: Outcome, found: Sequence[PairedClaim], setting: Setting, seeds: int,
                  draws: int, wall: float, quick: bool) -> list[str]:
    """paired.json, comparison.md, tuning.md and claims.json; returns the comparison's claim lines."""
    out.mkdir(parents=True, exist_ok=True)
    write_paired_json(out, NAME, "test excess loss", False, outcome.values, found)
    lines = [paired_line(outcome.values, c, higher_is_better=False) for c in found]
    write_text_atomic(out / "tuning.md", "\n".join(
        ["# DOPE proxy: tuning (η, C) on separate draws", ""]
        + [f"- **{arm}, {cell}**: {t.markdown()}" for (arm, cell), t in outcome.tunings.items()]) + "\n")
    per_arm = sorted({t.evaluations for t in outcome.tunings.values()})
    flagged = [f"{arm} {cell} ({', '.join(t.on_edge)})" for (arm, cell), t in outcome.tunings.items() if t.on_edge]
    tuning = (f"Every private arm tuned over (η, C) jointly on one union grid per ε (initial η {list(LR_GRID)}, C "
              f"{list(CLIP_GRID)}; an edge extended for one arm is extended for all, at most {MAX_EXTENSIONS} times) "
              f"on {draws} tuning draws disjoint from the test seeds, lowest mean excess loss: "
              f"{'/'.join(map(str, per_arm))} points per arm (tuning.md); "
              + (f"still on an edge: {'; '.join(flagged)}. " if flagged else "none on an edge. ")
              + "Each claim judged at the arms' own points and with both at the compared arm's. Not counted in ε.")
    zs = "; ".join(f"{cell}: z {z['dope']:.3f} (all users {z['dp_fedavg_all']:.3f})"
                   for cell, z in outcome.noise.items())
    setup = (f"D = {setting.dim}, {setting.private} private and {setting.public} public users (spread s = "
             f"{setting.spread:g}), {setting.cohort} private users expected a round, {setting.rounds} rounds, δ = "
             f"{setting.delta:g}, {setting.accountant.upper()}; {zs}; {seeds} seeds; wall time {wall:.0f} s.")
    write_text_atomic(out / "comparison.md", "\n".join([
        f"# {TITLE}", "", PAPER, "", setup, "", "## Paired differences (test excess loss, lower is better)", "",
        *lines, "", "## Judged (paired t on the seeds, Holm over ε, the gates first)", "", RULE, "",
        *(judgement(outcome.values, c, False).sentence(c.text, c.better, c.worse) for c in found), "", tuning, ""]))
    command = f"python -m fedpub.simulations.reproductions.{NAME}" + (" --quick" if quick else "")
    write_claims_json(out, ReproductionRecord(
        NAME, "003", TITLE, PAPER, command, quick, seeds, wall, tuning, RULE,
        tuple(ClaimRecord.of(c.text, c.better, c.worse, judgement(outcome.values, c, False), c.paper_figure)
              for c in found),
        ("comparison.md", "tuning.md"), ()))
    return lines


QUICK_SETTING = Setting(dim=20, private=200, public=4, cohort=20, rounds=3, accountant="rdp")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50, help="paired seeds (default 50)")
    parser.add_argument("--epsilons", default="0.5,1,2,4", help="target ε list (default 0.5,1,2,4: Table 7's)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default {default_out(NAME, False)}, quick: {default_out(NAME, True)})")
    parser.add_argument("--quick", action="store_true",
                        help="20 dimensions, 200 users, 3 rounds, ε = 2, 3 seeds, a 2×2 grid, RDP: seconds, for the "
                             "tests")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out or default_out(NAME, args.quick)
    start = time.perf_counter()
    if args.quick:
        setting, epsilons, seeds, draws, grid = QUICK_SETTING, [2.0], 3, 1, ((0.3, 1.0), (0.1, 0.3))
    else:
        setting, seeds, draws, grid = Setting(), args.seeds, TUNING_DRAWS, (LR_GRID, CLIP_GRID)
        epsilons = [float(e) for e in args.epsilons.split(",")]
    outcome = run(setting, epsilons, seeds, draws, grid)
    found = claims(epsilons, outcome.tunings)
    lines = write_outputs(out, outcome, found, setting, seeds, draws, time.perf_counter() - start, args.quick)
    print("\n".join(lines))
    print(f"wall time {time.perf_counter() - start:.1f} s; results in {out}")
    return out


if __name__ == "__main__":
    main()
