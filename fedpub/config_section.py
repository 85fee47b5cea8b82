"""The base of every experiment-config section: frozen, unknown keys forbidden, numbers finite (a field where an
infinity means something, such as ``strategy.clip_norm``, allows it itself; NaN never), infinities written as
strings, and no scalar read as another kind.

pydantic's lax mode reads ``true`` as the number 1 and ``"yes"``, ``"on"``, ``1`` or ``"1"`` as a boolean, so
``noise_multiplier: true`` ran at z = 1.0. A section refuses a boolean for a number field and anything but a
boolean for a boolean field, naming the field. Integers stay numbers for float fields (``clip_norm: 1``), and a
string that spells a number is still read as it (PyYAML reads ``1e-5`` without a dot as a string).

:mod:`fedpub.config` builds the schema from these sections, and a dataset's declaration
(:mod:`fedpub.data.registry`) brings its own ``data`` sections on the same base; this module imports pydantic only,
so neither side imports the other.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _scalar_kinds(annotation: Any) -> frozenset[str]:
    """Which kinds of scalar (``bool``, ``number``, ``other``) a field's annotation takes, through ``Annotated``,
    unions and ``Literal``; ``None`` adds nothing."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalar_kinds(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return frozenset().union(*(_scalar_kinds(arg) for arg in get_args(annotation)))
    if origin is Literal:
        return frozenset(
            "bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else "other"
            for v in get_args(annotation) if v is not None)
    if annotation is bool:
        return frozenset({"bool"})
    if annotation in (int, float):
        return frozenset({"number"})
    return frozenset() if annotation is type(None) else frozenset({"other"})


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, ser_json_inf_nan="strings")

    @field_validator("*", mode="before")
    @classmethod
    def _same_kind(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse a boolean for a number field and a non-boolean for a boolean field (before pydantic's lax
        conversion); the message names the kind, never the value."""
        if info.field_name is None:
            return value
        kinds = _scalar_kinds(cls.model_fields[info.field_name].annotation)
        if isinstance(value, bool) and "number" in kinds and "bool" not in kinds:
            raise ValueError("a boolean is not a number: give a number")
        if value is not None and not isinstance(value, bool) and kinds == {"bool"}:
            raise ValueError("give true or false (a YAML boolean, unquoted)")
        return value
