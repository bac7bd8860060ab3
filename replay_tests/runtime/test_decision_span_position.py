"""ADR 0034: a decision's span carries ``loom.log_position`` of the decision's own event (the
one a ``loom verify``/``executions show`` reader finds), not the execution's start position.

The expected positions are read straight from the log (or the bundle); spans come from the
OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loom_runtime import Execution, Loom

_DECISION_TOPICS = (Execution.DecisionRecorded.TOPIC, Execution.DecisionFailed.TOPIC)


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    yield found, provider
    provider.shutdown()


def _positions_in_spans(spans: list[ReadableSpan]) -> dict[str, object]:
    """Each decision span's ``loom.log_position`` by key (None where it has none)."""
    found = {}
    for span in spans:
        attributes = span.attributes or {}
        if "loom.decision.key" in attributes:
            found[str(attributes["loom.decision.key"])] = attributes.get("loom.log_position")
    return found


def _positions_in_log(loom: Loom, execution_id: uuid.UUID) -> dict[str, int]:
    """Where the log holds each decision of the execution (the latest event per key)."""
    return {
        loom.log.decode(record).key: record.position
        for record in loom.log.notifications(topics=_DECISION_TOPICS)
        if record.stream == execution_id
    }


def _loom(
    tmp_path: Path,
    provider: TracerProvider,
    name: str = "loom.db",
    failing: dict[str, bool] | None = None,
) -> Loom:
    """A traced Loom with flow ``steps``, whose ``second`` decision raises while
    ``failing["second"]``."""
    loom = Loom(f"sqlite:///{tmp_path / name}", tracer_provider=provider)
    failing = {"second": False} if failing is None else failing

    @loom.flow("steps")
    def steps(ctx: Any, n: int) -> int:
        first = ctx.decide("first", lambda: n)
        ctx.now()

        def second() -> int:
            if failing["second"]:
                raise RuntimeError("provider down")
            return 2

        return int(first + ctx.decide("second", second))

    return loom


def test_each_decision_span_of_a_run_has_its_own_events_position(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    """Three decisions, three different positions, each where the log stored it."""
    spans, provider = exporter
    with _loom(tmp_path, provider) as loom:
        loom.run("steps", n=1)  # another execution first: positions are the log's, not the stream's
        spans.clear()
        run = loom.run("steps", n=1)
        found = _positions_in_spans(list(spans.get_finished_spans()))
        expected = _positions_in_log(loom, run.execution_id)
    assert sorted(expected) == ["first", "now", "second"]
    assert found == expected
    assert len(set(expected.values())) == 3
    assert min(expected.values()) > run.log_position


def test_a_replay_reports_where_the_recording_is(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    """Replayed from the log or from an exported bundle, a decision's span has the position
    its recorded event has in the log it was recorded in."""
    spans, provider = exporter
    with _loom(tmp_path, provider) as loom:
        loom.run("steps", n=1)
        run = loom.run("steps", n=2)
        expected = _positions_in_log(loom, run.execution_id)
        bundle = loom.export(run.execution_id, tmp_path / "run.json")
        spans.clear()
        assert loom.replay(run.execution_id).identical
        assert _positions_in_spans(list(spans.get_finished_spans())) == expected
    with _loom(tmp_path, provider, "elsewhere.db") as other:
        spans.clear()
        assert other.replay_bundle(bundle).identical
        assert _positions_in_spans(list(spans.get_finished_spans())) == expected


def test_a_failed_decision_and_its_recomputation_each_have_their_own_position(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    """The failure's span points at the DecisionFailed event; after the execution is reopened,
    the kept decision's span points at its original event and the recomputed one's at its
    new event."""
    spans, provider = exporter
    failing = {"second": True}
    with _loom(tmp_path, provider, failing=failing) as loom:
        with pytest.raises(RuntimeError):
            loom.run("steps", n=1)
        (execution_id,) = {
            record.stream for record in loom.log.notifications(topics=_DECISION_TOPICS)
        }
        before = _positions_in_log(loom, execution_id)
        assert _positions_in_spans(list(spans.get_finished_spans())) == before
        failing["second"] = False
        spans.clear()
        loom.resume(execution_id, retry_failed=True)
        after = _positions_in_log(loom, execution_id)
        found = _positions_in_spans(list(spans.get_finished_spans()))
    assert found == after
    assert after["first"] == before["first"]
    assert after["second"] > before["second"]


def test_a_forks_spans_point_at_the_forks_own_events(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    """Inherited and overridden decisions are the fork's own events, at the fork's positions."""
    spans, provider = exporter
    with _loom(tmp_path, provider) as loom:
        parent = loom.run("steps", n=1)
        spans.clear()
        fork = loom.fork(parent.execution_id, at="second", override={"second": 5})
        found = _positions_in_spans(list(spans.get_finished_spans()))
        expected = _positions_in_log(loom, fork.execution_id)
        parents = _positions_in_log(loom, parent.execution_id)
    assert found == expected
    assert set(expected.values()).isdisjoint(parents.values())


def test_a_live_decision_of_a_replay_has_no_position(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    """A key computed live in a replay is not stored, so its span names no position."""
    spans, provider = exporter
    with _loom(tmp_path, provider) as loom:
        run = loom.run("steps", n=1)
        expected = _positions_in_log(loom, run.execution_id)
        spans.clear()
        loom.replay(run.execution_id, live={"clock"})  # the kind of ctx.now()
        found = _positions_in_spans(list(spans.get_finished_spans()))
    assert found == {**expected, "now": None}


def test_positions_of_an_execution_another_worker_appended_to_since_it_was_loaded(
    exporter: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    """The scan a traced resume makes after claiming reads the stream up to the version this
    worker holds: events another worker appended since are not a reason to fail."""
    _, provider = exporter
    failing = {"second": True}
    with _loom(tmp_path, provider, failing=failing) as loom:
        with pytest.raises(RuntimeError):
            loom.run("steps", n=1)
        (execution_id,) = {
            record.stream for record in loom.log.notifications(topics=_DECISION_TOPICS)
        }
        before = _positions_in_log(loom, execution_id)
        held = loom.execution(execution_id)
        failing["second"] = False
        loom.resume(execution_id, retry_failed=True)  # "another worker" appends past `held`
        assert _positions_in_log(loom, execution_id) != before
        assert loom._recorded_positions(held) == before
