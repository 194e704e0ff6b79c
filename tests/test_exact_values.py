"""The exactness check skipped for values of exact JSON types only: ``encode`` refuses
and accepts what the decoding round trip refused and accepted, on awkward values, and a
value it lets through unchecked is one JSON gives back equal, type for type."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest

from oncelog._exceptions import UnserializableValue
from oncelog.records._serialization import _exact, decode, encode, encode_decoded


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


class Table(dict):  # type: ignore[type-arg]
    pass


VALUES: list[Any] = [
    None, True, 0, -0.0, 1.5, 2**64, "é\u2028", [], {}, {"a": [1, {"b": None}]},
    (1, 2), {"a": (1,)}, [Colour.RED], {"k": Name("x")}, Table(a=1), {1: "int key"},
    {True: 1}, {None: 1}, {"a": {2.5: 1}}, [float("nan")], {"a": float("inf")},
    [1e308, -1e308, 5e-324], [[[]]], {"a": {"b": {"c": [True, False, None]}}}, Colour.RED,
    Name("top"), 1.0, [1, "x", 2.0, None],
]  # fmt: skip


def _checked(value: Any) -> str | type[Exception]:
    try:
        return encode_decoded(value, what="v", limit=1 << 20)[0]
    except UnserializableValue:
        return UnserializableValue


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_encode_refuses_and_accepts_as_the_round_trip_did(value: Any) -> None:
    expected = _checked(value)
    if expected is UnserializableValue:
        with pytest.raises(UnserializableValue):
            encode(value, what="v", limit=1 << 20)
    else:
        assert encode(value, what="v", limit=1 << 20) == expected


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_value_let_through_unchecked_comes_back_equal_type_for_type(value: Any) -> None:
    if not _exact(value):
        return
    text = encode(value, what="v", limit=1 << 20)
    back = decode(text)
    assert back == value
    assert json.dumps(back, sort_keys=True) == json.dumps(value, sort_keys=True)
    assert _types(back) == _types(value)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return (type(value), {k: (type(k), _types(v)) for k, v in value.items()})
    if isinstance(value, list):
        return (type(value), [_types(v) for v in value])
    return type(value)


def test_the_skip_is_taken_for_plain_values_only() -> None:
    assert _exact({"a": [1, 2.5, "x", None, True, {"b": []}]})
    for inexact in ((1,), {1: 2}, [Colour.RED], Name("x"), Table(), [float("nan")]):
        assert not _exact(inexact)
