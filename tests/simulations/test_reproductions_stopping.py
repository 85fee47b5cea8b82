"""A Ctrl-C between a reproduction's steps is honoured at the next step and never lost (the issue-45 notes: a
KeyboardInterrupt raised inside a finalizer was printed and dropped); a second one stops at once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from fedpub.config import parse_config
from fedpub.simulations.reproductions.row_cache import RowCache
from fedpub.simulations.reproductions.stopping import check, stops_between_steps


def _signal_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs on the main thread's next instruction


def test_the_first_signal_is_recorded_for_the_next_step_and_the_second_stops_at_once():
    before = signal.getsignal(signal.SIGINT)  # the default handler, or SIG_IGN where the suite runs in the background
    with stops_between_steps():
        check()  # nothing asked yet
        _signal_self()  # recorded: this line returns
        with pytest.raises(KeyboardInterrupt, match="SIGINT received"):
            check()
        with pytest.raises(KeyboardInterrupt):
            _signal_self()
    check()  # the block's request ends with it
    assert signal.getsignal(signal.SIGINT) is before


def test_a_row_being_computed_when_the_signal_comes_is_kept_and_the_next_one_stops(tmp_path):
    config = parse_config({"name": "x", "output_dir": str(tmp_path), "data": {"source": "synthetic_emnist"},
                           "model": {"name": "emnist_softmax"},
                           "strategy": {"name": "dp_fedavg", "noise_multiplier": 1.0}}, "test")
    kept = RowCache(tmp_path / "kept")

    def interrupted() -> dict[str, float]:
        _signal_self()
        return {"eval_accuracy": 0.5}

    with stops_between_steps():
        assert kept.metrics("first", config, {}, interrupted) == {"eval_accuracy": 0.5}
        with pytest.raises(KeyboardInterrupt):
            kept.metrics("second", config, {}, lambda: pytest.fail("computed after the stop was asked"))
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["first.json"]
