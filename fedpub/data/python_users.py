"""Users a notebook already holds, as a :class:`~fedpub.data.base.FederatedDataset`: what
``fedpub.run(config, data=...)`` takes (``data.source: python``).

The protocol is small: an object with ``user_ids`` (any iterable of ids) and ``examples(user_id) -> (x, y)`` (the
user's inputs, first axis = examples, and integer labels), optionally ``num_classes``; or simply a mapping
``{user_id: (x, y)}``. Ids are kept as strings, sorted as TFF sorts them; examples are read when a round samples
the user (and cached as any dataset's, ``data.cache_mb``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from fedpub.data.base import ClientData, DatasetError


@runtime_checkable
class UserExamples(Protocol):
    """What ``fedpub.run(data=...)`` reads: the users' ids, and one user's examples."""

    user_ids: Iterable[Any]

    def examples(self, user_id: Any) -> tuple[Any, Any]: ...


def _tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


class PythonUsers:
    """A :class:`~fedpub.data.base.FederatedDataset` over a :class:`UserExamples` or a ``{user_id: (x, y)}``
    mapping; ``num_classes`` is the object's own, else 0 (unknown: a registered model, which needs it, is refused
    for ``data.source: python``, so only a ``model.factory`` model reads such data)."""

    def __init__(self, users: UserExamples | Mapping[Any, tuple[Any, Any]]) -> None:
        if isinstance(users, Mapping):
            self._ids = {str(k): k for k in users}
            self._read = users.__getitem__
        elif isinstance(users, UserExamples):
            self._ids = {str(k): k for k in users.user_ids}
            self._read = users.examples
        else:
            raise TypeError(f"fedpub.run(data=...) takes a mapping {{user_id: (x, y)}} or an object with user_ids and "
                            f"examples(user_id) -> (x, y); got a {type(users).__name__}")
        if not self._ids:
            raise DatasetError("fedpub.run(data=...): the data has no users")
        self.client_ids = sorted(self._ids)
        self.num_classes = int(getattr(users, "num_classes", 0))

    def client_data(self, client_id: str) -> ClientData:
        if client_id not in self._ids:
            raise KeyError(f"client {client_id!r} is not in the data given to fedpub.run")
        x, y = self._read(self._ids[client_id])
        x, y = _tensor(x), _tensor(y)
        if y.ndim != 1 or x.shape[0] != y.shape[0] or y.is_floating_point():
            raise DatasetError(f"user {client_id!r}: examples must be (x, y) with x's first axis the examples and y "
                               f"integer labels (N,); got x {tuple(x.shape)}, y {tuple(y.shape)} {y.dtype}")
        return ClientData(x.float() if x.dtype == torch.float64 else x, y.long())

    def num_examples(self, client_id: str) -> int:
        return len(self.client_data(client_id))
