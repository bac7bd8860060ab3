"""ADR 0002, amended: a recorded value that no longer decodes as the declared type.

A typed decision (``ctx.decide(..., type=T)``, a ``@tool`` whose return annotation is ``T``,
an MCP result) is decoded from the log as ``T``. When the code's ``T`` changed since the
recording (a required field added) or the row was edited, the replay must name the decision
and say why, not surface the decoder's ``ValidationError`` with no decision in it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from loom_runtime import DecisionTypeChangedError, Loom, tool


class Ticket(msgspec.Struct, frozen=True):
    id: int
    title: str


class TicketWithPriority(msgspec.Struct, frozen=True):
    """``Ticket`` as the code declares it later: a required field added."""

    id: int
    title: str
    priority: int


def build(url: str, ticket: type[Any]) -> Loom:
    loom = Loom(url)
    fields = {"priority": 1} if ticket is TicketWithPriority else {}

    def lookup(ticket_id: int) -> Any:
        return ticket(id=ticket_id, title="disk full", **fields)

    lookup.__annotations__["return"] = ticket  # as if annotated with this build's class
    lookup = tool(lookup)

    @loom.flow("tool")
    def with_tool(ctx: Any) -> str:
        return str(lookup(7).title)

    @loom.flow("decide")
    def with_decide(ctx: Any) -> str:
        found = ctx.decide("ticket", lambda: ticket(id=7, title="disk full", **fields), type=ticket)
        return str(found.title)

    return loom


@pytest.mark.parametrize(("flow", "key"), [("tool", "tool:lookup"), ("decide", "ticket")])
def test_a_value_that_no_longer_decodes_names_the_decision(
    sqlite_url: str, flow: str, key: str
) -> None:
    """Recorded as ``Ticket``, replayed by code declaring ``TicketWithPriority``: the flow
    gets :class:`DecisionTypeChangedError` naming the key, the type and the missing field,
    and the replay reports that very error (before it was caught or not, the changed
    outcome quoted it)."""
    with build(sqlite_url, Ticket) as loom:
        run = loom.run(flow)
    assert run.output == "disk full"
    with build(sqlite_url, Ticket) as same:  # the control: the same type replays
        assert same.replay(run.execution_id).identical
    with build(sqlite_url, TicketWithPriority) as changed:
        result = changed.replay(run.execution_id)
    [divergence] = result.divergences
    assert isinstance(divergence, DecisionTypeChangedError), result.describe()
    said = str(divergence)
    assert f"decision {key!r}" in said
    assert "TicketWithPriority" in said and "priority" in said


def test_a_value_that_no_longer_decodes_is_reported_when_the_flow_catches_it(
    sqlite_url: str,
) -> None:
    """A flow that asks inside ``except Exception`` and falls back took
    :class:`DecisionTypeChangedError` as the compute's failure, and its replay was reported
    identical though the code's type had changed (a verdict review): the replay cannot answer
    the decision as the code now asks it, whatever the flow does with that."""
    declared: dict[str, type[Any]] = {"ticket": Ticket}

    def build_catching() -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("catching")
        def catching(ctx: Any) -> str:
            ticket = declared["ticket"]
            fields = {"priority": 1} if ticket is TicketWithPriority else {}
            try:
                found = ctx.decide("ticket", lambda: ticket(id=7, title="x", **fields), type=ticket)
            except Exception:
                return "fallback"
            return "fallback" if found.title else "empty"

        return loom

    with build_catching() as loom:
        run = loom.run("catching")
        assert loom.replay(run.execution_id).identical  # the control: the same type
    declared["ticket"] = TicketWithPriority
    with build_catching() as changed:
        result = changed.replay(run.execution_id)
    assert result.output == run.output  # the flow hid it: the outcome alone looks the same
    [divergence] = result.divergences
    assert isinstance(divergence, DecisionTypeChangedError), result.describe()
    assert "'ticket'" in str(divergence) and "priority" in str(divergence)
