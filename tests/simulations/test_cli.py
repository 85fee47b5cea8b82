"""The command line, through typer's runner (the real commands, the real accountant)."""

from __future__ import annotations

import re

import dp_accounting
import pytest
import torch
from dp_accounting import pld, rdp
from typer.testing import CliRunner

from fedpub.simulations.tools.cli import app

runner = CliRunner()


def _numbers(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in re.findall(r"(PLD|RDP)\s*│\s*([0-9.]+)", text)}


def test_account_matches_dp_accounting_for_both_accountants():
    result = runner.invoke(app, ["account", "--q", "0.01", "--noise-multiplier", "1.1", "--rounds", "10000", "--delta", "1e-5"])
    assert result.exit_code == 0, result.output
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 10000
    )
    got = _numbers(result.output)
    assert got["RDP"] == pytest.approx(rdp.RdpAccountant().compose(event).get_epsilon(1e-5), abs=1e-4)
    assert got["PLD"] == pytest.approx(pld.PLDAccountant().compose(event).get_epsilon(1e-5), abs=1e-4)
    assert got["RDP"] == pytest.approx(5.6320, abs=1e-4) and got["PLD"] == pytest.approx(5.1926, rel=1e-3)


def test_account_fixed_size_reports_rdp_only():
    result = runner.invoke(app, ["account", "--population", "3400", "--cohort", "100", "-z", "1.0", "-T", "1500"])
    assert result.exit_code == 0, result.output
    assert _numbers(result.output)["RDP"] == pytest.approx(145.519, abs=1e-3)
    assert "unsupported" in result.output


def test_account_cyclic_fixed_size_prices_the_groups_rounds_with_dp_accounting():
    result = runner.invoke(app, ["account", "--population", "400", "--cohort", "10", "--groups", "4", "-z", "1.0",
                                 "-T", "100"])
    assert result.exit_code == 0, result.output
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.GaussianDpEvent(0.5)), 25)
    expected = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE).compose(event)
    assert _numbers(result.output)["RDP"] == pytest.approx(expected.get_epsilon(1e-5), abs=1e-4)
    assert "groups=4" in result.output and "unsupported" in result.output


def test_account_without_sampling_is_a_clear_error():
    result = runner.invoke(app, ["account", "-z", "1.0", "-T", "10"])
    assert result.exit_code == 2 and "--q" in result.output


def test_calibrate_reaches_the_target():
    result = runner.invoke(app, ["calibrate", "--target-epsilon", "2", "--q", "0.05", "--rounds", "100", "--accountant", "rdp"])
    assert result.exit_code == 0, result.output
    z = float(re.search(r"z = ([0-9.]+)", result.output).group(1))
    event = lambda z: dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(z)), 100)
    assert rdp.RdpAccountant().compose(event(z)).get_epsilon(1e-5) <= 2.0 + 1e-6
    assert rdp.RdpAccountant().compose(event(z * 0.99)).get_epsilon(1e-5) > 2.0


def test_run_with_a_bad_config_names_the_field_and_writes_nothing(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(f"output_dir: {tmp_path / 'runs'}\nstrategy: {{noise_multiplier: 1, clip_nrm: 2}}\n")
    result = runner.invoke(app, ["run", str(config)])
    assert result.exit_code == 2
    assert "unknown key `strategy.clip_nrm`" in result.output
    assert not (tmp_path / "runs").exists()


def test_run_refuses_allocator_tuning_outside_the_in_process_backend(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(f"output_dir: {tmp_path / 'runs'}\nstrategy: {{noise_multiplier: 1}}\n")
    result = runner.invoke(app, ["run", str(config), "--backend", "flower", "--tune-allocator"])
    assert result.exit_code == 2
    assert "--tune-allocator" in result.output and "--backend inprocess" in result.output
    assert not (tmp_path / "runs").exists()


def _run_on_emnist_files(tmp_path, data_dir):
    config = tmp_path / "exp.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'runs'}\ndata: {{source: emnist_h5, path: {data_dir}}}\nstrategy: {{noise_multiplier: 1}}\n"
    )
    return runner.invoke(app, ["run", str(config)])


def test_run_with_missing_data_names_the_file(tmp_path):
    result = _run_on_emnist_files(tmp_path, tmp_path / "nowhere")
    assert result.exit_code == 2
    assert "fed_emnist_digitsonly_train.h5" in result.output
    assert not (tmp_path / "runs").exists()


def test_run_with_a_corrupt_data_file_names_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"fed_emnist_digitsonly_{split}.h5").write_bytes(b"not an hdf5 file at all")
    result = _run_on_emnist_files(tmp_path, data)
    assert result.exit_code == 2 and "fed_emnist_digitsonly_train.h5" in result.output
    assert not (tmp_path / "runs").exists()


def test_run_end_to_end_prints_accuracy_and_epsilon(tiny_emnist_dir, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(
        f"name: cli\nrounds: 2\noutput_dir: {tmp_path / 'runs'}\ndevice: cpu\n"
        f"data: {{path: {tiny_emnist_dir}, synthetic: {{num_writers: 16, min_examples: 6, max_examples: 12, seed: 1}}, eval_clients: 4}}\n"
        "strategy: {target_epsilon: 5.0, sampling: {clients_per_round: 4}}\n"
    )
    result = runner.invoke(app, ["run", str(config)])
    assert result.exit_code == 0, result.output
    assert "final test accuracy" in result.output and "(ε, δ)" in result.output
    assert (tmp_path / "runs/cli/summary.md").exists()
    # this process loaded torch before the app ran: the run's one line on threads says OpenMP's settings stood
    assert f"torch threads: {torch.get_num_threads()}; torch was imported before" in result.output


def test_calibrate_with_fixed_size_sampling_asks_for_the_rdp_accountant():
    result = runner.invoke(app, ["calibrate", "--population", "100", "--cohort", "10", "--rounds", "10",
                                 "--target-epsilon", "2"])
    assert result.exit_code != 0 and "add --accountant rdp" in result.output


def test_help_imports_neither_torch_nor_dp_accounting_nor_the_data_libraries():
    import subprocess
    import sys

    code = ("import sys; from fedpub.simulations.tools.cli import app; "
            "print(sorted(m for m in ('torch', 'dp_accounting', 'h5py', 'flwr') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout
