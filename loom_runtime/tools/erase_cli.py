"""``loom erase``: destroy the data keys of executions (ADR 0049), a document (ADR 0055) or a
memory key (ADR 0060), a dry run unless ``--apply``.

A dry run says what would be erased (which executions, how many sealed events each, which
were recorded in clear before encryption was switched on and cannot be erased) and writes
nothing, like ``knowledge sync``. ``--apply`` destroys the keys and appends the forget event.
The log is opened with ``$LOOM_MASTER_KEY``. ``loom retain`` is the same erasure selected by
age (ADR 0053), and :func:`show_erased` is what a command that shows an execution prints for
an erased one: its forget-log entry. Registered on the ``loom`` app by
:mod:`loom_runtime.tools.cli`.
"""

from __future__ import annotations

import getpass
import re
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from loom_runtime.errors import (
    EncryptionOffError,
    ErasedError,
    ErasureSubjectError,
    ExecutionNotFoundError,
    LabelError,
    LoomError,
    RetentionPolicyError,
)
from loom_runtime.tools.cli import (
    DbOption,
    ExitCode,
    JsonOption,
    app,
    console,
    execution_id_in,
    fail,
    inert,
    open_loom,
    print_json,
    unknown_value,
    warn,
)
from loom_runtime.tools.display import full_date

if TYPE_CHECKING:
    from loom_runtime.erasure import ErasureReport
    from loom_runtime.loom import Loom


@app.command()
def erase(
    execution: Annotated[
        str | None, typer.Option("--execution", help="Erase this execution (its id).")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Erase every execution labelled with this user.")
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Erase every execution labelled with this tenant."),
    ] = None,
    document: Annotated[
        str | None,
        typer.Option(
            "--document",
            help="Erase a corpus document, every revision: SCOPE:DOC_ID (a scope may hold "
            'colons: the log says which split names a document), or \'["SCOPE","DOC_ID"]\'.',
        ),
    ] = None,
    memory_key: Annotated[
        list[str] | None,
        typer.Option(
            "--memory-key",
            help="Erase a key of an event-sourced memory: NAME:KEY (split at the first :). "
            "Repeat it with --user or --tenant to erase a person's keys with their executions.",
        ),
    ] = None,
    reason: Annotated[
        str,
        typer.Option(
            "--reason", help="Why (recorded in the forget log, in clear: no personal data)."
        ),
    ] = "",
    by: Annotated[
        str | None,
        typer.Option(
            "--by", envvar="USER", help="Who erases (recorded; default $USER, else your login)."
        ),
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Erase; without it, only say what would be erased.")
    ] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Erase executions, a corpus document or a memory key by destroying their keys (dry run
    unless --apply). Needs $LOOM_MASTER_KEY."""
    if not reason.strip():
        fail("say why with --reason (the forget log records it)", code=ExitCode.USAGE)
    by = _who(by)
    keys = memory_key or []
    with_person = user is not None or tenant is not None
    named = [execution, user, tenant, document, None if with_person else (keys or None)]
    if sum(value is not None for value in named) != 1:
        fail(
            "name exactly one of --execution, --user, --tenant, --document or --memory-key "
            "to erase (--memory-key may go with --user or --tenant)",
            code=ExitCode.USAGE,
        )
    if len(keys) > 1 and not with_person:
        fail(
            "--memory-key is repeated only with --user or --tenant (the keys are erased with "
            "their executions); name one key at a time otherwise",
            code=ExitCode.USAGE,
        )
    with open_loom(db) as loom:
        try:
            report = loom.erase(
                execution=None if execution is None else execution_id_in(loom, execution),
                user=user,
                tenant=tenant,
                document=document,
                memory_key=None if with_person or not keys else keys[0],
                memory_keys=keys if with_person else (),
                reason=reason,
                by=by,
                dry_run=not apply,
            )
        except (
            EncryptionOffError,
            ErasureSubjectError,
            ExecutionNotFoundError,
            LabelError,
        ) as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LoomError as exc:
            fail(str(exc))
    if report.refusal is not None:  # a dry run: refused as the applied command is
        fail(report.refusal, code=ExitCode.USAGE)
    _print_report(report, as_json=as_json)
    _exit_if_unpurged(report)


def _exit_if_unpurged(report: ErasureReport) -> None:
    """Exit 1 when a read model still holds erased text: the erasure stands (the keys are
    destroyed), but the check a data-protection request relies on did not pass."""
    from loom_runtime.erasure import WAL_ENTRY  # here: loaded once there is a report

    for entry in report.unpurged:
        if entry.startswith(WAL_ENTRY):  # says itself what empties it
            warn(entry)
            continue
        warn(
            f"read model {entry}; it still holds the erased text in clear until it catches "
            "up (run loom doctor)"
        )
    if report.unpurged:
        raise typer.Exit(ExitCode.FAILED)


def _print_report(report: ErasureReport, *, as_json: bool) -> None:
    if as_json:
        print_json(report)
        return
    verb = "erased" if report.applied else "would erase"
    events = sum(subject.events for subject in report.subjects)
    kind = report.selector.partition("=")[0]
    what = {
        "document": "document(s)",
        "documents of scope": "document(s)",
        "memory_key": "memory key(s)",
        "keys of memory": "memory key(s)",
    }.get(kind, "execution(s)")
    if " and memory_key=" in report.selector:
        what = "execution(s) and memory key(s)"
    from loom_runtime.retention import STARTED_BEFORE

    # Retention's selectors say what they select ("documents of scope=..."): said once.
    selector = re.sub(r"^(documents|keys) (?=of )", "", report.selector)
    of = "" if selector.startswith((STARTED_BEFORE, "of ")) else "of "
    _line(
        f"{verb} {len(report.subjects)} {what} {of}{selector} "
        f"({events} sealed event(s))"
        + (f"; forget event at log position {report.position}" if report.position else "")
    )
    for subject in report.subjects:
        name = subject.execution_id or subject.subject
        _line(f"  {name}  {subject.events} sealed event(s)")
        # a memory key's subject starts "memory:" (loom_memory.erasure.MEMORY): recalled
        copied = "recalled" if subject.subject.startswith("memory:") else "retrieved"
        for execution_id in subject.held_by[:_LISTED]:
            _line(
                f"    {copied} by execution {execution_id}: its record keeps a copy; "
                f"erase it too with --execution {execution_id}"
            )
        if len(subject.held_by) > _LISTED:
            more = len(subject.held_by) - _LISTED
            console.print(f"    and {more:,} more executions hold a copy (--json lists them)")
    for name in report.already_erased[:_LISTED]:
        _line(f"  {name}  already erased")
    if len(report.already_erased) > _LISTED:  # a nightly retention run's history: counted
        more = len(report.already_erased) - _LISTED
        console.print(f"  and {more:,} more already erased (--json lists them)")
    for name in report.not_erasable:
        _line(f"  {name}  not erasable: stored before encryption was switched on")
    if not report.applied:
        console.print("dry run: nothing was written; pass --apply to erase")


def _line(text: str) -> None:
    """Print one line of the report: a selector or a subject's name is recorded text (a
    document id, a memory key), and a line break in it would print a line loom did not write."""
    console.print(inert(text, one_line=True))


_LISTED = 20
"""How many executions erased before a text report names; the rest are counted. A nightly
``loom retain`` selects every execution older than its age, so its report (and the mail cron
sends of it) would otherwise grow by every execution ever erased."""


def _who(by: str | None) -> str:
    """Who erases, as the forget log records it: ``--by`` (or ``$USER``), else the login of
    the account running the command (cron and containers often leave ``$USER`` unset). An
    empty ``--by``, or no name at all, is refused: the forget log never says "unknown"."""
    if by is None:
        try:
            by = getpass.getuser()
        except (OSError, KeyError):  # no login name and no account entry for this uid
            by = ""
    if not by.strip():
        fail("say who erases with --by (the forget log records it)", code=ExitCode.USAGE)
    return by


@app.command()
def retain(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Erase what is older than this (executions by their start; with --scope or "
            "--memory, documents or keys by their last write): 90d, 2w, 36h, 15min (months in "
            "days: 180d).",
        ),
    ],
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only executions labelled with this tenant.")
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="Erase this knowledge scope's documents last written longer ago, instead.",
        ),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            "--memory",
            help="Erase this event-sourced memory's keys last written longer ago, instead.",
        ),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Recorded in the forget log (default: the policy)."),
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Who erases (recorded in the forget log).")
    ] = "retention",
    apply: Annotated[
        bool, typer.Option("--apply", help="Erase; without it, only say what would be erased.")
    ] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Erase executions older than an age, or with --scope a knowledge scope's documents, or
    with --memory a memory's keys, last written longer ago (dry run unless --apply); safe on a
    schedule: with nothing old enough left it writes nothing. Needs $LOOM_MASTER_KEY."""
    from loom_runtime.retention import parse_age

    try:
        age = parse_age(older_than)
    except RetentionPolicyError as exc:
        fail(str(exc), code=ExitCode.USAGE)
    if sum(name is not None for name in (tenant, scope, memory)) > 1:
        fail(
            "give one of --tenant (executions), --scope (a knowledge scope's documents) or "
            "--memory (a memory's keys): documents and memory keys carry no tenant label",
            code=ExitCode.USAGE,
        )
    with open_loom(db) as loom:
        try:
            report = loom.retain(
                older_than=age,
                tenant=tenant,
                scope=scope,
                memory=memory,
                reason=reason,
                by=by,
                dry_run=not apply,
            )
        except (EncryptionOffError, ErasureSubjectError, LabelError, RetentionPolicyError) as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LoomError as exc:
            fail(str(exc))
        unknown = (
            tenant is not None
            and not report.subjects
            and unknown_value("tenant", tenant, (s.tenant for s in loom.executions()))
        )
    _print_report(report, as_json=as_json)
    if unknown:
        warn(unknown)
    if report.not_erasable:
        what = (
            "document revision(s)"
            if scope is not None
            else "memory write(s)"
            if memory is not None
            else "execution(s)"
        )
        warn(
            f"{len(report.not_erasable)} {what} older than {older_than} are stored in "
            "clear (recorded before encryption was switched on) and cannot be erased"
        )
    _exit_if_unpurged(report)


def show_erased(loom: Loom, error: ErasedError, execution_id: str, *, as_json: bool) -> NoReturn:
    """Report an erased execution by its forget-log entry (who, when, why, where), never its
    content, and exit 1 as a replay of it does: what a command that shows an execution (an
    audit) prints in place of it. Without an entry to name, the error alone."""
    from loom_runtime.erasure import forget_entry

    entry = forget_entry(loom, error)
    if entry is None:
        fail(str(error))
    if as_json:
        print_json({"execution_id": execution_id, "erased": entry})
    else:
        console.print(
            inert(  # one line: a break in the reason or the name would forge a line
                f"execution {execution_id}: erased by the forget event at log position "
                f"{entry.position} "
                f"({full_date(entry.at)} UTC) by {entry.by}: {entry.reason}",
                one_line=True,
            )
        )
        console.print(
            "its input, decisions, output and error messages can no longer be read; its "
            "labels and the chain remain (`loom verify`)"
        )
    raise typer.Exit(ExitCode.FAILED)
