"""ADR 0034: an execution's labels (tenant, user, session, tags) are given at start, stored
on its start event only when given, checked once, kept by fork, resume and bundles, and
select executions in ``Loom.executions``."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_runtime import (
    ConfigurationError,
    FlowRegistry,
    LabelError,
    Labels,
    Loom,
    SecretIdentifierError,
)
from loom_runtime.errors import LogCorruptError
from loom_runtime.labels import MAX_LABEL_LENGTH, MAX_TAGS
from loom_runtime.log import Row

ACME = Labels(tenant="acme", user="u-1", session="s-1", tags=("nightly", "eval", "eval"))


def _loom(tmp_path: Path, name: str = "loom.db") -> Loom:
    loom = Loom(f"sqlite:///{tmp_path / name}")

    @loom.flow("greet")
    def greet(ctx: Any, user: str) -> str:  # a flow parameter named like a label
        return ctx.decide("hello", lambda: f"hello {user}")

    @loom.flow("agreet")
    async def agreet(ctx: Any, user: str) -> str:
        return str(await ctx.decide("hello", lambda: f"hello {user}"))

    return loom


def _created_state(loom: Loom, execution_id: uuid.UUID) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(loom.log.rows(execution_id)[0].state)
    return state


def test_labels_are_stored_on_the_start_event_with_tags_as_a_sorted_set(tmp_path: Path) -> None:
    """Given labels are in the Created event; tags are de-duplicated and sorted."""
    with _loom(tmp_path) as loom:
        run = loom.run("greet", user="Ada", labels=ACME)
        assert run.output == "hello Ada"  # the flow's own `user` argument is untouched
        state = _created_state(loom, run.execution_id)
        assert {k: state[k] for k in ("tenant", "user", "session", "tags")} == {
            "tenant": "acme",
            "user": "u-1",
            "session": "s-1",
            "tags": ["eval", "nightly"],
        }
        assert state["input"] == {"user": "Ada"}
        assert loom.execution(run.execution_id).labels == ACME


def test_an_unlabelled_execution_is_stored_as_before_labels_existed(tmp_path: Path) -> None:
    """No label key appears in the stored start event of an execution given none, and a
    partly labelled one stores only what it was given."""
    with _loom(tmp_path) as loom:
        plain = _created_state(loom, loom.run("greet", user="Ada").execution_id)
        assert set(plain) == {"timestamp", "originator_topic", "flow", "code_version", "input",
                              "log_position"}  # fmt: skip
        partly = loom.run("greet", user="Ada", labels=Labels(session="s-9"))
        state = _created_state(loom, partly.execution_id)
        assert set(state) - set(plain) == {"session"}


def test_a_start_event_written_before_labels_existed_loads_and_lists(tmp_path: Path) -> None:
    """An old row (no label fields) rebuilds an execution without labels; it is listed
    unfiltered and excluded by any label filter."""
    old_id = uuid.uuid4()
    old = {
        "timestamp": "2026-01-02T03:04:05.000006Z",
        "originator_topic": "loom.execution",
        "flow": "greet",
        "code_version": "v0",
        "input": {"user": "Ada"},
        "log_position": 0,
    }
    with _loom(tmp_path) as loom:
        state = msgspec.json.encode(old)
        loom.log.insert_rows(
            [Row(stream=old_id, version=1, topic="loom.execution.Created", state=state)]
        )
        labelled = loom.run("greet", user="Bo", labels=ACME)
        assert loom.execution(old_id).labels == Labels()
        listed = loom.executions()
        assert [s.execution_id for s in listed] == [old_id, labelled.execution_id]
        assert listed[0].labels == Labels() and listed[0].tags == ()
        assert [s.execution_id for s in loom.executions(tenant="acme")] == [labelled.execution_id]


def test_filters_select_by_tenant_user_session_and_every_tag(tmp_path: Path) -> None:
    """Each filter excludes executions without its label; several tags must all be held."""
    with _loom(tmp_path) as loom:
        a = loom.run("greet", user="x", labels=ACME).execution_id
        b = loom.run("greet", user="x", labels=Labels(tenant="beta", user="u-1", tags=("eval",)))
        c = loom.run("greet", user="x").execution_id

        def ids(**wanted: Any) -> list[uuid.UUID]:
            return [summary.execution_id for summary in loom.executions(**wanted)]

        assert ids() == [a, b.execution_id, c]
        assert ids(tenant="acme") == [a]
        assert ids(tenant="nobody") == []
        assert ids(user="u-1") == [a, b.execution_id]
        assert ids(session="s-1") == [a]
        assert ids(tags=("eval",)) == [a, b.execution_id]
        assert ids(tags=["eval", "nightly"]) == [a]
        assert ids(tags=("eval", "missing")) == []
        assert ids(tenant="beta", tags=("eval",)) == [b.execution_id]
        summary = loom.executions(tenant="acme")[0]
        assert (summary.tenant, summary.user, summary.session, summary.tags) == (
            "acme", "u-1", "s-1", ("eval", "nightly"))  # fmt: skip
        assert summary.status == "completed"


@pytest.mark.parametrize(
    ("labels", "label"),
    [
        (lambda: Labels(tenant=""), "tenant"),
        (lambda: Labels(user=" u-1"), "user"),
        (lambda: Labels(session="s" * (MAX_LABEL_LENGTH + 1)), "session"),
        (lambda: Labels(tenant="ac\x1bme"), "tenant"),
        (lambda: Labels(user="u\u202e1"), "user"),  # a bidi override
        (lambda: Labels(user="u\u200b1"), "user"),  # zero-width space
        (lambda: Labels(tenant=7), "tenant"),  # type: ignore[arg-type]
        (lambda: Labels(tags="eval"), "tags"),  # one string, not a collection
        (lambda: Labels(tags=("ok", "")), "tags"),
        (lambda: Labels(tags=tuple(f"t{n}" for n in range(MAX_TAGS + 1))), "tags"),
    ],
)
def test_a_bad_label_is_refused_typed_before_anything_is_written(labels: Any, label: str) -> None:
    """Empty, padded, too long, control or invisible characters, not a string: LabelError."""
    with pytest.raises(LabelError) as raised:
        labels()
    assert raised.value.label == label
    assert isinstance(raised.value, ValueError)


def test_the_longest_label_and_most_tags_are_accepted(tmp_path: Path) -> None:
    """The limits are inclusive (the refusals above are one past them)."""
    longest = Labels(tenant="t" * MAX_LABEL_LENGTH, tags=[f"t{n}" for n in range(MAX_TAGS)])
    with _loom(tmp_path) as loom:
        run = loom.run("greet", user="x", labels=longest)
        assert loom.execution(run.execution_id).labels == longest


def test_run_refuses_labels_that_are_not_a_labels_value(tmp_path: Path) -> None:
    """A dict in place of Labels is refused with how to write it; nothing is appended."""
    with _loom(tmp_path) as loom:
        head = loom.log.position
        with pytest.raises(LabelError, match=r"Labels\(tenant="):
            loom.run("greet", user="x", labels={"tenant": "acme"})  # type: ignore[arg-type]
        assert loom.log.position == head


def test_a_secret_shaped_label_is_refused_never_redacted(tmp_path: Path) -> None:
    """Labels are identifiers: a redacted tenant would name another tenant, so it is refused."""
    with _loom(tmp_path) as loom:
        head = loom.log.position
        with pytest.raises(SecretIdentifierError):
            loom.run("greet", user="x", labels=Labels(tenant="sk-" + "a1B2" * 10))
        assert loom.log.position == head


def test_a_flow_cannot_take_a_parameter_named_labels() -> None:
    """`labels` is run's own keyword: a flow parameter of that name could never be given."""
    with pytest.raises(ConfigurationError, match="named 'labels'"):
        FlowRegistry().flow("bad")(lambda ctx, labels: labels)


def test_arun_records_labels(tmp_path: Path) -> None:
    """The async twin takes the same labels."""
    with _loom(tmp_path) as loom:
        run = asyncio.run(loom.arun("agreet", user="x", labels=ACME))
        assert loom.execution(run.execution_id).labels == ACME


def test_fork_and_resume_keep_the_labels(tmp_path: Path) -> None:
    """A fork is labelled as its parent; a resumed execution keeps its own."""
    with _loom(tmp_path) as loom:
        parent = loom.run("greet", user="x", labels=ACME)
        fork = loom.fork(parent.execution_id, at=0, override={"hello": "hi"})
        assert loom.execution(fork.execution_id).labels == ACME
        assert [s.execution_id for s in loom.executions(tenant="acme")] == [
            parent.execution_id,
            fork.execution_id,
        ]
        resumed = loom.resume(parent.execution_id)
        assert loom.execution(resumed.execution_id).labels == ACME


def test_labels_travel_in_a_bundle(tmp_path: Path) -> None:
    """Exported, then imported into another log, the execution is labelled and selectable."""
    with _loom(tmp_path) as loom:
        run = loom.run("greet", user="x", labels=ACME)
        bundle = loom.export(run.execution_id, tmp_path / "run.json")
    (created, *_) = json.loads(bundle.read_text())["events"]
    assert created["state"]["tenant"] == "acme"  # the bundle file shows states as JSON
    with _loom(tmp_path, "other.db") as other:
        other.import_bundle(bundle)
        assert other.execution(run.execution_id).labels == ACME
        assert [s.execution_id for s in other.executions(user="u-1")] == [run.execution_id]
        assert other.replay_bundle(bundle).identical


def test_a_label_edited_into_the_log_is_refused_as_corruption(tmp_path: Path) -> None:
    """A stored label loom would have refused is LogCorruptError, in loading and listing."""
    with _loom(tmp_path) as loom:
        run = loom.run("greet", user="x", labels=ACME)
    with sqlite3.connect(tmp_path / "loom.db") as connection:
        changed = connection.execute(
            "UPDATE stored_events SET state = CAST(replace(CAST(state AS TEXT), '\"acme\"', "
            "'\"ac\\u0007me\"') AS BLOB) WHERE topic = 'loom.execution.Created'"
        ).rowcount
    assert changed == 1
    with _loom(tmp_path) as loom:
        with pytest.raises(LogCorruptError, match="label"):
            loom.execution(run.execution_id)
        with pytest.raises(LogCorruptError, match="label"):
            loom.executions()
