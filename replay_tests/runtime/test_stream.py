"""Plain event streams: atomic multi-event appends with optimistic concurrency."""

from __future__ import annotations

import pytest

from loom_runtime import LogEvent, Loom, StreamConflictError
from loom_runtime.stream import stream_id


class Noted(LogEvent):
    TOPIC = "test.stream.Noted"
    text: str


def test_append_is_atomic_and_versioned(loom: Loom) -> None:
    """Events get consecutive versions and log positions; the version is read back."""
    stream = stream_id("notes")
    assert loom.log.stream_version(stream) == 0
    positions = loom.log.append(
        stream,
        expected_version=0,
        events=[(Noted, {"text": "a"}), (Noted, {"text": "b"})],
    )
    assert positions == [1, 2]
    assert loom.log.stream_version(stream) == 2


def test_a_stale_writer_is_refused_and_writes_nothing(loom: Loom) -> None:
    """Appending after an outdated version raises and leaves the log as it was."""
    stream = stream_id("notes")
    loom.log.append(stream, expected_version=0, events=[(Noted, {"text": "a"})])
    with pytest.raises(StreamConflictError):
        loom.log.append(
            stream,
            expected_version=0,
            events=[(Noted, {"text": "x"}), (Noted, {"text": "y"})],
        )
    assert [e.text for e in loom.log.events(stream)] == ["a"]
    assert loom.log.position == 1


def test_an_event_class_without_a_topic_is_refused() -> None:
    """Stored events are found by TOPIC, so every class must declare one."""
    with pytest.raises(TypeError, match="TOPIC"):

        class Nameless(LogEvent):
            text: str
