"""The base of every experiment-config section: frozen, unknown keys forbidden, infinities written as strings.

:mod:`fedpub.config` builds the schema from these sections, and a dataset's declaration
(:mod:`fedpub.data.registry`) brings its own ``data`` sections on the same base; this module imports pydantic only,
so neither side imports the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")
