"""What a scale-out run cannot do right is refused up front (issue 44, item 6): OpenDP's noise under torchrun (each
rank would draw other noise from its own OS randomness; the run used to stop before round 1 blaming mixed GPU
libraries), refused by ``fedpub run`` before any data is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedpub.config import dump_config
from fedpub.simulations.run.backends import check_config_for
from fedpub.simulations.tools.cli import app
from tests.conftest import tiny_config

TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}


def _opendp(tmp_path: Path):
    return tiny_config(tmp_path / "data", tmp_path, privacy={"delta": 1e-5, "noise_sampler": "opendp",
                                                             "randomness": "secret"})


def test_the_opendp_sampler_is_refused_under_torchrun_and_taken_in_one_process(tmp_path, monkeypatch):
    config = _opendp(tmp_path)
    check_config_for("inprocess", config)  # one process: its own draws are the run's
    for name, value in TORCHRUN.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"^privacy.noise_sampler `opendp` draws from each process's own OS "
                                         r"randomness, so torchrun's ranks would add different noise"):
        check_config_for("inprocess", config)


def test_fedpub_run_under_torchrun_refuses_it_in_one_line_before_reading_data(tmp_path):
    path = tmp_path / "opendp.yaml"
    path.write_text(dump_config(_opendp(tmp_path)))
    result = CliRunner().invoke(app, ["run", str(path)], env=TORCHRUN)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: rank 0: privacy.noise_sampler `opendp`") and \
        len(result.output.strip().splitlines()) <= 3
    assert not (tmp_path / "data").exists() and not (tmp_path / "tiny").exists()  # no data read, nothing written
