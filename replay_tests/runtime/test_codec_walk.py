"""codec.encode walks a value once for its depth and for the bytes it holds.

Both answers must be what the two separate walks gave: a secret inside bytes anywhere in a
value (behind text siblings, inside a set, a tuple, a Struct) is still found, and a value nested
too deep is refused with the path of its first too-deep container even when it holds bytes.
"""

from __future__ import annotations

import base64

import msgspec
import pytest

from loom_runtime import NotSerialisableError, Redactor, too_deep
from loom_runtime.codec import MAX_DEPTH, encode

SECRET = "AKIAIOSFODNN7EXAMPLE"


class Holder(msgspec.Struct):
    label: str
    payload: bytes


SHAPES = [
    ("top-level bytes", SECRET.encode()),
    ("bytearray after text", {"a": "plain", "b": 3, "c": bytearray(SECRET.encode())}),
    ("bytes under a list under a dict", {"x": [1, "two", {"y": SECRET.encode()}]}),
    ("memoryview in a tuple", ("first", memoryview(SECRET.encode()))),
    ("bytes in a Struct in a list", [Holder(label="l", payload=SECRET.encode())]),
    ("bytes in a set", {"s": {1, SECRET.encode()}}),
]


@pytest.mark.parametrize("value", [v for _, v in SHAPES], ids=[n for n, _ in SHAPES])
def test_a_secret_in_bytes_anywhere_is_redacted(value: object) -> None:
    stored = bytes(encode(value, path="v", redactor=Redactor()))
    assert base64.b64encode(SECRET.encode()) not in stored
    assert base64.b64encode(b"[REDACTED:aws-key]") in stored


def test_a_value_without_bytes_is_stored_as_msgspec_encodes_it() -> None:
    value = {"a": [1, 2, {"b": "text", "c": None}], "d": 1.5}
    assert bytes(encode(value, path="v", redactor=Redactor())) == msgspec.json.encode(value)


def _nested(depth: int, leaf: object) -> object:
    value: object = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_too_deep_is_refused_first_even_holding_bytes() -> None:
    value = {"ok": b"bytes", "deep": _nested(MAX_DEPTH + 5, 1)}
    with pytest.raises(NotSerialisableError) as raised:
        encode(value, path="v", redactor=Redactor())
    path = raised.value.path
    assert path == "v.deep" + "[0]" * (MAX_DEPTH - 1)
    assert too_deep(value) == ".deep" + "[0]" * (MAX_DEPTH - 1)


def test_depth_at_the_limit_is_accepted() -> None:
    assert too_deep(_nested(MAX_DEPTH, b"x")) is None
    assert too_deep(_nested(MAX_DEPTH + 1, b"x")) == "[0]" * MAX_DEPTH


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({1: "from int key", "1": "from str key"}, "input"),
        ({"outer": {2: 1, "2": 2}}, "input.outer"),
        ([{1.5: "a", "1.5": "b"}], "input[0]"),
    ],
)
def test_keys_that_collide_once_encoded_are_refused(value: object, named: str) -> None:
    """``{1: ..., "1": ...}`` encoded to an object holding ``"1"`` twice: the reader kept one
    value (the other silently lost), and the exported bundle was refused as malformed. Refused
    before anything is stored, naming where."""
    with pytest.raises(NotSerialisableError) as refused:
        encode(value, path="input")
    assert refused.value.path == named, refused.value.path
    assert bytes(encode({1: "a", 2: "b", "3": "c"}, path="input")) == b'{"1":"a","2":"b","3":"c"}'


def test_a_mapping_s_keys_are_compared_once_not_once_per_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first form encoded a mapping's keys again for each key that is not a str: 5,000 int
    keys took 3 s to record instead of 0.5 ms (a regression review). Once per mapping,
    counted."""
    from loom_runtime import codec

    calls: list[object] = []
    real = codec._keys_collide
    monkeypatch.setattr(codec, "_keys_collide", lambda m: calls.append(m) or real(m))
    encode({"a": {i: i for i in range(1000)}, "b": {str(i): i for i in range(1000)}}, path="v")
    assert len(calls) == 1  # the int-keyed mapping, once; the str-keyed one never
