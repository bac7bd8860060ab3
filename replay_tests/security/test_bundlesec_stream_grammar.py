"""A bundle holding a stream loom never writes is refused rather than half read.

Loom records a key once: numbering gives a repeated call its own key (``k#2``), and a reopening
drops a failed decision before the key is computed again. And an execution ends once: only a
reopening (of a failure) lets it end again. A re-sealed bundle (or an edited log) holding a
second event for a key, or a second ending, made the later one silently replace the first,
so a replay compared with the one the reader of the file might not have looked at, said
"identical", and never asked about the other. Refused in a bundle, which anyone can re-seal;
a log keeps its hash chain, and its invariant checkers must still read one to report the bug
that wrote it (replay_tests/reliability).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import Bundle, read_bundle, write_bundle
from loom_runtime.errors import BundleFormatError

flows = FlowRegistry()


@flows.flow("search", version="t")
def search(ctx: FlowContext, question: str) -> object:
    return ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")


def _forged(folder: Path, *, twice: str) -> Bundle:
    """A recording of ``search`` re-sealed with a copy of its event ``twice`` ("decision" or
    "output"), holding another value, inserted before the real one (a forger's copy)."""
    with Loom(f"sqlite:///{folder / 'loom.db'}", flows=flows) as loom:
        execution_id = loom.run("search", question="q").execution_id
        real = read_bundle(loom.export(execution_id, folder / "real.json"))
    events = list(real.events)
    index = {"decision": 1, "output": 2}[twice]
    state = msgspec.json.decode(events[index].state)
    state["value" if twice == "decision" else "output"] = ["not what the replay compares"]
    other = msgspec.structs.replace(events[index], state=msgspec.json.encode(state).decode())
    events.insert(index, other)
    return real.resealed(
        [
            msgspec.structs.replace(event, version=version)
            for version, event in enumerate(events, start=1)
        ]
    )


@pytest.mark.parametrize("twice", ["decision", "output"])
def test_a_bundle_recording_a_key_or_an_ending_twice_is_refused(tmp_path: Path, twice: str) -> None:
    """Replaying it is a BundleFormatError, not an identical replay of the second."""
    path = write_bundle(_forged(tmp_path, twice=twice), tmp_path / "forged.json")
    with pytest.raises(BundleFormatError, match="again"):
        Loom(flows=flows).replay_bundle(path)


FLAKY: list[object] = []
"""What the next ``model`` decision computes: popped, or IndexError (a failure) when empty."""


@flows.flow("flaky", version="t")
def flaky(ctx: FlowContext, question: str) -> object:
    return ctx.decide("model", lambda: FLAKY.pop())


def _reopened(folder: Path, *, answer: str) -> Path:
    """The bundle of a ``flaky`` run that failed, was reopened, and answered ``answer``."""
    with Loom(f"sqlite:///{folder / 'loom.db'}", flows=flows) as loom:
        FLAKY.clear()
        with pytest.raises(IndexError):
            loom.run("flaky", question="q")
        [summary] = loom.executions()
        FLAKY.append(answer)
        loom.resume(summary.execution_id, retry_failed=True)
        return loom.export(summary.execution_id, folder / "reopened.json")


def test_a_reopened_execution_recording_its_failed_key_again_replays(tmp_path: Path) -> None:
    """The control: a reopening drops the failure and the failed decision, so a bundle of
    Failed, Reopened, the key recorded again and Completed is an execution's, and replays."""
    path = _reopened(tmp_path, answer="answered")
    topics = [event.topic.rsplit(".", 1)[-1] for event in read_bundle(path).events]
    assert topics == [
        "Created", "DecisionFailed", "Failed", "Reopened", "DecisionRecorded", "Completed"
    ]  # fmt: skip
    assert Loom(flows=flows).replay_bundle(path).identical


def test_an_import_cannot_plant_an_execution_in_a_named_stream(tmp_path: Path) -> None:
    """A knowledge scope's, a memory key's and the forget log's streams have ids anyone can
    compute (uuid5 of their names). A bundle re-sealed under such an id, imported before the
    stream's first write, made the scope read the planted execution as its first event (its
    stemmer choice refused) and then append its own events into the execution's stream,
    which no longer rebuilt. An execution id is always random (version 4): any other is
    refused, and nothing is written."""
    from uuid import UUID

    from loom_knowledge import Doc, open_knowledge_base
    from loom_knowledge.corpus.keys import stream_name
    from loom_runtime import stream_id

    with Loom(f"sqlite:///{tmp_path / 'source.db'}", flows=flows) as loom:
        real = read_bundle(
            loom.export(loom.run("search", question="q").execution_id, tmp_path / "r.json")
        )
    scope_stream = stream_id(stream_name("runbooks"))
    planted = msgspec.structs.replace(real, execution_id=scope_stream).resealed(list(real.events))
    path = write_bundle(planted, tmp_path / "planted.json")
    with Loom(f"sqlite:///{tmp_path / 'target.db'}", flows=flows) as target:
        with pytest.raises(BundleFormatError, match="version 4"):
            target.import_bundle(path)
        assert target.log.position == 0
        kb = open_knowledge_base(target, "runbooks", stemmer="english")
        kb.sync([Doc(id="disk.md", text="Rotate the logs when the disk is full.")])
        assert kb.stemmer == "english"
    assert UUID(str(real.execution_id)).version == 4  # the control: what loom writes imports
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=flows) as other:
        assert other.import_bundle(tmp_path / "r.json") == real.execution_id


def test_a_reopening_that_drops_a_recorded_decision_is_refused(tmp_path: Path) -> None:
    """A reopening drops the failed decisions of a failed execution, nothing else. A bundle
    whose reopening dropped a key that was recorded (not failed) recorded it a second time
    and replayed "identical" against the second answer while the file showed the first.
    (A reopening of a completed run was refused already, by the execution's own rebuild.)"""
    real = read_bundle(_reopened(tmp_path, answer="SAFE-TO-DEPLOY"))
    created, _failed_decision, failed, reopened, recorded, completed = real.events
    first = recorded.state.replace("SAFE-TO-DEPLOY", "HI")  # the first answer: recorded
    events = [created, msgspec.structs.replace(recorded, state=first), failed, reopened]
    events += [recorded, completed]
    forged = real.resealed(
        [msgspec.structs.replace(e, version=v) for v, e in enumerate(events, start=1)]
    )
    path = write_bundle(forged, tmp_path / "forged.json")
    with pytest.raises(BundleFormatError, match="which did not fail"):
        Loom(flows=flows).replay_bundle(path)


SEARCH_DOWN = [True]


@flows.flow("grounded", version="t")
def grounded(ctx: FlowContext, question: str) -> object:
    """Catches a failed search and goes on to ask the model with no hits, then fails."""

    def search() -> list[str]:
        if SEARCH_DOWN[0]:
            raise ConnectionError("index down")
        return ["runbook.md"]

    try:
        hits = ctx.decide("search", search, kind="retrieval")
    except ConnectionError:
        hits = []
    answer = ctx.decide("model", lambda: f"from {len(hits)} hits", kind="model", input=hits)
    if not hits:
        raise RuntimeError("no grounding")
    return answer


def test_a_reopening_that_drops_the_decisions_after_a_failure_replays_and_imports(
    tmp_path: Path,
) -> None:
    """A reopening drops the failed decisions and every decision recorded after the first of
    them (ADR 0026, amended "reopened after"), but a bundle was accepted only when every key
    it dropped had failed: the bundle of a genuine incident of this shape (a caught failure,
    a later decision, the run failed, resumed with ``retry_failed``) was refused by
    ``replay_bundle`` and ``import_bundle``. The forgery above is still refused."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", flows=flows) as loom:
        SEARCH_DOWN[0] = True
        with pytest.raises(RuntimeError):
            loom.run("grounded", question="q")
        [summary] = loom.executions()
        SEARCH_DOWN[0] = False
        assert loom.resume(summary.execution_id, retry_failed=True).output == "from 1 hits"
        path = loom.export(summary.execution_id, tmp_path / "incident.json")
    dropped = [
        msgspec.json.decode(event.state)["dropped"]
        for event in read_bundle(path).events
        if event.topic.endswith("Reopened")
    ]
    assert dropped == [["search", "model"]]  # "model" did not fail: it came after
    assert Loom(flows=flows).replay_bundle(path).identical
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=flows) as other:
        assert other.import_bundle(path) == summary.execution_id


@flows.flow("steps", version="t")
def steps(ctx: FlowContext, question: str) -> object:
    first = ctx.decide("first", lambda: question.upper())
    return [first, ctx.decide("second", lambda: len(question))]


def _marked(folder: Path, *, where: str) -> Bundle:
    """A recording re-sealed with one decision marked as a fork's (``origin``) where loom
    never writes that mark: ``where`` says which decision, in which execution."""
    with Loom(f"sqlite:///{folder / 'loom.db'}", flows=flows) as loom:
        run = loom.run("steps", question="q").execution_id
        fork = loom.fork(run, at=1).execution_id
        real = read_bundle(loom.export(fork if where.startswith("fork") else run, folder / "r"))
    events = list(real.events)
    if where == "run, a decision the code no longer asks":  # inserted before the ending
        extra = msgspec.json.decode(events[1].state) | {"key": "approve", "value": "DENIED"}
        extra_state = msgspec.json.encode(extra).decode()
        events.insert(-1, msgspec.structs.replace(events[1], state=extra_state))
        index, origin = len(events) - 2, "inherited"
    elif where == "run, its own decision":
        index, origin = 2, "override"
    else:  # "fork, a decision its own run recorded after its start"
        index, origin = 2, "inherited"
    state = msgspec.json.decode(events[index].state) | {"origin": origin}
    marked = msgspec.json.encode(state).decode()
    events[index] = msgspec.structs.replace(events[index], state=marked)
    return real.resealed(
        [
            msgspec.structs.replace(event, version=version)
            for version, event in enumerate(events, start=1)
        ]
    )


@pytest.mark.parametrize(
    "where",
    [
        "run, a decision the code no longer asks",
        "run, its own decision",
        "fork, a decision its own run recorded after its start",
    ],
)
def test_a_decision_marked_as_a_forks_where_loom_never_marks_one_is_refused(
    tmp_path: Path, where: str
) -> None:
    """A fork's decisions taken from its parent are marked ``inherited`` and stored with its
    start, and a replay does not count one it never asks as unused (an override may send the
    fork down another branch: ADR 0027, "paths"). Nothing checked where the mark stood: a
    decision the current code no longer asks, marked so in a run's re-sealed bundle, was
    skipped by that count and the replay said identical, exit 0 (an attack review). The mark
    stands only where loom writes it: ``inherited`` on a fork's first decisions, stored right
    after its start, no more than it took; ``override`` in a fork given overrides."""
    path = write_bundle(_marked(tmp_path, where=where), tmp_path / "forged.json")
    with pytest.raises(BundleFormatError, match="marked"):
        Loom(flows=flows).replay_bundle(path)
    with Loom(f"sqlite:///{tmp_path / 'target.db'}", flows=flows) as target:
        with pytest.raises(BundleFormatError, match="marked"):
            target.import_bundle(path)
        assert target.log.position == 0


def test_a_forks_bundle_with_its_inherited_decisions_replays(tmp_path: Path) -> None:
    """The control: a fork's bundle, its first decision inherited and marked so, replays."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", flows=flows) as loom:
        fork = loom.fork(loom.run("steps", question="q").execution_id, at=1).execution_id
        path = loom.export(fork, tmp_path / "fork.json")
    origins = [msgspec.json.decode(e.state).get("origin") for e in read_bundle(path).events]
    assert origins == [None, "inherited", None, None]
    assert Loom(flows=flows).replay_bundle(path).identical


def test_a_member_an_event_does_not_define_is_refused_by_every_reader(tmp_path: Path) -> None:
    """An attack review: a recorded decision given ``error_type`` and ``message`` members
    beside its value reads, in the reviewed JSON, as a failure; the mapper skips members its
    event does not define, so `replay_bundle`, `bundle show` and `loom diff` read the value
    ("identical", "same") while only `loom import` refused it. Every reader refuses it now."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", flows=flows) as loom:
        real = read_bundle(
            loom.export(loom.run("search", question="q").execution_id, tmp_path / "real.json")
        )
    events = list(real.events)
    state = msgspec.json.decode(events[1].state)
    state |= {"error_type": "builtins:PermissionError", "message": "secret scanner: leaked key"}
    events[1] = msgspec.structs.replace(events[1], state=msgspec.json.encode(state).decode())
    path = write_bundle(real.resealed(events), tmp_path / "forged.json")
    with pytest.raises(BundleFormatError, match="'error_type', 'message'"):
        Loom(flows=flows).replay_bundle(path)
    real_path = str(tmp_path / "real.json")
    for command in (["bundle", "show", str(path)], ["diff", real_path, str(path)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 1 and "'error_type'" in result.stderr, result.output
    assert Loom(flows=flows).replay_bundle(tmp_path / "real.json").identical  # the control
