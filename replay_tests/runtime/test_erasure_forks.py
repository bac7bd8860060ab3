"""Erasing an execution erases its forks (ADR 0049, amended 2026-12-02 "erasurerev"), on
SQLite and PostgreSQL.

A fork starts with its parent's input and takes the parent's decisions before the fork point
as its own events, sealed under its own key (ADR 0027). Erased by id (or by age), the parent's
input and decisions stayed readable in every fork of it: the erasure reported the parent
erased while a full copy of what it held still replayed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loom_runtime import ErasedError, FlowContext, Labels, Loom, MasterKey

KEY = MasterKey(b"k" * 32)


@pytest.fixture
def sealed(db_url: str) -> Iterator[Loom]:
    with Loom(db_url, encryption=KEY) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> dict[str, object]:
            length = ctx.decide("length", lambda: len(text))
            shout = ctx.decide("shout", lambda: text.upper())
            return {"length": length, "shout": shout}

        yield loom


def test_erasing_an_execution_erases_its_forks_at_every_depth(sealed: Loom) -> None:
    """The dry run lists the forks and forks of forks; applied, none of them can be read."""
    parent = sealed.run("note", text="alice lives at 1 Main St", labels=Labels(user="alice"))
    fork = sealed.fork(parent.execution_id, at="shout", override={"shout": "OTHER"})
    grandchild = sealed.fork(fork.execution_id, at=1)
    other = sealed.run("note", text="bob's note", labels=Labels(user="bob"))
    other_fork = sealed.fork(other.execution_id, at="shout")
    head = sealed.log.position
    erased = [str(r.execution_id) for r in (parent, fork, grandchild)]

    plan = sealed.erase(execution=parent.execution_id, reason="r", by="dpo", dry_run=True)

    assert [s.execution_id for s in plan.subjects] == erased
    assert sealed.log.position == head
    report = sealed.erase(execution=parent.execution_id, reason="r", by="dpo")
    assert [s.execution_id for s in report.subjects] == erased
    for run in (parent, fork, grandchild):
        with pytest.raises(ErasedError):
            sealed.execution(run.execution_id)
    assert sealed.replay(other.execution_id).identical
    assert sealed.replay(other_fork.execution_id).identical
    assert sealed.log.verify().problem is None


def test_erasing_a_fork_leaves_its_parent(sealed: Loom) -> None:
    """The copy runs one way: a fork's own decisions after the fork point are not the
    parent's."""
    parent = sealed.run("note", text="a note")
    fork = sealed.fork(parent.execution_id, at="shout")

    report = sealed.erase(execution=fork.execution_id, reason="r", by="dpo")

    assert [s.execution_id for s in report.subjects] == [str(fork.execution_id)]
    assert sealed.replay(parent.execution_id).identical


def test_a_fork_erased_before_is_listed_already_erased(sealed: Loom) -> None:
    parent = sealed.run("note", text="a note")
    fork = sealed.fork(parent.execution_id, at=1)
    sealed.erase(execution=fork.execution_id, reason="r", by="dpo")

    report = sealed.erase(execution=parent.execution_id, reason="r", by="dpo")

    assert [s.execution_id for s in report.subjects] == [str(parent.execution_id)]
    assert report.already_erased == (str(fork.execution_id),)
