"""A Flower run that stops for a reason the user fixes says so in one line that leads with the fix, with no
traceback and no user data (issue 44, item 6).

fedpub's ServerApp (``fedpub run --backend flower``) logs one ERROR line and the CLI exits 2 with its ``error:`` line
(:mod:`fedpub.simulations.flower.app_errors`); the drop-in strategy raises a typed exception whose message starts
with the fix; a failing ClientApp's exception text (which can hold anything) reaches the log only as its type and a
safe first line. The Flower simulations here are three; the rest checks the pieces directly."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
import torch
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from typer.testing import CliRunner

from fedpub.config import ExperimentConfig, dump_config
from fedpub.safe_text import WITHHELD
from fedpub.simulations.flower.app_errors import QuietFailures, RunStopped, run_main, run_result
from fedpub.simulations.tools.cli import app
from fedpub.strategies.flower import FedpubStrategy, NodeDiscoveryError, ProtocolMismatch, TrainFnPublicTrainer
from fedpub.strategies.flower.replies import failure_summary
from tests.conftest import tiny_config
from tests.strategies.test_flower_standard_clients import run_in_simulation, shifting_app

MARKER = "PLANTED-MARKER-55"
PLANTED = f"{MARKER} {torch.arange(6.0)!r}\nthe user's second line"
"""A ClientApp's exception message holding a tensor (a user's data, as far as the log can tell)."""
RAY_TEXT = (  # what a simulation's reply says of such a ClientApp (Ray's traceback around Flower's wrapper)
    "ray::ClientAppActor.run() (pid=1, ip=192.0.2.2)\n"
    '  File "/app/client.py", line 11, in fail\n    raise RuntimeError(...)\n'
    f"RuntimeError: {PLANTED}\n\nThe above exception was the direct cause of the following exception:\n\n"
    'ray::ClientAppActor.run() (pid=1, ip=192.0.2.2)\n  File "/flwr/ray_actor.py", line 65, in run\n'
    f"flwr.clientapp.client_app.ClientAppException: \nException ClientAppException occurred. Message: {PLANTED}"
)
FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}


# -- the pieces ---------------------------------------------------------------------------------------------------
def test_a_failed_nodes_reason_is_logged_as_its_own_exception_type_and_a_safe_first_line():
    assert failure_summary("<class 'ZeroDivisionError'>:<'division by zero'>") == "ZeroDivisionError: division by zero"
    deployment = failure_summary(f"<class 'RuntimeError'>:<'{PLANTED}'>")
    simulation = failure_summary(f"<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'{RAY_TEXT}'>")
    assert deployment == simulation == f"RuntimeError: {WITHHELD}"
    assert failure_summary("<class 'KeyError'>:<'line one\nline two'>") == "KeyError: line one"


def _record(msg: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = None if exc is None else (type(exc), exc, None)
    return logging.LogRecord("flwr", logging.ERROR, __file__, 1, msg, (), exc_info)


def test_flowers_log_keeps_no_traceback_of_a_stopped_run_or_a_failing_client_app():
    quiet = QuietFailures()
    stopped = _record("ServerApp raised an exception", RunStopped("add `answer_discovery(app)` ..."))
    assert quiet.filter(stopped) and stopped.exc_info is None
    assert logging.Formatter().format(stopped) == "ServerApp raised an exception"
    ray_error = _record(RAY_TEXT)  # Flower's log(ERROR, ex) of the Ray error
    assert quiet.filter(ray_error) and ray_error.getMessage() == f"a ClientApp raised RuntimeError: {WITHHELD}"
    assert not quiet.filter(_record(f"Traceback (most recent call last):\n{RAY_TEXT}"))  # its traceback.format_exc()
    other = _record("An exception was raised when processing a message by RayBackend")
    assert quiet.filter(other) and other.getMessage() == "An exception was raised when processing a message by RayBackend"


def test_a_stopping_error_goes_back_to_the_runner_under_fedpub_run_and_stops_a_flwr_run_as_a_failure(flower_log):
    def refused():
        raise ProtocolMismatch("round 0: every reply is malformed")

    results: list = []
    run_main(refused, results)
    with pytest.raises(RunStopped, match="^round 0: every reply is malformed$") as stopped:
        run_main(refused, None)
    assert stopped.value.__cause__ is None and stopped.value.__suppress_context__
    # one line each, read on Flower's logger itself (caplog's root handler saw them twice in the whole suite)
    assert flower_log.getvalue().splitlines() == ["fedpub: the run stopped: round 0: every reply is malformed"] * 2
    with pytest.raises(ProtocolMismatch):
        run_result(results, "Flower simulation")

    def bug():
        raise KeyError("not a user's error")

    with pytest.raises(KeyError):  # a bug keeps Flower's report
        run_main(bug, [])


# -- in Flower simulation ------------------------------------------------------------------------------------------
@pytest.fixture
def flower_log() -> Iterator[io.StringIO]:
    """What Flower's logger prints (its records after its filters), fedpub's lines among them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.INFO)
    logging.getLogger("flwr").addHandler(handler)
    yield stream
    logging.getLogger("flwr").removeHandler(handler)


@pytest.mark.slow
def test_a_standard_client_app_under_public_nodes_fails_at_once_with_the_fix_first_after_a_warm_start_it_reports(
    flower_log,
):
    """PDA-DPMD with public nodes and the user's own pooled train function: the warm start runs before the rounds
    and says so in one line, though the user's trainer reports no metrics (it ran silently). Then the nodes'
    ClientApp registers no query handler, so none can declare itself public: discovery stops at the first such
    reply (not after node_wait_timeout), its message starting with the fix."""
    pda = {"name": "pda_dpmd", "public_clients_per_round": 1, "mirror": {"decay_rounds": 2}, "clip_norm": 1.0,
           "noise_multiplier": 1.0, "sampling": {"kind": "poisson", "sampling_rate": 1.0}}  # warm_start: on by default
    trainer = TrainFnPublicTrainer(lambda weights, config: {k: v + 0.5 for k, v in weights.items()})
    run = run_in_simulation(
        lambda on_round: FedpubStrategy.from_config(pda, population=2, rounds=2, seed=0, public_nodes=True,
                                                    public_trainer=trainer, node_wait_timeout=600,
                                                    on_round=on_round),
        shifting_app, num_supernodes=3, rounds=2,
    )
    assert isinstance(run.error, NodeDiscoveryError) and isinstance(run.error, ValueError), run.error
    message = str(run.error)
    assert message.startswith("add `answer_discovery(app)` (fedpub.clients.flower_protocol) to your ClientApp")
    assert "\n" not in message and len(message) <= 360, message  # at most three lines of a terminal
    assert "has no query handler" in message and "after 600 s" not in message
    assert run.rounds == [] and run.strategy.epsilon() == 0.0
    assert "fedpub: run phase warm_start ran on the public users' pooled data; metrics: its trainer reported none" \
        in flower_log.getvalue().splitlines()


def _fedpub_run(config: ExperimentConfig, tmp_path, monkeypatch, train) -> tuple[int, str]:
    """``fedpub run --backend flower`` of ``config`` whose nodes answer discovery as fedpub's ClientApp does and
    train with ``train(msg)``; (exit code, everything printed: the CLI's and Flower's lines)."""
    from fedpub.clients import client_app

    def make_client_app(bound: ExperimentConfig | None = None) -> ClientApp:
        nodes = ClientApp()

        @nodes.query()
        def query(msg: Message, context: Context) -> Message:
            return client_app.query_reply(msg, context, bound)

        @nodes.train()
        def fit(msg: Message, context: Context) -> Message:
            return train(msg)

        return nodes

    monkeypatch.setattr(client_app, "make_client_app", make_client_app)
    path = tmp_path / "run.yaml"
    path.write_text(dump_config(config))
    result = CliRunner().invoke(app, ["run", str(path), "--backend", "flower"])
    return result.exit_code, result.output


def _config(tiny_emnist_dir, tmp_path, **overrides) -> ExperimentConfig:
    return tiny_config(tiny_emnist_dir, tmp_path / "runs", rounds=2, flower=FLOWER, **overrides)


@pytest.mark.slow
def test_fedpub_run_stops_on_replies_under_the_wrong_key_with_one_error_line_and_no_traceback(
    tiny_emnist_dir, tmp_path, monkeypatch, flower_log
):
    """The nodes reply their weights under `model` instead of `arrays`: round 0 is not released, and the run ends
    with the CLI's one `error:` line (exit 2) and fedpub's one ERROR line, no traceback (it was 30 lines and
    Flower's exit code 700)."""
    code, output = _fedpub_run(_config(tiny_emnist_dir, tmp_path), tmp_path, monkeypatch,
                               lambda msg: Message(RecordDict({"model": msg.content["arrays"]}), reply_to=msg))
    printed = output + flower_log.getvalue()
    assert code == 2, printed
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: round 0: every reply"), output
    assert "no `update` or `arrays` record (got ['model'])" in errors[0]
    assert "Traceback" not in printed
    assert printed.count("fedpub: the run stopped: round 0: every reply") == 1


@pytest.mark.slow
def test_fedpub_run_keeps_a_failing_client_apps_data_out_of_the_log(
    tiny_emnist_dir, tmp_path, monkeypatch, flower_log
):
    """Every node's training raises an exception whose message holds a tensor: the log names the exception's type
    only, the run stops after the failed round (stop_after_failed_rounds 1) with one `error:` line, exit 2."""

    def fail(msg: Message) -> Message:
        raise RuntimeError(PLANTED)

    config = _config(tiny_emnist_dir, tmp_path, stop_after_failed_rounds=1)
    code, output = _fedpub_run(config, tmp_path, monkeypatch, fail)
    printed = output + flower_log.getvalue()
    assert code == 2, printed
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "every sampled user failed in rounds 0 to 0" in errors[0], output
    assert MARKER not in printed and "tensor(" not in printed and "the user's second line" not in printed
    assert f"a node failed in round 0: RuntimeError: {WITHHELD}" in printed
    assert "Traceback" not in printed
