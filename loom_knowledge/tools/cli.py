"""The knowledge package's ``loom`` commands, registered through the ``loom.cli`` entry point.

``loom knowledge sync`` is a DRY RUN unless ``--apply`` is given: a reconcile is destructive
(anything of the source's missing from the folder is removed), so the default shows the plan.

Registering these commands runs on every ``loom`` invocation, ``--help`` included, so this
module imports only what defines them; each command imports the corpus, audit or
counterfactual machinery when it runs.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import msgspec
import typer
from rich.table import Table

from loom_knowledge.corpus.corpus_files import MAX_FILE_BYTES, scan_docs, skipped_because
from loom_knowledge.corpus.retrieval import MODES, Mode
from loom_knowledge.errors import (
    InvalidOptionError,
    KnowledgeBaseOptionsError,
    KnowledgeError,
    MassDeleteRefusedError,
    SourceConflictError,
    owned_documents,
)
from loom_runtime import (
    ConfigurationError,
    ErasedError,
    ExecutionNotFoundError,
    FlowNotFoundError,
    LogCorruptError,
    LoomError,
    MissingExtraError,
    SubjectErasedError,
)
from loom_runtime.tools.cli import (
    DbOption,
    ExitCode,
    FlowsOption,
    JsonOption,
    aware_time,
    cannot_write,
    console,
    err_console,
    execution_id_in,
    fail,
    flow_missing,
    inert,
    open_loom,
    open_with_flows,
    print_json,
    print_table,
    progress_bars,
    user_output,
    warn,
)
from loom_runtime.tools.display import identifier, visible
from loom_runtime.tools.readable_help import LoomTyper

if TYPE_CHECKING:
    from collections.abc import Sequence

    from loom_knowledge.corpus.knowledge_base import KnowledgeBase
    from loom_knowledge.domain.types import Doc, Passage, SyncResult
    from loom_runtime import Loom

ScopeOption = Annotated[str, typer.Option("--scope", help="The corpus scope.")]

knowledge_app = LoomTyper(help="Sync, list and search a corpus.", no_args_is_help=True)


DemoDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Run in this database, in a fresh demo-... scope of its own (default: a new "
        "temporary SQLite file; ./loom.db and LOOM_DB_URL are never used).",
    ),
]


DemoModeOption = Annotated[
    str,
    typer.Option(
        "--mode",
        metavar="[lexical|vector|hybrid]",
        help="How the flow retrieves: BM25 (lexical), embeddings (vector) or both fused "
        "(hybrid); the vector modes use the dependency-free HashingEmbedder.",
    ),
]


def demo(db: DemoDbOption = None, mode: DemoModeOption = "lexical") -> None:
    """Ingest runbooks, answer an incident, delete the corpus, replay it in a fresh process,
    rebuild it from the log. In a new temporary database unless --db is given."""
    from loom_knowledge.tools.demo import demo_database, run_demo

    # A str checked here, not a Literal: typer reads Literal choices only since 0.19.
    if mode not in MODES:
        raise typer.BadParameter(f"{mode!r} is not one of {', '.join(MODES)}", param_hint="--mode")
    with open_loom(db or demo_database(), create=True) as loom:
        try:
            ok = run_demo(
                loom,
                say=lambda line: console.print(inert(line)),
                owns_database=not db,
                mode=cast(Mode, mode),
            )
        except ConfigurationError as exc:  # an extra to install: the setup, exit 2
            fail(str(exc), code=ExitCode.USAGE)
        except LoomError as exc:
            fail(str(exc))
    raise typer.Exit(0 if ok else 1)


def audit_command(
    execution_id: str,
    as_json: JsonOption = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML page here.")
    ] = None,
    db: DbOption = None,
) -> None:
    """What the agent knew: passages (and what became of them), request, answer, citations."""
    from loom_knowledge.tools.audit import audit
    from loom_knowledge.tools.audit_render import render_html, render_text

    if as_json and html is not None:
        fail(
            "give --json or --html, not both: the report is printed as one of them",
            code=ExitCode.USAGE,
        )
    with open_loom(db) as loom:
        try:
            report = audit(loom, execution_id := execution_id_in(loom, execution_id))
        except ExecutionNotFoundError as exc:
            fail(str(exc), code=ExitCode.USAGE)
        except LogCorruptError as exc:  # an edited row: one line, as `executions show` says
            fail(str(exc))
        except ErasedError as exc:  # shows the forget-log entry (ADR 0049)
            from loom_runtime.tools.erase_cli import show_erased

            show_erased(loom, exc, execution_id, as_json=as_json)
    if html is not None:
        try:
            html.write_text(render_html(report), encoding="utf-8")
        except OSError as exc:
            cannot_write(html, exc)
        console.print(inert(f"wrote {html}"))
    elif as_json:
        print_json(report)
    else:
        console.print(inert(render_text(report)))
    ungrounded = any(c.citations and c.citations.ungrounded for c in report.model_calls)
    raise typer.Exit(ExitCode.FAILED if ungrounded else ExitCode.OK)


@knowledge_app.command("sync")
def sync_command(
    directory: Annotated[Path, typer.Argument(help="A folder of .md/.txt documents.")],
    scope: ScopeOption,
    source: Annotated[
        str | None, typer.Option("--source", help="The writer these documents belong to.")
    ] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Write (default: show the plan).")] = False,
    allow_mass_delete: Annotated[
        bool, typer.Option("--allow-mass-delete", help="Allow removing most of the source.")
    ] = False,
    follow_external_links: Annotated[
        bool,
        typer.Option(
            "--follow-external-links",
            help="Also read links that point outside DIRECTORY (default: skip them).",
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="List every document to write or remove.")
    ] = False,
    max_file_bytes: Annotated[
        int,
        typer.Option(
            "--max-file-bytes",
            min=1,
            metavar="<bytes>",
            help="Refuse the sync if a file is larger than this (default 64 MiB), unread.",
        ),
    ] = MAX_FILE_BYTES,
    rechunk: Annotated[
        bool,
        typer.Option(
            "--rechunk",
            help="Re-cut documents an application cut with its own chunker, with the default "
            "(default: refuse, writing nothing).",
        ),
    ] = False,
    stemmer: Annotated[
        str | None,
        typer.Option(
            "--stemmer",
            help="Create a new scope stemmed with this Snowball algorithm (e.g. english; the "
            "stem extra). An existing scope keeps its own; another is refused.",
        ),
    ] = None,
    as_json: JsonOption = False,
    flows: FlowsOption = None,
    db: DbOption = None,
) -> None:
    """Reconcile SCOPE against the COMPLETE set of documents in DIRECTORY.

    Links out of DIRECTORY are not followed unless --follow-external-links: what is synced
    stays in the append-only log for good, and a stray link to /etc would put /etc there.
    The flag is for a docs folder that links a shared checkout on purpose. With --flows naming
    your Loom, its redactor applies to the documents, as it does to your app's kb.sync.
    """
    from loom_knowledge.corpus.knowledge_base import RECORDED_STEMMER, open_knowledge_base

    if not directory.is_dir():
        fail(f"{directory} is not a directory", code=ExitCode.USAGE)
    try:
        scan = scan_docs(
            directory, follow_external_links=follow_external_links, max_file_bytes=max_file_bytes
        )
    except KnowledgeError as exc:
        fail(str(exc), code=ExitCode.USAGE)
    docs = scan.docs
    why = skipped_because(
        directory, follow_external_links=follow_external_links, to_follow="--follow-external-links"
    )
    for skipped in scan.skipped:
        warn(f"skipped link {visible(skipped, one_line=True)}: it points {why}")
    with (
        # A Loom named by --flows brings its redactor (ADR 0029, "cli redactor"): the built-in
        # one kept in clear what the app's own sync of the same folder redacts.
        open_with_flows(db, flows, create=apply) as loom,  # the dry run only reads
        progress_bars(hidden=as_json or not apply) as bar,  # a plan indexes nothing
    ):
        try:
            kb = open_knowledge_base(
                loom, scope, stemmer=RECORDED_STEMMER if stemmer is None else stemmer
            )
            recut = _cut_otherwise(kb, docs)  # the manifest alone: no document hashed twice
            if recut and not rechunk:
                fail(_recut(len(recut), scope), code=ExitCode.USAGE)
            if apply:
                result = kb.sync(
                    docs,
                    source=source,
                    allow_mass_delete=allow_mass_delete,
                    progress=bar("indexing"),
                )
            else:
                result = kb.plan_sync(docs, source=source, allow_mass_delete=allow_mass_delete)
        except SubjectErasedError as exc:  # one of the folder's documents was erased
            fail(
                f"{exc}: an erased document stays erased, so nothing was synced; remove its "
                f"file from {directory} (or give it another id) and sync again"
            )
        except SourceConflictError as exc:
            fail(_source_conflict(exc, given=source), code=ExitCode.USAGE)
        except MassDeleteRefusedError as exc:
            fail(_mass_delete(exc), code=ExitCode.USAGE)
        except (KnowledgeBaseOptionsError, InvalidOptionError, MissingExtraError) as exc:
            fail(str(exc), code=ExitCode.USAGE)  # --stemmer: unknown, uninstalled or refused
        except KnowledgeError as exc:
            fail(str(exc))
    if as_json:
        print_json({"applied": apply, **msgspec.structs.asdict(result)})
    else:
        _print_sync(result, applied=apply, verbose=verbose)


def _cut_otherwise(kb: KnowledgeBase, docs: Sequence[Doc]) -> list[str]:
    """The documents of ``docs`` the scope holds under another fingerprint algorithm than
    ``kb``'s: a sync re-cuts them with this command's (the default) chunker."""
    ids = {doc.id for doc in docs}
    algorithm = kb.fingerprint_algorithm
    return [
        record.id
        for record in kb.list_docs()
        if record.id in ids and record.fingerprint_algorithm != algorithm
    ]


def _recut(count: int, scope: str) -> str:
    """The refusal to re-cut what another chunker cut (ADR 0010, amended "cli chunker")."""
    return (
        f"{count} document(s) of scope {scope!r} were written under another fingerprint "
        "algorithm than this command's: cut by your application's own chunker (or an older "
        "loom). This command cuts with the default chunker, so it would rewrite every one of "
        "them, and your application's next sync would rewrite them back; nothing was written. "
        "Sync this scope from your application, or pass --rechunk to re-cut them with the "
        "default on purpose"
    )


def _mass_delete(exc: MassDeleteRefusedError) -> str:
    """The removal guard's refusal with the flag that overrides it (the library's own
    message names the Python argument, ``allow_mass_delete=True``)."""
    why = (
        f"more than the guard's {exc.max_fraction:.0%}"
        if exc.max_fraction is not None
        else "the folder holds none of them"
    )
    return (
        f"sync would remove {exc.would_remove} of the {exc.owned} "
        f"{owned_documents(exc.source)}, {why}; if the source really dropped them, pass "
        "--allow-mass-delete"
    )


def _source_conflict(exc: SourceConflictError, *, given: str | None) -> str:
    """The refusal in one line: the owning source(s) and the flag, not every document.

    A folder synced without ``--source`` into a sourced corpus collides on every document;
    listing them all (49 documents, 2.4 KB) hides the one thing to do.
    """
    owners = set(exc.owners.values())
    sourced = ", ".join(repr(owner) for owner in sorted(o for o in owners if o is not None))
    count = len(exc.owners)
    if given is None:
        return (
            f"{count} document(s) belong to source {sourced}: pass --source NAME "
            "(documents are written by their owning source)"
        )
    # Documents written without a source have none to name: "--source None" is a source
    # named 'None'. They are written by a sync without --source.
    owned = " and ".join(
        [*([f"source {sourced}"] if sourced else []), *(["no source"] if None in owners else [])]
    )
    fix = "pass that --source" if sourced else "sync them without --source"
    if sourced and None in owners:
        fix = "pass that --source (for those of no source: sync without --source)"
    return (
        f"source {given!r} may not write {count} document(s) owned by {owned}: {fix}, or "
        "remove them there first"
    )


@knowledge_app.command("list")
def list_command(scope: ScopeOption, as_json: JsonOption = False, db: DbOption = None) -> None:
    """The live documents of SCOPE with their revisions."""

    with open_loom(db) as loom:
        records = _existing_scope(loom, scope).list_docs()
    if as_json:
        print_json(records)
        return
    table = Table("document", "revision", "passages", "source", "fingerprint")
    table.columns[0].overflow = "fold"  # an id is never cut: two ids could look the same
    for record in records:
        table.add_row(
            inert(identifier(record.id)),
            str(record.revision),
            str(record.passage_count),
            inert(identifier(record.source or "")),
            record.fingerprint[:12],
        )
    print_table(table)


@knowledge_app.command("search")
def search_command(
    query: str,
    scope: ScopeOption,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="How many passages to show at most.")
    ] = 4,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Search SCOPE now. NOT recorded: a flow must use kb.retrieve(..., decide=ctx.decide)."""

    with open_loom(db) as loom:
        try:
            passages = _existing_scope(loom, scope).search(query, limit=limit)
        except KnowledgeError as exc:
            fail(str(exc), code=ExitCode.USAGE)
    _print_passages(passages, as_json=as_json)


@knowledge_app.command("as-of")
def as_of_command(
    when: Annotated[str, typer.Argument(help="A log position, or an ISO time with a zone.")],
    scope: ScopeOption,
    query: Annotated[str | None, typer.Option("--query", help="Search the corpus then.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="How many passages to show at most.")
    ] = 4,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """The corpus as it was at WHEN: its documents, or (with --query) a search of it."""

    moment = _moment(when)
    with open_loom(db) as loom:
        head = loom.log.position
        if isinstance(moment, int) and moment > head:
            fail(
                f"WHEN {moment} is past the log's head ({head}): give a position from 0 to "
                f"{head}, or an ISO time with a zone",
                code=ExitCode.USAGE,
            )
        try:
            view = _existing_scope(loom, scope).as_of(moment)
            found = view.retrieve(query, limit=limit) if query is not None else None
            records = view.list_docs()
            erased = view.erased()  # their passages show in no view: said, not left out
        except (LoomError, ValueError) as exc:
            fail(str(exc), code=ExitCode.USAGE)
    if found is not None:
        _print_passages(found, as_json=as_json, position=view.position, erased=erased)
    elif as_json:
        print_json(
            {"scope": scope, "position": view.position, "documents": records, "erased": erased}
        )
    else:
        console.print(inert(f"scope {scope} as of log position {view.position}"))
        for record in records:
            gone = f"  erased at {erased[record.id]}" if record.id in erased else ""
            console.print(inert(f"  {identifier(record.id)} r{record.revision}{gone}"))
        if not records:
            console.print("  no documents at that point")


@knowledge_app.command("counterfactual")
def counterfactual_command(
    execution_id: str,
    as_json: JsonOption = False,
    db: DbOption = None,
    flows: FlowsOption = None,
) -> None:
    """Would EXECUTION_ID go the same way today? Retrievals live, the rest recorded.

    Exit 0 if nothing would change, 1 if something would (passages, request, citations),
    with --json as without.
    """
    from loom_knowledge.corpus.counterfactual import counterfactual, counterfactual_lines

    with open_with_flows(db, flows) as loom:
        try:
            with user_output():  # the flow runs again: what it prints is not the report
                report = counterfactual(loom, execution_id_in(loom, execution_id))
        except FlowNotFoundError as exc:
            flow_missing(exc, flows)
        except ExecutionNotFoundError as exc:
            fail(str(exc), code=ExitCode.USAGE)
    if as_json:
        print_json(report)
    else:
        for line in counterfactual_lines(report):  # each inert alone: an id cannot forge one
            console.print(inert(line, one_line=True))
    raise typer.Exit(ExitCode.OK if report.unchanged else ExitCode.FAILED)


def _moment(when: str) -> int | datetime:
    """WHEN as a log position (digits) or an aware ISO time; anything else is a usage error.

    ``str.isdigit`` also holds for digits ``int()`` refuses (``"²"``) and for more digits than
    it converts (4,300): those are refused here, not left to end in a traceback.
    """
    if not when.isdigit():
        return aware_time(when, option="WHEN")
    try:
        return int(when)
    except ValueError:
        fail(
            f"WHEN {when[:40]!r} is not a log position or an ISO time with a zone",
            code=ExitCode.USAGE,
        )


def _existing_scope(loom: Loom, scope: str) -> KnowledgeBase:
    """The corpus ``scope`` for a command that reads it; a scope that never held a document
    is a usage error naming the known ones (a typo would otherwise list nothing, exit 0)."""
    from loom_knowledge.corpus.knowledge_base import known_scopes, open_knowledge_base

    known = known_scopes(loom)
    if scope not in known:
        named = ", ".join(repr(name) for name in known) or "none yet"
        fail(f"no scope named {scope!r}; known: {named}", code=ExitCode.USAGE)
    return open_knowledge_base(loom, scope)


def _print_sync(result: SyncResult, *, applied: bool, verbose: bool) -> None:
    """A one-line summary; each document to write or remove only with ``--verbose`` (a folder
    of hundreds of files would otherwise bury the summary)."""
    verb, write, remove = (
        ("synced", "written", "removed")
        if applied
        else ("plan (dry run; --apply to write)", "to write", "to remove")
    )
    console.print(
        f"{verb}: {len(result.written)} {write}, {len(result.unchanged)} unchanged, "
        f"{len(result.removed)} {remove}, {len(result.retained)} retained (other sources)"
    )
    if not verbose:
        return
    for label, ids in (("write", result.written), ("remove", result.removed)):
        for doc_id in ids:
            console.print(inert(f"  {label:<6} {identifier(doc_id)}"))


def _print_passages(
    passages: list[Passage],
    *,
    as_json: bool,
    position: int | None = None,
    erased: dict[str, int] | None = None,
) -> None:
    """One line per passage: its id, revision and the start of its text, all inert; or, with
    --json, ``{"recorded": false, "position": ..., "passages": [...]}`` with every text whole.

    ``erased`` (an as-of view's): the scope's documents erased, which no search returns; said
    on stderr (and as ``"erased"`` in the JSON), or "no passage matches" would read as a
    corpus that held nothing relevant."""
    from loom_knowledge.tools.audit_render import flat

    if as_json:
        shown: dict[str, object] = {"recorded": False, "position": position, "passages": passages}
        print_json(shown if erased is None else {**shown, "erased": erased})
        return
    if erased:
        named = ", ".join(
            f"{identifier(doc_id)} (at {at})" for doc_id, at in sorted(erased.items())
        )
        err_console.print(
            inert(f"note: erased documents of this scope show in no search: {named}"),
            soft_wrap=True,
        )
    err_console.print(
        "[yellow]this search was not recorded[/yellow] (it is not part of any execution)"
    )
    if position is not None:
        console.print(f"as of log position {position}")
    if not passages:
        console.print("no passage matches the query")
    for passage in passages:
        doc_id = identifier(passage.doc_id)
        console.print(
            inert(f"{doc_id}#{passage.index} r{passage.revision}  {flat(passage.text, 100)}")
        )


def register(app: typer.Typer) -> None:
    """Add this package's commands to the ``loom`` CLI."""
    app.command()(demo)
    app.command("audit")(audit_command)
    app.add_typer(knowledge_app, name="knowledge")
