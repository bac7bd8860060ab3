"""A decision asked with another ``kind`` than it was recorded with is a divergence.

The kind says what a decision is ("model", "retrieval") to audits and to counterfactual
replays (``live={"model"}`` computes every model decision again). A decision recorded as a
model call and asked now as a retrieval replayed "identically", and ``live={"model"}``
silently answered it from the log instead of calling the model (review of 6 December).
"""

from __future__ import annotations

from typing import Any

from loom_runtime import DecisionKindChangedError, Loom

KIND = {"now": "model"}
CALLS: list[str] = []


def build(url: str) -> Loom:
    loom = Loom(url)

    @loom.flow("ask")
    def ask(ctx: Any) -> str:
        def model() -> str:
            CALLS.append("model")
            return "42"

        return ctx.decide("answer", model, input={"q": "why?"}, kind=KIND["now"])

    return loom


def test_a_changed_kind_diverges_naming_both(sqlite_url: str) -> None:
    KIND["now"] = "model"
    with build(sqlite_url) as loom:
        run = loom.run("ask")
        assert loom.replay(run.execution_id).identical  # unchanged: identical (the control)
        KIND["now"] = "retrieval"
        result = loom.replay(run.execution_id)
        CALLS.clear()
        live = loom.replay(run.execution_id, live={"model"})
    [finding] = result.divergences
    assert isinstance(finding, DecisionKindChangedError)
    assert (finding.key, finding.recorded, finding.asked) == ("answer", "model", "retrieval")
    assert not live.identical and CALLS == []  # not silently answered as if it were a model's
