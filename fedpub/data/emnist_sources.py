"""How a config's ``data`` section opens federated EMNIST, one function per ``data.source`` of its declaration
(:mod:`fedpub.data.emnist_dataset`): TFF's HDF5 files, TFF's SQLite database, and the synthetic look-alike digits,
written first in the HDF5 layout and then read like TFF's files (with their public writers, from a spec of their
own or scikit-learn's real digits, as the held-out split of ``data.public.pool: heldout``).
"""

from __future__ import annotations

from pathlib import Path

from fedpub.config import ConfigError, ExperimentConfig
from fedpub.data.base import Splits
from fedpub.data.emnist import EmnistH5, load_emnist_split
from fedpub.data.emnist_dataset import SklearnDigitsPublicConfig, SyntheticEmnistPublicConfig
from fedpub.data.emnist_sqlite import load_emnist_sqlite
from fedpub.data.emnist_sklearn_digits import ensure_sklearn_digits_public
from fedpub.data.synthetic_emnist import (
    NUM_DIGITS,
    PUBLIC_NAME,
    SyntheticEmnistSpec,
    ensure_synthetic_emnist,
    ensure_synthetic_emnist_public,
)


def _public_writers(config: ExperimentConfig) -> SyntheticEmnistPublicConfig | SklearnDigitsPublicConfig | None:
    """``data.synthetic.public``, refused unless it and ``data.public.pool: heldout`` come together."""
    public, pool = config.data.synthetic.public, config.data.public.pool
    if pool == "heldout" and public is None:
        raise ConfigError("data.public.pool `heldout` on data.source `synthetic_emnist` takes its public writers from "
                          "data.synthetic.public (their generator spec, {} for the defaults, or {source: "
                          "sklearn_digits} for real digits): set it, or use data.public.pool `train_fraction` with "
                          "data.public.fraction")
    if public is not None and pool != "heldout":
        raise ConfigError(f"data.synthetic.public is set but data.public.pool is `{pool}`: its public writers would "
                          "not be used; set data.public.pool: heldout, or remove data.synthetic.public")
    return public


def generate_synthetic(config: ExperimentConfig) -> None:
    """Write the look-alike digits of ``data.synthetic`` (and its public writers) into ``data.path`` unless they are
    there."""
    synthetic = config.data.synthetic
    public = _public_writers(config)
    ensure_synthetic_emnist(config.data.path, SyntheticEmnistSpec(**synthetic.model_dump(exclude={"public"})))
    if isinstance(public, SklearnDigitsPublicConfig):
        ensure_sklearn_digits_public(config.data.path, public.num_writers, public.seed)
    elif public is not None:
        spec = SyntheticEmnistSpec(**public.model_dump(exclude={"source"}), test_fraction=synthetic.test_fraction)
        ensure_synthetic_emnist_public(config.data.path, spec)


def open_synthetic(config: ExperimentConfig) -> Splits:
    """The generated writers in ``data.path``, and their public writers as the held-out split when
    ``data.public.pool`` is ``heldout``."""
    train, test = load_emnist_split(config.data.path, only_digits=config.data.only_digits)
    if _public_writers(config) is None:
        return Splits(train, test)
    return Splits(train, test, heldout=EmnistH5(Path(config.data.path) / PUBLIC_NAME, num_classes=NUM_DIGITS))


def open_h5(config: ExperimentConfig) -> Splits:
    """``fed_emnist[_digitsonly]_{train,test}.h5`` in ``data.path``."""
    _no_heldout(config)
    return Splits(*load_emnist_split(config.data.path, only_digits=config.data.only_digits))


def open_sqlite(config: ExperimentConfig) -> Splits:
    """The train and test splits of ``emnist_all.sqlite[.lzma]`` at ``data.path``."""
    _no_heldout(config)
    return Splits(*load_emnist_sqlite(config.data.path, only_digits=config.data.only_digits))


def _no_heldout(config: ExperimentConfig) -> None:
    """TFF's EMNIST has no held-out split: refuse ``data.public.pool: heldout`` on its files."""
    if config.data.public.pool == "heldout":
        raise ConfigError(f"data.public.pool `heldout`: TFF's EMNIST files (data.source `{config.data.source}`) have "
                          "no held-out split; use data.public.pool `train_fraction`, or data.source "
                          "`synthetic_emnist` with data.synthetic.public")
