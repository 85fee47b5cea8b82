"""The public-only control of the federated reproductions: the seeded initial model trained on the pooled public
users alone (no private data, no DP needed), its learning rate and epochs tuned on the validation users.

Wherever a reproduction judges a public-data claim, this arm says whether the private users teach the model
anything beyond what the public users already do: the regime gate :class:`~.judge.Beats` compares the best
private arm with it (fedpub issue 36). It does not depend on ε: its rows have no ``target_epsilon`` and the judge
counts them once (the ``ANY`` cell). It trains on the base's own public users (``data.public``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedpub.clients.public_training import pooled_data, train_on_public
from fedpub.config import ExperimentConfig, PublicTrainingConfig, parse_config
from fedpub.models.seeded import model_params
from fedpub.simulations.tools.compare import deep_merge
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.reproductions.federated import TUNING_SEED, TUNING_SEEDS, Row
from fedpub.simulations.reproductions.round_zero import evaluated
from fedpub.simulations.reproductions.row_cache import RowCache
from fedpub.simulations.reproductions.tuning import Axis, tune


def control_config(base: Mapping[str, Any], seed: int) -> ExperimentConfig:
    """The base as the control reads it (no private round runs: ε is only parsed); refused without public users."""
    public = base.get("data", {}).get("public", {})
    if not public.get("fraction") and public.get("pool") != "heldout":
        raise ValueError("public_only control: the base has no public users; set data.public.fraction > 0 or "
                         "data.public.pool: heldout")
    raw = deep_merge(dict(base), {"seed": seed, "name": "public_only", "output_dir": "unused"})
    return parse_config(raw, "public_only control")


def public_only(base: Mapping[str, Any], seed: int, training: PublicTrainingConfig,
                kept: RowCache = RowCache(None)) -> dict[str, float]:
    """The control on one seed, evaluated on the test users (``eval_*``) and the validation users (``val_*``); read
    from ``kept`` where it holds it."""
    config = control_config(base, seed)

    def trained() -> dict[str, float]:
        experiment = build_experiment(config)
        model = experiment.new_model()
        data = pooled_data(experiment.public_data, experiment.public_ids)
        params, _ = train_on_public(model, model_params(model), data, training, experiment.task, seed=seed,
                                    purpose="public_only")
        return evaluated(experiment, model, params)

    point = {"lr": training.lr, "epochs": training.epochs}
    return kept.metrics(f"public_only__lr{training.lr:g}__epochs{training.epochs}__seed{seed}", config, point, trained)


def public_only_control(base: Mapping[str, Any], seeds: Sequence[int], quick: bool,
                        kept: RowCache = RowCache(None)) -> tuple[list[Row], str]:
    """The control on every test seed (rows with no ε), its learning rate and epochs tuned on the validation
    users (each point the mean over the two tuning seeds, as the arms'; the grid reaches down to lr 0.003: on the
    softmax at the gate size, lr 0.03 and up swung the last iterate by up to 50 points between seeds, and a control
    tuned there sat 9 points below the warm start's 40 epochs at lr 0.005, which passed the gate for the arms it
    should have held back); and its tuning paragraph. Every training is read from ``kept`` where it holds it."""
    axes = [Axis("lr", (0.1, 0.3)), Axis("epochs", (5,), "linear")] if quick else \
        [Axis("lr", (0.003, 0.01, 0.03, 0.1)), Axis("epochs", (10, 20, 40), "linear")]
    seeds_scored = (TUNING_SEED,) if quick else TUNING_SEEDS

    def score(point: Mapping[str, float]) -> float:
        training = PublicTrainingConfig(lr=point["lr"], epochs=int(point["epochs"]))
        return sum(public_only(base, s, training, kept)["val_accuracy"] for s in seeds_scored) / len(seeds_scored)

    tuning = tune(axes, score, higher_is_better=True, max_extensions=0 if quick else 2)
    chosen = PublicTrainingConfig(lr=tuning.best["lr"], epochs=int(tuning.best["epochs"]))
    rows = [{"strategy": "public_only", "seed": seed, "target_epsilon": None, **public_only(base, seed, chosen, kept)}
            for seed in seeds]
    accuracies = ", ".join(f"{r['eval_accuracy']:.4f}" for r in rows)
    return rows, (f"`public_only` (centralised training on the pooled public users, run once for every ε; test "
                  f"accuracy per seed {accuracies}): {tuning.markdown()}")
