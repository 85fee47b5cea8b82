"""A small, dependency-free codec for ``tf.train.Example`` protocol buffers (TFF's SQLite rows).

Wire format (tensorflow/core/example/{example,feature}.proto): Example{features=1} →
Features{map<string, Feature> feature=1} → Feature{bytes_list=1 | float_list=2 | int64_list=3},
each list a ``repeated value = 1`` (floats and ints packed when written by TensorFlow; unpacked
is accepted too). Decoded features are ``list[bytes]``, ``list[float]`` or ``list[int]``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

FeatureValue = list[bytes] | list[float] | list[int]


class ExampleDecodeError(ValueError):
    """The bytes are not a well-formed tf.train.Example."""


_ONE_BYTE = tuple(bytes([n]) for n in range(128))
"""The varints of 0..127, one byte each (most lengths and field keys): looked up, not built."""


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    value &= (1 << 64) - 1  # negative int64 are written as 10-byte two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _encode_feature(values: Sequence[bytes] | Sequence[float] | Sequence[int]) -> bytes:
    values = list(values)
    if all(isinstance(v, (bytes, bytearray)) for v in values) and values:
        return _field(1, b"".join(_field(1, bytes(v)) for v in values))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _field(3, _field(1, b"".join(_varint(v) for v in values)))
    if all(isinstance(v, float) for v in values):
        return _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))
    raise TypeError("a feature is a list of bytes, a list of ints or a list of floats")


def encode_example(features: Mapping[str, Sequence[bytes] | Sequence[float] | Sequence[int]]) -> bytes:
    """Serialise ``{name: values}`` as a tf.train.Example (features in sorted name order)."""
    entries = b"".join(
        _field(1, _field(1, name.encode()) + _field(2, _encode_feature(values)))
        for name, values in sorted(features.items())
    )
    return _field(1, entries)


def single_value_encoder(kinds: Mapping[str, Literal["bytes", "int64"]]) -> Callable[[Sequence[bytes | int]], bytes]:
    """An encoder of Examples whose features are ``kinds``' names, each holding exactly one value of its kind: it
    takes the values in ``kinds``' order and gives :func:`encode_example`'s bytes for them, without building a
    mapping or checking types per example (the names' fields are made once; for writers of millions of rows)."""
    if unknown := set(kinds.values()) - {"bytes", "int64"}:
        raise ValueError(f"feature kinds are 'bytes' or 'int64', got {sorted(unknown)}")
    order = sorted(range(len(kinds)), key=list(kinds).__getitem__)
    names = [_field(1, name.encode()) for name in kinds]
    is_bytes = [kind == "bytes" for kind in kinds.values()]

    def encode(values: Sequence[bytes | int]) -> bytes:  # _field inlined: its keys are the bytes below
        entries = []
        for i in order:
            value = values[i]
            if is_bytes[i]:  # Feature{bytes_list (1): BytesList{value (1)}}
                listed = b"\n" + _varint(len(value)) + value  # type: ignore[arg-type]
                feature = b"\n" + _varint(len(listed)) + listed
            else:  # Feature{int64_list (3): Int64List{value (1), packed}}
                packed = _varint(value)  # type: ignore[arg-type]
                listed = b"\n" + _varint(len(packed)) + packed
                feature = b"\x1a" + _varint(len(listed)) + listed
            entry = names[i] + b"\x12" + _varint(len(feature)) + feature  # name (1), feature (2)
            entries.append(b"\n" + _varint(len(entry)) + entry)
        body = b"".join(entries)
        return b"\n" + _varint(len(body)) + body

    return encode


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ExampleDecodeError("truncated or over-long varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _fields(data: bytes) -> list[tuple[int, int, bytes | int]]:
    """(field number, wire type, payload) for every field of a message."""
    out, pos = [], 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            out.append((number, wire, value))
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ExampleDecodeError("a field runs past the end of the message")
            out.append((number, wire, data[pos : pos + length]))
            pos += length
        elif wire == 5:
            out.append((number, wire, data[pos : pos + 4]))
            pos += 4
        elif wire == 1:
            out.append((number, wire, data[pos : pos + 8]))
            pos += 8
        else:
            raise ExampleDecodeError(f"unsupported wire type {wire}")
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_feature(data: bytes) -> FeatureValue:
    for kind, _, payload in _fields(data):
        assert isinstance(payload, bytes)
        items = _fields(payload)
        if kind == 1:
            return [bytes(p) for _, _, p in items]  # type: ignore[arg-type]
        if kind == 2:
            floats: list[float] = []
            for _, _, p in items:  # packed (wire type 2) or one fixed32 (wire type 5): both little-endian
                floats.extend(struct.unpack(f"<{len(p) // 4}f", p))  # type: ignore[arg-type]
            return floats
        if kind == 3:
            ints: list[int] = []
            for _, wire, p in items:
                if wire == 0:
                    ints.append(_signed(p))  # type: ignore[arg-type]
                else:
                    pos = 0
                    while pos < len(p):  # type: ignore[arg-type]
                        value, pos = _read_varint(p, pos)  # type: ignore[arg-type]
                        ints.append(_signed(value))
            return ints
    return []


def decode_example(data: bytes) -> dict[str, FeatureValue]:
    """Parse a serialised tf.train.Example into ``{name: values}``."""
    try:
        features: dict[str, FeatureValue] = {}
        for number, _, features_msg in _fields(bytes(data)):
            if number != 1 or not isinstance(features_msg, bytes):
                continue
            for _, _, entry in _fields(features_msg):
                parts = {n: p for n, _, p in _fields(entry)}  # type: ignore[arg-type]
                name = parts.get(1, b"")
                features[name.decode()] = _decode_feature(parts.get(2, b""))  # type: ignore[union-attr]
        return features
    except (IndexError, UnicodeDecodeError, struct.error) as exc:
        raise ExampleDecodeError(f"not a tf.train.Example: {exc}") from None
