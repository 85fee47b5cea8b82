"""Flags that decide privacy (a node's public declaration, the public flag of a TRAIN message), read strictly.

Flower's node config and run config hand a flag over as a real boolean or as the string a user typed
(``--node-config "public=false"`` can arrive as ``"false"``); ``bool("false")`` is True, which would make a private
user public. :func:`privacy_flag` accepts a boolean or exactly ``"true"``/``"false"`` (any case) and refuses
everything else, naming where the value came from and its key. :func:`name_list` reads a reply's list of the
payloads it applied as strictly: a list of names, nothing else (a lone string would read as its letters).
"""

from __future__ import annotations


class FlagError(ValueError):
    """A privacy flag that is neither a boolean nor "true"/"false", or a name list that is not a list of names."""


def privacy_flag(value: object, *, key: str, source: str) -> bool:
    """``value`` as a boolean: True/False, or the strings "true"/"false" (any case); anything else (1, "yes",
    "0", None, ...) raises :class:`FlagError` naming ``source`` (e.g. "node 7") and ``key``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise FlagError(f"{source}: {key}={value!r} is not a flag: give true or false")


def name_list(value: object, *, key: str, source: str) -> tuple[str, ...]:
    """``value`` as names: a list (or tuple) of non-empty strings, each once; anything else (a lone string, None,
    a number, a list holding another type) raises :class:`FlagError` naming ``source`` and ``key``."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
        if len(set(value)) == len(value):
            return tuple(value)
    raise FlagError(f"{source}: {key}={value!r} is not a list of distinct names")
