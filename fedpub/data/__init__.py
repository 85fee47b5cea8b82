"""Federated datasets: the lazy per-client protocol, TFF EMNIST reader, and the synthetic quick-start data."""

from fedpub.data.base import ClientData, DatasetError, FederatedDataset
from fedpub.data.emnist import EmnistH5, load_emnist_split
from fedpub.data.synthetic_emnist import (
    SyntheticEmnistSpec,
    ensure_synthetic_emnist,
    write_synthetic_emnist,
)

__all__ = [
    "ClientData",
    "DatasetError",
    "EmnistH5",
    "FederatedDataset",
    "SyntheticEmnistSpec",
    "ensure_synthetic_emnist",
    "load_emnist_split",
    "write_synthetic_emnist",
]
