"""Opening a SQLite log that cannot be opened says why, with the error for that cause.

Every ``sqlite3.DatabaseError`` of the first open used to be reported as a damaged log to
restore from a backup, a busy file included (``OperationalError`` is a ``DatabaseError``): a
reader told to restore a healthy database because another process was creating it. A file in
a folder that does not exist surfaced as eventsourcing's ``InterfaceError``, outside loom's
hierarchy.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from loom_runtime import (
    ConfigurationError,
    DatabaseBusyError,
    DatabaseUnavailableError,
    Loom,
)
from loom_runtime.errors import LogCorruptError

PERSISTENCES = ["builtin", "sqlalchemy"]


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A new file another connection holds the write lock of (as another process's first
    open creating its tables does), released after the test."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE other (x)")
    yield path
    holder.rollback()
    holder.close()


@pytest.mark.waits  # the open waits out its lock timeout, idle
@pytest.mark.parametrize("persistence", PERSISTENCES)
def test_a_log_locked_by_another_connection_is_busy_not_damaged(
    locked: Path, persistence: str
) -> None:
    """The open waits for the lock timeout, then raises DatabaseBusyError (a
    DatabaseUnavailableError) naming the timeout and how to wait longer; nothing says
    "restore it from a backup"."""
    loom = Loom(f"sqlite:///{locked}", lock_timeout=0.5, persistence=persistence)  # type: ignore[arg-type]
    with pytest.raises(DatabaseBusyError) as raised:
        _ = loom.log
    message = str(raised.value)
    assert isinstance(raised.value, DatabaseUnavailableError)
    assert "locked" in message and "lock_timeout" in message and str(locked) in message
    assert "backup" not in message


@pytest.mark.parametrize("persistence", PERSISTENCES)
def test_a_log_in_a_folder_that_does_not_exist_is_a_configuration_error(
    tmp_path: Path, persistence: str
) -> None:
    """A typo in the folder names the folder, and creates nothing."""
    folder = tmp_path / "no_such_folder"
    loom = Loom(f"sqlite:///{folder}/loom.db", persistence=persistence)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no folder") as raised:
        _ = loom.log
    assert str(folder) in str(raised.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("persistence", PERSISTENCES)
def test_a_folder_named_as_the_log_is_a_configuration_error(
    tmp_path: Path, persistence: str
) -> None:
    """A URL naming a folder, not a file, says so."""
    loom = Loom(f"sqlite:///{tmp_path}", persistence=persistence)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="a folder"):
        _ = loom.log


@pytest.mark.parametrize("persistence", PERSISTENCES)
def test_a_file_that_is_not_a_database_is_still_a_damaged_log(
    tmp_path: Path, persistence: str
) -> None:
    """The negative control: what is damaged is still reported as damaged."""
    path = tmp_path / "garbage.db"
    path.write_bytes(os.urandom(8192))
    loom = Loom(f"sqlite:///{path}", persistence=persistence)  # type: ignore[arg-type]
    with pytest.raises(LogCorruptError, match="backup"):
        _ = loom.log


def test_the_sqlalchemy_persistence_waits_for_the_lock_timeout(tmp_path: Path) -> None:
    """eventsourcing-sqlalchemy's SQLite connections waited the driver's default 5 s for a
    lock whatever ``lock_timeout`` said; they wait for ``lock_timeout`` now, as the
    built-in persistence's and the projections' do."""
    loom = Loom(f"sqlite:///{tmp_path / 'x.db'}", persistence="sqlalchemy", lock_timeout=0.5)
    with loom, loom.log.application.factory.datastore.engine.connect() as conn:  # type: ignore[attr-defined]
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 500


@pytest.mark.parametrize("persistence", PERSISTENCES)
def test_a_file_that_is_not_sqlite_at_all_is_named_as_such_not_only_as_damage(
    tmp_path: Path, persistence: str
) -> None:
    """``--db sqlite:///runbooks/disk-full.md`` (a mistyped path) was told the database "is
    damaged or not a loom database; restore it from a backup": the wrong advice for a file
    that was never a database (a newcomer's walk). A file that does not begin as SQLite
    files do is named as not a SQLite database, with the path to check first; the file is
    left as it was."""
    notes = tmp_path / "disk-full.md"
    notes.write_text("# Disk full\nRotate the logs.\n" * 200)
    before = notes.read_bytes()
    loom = Loom(f"sqlite:///{notes}", persistence=persistence)  # type: ignore[arg-type]
    with pytest.raises(LogCorruptError) as raised:
        _ = loom.log
    message = str(raised.value)
    assert "is not a SQLite database" in message and "check the path" in message, message
    assert notes.read_bytes() == before
