"""An encoded ``/`` in a path segment is not a ``/`` (ADR 0024, amended "encoded slash").

A request is keyed and compared by its path, and loom read the path decoded, so
``/objects/reports%2F2024.csv`` (one object whose name holds a slash) and
``/objects/reports/2024.csv`` (an object in a folder), two resources to the server, were one
key: code asking the second replayed the first's answer as identical (an attack review). An
encoded slash is kept encoded in the key and the input's URL; every other escape is read
decoded, as before, so a recording of any other path keeps its key.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import loom_runtime
from loom_runtime import FlowContext, Loom, UnrecordedDecisionError

RECORDED = "/v1/objects/reports%2F2024.csv"


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"raw_path": request.url.raw_path.decode()})


def _unreachable(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the network was called on replay: {request.url}")


def _loom(url: str, path: str, handler: object) -> Loom:
    loom = Loom(url)

    @loom.flow("fetch")
    def fetch(ctx: FlowContext) -> object:
        inner = httpx.MockTransport(handler)  # type: ignore[arg-type]
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get(f"https://files.example.com{path}").json()

    return loom


@pytest.mark.parametrize(
    ("asked", "identical"),
    [
        ("/v1/objects/reports/2024.csv", False),  # another resource
        (RECORDED, True),  # the control: the same request replays
        ("/v1/objects/reports%2f2024.csv", True),  # the same escape, in lower case
    ],
)
def test_an_encoded_slash_is_not_a_slash(tmp_path: Path, asked: str, identical: bool) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with _loom(url, RECORDED, _answer) as loom:
        run = loom.run("fetch")
        [key] = loom.execution(run.execution_id).decisions
    assert key == "http:GET files.example.com/v1/objects/reports%2F2024.csv"
    with _loom(url, asked, _unreachable) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical is identical, result.describe()
    if not identical:
        assert any(isinstance(d, UnrecordedDecisionError) for d in result.divergences)


def test_a_path_with_other_escapes_keeps_its_key(tmp_path: Path) -> None:
    """Every other escape is read decoded, as before the amendment: a space, a non-ASCII name."""
    with _loom(f"sqlite:///{tmp_path / 'loom.db'}", "/docs/a%20b/%C3%A9t%C3%A9", _answer) as loom:
        run = loom.run("fetch")
        assert list(loom.execution(run.execution_id).decisions) == [
            "http:GET files.example.com/docs/a b/été"
        ]
