"""Users' examples kept in memory between rounds: a least-recently-used cache of decoded clients, bounded in bytes.

A user sampled with probability q is trained again about every 1/q rounds. Without the cache, each time it is
read from the file again: HDF5 groups, a SQLite query, posts' text turned into features. For small
clients that reading costs as much as training them (about 1 ms per quick-start user here). pfl-research avoids it
by holding the whole dataset in memory; this cache keeps as many users as ``data.cache_mb`` allows, so the same
code runs a 340,000-user dataset. The cached :class:`~fedpub.data.base.ClientData` are the reader's own
tensors, and training only reads them, so a run gives the same model with or without the cache.

:meth:`CachedClients.read_ahead` fills the cache with the next round's users in a background thread while the
current round trains (issue 7's GPU path: the host thread mostly waits on the device meanwhile). On a CPU the
reading competes with training for the cores and for Python's GIL: the quick start's CNN with 200 users' HDF5 reads
in a thread took 0.97 s, against 0.88 s one after the other (medians of 7 pairs on 2 cores), so the engine reads
ahead on a GPU only unless ``data.prefetch`` says otherwise.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fedpub.data.base import ClientData, FederatedDataset


def _nbytes(data: ClientData) -> int:
    return data.x.numel() * data.x.element_size() + data.y.numel() * data.y.element_size()


class CachedClients:
    """``dataset`` with its last-read clients kept until they hold more than ``max_bytes`` (0: keep none).
    Anything else is asked of ``dataset``. Pickling drops the cached clients (a Ray worker starts empty).
    Reading from two threads at once is safe when ``dataset``'s reads are (HDF5 and SQLite readers are)."""

    def __init__(self, dataset: FederatedDataset, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.dataset = dataset
        self.max_bytes = max_bytes
        self.client_ids: list[str] = dataset.client_ids
        self.num_classes: int = dataset.num_classes
        self._clients: OrderedDict[str, ClientData] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._reader: ThreadPoolExecutor | None = None
        self._reading: Future[None] | None = None

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    @property
    def cached_ids(self) -> frozenset[str]:
        """The users whose examples the cache holds now."""
        with self._lock:
            return frozenset(self._clients)

    def client_data(self, client_id: str) -> ClientData:
        with self._lock:
            data = self._clients.get(client_id)
            if data is not None:
                self._clients.move_to_end(client_id)
                return data
        data = self.dataset.client_data(client_id)  # outside the lock: the other thread may read meanwhile
        size = _nbytes(data)
        with self._lock:
            if size <= self.max_bytes and client_id not in self._clients:
                self._clients[client_id] = data
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, evicted = self._clients.popitem(last=False)
                    self._bytes -= _nbytes(evicted)
        return data

    def preload(self, client_ids: Sequence[str], log: Callable[[str], None] | None = None) -> None:
        """Read every one of ``client_ids`` into the cache (``log`` told every tenth of the way); a ValueError,
        naming ``data.cache_mb``, as soon as they cannot all fit in ``max_bytes``."""
        step = max(1, len(client_ids) // 10)
        for done, client_id in enumerate(client_ids, 1):
            if client_id in self._clients:
                continue
            data = self.dataset.client_data(client_id)
            size = _nbytes(data)
            with self._lock:
                if self._bytes + size > self.max_bytes:
                    raise ValueError(
                        f"data.preload: the users do not fit in data.cache_mb = {self.max_bytes / 2**20:g} MB "
                        f"({(self._bytes + size) / 2**20:.1f} MB after {done} of {len(client_ids)} users); raise "
                        "data.cache_mb or set data.preload: false"
                    )
                self._clients[client_id] = data
                self._bytes += size
            if log is not None and (done % step == 0 or done == len(client_ids)):
                log(f"data.preload: {done} of {len(client_ids)} users read ({self._bytes / 2**20:.1f} MB)")

    def read_ahead(self, client_ids: Sequence[str]) -> None:
        """Read ``client_ids`` into the cache in a background thread (after the last :meth:`read_ahead` ends), and
        return at once. A user whose reading fails is left out: reading it in its round raises the error there,
        for that user only. Nothing is read ahead without room in the cache (``max_bytes`` 0)."""
        if self.max_bytes == 0:
            return
        self.wait()
        if self._reader is None:
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedpub-read-ahead")
        self._reading = self._reader.submit(self._read_quietly, list(client_ids))

    def wait(self) -> None:
        """Return when the last :meth:`read_ahead` has ended."""
        if self._reading is not None:
            self._reading.result()
            self._reading = None

    def close(self) -> None:
        """Wait for the last :meth:`read_ahead` and end its thread (the cached users stay; a later
        :meth:`read_ahead` starts a new one)."""
        self.wait()
        if self._reader is not None:
            self._reader.shutdown()
            self._reader = None

    def _read_quietly(self, client_ids: list[str]) -> None:
        for client_id in client_ids:
            try:
                self.client_data(client_id)
            except Exception:  # noqa: BLE001, S112 (the round's own read of this user raises it again)
                continue

    def num_examples(self, client_id: str) -> int:
        return self.dataset.num_examples(client_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "_clients", "_lock", "_reader", "_reading"):
            raise AttributeError(name)  # while unpickling, before __dict__ is filled
        return getattr(self.dataset, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"], state["max_bytes"])  # type: ignore[misc]
