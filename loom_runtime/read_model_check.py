"""Whether every read model holds what the log says: a copy caught up, a copy rebuilt, compared.

A read model's tracking row says how far it applied the log, never that its rows are right:
rows edited or deleted by hand, a tracking row moved, or a full-text index damaged leave
searches wrong while ``loom doctor`` sees projections caught up (ADR 0009, "behind"). Checking
that on every write would cost every append; this check costs nothing until it is run.

It takes one snapshot of the SQLite database (SQLite's backup API: one read transaction, so
concurrent writers neither block it nor tear it) into two copies in a private folder beside
the database. In the first every registered read model catches up, as the next read would;
in the second every one is rebuilt from position 0, as ``loom rebuild`` does. Both then hold
the same log, so they must hold the same rows: each table is compared row by row (SQL
``EXCEPT`` both ways, and the row counts), and each FTS5 index of the first copy is checked
against its rows by FTS5's own ``integrity-check``. The live database is only read.

An entry's ``seq`` (a memory store's row id) is where a row was inserted, not what it holds:
an erased document's rows, deleted from the live store, were never inserted into the rebuilt
one, so every later ``seq`` differs by the gap. Entries are compared by their rank in
``seq`` order, and a ``postings`` table (``<prefix>postings``) by the rank of the entry it
points to in ``<prefix>entries``: the same rows in the same order are equal, a posting whose
entry is gone is not. A vector store's per-key token (``<prefix>vector_keys.token``) is random
by design and left out; that every key has a row is compared.

The copies hold what the database holds (read models in clear, with a master key too), in a
folder only its owner can read, next to the database (the same disk and permissions), and
are deleted when the check ends, whatever its outcome, SIGTERM included; only ``kill -9``
leaves them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from loom_runtime.errors import (
    EncryptionOffError,
    ReadModelCheckError,
    ReadModelCheckUnsupportedError,
)
from loom_runtime.projection import Progress, catch_up, rebuild, registered_projections
from loom_runtime.storage.chain import CHAIN_TABLE

if TYPE_CHECKING:
    from loom_runtime.log import LogSettings
    from loom_runtime.sealing import KeyWrapper

Bars = Callable[[str], Progress]
"""Makes a progress callback for a named step (the CLI's progress bars)."""

_SKIPPED: frozenset[str] = frozenset({"stored_events", CHAIN_TABLE})
"""The log's own tables: both copies hold them as snapshotted, and no read model writes them."""

_ZERO_COUNTS: dict[str, str] = {"rows_at": "n", "terms_at": "df"}
"""Counts kept by position (``<prefix>rows_at``, ``<prefix>terms_at``: ADR 0059) and their
count column. A bucket summed to zero adds nothing to any read, and whether one is left
depends on how the writes were batched (a page that ends and begins a term's rows in one call
never writes it; two catch-ups write it and take it back): such rows are not compared."""

_RANDOM: dict[str, str] = {"vector_keys": "token"}
"""Columns of random values (a vector store's ``<prefix>vector_keys.token``: what its writes
change so a cached in-process index knows a key's rows moved, ``loom_memory.vector``): a
rebuild draws others, so only the rest of each row is compared (that every key has one)."""

_FTS5 = re.compile(r"CREATE\s+VIRTUAL\s+TABLE\s+.*\bUSING\s+fts5\s*\(", re.IGNORECASE | re.DOTALL)
_FTS5_SHADOWS = ("data", "idx", "content", "docsize", "config")
"""The tables FTS5 keeps an index in (``<table>_data`` …): their layout depends on how the rows
were batched, so they are checked by ``integrity-check``, not compared."""


class TableDifference(msgspec.Struct, frozen=True, kw_only=True):
    """A table whose rows differ from a rebuild's."""

    table: str
    rows: int
    """Rows the read model holds (caught up)."""
    rebuilt_rows: int
    """Rows a rebuild from the log holds."""
    only_here: int
    """Distinct rows the read model holds that a rebuild does not (altered or added); -1 when
    no row can be compared: the table is missing from one copy, or has other columns."""
    only_rebuilt: int
    """Distinct rows a rebuild holds that the read model does not (altered or lost); -1 as
    ``only_here``."""


class ReadModelReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`check_read_models`."""

    position: int
    """The log position both copies were brought to."""
    projections: tuple[str, ...]
    """The read models checked, by tracking name."""
    tables: int
    """Tables compared."""
    differences: tuple[TableDifference, ...] = ()
    problems: tuple[str, ...] = ()
    """Damage found besides the rows: a read model that could not catch up (a page refused
    as applied twice), an FTS5 index that does not match its rows."""
    unchecked: tuple[str, ...] = ()
    """Read models this environment could not check, and why: one that cannot be opened here
    (a missing extra), or that even a rebuild from the log cannot build here."""

    @property
    def ok(self) -> bool:
        return not self.differences and not self.problems and not self.unchecked


def check_read_models(
    settings: LogSettings, *, encryption: KeyWrapper | None = None, bars: Bars | None = None
) -> ReadModelReport:
    """Compare every read model of the SQLite log ``settings`` name with a rebuild of it from
    the log (module docstring); ``encryption``: the master key the log was opened with.

    :class:`ReadModelCheckUnsupportedError` for a PostgreSQL log (there is no file to copy),
    :class:`ReadModelCheckError` when the copies cannot be written, and
    :class:`~loom_runtime.errors.EncryptionOffError` for an encrypted log without its key
    (its sealed events cannot be projected, so every read model would read as damaged)."""
    path = checked_file(settings, encrypted=encryption is not None)
    with _private_folder(path.parent) as folder:
        here, rebuilt = folder / "caught-up.db", folder / "rebuilt.db"
        _snapshot(path, here, rebuilt)
        found = _Found()
        names, position = _project(settings, here, encryption, bars, found, rebuilt=False)
        _project(settings, rebuilt, encryption, bars, found, rebuilt=True)
        with closing(sqlite3.connect(rebuilt)) as conn:
            conn.execute("ATTACH DATABASE ? AS here", (str(here),))
            # A read model the rebuild could not build left its tables half built, and which
            # tables are its is the read model's to say: no table is compared then, and what
            # its catch-up said is no finding either (the log cannot be projected here).
            problems = [
                problem
                for name, problem in found.not_caught_up.items()
                if name not in found.unbuilt
            ] + _fts5_problems(conn)
            compared, differences = (0, []) if found.unbuilt else _compare(conn)
    return ReadModelReport(
        position=position,
        projections=tuple(names),
        tables=compared,
        differences=tuple(differences),
        problems=tuple(problems),
        unchecked=tuple(found.unchecked),
    )


def checked_file(settings: LogSettings, *, encrypted: bool) -> Path:
    """The SQLite file whose read models :func:`check_read_models` would check (asked before
    anything long runs); :class:`ReadModelCheckUnsupportedError` when there is none, and
    :class:`~loom_runtime.errors.EncryptionOffError` for an encrypted log when ``encrypted``
    (a master key given) is False: its sealed events cannot be projected without it."""
    if not settings.is_sqlite:
        raise ReadModelCheckUnsupportedError(
            "read models are checked in a copy of a SQLite database; a PostgreSQL log's "
            "cannot be copied from here (`loom rebuild` rebuilds them from the log, ADR 0009)"
        )
    path = Path(settings.url.database or "")  # LogSettings refuses a database in memory
    if not path.is_file():
        raise ReadModelCheckUnsupportedError(f"no SQLite database at {path.absolute()}")
    if not encrypted and _has_key_table(path):
        raise EncryptionOffError(
            "this log is encrypted: its read models are rebuilt from sealed events, which "
            "open only with its master key; set $LOOM_MASTER_KEY (Loom(url, "
            "encryption=MasterKey.from_env())) to check them"
        )
    return path


def _has_key_table(path: Path) -> bool:
    """:func:`~loom_runtime.sealing.has_key_table` asked of the file itself, read-only: it is
    asked before anything is copied, with no engine opened on the live database."""
    from loom_runtime.sealing import TABLE

    with closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as live:
        found = live.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
        ).fetchone()
    return found is not None


class _Found:
    """What the projections of both copies reported, by kind (:class:`ReadModelReport`)."""

    def __init__(self) -> None:
        self.not_caught_up: dict[str, str] = {}
        """Why each read model that could not catch up could not, by its name."""
        self.unchecked: list[str] = []
        self.unbuilt: set[str] = set()
        """Read models even the rebuild could not build: their tables are half built."""

    def cannot_check(self, what: str) -> None:
        if what not in self.unchecked:  # both copies tell of a read model that cannot open
            self.unchecked.append(what)


@contextmanager
def _private_folder(beside: Path) -> Iterator[Path]:
    """A folder only this user can open (``mkdtemp``: mode 0o700), deleted with what it holds:
    when the check ends, however it ends, and on SIGTERM too (:func:`_deleted_on_sigterm`)."""
    try:  # absolute: the copies are opened by URI, and a relative path (./loom.db) has none
        folder = Path(tempfile.mkdtemp(prefix=".loom-check-", dir=beside)).absolute()
    except OSError as exc:
        raise ReadModelCheckError(
            f"could not create a folder beside the database to check its read models: {exc}"
        ) from exc
    with _deleted_on_sigterm(folder):
        try:
            yield folder
        finally:
            with _signals_held():  # a Ctrl-C mid-delete would leave part of the copies
                shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back while inside (delivered when it ends), where the platform
    can (``pthread_sigmask``, in the main thread)."""
    if not hasattr(signal, "pthread_sigmask") or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def _deleted_on_sigterm(folder: Path) -> Iterator[None]:
    """While inside, SIGTERM deletes ``folder`` and then ends the process as SIGTERM does.

    The copies hold the database in clear, and the default action ended the process with them
    on disk, where they outlived a later erasure. Raising an exception from the handler instead
    could land between a lock's ``acquire`` and its ``try`` and hang the close that unwinds;
    deleting and ending does neither. Only in the main thread (where Python runs handlers) and
    only over the default action: a handler the application set is left to it."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def terminated(signum: int, _frame: object) -> None:
        shutil.rmtree(folder, ignore_errors=True)  # an open SQLite file unlinks on Linux too
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _snapshot(source: Path, here: Path, rebuilt: Path) -> None:
    """``source`` copied whole into ``here`` from one read transaction (the backup API's single
    step), opened read-only so that nothing of the live file changes; then ``here`` copied
    into ``rebuilt``, so both hold the same snapshot whatever was written meanwhile (two
    backups of the live file would be two snapshots, a write apart)."""
    for origin, copy in ((f"{source.absolute().as_uri()}?mode=ro", here), (here.as_uri(), rebuilt)):
        try:
            with (
                closing(sqlite3.connect(origin, uri=True)) as live,
                closing(sqlite3.connect(copy)) as target,
            ):
                live.backup(target)
        except (OSError, sqlite3.Error) as exc:
            raise ReadModelCheckError(
                f"could not copy the database to {copy.parent} to check its read models: {exc}"
            ) from exc


def _project(
    settings: LogSettings,
    path: Path,
    encryption: KeyWrapper | None,
    bars: Bars | None,
    found: _Found,
    *,
    rebuilt: bool,
) -> tuple[list[str], int]:
    """Catch up (or rebuild) every registered read model of the copy at ``path``; what fails
    is told to ``found``. Returns the read models' names and the log's position.

    A read model the rebuild cannot build either is unchecked, not damaged: the log cannot be
    projected here (a missing extra), whatever the live rows hold."""
    from loom_runtime.loom import Loom

    step = "rebuilt" if rebuilt else "caught up"
    with Loom(
        f"sqlite:///{path}",
        persistence=settings.persistence,
        sqlite_synchronous="OFF",  # a scratch copy: nothing in it needs to survive a crash
        redactor=settings.redactor,
        encryption=encryption,
    ) as loom:
        log = loom.log
        names = []

        def unopened(name: str, exc: Exception) -> None:
            if _interrupted(exc):
                raise KeyboardInterrupt from exc
            found.cannot_check(f"{name}: could not be opened here ({_cause(exc)})")

        for projection in registered_projections(log, unopened=unopened):
            names.append(projection.name)
            advance = None if bars is None else bars(f"{step}: {projection.name}")
            try:
                (rebuild if rebuilt else catch_up)(log, projection, progress=advance)
            except Exception as exc:  # whatever stops a read model projecting the log is found
                if _interrupted(exc):  # Ctrl-C, which SQLAlchemy may raise as its own error
                    raise KeyboardInterrupt from exc
                what = f"{projection.name}: could not be {step} ({_cause(exc)})"
                if rebuilt:
                    found.cannot_check(what)
                    found.unbuilt.add(projection.name)
                else:
                    found.not_caught_up[projection.name] = what
        return names, log.position


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was raised because of a ``KeyboardInterrupt`` (in its chain)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _fts5_problems(conn: sqlite3.Connection) -> list[str]:
    """Each FTS5 index of the caught-up copy checked against its rows."""
    problems = []
    for name in _virtual_fts5(conn, "here"):
        table = _quoted(name)
        try:
            conn.execute(f"INSERT INTO here.{table}({table}) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"{name}: the full-text index does not match its rows ({exc})")
    return problems


def _virtual_fts5(conn: sqlite3.Connection, schema: str) -> list[str]:
    rows = conn.execute(
        f"SELECT name, sql FROM {schema}.sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
    )
    return [name for name, sql in rows if _FTS5.match(sql)]


def _tables(conn: sqlite3.Connection, schema: str) -> set[str]:
    """The tables of a copy that are compared: not SQLite's own, not virtual, not an FTS5
    index's (:data:`_FTS5_SHADOWS`), not the log's (:data:`_SKIPPED`)."""
    skipped = set(_SKIPPED)
    for name in _virtual_fts5(conn, schema):
        skipped.update(f"{name}_{shadow}" for shadow in _FTS5_SHADOWS)
    rows = conn.execute(
        f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%'"
    )
    return {name for (name,) in rows} - skipped


def _compare(conn: sqlite3.Connection) -> tuple[int, list[TableDifference]]:
    """Every table of either copy, compared (``main``: rebuilt, ``here``: caught up)."""
    tables = {"here": _tables(conn, "here"), "main": _tables(conn, "main")}
    differences = []
    for table in sorted(tables["here"] | tables["main"]):
        columns = {schema: _columns(conn, schema, table) for schema in tables}
        rows = {
            schema: _scalar(
                conn,
                f"SELECT count(*) FROM ({_canonical(schema, table, columns[schema], names)})",
            )
            if table in names
            else 0
            for schema, names in tables.items()
        }
        if any(table not in names for names in tables.values()) or (
            columns["here"] != columns["main"]
        ):
            # A table only one copy has, or with other columns: no row can be compared.
            only_here = only_rebuilt = -1
        else:
            mine, theirs = (
                _canonical(schema, table, columns[schema], tables[schema])
                for schema in ("here", "main")
            )
            only_here = _scalar(conn, f"SELECT count(*) FROM ({mine} EXCEPT {theirs})")
            only_rebuilt = _scalar(conn, f"SELECT count(*) FROM ({theirs} EXCEPT {mine})")
            if rows["here"] == rows["main"] and not only_here and not only_rebuilt:
                continue
        differences.append(
            TableDifference(
                table=table,
                rows=rows["here"],
                rebuilt_rows=rows["main"],
                only_here=only_here,
                only_rebuilt=only_rebuilt,
            )
        )
    return len(tables["here"] | tables["main"]), differences


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[tuple[str, int]]:
    """``(name, position in the primary key)`` of each column, in order."""
    return [
        (row[1], row[5]) for row in conn.execute(f"PRAGMA {schema}.table_info({_quoted(table)})")
    ]


def _canonical(schema: str, table: str, columns: list[tuple[str, int]], tables: set[str]) -> str:
    """A SELECT of ``table``'s rows as compared: each ``seq`` replaced by its rank, no bucket
    of counts by position at zero and no column of random tokens (module docstring)."""
    random = next((column for kind, column in _RANDOM.items() if table.endswith(kind)), None)
    names = [name for name, _ in columns if name != random]
    source = f"{schema}.{_quoted(table)}"
    entries = table.removesuffix("postings") + "entries"
    zero = next((count for kind, count in _ZERO_COUNTS.items() if table.endswith(kind)), None)
    if [name for name, key in columns if key] == ["seq"]:  # an entries table: seq is its id
        ranked = ["ROW_NUMBER() OVER (ORDER BY seq)" if n == "seq" else _quoted(n) for n in names]
        return f"SELECT {', '.join(ranked)} FROM {source}"
    if "seq" in names and table.endswith("postings") and entries in tables:
        ranks = (
            f"(SELECT seq, ROW_NUMBER() OVER (ORDER BY seq) AS rank "
            f"FROM {schema}.{_quoted(entries)})"
        )
        picked = ["r.rank" if n == "seq" else f"x.{_quoted(n)}" for n in names]
        return f"SELECT {', '.join(picked)} FROM {source} AS x LEFT JOIN {ranks} AS r USING (seq)"
    listed = f"SELECT {', '.join(map(_quoted, names))} FROM {source}"
    if zero is None or zero not in names or "level" not in names:
        return listed
    # A marker row (level -1, ``SELF_COUNTED``) is never left behind, at zero or not: kept.
    return f"{listed} WHERE NOT ({zero} = 0 AND level >= 0)"


def _quoted(name: str) -> str:
    """``name`` as an SQL identifier, whatever it holds (a table name is the database's word)."""
    return '"' + name.replace('"', '""') + '"'


def _scalar(conn: sqlite3.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])
