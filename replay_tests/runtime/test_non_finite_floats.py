"""A float JSON has no number for (NaN, +inf, -inf) is refused, never stored as ``null``.

msgspec writes all three as ``null``: a live run got ``None`` back for the ``inf`` it
computed, and a decision input changed from ``inf`` to ``nan`` (or to ``None``) replayed
IDENTICAL. Refused with the field's path, nothing is written (ADR 0002, amended
"non-finite floats").
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from loom_runtime import FlowContext, Loom, NotSerialisableError, Redactor
from loom_runtime.codec import encode


class Reading(msgspec.Struct):
    label: str
    value: float


NON_FINITE = [math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("number", NON_FINITE, ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize(
    ("shape", "path"),
    [
        (lambda n: n, "v"),
        (lambda n: {"a": [1.0, {"b": n}]}, "v.a[1].b"),
        (lambda n: (0.5, n), "v[1]"),
        (lambda n: [Reading(label="x", value=n)], "v[0].value"),
        (lambda n: {"s": {n}}, "v.s[*]"),
    ],
    ids=["top", "nested dict", "tuple", "struct", "set"],
)
@pytest.mark.parametrize("redacted", [False, True], ids=["plain", "redacted"])
def test_a_non_finite_float_is_refused_with_its_path(
    number: float, shape: Any, path: str, redacted: bool
) -> None:
    with pytest.raises(NotSerialisableError) as raised:
        encode(shape(number), path="v", redactor=Redactor() if redacted else None)
    assert raised.value.path == path
    assert "NaN" in str(raised.value) or "infinite" in str(raised.value)


def test_finite_floats_and_nulls_are_stored_as_before() -> None:
    value = {"a": None, "b": [1.5, -0.0, 1e308, None], "c": "null"}
    assert bytes(encode(value, path="v")) == msgspec.json.encode(value)


def test_a_decision_computing_inf_is_recorded_as_its_refusal(loom: Loom) -> None:
    """As any value loom cannot store: the refusal is the decision's recorded failure."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> object:
        return ctx.decide("ratio", lambda: math.inf)

    with pytest.raises(NotSerialisableError):
        loom.run("f")
    (summary,) = loom.executions()
    decision = loom.execution(summary.execution_id).decisions["ratio"]
    assert decision.value is None
    assert decision.error_type == "loom_runtime.errors:NotSerialisableError"


def test_an_input_of_inf_is_refused_so_a_change_to_nan_cannot_replay_identical(
    loom: Loom,
) -> None:
    """Before: inf and nan were both stored as null, and the changed input replayed IDENTICAL."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> object:
        return ctx.decide("k", lambda: 1, input={"threshold": math.inf})

    with pytest.raises(NotSerialisableError) as raised:
        loom.run("f")
    assert raised.value.path.endswith(".threshold")


def test_a_replay_asking_with_nan_where_none_was_recorded_diverges(db_url: str) -> None:
    """Regression review: the replay's fast path compared the input's JSON bytes, where NaN
    is the null stored for None, so the changed input replayed IDENTICAL."""
    inputs: list[object] = [None]

    def flow(ctx: FlowContext) -> object:
        return ctx.decide("k", lambda: 1, input={"mean": inputs[0]})

    with Loom(db_url) as loom:
        loom.flow("f")(flow)
        run = loom.run("f")
        inputs[0] = math.nan
        result = loom.replay(run.execution_id)
    assert not result.identical


def test_a_refusal_s_path_through_a_secret_key_is_redacted_as_the_log_stores_it() -> None:
    """Erasure review of 6 December: the path of a refused value is built from the value's
    own keys, and the live error quoted a secret held in one, while the failure stored for a
    replay is redacted: the flow saw one message live and another replayed."""
    token = "ghp_" + "a" * 36
    for value in ({"x": {token: math.nan}}, {token: [[object()]]}):
        with pytest.raises(NotSerialisableError) as raised:
            encode(value, path="v", redactor=Redactor())
        assert token not in str(raised.value) and token not in raised.value.path
