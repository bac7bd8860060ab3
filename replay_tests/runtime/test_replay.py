"""Replay: answers from the log only, appends nothing, and reports each divergence precisely."""

from __future__ import annotations

from typing import Any

import pytest

from loom_runtime import (
    DecisionInputChangedError,
    FlowContext,
    Loom,
    NotSerialisableError,
    OutcomeChangedError,
    OutputChangedError,
    ReplayDivergence,
    UnrecordedDecisionError,
    UnusedDecisionsError,
)
from loom_runtime.replay import DESCRIBED
from replay_tests.unchecked import register_unchecked


def _boom() -> Any:
    raise AssertionError("compute must never run during a replay")


def _record(db_url: str, fn: Any) -> Any:
    """Run ``fn`` as flow 'f' with the "old code", in its own Loom on the same log."""
    with Loom(db_url) as old:
        old.flow("f")(fn)
        return old.run("f")


def test_replay_never_calls_compute_and_appends_nothing(loom: Loom) -> None:
    """Every decision is answered from the log: a compute that raises is never reached."""
    state = {"live": True}

    def f(ctx: FlowContext, q: str) -> str:
        a = ctx.decide("a", lambda: f"A({q})" if state["live"] else _boom())
        b = ctx.decide("b", lambda: f"B({a})" if state["live"] else _boom())
        return b

    loom.flow("f")(f)
    run = loom.run("f", q="x")
    state["live"] = False
    before = loom.log.position
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == "B(A(x))"
    assert loom.log.position == before


def test_unrecorded_key_names_the_nearest_recorded_keys(loom: Loom, db_url: str) -> None:
    """A key the recording never made stops the replay and suggests what was recorded."""
    run = _record(db_url, lambda ctx: ctx.decide("search:db slow", lambda: 1))

    @loom.flow("f")
    def changed(ctx: FlowContext) -> Any:
        return ctx.decide("search:db slowness", _boom)

    result = loom.replay(run.execution_id)
    assert not result.identical
    [divergence] = result.divergences
    assert isinstance(divergence, UnrecordedDecisionError)
    assert divergence.nearest == ["search:db slow"]
    assert "search:db slow" in str(divergence)


def test_changed_input_is_reported_as_a_unified_diff(loom: Loom, db_url: str) -> None:
    """A changed prompt template shows up as a diff of recorded vs replayed input."""
    run = _record(
        db_url,
        lambda ctx: ctx.decide("model", lambda: "ok", input={"prompt": "Answer briefly."}),
    )

    @loom.flow("f")
    def changed(ctx: FlowContext) -> Any:
        return ctx.decide("model", _boom, input={"prompt": "Answer in detail."})

    result = loom.replay(run.execution_id)
    [divergence] = result.divergences
    assert isinstance(divergence, DecisionInputChangedError)
    assert '-  "prompt": "Answer briefly."' in divergence.diff
    assert '+  "prompt": "Answer in detail."' in divergence.diff
    assert result.output == "ok"  # the recorded value still answered


def test_recorded_decisions_never_asked_for_are_reported(loom: Loom, db_url: str) -> None:
    """Decisions the current code no longer makes are a divergence, listed by key."""
    run = _record(db_url, lambda ctx: [ctx.decide("a", lambda: 1), ctx.decide("b", lambda: 2)][0])

    @loom.flow("f")
    def changed(ctx: FlowContext) -> Any:
        return ctx.decide("a", _boom)

    [divergence] = loom.replay(run.execution_id).divergences
    assert isinstance(divergence, UnusedDecisionsError)
    assert divergence.keys == ["b"]


def test_changed_output_is_reported_as_a_unified_diff(loom: Loom, db_url: str) -> None:
    """Same decisions, different output: the diff shows the changed field."""
    run = _record(db_url, lambda ctx: {"answer": ctx.decide("a", lambda: "x"), "v": 1})

    @loom.flow("f")
    def changed(ctx: FlowContext) -> Any:
        return {"answer": ctx.decide("a", _boom), "v": 2}

    [divergence] = loom.replay(run.execution_id).divergences
    assert isinstance(divergence, OutputChangedError)
    assert '-  "v": 1' in divergence.diff and '+  "v": 2' in divergence.diff


def test_raising_where_the_recording_returned_is_an_outcome_change(loom: Loom, db_url: str) -> None:
    """The recorded run returned; the replayed code raises: reported, not propagated."""
    run = _record(db_url, lambda ctx: ctx.decide("a", lambda: 1))

    @loom.flow("f")
    def changed(ctx: FlowContext) -> Any:
        ctx.decide("a", _boom)
        raise RuntimeError("new bug")

    [divergence] = loom.replay(run.execution_id).divergences
    assert isinstance(divergence, OutcomeChangedError)
    assert "new bug" in divergence.replayed


def test_every_divergence_shares_one_base_and_can_be_raised(loom: Loom, db_url: str) -> None:
    """raise_for_divergence raises the first divergence; all derive from ReplayDivergence."""
    run = _record(db_url, lambda ctx: ctx.decide("a", lambda: 1))

    @loom.flow("f")
    def changed(ctx: FlowContext) -> Any:
        return ctx.decide("zzz", _boom)

    result = loom.replay(run.execution_id)
    with pytest.raises(ReplayDivergence):
        result.raise_for_divergence()
    assert "diverged" in result.describe()


def test_a_recorded_compute_failure_replays_as_the_same_failure(loom: Loom) -> None:
    """The live run's compute raised ValueError: the replay raises ValueError at that point."""

    def fails() -> Any:
        raise ValueError("search backend down")

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        try:
            return ctx.decide("search", fails)
        except ValueError as exc:
            return f"fallback: {exc}"

    run = loom.run("f")
    assert run.output == "fallback: search backend down"
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output


@pytest.mark.parametrize("missing", ["cache", 3, ("tenant", 7)])
def test_a_recorded_key_error_replays_as_a_key_error_with_its_key(
    loom: Loom, missing: object
) -> None:
    """``str(KeyError("cache"))`` is ``'cache'`` with quotes: rebuilt from that text the
    replayed error said ``"'cache'"``, failed the same-message check and came back as a
    RecordedComputeError, so the flow's ``except KeyError`` path was not taken on replay."""

    def lookup() -> Any:
        raise KeyError(missing)

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        try:
            return ctx.decide("lookup", lookup)
        except KeyError as exc:
            return f"no {exc.args[0]!r}"

    run = loom.run("f")
    assert run.output == f"no {missing!r}"
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_counterfactual_replay_runs_chosen_kinds_live(loom: Loom) -> None:
    """live={'retrieval'} re-runs retrievals against today's data, the rest stays recorded."""
    corpus = {"docs": ["old"]}

    @loom.flow("f")
    def f(ctx: FlowContext) -> Any:
        hits = ctx.decide("search", lambda: list(corpus["docs"]), kind="retrieval")
        return ctx.decide("model", lambda: f"answer from {hits}", kind="model")

    run = loom.run("f")
    corpus["docs"] = ["new"]
    before = loom.log.position
    result = loom.replay(run.execution_id, live={"retrieval"})
    assert result.live_values == {"search": ["new"]}
    assert result.output == "answer from ['old']"  # the model answer stayed recorded
    assert result.identical  # the model key was still asked with the same (absent) input
    assert loom.log.position == before


def test_thousands_of_divergences_are_described_in_a_bounded_account(loom: Loom) -> None:
    """``describe()`` is what ``loom replay`` and a failing bundle test print: a loop whose
    prompt changed gives one divergence, with its diff, per decision, and 3,000 of them made
    a report no terminal or CI log could show. The first ones are described, then a count;
    ``divergences`` (and ``loom replay --json``) hold them all."""
    prompt = {"text": "first"}

    @loom.flow("loop")
    def loop(ctx: FlowContext) -> int:
        for n in range(3_000):
            ctx.decide(f"step-{n}", lambda n=n: n, input=prompt["text"])
        return 0

    run = loom.run("loop")
    prompt["text"] = "second"
    result = loom.replay(run.execution_id)
    assert len(result.divergences) == 3_000
    described = result.describe()
    assert described.count("DecisionInputChangedError") == DESCRIBED
    assert described.endswith(
        f"... and {3_000 - DESCRIBED:,} more divergences (all in ReplayResult.divergences, "
        "or loom replay ID --json)"
    )


def test_a_flow_name_with_a_line_break_forges_no_line_of_the_verdict(loom: Loom) -> None:
    """The verdict quoted the flow's name as it is: a name holding a line break printed a
    line of its own, which could read as another execution's "replayed identically" in ``loom
    replay``, a bundle test or a CI log. The name is quoted on the verdict's line."""
    name = "f\nexecution 00000000-0000-4000-8000-000000000000 (g) replayed identically"
    asked = {"value": 1}

    @register_unchecked(loom, name)  # refused by registration now; an old log holds it
    def f(ctx: FlowContext) -> int:
        return ctx.decide("value", lambda: asked["value"], input=asked["value"])

    run = loom.run(name)
    described = loom.replay(run.execution_id).describe()
    assert described.endswith(") replayed identically"), described
    assert len(described.splitlines()) == 1, described
    assert "(f<U+000A>execution" in described, described  # shown as the CLI shows it
    asked["value"] = 2
    diverged = loom.replay(run.execution_id).describe().splitlines()
    assert diverged[0].endswith(") diverged:"), diverged  # the control: it still diverges
    assert not [line for line in diverged if line.startswith("execution 0000")], diverged


def test_an_output_that_does_not_fit_the_return_type_replays_as_the_failure_it_was(
    loom: Loom, db_url: str
) -> None:
    """A live run refuses an output that does not fit the flow's return annotation (the
    execution fails); its replay encoded the output unchecked and then decoded it with the
    type, a ``msgspec.ValidationError`` out of ``replay``. An incident caused by a model answer
    of the wrong shape could never replay as identical. The replay checks the output as the
    run did: the same refusal, the same failure, identical; a change is still a divergence."""
    answer = {"value": "not an int"}

    def flow(ctx: FlowContext) -> int:
        return ctx.decide("a", lambda: answer["value"])

    with Loom(db_url) as old:
        old.flow("f")(flow)
        with pytest.raises(NotSerialisableError):
            old.run("f")
        [summary] = old.executions()
    loom.flow("f")(flow)
    result = loom.replay(summary.execution_id)
    assert result.identical, result.describe()
    assert result.output is None

    @loom.flow("g")
    def fits(ctx: FlowContext) -> int:
        return 1

    run = loom.run("g")
    loom.flows = type(loom.flows)()

    @loom.flow("g")
    def no_longer_fits(ctx: FlowContext) -> int:
        return "one"  # type: ignore[return-value]

    [divergence] = loom.replay(run.execution_id).divergences
    assert isinstance(divergence, OutcomeChangedError)
    assert "does not fit its declared type" in divergence.replayed
