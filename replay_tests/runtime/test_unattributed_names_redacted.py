"""ADR 0024, amended: the names of calls made without the flow's context (a thread started
without it), said in the recording's warning and in a replay's ``UnattributedCallError``, are
withheld when they hold a secret the log's redactor would refuse as an identifier. A call's
name holds its URL's path (``GET api.example.com/v1/keys/sk-proj-...``): the same call made
inside the flow is refused as a key holding a secret, yet the warning printed the path whole,
and Python's last-resort handler prints a WARNING with no logging configured."""

from __future__ import annotations

import logging

import pytest

from loom_runtime import FlowContext, Loom
from loom_runtime.context import note_unattributed

SECRET = "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_an_unattributed_call_s_secret_is_not_in_the_warning(
    loom: Loom, caplog: pytest.LogCaptureFixture
) -> None:
    @loom.flow("keys")
    def keys(ctx: FlowContext) -> int:
        note_unattributed(f"GET api.example.com/v1/keys/{SECRET}/usage")
        note_unattributed("GET api.example.com/v1/models")  # the control: named as it is
        return 1

    with caplog.at_level(logging.WARNING, logger="loom"):
        loom.run("keys")
    [warning] = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert SECRET not in warning
    assert "GET api.example.com/v1/models" in warning
    assert "withheld" in warning
