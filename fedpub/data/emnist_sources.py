"""How a config's ``data`` section opens federated EMNIST, one function per ``data.source`` of its declaration
(:mod:`fedpub.data.emnist_dataset`): TFF's HDF5 files, TFF's SQLite database, and the synthetic look-alike digits,
written first in the HDF5 layout and then read like TFF's files.
"""

from __future__ import annotations

from fedpub.config import ExperimentConfig
from fedpub.data.base import Splits
from fedpub.data.emnist import load_emnist_split
from fedpub.data.emnist_sqlite import load_emnist_sqlite
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, ensure_synthetic_emnist


def generate_synthetic(config: ExperimentConfig) -> None:
    """Write the look-alike digits of ``data.synthetic`` into ``data.path`` unless they are there."""
    ensure_synthetic_emnist(config.data.path, SyntheticEmnistSpec(**config.data.synthetic.model_dump()))


def open_h5(config: ExperimentConfig) -> Splits:
    """``fed_emnist[_digitsonly]_{train,test}.h5`` in ``data.path``."""
    return Splits(*load_emnist_split(config.data.path, only_digits=config.data.only_digits))


def open_sqlite(config: ExperimentConfig) -> Splits:
    """The train and test splits of ``emnist_all.sqlite[.lzma]`` at ``data.path``."""
    return Splits(*load_emnist_sqlite(config.data.path, only_digits=config.data.only_digits))
