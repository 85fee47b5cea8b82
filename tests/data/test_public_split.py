"""Public users: seeded splits (disjoint, complete, exact size, deterministic), SO held-out pool, DOPE's users."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub.data.base import ClientData, FederatedDataset
from fedpub.data.emnist import load_emnist_split
from fedpub.data.public_split import UniformUsers, heldout_as_public, split_evaluation, split_public

ids_strategy = st.lists(
    st.text(alphabet="abcdef0123456789_", min_size=1, max_size=8), min_size=1, max_size=60, unique=True
)


@settings(max_examples=150, deadline=None)
@given(ids=ids_strategy, fraction=st.floats(0.0, 0.999), seed=st.integers(0, 2**32), data=st.data())
def test_split_properties(ids: list[str], fraction: float, seed: int, data: st.DataObject) -> None:
    n_public = round(fraction * len(ids))
    if n_public >= len(ids):
        with pytest.raises(ValueError, match="leaves no private user"):
            split_public(ids, fraction, seed)
        return
    private, public = split_public(ids, fraction, seed)
    assert not set(private) & set(public)
    assert sorted(private + public) == sorted(ids)
    assert len(public) == n_public
    assert private == sorted(private) and public == sorted(public)
    shuffled = data.draw(st.permutations(ids))
    assert split_public(shuffled, fraction, seed) == (private, public)  # depends on the set, not the order


def test_different_seeds_choose_different_users() -> None:
    ids = [f"f{i:04d}_00" for i in range(500)]
    splits = {tuple(split_public(ids, 0.02, seed)[1]) for seed in range(5)}
    assert len(splits) == 5 and all(len(s) == 10 for s in splits)


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5, float("nan")])
def test_fraction_outside_unit_interval(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"must be in \[0, 1\)"):
        split_public(["a", "b"], fraction, 0)


def test_degenerate_splits() -> None:
    assert split_public(["b", "a"], 0.0, 0) == (["a", "b"], [])
    with pytest.raises(ValueError, match="leaves no private user"):
        split_public([], 0.5, 0)
    with pytest.raises(ValueError, match="leaves no private user"):
        split_public(["a", "b"], 0.75, 0)
    with pytest.raises(ValueError, match="unique"):
        split_public(["a", "a", "b"], 0.5, 0)


@settings(max_examples=100, deadline=None)
@given(ids=ids_strategy, fraction=st.floats(0.0, 0.9), seed=st.integers(0, 2**32), data=st.data())
def test_evaluation_users_depend_on_their_own_id_alone(ids: list[str], fraction: float, seed: int,
                                                        data: st.DataObject) -> None:
    """Adding or removing a user moves no other user across (the released evaluation stays the same)."""
    try:
        private, evaluation = split_evaluation(ids, fraction, seed)
    except ValueError as error:
        assert "no private user left" in str(error)
        return
    assert not set(private) & set(evaluation) and sorted(private + evaluation) == sorted(ids)
    removed = data.draw(st.sampled_from(ids))
    rest = [c for c in ids if c != removed]
    if set(rest) <= set(evaluation):  # only evaluation users left (or none): no private user
        with pytest.raises(ValueError, match="no private user left"):
            split_evaluation(rest, fraction, seed)
        return
    smaller = split_evaluation(rest, fraction, seed)
    assert smaller == ([c for c in private if c != removed], [c for c in evaluation if c != removed])


def test_evaluation_users_are_about_the_fraction() -> None:
    ids = [f"f{i:04d}" for i in range(2000)]
    assert 160 <= len(split_evaluation(ids, 0.1, 0)[1]) <= 240  # 200 expected, std 13
    assert split_evaluation(ids, 0.1, 0) != split_evaluation(ids, 0.1, 1)
    with pytest.raises(ValueError, match="must be in"):
        split_evaluation(ids, 1.0, 0)


def test_heldout_as_public() -> None:
    assert heldout_as_public(["03", "01", "02"], ["20", "10"]) == (["01", "02", "03"], ["10", "20"])
    with pytest.raises(ValueError, match=r"1 user\(s\) are both train \(private\) and held-out \(public\): 02"):
        heldout_as_public(["01", "02"], ["02", "10"])
    with pytest.raises(ValueError, match="no private users"):
        heldout_as_public([], ["10"])


class CountingDataset:
    """A small FederatedDataset whose every example is unique (x holds (client index, row)); counts reads."""

    num_classes = 10

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.client_ids = sorted(sizes)
        self.reads: list[str] = []

    def num_examples(self, client_id: str) -> int:
        return self.sizes[client_id]

    def client_data(self, client_id: str) -> ClientData:
        self.reads.append(client_id)
        n, k = self.sizes[client_id], self.client_ids.index(client_id)
        x = torch.zeros(n, 1, 2, 2)
        x[:, 0, 0, 0] = float(k)
        x[:, 0, 0, 1] = torch.arange(n, dtype=torch.float32)
        return ClientData(x=x, y=torch.arange(n, dtype=torch.int64) % 10)


SIZES = {"f0002_00": 7, "f0000_00": 13, "f0001_00": 1, "f0003_00": 22}


@pytest.mark.parametrize("num_users", [1, 5, 7, 43])
def test_uniform_users_deal_every_example_once(num_users: int) -> None:
    source = CountingDataset(SIZES)
    users = UniformUsers(source, num_users=num_users, seed=3)
    assert isinstance(users, FederatedDataset) and users.num_classes == 10
    assert len(users.client_ids) == num_users and users.client_ids == sorted(users.client_ids)
    sizes = [users.num_examples(u) for u in users.client_ids]
    assert sum(sizes) == 43 and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    origins = [o for u in users.client_ids for o in users.origin(u)]
    assert sorted(origins) == sorted((c, r) for c, n in SIZES.items() for r in range(n))
    for user in users.client_ids:
        data = users.client_data(user)
        assert len(data) == users.num_examples(user)
        got = [(source.client_ids[int(a)], int(b)) for a, b in data.x[:, 0, 0, :2].tolist()]
        assert got == users.origin(user)
        assert data.y.tolist() == [r % 10 for _, r in users.origin(user)]


def test_uniform_users_are_seeded_and_shuffled() -> None:
    source = CountingDataset(SIZES)
    a, b, c = (UniformUsers(source, 10, seed=s) for s in (1, 1, 2))
    assert [a.origin(u) for u in a.client_ids] == [b.origin(u) for u in b.client_ids]
    assert [a.origin(u) for u in a.client_ids] != [c.origin(u) for u in c.client_ids]
    dealt = [o for u in a.client_ids for o in a.origin(u)]
    assert dealt != sorted(dealt)  # shuffled, not dealt in source order


def test_uniform_users_load_sources_lazily_with_a_small_cache() -> None:
    source = CountingDataset(SIZES)
    users = UniformUsers(source, num_users=43, seed=0, cache_clients=2)
    assert source.reads == []  # building the index reads no example
    for user in users.client_ids:
        users.client_data(user)
    assert len(users._cache) == 2
    assert 4 <= len(source.reads) < 43  # hits avoid reloading; misses reload evicted clients
    clone = pickle.loads(pickle.dumps(users))
    assert len(clone._cache) == 0 and clone.origin("u00") == users.origin("u00")


def test_uniform_users_ids_and_errors() -> None:
    source = CountingDataset(SIZES)
    assert UniformUsers(source, 12, seed=0).client_ids[:3] == ["u00", "u01", "u02"]
    with pytest.raises(ValueError, match=r"num_users must be in \[1, 43\]"):
        UniformUsers(source, 44, seed=0)
    with pytest.raises(ValueError, match="num_users"):
        UniformUsers(source, 0, seed=0)
    with pytest.raises(KeyError, match="u99"):
        UniformUsers(source, 5, seed=0).client_data("u99")


def test_dope_construction_on_emnist_with_two_percent_public(tiny_emnist_dir: Path) -> None:
    train, _ = load_emnist_split(tiny_emnist_dir, only_digits=True)
    with train:
        total = sum(train.num_examples(c) for c in train.client_ids)
        users = UniformUsers(train, num_users=50, seed=0)
        private, public = split_public(users.client_ids, 0.02, seed=0)
        assert len(public) == 1 and len(private) == 49
        pooled = np.concatenate([users.client_data(u).y.numpy() for u in users.client_ids])
        original = np.concatenate([train.client_data(c).y.numpy() for c in train.client_ids])
        assert len(pooled) == total and np.array_equal(np.bincount(pooled), np.bincount(original))
        assert users.client_data(public[0]).x.shape[1:] == (1, 28, 28)
