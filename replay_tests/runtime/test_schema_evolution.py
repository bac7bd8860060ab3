"""An event class that gained a field and renamed another still reads old rows.

The old rows are real: a separate Python process, running the *old* class definitions, writes
them through the log. This process then reads them with the *new* class through the same log
(``log.events.get``, the path every reader takes), so the whole route is exercised: stored
JSON, the mapper's typed decode, the upcasters chained v1 -> v2 -> v3, and the rebuilt event.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from loom_runtime import LogEvent, LogSettings, verify_log
from loom_runtime.log import EventLog, open_log
from loom_runtime.stream import stream_id

TOPIC = "test.schema_evolution.NoteTaken"

OLD_WRITER = textwrap.dedent(
    f"""
    import sys
    from typing import ClassVar
    from loom_runtime import LogEvent, LogSettings
    from loom_runtime.log import open_log
    from loom_runtime.stream import stream_id

    url, version = sys.argv[1], int(sys.argv[2])
    if version == 1:
        class NoteTaken(LogEvent):  # as first released: no tags, the heading called "title"
            TOPIC = {TOPIC!r}
            title: str
            body: str
        fields = {{"title": "v1 title", "body": "written by v1"}}
    else:
        class NoteTaken(LogEvent):  # the release that added tags
            TOPIC = {TOPIC!r}
            class_version: ClassVar[int] = 2
            title: str
            body: str
            tags: list[str]

            @staticmethod
            def upcast_v1_v2(state):  # v2 code reads v1 rows (here: the stream's version)
                state["tags"] = []
        fields = {{"title": "v2 title", "body": "written by v2", "tags": ["kept"]}}

    log = open_log(LogSettings(url))
    stream = stream_id("notes")
    log.append(stream, expected_version=log.stream_version(stream),
           events=[(NoteTaken, fields)])
    log.close()
    """
)


class NoteTaken(LogEvent):
    """The current class: ``tags`` added in v2, ``title`` renamed to ``heading`` in v3."""

    TOPIC = TOPIC
    class_version: ClassVar[int] = 3
    heading: str
    body: str
    tags: list[str]

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["tags"] = []

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        state["heading"] = state.pop("title")


def _write_with_old_class(url: str, version: int) -> None:
    subprocess.run([sys.executable, "-c", OLD_WRITER, url, str(version)], check=True, timeout=60)


@pytest.fixture
def log(db_url: str) -> Iterator[EventLog]:
    """Rows written by v1 and then v2 code, one each, before this process opens the log."""
    _write_with_old_class(db_url, 1)
    _write_with_old_class(db_url, 2)
    opened = open_log(LogSettings(db_url))
    yield opened
    opened.close()


@pytest.mark.slow  # the log fixture writes its old rows in a subprocess
def test_rows_of_every_old_version_read_as_the_new_class(log: EventLog) -> None:
    """v1 gains the default tags and the renamed heading; v2 keeps its tags, gains heading."""
    v1, v2 = log.events(stream_id("notes"))
    assert isinstance(v1, NoteTaken) and isinstance(v2, NoteTaken)
    assert (v1.heading, v1.body, v1.tags) == ("v1 title", "written by v1", [])
    assert (v2.heading, v2.body, v2.tags) == ("v2 title", "written by v2", ["kept"])
    assert not hasattr(v1, "title") and not hasattr(v2, "title")


@pytest.mark.slow  # the log fixture writes its old rows in a subprocess
def test_the_log_is_never_rewritten_by_upcasting(log: EventLog) -> None:
    """Old rows stay byte for byte as written (and chained): only the reader upcasts."""
    before = [bytes(n.state) for n in log.notifications()]
    list(log.events(stream_id("notes")))
    assert [bytes(n.state) for n in log.notifications()] == before
    assert b'"title":"v1 title"' in before[0] and b"class_version" not in before[0]
    assert b'"class_version":2' in before[1]
    assert verify_log(log).ok


@pytest.mark.slow  # the log fixture writes its old rows in a subprocess
def test_new_rows_follow_old_ones_in_the_same_stream(log: EventLog) -> None:
    """The new class appends after old rows and everything reads back in order."""
    stream = stream_id("notes")
    fields = {"heading": "v3 heading", "body": "written by v3", "tags": ["new"]}
    log.append(stream, expected_version=2, events=[(NoteTaken, fields)])
    assert [e.heading for e in log.events(stream)] == ["v1 title", "v2 title", "v3 heading"]
    [*_, newest] = log.notifications()
    assert b'"class_version":3' in bytes(newest.state) and b'"heading"' in bytes(newest.state)
