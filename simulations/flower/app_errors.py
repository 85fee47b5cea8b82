"""How fedpub's ServerApps stop on an error the user can fix, and what Flower's log says then and when a ClientApp
fails: one line each, no traceback, no user data (issue 44).

Left alone, Flower logs a traceback for an exception leaving a ServerApp's ``main`` (and exits with code 700 in a
``flwr run`` simulation, 201 in a deployment), and in a simulation two more for every failing ClientApp, both with
the ClientApp's exception message in full, which can hold anything, a user's data included. So fedpub's ServerApps
(:mod:`~fedpub.simulations.flower.server_app`, :mod:`~fedpub.simulations.flower.secagg_dp`) run their work through
:func:`run_main`: an error the user fixes (:data:`STOPPING_ERRORS`: fedpub's ValueErrors such as ConfigError,
ProtocolMismatch, NodeDiscoveryError, RefusedNode, and CohortsKeepFailing) is logged as one ERROR line that
starts with its fix; under ``fedpub run`` it goes back to the runner in the ``results`` list (:func:`run_result`
raises it again, and the CLI exits 2 with its one ``error:`` line), under ``flwr run`` it is raised again as
:class:`RunStopped`, so that Flower reports the run failed, and :class:`QuietFailures` keeps its traceback out of
Flower's log, and turns the log's lines about a failing ClientApp into its exception type and a safe first line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from logging import ERROR

from flwr.common.logger import log

from fedpub.round_driver import CohortsKeepFailing
from fedpub.simulations.run.session import RunResult
from fedpub.strategies.flower.replies import failure_summary

STOPPING_ERRORS = (ValueError, CohortsKeepFailing)
"""The errors that stop a run for a reason its message states with the fix (the config, the data, the nodes, the
ClientApp's replies), not for a bug: fedpub's own errors of that kind are ValueErrors, and CohortsKeepFailing."""

CLIENT_APP_FAILED = "ClientAppException"
"""What Ray's and Flower's traceback of a failing ClientApp's exception names (a simulation)."""


class RunStopped(RuntimeError):
    """A run stopped by one of :data:`STOPPING_ERRORS` under ``flwr run`` (the message is the error's): Flower reports
    the run failed, and :class:`QuietFailures` leaves the traceback out of its log."""


class QuietFailures(logging.Filter):
    """On Flower's logger: the record of :class:`RunStopped` without its traceback (the ERROR line before it said
    why), and each record of a failing ClientApp's exception (Ray's traceback and the exception's message) as one
    line, its type and safe first line (:func:`~fedpub.strategies.flower.replies.failure_summary`); Flower's second copy,
    the bare traceback, is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], RunStopped):
            record.exc_info, record.exc_text = None, None
            return True
        message = record.getMessage()
        if CLIENT_APP_FAILED not in message or '\n  File "' not in message:
            return True
        if message.startswith("Traceback (most recent call last)"):
            return False
        record.msg, record.args = f"a ClientApp raised {failure_summary(message)}", ()
        return True


def quiet_failures() -> None:
    """Add :class:`QuietFailures` to Flower's logger (once)."""
    flwr_logger = logging.getLogger("flwr")
    if not any(isinstance(f, QuietFailures) for f in flwr_logger.filters):
        flwr_logger.addFilter(QuietFailures())


def run_main(run: Callable[[], RunResult], results: list[RunResult | Exception] | None) -> None:
    """A ServerApp's ``main``: ``run()``, its result appended to ``results`` (``fedpub run``); an error of
    :data:`STOPPING_ERRORS` is logged as one ERROR line and appended instead, or raised again as :class:`RunStopped`
    without ``results`` (``flwr run``). Flower's log stays quiet about it (:func:`quiet_failures`)."""
    quiet_failures()
    try:
        result = run()
    except STOPPING_ERRORS as error:
        log(ERROR, "fedpub: the run stopped: %s", error)
        if results is None:
            raise RunStopped(str(error)) from None
        results.append(error)
        return
    if results is not None:
        results.append(result)


def run_result(results: list[RunResult | Exception], what: str) -> RunResult:
    """The result :func:`run_main` appended to ``results``, or the error that stopped the run, raised again (a
    RuntimeError naming ``what`` ran when there is neither: Flower ended the ServerApp some other way)."""
    if not results:
        raise RuntimeError(f"the {what} ended without a result; see the log above")
    outcome = results[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome
