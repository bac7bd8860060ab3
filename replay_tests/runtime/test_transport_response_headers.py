"""ADR 0024, amended: a response's headers as the transport rebuilds them, live and replayed.

Headers are stored as text; the response a client receives is rebuilt from that text, live
(so the caller sees what a replay will) and on replay. Text that is not ASCII (a latin-1
filename, as servers send) must survive the rebuild both ways, and a recorded header loom
never stores (an edited row: ``content-encoding`` that would make the client inflate the body,
a ``set-cookie`` for its jar) is refused as a typed error naming the decision (ADR 0018).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom, OutcomeChangedError, RecordedValueError
from replay_tests.runtime.test_transport import (  # noqa: F401 (server: a fixture)
    ATTACHMENT,
    Server,
    Unreachable,
    server,
)


def build(url: str, inner: httpx.BaseTransport) -> Loom:
    loom = Loom(url)

    @loom.flow("attachment")
    def attachment(ctx: Any, base: str) -> str:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get(f"{base}/attachment").headers["content-disposition"]

    @loom.flow("items")
    def items(ctx: Any, base: str) -> Any:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            response = client.get(f"{base}/items")
            return {"body": response.json(), "cookies": dict(client.cookies)}

    return loom


def test_a_header_that_is_not_ascii_reaches_the_caller_and_replays(
    server: Server,  # noqa: F811
    sqlite_url: str,
) -> None:
    """A latin-1 ``content-disposition`` filename: the live caller gets it as httpx decodes
    it without loom, and the replay gives the same text, sending nothing."""
    expected = httpx.get(f"{server.url}/attachment").headers["content-disposition"]
    assert ATTACHMENT in expected
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("attachment", base=server.url)
    assert run.output == expected
    server.stop()
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == expected


@pytest.mark.parametrize(
    "header",
    # content-length is stored since 6 December (ADR 0024, "content-length"): one that is no
    # length is what no recording holds
    [("content-encoding", "gzip"), ("set-cookie", "session=planted"), ("content-length", "9x")],
)
def test_a_recorded_header_loom_never_stores_is_refused_naming_the_decision(
    server: Server,  # noqa: F811
    sqlite_url: str,
    header: tuple[str, str],
) -> None:
    """An edited row adding a header the recording leaves out (a client would inflate the
    body, or fill its cookie jar, on the row's say-so) is refused as
    :class:`RecordedValueError` naming the key, before the client sees the response."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("items", base=server.url)
        (key,) = loom.execution(run.execution_id).decisions
    assert run.output["cookies"] == {}  # set-cookie is never stored, so the jar stays empty
    server.stop()
    divergence = _replayed_with_edited_value(
        sqlite_url,
        run.execution_id,
        lambda value: {**value, "headers": [*value["headers"], list(header)]},
    )
    assert f"{RecordedValueError.__module__}:RecordedValueError" in str(divergence)
    assert f"decision {key!r} holds a value that is not a recorded HTTP response" in str(divergence)
    assert header[0] in str(divergence)


def _replayed_with_edited_value(
    sqlite_url: str, execution_id: Any, edit: Callable[[dict[str, Any]], dict[str, Any]]
) -> OutcomeChangedError:
    """Edit the stored value of the execution's one decision (its second event) in the row,
    replay in a fresh Loom that cannot send, and return the one divergence."""
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        (state,) = db.execute(
            "SELECT state FROM stored_events WHERE originator_version = 2"
        ).fetchone()
        edited = msgspec.json.decode(state)
        edited["value"] = edit(edited["value"])
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_version = 2",
            (msgspec.json.encode(edited),),
        )
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(execution_id)
    [divergence] = result.divergences
    assert isinstance(divergence, OutcomeChangedError), result.describe()
    return divergence


def test_recorded_chunk_sizes_below_zero_are_refused_naming_the_decision(
    server: Server,  # noqa: F811
    sqlite_url: str,
) -> None:
    """Sizes that step back over the body (an edited row or a re-sealed bundle: ``[2, -2, 2,
    -2, 2]`` for the body ``AB``) handed the client ``ABABAB`` while the stored body, the one
    an audit shows, said ``AB``; with the output edited to match, the replay called it
    identical. Refused as :class:`RecordedValueError` naming the key."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("items", base=server.url)
        (key,) = loom.execution(run.execution_id).decisions
    server.stop()
    divergence = _replayed_with_edited_value(
        sqlite_url, run.execution_id, lambda value: {**value, "chunks": [2, -2, 2, -2, 2]}
    )
    assert f"decision {key!r} holds a value that is not a recorded HTTP response" in str(divergence)
    assert "chunks" in str(divergence)
