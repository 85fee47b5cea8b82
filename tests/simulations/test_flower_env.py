"""fedpub's view of Flower's log: the ``Final results`` dump that ends ``Strategy.start`` is dropped inside
:func:`without_final_results`, and only there."""

from __future__ import annotations

import logging

from fedpub.simulations.flower.environment import FINAL_RESULTS, without_final_results


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_the_final_results_dump_is_dropped_inside_the_block_only() -> None:
    logger, kept = logging.getLogger("flwr"), _Kept()
    level, filters = logger.level, list(logger.filters)  # an in-process Flower simulation earlier keeps its own
    logger.setLevel(logging.INFO)
    logger.addHandler(kept)  # Flower's logger need not pass records up (quiet_flower_logging stops them)
    try:
        with without_final_results():
            logger.info("[ROUND 3/3]")
            logger.info("Strategy execution finished in 1.00s")
            logger.info(FINAL_RESULTS)
            logger.info("")
            logger.info("\tServerApp-side Evaluate Metrics:")
            logger.info("\t{1: {'accuracy': 0.5}}")
        logger.info("Run finished")
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
    assert kept.messages == [
        "[ROUND 3/3]", "Strategy execution finished in 1.00s", "Run finished"
    ]
    assert logger.filters == filters
