"""Evaluate an average of the last global models (Nasr et al. 2023, DOPE-SGD §3.2: ensembles of
late iterates): the mean of the last n models (``window``) or an exponential moving average
(``ema``). Averaging released models is post-processing: it costs no privacy. The state is a plain
dict, so it is checkpointed with the run.
"""

from __future__ import annotations

from typing import Any

from fedpub import tree
from fedpub.config import ModelAverageConfig
from fedpub.types import Params


def init_average() -> dict[str, Any]:
    return {"window": [], "ema": None}


def update_average(config: ModelAverageConfig, state: dict[str, Any], params: Params) -> dict[str, Any]:
    """The state after the global model ``params`` of one more round."""
    if config.kind == "window":
        return {"window": [*state["window"], tree.clone(params)][-config.window :], "ema": None}
    ema = state["ema"]
    if ema is None:
        return {"window": [], "ema": tree.clone(params)}
    return {"window": [], "ema": tree.add(tree.scale(ema, config.decay), tree.scale(params, 1 - config.decay))}


def averaged_params(state: dict[str, Any]) -> Params | None:
    """The averaged model (None before the first round)."""
    if state["ema"] is not None:
        return state["ema"]
    return tree.mean(state["window"]) if state["window"] else None
