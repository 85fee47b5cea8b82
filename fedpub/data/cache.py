"""Users' examples kept in memory between rounds: a least-recently-used cache of decoded clients, bounded in bytes.

A user sampled with probability q is trained again about every 1/q rounds. Without the cache, each time it is
read from the file again: HDF5 groups, a SQLite query, StackOverflow's text turned into features. For small
clients that reading costs as much as training them (about 1 ms per EMNIST user here). pfl-research avoids it
by holding the whole dataset in memory; this cache keeps as many users as ``data.cache_mb`` allows, so the same
code runs 340,000-user StackOverflow. The cached :class:`~fedpub.data.base.ClientData` are the reader's own
tensors, and training only reads them, so a run gives the same model with or without the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from fedpub.data.base import ClientData, FederatedDataset


def _nbytes(data: ClientData) -> int:
    return data.x.numel() * data.x.element_size() + data.y.numel() * data.y.element_size()


class CachedClients:
    """``dataset`` with its last-read clients kept until they hold more than ``max_bytes`` (0: keep none).
    Anything else is asked of ``dataset``. Pickling drops the cached clients (a Ray worker starts empty)."""

    def __init__(self, dataset: FederatedDataset, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.dataset = dataset
        self.max_bytes = max_bytes
        self.client_ids: list[str] = dataset.client_ids
        self.num_classes: int = dataset.num_classes
        self._clients: OrderedDict[str, ClientData] = OrderedDict()
        self._bytes = 0

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def client_data(self, client_id: str) -> ClientData:
        data = self._clients.get(client_id)
        if data is not None:
            self._clients.move_to_end(client_id)
            return data
        data = self.dataset.client_data(client_id)
        size = _nbytes(data)
        if size <= self.max_bytes:
            self._clients[client_id] = data
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._clients.popitem(last=False)
                self._bytes -= _nbytes(evicted)
        return data

    def num_examples(self, client_id: str) -> int:
        return self.dataset.num_examples(client_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "_clients"):
            raise AttributeError(name)  # while unpickling, before __dict__ is filled
        return getattr(self.dataset, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"], state["max_bytes"])  # type: ignore[misc]
