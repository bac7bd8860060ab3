"""ADR 0012 and 0048 (recording2): a decision's value is read by the redactor once, as the
codec encodes it; the mapper's guarantee still holds for every value that did not come that way.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loom_runtime import (
    FlowContext,
    LogSettings,
    Redactor,
    SecretPattern,
    SecretRefusedError,
    codec,
)
from loom_runtime.context import Recorder, save
from loom_runtime.execution import Execution
from loom_runtime.log import EventLog, open_log
from loom_runtime.redaction import RedactionMode
from loom_runtime.stream import stream_id

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.sig-Abc123"
VALUE = {"role": "assistant", "text": "vacuum reclaims the dead tuples of a table " * 24}


def _log(db_url: str, mode: RedactionMode) -> Iterator[EventLog]:
    log = open_log(LogSettings(db_url, redactor=Redactor(mode=mode)))
    try:
        yield log
    finally:
        log.close()


@pytest.fixture
def log(db_url: str) -> Iterator[EventLog]:
    yield from _log(db_url, "redact")


@pytest.fixture
def refusing(db_url: str) -> Iterator[EventLog]:
    yield from _log(db_url, "refuse")


def _context(log: EventLog) -> tuple[FlowContext, Execution]:
    execution = Execution.start(
        id=stream_id("run"), flow="f", code_version="1", input=msgspec.Raw(b"{}"), log_position=0
    )
    save(log, execution)
    return FlowContext(Recorder(log, execution), execution_id=execution.id, flow="f"), execution


def _count_reads(redactor: Redactor, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The JSON of every stored value the redactor reads, in order."""
    reads: list[bytes] = []
    read = redactor._raw

    def counted(raw: msgspec.Raw) -> msgspec.Raw:
        reads.append(bytes(raw))
        return read(raw)

    monkeypatch.setattr(redactor, "_raw", counted)
    return reads


def test_a_decisions_value_is_read_once(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recording a decision reads its value's JSON once (the codec's), not again in the mapper."""
    assert log.redactor is not None
    ctx, _ = _context(log)
    reads = _count_reads(log.redactor, monkeypatch)
    assert ctx.decide("answer", lambda: VALUE) == VALUE
    assert reads.count(msgspec.json.encode(VALUE)) == 1
    assert log.position == 2


def test_a_secret_in_a_decision_is_redacted_and_counted_once(log: EventLog) -> None:
    """A value's secret becomes a marker once: the stored bytes are what the flow was given."""
    assert log.redactor is not None
    ctx, execution = _context(log)
    seen = ctx.decide("answer", lambda: {"auth": f"Bearer {TOKEN}"})
    assert seen == {"auth": "Bearer [REDACTED:bearer-token]"}
    assert log.redactor.counts == {"bearer-token": 1}
    row = log.rows(execution.id)[1]
    assert TOKEN.encode() not in row.state and b"[REDACTED:bearer-token]" in row.state


@pytest.mark.parametrize("where", ["value", "input", "meta"])
def test_a_secret_is_refused_on_every_path_of_a_decision(refusing: EventLog, where: str) -> None:
    """Refuse mode refuses a secret in a decision's value, input or meta: none of it stored
    (a refused value is stored as the decision's failure: ADR 0026, amended "refusals")."""
    ctx, execution = _context(refusing)
    secret = {"auth": f"Bearer {TOKEN}"}
    with pytest.raises(SecretRefusedError):
        if where == "value":
            ctx.decide("k", lambda: secret)
        elif where == "input":
            ctx.decide("k", lambda: "ok", input=secret)
        else:
            ctx.open_decision("k").record("ok", meta=secret)
    assert refusing.position == (2 if where == "value" else 1)
    assert all(TOKEN.encode() not in row.state for row in refusing.rows(execution.id))


def test_a_value_the_codec_did_not_make_is_still_read_by_the_mapper(
    refusing: EventLog,
) -> None:
    """JSON that reached an event another way (here by hand, or through another redactor's
    codec pass) is read by the mapper and refused: only this redactor's own output passes."""
    _, execution = _context(refusing)
    secret = f"Bearer {TOKEN}"
    for dirty in (
        msgspec.Raw(msgspec.json.encode(secret)),
        codec.encode(secret, path="v", redactor=Redactor(patterns=())),
    ):
        execution.record_decision(key="k", kind=None, value=dirty, input=msgspec.Raw(b"null"))
        with pytest.raises(SecretRefusedError, match=r"DecisionRecorded\.value"):
            save(refusing, execution)
        assert refusing.position == 1


def test_the_redactor_remembers_a_bounded_number_of_values() -> None:
    """What the codec's pass remembers is bounded; a forgotten value is simply read again."""
    redactor = Redactor()
    made = [redactor.encoded(msgspec.json.encode(f"v{i}"), path="v") for i in range(100)]
    assert len(redactor._passed) <= 64
    assert redactor.passed(made[-1]) and not redactor.passed(made[0])
    assert not redactor.passed(msgspec.Raw(bytes(made[-1])))  # equal bytes, another object


SHORT_SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "key AKIAIOSFODNN7EXAMPLE",
    f"Bearer {TOKEN[:30]}",
    f"BEARER {TOKEN[:30]}",
    "password=hunter2",
    "PWD: x9y8z7",
    "redis://:pw-secret@cache",
    "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "xoxb-123456789-abcdefg",
]
SHORT_CLEAN = ["step-12", "assistant", "model", "llm:call:3", "Basic idea", "sk-learn-tool", ""]


def _without_shortcut() -> Redactor:
    redactor = Redactor()
    redactor._hints = None  # every pattern's own hint scan, as before the one search existed
    return redactor


@pytest.mark.parametrize("text", SHORT_SECRETS + SHORT_CLEAN)
def test_a_short_strings_verdict_is_the_one_every_pattern_gives(text: str) -> None:
    """Searching a short string for all hints at once changes no verdict, secret or clean."""
    fast, slow = Redactor(), _without_shortcut()
    assert fast.secret_in(text) == slow.secret_in(text)
    assert fast.text(text, path="v") == slow.text(text, path="v")
    assert fast.counts == slow.counts
    if text in SHORT_SECRETS:
        assert fast.secret_in(text) is not None
        with pytest.raises(SecretRefusedError):
            Redactor(mode="refuse").text(text, path="v")


def test_a_pattern_without_hints_is_never_skipped() -> None:
    """A user's pattern with no hints makes every string take the per-pattern path."""
    redactor = Redactor(extra=[SecretPattern.compile("ticket", r"zz\d{3}")])
    assert redactor.secret_in("zz123") == "ticket"
    assert redactor.text("id zz123", path="v") == "id [REDACTED:ticket]"


_FRAGMENTS = st.sampled_from(
    ["sk-", "Bearer ", "basic ", "AKIA", "ghp_", "xoxb-", "://", ":", "=", "@", "pwd", "-", "_"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS | st.text(max_size=12), max_size=6).map("".join))
def test_any_short_strings_verdict_is_the_one_every_pattern_gives(text: str) -> None:
    """The one search never skips a string some pattern would have matched."""
    fast, slow = Redactor(), _without_shortcut()
    assert fast.secret_in(text) == slow.secret_in(text)
    assert fast.text(text, path="v") == slow.text(text, path="v")
