"""Users a notebook already holds, as a :class:`~fedpub.data.base.FederatedDataset`: what
``fedpub.run(config, data=...)`` takes (``data.source: python``).

The protocol is small: an object with ``user_ids`` (any iterable of ids) and ``examples(user_id) -> (x, y)`` (the
user's inputs, first axis = examples, and integer labels), optionally ``num_classes``; or simply a mapping
``{user_id: (x, y)}``. Ids are kept as strings, sorted as TFF sorts them; examples are read when a round samples
the user (and cached as any dataset's, ``data.cache_mb``). Refused, naming ``data`` and shapes, dtypes or counts
(never an example's values): ids that are one string (``1`` and ``"1"``), labels that are not integers, a user
without examples (it would count in N); a mapping's users are all checked when it is given, an object's when read.
"""

from __future__ import annotations

from collections import Counter
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


class _Unfit(Exception):
    """A user's examples that fedpub cannot train on; the message says why by shapes and dtypes only."""


def _tensor(value: Any, name: str, kinds: str) -> torch.Tensor:
    """``value`` as a tensor; a numpy dtype kind outside ``kinds`` (strings, objects: mixed or missing values) is
    refused naming ``name`` and the dtype."""
    if isinstance(value, torch.Tensor):
        return value
    array = np.asarray(value)
    if array.dtype.kind not in kinds:
        raise _Unfit(f"{name} of dtype {array.dtype} (numbers are needed; a missing value or a string makes an "
                     "object or string array)")
    return torch.as_tensor(array)


def _examples(x: Any, y: Any) -> ClientData:
    """One user's ``(x, y)`` as fedpub trains on them: x's first axis the examples (float64 read as float32), y
    one integer label per example; at least one example."""
    x, y = _tensor(x, "x", "biuf"), _tensor(y, "y (the labels)", "biuf")
    if y.ndim != 1 or x.ndim == 0 or x.shape[0] != y.shape[0]:
        raise _Unfit(f"examples must be (x, y) with x's first axis the examples and y one label per example (N,); "
                     f"got x {tuple(x.shape)}, y {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex():
        raise _Unfit(f"y (the labels) of dtype {y.dtype}: labels are integer class indices (convert whole numbers "
                     "with y.long())")
    if len(y) == 0:
        raise _Unfit("no examples (a user without examples would be counted in N): leave such users out")
    return ClientData(x.float() if x.dtype == torch.float64 else x, y.long())


def _string_ids(ids: Iterable[Any]) -> dict[str, Any]:
    """Each id by its string (how fedpub names a user); two ids that are one string (``1`` and ``"1"``) are
    refused, naming their types and how many collide."""
    given = list(ids)
    by_string = {str(k): k for k in given}
    if len(by_string) < len(given):
        counts = Counter(str(k) for k in given)
        colliding = [k for k in given if counts[str(k)] > 1]
        types = sorted({type(k).__name__ for k in colliding})
        raise DatasetError(f"data: {len(colliding)} user ids are the same string as another id (of types "
                           f"{', '.join(types)}, e.g. 1 and '1'): fedpub names users by string, so one of each would "
                           "be dropped; give every user one distinct id")
    return by_string


class PythonUsers:
    """A :class:`~fedpub.data.base.FederatedDataset` over a :class:`UserExamples` or a ``{user_id: (x, y)}``
    mapping; ``num_classes`` is the object's own, else 0 (unknown: a registered model, which needs it, is refused
    for ``data.source: python``, so only a ``model.factory`` model reads such data)."""

    def __init__(self, users: UserExamples | Mapping[Any, tuple[Any, Any]]) -> None:
        if isinstance(users, Mapping):
            self._ids = _string_ids(users)
            self._read = users.__getitem__
        elif isinstance(users, UserExamples):
            self._ids = _string_ids(users.user_ids)
            self._read = users.examples
        else:
            raise TypeError(f"fedpub.run(data=...) takes a mapping {{user_id: (x, y)}} or an object with user_ids and "
                            f"examples(user_id) -> (x, y); got a {type(users).__name__}")
        if not self._ids:
            raise DatasetError("fedpub.run(data=...): the data has no users")
        self.client_ids = sorted(self._ids)
        self.num_classes = int(getattr(users, "num_classes", 0))
        if isinstance(users, Mapping):
            self._check_every_user()

    def _check_every_user(self) -> None:
        """Every user's examples checked now (a mapping holds them already): the first kind of problem is refused
        with how many users have it."""
        problems: Counter[str] = Counter()
        for client_id in self.client_ids:
            try:
                _examples(*self._read(self._ids[client_id]))
            except _Unfit as unfit:
                problems[str(unfit)] += 1
        if problems:
            problem, count = next(iter(problems.items()))
            raise DatasetError(f"data: {count} of {len(self.client_ids)} users: {problem}")

    def client_data(self, client_id: str) -> ClientData:
        if client_id not in self._ids:
            raise KeyError(f"client {client_id!r} is not in the data given to fedpub.run")
        try:
            return _examples(*self._read(self._ids[client_id]))
        except _Unfit as unfit:
            raise DatasetError(f"data: user {client_id!r}: {unfit}") from None

    def num_examples(self, client_id: str) -> int:
        return len(self.client_data(client_id))
