"""ADR 0012 and 0048 (recording2): a decision's value is read by the redactor once, as the
codec encodes it; the mapper's guarantee still holds for every value that did not come that way.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from loom_runtime import FlowContext, LogSettings, Redactor, SecretRefusedError, codec
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
    """Refuse mode refuses a secret in a decision's value, input or meta: nothing stored."""
    ctx, _ = _context(refusing)
    secret = {"auth": f"Bearer {TOKEN}"}
    with pytest.raises(SecretRefusedError):
        if where == "value":
            ctx.decide("k", lambda: secret)
        elif where == "input":
            ctx.decide("k", lambda: "ok", input=secret)
        else:
            ctx.open_decision("k").record("ok", meta=secret)
    assert refusing.position == 1  # only Created


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
