"""A set is stored in one order, whatever the process (ADR 0002, amended "sets").

A set encodes in its iteration order, and string hashes are seeded per process: an input or
an output holding a set of strings was recorded in one order and encoded in another by a
replay in any other process (CI, the pytest plugin, ``loom replay``), which reported the
unchanged flow's input and output changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from loom_runtime import codec

NAMES = [f"tool-{index:02d}" for index in range(20)]

PROGRAM = textwrap.dedent(
    """
    import sys
    from loom_runtime import Loom

    loom = Loom(sys.argv[1])

    @loom.flow("pick")
    def pick(ctx, names: list[str]) -> set[str]:
        offered = set(names)
        ctx.decide("model", lambda: "ok", input={"tools": offered})
        return offered

    if sys.argv[2] == "record":
        print(loom.run("pick", names=NAMES).execution_id)
    else:
        result = loom.replay(sys.argv[3])
        print(result.describe())
        sys.exit(0 if result.identical else 1)
    """
).replace("NAMES", repr(NAMES))


def _python(seed: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args], env=env, capture_output=True, text=True
    )


@pytest.mark.slow
def test_a_set_recorded_in_one_process_replays_identically_in_others(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    recorded = _python(1, url, "record")
    assert recorded.returncode == 0, recorded.stderr
    execution_id = recorded.stdout.strip()
    for seed in (2, 3, 4):
        replayed = _python(seed, url, "replay", execution_id)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_a_set_encodes_in_its_members_order() -> None:
    assert bytes(codec.encode(set(NAMES), path="value")) == codec._encoder.encode(sorted(NAMES))
    assert bytes(codec.encode({"b": frozenset(NAMES)}, path="value")).startswith(
        b'{"b":["tool-00","tool-01",'
    )


class Offered(msgspec.Struct):
    tools: set[object]


def test_a_set_of_members_of_several_types_is_ordered_by_their_json() -> None:
    """``{1, "a", None}`` has no order of its own: its members' JSON gives one, in a dict and
    inside a Struct alike."""
    assert bytes(codec.encode({"tools": {1, "a", None}}, path="v")) == b'{"tools":["a",1,null]}'
    assert bytes(codec.encode(Offered(tools={1, "a"}), path="v")) == b'{"tools":["a",1]}'


def test_sets_of_sets_are_ordered_by_their_json_not_by_inclusion() -> None:
    """Review of 6 December: ``<`` between frozensets means "is a subset of", a partial
    order, so sorting them kept the seeded iteration order; their JSON orders them."""
    groups = {frozenset({f"team-{n}", f"team-{n}x"}) for n in range(8)}  # none inside another
    expected = [[f"team-{n}", f"team-{n}x"] for n in range(8)]
    assert bytes(codec.encode({"groups": groups}, path="v")) == codec._encoder.encode(
        {"groups": expected}
    )


def test_a_set_leaves_its_neighbours_as_they_were() -> None:
    """Review of 6 December: a dict with integer keys beside a set was refused (msgspec sorts
    keys only when they are strings), and every dict beside a set came back with its keys
    sorted. Only the sets are ordered now."""
    value = {"by_id": {17: "ada", 3: "grace"}, "roles": {"admin"}, "z": 1, "a": 2}
    assert bytes(codec.encode(value, path="v")) == (
        b'{"by_id":{"17":"ada","3":"grace"},"roles":["admin"],"z":1,"a":2}'
    )


class Normalised(msgspec.Struct):
    """Turns its tags back into a set when made, as a normalising hook does."""

    tags: frozenset[str] | list[str]

    def __post_init__(self) -> None:
        self.tags = frozenset(self.tags)


class WithDefault(msgspec.Struct, omit_defaults=True):
    name: str
    exclude: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset({"web", "docs"})


def test_structs_keep_their_hooks_and_defaults() -> None:
    """The review of the change above: ``structs.replace`` ran ``__post_init__``, which made
    the ordered list a set again (stored in iteration order) or refused it; and an empty
    default set became ``[]``, which an ``omit_defaults`` Struct then stored."""
    value = Normalised(tags=frozenset(NAMES))
    assert bytes(codec.encode(value, path="v")) == codec._encoder.encode({"tags": sorted(NAMES)})
    assert bytes(codec.encode(WithDefault(name="a"), path="v")) == b'{"name":"a"}'
    changed = WithDefault(name="a", sources=frozenset({"web", "api"}))  # not the default: ordered
    assert bytes(codec.encode(changed, path="v")) == b'{"name":"a","sources":["api","web"]}'


def test_a_set_in_an_attrs_instance_is_ordered_too() -> None:
    attrs = pytest.importorskip("attrs")

    @attrs.frozen
    class Offer:
        tools: frozenset[str]

    assert bytes(codec.encode(Offer(tools=frozenset(NAMES)), path="v")) == (
        codec._encoder.encode({"tools": sorted(NAMES)})
    )


DEFAULT = frozenset(NAMES)
FACTORY_CALLS: list[int] = []


def _factory() -> frozenset[str]:
    FACTORY_CALLS.append(1)
    return frozenset(NAMES)


class StaticDefault(msgspec.Struct, omit_defaults=True):
    tools: frozenset[str] = DEFAULT


class FactoryDefault(msgspec.Struct, omit_defaults=True):
    tools: frozenset[str] = msgspec.field(default_factory=_factory)


class ArrayDefault(msgspec.Struct, omit_defaults=True, array_like=True):
    tools: frozenset[str] = DEFAULT


def test_a_set_msgspec_would_store_is_ordered_whatever_its_default() -> None:
    """The fourth review of 6 December: a field was taken for omitted when it only equalled
    its default, but msgspec leaves out only the default object itself, never in an
    ``array_like`` Struct, and never by a factory's value (which was called on every
    encode). What msgspec stores is ordered; what it leaves out stays out."""
    ordered = codec._encoder.encode(sorted(NAMES))
    equal = frozenset(list(NAMES))  # equal to the default, not it
    assert bytes(codec.encode(StaticDefault(tools=equal), path="v")) == (
        b'{"tools":' + ordered + b"}"
    )
    assert bytes(codec.encode(StaticDefault(), path="v")) == b"{}"
    FACTORY_CALLS.clear()
    made = FactoryDefault()  # the factory runs here, once
    assert bytes(codec.encode(made, path="v")) == b'{"tools":' + ordered + b"}"
    assert FACTORY_CALLS == [1]
    assert bytes(codec.encode(ArrayDefault(), path="v")) == b"[" + ordered + b"]"
