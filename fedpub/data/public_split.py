"""Public users, kept out of the private population (docs/design.md §5): the split is data, fixed by a seed.

Three constructions:

- :func:`split_public`: a seeded fraction of the training users are public (DOPE-SGD uses 2%); and
  :func:`split_validation` and :func:`split_evaluation`, seeded fractions of the private users held out of N as
  validation users and as evaluation users (the latter one user at a time: a user's side depends on its id alone).
- :func:`heldout_as_public`: a dataset's held-out split (where its declaration has one, :mod:`fedpub.data.registry`)
  is the public pool and the train split the private population; the two must not share a user.
- :class:`UniformUsers`: DOPE-SGD's federated setting (Nasr et al., ICML'23, "Effectively Using Public Data
  in Privacy Preserving ML", §"Extending to Federated Learning with User-Level Privacy", Table 7: 70,000 users among
  whom the instances of a handwriting dataset are divided uniformly, a fixed 2% of them non-private). No code was
  published (datasets.md §6); this is our construction: pool every example of a federated dataset, shuffle them with
  a seed, and deal them out as K synthetic users whose sizes differ by at most one. Which split the paper pooled is
  unknown; combine with :func:`split_public` for the 2%.

Randomness comes only from ``fedpub.seeding`` (``numpy_generator(seed, purpose)``, ``derive_seed``), so a seed fixes
the split.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedpub.data.base import ClientData, FederatedDataset
from fedpub.seeding import derive_seed, numpy_generator


def split_public(client_ids: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Choose ``round(fraction * N)`` public users uniformly at random; returns sorted (private, public).

    The result depends only on the set of ids, ``fraction`` and ``seed`` (not on the input order). ``round`` is
    Python's (halves to even). Raises ValueError for a fraction outside [0, 1), duplicate ids, or a split that
    leaves no private user.
    """
    return _seeded_split(client_ids, fraction, seed, "public")


def listed_public(client_ids: Sequence[str], listed: Sequence[str], where: str) -> tuple[list[str], list[str]]:
    """The users ``listed`` (by ``where``) public, the others private; returns sorted (private, public). Raises
    ValueError naming ids that are no training user, or a list that leaves no private user."""
    known = set(client_ids)
    unknown = sorted(set(listed) - known)
    if unknown:
        raise ValueError(f"{where}: {len(unknown)} listed public user(s) are no training user: {', '.join(unknown[:5])}")
    public = set(listed)
    if len(public) == len(known):
        raise ValueError(f"{where}: every training user is public, none is left private")
    return sorted(known - public), sorted(public)


def split_validation(private_ids: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Hold out ``round(fraction * N)`` of the private users as validation users; returns sorted (private,
    validation). Like :func:`split_public` (its own seeded draw): the validation users leave the private population
    N, are never sampled nor trained on, and only evaluate (the reproductions tune on them, never on the test
    split)."""
    return _seeded_split(private_ids, fraction, seed, "validation")


def split_evaluation(private_ids: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Hold out each private user as an evaluation user with probability ``fraction``, a draw seeded by ``seed`` and
    the user's own id alone; returns sorted (private, evaluation). The evaluation users leave the private population
    N, are never sampled nor trained on, and their test examples evaluate the model. Since no user's side depends
    on who else is in the data, adding or removing a private user changes neither the evaluation users nor the
    released evaluation (a split by rank, as :func:`split_validation`'s, would move others across)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the evaluation fraction must be in [0, 1), got {fraction}")
    ids = sorted(private_ids)
    if len(set(ids)) != len(ids):
        raise ValueError("client ids must be unique")
    held_out = {c for c in ids if derive_seed(seed, "evaluation_split", c) < fraction * 2**63}
    if len(held_out) == len(ids):
        raise ValueError(f"an evaluation fraction of {fraction} holds out all {len(ids)} users: no private user left")
    return [c for c in ids if c not in held_out], [c for c in ids if c in held_out]


def _seeded_split(client_ids: Sequence[str], fraction: float, seed: int, kind: str) -> tuple[list[str], list[str]]:
    """(the rest, the chosen): ``round(fraction * N)`` of the ids drawn with the generator of ``<kind>_split``."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the {kind} fraction must be in [0, 1), got {fraction}")
    ids = sorted(client_ids)
    if len(set(ids)) != len(ids):
        raise ValueError("client ids must be unique")
    num_chosen = round(fraction * len(ids))
    if num_chosen >= len(ids):
        raise ValueError(
            f"a {kind} fraction of {fraction} of {len(ids)} users makes {num_chosen} {kind} and leaves no private user"
        )
    chosen = numpy_generator(seed, f"{kind}_split").permutation(len(ids))[:num_chosen]
    is_chosen = np.zeros(len(ids), dtype=bool)
    is_chosen[chosen] = True
    return [c for c, p in zip(ids, is_chosen) if not p], [c for c, p in zip(ids, is_chosen) if p]


def heldout_as_public(train_ids: Sequence[str], heldout_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """The train users are private, the held-out users public; returns sorted (private, public).

    Raises ValueError when the lists share a user (a public user must not be in the private population) or when
    there is no private user.
    """
    private, public = sorted(set(train_ids)), sorted(set(heldout_ids))
    if not private:
        raise ValueError("no private users: the train id list is empty")
    overlap = sorted(set(private) & set(public))
    if overlap:
        shown = ", ".join(overlap[:5]) + (", ..." if len(overlap) > 5 else "")
        raise ValueError(f"{len(overlap)} user(s) are both train (private) and held-out (public): {shown}")
    return private, public


class UniformUsers:
    """A :class:`FederatedDataset` of ``num_users`` synthetic users holding a seeded uniform deal of all examples.

    Every example of ``source`` goes to exactly one user; user sizes differ by at most one (the first
    ``M mod K`` users, in id order, get the extra example). Only an index of (source client, row) per user is
    kept; ``client_data`` loads the source clients it needs, keeping the last ``cache_clients`` of them.
    User ids are ``u0``, ``u1``, ... zero-padded so that lexicographic order is numeric order.
    """

    def __init__(self, source: FederatedDataset, num_users: int, seed: int, *, cache_clients: int = 32) -> None:
        counts = np.array([source.num_examples(c) for c in source.client_ids], dtype=np.int64)
        total = int(counts.sum())
        if not 1 <= num_users <= total:
            raise ValueError(f"num_users must be in [1, {total}] (the number of examples), got {num_users}")
        if cache_clients < 1:
            raise ValueError(f"cache_clients must be >= 1, got {cache_clients}")
        self.source = source
        self.num_classes = source.num_classes
        self.cache_clients = cache_clients
        starts = np.cumsum(counts) - counts
        source_index = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        row = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        order = numpy_generator(seed, "uniform_users").permutation(total)
        self._source_index = source_index[order]
        self._row = row[order]
        base, extra = divmod(total, num_users)
        sizes = np.full(num_users, base, dtype=np.int64)
        sizes[:extra] += 1
        self._bounds = np.concatenate([[0], np.cumsum(sizes)])
        width = len(str(num_users - 1))
        self.client_ids: list[str] = [f"u{k:0{width}d}" for k in range(num_users)]
        self._position = {c: k for k, c in enumerate(self.client_ids)}
        self._cache: OrderedDict[str, ClientData] = OrderedDict()

    def _slice(self, client_id: str) -> slice:
        try:
            k = self._position[client_id]
        except KeyError:
            raise KeyError(f"user {client_id!r} is not one of the {len(self.client_ids)} uniform users") from None
        return slice(int(self._bounds[k]), int(self._bounds[k + 1]))

    def num_examples(self, client_id: str) -> int:
        """Number of examples dealt to ``client_id`` (nothing is read)."""
        s = self._slice(client_id)
        return s.stop - s.start

    def origin(self, client_id: str) -> list[tuple[str, int]]:
        """(source client id, row in that client) of each of the user's examples, in the user's order."""
        s = self._slice(client_id)
        ids = self.source.client_ids
        return [(ids[i], int(r)) for i, r in zip(self._source_index[s], self._row[s])]

    def _load(self, source_id: str) -> ClientData:
        if source_id in self._cache:
            self._cache.move_to_end(source_id)
        else:
            self._cache[source_id] = self.source.client_data(source_id)
            if len(self._cache) > self.cache_clients:
                self._cache.popitem(last=False)
        return self._cache[source_id]

    def client_data(self, client_id: str) -> ClientData:
        """The user's examples, in dealt order, gathered from the source clients."""
        s = self._slice(client_id)
        source_index, rows = self._source_index[s], self._row[s]
        x: torch.Tensor | None = None
        y: torch.Tensor | None = None
        for i in np.unique(source_index):
            positions = np.flatnonzero(source_index == i)
            data = self._load(self.source.client_ids[i])
            if x is None or y is None:
                x = data.x.new_empty((len(rows), *data.x.shape[1:]))
                y = data.y.new_empty((len(rows), *data.y.shape[1:]))
            take = torch.from_numpy(rows[positions])
            x[torch.from_numpy(positions)] = data.x[take]
            y[torch.from_numpy(positions)] = data.y[take]
        assert x is not None and y is not None  # every user holds at least one example
        return ClientData(x=x, y=y)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = OrderedDict()
        return state

    def __repr__(self) -> str:
        return f"UniformUsers({self.source!r}, num_users={len(self.client_ids)})"
