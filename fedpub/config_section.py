"""The base of every experiment-config section: frozen, unknown keys forbidden, numbers finite (a field where an
infinity means something, such as ``strategy.clip_norm``, allows it itself; NaN never), infinities written as
strings.

:mod:`fedpub.config` builds the schema from these sections, and a dataset's declaration
(:mod:`fedpub.data.registry`) brings its own ``data`` sections on the same base; this module imports pydantic only,
so neither side imports the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, ser_json_inf_nan="strings")
