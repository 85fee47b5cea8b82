"""Flags that decide privacy (a node's public declaration, the public flag of a TRAIN message, a table's public
column), read strictly: only an explicit true makes a user public.

Flower's node config and run config hand a flag over as a real boolean or as the string a user typed
(``--node-config "public=false"`` can arrive as ``"false"``); ``bool("false")`` is True, which would make a private
user public. :func:`privacy_flag` accepts a boolean or exactly ``"true"``/``"false"`` (any case) and refuses
everything else, naming where the value came from and its key. :func:`privacy_column` reads a column of such flags
(``data.table.public``) by the same rule: a boolean column, or a string column of only "true"/"false"; integers
(a 2 read as true), other strings and empty rows are refused, naming the column and its type, never its values.
:func:`name_list` reads a reply's list of the payloads it applied as strictly: a list of names, nothing else (a
lone string would read as its letters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

_FIX = "store it as a boolean column (true/false)"


class FlagError(ValueError):
    """A privacy flag that is neither a boolean nor "true"/"false", or a name list that is not a list of names."""


def _word(text: str) -> bool | None:
    """``text`` as a flag: "true" or "false" in any case, with any surrounding space; None for any other text."""
    word = text.strip().lower()
    return word == "true" if word in ("true", "false") else None


def privacy_flag(value: object, *, key: str, source: str) -> bool:
    """``value`` as a boolean: True/False, or the strings "true"/"false" (any case); anything else (1, "yes",
    "0", None, ...) raises :class:`FlagError` naming ``source`` (e.g. "node 7") and ``key``."""
    if isinstance(value, bool):
        return value
    flag = _word(value) if isinstance(value, str) else None
    if flag is not None:
        return flag
    raise FlagError(f"{source}: {key}={value!r} is not a flag: give true or false")


def privacy_column(column: pa.ChunkedArray | pa.Array, *, key: str, name: str, source: str) -> np.ndarray:
    """``column`` (a pyarrow column of flags, one a row) as a numpy boolean array: a boolean column, or a string
    column (dictionary-encoded or not) whose every value is "true" or "false" (any case and surrounding space, as
    :func:`privacy_flag`). Any other type, another string or an empty (null) row raises :class:`FlagError` naming
    ``source`` (the file), ``key`` (the config field), the column ``name`` and its type; the values, which are a
    user's data, are never shown."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = f"{source}: {key} {name!r}"
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    if column.null_count:
        raise FlagError(f"{where} has rows with no value (null): whether those users are public is unknown; mark "
                        f"every row true or false ({_FIX})")
    if pa.types.is_boolean(column.type):
        flags = column
    elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        words = {word: _word(word) for word in pc.unique(column).to_pylist()}
        if None in words.values():
            raise FlagError(f"{where} holds {column.type} values other than \"true\" and \"false\": {_FIX}")
        flags = pc.is_in(column, value_set=pa.array([w for w, flag in words.items() if flag], column.type))
    else:
        raise FlagError(f"{where} holds {column.type}, not flags: {_FIX}")
    return np.asarray(flags.to_numpy(zero_copy_only=False), dtype=bool)


def name_list(value: object, *, key: str, source: str) -> tuple[str, ...]:
    """``value`` as names: a list (or tuple) of non-empty strings, each once; anything else (a lone string, None,
    a number, a list holding another type) raises :class:`FlagError` naming ``source`` and ``key``."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
        if len(set(value)) == len(value):
            return tuple(value)
    raise FlagError(f"{source}: {key}={value!r} is not a list of distinct names")
