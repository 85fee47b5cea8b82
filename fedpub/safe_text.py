"""What of a free text, an exception's message, fedpub may print: its first line, short, and nothing that looks like
data.

DESIGN §2: nothing fedpub prints contains a user's data. An exception's message can hold anything its code put in it
(a tensor's repr, a user's labels, raw bytes), so a report, the CLI's or a log line about a failing node, keeps it
only as one line of at most :data:`MESSAGE_LIMIT` characters, and withholds it when it looks as if it holds data.
"""

from __future__ import annotations

import re

MESSAGE_LIMIT = 200
"""The most characters of an exception's message a report shows."""
MAX_NUMBERS = 20
"""A message with more numbers than this is taken for data (a tensor, a list of values) and withheld."""
WITHHELD = "(message withheld: it may hold data)"

_DATA = re.compile(r"tensor\(|array\(|Parameter containing|\bb['\"]")
"""What a tensor's, an array's or a bytes value's repr starts with."""
_NUMBER = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def safe_message(message: str) -> str:
    """``message`` as a report may print it: its first line, at most :data:`MESSAGE_LIMIT` characters, or
    :data:`WITHHELD` when the whole of it looks as if it holds data (a tensor's or array's repr, a bytes value, more
    than :data:`MAX_NUMBERS` numbers)."""
    if _DATA.search(message) or len(_NUMBER.findall(message)) > MAX_NUMBERS:
        return WITHHELD
    first = message.strip().split("\n", 1)[0].strip()
    return first if len(first) <= MESSAGE_LIMIT else first[:MESSAGE_LIMIT - 1] + "…"
