"""The tf.train.Example codec against real protobuf: the messages of tensorflow/core/example/{feature,example}.proto
are built at run time from descriptors (no TensorFlow), in the proto3 form TensorFlow uses (packed lists) and in a
proto2 form that writes unpacked lists, which the decoder must also accept."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub.data.tf_example import ExampleDecodeError, decode_example, encode_example, single_value_encoder

FieldProto = descriptor_pb2.FieldDescriptorProto


def _example_class(syntax: str) -> Any:
    """tensorflow.Example built from a FileDescriptorProto (field numbers and types as in TF's .proto files)."""
    file = descriptor_pb2.FileDescriptorProto(name=f"example_{syntax}.proto", package="tensorflow", syntax=syntax)
    repeated, optional = FieldProto.LABEL_REPEATED, FieldProto.LABEL_OPTIONAL

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> descriptor_pb2.DescriptorProto:
        proto = file.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            field = proto.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                field.type_name = type_name
        return proto

    message("BytesList", ("value", 1, repeated, FieldProto.TYPE_BYTES, ""))
    message("FloatList", ("value", 1, repeated, FieldProto.TYPE_FLOAT, ""))  # proto3: packed by default
    message("Int64List", ("value", 1, repeated, FieldProto.TYPE_INT64, ""))
    feature = message(
        "Feature",
        ("bytes_list", 1, optional, FieldProto.TYPE_MESSAGE, ".tensorflow.BytesList"),
        ("float_list", 2, optional, FieldProto.TYPE_MESSAGE, ".tensorflow.FloatList"),
        ("int64_list", 3, optional, FieldProto.TYPE_MESSAGE, ".tensorflow.Int64List"),
    )
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    features = message(
        "Features", ("feature", 1, repeated, FieldProto.TYPE_MESSAGE, ".tensorflow.Features.FeatureEntry")
    )
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=optional, type=FieldProto.TYPE_STRING)
    entry.field.add(
        name="value", number=2, label=optional, type=FieldProto.TYPE_MESSAGE, type_name=".tensorflow.Feature"
    )
    message("Example", ("features", 1, optional, FieldProto.TYPE_MESSAGE, ".tensorflow.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


PACKED = _example_class("proto3")
UNPACKED = _example_class("proto2")  # proto2 repeated scalars without [packed = true] are written one by one


def _to_proto(cls: Any, features: dict[str, list]) -> Any:
    example = cls()
    for name, values in features.items():
        feature = example.features.feature[name]
        if values and isinstance(values[0], bytes):
            feature.bytes_list.value.extend(values)
        elif values and isinstance(values[0], float):
            feature.float_list.value.extend(values)
        else:
            feature.int64_list.value.extend(values)
    return example


def _from_proto(example: Any) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = list(getattr(feature, kind).value) if kind else []
    return out


STACKOVERFLOW = {
    "creation_date": [b"2008-08-10 08:28:52.1 UTC"],
    "score": [-3],
    "tags": [b"vb . net|c#"],
    "title": [b""],
    "tokens": [b"see <URL> for the list ."],
    "type": [b"question"],
}
EMNIST = {"label": [7], "pixels": [1.0, 0.5, 0.0, 0.25] * 196}


@pytest.mark.parametrize("features", [STACKOVERFLOW, EMNIST], ids=["stackoverflow", "emnist"])
def test_encoder_output_is_what_protobuf_writes(features: dict[str, list]) -> None:
    blob = encode_example(features)
    assert _from_proto(PACKED.FromString(blob)) == features
    assert _from_proto(UNPACKED.FromString(blob)) == features
    # Same bytes as protobuf when protobuf writes the map in the same (sorted) order.
    assert blob == _to_proto(PACKED, features).SerializeToString(deterministic=True)


def test_the_two_forms_differ_on_the_wire() -> None:
    packed, unpacked = (_to_proto(cls, EMNIST).SerializeToString() for cls in (PACKED, UNPACKED))
    assert len(unpacked) > len(packed)  # a tag before every unpacked value


@pytest.mark.parametrize("cls", [PACKED, UNPACKED], ids=["packed", "unpacked"])
@pytest.mark.parametrize("features", [STACKOVERFLOW, EMNIST], ids=["stackoverflow", "emnist"])
def test_decoder_reads_what_protobuf_writes(cls: Any, features: dict[str, list]) -> None:
    assert decode_example(_to_proto(cls, features).SerializeToString()) == features


def test_extreme_int64_and_empty_bytes() -> None:
    features = {"a": [-(2**63), 2**63 - 1, -1, 0], "b": [b""], "c": [b"\x00\xff"]}
    assert _from_proto(PACKED.FromString(encode_example(features))) == features
    assert decode_example(_to_proto(UNPACKED, features).SerializeToString()) == features


def test_garbage_is_a_decode_error() -> None:
    with pytest.raises(ExampleDecodeError):
        decode_example(b"\x0a\x05garbage-not-a-proto")


_names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8)
_values = st.one_of(
    st.lists(st.binary(max_size=12), min_size=1, max_size=4),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=5),
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_names, _values, max_size=5))
def test_round_trip_through_protobuf(features: dict[str, list]) -> None:
    assert _from_proto(PACKED.FromString(encode_example(features))) == features  # float32 values are exact
    for cls in (PACKED, UNPACKED):
        assert decode_example(_to_proto(cls, features).SerializeToString()) == features


_single = st.dictionaries(
    _names, st.one_of(st.binary(max_size=300), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=6
)


@settings(max_examples=60, deadline=None)
@given(_single)
def test_single_value_encoder_writes_what_encode_example_writes(values: dict[str, bytes | int]) -> None:
    """Names in any order, values long enough for two-byte lengths (300 bytes), negative and extreme int64."""
    kinds = {name: "bytes" if isinstance(v, bytes) else "int64" for name, v in values.items()}
    encoded = single_value_encoder(kinds)(list(values.values()))  # type: ignore[arg-type]
    assert encoded == encode_example({name: [v] for name, v in values.items()})  # type: ignore[misc]
    assert _from_proto(PACKED.FromString(encoded)) == {name: [v] for name, v in values.items()}


def test_single_value_encoder_refuses_other_kinds() -> None:
    with pytest.raises(ValueError, match="'bytes' or 'int64', got \\['float'\\]"):
        single_value_encoder({"x": "float"})  # type: ignore[dict-item]
