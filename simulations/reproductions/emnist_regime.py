"""Where can federated EMNIST decide a public-data claim? The regime probe of fedpub issue 36.

For each setting (model, writers, users a round m, rounds) it runs, on the synthetic EMNIST-layout data with the
reproductions' clip norm and server optimiser, three arms and prints one table row:

- ``private``: DP-FedAvg on the private users at ``--epsilon`` (δ = 1e-5), z calibrated for the rounds;
- ``public-only``: the model trained on the pooled public users alone (:mod:`~fedpub.simulations.reproductions
  .public_only`), the best of a small learning-rate × epochs grid scored on the test users (it favours the
  control, so a setting that passes here passes with the control tuned on validation users);
- ``non-private``: FedAvg on the same users with no clipping and no noise (the headroom DP leaves).

The regime gate passes where ``private`` beats ``public-only`` by :data:`~fedpub.simulations.reproductions.federated
.BEATS_MARGIN` or more; the headroom is ``non-private - private``. ``z·√d/m`` is the noise on the mean update over
the largest signal C. Seconds are wall time on this machine (``--threads`` torch threads); ``s/round`` is the
private arm's. The data are generated under ``--data`` once per spec and reused (generation time printed).

``python -m fedpub.simulations.reproductions.emnist_regime --models emnist_softmax --writers 5000 --cohorts 500
--rounds 30 [--public heldout|sklearn_digits] [--style YAML] [--device cuda]``; ``--quick`` is a seconds-long smoke run
(40 writers). ``--style`` sets the private writers' style (``data.synthetic``'s style fields): a harder task leaves more
for the private users to teach beyond a few public ones.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fedpub.config import PublicTrainingConfig
from fedpub.data.emnist_dataset import WriterStyle
from fedpub.data.emnist_sources import generate_synthetic
from fedpub.models import build_model
from fedpub.strict_yaml import load_yaml
from fedpub.simulations.reproductions.federated import BEATS_MARGIN
from fedpub.simulations.reproductions.public_only import control_config, public_only
from fedpub.simulations.run.api import run
from fedpub.simulations.tools.compare import deep_merge

BASE = Path(__file__).resolve().parents[1] / "configs" / "public_emnist.yaml"
PUBLIC_GRID = tuple((lr, epochs) for lr in (0.01, 0.03, 0.1, 0.3) for epochs in (5, 20))
"""(lr, epochs) of the public-only control; the best on the test users is reported."""
HELDOUT = {"heldout": {}, "sklearn_digits": {"source": "sklearn_digits"}}
"""``--public`` values that take the public users from ``data.synthetic.public``, and its section: the generated
off-distribution writers, or scikit-learn's real digits (the ``reproductions`` extra)."""
HEADER = ("model", "d", "public", "style", "writers", "m", "rounds", "z", "z·√d/m", "private", "public-only",
          "non-private", "gate", "headroom", "s private", "s/round", "s public-only", "s non-private")


def setting(model: str, writers: int, cohort: int, rounds: int, epsilon: float, public: str, data: Path,
            quick: bool, style: dict[str, Any] | None = None, device: str = "cpu") -> dict[str, Any]:
    """The probe's config for one setting: the reproductions' base with these sizes, the private writers in
    ``style`` (``data.synthetic``'s style fields; the default style when None), trained on ``device``."""
    base = load_yaml(BASE.read_text(encoding="utf-8"))
    heldout = public in HELDOUT
    public_section: dict[str, Any] = {"pool": "heldout", "fraction": 0.0} if heldout else \
        {"pool": "train_fraction", "fraction": float(public)}
    small = {"min_examples": 6, "max_examples": 10} if quick else {}
    synthetic: dict[str, Any] = {"num_writers": writers, **small, **(style or {})}
    if heldout:
        quick_size = {"num_writers": 4, **(small if public == "heldout" else {})}
        synthetic["public"] = HELDOUT[public] | (quick_size if quick else {})
    styled = f"w{writers}" + "".join(f"_{k}{v}" for k, v in sorted((style or {}).items()))  # checked by the config
    return deep_merge(base, {
        "name": "emnist_regime", "device": device, "rounds": rounds, "eval_every": rounds, "checkpoint_every": rounds,
        "model": {"name": model},
        "data": {"path": str(data / styled / ("quick" if quick else "full")), "synthetic": synthetic,
                 "public": public_section, "validation": {"fraction": 0.05}, "eval_users": "all",
                 "eval_clients": 40 if quick else 1000},
        "client": {"epochs": 1},
        "strategy": {"sampling": {"clients_per_round": cohort}, "target_epsilon": epsilon},
    })


def probe(config: dict[str, Any], quick: bool) -> dict[str, Any]:
    """One table row: the three arms of ``config``."""
    start = time.perf_counter()
    generate_synthetic(control_config(config, 0))
    generation = time.perf_counter() - start
    model = config["model"]["name"]
    d = sum(p.numel() for p in build_model(model, 10).parameters())
    start = time.perf_counter()
    private = run(dict(config), output_dir=None)
    private_s = time.perf_counter() - start
    z = float(private.metrics[-1]["noise/noise_multiplier"])
    _progress(f"private {private.final_metrics['eval_accuracy']:.4f} (z {z:.3g}, {private_s:.0f} s)")
    start = time.perf_counter()
    grid = PUBLIC_GRID[:1] if quick else PUBLIC_GRID
    public = max(public_only(config, 0, PublicTrainingConfig(lr=lr, epochs=e))["eval_accuracy"] for lr, e in grid)
    public_s = time.perf_counter() - start
    _progress(f"public-only {public:.4f} ({public_s:.0f} s)")
    open_config = deep_merge(config, {"strategy": {"target_epsilon": None, "noise_multiplier": 0.0,
                                                   "clip_norm": math.inf}})
    start = time.perf_counter()
    non_private = run(open_config, output_dir=None)
    non_private_s = time.perf_counter() - start
    cohort, rounds = config["strategy"]["sampling"]["clients_per_round"], config["rounds"]
    acc = float(private.final_metrics["eval_accuracy"])
    open_acc = float(non_private.final_metrics["eval_accuracy"])
    pool, synthetic = config["data"]["public"], config["data"]["synthetic"]
    pool_name = synthetic["public"].get("source", "heldout") if pool["pool"] == "heldout" else f"{pool['fraction']:g}"
    return {
        "model": model, "d": d, "public": pool_name, "style": style_text(synthetic),
        "writers": synthetic["num_writers"], "m": cohort, "rounds": rounds, "z": z,
        "z·√d/m": z * math.sqrt(d) / cohort, "private": acc, "public-only": public, "non-private": open_acc,
        "gate": "pass" if acc - public >= BEATS_MARGIN else "fail", "headroom": open_acc - acc,
        "s private": private_s, "s/round": private_s / rounds, "s public-only": public_s,
        "s non-private": non_private_s, "generation_s": generation,
    }


def style_text(synthetic: dict[str, Any]) -> str:
    """The private writers' style fields that differ from the default style, or ``default``."""
    default = WriterStyle().model_dump()
    changed = {k: synthetic[k] for k in default if k in synthetic and synthetic[k] != default[k]}
    return ", ".join(f"{k} {v:g}" for k, v in sorted(changed.items())) or "default"


def _style(text: str) -> dict[str, Any]:
    """``--style``'s YAML mapping (its keys and values are checked with the config: ``data.synthetic.<field>``)."""
    style = load_yaml(text)
    if not isinstance(style, dict):
        raise argparse.ArgumentTypeError(f"a YAML mapping of data.synthetic's style fields is needed, e.g. "
                                         f"'{{ambiguous_fraction: 0.6}}'; got {text!r}")
    return style


def _progress(line: str) -> None:
    """An arm's result as soon as it is known (on stderr: stdout holds the table), so that a cut run keeps it."""
    print(f"  {line}", file=sys.stderr, flush=True)


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@contextmanager
def _data_dir(path: str | None) -> Iterator[Path]:
    if path is not None:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="emnist-regime-") as scratch:
        yield Path(scratch)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="emnist_softmax")
    parser.add_argument("--writers", default="5000", help="comma-separated numbers of writers")
    parser.add_argument("--cohorts", default="500", help="comma-separated expected private users a round")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--public", default="0.02",
                        help="the public pool: a fraction of the writers (in distribution), heldout (the "
                             "off-distribution public writers of data.synthetic.public) or sklearn_digits "
                             "(scikit-learn's real digits)")
    parser.add_argument("--data", default="data/emnist_regime", help="where the generated data are kept")
    parser.add_argument("--style", type=_style, default=None, metavar="YAML",
                        help="the private writers' style, data.synthetic's style fields as a YAML mapping, e.g. "
                             "'{ambiguous_fraction: 0.6, pixel_noise: 0.35}' (default: the quick start's style)")
    parser.add_argument("--device", default="cpu", help="the torch device the arms train on (cpu, cuda, ...)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 writers, 5 a round, 2 rounds")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    with _data_dir(None if args.quick else args.data) as data:
        sizes = itertools.product(args.models.split(","), map(int, args.writers.split(",")),
                                  map(int, args.cohorts.split(",")))
        for model, writers, cohort in sizes:
            writers, cohort, rounds = (40, 5, 2) if args.quick else (writers, cohort, args.rounds)
            config = setting(model, writers, cohort, rounds, args.epsilon, args.public, data, args.quick, args.style,
                             args.device)
            row = probe(config, args.quick)
            rows.append(row)
            print("| " + " | ".join(_cell(row[k]) for k in HEADER) + f" |  (generation {row['generation_s']:.1f} s)",
                  flush=True)
    return rows


if __name__ == "__main__":
    main()
