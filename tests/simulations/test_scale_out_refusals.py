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


def test_torchrun_restarts_are_refused_with_the_command_that_resumes():
    """``torchrun --max-restarts 1``: a restarted rank failed to rejoin ("Gloo connectFullMesh failed"); now the
    run is refused before it starts, saying how to resume instead."""
    from fedpub.simulations.run.distributed import launched

    assert launched({**TORCHRUN, "TORCHELASTIC_MAX_RESTARTS": "0"}) is not None
    with pytest.raises(ValueError, match=r"^torchrun --max-restarts 1: fedpub's ranks cannot be restarted .* run the "
                                         r"same command again after a failure: it resumes from the last checkpoint"):
        launched({**TORCHRUN, "TORCHELASTIC_MAX_RESTARTS": "1"})


def test_ranks_on_several_machines_say_who_is_inside_the_trust_boundary():
    from fedpub.simulations.run.distributed import launched

    one_machine = launched({**TORCHRUN, "LOCAL_WORLD_SIZE": "2"})
    two_machines = launched({**TORCHRUN, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert one_machine is not None and one_machine.trust_statement() is None
    assert two_machines is not None and two_machines.trust_statement().startswith(
        "the 4 ranks span several machines: the privacy seed, each round's model and the clipped sums cross their "
        "network unencrypted")
