"""Erasure review of 6 December: a refused flow output, and what a sealed execution logs.

A flow output the redactor refuses (a secret in ``refuse`` mode, keys that redact alike)
raised and left the execution ``running``: an orphan every resume and recovery ran again
(a NaN output, refused by the codec, was already stored as the failure). A sealed
execution's log lines named its sealed decision keys (a resume by changed code) and the
paths of calls it could not record: text erasure cannot reach once a log handler keeps it.
A refused value was two spans live and one on replay.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import httpx
import pytest

import loom_runtime
from loom_runtime import FlowContext, Loom, MasterKey, Redactor
from loom_runtime.errors import SecretRefusedError

GITHUB = "ghp_" + "a" * 36
KEY = MasterKey(b"r" * 32)


@pytest.mark.parametrize(
    ("redactor", "output"),
    [
        (Redactor(mode="refuse"), f"token {GITHUB}"),
        (Redactor(), {GITHUB: 1, "ghp_" + "b" * 36: 2}),
    ],
    ids=["refuse-mode", "colliding-keys"],
)
def test_a_refused_output_is_the_execution_s_failure(
    tmp_path: Path, redactor: Redactor, output: object
) -> None:
    ran: list[int] = []
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=redactor) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> object:
            ran.append(1)
            return output

        with pytest.raises(SecretRefusedError):
            loom.run("f")
        (summary,) = loom.executions()
        assert summary.status == "failed"
        assert ran == [1]


def test_a_sealed_execution_s_warnings_name_nothing_sealed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    fail = [True]

    def call_from_a_bare_thread() -> None:
        inner = httpx.MockTransport(lambda request: httpx.Response(200))
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            client.get("https://api.example.com/patients/alice-PLANTED-PATH")

    with Loom(url, encryption=KEY) as loom:

        @loom.flow("f")
        def first(ctx: FlowContext) -> str:
            ctx.decide("alice-PLANTED-KEY", lambda: "x")
            thread = threading.Thread(target=call_from_a_bare_thread)
            thread.start()
            thread.join()
            if fail[0]:
                raise RuntimeError("stop")
            return "done"

        with caplog.at_level(logging.WARNING, logger="loom"), pytest.raises(RuntimeError):
            loom.run("f")
        (summary,) = loom.executions()
    fail[0] = False
    with Loom(url, encryption=KEY) as loom:

        @loom.flow("f")
        def second(ctx: FlowContext) -> str:
            return "changed code"

        with caplog.at_level(logging.WARNING, logger="loom"):
            loom.resume(summary.execution_id, retry_failed=True)
    said = caplog.text
    assert "were not recorded" in said and "never asked 1" in said  # the warnings were given
    assert "PLANTED" not in said, said
