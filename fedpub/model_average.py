"""Evaluate an average of the global models (Nasr et al. 2023, DOPE-SGD §3.2: ensembles of late
iterates): the mean of the last n models (``window``), an exponential moving average (``ema``), or the
mean of every round's model (``all``: the output of Amid et al. 2022's Algorithm 1, PDA-DPMD, kept as a
running mean). Averaging released models is post-processing: it costs no privacy. The state is a plain
dict, so it is checkpointed with the run.
"""

from __future__ import annotations

from typing import Any

from fedpub import tree
from fedpub.config import ModelAverageConfig
from fedpub.types import Params


def init_average() -> dict[str, Any]:
    return {"window": [], "ema": None, "count": 0}


def update_average(config: ModelAverageConfig, state: dict[str, Any], params: Params) -> dict[str, Any]:
    """The state after the global model ``params`` of one more round."""
    if config.kind == "window":
        return {"window": [*state["window"], tree.clone(params)][-config.window :], "ema": None, "count": 0}
    ema = state["ema"]
    if ema is None:
        return {"window": [], "ema": tree.clone(params), "count": 1}
    if config.kind == "all":  # the running mean of θ_1..θ_n: avg + (θ_n − avg)/n
        count = state["count"] + 1
        return {"window": [], "ema": tree.add(ema, tree.scale(tree.sub(params, ema), 1 / count)), "count": count}
    return {"window": [], "ema": tree.add(tree.scale(ema, config.decay), tree.scale(params, 1 - config.decay)),
            "count": state.get("count", 0) + 1}


def averaged_params(state: dict[str, Any]) -> Params | None:
    """The averaged model (None before the first round)."""
    if state["ema"] is not None:
        return state["ema"]
    return tree.mean(state["window"]) if state["window"] else None
