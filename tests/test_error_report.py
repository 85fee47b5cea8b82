"""An unexpected error prints a few lines and no data (issue 44): the `fedpub` command's report, in process and as a
real process, never holds a frame's local variable nor a message that looks like data, and its full traceback (a
file of mode 0600) neither; the Typer apps print no traceback of their own; accounting adds no root log handler."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import dp_accounting
import pytest
from typer.testing import CliRunner

import fedpub.privacy.calibration as calibration
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import PoissonSampling, round_event
from fedpub.simulations.tools import cli
from fedpub.simulations.tools.data_cli import data_app
from fedpub.simulations.tools.error_report import WITHHELD, full_report, safe_message, short_report

MARKER = "PLANTED-MARKER-1234"
CALIBRATE = ["calibrate", "-e", "2", "-T", "10", "--q", "0.1"]


def planted(*args: object, **kwargs: object) -> float:
    """A calibration that fails with a local variable holding a user's data, and a message saying nothing of it."""
    secret = MARKER
    raise RuntimeError(f"the accountant broke ({len(secret)} characters)")


def planted_tensor(*args: object, **kwargs: object) -> float:
    """A calibration whose error message holds a tensor's repr (with the data in it)."""
    secret = MARKER
    raise RuntimeError(f"cannot use tensor([0.25, 0.5]) of {secret}")


def check_report(printed: str, log_folder: Path) -> list[str]:
    """The checks every unexpected error's report passes; its lines."""
    lines = printed.strip().splitlines()
    assert MARKER not in printed and "Traceback" not in printed
    assert 2 <= len(lines) <= 5, printed
    assert lines[0].startswith("error: unexpected RuntimeError in simulations/tools/cli.py:"), printed
    assert lines[0].split(": ", 2)[1].endswith(" in calibrate"), printed
    assert lines[-1].startswith("full traceback: "), printed
    log = Path(lines[-1].removeprefix("full traceback: "))
    assert log.parent == log_folder / "fedpub" / "errors" and log.is_file()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    written = log.read_text()
    assert MARKER not in written and "Traceback (most recent call last):" in written
    assert "in planted" in written  # the frames are there, the local variables are not
    return lines


@pytest.mark.parametrize(("failure", "message"), [(planted, "the accountant broke (19 characters)"),
                                                  (planted_tensor, WITHHELD)], ids=["message", "tensor_message"])
def test_main_reports_an_unexpected_error_without_data(tmp_path, monkeypatch, failure, message) -> None:
    monkeypatch.setattr(calibration, "calibrate_noise_multiplier", failure)
    monkeypatch.setattr(cli, "_threads", [])
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")  # main() then sets no variable and measures no load
    monkeypatch.setattr(sys, "argv", ["fedpub", *CALIBRATE])
    with CliRunner().isolation(env={"XDG_STATE_HOME": str(tmp_path)}) as (stdout, stderr, _):
        with pytest.raises(SystemExit) as exit:
            cli.main()
    assert exit.value.code == 1
    assert stdout.getvalue() == b""
    lines = check_report(stderr.getvalue().decode(), tmp_path)
    assert lines[0].endswith(f" in calibrate: {message}")
    assert message in Path(lines[-1].removeprefix("full traceback: ")).read_text()


def test_the_fedpub_process_reports_an_unexpected_error_without_data(tmp_path: Path) -> None:
    (tmp_path / "plant.py").write_text(textwrap.dedent(f"""\
        import sys
        import fedpub.privacy.calibration as calibration
        from fedpub.simulations.tools.cli import main

        def planted(*args, **kwargs):
            secret = {MARKER!r}
            raise RuntimeError("the accountant broke")

        calibration.calibrate_noise_multiplier = planted
        sys.argv = ["fedpub", *sys.argv[1:]]
        main()
    """))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "OMP_WAIT_POLICY": "passive"}
    done = subprocess.run([sys.executable, str(tmp_path / "plant.py"), *CALIBRATE], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    check_report(done.stderr, tmp_path)


def test_a_report_that_cannot_be_written_says_so_in_one_line() -> None:
    try:
        planted()
    except RuntimeError as error:
        lines = short_report(error, "Permission denied (/nowhere)")
    assert lines[-1] == "full traceback not written: Permission denied (/nowhere)"
    assert len(lines) <= 5 and all(MARKER not in line for line in lines)


def test_the_typer_apps_print_no_traceback_of_their_own() -> None:
    for app in (cli.app, data_app):
        assert app.pretty_exceptions_enable is False and app.pretty_exceptions_show_locals is False


def test_a_message_that_may_hold_data_is_withheld() -> None:
    assert safe_message("Target 7 is out of bounds.") == "Target 7 is out of bounds."
    assert safe_message("weights tensor([[0.1, 0.2]], requires_grad=True) diverged") == WITHHELD
    assert safe_message("labels array([3, 1, 4])") == WITHHELD
    assert safe_message("row b'the user wrote this' unreadable") == WITHHELD
    assert safe_message("values " + ", ".join(str(i / 7) for i in range(21))) == WITHHELD
    assert safe_message("Bob's file 'web' is missing") == "Bob's file 'web' is missing"
    assert safe_message("first line\n" + "x" * 500) == "first line"
    assert len(safe_message("y" * 500)) == 200


def test_the_full_report_holds_the_chain_and_no_locals() -> None:
    try:
        try:
            planted_tensor()
        except RuntimeError as inner:
            raise ValueError("the round failed") from inner
    except ValueError as error:
        report = full_report(error)
    assert MARKER not in report and WITHHELD in report and "ValueError: the round failed" in report
    assert "direct cause" in report and "in planted_tensor" in report and "raise ValueError" in report


def test_accounting_adds_no_root_log_handler() -> None:
    """dp-accounting's RDP warnings (orders that do not converge at a small z) went through absl, which then gave the
    root logger a handler: every Flower line twice, with its DEBUG lines."""
    root = logging.getLogger()
    rdp_log, kept = logging.getLogger("dp_accounting.rdp"), []
    handler = logging.Handler()
    handler.emit = kept.append  # type: ignore[method-assign]
    saved, level = root.handlers[:], rdp_log.level
    root.handlers.clear()  # absl adds its handler only to a root that has none (pytest gives it its own)
    rdp_log.addHandler(handler)
    rdp_log.setLevel(logging.WARNING)
    try:
        accountant = UserLevelAccountant("rdp")
        accountant.compose(round_event(PoissonSampling(0.07), [dp_accounting.GaussianDpEvent(0.29)], 0))
        accountant.epsilon(1e-5)
        assert root.handlers == []
    finally:
        root.handlers[:] = saved
        rdp_log.removeHandler(handler)
        rdp_log.setLevel(level)
    assert kept  # the warnings were given, to a logger of dp-accounting's own


def _raised(raise_it):
    try:
        raise_it()
    except ValueError as error:
        return error
    raise AssertionError("nothing raised")


def test_an_expected_error_from_a_library_is_filtered_and_fedpubs_own_is_whole() -> None:
    """A ValueError a library raised (numpy, torch, pyarrow) may quote the values it refused: its ``error:`` line
    goes through the filter; fedpub's own messages name fields and sizes and are printed whole."""
    from fedpub.config import ConfigError, parse_config
    from fedpub.simulations.tools.error_report import expected_message

    planted = _raised(lambda: float(f"{MARKER} tensor([31337.25])"))
    assert expected_message(planted) == WITHHELD
    ours = _raised(lambda: parse_config({"rounds": 0}))
    assert isinstance(ours, ConfigError) and expected_message(ours) == str(ours) and "\n" in str(ours)
