"""Flags that decide privacy (a node's public declaration, the public flag of a TRAIN message), read strictly.

Flower's node config and run config hand a flag over as a real boolean or as the string a user typed
(``--node-config "public=false"`` can arrive as ``"false"``); ``bool("false")`` is True, which would make a private
user public. :func:`privacy_flag` accepts a boolean or exactly ``"true"``/``"false"`` (any case) and refuses
everything else, naming where the value came from and its key.
"""

from __future__ import annotations


class FlagError(ValueError):
    """A privacy flag that is neither a boolean nor "true"/"false"."""


def privacy_flag(value: object, *, key: str, source: str) -> bool:
    """``value`` as a boolean: True/False, or the strings "true"/"false" (any case); anything else (1, "yes",
    "0", None, ...) raises :class:`FlagError` naming ``source`` (e.g. "node 7") and ``key``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise FlagError(f"{source}: {key}={value!r} is not a flag: give true or false")
