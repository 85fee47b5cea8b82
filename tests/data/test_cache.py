"""CachedClients: users read once and kept, least recently used dropped first, within the byte budget."""

from __future__ import annotations

import pickle
import threading

import pytest
import torch

from fedpub.data.base import ClientData
from fedpub.data.cache import CachedClients
from fedpub.data.emnist import load_emnist_split
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config


class _CountingReads:
    """A real EMNIST HDF5 split that counts the clients it reads."""

    def __init__(self, dataset):
        self.dataset, self.reads = dataset, []
        self.client_ids, self.num_classes = dataset.client_ids, dataset.num_classes

    def client_data(self, client_id: str) -> ClientData:
        self.reads.append(client_id)
        return self.dataset.client_data(client_id)

    def num_examples(self, client_id: str) -> int:
        return self.dataset.num_examples(client_id)


def _nbytes(data: ClientData) -> int:
    return data.x.numel() * data.x.element_size() + data.y.numel() * data.y.element_size()


@pytest.fixture
def train(tiny_emnist_dir):
    return _CountingReads(load_emnist_split(tiny_emnist_dir, only_digits=True)[0])


def test_a_cached_user_is_read_once_and_equals_the_file(train):
    cached = CachedClients(train, 2**30)
    a, b = train.client_ids[:2]
    first = cached.client_data(a)
    assert cached.client_data(a) is first and train.reads == [a]
    cached.client_data(b)
    assert train.reads == [a, b]
    fresh = train.dataset.client_data(a)
    assert torch.equal(first.x, fresh.x) and torch.equal(first.y, fresh.y)
    assert cached.cached_bytes == _nbytes(first) + _nbytes(cached.client_data(b))
    assert cached.client_ids == train.client_ids and cached.num_examples(a) == len(first)


class _EqualUsers:
    """Users of 10 float32 values and 1 int64 label each (48 bytes), counting reads."""

    client_ids, num_classes = ["a", "b", "c"], 2

    def __init__(self):
        self.reads = []

    def client_data(self, client_id: str) -> ClientData:
        self.reads.append(client_id)
        return ClientData(torch.full((1, 10), float(ord(client_id))), torch.zeros(1, dtype=torch.int64))

    def num_examples(self, client_id: str) -> int:
        return 1


def test_the_least_recently_used_users_leave_first_and_the_budget_holds():
    users = _EqualUsers()
    cached = CachedClients(users, 2 * 48 + 47)  # room for two users, not three
    for cid in ("a", "b", "a", "c"):  # a is used again before c comes in: b is the least recently used
        cached.client_data(cid)
    assert users.reads == ["a", "b", "c"] and cached.cached_bytes == 2 * 48
    users.reads.clear()
    for cid in ("a", "c", "b"):
        cached.client_data(cid)
    assert users.reads == ["b"]


def test_no_budget_keeps_nothing_and_a_user_larger_than_the_budget_is_not_kept(train):
    a = train.client_ids[0]
    for budget in (0, _nbytes(train.dataset.client_data(a)) - 1):
        cached = CachedClients(train, budget)
        train.reads.clear()
        cached.client_data(a)
        cached.client_data(a)
        assert train.reads == [a, a] and cached.cached_bytes == 0
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        CachedClients(train, -1)


def test_pickling_drops_the_cached_users_and_other_attributes_come_from_the_dataset(tiny_emnist_dir):
    cached = CachedClients(load_emnist_split(tiny_emnist_dir, only_digits=True)[0], 2**30)
    cid = cached.client_ids[0]
    cached.client_data(cid)
    copy = pickle.loads(pickle.dumps(cached))
    assert copy.cached_bytes == 0 and torch.equal(copy.client_data(cid).x, cached.client_data(cid).x)
    assert copy.path == cached.dataset.path  # an EmnistH5 attribute, asked of the dataset


def test_a_run_trains_the_same_model_with_and_without_the_cache(tiny_emnist_dir, tmp_path):
    models = []
    for cache_mb in (0, 64):
        cfg = tiny_config(tiny_emnist_dir, tmp_path / str(cache_mb), rounds=6, data={"cache_mb": cache_mb})
        experiment = build_experiment(cfg)
        assert isinstance(experiment.train, CachedClients) and experiment.train.max_bytes == cache_mb * 2**20
        models.append(run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name)).params)
        if cache_mb:
            assert experiment.train.cached_bytes > 0
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])


class _ThreadRecordingUsers(_EqualUsers):
    """Equal users recording which thread read each; user "bad" cannot be read."""

    client_ids = ["a", "b", "c", "bad"]

    def __init__(self):
        super().__init__()
        self.threads = []

    def client_data(self, client_id: str) -> ClientData:
        self.threads.append(threading.current_thread().name)
        if client_id == "bad":
            raise OSError("unreadable user bad")
        return super().client_data(client_id)


def test_read_ahead_fills_the_cache_in_a_background_thread_and_leaves_a_failing_user_to_its_round():
    users = _ThreadRecordingUsers()
    cached = CachedClients(users, 2**20)
    cached.read_ahead(["a", "bad", "b"])
    cached.wait()
    assert users.reads == ["a", "b"] and all(name.startswith("fedpub-read-ahead") for name in users.threads)
    assert cached.client_data("a").x[0, 0] == ord("a") and users.reads == ["a", "b"]  # a cache hit
    with pytest.raises(OSError, match="unreadable user bad"):
        cached.client_data("bad")  # the round's own read raises
    assert users.threads[-1] == threading.current_thread().name
    nothing_kept = CachedClients(users, 0)
    nothing_kept.read_ahead(["c"])
    nothing_kept.wait()
    assert "c" not in users.reads  # without room in the cache, reading ahead would be wasted


def test_a_run_reading_ahead_trains_the_same_model_and_reads_its_users_in_the_background(tiny_emnist_dir, tmp_path):
    models, background = [], []
    for prefetch in ("off", "on"):
        cfg = tiny_config(tiny_emnist_dir, tmp_path / prefetch, rounds=4, data={"prefetch": prefetch})
        experiment = build_experiment(cfg)
        recorder = _ThreadNames(experiment.train.dataset)
        experiment.train.dataset = recorder
        models.append(run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name)).params)
        background.append(sum(name.startswith("fedpub-read-ahead") for name in recorder.threads))
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
    assert background[0] == 0 and background[1] > 0
    background_threads = ("fedpub-read-ahead", "fedpub-noise-prefetch")
    assert not [t.name for t in threading.enumerate() if t.name.startswith(background_threads)]  # ended with the run


class _ThreadNames:
    """A dataset recording the thread of every read."""

    def __init__(self, dataset):
        self.dataset, self.threads = dataset, []

    def client_data(self, client_id: str) -> ClientData:
        self.threads.append(threading.current_thread().name)
        return self.dataset.client_data(client_id)


def test_preload_reads_every_user_once_and_refuses_when_they_do_not_fit():
    users = _EqualUsers()
    lines = []
    cached = CachedClients(users, 3 * 48)
    cached.preload(["a", "b", "c"], lines.append)
    assert users.reads == ["a", "b", "c"] and cached.cached_bytes == 3 * 48 and lines[-1].startswith("data.preload: 3 of 3")
    for cid in ("c", "a", "b"):
        cached.client_data(cid)
    assert users.reads == ["a", "b", "c"]  # every round's read is a cache hit
    with pytest.raises(ValueError, match=r"do not fit in data.cache_mb = .* after 3 of 3 users\); raise data.cache_mb"):
        CachedClients(_EqualUsers(), 2 * 48 + 47).preload(["a", "b", "c"])


def test_a_preloaded_run_reads_no_file_in_its_rounds_and_trains_the_same_model(tiny_emnist_dir, tmp_path):
    models, reads = [], []
    for preload in (False, True):
        cfg = tiny_config(tiny_emnist_dir, tmp_path / str(preload), rounds=4, data={"preload": preload})
        experiment = build_experiment(cfg)
        checked = experiment.train.cached_ids  # the users the preflight read (their shapes and labels)
        counting = _CountingReads(experiment.train.dataset)
        experiment.train.dataset = counting
        lines = []
        models.append(run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name), log=lines.append).params)
        reads.append(counting.reads)
        if preload:
            trained = set(experiment.private_ids) | set(experiment.public_ids)
            assert sorted(counting.reads) == sorted(trained - checked) and any("data.preload:" in line for line in lines)
            assert checked and checked <= trained
    assert len(reads[0]) < len(reads[1])  # 4 rounds sample fewer users than the whole population
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])


def test_flower_simulation_refuses_preload(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=1, data={"preload": True})
    with pytest.raises(ValueError, match="data.preload fills the in-process engine's cache"):
        run_flower_simulation(cfg, 4)
