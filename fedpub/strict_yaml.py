"""YAML read as PyYAML's safe loader reads it, except that a key given twice in one mapping is refused.

``yaml.safe_load`` keeps the last of two equal keys silently: ``noise_multiplier: 0.8`` followed further down by
``noise_multiplier: 0.05`` runs at z = 0.05. :class:`StrictLoader` checks every mapping of the document, at any
depth, before it is constructed and raises :class:`DuplicateKeyError` naming the key's dotted path and the lines
of both occurrences. A merge key (``<<: *base``) still lets a mapping's own keys override the merged ones: that
is what it is for.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives the same key twice; a :class:`yaml.YAMLError`, so every reader's YAML error handling
    reports it with the file."""


class StrictLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` refusing a key given twice in one mapping (:class:`DuplicateKeyError`)."""

    def construct_document(self, node: Node) -> Any:
        self._check_keys(node)
        return super().construct_document(node)

    def _check_keys(self, root: Node) -> None:
        """Walk the document's nodes (each once: an alias is its anchor's node) and refuse a repeated key."""
        stack: list[tuple[Node, str]] = [(root, "")]
        seen: set[int] = set()
        while stack:
            node, path = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, SequenceNode):
                stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
            elif isinstance(node, MappingNode):
                first: dict[Any, Node] = {}
                for key_node, value_node in node.value:
                    if key_node.tag == _MERGE:
                        stack.append((value_node, path))
                        continue
                    key = self._key(key_node)
                    where = f"{path}.{key}" if path else str(key)
                    if key in first:
                        raise DuplicateKeyError(problem=(
                            f"duplicate key `{where}` (line {key_node.start_mark.line + 1}; first given on line "
                            f"{first[key].start_mark.line + 1}): give each key once"))
                    first[key] = key_node
                    stack.append((value_node, where))

    def _key(self, node: Node) -> Any:
        """A key as the mapping will hold it (``1`` and ``0x1`` are one key); a key that is itself a list or a
        mapping by its tag and text (the constructor refuses it, as an unhashable key)."""
        if isinstance(node, (MappingNode, SequenceNode)):
            return (node.tag, id(node))
        value = self.construct_object(node)
        try:
            hash(value)
        except TypeError:
            return (node.tag, node.value)
        return value


def load_yaml(text: str | bytes) -> Any:
    """``text`` (a YAML document; bytes in UTF-8 or UTF-16 with a byte order mark) as Python values, refusing a
    repeated key (:class:`DuplicateKeyError`, a :class:`yaml.YAMLError`)."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader
