"""A run directory's ``checkpoint.pt`` is data, never code, and resumes only the run that wrote it (issue 32): a
planted pickle does not run, a checkpoint of another config or model is refused naming what differs, a truncated or
foreign file is refused naming it. Real runs on the tiny dataset, real torch files, the real CLI."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from fedpub.config import dump_config
from fedpub.models.seeded import model_params
from fedpub.simulations.tools.cli import app
from fedpub.simulations.run.engine import RunDirectoryError, run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

runner = CliRunner()


def _write_marker(path: str) -> None:
    Path(path).write_text("checkpoint.pt ran code")


class _Payload:
    """Unpickled in full, it calls :func:`_write_marker`: what a planted ``checkpoint.pt`` can run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return _write_marker, (str(self.marker),)


def _run(cfg):
    return run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name))


@pytest.fixture
def checkpoint(tiny_emnist_dir: Path, tmp_path: Path) -> bytes:
    """The checkpoint of a finished 1-round run of ``tiny_config`` (seed 3, z = 0.8) written in ``tmp_path/tiny``,
    whose files are then removed."""
    _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=1))
    written = (tmp_path / "tiny" / "checkpoint.pt").read_bytes()
    shutil.rmtree(tmp_path / "tiny")
    return written


def _dropped(root: Path, content: bytes) -> Path:
    """``content`` as the only file of the run directory ``root`` (downloaded, or dropped there)."""
    root.mkdir(parents=True)
    (root / "checkpoint.pt").write_bytes(content)
    return root / "checkpoint.pt"


def test_a_planted_pickle_in_checkpoint_pt_does_not_run(tiny_emnist_dir, tmp_path):
    marker = tmp_path / "marker"
    planted = tmp_path / "runs" / "tiny" / "checkpoint.pt"
    planted.parent.mkdir(parents=True)
    torch.save({"rounds_done": 1, "params": _Payload(marker)}, planted)
    torch.load(planted, weights_only=False)  # the payload is live: a full unpickling runs it
    assert marker.exists()
    marker.unlink()

    with pytest.raises(RunDirectoryError) as refused:
        _run(tiny_config(tiny_emnist_dir, tmp_path / "runs"))
    assert str(refused.value).startswith(f"{planted} cannot be resumed from: it holds objects other than tensors")
    assert "(it asks for tests.simulations.test_checkpoint_trust._write_marker)" in str(refused.value)
    config = tmp_path / "exp.yaml"
    config.write_text(dump_config(tiny_config(tiny_emnist_dir, tmp_path / "runs")))
    for command in (["run", str(config), "--dry-run"], ["run", str(config)]):
        result = runner.invoke(app, command)
        assert f"{planted} cannot be resumed from" in result.output, result.output
    assert result.exit_code == 2
    assert not marker.exists()


def test_a_checkpoint_of_another_config_is_refused_naming_the_keys_that_differ(checkpoint, tiny_emnist_dir, tmp_path):
    dropped = _dropped(tmp_path / "tiny", checkpoint)
    other = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, seed=4, strategy={"noise_multiplier": 1.2})
    with pytest.raises(RunDirectoryError) as refused:
        _run(other)
    assert str(refused.value) == (
        f"{dropped} was written by a run of another config (changed: seed, rounds, strategy.noise_multiplier); it "
        "cannot resume this run: remove it, use another `name`, or --fresh"
    )
    config = tmp_path / "exp.yaml"
    config.write_text(dump_config(other))
    dry = runner.invoke(app, ["run", str(config), "--dry-run"])
    assert dry.exit_code == 0 and f"refused: {refused.value}" in dry.output, dry.output
    assert sorted(p.name for p in dropped.parent.iterdir()) == ["checkpoint.pt"]  # nothing written

    same = tiny_config(tiny_emnist_dir, tmp_path, rounds=2)  # the config that wrote it, two rounds now
    with pytest.raises(RunDirectoryError, match=r"\(changed: rounds\)"):
        _run(same)
    assert _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=1)).rounds_done == 1  # its own config resumes it


def test_a_checkpoint_of_another_model_is_refused_naming_the_parameters(checkpoint, tiny_emnist_dir, tmp_path):
    dropped = _dropped(tmp_path / "tiny", checkpoint)
    written = torch.load(dropped, weights_only=True)
    mlp = tiny_config(tiny_emnist_dir, tmp_path, model={"name": "emnist_mlp"})
    written["params"] = model_params(build_experiment(mlp).new_model())  # the same config, another model's weights
    torch.save(written, dropped)
    cnn = model_params(build_experiment(tiny_config(tiny_emnist_dir, tmp_path)).new_model())
    with pytest.raises(RunDirectoryError) as refused:
        _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=1))
    message = str(refused.value)
    assert message.startswith(f"{dropped} holds another model than this run's: ")
    differ = [name for name in {**cnn, **written["params"]}
              if name not in cnn or name not in written["params"] or cnn[name].shape != written["params"][name].shape]
    assert len(differ) == 10 and all(f"{name} (" in message for name in differ[:8])  # the first 8 named
    assert message.endswith("; and 2 more; remove it, use another `name`, or --fresh")
    first = next(iter(cnn))
    mlp_first = "absent" if first not in written["params"] else f"float32{list(written['params'][first].shape)}"
    assert f"{first} ({mlp_first} in the checkpoint, float32{list(cnn[first].shape)} in the model)" in message


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (lambda good: good[: len(good) // 2], "cannot be resumed from: it is cut short or not a torch file ("),
        (lambda good: b"", "cannot be resumed from: it is cut short or not a torch file (EOFError)"),
        (lambda good: b"a text file\n", "cannot be resumed from: it is cut short or not a torch file"),
        (lambda good: _saved(torch.ones(3)), "is not a fedpub checkpoint (it holds a Tensor, not a dict)"),
        (lambda good: _saved({k: v for k, v in torch.load(io.BytesIO(good), weights_only=True).items()
                              if k != "config"}),
         "is not a checkpoint of this fedpub (it lacks config): an older fedpub or another program wrote it"),
    ],
    ids=["truncated", "empty", "text", "a tensor", "no config"],
)
def test_a_truncated_or_foreign_checkpoint_is_refused_naming_the_file(
    content, error, checkpoint, tiny_emnist_dir, tmp_path
):
    dropped = _dropped(tmp_path / "tiny", content(checkpoint))
    with pytest.raises(RunDirectoryError) as refused:
        _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=1))
    assert str(refused.value).startswith(f"{dropped} {error}"), refused.value
    assert str(refused.value).endswith("--fresh")


def _saved(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


class _Stop(Exception):
    pass


def _cut_after_two_rounds(tiny_emnist_dir: Path, tmp_path: Path):
    """A 4-round run stopped after its second round's checkpoint: its config and checkpoint file."""
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=4, checkpoint_every=1)

    def stop(record):
        if record["round"] == 1:  # round 2's record: written and checkpointed
            raise _Stop

    with pytest.raises(_Stop):
        run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name), on_round=stop)
    path = tmp_path / "tiny" / "checkpoint.pt"
    return cfg, path


@pytest.mark.parametrize("edit, says", [
    (lambda a: a.update(groups=[], rounds=0), "composed 0 rounds but the checkpoint says 2"),
    (lambda a: a["groups"][0].update(count=1), "prices the 2 rounds run at ε = .*, below the ε = "),
    (lambda a: a.update(accountant="rdp"), "its accountant is not this run's"),
    (lambda a: a.pop("groups"), "its accountant cannot be read"),
])
def test_an_emptied_or_edited_accountant_in_a_checkpoint_is_refused_never_resumed(tiny_emnist_dir, tmp_path, edit,
                                                                                   says):
    """Issue 44, item 9: a mid-run checkpoint whose accountant was emptied resumed silently and the ledger then
    under-reported ε; now the accountant must be the config's kind, count the rounds done and cost at least their
    planned events."""
    cfg, path = _cut_after_two_rounds(tiny_emnist_dir, tmp_path)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["rounds_done"] == 2  # the edit below is of a real mid-run checkpoint
    edit(checkpoint["accountant"])
    torch.save(checkpoint, path)
    with pytest.raises(RunDirectoryError, match=says):
        _run(cfg)


def test_the_untouched_checkpoint_of_that_cut_run_resumes(tiny_emnist_dir, tmp_path):
    cfg, _ = _cut_after_two_rounds(tiny_emnist_dir, tmp_path)
    assert _run(cfg).rounds_done == 4
