"""The ``loom`` command line, on Typer (Click underneath) with Rich output (ADR 0008).

Every command follows the same conventions (ADR 0008): one exit-code table (:class:`ExitCode`),
errors on stderr, no hard wrapping when stdout is not a terminal (so ``loom verify | grep``
finds the anchor whole), ``--json`` on every command that prints data, and read-only commands
that never create a database (:func:`open_loom`).

Packages above the runtime add their commands through the ``loom.cli`` entry-point group
(each entry point is a ``register(app)`` function), so this module never imports them and the
dependencies stay one way.

``loom --help`` must be quick, so this module imports only Typer, Rich and the light runtime
modules; each command imports the log, the projections or the integrity walk when it runs.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, redirect_stdout, suppress
from datetime import datetime
from enum import IntEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, cast
from uuid import UUID

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from loom_runtime import codec
from loom_runtime.entry_points import installed
from loom_runtime.errors import (
    BundleError,
    BundleNotFoundError,
    BundleTooLargeError,
    BundleVersionError,
    ConfigurationError,
    DecisionKeyError,
    EncryptionOffError,
    ErasedError,
    ErasureSubjectError,
    ExecutionConflictError,
    ExecutionFinishedError,
    ExecutionNotFoundError,
    ExecutionOwnedError,
    FlowInputError,
    FlowNotFoundError,
    ForkPointError,
    IntegrityUnsupportedError,
    LabelError,
    LogCorruptError,
    LoomError,
    NotSerialisableError,
    RetentionPolicyError,
    cause_of,
)
from loom_runtime.flow import load_flows_from
from loom_runtime.tools.display import describe_meta, full_date, lineage_lines, visible
from loom_runtime.tools.readable_help import LoomTyper, ReadableGroup

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from loom_runtime.execution import Execution
    from loom_runtime.loom import Loom, Run
    from loom_runtime.projection import TrackedProjection
    from loom_runtime.read_model_check import ReadModelReport
    from loom_runtime.redaction import RedactorOption
    from loom_runtime.sealing import KeyWrapper, MasterKey


class _LoomGroup(ReadableGroup):
    """The ``loom`` group: a loom error that no command turned into its own message is still
    one line on stderr and an exit code of the table (:func:`exit_code_of`), never a
    traceback. Every command runs inside this group's ``invoke``.

    Any other exception (the flow's own failure, noted with the execution's id that ``loom
    resume --retry-failed`` needs, whose traceback points at the flow's line; or a defect)
    is printed as Python prints a traceback, made inert (:func:`visible`), exit 1: its
    message can quote a model's answer or a recorded value, and Typer's printer wrote it raw
    (escape sequences and all) and wrapped the execution's id onto a line of its own.

    A broken pipe (the reader went away: ``loom … | head``) is no defect: it is left to
    Click, which ends quietly (exit 1), where this group printed it as a traceback.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # Click's own ways out
            raise
        except BrokenPipeError:  # the reader went away (`loom … | head`): Click ends quietly
            raise
        except LoomError as exc:
            if getattr(exc, "__notes__", None):
                _traceback(exc)
            fail(str(exc), code=exit_code_of(exc))
        except Exception as exc:
            if not _flows_own(exc):  # the app's own database errors are its traceback
                _not_utf8(exc)
                _busy(exc)
                _schema_changed(exc)
            _traceback(exc)


def _flows_own(error: Exception) -> bool:
    """Whether ``error`` is a flow's own failure, recorded as its execution's (the note
    :meth:`Loom.run` adds): a sqlite3 error in it is the application's database, not the
    log's, and its traceback and execution id are what the user needs."""
    notes = getattr(error, "__notes__", ())
    return any(str(note).startswith("loom: recorded as the failure") for note in notes)


def _not_utf8(error: Exception) -> None:
    """Fail in one line if ``error`` is sqlite3 refusing a stored TEXT value that is not UTF-8:
    no loom writer stores one, so the database was edited; every reading path met it as a
    traceback (ADR 0018, "not UTF-8")."""
    from loom_runtime.storage.sqlite import stored_text_not_utf8

    column = stored_text_not_utf8(error)
    if column is not None:
        fail(
            f"the log's database holds text that is not UTF-8 (column {column!r}): it was "
            "changed outside loom; `loom verify` names the row"
        )


def _busy(error: Exception) -> None:
    """Fail in one line if ``error`` is SQLite's lock held by another connection for the whole
    lock timeout: not a defect but a busy log (a long import, a backup, a paused process), as
    a refused append already said; `recover`, `resume` and `worker` printed it as a traceback."""
    import sqlite3

    from loom_runtime.retry import is_busy_message
    from loom_runtime.storage.sqlite import sqlite_error

    driver = sqlite_error(error)
    if isinstance(driver, sqlite3.OperationalError) and is_busy_message(str(driver)):
        fail(
            "the SQLite log stayed locked by another connection for the whole lock timeout: "
            "another process is writing to it or holding a transaction open; try again"
        )


def _schema_changed(error: Exception) -> None:
    """Fail in one line if ``error`` is the database lacking a table or column loom made
    (renamed or dropped outside loom, or not a loom log at all): every command, `loom
    verify` included, printed the driver's ``OperationalError`` as a traceback."""
    from loom_runtime.storage.sqlite import missing_schema

    missing = missing_schema(error) or _postgres_missing_schema(error)
    if missing is not None:
        fail(
            f"the log's database lacks a table or column loom made ({missing}): it was changed "
            "outside loom, or it is not a loom log"
        )


_UNDEFINED: Final = frozenset({"42P01", "42703", "42883"})
"""PostgreSQL's SQLSTATEs for a table, a column and a function a statement names and the
database lacks (``undefined_table``, ``undefined_column``, ``undefined_function``)."""


def _postgres_missing_schema(error: BaseException) -> str | None:
    """What the database lacks (``column "topic" does not exist``) when the driver's error
    behind ``error`` is PostgreSQL's undefined table, column or function, else None. Told by
    the error's ``sqlstate`` (psycopg's, behind eventsourcing's and SQLAlchemy's wrappers),
    so nothing of psycopg is imported for it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "sqlstate", None) in _UNDEFINED:
            return str(current).strip().splitlines()[0][:200]
        current = current.__cause__ or getattr(current, "orig", None)
    return None


def _traceback(error: Exception) -> NoReturn:
    """Print ``error``'s traceback inert and exit 1. A flow's own failure's begins at the
    application's first frame: the command line, Typer, Click and loom's driver before it
    are not where its cause is (ADR 0008, amended "flow traceback"); loom's own defect keeps
    every frame."""
    tb = _from_the_flow(error.__traceback__) if _flows_own(error) else error.__traceback__
    printed = traceback.format_exception(type(error), error, tb)
    typer.echo(visible("".join(printed)), err=True, nl=False)
    raise typer.Exit(ExitCode.FAILED)


_RUNNERS: Final = frozenset({"loom_runtime", "typer", "click", "contextlib", "asyncio"})
"""The packages whose frames come before a flow's own in a run's traceback."""


def _from_the_flow(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from its first frame outside :data:`_RUNNERS` (all of it when it has none)."""
    first = tb
    while first is not None:
        module = str(first.tb_frame.f_globals.get("__name__", ""))
        if module.partition(".")[0] not in _RUNNERS:
            return first
        first = first.tb_next
    return tb


app = LoomTyper(
    name="loom",
    help="Record, replay and audit AI-agent executions from one append-only event log.",
    no_args_is_help=True,
    cls=_LoomGroup,
)
console = Console(highlight=False)
"""Where results go (stdout): what a script reads or pipes on."""
err_console = Console(stderr=True, highlight=False)
"""Where errors and warnings go (stderr), so a pipe or ``--json`` carries only the result."""


class ExitCode(IntEnum):
    """The one exit-code table of every ``loom`` command, the one scripts and CI rely on.

    Click already exits 2 for a bad argument; loom uses 2 for everything the caller named
    wrongly too (an execution, a file, a database that does not exist), and 1 only when the
    command ran and its answer is "no" (a divergence, a tampered log, a failed check).
    """

    OK = 0
    FAILED = 1
    """A check failed or something differs: a divergence, tampering, an unhealthy setup."""
    USAGE = 2
    """A usage error, or what was named is not there (execution, file, database)."""


def exit_code_of(error: LoomError) -> ExitCode:
    """The table's code for a loom error: 2 for what the caller set up or named wrongly (a
    missing master key or extra, an unknown flow, execution, label or subject, a bad policy,
    a bundle file that is not there, over the size cap or from a newer loom), 1 for
    everything the command found when it ran (a corrupt log or bundle, an erased subject, a
    conflict)."""
    usage = (
        BundleNotFoundError,
        BundleTooLargeError,
        BundleVersionError,
        ConfigurationError,
        DecisionKeyError,
        ErasureSubjectError,
        ExecutionNotFoundError,
        FlowInputError,
        FlowNotFoundError,
        LabelError,
        RetentionPolicyError,
    )
    return ExitCode.USAGE if isinstance(error, usage) else ExitCode.FAILED


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="LOOM_DB_URL",
        help="Database URL: sqlite:///PATH (default ./loom.db) or postgresql://HOST/DB "
        "(with USER:PW@ and :PORT as needed).",
    ),
]


def _print_version(asked: bool) -> None:
    if asked:
        try:
            installed = version("loom-replay")
        except PackageNotFoundError:  # run from a source tree that was never installed
            installed = "unknown (not installed)"
        console.print(f"loom {installed}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print loom's version and exit.",
        ),
    ] = False,
) -> None:
    """Record, replay and audit AI-agent executions from one append-only event log."""
    # Hard wrapping is for a person reading a terminal; in a pipe or a file a wrapped line
    # splits an id or an anchor, and grep no longer finds it.
    console.soft_wrap = not console.is_terminal
    err_console.soft_wrap = not err_console.is_terminal


def open_loom(
    db: str | None,
    *,
    create: bool = False,
    needed: bool = True,
    redactor: RedactorOption = "builtin",
    encryption: KeyWrapper | None = None,
) -> Loom:
    """Open the log for a command; a bad URL or option, or a PostgreSQL database that cannot
    be reached (checked now, so it is one line, not a traceback), is a usage error (exit 2).

    Only commands that write (``create=True``) may bring a SQLite database into being:
    opening a missing file creates it, so a read-only command given a typo (``--db
    sqlite:///typo.db``, or run from the wrong directory) would otherwise leave an empty
    ``loom.db`` behind and report "0 events verified", ok.

    ``encryption``: the key of the ``Loom`` whose log this is (``--flows`` lent it), used
    before ``$LOOM_MASTER_KEY``: another key there made a keyless log's key table under it,
    and locked the app out of its own log (a regression review).
    """
    from loom_runtime.loom import Loom

    try:
        key = encryption if encryption is not None else master_key()
        loom = Loom(db, encryption=key, redactor=redactor)
        if not loom.settings.is_sqlite:
            _ = loom.log
    except LoomError as exc:
        fail(str(exc), code=ExitCode.USAGE)
    path = Path(loom.settings.url.database or "")
    if not needed:  # the command may read no database at all (a bundle's replay)
        return loom
    if loom.settings.is_sqlite and create and not path.parent.is_dir():
        fail(
            f"no folder {path.parent.absolute()} to create the loom database {path.name} in "
            "(check the --db path, or create the folder first)",
            code=ExitCode.USAGE,
        )
    if loom.settings.is_sqlite and path.is_dir():
        fail(
            f"the log's path {path.absolute()} is a folder: name the log's file in it",
            code=ExitCode.USAGE,
        )
    if loom.settings.is_sqlite and not create and not path.is_file():
        fail(
            f"no loom database at {path.absolute()} (give --db URL or set LOOM_DB_URL; "
            "`loom run`, `loom import` or `loom knowledge sync --apply` creates one)",
            code=ExitCode.USAGE,
        )
    if loom.settings.is_sqlite and not create and not _holds_a_log(path):
        fail(
            f"no loom log in {path.absolute()}: it is another application's database, an "
            "empty file, or a log written with persistence='sqlalchemy', which the CLI does "
            "not open (check the --db path)",
            code=ExitCode.USAGE,
        )
    if loom.encrypted and (not loom.settings.is_sqlite or path.is_file()):
        # A wrong master key is refused here, before the command runs (a database not yet
        # created has no key to be wrong about, and is not created by this check).
        try:
            _ = loom.log
        except LoomError as exc:
            fail(str(exc), code=ExitCode.USAGE)
    return loom


def _holds_a_log(path: Path) -> bool:
    """Whether the SQLite file at ``path`` holds a loom log (its events table or its chain
    table: `verify` reports either one gone), read without writing: opening the log creates
    its tables, so a read-only command pointed at another application's database would add
    them and then report on an empty log. A file that cannot be read as a database at all
    (damaged, cut short, garbage) is not refused here: opening the log reports it, one line,
    as the damage it is (``LogCorruptError``, exit 1)."""
    import sqlite3

    from loom_runtime.storage.chain import CHAIN_TABLE
    from loom_runtime.storage.sqlite import EVENTS_TABLE

    try:
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            found = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                (EVENTS_TABLE, CHAIN_TABLE),
            ).fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return True
    return found is not None


def master_key() -> MasterKey | None:
    """The master key in ``$LOOM_MASTER_KEY``, if set: every command opens an encrypted log
    with it (ADR 0049), and a wrong one is refused when the log is opened. A log that has no
    key table gets one only from a write that seals (``loom run``), never from a reader."""
    import os

    if not os.environ.get("LOOM_MASTER_KEY", "").strip():
        return None
    from loom_runtime.sealing import MasterKey

    return MasterKey.from_env("LOOM_MASTER_KEY")


FlowsOption = Annotated[
    str | None,
    typer.Option(
        "--flows",
        envvar="LOOM_FLOWS",
        help="Where your flows are registered, MODULE:ATTR (a Loom or FlowRegistry).",
    ),
]


@contextmanager
def user_output() -> Iterator[None]:
    """Run the user's code (a ``--flows`` module as it loads, a flow's body) with what it
    prints on stderr: stdout is the command's own output, so ``--json`` stays one JSON
    document and a pipe gets only that, while the app's lines still reach the terminal.

    At the file descriptor: stdout's is pointed at stderr's for the while, so a subprocess the
    code starts is redirected too, and ``sys.stdout`` stays the object it is. A module that
    replaces it (``io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8")``, a common way to
    force UTF-8) had wrapped stderr's buffer under a swapped ``sys.stdout``, and closed it
    when the wrapper was collected (a regression review). A stdout with no descriptor (a test
    runner's capture) is swapped at the Python level instead."""
    try:
        out, err = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        out = err = -1
    if out < 0:  # run outside the handler: the code's own error is not "during" this one
        with redirect_stdout(sys.stderr):
            yield
        return
    sys.stdout.flush()
    saved = os.dup(out)
    try:
        os.dup2(err, out)
        yield
    finally:
        # What the code left buffered goes where it was written, to stderr (unless the code
        # closed or broke its stdout: then there is nothing to keep).
        with suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(saved, out)
        os.close(saved)


def open_with_flows(
    db: str | None, flows: str | None, *, create: bool = False, needed: bool = True
) -> Loom:
    """Open the log with the flows named by ``--flows`` (needed to run or replay).

    The current directory goes on the import path first, as ``python -m`` puts it there:
    ``--flows myapp.flows:registry`` run from the project directory finds ``myapp`` even
    though the ``loom`` script's own directory is elsewhere.
    """
    if not flows:
        return open_loom(db, create=create, needed=needed)
    from loom_runtime.loom import Loom

    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        with user_output():
            registry, named = load_flows_from(flows)
    except LoomError as exc:
        where = (  # a command given no --flows reads it from the environment, unasked
            " (from $LOOM_FLOWS: pass --flows MODULE:ATTR, or unset it)"
            if os.environ.get("LOOM_FLOWS") == flows
            else ""
        )
        fail(f"{exc}{where}", code=ExitCode.USAGE)
    # A Loom named by --flows brings its redactor: what it recorded was redacted by it, so a
    # replay through the built-in one diverged (printing the secret in the diff), and `loom
    # run` stored in clear what the app redacts (ADR 0029, amended "cli redactor").
    redactor: RedactorOption = named.settings.redactor if isinstance(named, Loom) else "builtin"
    # And its database, unless --db (or LOOM_DB_URL) names one: the flows' bodies read and
    # write through that Loom (a knowledge base opened on it), so a run recorded in
    # ./loom.db held an execution whose corpus was elsewhere (ADR 0008, amended "flows bring
    # their log").
    # Only a builtin log's: the command line opens no other (a Loom of persistence=
    # "sqlalchemy" would have had a second, builtin log written beside its own); and only
    # when a database is needed (a bundle's replay opens none).
    own = named.settings.url if isinstance(named, Loom) else None
    builtin = isinstance(named, Loom) and named.settings.persistence == "builtin"
    takes = own is not None and builtin and db is None and needed
    given = own.render_as_string(hide_password=False) if own is not None and takes else db
    # With its key: without it, a run into a log that has no key table yet was written in
    # clear, beyond erasure's reach (a regression review).
    key = named.encryption if takes and isinstance(named, Loom) else None
    loom = open_loom(given, create=create, needed=needed, redactor=redactor, encryption=key)
    if needed and own is not None and not _same_database(own, loom.settings.url):
        warn(
            f"{flows} is a Loom on {_shown(own)}, and this command uses "
            f"{_shown(loom.settings.url)}: what the flows read or write through their own "
            "Loom (a knowledge base, a memory) is in the first"
        )
    loom.flows = registry
    return loom


def _same_database(one: URL, other: URL) -> bool:
    """Whether two log URLs name one log: a SQLite file by its resolved path (a relative and
    an absolute spelling are one file), a server's by its backend, user, host, port, database
    and query (``?host=``, ``?dbname=``, ``?options=`` name another server, database or
    schema), a password aside. A query that differs only by a timeout is warned about too:
    a warning too many, never one too few."""
    if one.get_backend_name() == other.get_backend_name() == "sqlite":
        return _resolved(one.database) == _resolved(other.database)
    return _log_of(one) == _log_of(other)


def _log_of(url: URL) -> tuple[object, ...]:
    query = _without_passwords(url).query
    return (url.get_backend_name(), url.username, url.host, url.port, url.database, query)


def _without_passwords(url: URL) -> URL:
    return url.set(password=None).difference_update_query(_PASSWORD_PARAMETERS)


_PASSWORD_PARAMETERS: Final = ("password", "sslpassword")
"""libpq's query parameters that hold a secret (``?password=``)."""


def _shown(url: URL) -> str:
    """``url`` as a warning prints it: without its password, in its user part or its query."""
    return _without_passwords(url).render_as_string(hide_password=True)


def _resolved(database: str | None) -> str:
    return str(Path(database).resolve()) if database else ""


def flow_missing(exc: FlowNotFoundError, flows: str | None) -> NoReturn:
    """A flow not registered (exit 2), with the command line's way to register it; when
    ``--flows`` was given that is no fix (a typo is, and the library's message suggests the
    name), so the message names the registry it looked in instead."""
    fix = "pass --flows MODULE:ATTR or set LOOM_FLOWS" if not flows else f"flows from {flows}"
    fail(f"{exc} ({fix})", code=ExitCode.USAGE)


def cannot_write(target: Path, error: OSError) -> NoReturn:
    """A file a command was asked to write could not be: one line; exit 2 when the path is at
    fault (no such folder, a folder, no permission), 1 otherwise (a full disk)."""
    bad_path = isinstance(
        error, FileNotFoundError | NotADirectoryError | IsADirectoryError | PermissionError
    )
    fail(
        f"cannot write {target}: {error.strerror or error}",
        code=ExitCode.USAGE if bad_path else ExitCode.FAILED,
    )


def json_option(text: str, refusal: str) -> Any:
    """``text``, an option's JSON, decoded; else a usage error ``refusal: why``. Valid JSON
    too is refused so when Python's parser cannot read it: nested past its depth
    (``RecursionError``), an integer past its digit limit (``ValueError``, of which a syntax
    error, ``JSONDecodeError``, is one)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        fail(f"{refusal}: {exc}", code=ExitCode.USAGE)


def fail(message: str, *, code: ExitCode = ExitCode.FAILED) -> NoReturn:
    """Print an error on one line of stderr and exit with ``code`` (:class:`ExitCode`).

    The message often quotes the user's input or the log, so it is printed inert, on one
    line: a line break in a quoted key or kind would print a line loom did not write.
    """
    complain(message)
    raise typer.Exit(code)


def complain(message: str) -> None:
    """An error on stderr that does not stop the command (one file of many that failed: the
    command exits non-zero at the end); inert."""
    err_console.print(
        Text.assemble(("error:", "red"), " ", inert(message, one_line=True)), soft_wrap=True
    )


def warn(message: str) -> None:
    """A note on stderr that does not stop the command (a skipped file, say); inert, on one
    line (as :func:`fail`)."""
    err_console.print(
        Text.assemble(("warning:", "yellow"), " ", inert(message, one_line=True)),
        soft_wrap=True,
    )


JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON (one schema per command).")
]


_UNBOUNDED = 1_000_000
"""A width no table reaches: a table is measured against it, not against the console's."""


def print_table(table: Table) -> None:
    """``table`` on stdout, never narrower than its columns need.

    Rich fits a table to the console, 80 columns when stdout is not a terminal, and past its
    columns' minimum widths it shrinks a folding column to nothing (the flow names of
    ``executions list`` vanished once a fork and labels added columns). In a pipe or a file a
    table is as wide as its widest row, each row on one line (grep finds it whole); on a
    terminal it folds long cells but is never narrower than its minimum, and overflows the
    screen instead of dropping a column."""
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(_UNBOUNDED), table)
    width = needed.maximum if not console.is_terminal else max(console.width, needed.minimum)
    # Console.print caps its width= at the console's own, so a console as wide as the table,
    # on the same stream, prints it.
    Console(file=console.file, width=width, highlight=False).print(table)


def print_json(data: object) -> None:
    """``data`` as JSON on stdout, indented: msgspec Structs and recorded ``Raw`` values as
    they are, a recorded number with its own text (``1e400`` stays ``1e400``).

    Non-ASCII and DEL are escaped as ``\\uXXXX``: still JSON, and inert if it reaches a terminal. A
    string that cannot be UTF-8 (a file name's undecodable bytes, as ``os.fsdecode`` keeps
    them) shows those bytes as ``\\xNN``. Encoded, indented and written by msgspec and one
    regular expression: Rich's ``print_json`` parsed the text again with Python's ``json``
    (``1e400`` became ``Infinity``, 5,000 digits a traceback) and highlighted it, 20-35 times
    the time and about 10 times the memory (ADR 0033, amended "json").
    """
    try:
        encoded = msgspec.json.encode(data)
    except UnicodeEncodeError:
        plain = msgspec.to_builtins(data, builtin_types=(msgspec.Raw,))
        encoded = msgspec.json.encode(_utf8_strings(plain))
    text = msgspec.json.format(encoded, indent=2).decode()
    typer.echo(_NON_ASCII.sub(_json_escape, text))


_NON_ASCII = re.compile(r"[^\x00-\x7e]")
"""Outside printable ASCII and the controls msgspec escapes itself (DEL, which it does not,
included, as ``json.dumps(ensure_ascii=True)`` escapes it): JSON's structure is ASCII, so every
match is inside a string."""


def _json_escape(found: re.Match[str]) -> str:
    """One character as JSON's ``\\uXXXX`` (a surrogate pair beyond the BMP), as
    ``json.dumps(..., ensure_ascii=True)`` writes it."""
    code = ord(found[0])
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | code >> 10:04x}\\u{0xDC00 | code & 0x3FF:04x}"


def _utf8_strings(value: Any) -> Any:
    """``value`` (builtins) with each string's undecodable bytes shown as ``\\xNN``."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {_utf8_strings(key): _utf8_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_utf8_strings(item) for item in value]
    return value


@contextmanager
def progress_bars(*, hidden: bool = False) -> Iterator[Callable[[str], Callable[[int, int], None]]]:
    """Progress bars for a long operation, on stderr, drawn only when stderr is a terminal.

    Yields ``bar(label)``: it starts a bar and returns the ``progress(done, total)`` callback
    the library calls (a rebuild, a folder sync, a verify). In a pipe, a file or a test
    runner nothing is drawn (redraws would be noise in a log), nor with ``hidden`` (``--json``:
    whoever asked for JSON reads the streams, not a screen).
    """
    shown = err_console.is_terminal and not hidden
    with Progress(console=err_console, disable=not shown) as bars:

        def bar(label: str) -> Callable[[int, int], None]:
            # A label may quote the database (a read model's tracking name): Rich reads a
            # task's description as markup, so it is escaped, control characters shown.
            task = bars.add_task(escape(visible(label, one_line=True)), total=None)
            return lambda done, total: bars.update(task, completed=done, total=total)

        yield bar


def inert(text: str, *, one_line: bool = False) -> Text:
    """``text`` (from the log, or quoting it) as Rich ``Text`` that prints exactly as written.

    Rich parses a plain ``str`` for markup (``[link=...]`` makes a hyperlink, a stray ``[/]``
    crashes the print) and emoji codes; ``Text`` is never parsed. Control, bidi and
    zero-width characters are shown as ``<U+XXXX>`` (:func:`~loom_runtime.tools.display.visible`).
    Every value from the log that a command prints goes through here.
    """
    return Text(visible(text, one_line=one_line))


_ID_START = re.compile(r"(?:[0-9a-fA-F]-*){4,31}")
"""The start of an execution id: 4 to 31 of its hex digits, dashes anywhere (a whole id is a
UUID). Dashes do not count: `c---` named an execution by one digit, and `erase --apply` erased
it."""


def execution_id_in(loom: Loom, text: str) -> str:
    """The execution id ``text`` names: itself, or the one id it is the start of.

    Tables show an id by its first 8 characters (a fork's parent), so every command that
    takes an id takes the start of one, as git and docker do: one that begins several ids
    is refused naming them, one that begins none says so. A whole id goes to the library as
    it is; other text is refused here, where "the start of one" is what a user may give.
    """
    if not _ID_START.fullmatch(text):
        try:
            return str(UUID(text))
        except ValueError:
            fail(
                f"{text!r} is not an execution id: give a whole one, or its first 4 or more "
                "characters as `loom executions list` shows them",
                code=ExitCode.USAGE,
            )
    start = text.replace("-", "").lower()  # with or without dashes, as UUID() reads a whole one
    ids = [summary.execution_id for summary in loom.executions()]
    found = [str(execution_id) for execution_id in ids if execution_id.hex.startswith(start)]
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (" …" if len(found) > 5 else "")
        fail(
            f"{text} begins {len(found)} execution ids ({shown}); give more of it",
            code=ExitCode.USAGE,
        )
    if not found:
        fail(
            f"no execution id begins with {text} in the log at {loom.settings.url}",
            code=ExitCode.USAGE,
        )
    return found[0]


def no_bundle_file(path: Path) -> str:
    """Why ``path``, given for a bundle, is not one: missing, a directory, or no regular file."""
    if path.is_dir():
        return f"{path} is a directory, not a bundle file"
    if path.exists():
        return f"{path} is not a regular file, as a bundle is"
    return f"file not found: {path}"


@app.command()
def run(
    flow: str,
    arguments_json: Annotated[
        str, typer.Option("--input", help="The flow's arguments as a JSON object.")
    ] = "{}",
    db: DbOption = None,
    flows: FlowsOption = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="The tenant it runs for (a label).")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="The user it runs for (a label).")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="The session it belongs to (a label).")
    ] = None,
    tags: Annotated[
        list[str] | None, typer.Option("--tag", help="A free tag (repeat for more).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run FLOW durably and print its execution id and output."""
    from loom_runtime.errors import LabelError
    from loom_runtime.labels import Labels

    arguments = json_option(arguments_json, "--input is not JSON")
    if not isinstance(arguments, dict):
        fail("--input must be a JSON object of the flow's arguments", code=ExitCode.USAGE)
    try:  # checked before the database is opened: a refused label writes nothing
        labels = Labels(tenant=tenant, user=user, session=session, tags=tuple(tags or ()))
    except LabelError as exc:
        fail(str(exc), code=ExitCode.USAGE)
    with open_with_flows(db, flows, create=True) as loom:
        try:
            with user_output():
                result = loom.run(flow, labels=labels, **arguments)
        except FlowNotFoundError as exc:
            flow_missing(exc, flows)
        except (FlowInputError, NotSerialisableError) as exc:
            fail(str(exc), code=ExitCode.USAGE)
    print_run(result, as_json=as_json)


def print_run(result: Run, *, as_json: bool) -> None:
    """What ``run``, ``resume`` and ``fork`` print: the execution's id and its output (``--json``:
    the run as ``recover --json`` lists them)."""
    if as_json:
        print_json(result)
        return
    console.print(f"execution {result.execution_id}")
    print_json(result.output)


executions_app = LoomTyper(help="List and inspect recorded executions.", no_args_is_help=True)
app.add_typer(executions_app, name="executions")


def aware_time(text: str, *, option: str) -> datetime:
    """``text`` as an ISO time with a zone; without one it names a different moment in every
    zone, so it is refused with an example of how to give it (exit 2)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        fail(
            f"{option} {text!r} is not an ISO time (e.g. 2026-11-30T14:00:00Z)", code=ExitCode.USAGE
        )
    if moment.tzinfo is None:
        # The examples are built from the moment read, not the text: a date alone
        # ("2026-12-04") takes a zone only once it has a time.
        written = moment.isoformat()
        fail(
            f"{option} {text!r} has no time zone, so it names a different moment in every "
            f"zone: add one, e.g. {written}Z (UTC) or {written}+01:00",
            code=ExitCode.USAGE,
        )
    return moment


@executions_app.command("list")
def executions_list(
    flow: Annotated[str | None, typer.Option("--flow", help="Only this flow's.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only running, completed or failed ones.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only those started at or after this ISO time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Only those started before this ISO time.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many (a page).")
    ] = None,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Start after this execution id (the last of a page)."),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only those run for this tenant.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Only those run for this user.")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Only those of this session.")
    ] = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Only those with this tag (repeat: with every one of them)."),
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Every execution in the log, oldest first (or those the options select, a page at a time)."""
    from loom_runtime.errors import LabelError
    from loom_runtime.tools.display import describe_labels, identifier

    if status not in (None, "running", "completed", "failed"):
        fail(f"--status must be running, completed or failed, not {status!r}", code=ExitCode.USAGE)
    start = None if since is None else aware_time(since, option="--since")
    end = None if until is None else aware_time(until, option="--until")
    with open_loom(db) as loom:
        try:
            summaries = loom.executions(
                tenant=tenant, user=user, session=session, tags=tuple(tags or ())
            )
        except LabelError as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LogCorruptError as exc:
            fail(str(exc))
        after = None if after is None else execution_id_in(loom, after)
    if after is not None:
        ids = [str(summary.execution_id) for summary in summaries]
        if after not in ids:
            fail(
                f"--after {after!r} is not an execution in this log that --tenant, --user, "
                "--session and --tag select",
                code=ExitCode.USAGE,
            )
        summaries = summaries[ids.index(after) + 1 :]
    summaries = [
        summary
        for summary in summaries
        # The name as stored, or as the list shows it (a no-break space as <U+00A0>).
        if (flow is None or flow in (summary.flow, identifier(summary.flow, marks=False)))
        and (status is None or summary.status == status)
        and (start is None or summary.started_at >= start)
        and (end is None or summary.started_at < end)
    ]
    if not summaries and (tenant or user or session or tags or flow):  # a misspelt filter?
        _warn_unknown_filters(db, flow=flow, tenant=tenant, user=user, session=session, tags=tags)
    if limit is not None and len(summaries) > limit:
        summaries = summaries[:limit]
        warn(f"more: --after {summaries[-1].execution_id} for the next page")
    if as_json:
        print_json(summaries)
        return
    table = Table()  # narrow terminals wrap the flow name; ids and statuses are never cut
    table.add_column("execution", min_width=36, no_wrap=True)
    table.add_column("status", min_width=9, no_wrap=True)
    table.add_column("started (UTC)", min_width=19, no_wrap=True)
    table.add_column("flow", min_width=8, overflow="fold")
    forks = any(summary.parent_id is not None for summary in summaries)
    if forks:
        table.add_column("parent", min_width=8, no_wrap=True)
    labelled = [describe_labels(summary.labels) for summary in summaries]
    if any(labelled):
        table.add_column("ran for", min_width=16, overflow="fold")
    for summary, labels in zip(summaries, labelled, strict=True):
        cells: list[str | Text] = [
            str(summary.execution_id),
            summary.status,
            full_date(summary.started_at),
            # as a document id is shown, marks as written: two names that print alike (a
            # no-break space, a space at an end) are listed apart (ADR 0008, "names alike")
            Text(identifier(summary.flow, marks=False)),
        ]
        if forks:
            cells.append(str(summary.parent_id or "")[:8])
        if any(labelled):
            cells.append(inert(labels, one_line=True))
        table.add_row(*cells)
    print_table(table)


def _warn_unknown_filters(
    db: str | None,
    *,
    flow: str | None,
    tenant: str | None,
    user: str | None,
    session: str | None,
    tags: list[str] | None,
) -> None:
    """Name each filter of an empty list that no execution matches at all, with the values
    there are (ADR 0008, amended "unknown filters"): read only when the list is empty."""
    from loom_runtime.tools.display import identifier

    with open_loom(db) as loom:
        everything = loom.executions()
    for label, given, known in (
        ("tenant", [tenant], [s.tenant for s in everything]),
        ("user", [user], [s.user for s in everything]),
        ("session", [session], [s.session for s in everything]),
        ("tag", tags or [], [tag for s in everything for tag in s.tags]),
        ("flow", [flow], [identifier(s.flow, marks=False) for s in everything]),
    ):
        for value in given:
            if value is not None and (unknown := unknown_value(label, value, known)):
                warn(unknown)


def unknown_value(label: str, given: str, known: Iterable[str | None]) -> str:
    """A warning when no execution has ``given`` as its ``label`` (else ""), naming the
    values some execution has: a misspelt filter selects nothing, which alone reads as an
    answer. Not a refusal: a value may be used before its first execution."""
    values = sorted({value for value in known if value is not None})
    if given in values:
        return ""
    shown = ", ".join(map(repr, values[:10])) + (
        f" and {len(values) - 10} more" * (len(values) > 10)
    )
    return f"no execution has {label} {given!r} (known: {shown or 'none'}); check the name"


@executions_app.command("show")
def executions_show(execution_id: str, as_json: JsonOption = False, db: DbOption = None) -> None:
    """One execution: its lineage, input, every decision (key, kind, input, value, what was
    measured) and its outcome. --json prints every value whole (the table shortens them, and a
    long input, output or error is cut to its first 4,000 characters)."""
    with open_loom(db) as loom:
        try:
            execution = loom.execution(execution_id_in(loom, execution_id))
        except ExecutionNotFoundError as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except (LogCorruptError, ErasedError) as exc:
            fail(str(exc))
        except ConfigurationError as exc:  # a sealed execution, and no master key given
            fail(str(exc), code=ExitCode.USAGE)
        imported = loom.imported(execution.id) is not None
    if as_json:
        print_json(_execution_json(execution))
        return
    where = (
        f"imported: started after position {execution.log_position} of the log it was exported from"
        if imported
        else f"started after log position {execution.log_position}"
    )
    console.print(
        inert(
            f"execution {execution.id}: flow {execution.flow!r} (code {execution.code_version}), "
            + where,
            one_line=True,  # the code version is recorded text: it cannot forge the lineage
        )
    )
    for line in lineage(execution):
        console.print(inert(line, one_line=True))
    console.print(inert(f"input: {_head(codec.pretty(execution.input))}"))
    table = Table("key", "kind", "input", "value", "meta")
    forked = execution.parent_id is not None
    if forked:
        table.add_column("from")
    for decision in execution.decisions.values():
        value = (
            codec.pretty(decision.value)
            if decision.error_type is None
            else f"raised {decision.error_type}: {decision.message}"
        )
        meta = "" if decision.meta is None else describe_meta(codec.decode(decision.meta))
        cells = [decision.key, decision.kind or "", _short(decision.input), _short(value)]
        cells.append(_short(meta, 80))
        if forked:
            cells.append(decision.origin or "computed")
        table.add_row(*(inert(cell, one_line=True) for cell in cells))
    print_table(table)
    if execution.error is not None:
        failed = f"failed: {execution.error[0]}: {_head(execution.error[1], one_line=True)}"
        console.print(inert(failed, one_line=True))
        console.print(f"once the cause is fixed: loom resume {execution.id} --retry-failed")
    elif execution.output is not None:
        console.print(inert(f"output: {_head(codec.pretty(execution.output))}"))
    else:  # a live worker may be running it: resume refuses that, unless --force
        console.print(f"not finished (if its worker is gone: loom resume {execution.id})")


def _execution_json(execution: Execution) -> dict[str, object]:
    """``executions show --json``: the execution with every recorded value whole, as JSON."""
    return {
        "id": execution.id,
        "flow": execution.flow,
        "code_version": execution.code_version,
        "log_position": execution.log_position,
        "parent_id": execution.parent_id,
        "forked_at": execution.forked_at,
        "started_by": execution.started_by,
        "tenant": execution.labels.tenant,
        "user": execution.labels.user,
        "session": execution.labels.session,
        "tags": execution.labels.tags,
        "input": execution.input,
        "decisions": list(execution.decisions.values()),
        "reopenings": execution.reopenings,
        "output": execution.output,
        "error": (
            None
            if execution.error is None
            else {"type": execution.error[0], "message": execution.error[1]}
        ),
    }


def lineage(execution: Execution) -> list[str]:
    """Where an execution comes from (:func:`~loom_runtime.tools.display.lineage_lines`)."""
    return lineage_lines(
        parent_id=execution.parent_id,
        forked_at=execution.forked_at,
        labels=execution.labels,
        started_by=execution.started_by,
        reopenings=[
            (r.worker, f"{r.error_type}: {r.message}", r.dropped) for r in execution.reopenings
        ],
    )


@app.command()
def resume(
    execution_id: str,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Reopen a failed execution: compute its failed decisions again, keep the rest.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Take it over even from a worker that still beats (it is gone)."
        ),
    ] = False,
    db: DbOption = None,
    flows: FlowsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Finish an interrupted execution (or, with --retry-failed, a failed one); print its output."""
    with open_with_flows(db, flows) as loom:
        try:
            with user_output():
                result = loom.resume(
                    execution_id_in(loom, execution_id), retry_failed=retry_failed, force=force
                )
        except FlowNotFoundError as exc:
            flow_missing(exc, flows)
        except (
            ExecutionNotFoundError,
            ExecutionFinishedError,
            ExecutionOwnedError,
            EncryptionOffError,
        ) as exc:
            fail(str(exc), code=ExitCode.USAGE)  # EncryptionOffError: sealed, and no key given
        except (ExecutionConflictError, LogCorruptError, ErasedError) as exc:
            fail(str(exc))
    print_run(result, as_json=as_json)


@app.command()
def fork(
    execution_id: str,
    at: Annotated[
        str | None, typer.Option("--at", help="Fork before this recorded decision key.")
    ] = None,
    at_count: Annotated[
        int | None,
        typer.Option("--at-count", help="Fork after this many decisions, in recorded order."),
    ] = None,
    override: Annotated[
        list[str] | None,
        typer.Option(
            "--override", help="KEY=JSON: answer decision KEY with this value; repeatable."
        ),
    ] = None,
    db: DbOption = None,
    flows: FlowsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a new execution from a point of EXECUTION_ID, with overrides; print its id and output."""
    if (at is None) == (at_count is None):
        fail("give exactly one of --at KEY and --at-count N", code=ExitCode.USAGE)
    overrides = {}
    for item in override or ():
        key, found, value = item.partition("=")
        if not found or not key:
            fail(f"--override must be KEY=JSON, not {item!r}", code=ExitCode.USAGE)
        overrides[key] = json_option(value, f"--override {key!r}: the value is not JSON")
    point: str | int = at if at is not None else cast("int", at_count)
    with open_with_flows(db, flows) as loom:
        try:
            with user_output():
                result = loom.fork(
                    execution_id_in(loom, execution_id), at=point, override=overrides
                )
        except FlowNotFoundError as exc:
            flow_missing(exc, flows)
        except (
            ExecutionNotFoundError,
            ForkPointError,
            DecisionKeyError,
            NotSerialisableError,
        ) as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LogCorruptError as exc:
            fail(str(exc))
        if overrides:
            _warn_unused_overrides(overrides, loom.execution(result.execution_id))
    print_run(result, as_json=as_json)


def _warn_unused_overrides(overrides: dict[str, object], fork: Execution) -> None:
    """Name each override that answered no decision of ``fork`` (a key it never asked, or one
    it took from its parent): the fork is recorded all the same, but a misspelt key would
    otherwise look like an answer to "had this been different, what then?"."""
    used = {key for key, decision in fork.decisions.items() if decision.origin == "override"}
    # Every key the fork asked, those answered from its parent included: an override answers
    # one before the fork point as well, so each is what a misspelt key may have meant.
    asked = list(fork.decisions)
    shown = ", ".join(asked[:10]) + (f" and {len(asked) - 10} more" if len(asked) > 10 else "")
    for key in overrides:
        if key not in used:
            warn(
                f"--override {key}: the fork never asked for this key, so it answered nothing "
                f"(the keys it asked: {shown or 'none'})"
            )


@app.command()
def replay(
    target: Annotated[str, typer.Argument(help="An execution id, or the path of a bundle.")],
    live: Annotated[
        list[str] | None,
        typer.Option("--live", help="Decision kinds to run live (e.g. retrieval); repeatable."),
    ] = None,
    max_bundle_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-bundle-bytes",
            help="Refuse a bundle file larger than this, unread (default: LOOM_MAX_BUNDLE_BYTES, "
            "else 256 MiB).",
        ),
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
    flows: FlowsOption = None,
) -> None:
    """Replay an execution (or a bundle) with the current code; exit 1 if it diverges."""
    kinds = frozenset(live or ())
    bundle = Path(target)
    named_a_file = bundle.suffix in (".json", ".msgpack") or "/" in target or bundle.exists()
    if not bundle.is_file() and named_a_file:
        fail(no_bundle_file(bundle), code=ExitCode.USAGE)
    # A bundle carries its own execution: replaying it reads no log, so needs no database.
    with open_with_flows(db, flows, needed=not bundle.is_file()) as loom:
        if not bundle.is_file():
            target = execution_id_in(loom, target)
        try:
            if kinds:
                from loom_runtime.bundle import read_bundle

                recorded = (
                    read_bundle(bundle, max_bytes=max_bundle_bytes).execution()
                    if bundle.is_file()
                    else loom.execution(target)
                )
                _check_live_kinds(kinds, recorded)
            with user_output():
                result = (
                    loom.replay_bundle(bundle, live=kinds, max_bundle_bytes=max_bundle_bytes)
                    if bundle.is_file()
                    else loom.replay(target, live=kinds)
                )
        except FlowNotFoundError as exc:
            flow_missing(exc, flows)
        except FlowInputError as exc:  # the recorded arguments no longer fit: an answer
            fail(str(exc))
        except (BundleError, ConfigurationError, ErasedError, LogCorruptError) as exc:
            fail(str(exc), code=exit_code_of(exc))  # a failed check 1; what was named wrong 2
        except ExecutionNotFoundError as exc:
            fail(str(exc), code=ExitCode.USAGE)
    if as_json:
        print_json(
            {
                "execution_id": result.execution_id,
                "flow": result.flow,
                "identical": result.identical,
                "recorded_code_version": result.recorded_code_version,
                "code_version": result.code_version,
                "divergences": [
                    {"type": type(divergence).__name__, "message": str(divergence)}
                    for divergence in result.divergences
                ],
                "output": result.output,
                "live_values": {
                    key: _live_json(value) for key, value in result.live_values.items()
                },
            }
        )
    else:
        console.print(inert(result.describe()))
        for key, value in result.live_values.items():
            # The key is recorded text (a key can be built from a value): one line, quoted,
            # and cut as `executions show` cuts a value (--json prints it whole).
            console.print(inert(_head(f"live {key!r}: {value!r}", one_line=True)))
    raise typer.Exit(ExitCode.OK if result.identical else ExitCode.FAILED)


def _live_json(value: Any) -> Any:
    """A live decision's value as ``--json`` gives it: a failure (an exception, which JSON
    cannot hold) as ``{"raised": "module:Class", "message": ...}``, as the log records one."""
    if isinstance(value, BaseException):
        from loom_runtime.execution import error_message_of, error_type_of

        return {"raised": error_type_of(value), "message": error_message_of(value)}
    return value


def _check_live_kinds(kinds: frozenset[str], execution: Execution) -> None:
    """Warn of ``--live`` kinds no recorded decision of ``execution`` has: a misspelt kind
    (``retreival``) runs nothing live, and the replay would answer "identical" to a question
    it never asked. A warning, not a refusal: code that now makes decisions of that kind
    (a retrieval added since) runs them live, which is what ``--live`` is for."""
    recorded = {decision.kind for decision in execution.decisions.values() if decision.kind}
    unknown = sorted(kinds - recorded)
    if unknown:
        warn(
            f"--live {', '.join(unknown)}: no recorded decision of execution {execution.id} has "
            f"that kind (its kinds: {', '.join(sorted(recorded)) or 'none'}); only decisions of "
            "it the current code makes run live"
        )


@app.command()
def rebuild(db: DbOption = None) -> None:
    """Drop every read model (corpus, memory) and rebuild it from the log."""
    from loom_runtime.projection import rebuild as projection_rebuild
    from loom_runtime.projection import registered_projections

    with open_loom(db) as loom, progress_bars() as bar:
        projections = registered_projections(loom.log)
        target = loom.log.position
        for projection in projections:
            advance = bar(projection.name)
            projection_rebuild(loom.log, projection, progress=advance)
            advance(target, target)  # a projection with nothing to apply reports no page
    console.print(f"rebuilt {len(projections)} projection(s) up to log position {target}")


@app.command()
def doctor(as_json: JsonOption = False, db: DbOption = None) -> None:
    """Check the setup: log reachable and readable, projections caught up. Exit 1 on a problem."""
    from loom_runtime.projection import registered_projections
    from loom_runtime.sealing import has_key_table

    checks: list[dict[str, object]] = []

    def check(ok: bool, label: str, detail: str) -> None:
        checks.append({"check": label.strip(), "ok": ok, "detail": detail})
        if not as_json:
            verdict = ("ok  ", "green") if ok else ("FAIL", "red")
            console.print(Text.assemble(verdict, " ", inert(f"{label}: {detail}", one_line=True)))

    def verdict() -> NoReturn:
        healthy = all(entry["ok"] for entry in checks)
        if as_json:
            print_json({"ok": healthy, "checks": checks})
        raise typer.Exit(ExitCode.OK if healthy else ExitCode.FAILED)

    with open_loom(db) as loom:
        check(True, "store configured", loom.settings.url.render_as_string(hide_password=True))
        try:
            head = loom.log.position
            count = 0
            for notification in loom.log.notifications():
                loom.log.decode(notification)  # raises if a row does not decode
                count += 1
            check(True, "log readable", f"{count} events decode, head at position {head}")
        except Exception as exc:  # whatever stops the log from decoding is doctor's finding
            check(False, "log readable", str(exc))
            verdict()

        check(*_encryption(loom))
        keys = _keys_agree(loom, head)  # a clear log's too: a key table gone is seen so
        if not keys[0] or has_key_table(loom.log.engine):
            check(*keys)

        def unopenable(name: str, error: Exception) -> None:  # the others are still checked
            check(False, f"projection {name}", f"cannot be opened: {cause_of(error)}")

        for projection in registered_projections(loom.log, unopened=unopenable):
            check(*_caught_up(loom, projection, head))
            store = getattr(projection, "store", None)
            if store is not None:
                check(hasattr(store, "search"), f"  {projection.name} search", type(store).__name__)
    verdict()


def _encryption(loom: Loom) -> tuple[bool, str, str]:
    """Doctor's check of encryption: an encrypted log (it has a key table) opened without its
    master key fails, since this process's runs, workers and erasures are all refused; a
    wrong key never gets here (the log refuses to open)."""
    from loom_runtime.sealing import has_key_table, keyring_for

    engine = loom.log.engine
    table = has_key_table(engine)
    if keyring_for(engine) is not None and table:
        return True, "encryption", "on: the master key opens the key table"
    if table:
        return (
            False,
            "encryption",
            "the log is encrypted but $LOOM_MASTER_KEY is not set: runs, workers, erasure "
            "and sealed reads are refused in this environment (verify and listings work)",
        )
    return True, "encryption", "off (no key table; a master key switches it on at its first write)"


def _keys_agree(loom: Loom, head: int) -> tuple[bool, str, str]:
    """Doctor's check of the key table against the log (what ``loom verify`` checks after
    the chain): an erasure left half done is an operator's next step, and a key row lost or
    destroyed by hand is data lost; neither needs the master key to be found."""
    from sqlalchemy.exc import SQLAlchemyError

    from loom_runtime.key_audit import verify_keys

    try:
        report = verify_keys(loom.log, upto=head)
    except SQLAlchemyError as exc:  # its columns altered
        return False, "keys", f"the key table could not be read: {cause_of(exc)}"
    if report.ok:
        return True, "keys", f"{report.checked} data keys agree with the forget log"
    return False, "keys", f"{report.problem} at log position {report.position}: {report.detail}"


_ANCHOR = re.compile(r"([0-9]{1,19}):([0-9a-f]{64})")


@app.command()
def verify(
    anchor: Annotated[
        str | None,
        typer.Option(
            "--anchor", help="A head printed by an earlier verify (ID:HEX), kept elsewhere."
        ),
    ] = None,
    read_models: Annotated[
        bool,
        typer.Option(
            "--read-models",
            help="Then compare every read model with a rebuild of it from the log, in a "
            "copy of the SQLite database.",
        ),
    ] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Walk the hash chain; report the first event altered, deleted, inserted or reordered.

    In an encrypted log, then check the key table against the events (ADR 0049, amended
    "verify"): a key row deleted or destroyed without a forget event, or an erasure left
    half done, is reported as well, with no master key needed. With ``--read-models``, then
    compare each read model's rows with a rebuild from the log (ADR 0009, amended "check")."""
    from sqlalchemy.exc import SQLAlchemyError

    from loom_runtime.errors import ReadModelCheckError
    from loom_runtime.integrity import Anchor, Tampering, verify_log
    from loom_runtime.key_audit import verify_keys
    from loom_runtime.read_model_check import checked_file

    expected = None
    if anchor is not None:
        # Spaces or a line end around it (read from a file) and hex in capitals are the same
        # anchor; anything but a position and a SHA-256 is a usage error, never "TAMPERED".
        given = _ANCHOR.fullmatch(anchor.strip().lower())
        if given is None or int(given[1]) < 1:
            fail(
                f"--anchor must be ID:HEX as printed by loom verify (a position from 1 and 64 "
                f"hex digits), not {anchor!r}",
                code=ExitCode.USAGE,
            )
        expected = Anchor(notification_id=int(given[1]), global_hash=given[2])
    with open_loom(db) as loom, progress_bars(hidden=as_json) as bar:
        try:
            if read_models:  # refused before the chain's walk, not after it
                checked_file(loom.settings, encrypted=loom.encrypted)
            report = verify_log(loom.log, anchor=expected, progress=bar("verify"))
        except ReadModelCheckError as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except IntegrityUnsupportedError as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LogCorruptError as exc:
            fail(str(exc))
        keys = None
        if report.ok:  # the key table is checked against events the chain vouched for
            upto = report.head.notification_id if report.head is not None else 0
            try:
                keys = verify_keys(loom.log, upto=upto, progress=bar("keys"))
            except SQLAlchemyError as exc:  # its columns altered: no verdict can be given
                fail(f"the key table could not be read: {cause_of(exc)}")
            if not keys.ok:
                report = msgspec.structs.replace(
                    report, problem=keys.problem, position=keys.position, detail=keys.detail
                )
        models = None
        if read_models and report.ok:  # a log that fails its own check is not projected
            try:
                models = loom.check_read_models(bars=bar)
            except ReadModelCheckError as exc:
                fail(str(exc), code=ExitCode.USAGE)
    key_rows = 0 if keys is None else keys.checked
    if as_json:
        print_json(
            {
                "ok": report.ok and (models is None or models.ok),
                **msgspec.structs.asdict(report),
                "keys_checked": key_rows,
                **({"read_models": _read_models_json(models)} if read_models else {}),
            }
        )
    elif report.ok:
        head = f"{report.head.notification_id}:{report.head.global_hash}" if report.head else "-"
        agree = f"; {key_rows} data keys agree with the forget log" if key_rows else ""
        console.print(
            f"ok: {report.checked} events verified{agree}; head {head} (keep it as --anchor)"
        )
        if models is not None:
            _print_read_models(models)
    else:
        verified = (
            f"{report.checked} events verified before it"
            if keys is None or keys.ok
            else f"the chain of all {report.checked} events is intact"
        )
        detail = (
            f" at log position {report.position}: {report.problem} ({report.detail}); {verified}"
        )
        verdict = "INCOMPLETE" if report.problem is Tampering.ERASURE_INCOMPLETE else "TAMPERED"
        console.print(Text.assemble((verdict, "red"), inert(detail, one_line=True)))
        if read_models:
            console.print("read models not checked: the log itself did not verify")
    if not report.ok or (models is not None and (models.differences or models.problems)):
        raise typer.Exit(ExitCode.FAILED)
    # Nothing found, but some read model unchecked: this environment lacks what it needs.
    raise typer.Exit(ExitCode.USAGE if models is not None and models.unchecked else ExitCode.OK)


def _read_models_json(models: ReadModelReport | None) -> dict[str, object] | None:
    """``--json``'s ``read_models``: null when they were not checked (the log did not verify)."""
    return None if models is None else {"ok": models.ok, **msgspec.structs.asdict(models)}


def _print_read_models(models: ReadModelReport) -> None:
    """One line for read models that agree with a rebuild; else one per table that does not
    and per problem, then what repairs them. Table names and problems come from the database:
    printed inert."""
    where = f"at log position {models.position}"
    if models.ok:
        console.print(
            f"ok: {len(models.projections)} read model(s), {models.tables} tables, agree with "
            f"a rebuild from the log {where}"
        )
        return
    for difference in models.differences:
        if difference.only_here < 0:
            detail = (
                f"table {difference.table} is not the same table in a rebuild (missing, or "
                f"other columns): {difference.rows} rows here, {difference.rebuilt_rows} rebuilt"
            )
        else:
            detail = (
                f"table {difference.table} holds {difference.rows} rows, a rebuild "
                f"{difference.rebuilt_rows}: {difference.only_here} not in the rebuild, "
                f"{difference.only_rebuilt} of the rebuild's missing"
            )
        console.print(Text.assemble(("DIFFERS", "red"), " ", inert(detail, one_line=True)))
    for problem in models.problems:
        console.print(Text.assemble(("DIFFERS", "red"), " ", inert(problem, one_line=True)))
    for unchecked in models.unchecked:
        console.print(Text.assemble(("UNCHECKED", "yellow"), " ", inert(unchecked, one_line=True)))
    if models.differences or models.problems:
        console.print(
            f"the read models disagree with the log {where}: `loom rebuild` rebuilds them from it"
        )
    else:
        console.print(
            f"no difference found {where}, but not every read model could be checked here "
            "(install what it needs, then check again)"
        )


def _caught_up(loom: Loom, projection: TrackedProjection, head: int) -> tuple[bool, str, str]:
    """Doctor's projection check: catch it up to ``head``, as the next read would.

    Projections catch up lazily (on the next read), so a healthy log after writes is
    usually ahead of them; "behind" is not a fault. Failing to catch up is.
    """
    from loom_runtime.projection import catch_up as projection_catch_up

    label = f"projection {projection.name}"
    start = projection.position()
    try:
        reached = projection_catch_up(loom.log, projection, upto=head)
    except Exception as exc:  # any failure to apply the log is what doctor is here to report
        return (
            False,
            label,
            f"cannot catch up from {start} to {head}: {cause_of(exc)} (run loom rebuild)",
        )
    done = f"caught up from {start} to {reached}" if start < head else f"at {start}"
    return reached >= head, label, f"{done} of {head}"


SHOWN_CHARACTERS = 4_000
"""How much of an input, output or error message ``executions show`` prints: a 2 MB prompt
filled the terminal. ``--json`` prints every value whole."""


def _head(text: str, *, one_line: bool = False) -> str:
    """``text`` as printed (:func:`~loom_runtime.tools.display.visible`), whole or its first
    :data:`SHOWN_CHARACTERS` and how many were left out. Cut after escaping: cut before,
    5,000 zero-width spaces printed as 32,000 characters."""
    shown = visible(text, one_line=one_line)
    if len(shown) <= SHOWN_CHARACTERS:
        return shown
    head = shown[:SHOWN_CHARACTERS]
    opened = head.rfind("<U+", SHOWN_CHARACTERS - 10)
    if opened != -1 and ">" not in head[opened:]:  # never half a <U+XXXX>
        head = head[:opened]
    left_out = len(shown) - len(head)
    return f"{head}… ({left_out:,} more characters as shown: --json prints it whole)"


def _short(text: object, width: int = 60) -> str:
    value = codec.pretty(text) if isinstance(text, bytes | msgspec.Raw) else str(text)
    flat = " ".join(value.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _load_plugins() -> None:
    for entry_point in installed("loom.cli"):
        entry_point.load()(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    # ``python -m loom_runtime.tools.cli`` runs this file as ``__main__``, a second copy of the
    # module. The command packages import ``loom_runtime.tools.cli`` and register on ITS app
    # (registering from this copy would re-enter them half-imported), so run the real module.
    from loom_runtime.tools.cli import main as _real_main

    _real_main()
else:
    _load_plugins()

from loom_runtime.tools import (  # noqa: E402  (each registers its commands on `app`)
    bundle_cli,  # noqa: F401  (`loom diff`, `loom bundle show`)
    erase_cli,  # noqa: F401  (`loom erase`, `loom retain`)
    transfer_cli,  # noqa: F401  (`loom export`, `loom import`)
    worker_cli,  # noqa: F401  (`loom recover`, `loom worker`)
)
