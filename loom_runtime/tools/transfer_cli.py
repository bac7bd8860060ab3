"""``loom export`` and ``loom import``: executions out of a log into bundles, and back in.

One execution goes to one bundle file, as it always has. Several (named, or ``--all``) go to
a directory, one ``<execution id>.json`` each, which is what moving a log's executions to
another log, or attaching a batch to an incident, needs. ``loom import`` takes bundle files
and directories of them; importing what the log already holds identically writes nothing
(:meth:`Loom.import_bundle`), so an import can be re-run after an interruption and never
duplicates. A bundle that cannot be imported (tampered, conflicting, not a bundle) is
reported and the others still go in: each import is its own atomic insert. Long runs show a
progress bar on a terminal (ADR 0033). Registered on the ``loom`` app by
:mod:`loom_runtime.tools.cli`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec
import typer

from loom_runtime.errors import (
    BundleError,
    ErasedError,
    ExecutionNotFoundError,
    LogCorruptError,
    SecretRefusedError,
)
from loom_runtime.tools.cli import (
    DbOption,
    ExitCode,
    FlowsOption,
    JsonOption,
    app,
    cannot_write,
    complain,
    console,
    err_console,
    execution_id_in,
    fail,
    inert,
    open_loom,
    open_with_flows,
    print_json,
    progress_bars,
)

if TYPE_CHECKING:
    from loom_runtime.loom import Loom

BUNDLE_SUFFIXES = (".json", ".msgpack")
Status = Literal["imported", "present", "failed"]


class Exported(msgspec.Struct, frozen=True, kw_only=True):
    """One bundle ``loom export --json`` wrote."""

    execution_id: str
    path: str
    bytes: int


class Imported(msgspec.Struct, frozen=True, kw_only=True):
    """What ``loom import --json`` did with one bundle file."""

    path: str
    status: Status
    """``present``: the log already held this execution identically, nothing was written."""
    execution_id: str | None = None
    error: str | None = None


@app.command()
def export(
    execution_ids: Annotated[
        list[str] | None, typer.Argument(help="The executions to export (or --all).")
    ] = None,
    output: Annotated[
        str | None,  # not a Path, which drops a trailing separator: `-o new/` names a directory
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="The bundle file for one execution (.json or .msgpack); a directory for "
            "several, --all or a path ending in a separator (one <id>.json each).",
        ),
    ] = None,
    all_executions: Annotated[
        bool, typer.Option("--all", help="Export every execution in the log.")
    ] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Write executions to portable bundles (.json, or .msgpack)."""
    ids = execution_ids or []
    if output is None:
        fail(
            "say where to write: -o FILE for one execution, -o DIRECTORY for several",
            code=ExitCode.USAGE,
        )
    if all_executions == bool(ids):
        fail("name the executions to export, or pass --all (not both)", code=ExitCode.USAGE)
    named_directory = output.endswith(tuple(filter(None, (os.sep, os.altsep))))
    destination = Path(output)
    into_directory = all_executions or len(ids) > 1 or named_directory or destination.is_dir()
    if into_directory and destination.exists() and not destination.is_dir():
        fail(
            f"{output} is a file; several executions, --all and a path ending in {os.sep} go "
            "to a directory",
            code=ExitCode.USAGE,
        )
    if (
        into_directory
        and not named_directory
        and not destination.exists()
        and destination.suffix.lower() in BUNDLE_SUFFIXES
    ):  # a new directory named like a bundle file is almost surely not what was meant
        fail(
            f"{output} names one bundle file; several executions and --all go to a directory "
            f"(-o {destination.with_suffix('')}{os.sep})",
            code=ExitCode.USAGE,
        )
    written: list[Exported] = []
    erased: list[str] = []
    with open_loom(db) as loom, progress_bars(hidden=as_json) as bar:
        if not into_directory and _is_the_logs_database(loom, destination):
            fail(
                f"{output} is the log's own database: the bundle would replace the log; "
                "write it elsewhere",
                code=ExitCode.USAGE,
            )
        try:  # every named execution must exist before anything is written
            executions = (
                [summary.execution_id for summary in loom.executions()]
                if all_executions
                else [loom.execution(execution_id_in(loom, name)).id for name in ids]
            )
        except ExecutionNotFoundError as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LogCorruptError as exc:
            fail(str(exc))
        except ErasedError as exc:
            fail(f"an erased execution cannot be exported: {exc}")
        if into_directory:
            try:
                destination.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file on the way (a/file/sub), no permission
                cannot_write(destination, exc)
        advance = bar("export")
        for done, execution_id in enumerate(executions, start=1):
            target = destination / f"{execution_id}.json" if into_directory else destination
            try:
                # A name derived in a directory never follows a link planted under it.
                path = loom.export(execution_id, target, follow_link=not into_directory)
            except ErasedError:  # --all: erased on purpose, not a failure; the rest go on
                erased.append(str(execution_id))
                advance(done, len(executions))
                continue
            except LogCorruptError as exc:
                fail(str(exc))
            except FileExistsError as exc:  # a file that is no bundle is there: name another
                fail(f"cannot write {target}: {exc.strerror}", code=ExitCode.USAGE)
            except OSError as exc:  # no such folder or no permission: usage; a full disk: 1
                cannot_write(target, exc)
            size = path.stat().st_size
            written.append(Exported(execution_id=str(execution_id), path=str(path), bytes=size))
            advance(done, len(executions))
    if as_json:
        print_json(written)
    elif into_directory:
        size = sum(bundle.bytes for bundle in written)
        console.print(inert(f"wrote {len(written)} bundle(s) to {destination} ({size:,} bytes)"))
    else:
        console.print(inert(f"wrote {written[0].path} ({written[0].bytes:,} bytes)"))
    if erased:  # only --all gets here: a named erased execution is refused before writing
        err_console.print(
            f"note: {len(erased)} erased execution(s) cannot be exported and were left out: "
            + ", ".join(erased),
            soft_wrap=True,
        )
    err_console.print(OUTSIDE_ERASURE, soft_wrap=True)  # a note: stdout is the result


def _is_the_logs_database(loom: Loom, path: Path) -> bool:
    """Whether ``path`` (its link followed, as the write follows it) is the SQLite database
    ``loom`` reads, or its WAL or shared-memory file: a bundle renamed over one of them
    destroys the log, or what of it was not yet checkpointed."""
    if not loom.settings.is_sqlite:
        return False
    database = Path(loom.settings.url.database or "").resolve()
    own = {database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm")}
    return path.resolve() in own


OUTSIDE_ERASURE = (
    "note: a bundle is a copy in clear, outside erasure's reach: `loom erase` cannot reach "
    "it, so keep it as you would keep the data itself"
)


@app.command("import")
def import_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Bundle files, or directories of them (.json, .msgpack).")
    ],
    as_json: JsonOption = False,
    db: DbOption = None,
    flows: FlowsOption = None,
) -> None:
    """Add exported executions to this log (each at most once). Exit 1 if one could not be.

    With --flows naming your Loom, its redactor applies, as it does to what it records."""
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        fail(f"no such file or directory: {', '.join(missing)}", code=ExitCode.USAGE)
    from loom_runtime.bundle import read_importable
    from loom_runtime.storage.mapper import redacted_rows

    files = list(dict.fromkeys(file for path in paths for file in _bundles_in(path)))
    if not files:  # a nightly import pointed at dated subfolders imported nothing, exit 0
        fail(
            f"no bundle file ({', '.join(sorted(BUNDLE_SUFFIXES))}) in "
            f"{', '.join(map(str, paths))}; subfolders are not searched: name them",
            code=ExitCode.USAGE,
        )
    results: dict[Path, Imported] = {}
    # A SQLite file is created on first use, not here; a Loom named by --flows gives its
    # redactor: an import stores a bundle as if recorded here (ADR 0029, "cli redactor").
    with open_with_flows(db, flows, create=True) as loom:
        # Read before the database is used, so files that are all unusable create none; but
        # only until one is usable: the import reads each file again (a bundle is up to 256
        # MiB). Refused here as the import refuses it, this log's redactor included.
        for file in files:
            try:
                _, rows = read_importable(file)
                if loom.settings.redactor is not None:
                    redacted_rows(loom.settings.redactor, rows)
            except (BundleError, SecretRefusedError) as exc:
                results[file] = Imported(path=str(file), status="failed", error=str(exc))
            else:
                break
        rest = [file for file in files if file not in results]
        if rest:
            with progress_bars(hidden=as_json) as bar:
                advance = bar("import")
                for done, file in enumerate(rest, start=1):
                    results[file] = _imported(loom, file)
                    advance(done, len(rest))
    _report([results[file] for file in files], as_json=as_json)


def _imported(loom: Loom, file: Path) -> Imported:
    """What importing one file did; a refusal is its result, and the next file still goes in."""
    before = loom.log.position
    try:
        execution_id = loom.import_bundle(file)
    # Erased here: a copy cannot bring it back. A secret the log's redactor refuses:
    # that file is not imported, the others still are.
    except (BundleError, ErasedError, SecretRefusedError) as exc:
        return Imported(path=str(file), status="failed", error=str(exc))
    status: Status = "present" if loom.log.position == before else "imported"
    return Imported(path=str(file), status=status, execution_id=str(execution_id))


def _report(results: list[Imported], *, as_json: bool) -> None:
    failed = [result for result in results if result.status == "failed"]
    if as_json:
        print_json(results)
    else:
        for result in failed:  # named once: most refusals of a file begin with its path
            error = result.error or ""
            complain(error if error.startswith(result.path) else f"{result.path}: {error}")
        imported = sum(result.status == "imported" for result in results)
        console.print(
            f"imported {imported} execution(s); {len(results) - imported - len(failed)} "
            f"already in the log; {len(failed)} failed"
        )
    if failed:
        raise typer.Exit(ExitCode.FAILED)


def _bundles_in(path: Path) -> list[Path]:
    """``path`` itself, or a directory's bundle files (not its subdirectories), by name."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in BUNDLE_SUFFIXES)
