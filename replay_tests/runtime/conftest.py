"""Runtime tests: register the event-log conformance kit for assertion rewriting before it loads,
the SQLite log the recorder's connection tests share, and the second Loom the recovery tests
take over with."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from loom_runtime import Loom
from loom_runtime.log import LogSettings, open_log
from loom_runtime.storage.application import EventsourcingLog

pytest.register_assert_rewrite("loom_runtime.log_conformance")


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[EventsourcingLog]:
    """A SQLite log at ``synchronous=FULL``, closed after the test: the held writer's, the
    group commit's and the position reader's tests open the same one."""
    opened = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}", sqlite_synchronous="FULL"))
    assert isinstance(opened, EventsourcingLog)
    yield opened
    opened.close()


@pytest.fixture
def other(db_url: str) -> Iterator[Loom]:
    """A second Loom on the same log: another worker process, as far as the log can tell."""
    with Loom(db_url) as instance:
        yield instance
