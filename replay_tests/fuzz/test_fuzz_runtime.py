"""Bad decision keys and values, fuzzed.

The property: ``ctx.decide(key, compute)`` with any key and any value
either records the decision and a replay reproduces it identically, or raises a ``LoomError``
(``DecisionKeyError`` for a key, ``NotSerialisableError`` whose ``path`` names the offending
field for a value) with NOTHING recorded for that decision: the execution is still readable,
ends ``failed`` with that error, and holds no decision under the key.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loom_runtime import (
    DecisionKeyError,
    FlowContext,
    FlowRegistry,
    Loom,
    LoomError,
    NotSerialisableError,
    Redactor,
    SecretRefusedError,
    codec,
)
from loom_runtime.codec import MAX_DEPTH
from loom_runtime.errors import LogWriteError

FUZZ = settings.get_profile("loom-fuzz")

# What the one flow below decides: set by each example before it runs the flow.
CASE: dict[str, Any] = {}

flows = FlowRegistry()


@flows.flow("decide-once", version="fuzz")
def decide_once(ctx: FlowContext) -> Any:
    return ctx.decide(CASE["key"], lambda: CASE["value"])


@flows.flow("raise-in-compute", version="fuzz")
def raise_in_compute(ctx: FlowContext) -> Any:
    def compute() -> Any:
        raise ValueError(CASE["message"])

    return ctx.decide("k", compute)


class Opaque:
    """Something msgspec cannot encode."""

    def __repr__(self) -> str:
        return "Opaque()"


UNENCODABLE = st.one_of(
    st.builds(Opaque),
    st.just(object()),
    st.complex_numbers(),
    st.just(Ellipsis),
    st.just(lambda: None),
)
SAFE_TEXT = st.text()  # lone surrogates included: refused in keys, in values with their path
JSONISH = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        SAFE_TEXT,
        st.binary(max_size=8),
        st.datetimes(timezones=st.just(dt.UTC)),
        st.uuids(),
        st.decimals(allow_nan=False),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(st.integers(), max_size=4),
        st.dictionaries(SAFE_TEXT, inner, max_size=4),
        st.dictionaries(st.integers(), inner, max_size=3),
    ),
    max_leaves=15,
)
VALUES = st.recursive(
    st.one_of(JSONISH, UNENCODABLE),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(SAFE_TEXT, inner, max_size=3),
        st.dictionaries(st.one_of(st.tuples(st.integers()), st.none()), inner, max_size=2),
    ),
    max_leaves=10,
)
KEYS = st.one_of(
    SAFE_TEXT,
    st.sampled_from(["", "k#2", "#", "now", "a" * 5000, "k\x00", "\u202e", "🦜"]),
    st.integers(),
    st.none(),
    st.binary(max_size=4),
    st.lists(st.text(max_size=2), max_size=2),
)


@pytest.fixture
def loom(db_url: str) -> Iterator[Loom]:
    """A Loom with the fuzz flows on a fresh log (each backend)."""
    with Loom(db_url, flows=flows) as instance:
        yield instance


def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), so it can be stored."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def round_tripped(value: Any) -> Any:
    """What the log gives back for ``value`` (tuples become lists, a set the list of its
    members in the order of their JSON, ADR 0002 amended "sets"): the codec's own encoding,
    not msgspec's, which lists a set in its iteration order (``{0, -1}`` as ``[0, -1]``,
    where the log stores ``[-1, 0]``: a case the fuzz found on PostgreSQL)."""
    return msgspec.json.decode(codec.encode(value, path="value"))


def run_case(loom: Loom, key: Any, value: Any) -> None:
    """Decide ``value`` under ``key``: an identical replay, or a typed refusal storing no value
    (a key that cannot be stored records nothing; a value that cannot is the decision's
    recorded failure, ADR 0026 "kept failures", and the execution replays identically)."""
    CASE.update(key=key, value=value)
    position = loom.log.position
    redacted = loom.log.redactor.total if loom.log.redactor else 0
    try:
        run = loom.run("decide-once")
    except LoomError as error:
        [summary] = [s for s in loom.executions() if s.log_position == position]
        assert summary.status == "failed"
        execution = loom.execution(summary.execution_id)
        assert execution.error is not None
        assert execution.error[0].endswith(type(error).__name__)
        if isinstance(error, DecisionKeyError):
            assert execution.decisions == {}
            assert not isinstance(key, str) or key == "" or not encodable(key)
        else:
            assert isinstance(error, NotSerialisableError)
            assert_refused_value(loom, summary.execution_id)
            assert error.path.startswith(f"decision {key!r}")
        return
    assert isinstance(key, str) and key
    replay = loom.replay(run.execution_id)
    assert replay.identical, replay.describe()
    assert replay.output == run.output
    assert list(loom.execution(run.execution_id).decisions) == [key]
    if (loom.log.redactor.total if loom.log.redactor else 0) == redacted:
        assert run.output == round_tripped(value)


@FUZZ
@given(key=KEYS, value=VALUES)
@example(key="k", value={"a": [1, {"b": Opaque()}]})
@example(key="k", value={(1, 2): "tuple key"})
@example(key="k", value={None: "None key"})
@example(key="k", value=[float("nan"), float("inf"), -0.0])
@example(key="k", value=2**70)
@example(key="k", value={1: "x", "1": "y"})
@example(key="", value=1)
@example(key=5, value=1)
@example(key=b"k", value=1)
@example(key="k\x00", value="v\x00")
@example(key="a" * 5000, value=None)
def test_any_key_and_value_replay_identically_or_are_refused_whole(
    loom: Loom, key: Any, value: Any
) -> None:
    """Any key and value: recorded and replayed identically, or a LoomError recording nothing."""
    run_case(loom, key, value)


def poisoned(depth: int, path: str) -> tuple[Any, str]:
    """A value with one unencodable leaf ``depth`` containers down, and the path naming it."""
    value: Any = Opaque()
    for level in reversed(range(depth)):
        value = [0, value] if level % 2 else {"ok": 1, f"f{level}": value}
    for level in range(depth):
        path += "[1]" if level % 2 else f".f{level}"
    return value, path


@pytest.mark.parametrize("depth", [0, 1, 2, 5, 30])
def test_the_error_path_names_the_unencodable_leaf(loom: Loom, depth: int) -> None:
    """NotSerialisableError.path names exactly the field that cannot be stored."""
    value, expected = poisoned(depth, "decision 'k'")
    CASE.update(key="k", value=value)
    with pytest.raises(NotSerialisableError) as caught:
        loom.run("decide-once")
    assert caught.value.path == expected


def test_values_msgspec_turns_into_json_replay_as_their_json(loom: Loom) -> None:
    """Tuples, sets, bytes, Decimals, UUIDs and datetimes replay as the JSON the live run saw."""
    value = {
        "t": (1, 2),
        "s": frozenset({3}),
        "b": b"\x00\xff",
        "d": Decimal("1.5"),
        "u": uuid.UUID(int=1),
        "at": dt.datetime(2024, 1, 2, tzinfo=dt.UTC),
    }
    run_case(loom, "k", value)


def deep_list(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_a_moderately_nested_value_replays_identically(loom: Loom) -> None:
    """A value nested 100 levels deep is recorded and replayed identically."""
    run_case(loom, "k", deep_list(100))


def assert_refused_value(loom: Loom, execution_id: Any) -> None:
    """The refused decision is recorded as its ``NotSerialisableError``, with no value, and
    the execution replays identically (the refusal raised again where the flow asked)."""
    [refused] = loom.execution(execution_id).decisions.values()
    assert refused.value is None
    assert (refused.error_type or "").endswith(":NotSerialisableError")
    assert loom.replay(execution_id).identical


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 600, 1200, 100_000])
def test_a_deeply_nested_value_is_recorded_or_refused_with_a_typed_error(
    loom: Loom, depth: int
) -> None:
    """A value nested past MAX_DEPTH is refused with NotSerialisableError; no value stored."""
    CASE.update(key="k", value=deep_list(depth))
    with pytest.raises(NotSerialisableError) as caught:
        loom.run("decide-once")
    assert caught.value.path.startswith("decision 'k'[0][0]")
    [summary] = loom.executions()
    assert summary.status == "failed"
    assert_refused_value(loom, summary.execution_id)


def test_a_value_nested_exactly_max_depth_replays_identically(loom: Loom) -> None:
    """A value nested exactly MAX_DEPTH levels deep is recorded and replayed identically."""
    run_case(loom, "k", deep_list(MAX_DEPTH))


def test_a_lone_surrogate_key_is_refused_and_the_execution_stays_readable(loom: Loom) -> None:
    """A key with a lone surrogate is refused with a LoomError; the execution stays readable."""
    run_case(loom, "k\ud800", 1)


def test_a_lone_surrogate_value_is_refused_with_its_path(loom: Loom) -> None:
    """A value with a lone surrogate is refused with NotSerialisableError naming the field."""
    CASE.update(key="k", value={"a": ["fine", "bad \udc00"]})
    with pytest.raises(NotSerialisableError):
        loom.run("decide-once")
    [summary] = loom.executions()
    assert_refused_value(loom, summary.execution_id)


def test_a_compute_error_with_a_lone_surrogate_keeps_the_execution_readable(loom: Loom) -> None:
    """A compute error whose message has a lone surrogate leaves a readable, failed execution."""
    CASE.update(message="bad \ud800")
    with pytest.raises(Exception):  # noqa: B017 - the property is about the log, not the type
        loom.run("raise-in-compute")
    for summary in loom.executions():
        loom.execution(summary.execution_id)


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["NUL", "surrogate"])
def test_an_error_message_is_recorded_escaped_and_replays_identically(loom: Loom, bad: str) -> None:
    """A NUL or a lone surrogate in an error message is stored escaped; the replay matches it."""
    CASE.update(message=f"bad {bad} message")
    with pytest.raises(ValueError):
        loom.run("raise-in-compute")
    [summary] = loom.executions()
    execution = loom.execution(summary.execution_id)
    assert execution.error is not None
    assert execution.error[1] == f"bad {bad.encode('unicode_escape').decode()} message"
    assert execution.decisions["k"].message == execution.error[1]
    assert loom.replay(summary.execution_id).identical


def versions(loom: Loom, execution_id: Any) -> list[int]:
    """The stored versions of an execution's stream, as the log holds them."""
    return [row.version for row in loom.log.rows(execution_id)]


def test_an_event_the_mapper_refuses_leaves_no_version_gap(db_url: str) -> None:
    """A decision refused while it is stored (a secret in its key, refuse mode) leaves the
    execution readable and failed: the Failed event takes the next stored version."""
    with Loom(db_url, flows=flows, redactor=Redactor(mode="refuse")) as loom:
        CASE.update(key="auth Bearer abc123def456ghi789", value=1)
        with pytest.raises(SecretRefusedError):
            loom.run("decide-once")
        [summary] = loom.executions()
        assert summary.status == "failed"
        assert versions(loom, summary.execution_id) == [1, 2]
        assert loom.execution(summary.execution_id).decisions == {}


def failing_on(loom: Loom, monkeypatch: pytest.MonkeyPatch, *calls: int) -> None:
    """Make the log's insert fail (OSError) on the given 1-based calls, and work otherwise."""
    insert = loom.log.application.recorder.insert_events
    made: list[int] = []

    def insert_or_fail(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        if len(made) in calls:
            raise OSError("disk full")
        return insert(*args, **kwargs)

    monkeypatch.setattr(loom.log.application.recorder, "insert_events", insert_or_fail)


def test_a_failed_database_write_leaves_no_version_gap(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database failure storing a decision is a LogWriteError, and the failure that follows
    is stored at the next version: the execution stays readable."""
    CASE.update(key="k", value=1)
    failing_on(loom, monkeypatch, 2)  # 1: Created, 2: the decision, 3: Failed
    with pytest.raises(LogWriteError) as caught:
        loom.run("decide-once")
    assert isinstance(caught.value.__cause__, OSError)
    [summary] = loom.executions()
    assert summary.status == "failed"
    assert versions(loom, summary.execution_id) == [1, 2]
    execution = loom.execution(summary.execution_id)
    assert execution.decisions == {}
    assert execution.error is not None and execution.error[0].endswith("LogWriteError")


def test_a_worker_that_cannot_reread_the_log_stops_appending(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the log can neither store an event nor be re-read, the worker appends nothing more;
    the execution keeps its stored versions and resumes to completion later."""
    CASE.update(key="k", value=7)
    failing_on(loom, monkeypatch, 2, 3)

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise OSError("log unreachable")

    monkeypatch.setattr(loom.log, "events", unreadable)
    with pytest.raises(LogWriteError, match="appends nothing more"):
        loom.run("decide-once")
    monkeypatch.undo()
    [summary] = loom.executions()
    assert summary.status == "running"
    assert versions(loom, summary.execution_id) == [1]
    assert loom.resume(summary.execution_id).output == 7
    assert versions(loom, summary.execution_id) == [1, 2, 3, 4]


def test_a_failed_first_write_stores_nothing_and_says_so(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the Created event itself cannot be stored, run raises LogWriteError and the log
    holds no trace of the execution."""
    CASE.update(key="k", value=1)
    failing_on(loom, monkeypatch, 1)
    with pytest.raises(LogWriteError, match="nothing of it was stored"):
        loom.run("decide-once")
    assert loom.executions() == []
