"""``erase``: destroy the data keys of subjects and record that in the forget log (ADR 0049).

An erasure selects executions (one by id, or every execution a user's or a tenant's labels
name) or a subject a package above the runtime seals (a corpus document: ADR 0055; a memory
key: ADR 0060), destroys
their data keys and appends one forget event: the subjects, how many stored events each key
sealed, who erased them and why, never content. Such a package names its kind of subject
through the ``loom.erasure`` entry-point group: ``name = module:function``, the function
``(loom, value) -> (subjects, not_erasable)`` raising :class:`ErasureSubjectError` for a
value it does not know (the runtime cannot import it: dependencies point down). The log
itself is not touched, so ``loom verify`` passes before and after, and every other execution
replays as before.

Order of the two writes: the forget event is appended first (it is the decision, and the
position an :class:`~loom_runtime.errors.ErasedError` names), then the keys are destroyed. They
are two transactions, not one (the log's append runs inside the storage layer's own
transaction), so an interruption between them leaves the keys: ``erase`` run again finds them
live and completes the erasure with a second forget event. A key is never destroyed without a
forget event naming it before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

import msgspec

from loom_runtime.entry_points import installed_named
from loom_runtime.errors import (
    EncryptionOffError,
    ErasedError,
    ErasureSubjectError,
    ExecutionNotFoundError,
    LabelError,
    LogCorruptError,
    cause_of,
)
from loom_runtime.execution import FORGET_LOG, Execution, Forgotten
from loom_runtime.sealing import (
    TABLE,
    has_key_table,
    holds_sealed_fields,
    sealed_input,
    sealed_names,
    subject_of,
)
from loom_runtime.timestamps import UtcTimestamp

if TYPE_CHECKING:
    from loom_runtime.loom import ExecutionSummary, Loom
    from loom_runtime.sealing import Keyring


class ErasedSubject(msgspec.Struct, frozen=True, kw_only=True):
    """One subject an erasure covers (an execution, a document): how many stored events its
    key sealed."""

    subject: str
    execution_id: str | None
    """The execution's id; None for a subject that is not an execution (a document, a
    memory key)."""
    events: int
    held_by: tuple[str, ...] = ()
    """Executions whose own records hold copies of this subject's text (a recorded retrieval
    of a document's passages, a recorded recall of a memory key's entries): sealed under their
    own keys, so this erasure does not reach them; the report names them so that they can be
    erased too (``--execution ID``)."""


SubjectResolver = Callable[["Loom", str], tuple[Sequence[ErasedSubject], Sequence[str]]]
"""What a ``loom.erasure`` entry point loads: the subjects a value names (and what of it is
stored in clear and cannot be erased); :class:`ErasureSubjectError` for an unknown value."""

logger = logging.getLogger("loom.runtime")

ERASURE_KINDS: Final = "loom.erasure"


class ErasureReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an erasure did (or, as a dry run, would do)."""

    applied: bool
    """False for a dry run: nothing was written."""
    selector: str
    """What was named: ``execution=…``, ``user=…``, ``tenant=…``, ``document=…`` or
    ``memory_key=…``."""
    subjects: tuple[ErasedSubject, ...]
    """The subjects whose keys are (or would be) destroyed."""
    already_erased: tuple[str, ...] = ()
    """Executions (or subjects) selected that an earlier erasure already covered."""
    not_erasable: tuple[str, ...] = ()
    """What was selected but stored before encryption was switched on (executions, document
    revisions, memory writes): in clear, it cannot be erased by destroying a key."""
    position: int | None = None
    """Where the forget event is in the log (None for a dry run); a fork found started while
    the erasure ran is erased by a later one of its own (:func:`apply`)."""
    by: str = ""
    reason: str = ""
    unpurged: tuple[str, ...] = ()
    """Read models that could not catch up to the forget event, ``"NAME: cause"`` each: they
    still hold the erased subjects' clear text until they do (``loom doctor`` retries). On
    SQLite, also the write-ahead log (``write-ahead log PATH-wal: cause``, :data:`WAL_ENTRY`)
    when it could not be emptied, a
    reader holding it: it may hold that text until the next ``wal_checkpoint(TRUNCATE)``."""

    @property
    def refusal(self) -> str | None:
        """Why applying this plan is refused (nothing it selected can be erased), or None.

        An applied erasure raises it as :class:`ErasureSubjectError`; a dry run returns the
        plan, and the CLI exits with it as the applied command would.
        """
        if self.subjects:
            return None
        what = (
            "already erased"
            if self.already_erased
            else "recorded before encryption was switched on"
        )
        return f"nothing of {self.selector} can be erased: it was {what}; nothing was written"


def erase(
    loom: Loom,
    *,
    execution: UUID | str | None,
    user: str | None,
    tenant: str | None,
    document: str | None = None,
    memory_key: str | None = None,
    memory_keys: Sequence[str] = (),
    reason: str,
    by: str,
    dry_run: bool,
) -> ErasureReport:
    """See :meth:`Loom.erase`."""
    named = [
        (name, value)
        for name, value in (
            ("execution", execution),
            ("user", user),
            ("tenant", tenant),
            ("document", document),
            ("memory_key", memory_key),
        )
        if value is not None
    ]
    if len(named) != 1:
        raise ErasureSubjectError(
            "name exactly one of execution=, user=, tenant=, document= or memory_key= to erase"
        )
    check_who(reason=reason, by=by)
    kind, value = named[0]
    selector = f"{kind}={value}"
    keyring = keyring_of(loom, selector)
    if kind in _RESOLVED:
        if not isinstance(value, str):
            raise ErasureSubjectError(f"{kind}= names {_RESOLVED[kind]} (a str), not {value!r}")
        subjects, clear = _resolver(kind)(loom, value)
        report = plan_subjects(keyring, subjects, clear, selector=selector, by=by, reason=reason)
    else:
        ids = _selected(loom, kind, value)
        if not ids:
            raise ErasureSubjectError(
                f"no executions of {selector} in the log at {loom.settings.url!r}; nothing "
                "was written (names are matched exactly, as labelled when the executions "
                "started)"
            )
        report = plan(loom, keyring, ids, selector=selector, by=by, reason=reason)
    if memory_keys:
        report = _with_memory_keys(loom, keyring, report, kind, memory_keys)
    if dry_run:
        return report
    if report.refusal is not None:
        raise ErasureSubjectError(report.refusal)
    if kind in ("user", "tenant"):

        def started_before(position: int) -> list[UUID]:
            return [
                s.execution_id for s in _labelled(loom, kind, value) if s.log_position < position
            ]

        return apply(loom, keyring, report, started_before=started_before)
    return apply(loom, keyring, report)


_RESOLVED: Final = {"document": "SCOPE:DOC_ID", "memory_key": "NAME:KEY"}
"""The kinds of subject a package above the runtime names (``loom.erasure``), and their form."""


def _with_memory_keys(
    loom: Loom, keyring: Keyring, report: ErasureReport, kind: str, memory_keys: Sequence[str]
) -> ErasureReport:
    """``report`` (a user's or a tenant's executions) with the memory keys ``memory_keys``
    (``NAME:KEY`` each) added, to be erased in the same forget event. Memory entries carry no
    labels, so a person's keys are named by the application (ADR 0060, amended). Every key is
    resolved before anything is written: one unknown key refuses the whole erasure."""
    if isinstance(memory_keys, str) or kind not in ("user", "tenant"):
        raise ErasureSubjectError(
            "memory_keys= is a list of NAME:KEY erased with the executions of user= or "
            f"tenant=, not {memory_keys!r} with {kind}= (one key alone: memory_key=); "
            "nothing was written"
        )
    subjects: list[ErasedSubject] = []
    clear: list[str] = []
    token = _SCANNED.set({})  # the keys' holders found in one read of the log, not one a key
    try:
        for value in dict.fromkeys(memory_keys):
            found, stored_clear = _resolver("memory_key")(loom, value)
            subjects.extend(found)
            clear.extend(stored_clear)
    finally:
        _SCANNED.reset(token)
    keys = plan_subjects(keyring, subjects, clear, selector="", by=report.by, reason=report.reason)
    # An execution this erasure covers holds nothing after it: not one to erase too.
    erased = {subject.execution_id for subject in report.subjects}
    held = tuple(
        msgspec.structs.replace(s, held_by=tuple(e for e in s.held_by if e not in erased))
        for s in keys.subjects
    )
    return msgspec.structs.replace(
        report,
        selector=f"{report.selector} and memory_key=" + ", ".join(dict.fromkeys(memory_keys)),
        subjects=report.subjects + held,
        already_erased=report.already_erased + keys.already_erased,
        not_erasable=report.not_erasable + keys.not_erasable,
    )


def _resolver(kind: str) -> SubjectResolver:
    """The ``loom.erasure`` entry point that names ``kind``'s subjects."""
    entry_point = installed_named(ERASURE_KINDS, kind)
    if entry_point is not None:
        resolver: SubjectResolver = entry_point.load()
        return resolver
    raise ErasureSubjectError(
        f"no installed package can erase a {kind}: install loom-replay with its "
        f"{kind}s' package (the {ERASURE_KINDS!r} entry point names it); nothing was written"
    )


def check_who(*, reason: str, by: str) -> None:
    """Refuse an erasure that does not say who asks and why (the forget log records both)."""
    for label, text in (("reason", reason), ("by", by)):
        if not isinstance(text, str) or not text.strip():
            raise LabelError(
                f"an erasure needs {label}= (who asked, and why: the forget log records both)",
                label=label,
            )


def keyring_of(loom: Loom, selector: str) -> Keyring:
    """The log's keyring, or :class:`EncryptionOffError` for a log opened without one: saying
    the key is missing where the log is encrypted, and that its data is in clear only where it
    never was (told "in clear", an operator who forgot the key would believe it)."""
    _ = loom.log  # opens the keyring with the log
    keyring = loom._keyring
    if keyring is None and has_key_table(loom.log.engine):
        raise EncryptionOffError(
            f"cannot erase {selector}: this log is encrypted, but was opened without its "
            "master key, so no data key can be read or destroyed. Open it with the key it was "
            "encrypted with: Loom(url, encryption=MasterKey.from_env('LOOM_MASTER_KEY')) (the "
            "CLI reads $LOOM_MASTER_KEY); nothing was written"
        )
    if keyring is None:
        raise EncryptionOffError(
            f"cannot erase {selector}: this log was opened without encryption, so what it "
            "holds is stored in clear and no key can be destroyed. Switch encryption on with "
            "Loom(url, encryption=MasterKey.from_env('LOOM_MASTER_KEY')) (the CLI reads "
            "$LOOM_MASTER_KEY); executions recorded from then on can be erased"
        )
    return keyring


def plan(
    loom: Loom, keyring: Keyring, ids: list[UUID], *, selector: str, by: str, reason: str
) -> ErasureReport:
    """What erasing executions ``ids`` and their forks (:func:`with_forks`) would do (a dry
    run's report): which are sealed and live, which were erased before, which are in clear and
    cannot be. Reads only."""
    subjects: list[ErasedSubject] = []
    not_erasable: list[str] = []
    selected = with_forks(loom, ids)
    # Erased before: reported as such without reading its rows (a nightly retention run
    # selects every execution older than its age, most of them erased by earlier runs).
    gone = set(keyring.destroyed(subject_of(i) for i in selected))
    for execution_id in selected:
        if subject_of(execution_id) in gone:
            subjects.append(
                ErasedSubject(
                    subject=subject_of(execution_id), execution_id=str(execution_id), events=0
                )
            )
            continue
        rows = loom.log.rows(execution_id)
        stored_input = _created_input(loom, rows[0]) if rows else None
        try:
            sealed = bool(rows) and sealed_input(stored_input, execution_id)
        except LogCorruptError:
            # Its input was altered, so the key table says whether it was sealed: one with a
            # live key is erased by it, as any other; one selection is not stopped by one row.
            sealed = bool(keyring.live([subject_of(execution_id)]))
        if not sealed:
            not_erasable.append(str(execution_id))
            continue
        names = sealed_names(stored_input)
        subjects.append(
            ErasedSubject(
                subject=subject_of(execution_id),
                execution_id=str(execution_id),
                events=sum(holds_sealed_fields(r.topic, r.state, names=names) for r in rows),
            )
        )
    return plan_subjects(keyring, subjects, not_erasable, selector=selector, by=by, reason=reason)


def with_forks(loom: Loom, ids: list[UUID]) -> list[UUID]:
    """``ids`` and every execution forked from one of them, at any depth, parents first.

    Why a fork goes with its parent: it starts with the parent's input and takes the parent's
    decisions before the fork point as its own events, sealed under its own key (ADR 0027),
    so erasing the parent alone left a readable copy of what the erasure reported gone. A
    parent does not go with its fork: what the fork decided after the point is its own."""
    children: dict[UUID, list[UUID]] = {}
    for summary in loom.executions():
        if summary.parent_id is not None:
            children.setdefault(summary.parent_id, []).append(summary.execution_id)
    selected = dict.fromkeys(ids)
    order = list(selected)
    # Breadth first, each id visited once: ``order`` grows as it is walked (popping a list's
    # front, as before, made a retention run over many executions quadratic in their number).
    for parent in order:
        for child in children.get(parent, ()):
            if child not in selected:
                selected[child] = None
                order.append(child)
    return order


def plan_subjects(
    keyring: Keyring,
    subjects: Sequence[ErasedSubject],
    not_erasable: Sequence[str],
    *,
    selector: str,
    by: str,
    reason: str,
) -> ErasureReport:
    """The report of erasing sealed ``subjects``: those whose key is live are erased, the
    rest were erased before (listed by execution id, or by subject). Reads only.

    A log holding sealed subjects and no key table lost its keys (the table dropped or
    renamed): none is live, yet none was erased, and "already erased" with no forget event
    was the answer (ADR 0049, amended "sealed floor"). That is :class:`LogCorruptError`, with
    nothing written."""
    live = set(keyring.live(s.subject for s in subjects))
    if len(live) < len(subjects) and not has_key_table(keyring.engine):
        raise LogCorruptError(_no_key_table(subjects[0].subject, len(subjects)))
    return ErasureReport(
        applied=False,
        selector=selector,
        subjects=tuple(s for s in subjects if s.subject in live),
        already_erased=tuple(
            s.execution_id or s.subject for s in subjects if s.subject not in live
        ),
        not_erasable=tuple(not_erasable),
        by=by,
        reason=reason,
    )


def _no_key_table(subject: str, count: int) -> str:
    return (
        f"cannot erase {subject}" + (f" and {count - 1} more" if count > 1 else "") + ": the "
        f"log holds its sealed data but has no key table ({TABLE}), so its key is lost, not "
        "erased (no forget event names it): the table was dropped or renamed. Nothing was "
        "written; restore the table from a backup (`loom verify` reports it as key-missing)"
    )


def apply(
    loom: Loom,
    keyring: Keyring,
    report: ErasureReport,
    *,
    started_before: Callable[[int], list[UUID]] | None = None,
) -> ErasureReport:
    """Carry out a planned erasure: the forget event first, then the keys (see the module
    docstring for why in that order). A plan with no subjects writes nothing.

    ``started_before(position)`` selects the executions again (a user's, a tenant's), those
    that started before the forget event at ``position``: one stored while the erasure ran
    is erased as a fork made meanwhile is. One whose first event is stored after this second
    choice is new data, whatever position its start read (ADR 0049, amended "fork read")."""
    if not report.subjects:
        return msgspec.structs.replace(report, applied=True)
    subjects = list(report.subjects)
    position = last = _append_forget(loom, subjects, by=report.by, reason=report.reason)
    keyring.destroy([s.subject for s in subjects], position=position)
    late_ids = started_before(position) if started_before is not None else []
    while late := _made_meanwhile(loom, keyring, subjects, late_ids, report):
        last = _append_forget(loom, late, by=report.by, reason=report.reason)
        keyring.destroy([s.subject for s in late], position=last)
        subjects += late
        late_ids = []
    return msgspec.structs.replace(
        report,
        applied=True,
        position=position,
        subjects=tuple(subjects),
        unpurged=_purge_read_models(loom, upto=last),
    )


def _purge_read_models(loom: Loom, *, upto: int) -> tuple[str, ...]:
    """Catch every read model that forgets on the forget event up to ``upto``: the passage
    index, the manifest and the memory stores (those in this process's memory too) delete the
    erased subjects' clear text there.

    They would on their next read; but a scope or a memory nobody reads again (and a
    retention run from cron reads none) would keep the text in clear indefinitely. What could
    not catch up is returned, ``"NAME: cause"`` each, for the caller to report: the keys are
    destroyed by then, so the erasure itself stands, and ``loom doctor`` catches up again.
    Then, on SQLite, the write-ahead log is emptied of what the purge deleted
    (:func:`_truncate_wal`)."""
    from loom_runtime.projection import catch_up, held_in_process, registered_projections

    failed: list[str] = []
    names: list[str] = []  # a store's name has colons of its own (``loom_memory:memory:p_``)

    def note(name: str, error: Exception) -> None:
        failed.append(f"{name}: {cause_of(error)}")
        names.append(name)

    projections = [*registered_projections(loom.log, unopened=note), *held_in_process(loom.log)]
    for projection in projections:
        if Forgotten.TOPIC not in projection.topics:
            continue
        try:
            catch_up(loom.log, projection, upto=upto)
        except Exception as exc:  # the rest must still purge; the caller reports this one
            note(projection.name, exc)
    for name in names:  # a Python caller may not read the report; the cause may quote data
        logger.warning("erasure: read model %s did not catch up", name)
    if (kept := _truncate_wal(loom)) is not None:
        failed.append(kept)
    return tuple(failed)


def _truncate_wal(loom: Loom) -> str | None:
    """Checkpoint the log's SQLite database and empty its write-ahead log (``PRAGMA
    wal_checkpoint(TRUNCATE)``); None when done, or on PostgreSQL, else what stays, ``"NAME:
    cause"``, for the report's ``unpurged``.

    Why: the WAL holds every page a write changed since the last checkpoint, the erased
    document's passages and memory entries and the destroyed data keys among them (written in
    clear, or wrapped, before the erasure), and SQLite's own checkpoints (PASSIVE) copy pages
    into the file without emptying it. Only a TRUNCATE checkpoint (or ``VACUUM``) did, and
    none ran (ADR 0049, amended "free pages"). The purge's deletes are overwritten in place
    (``PRAGMA secure_delete``: :meth:`~loom_runtime.LogSettings.overwrite_deleted_content`),
    so the pages the checkpoint copies hold none of that text.

    Best effort: a checkpoint waits, up to the lock timeout, for every reader of the WAL to
    finish; one still reading then (another process's long read) leaves the WAL as it is, and
    the erasure stands, reported. A failure is reported the same way, never raised: the keys
    are destroyed by then."""
    engine = loom.log.engine
    if engine.dialect.name != "sqlite":
        return None
    name = f"{WAL_ENTRY}{engine.url.database}-wal"
    try:
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            # Outside any transaction (the pool's connection is in autocommit): SQLite refuses
            # a checkpoint inside one.
            cursor.execute(_TRUNCATE_WAL)
            row = cursor.fetchone()  # (busy, WAL frames, frames checkpointed)
            cursor.close()
        finally:
            raw.close()
    except Exception as exc:  # the erasure stands; the caller reports this
        logger.warning("erasure: the write-ahead log %s was not checkpointed", name)
        return f"{name}: {cause_of(exc)}"
    if row is None or row[0]:
        logger.warning("erasure: the write-ahead log %s was not emptied (busy)", name)
        return (
            f"{name}: another connection was still reading it, so it was not emptied and may "
            "hold the erased text until the next checkpoint; run PRAGMA "
            "wal_checkpoint(TRUNCATE) on the database once no process reads it"
        )
    return None


_TRUNCATE_WAL: Final = "PRAGMA wal_checkpoint(TRUNCATE)"
WAL_ENTRY: Final = "write-ahead log "
"""How the report's ``unpurged`` entry of the SQLite write-ahead log begins (the rest name
read models, which ``loom doctor`` catches up; the WAL's entry says what empties it)."""


def _made_meanwhile(
    loom: Loom,
    keyring: Keyring,
    erased: Sequence[ErasedSubject],
    selected: Sequence[UUID],
    report: ErasureReport,
) -> list[ErasedSubject]:
    """The live executions the plan did not see: forks of executions in ``erased`` started
    while the erasure ran, their first append committed before the parent's key was destroyed
    (a later one is refused by its own append: :meth:`Loom._parent_live`), and those of
    ``selected`` (chosen again: a user's execution that started meanwhile) with theirs. Looked
    for once the keys are gone, so no fork can follow; each found is erased by a forget event
    of its own, and an execution written under its key meanwhile is erased with it."""
    ids = [UUID(s.execution_id) for s in erased if s.execution_id is not None] + list(selected)
    if not ids:
        return []
    known = {s.execution_id for s in erased} | set(report.already_erased)
    fresh = [i for i in with_forks(loom, ids) if str(i) not in known]
    if not fresh:
        return []
    found = plan(loom, keyring, fresh, selector="", by=report.by, reason=report.reason)
    return list(found.subjects)


def _selected(loom: Loom, kind: str, value: Any) -> list[UUID]:
    if kind == "execution":
        from loom_runtime.loom import _as_uuid

        execution_id = _as_uuid(value)
        if not loom.log.rows(execution_id):
            raise ExecutionNotFoundError(
                f"no execution {value} in the log at {loom.settings.url!r}; nothing was written"
            )
        return [execution_id]
    return [summary.execution_id for summary in _labelled(loom, kind, value)]


def _labelled(loom: Loom, kind: str, value: Any) -> list[ExecutionSummary]:
    """The executions labelled ``user=value`` or ``tenant=value`` (``kind``)."""
    if not isinstance(value, str):
        raise ErasureSubjectError(f"{kind}= names a label (a str), not {value!r}")
    return loom.executions(user=value) if kind == "user" else loom.executions(tenant=value)


def _created_input(loom: Loom, row: Any) -> bytes | None:
    event = loom.log.decode(row)
    raw = getattr(event, "input", None)
    return None if raw is None else bytes(raw)


def _append_forget(loom: Loom, subjects: list[ErasedSubject], *, by: str, reason: str) -> int:
    fields = {
        "subjects": tuple(s.subject for s in subjects),
        "events": tuple(s.events for s in subjects),
        "by": by,
        "reason": reason,
    }
    positions, _ = loom.log.append_replanned(
        FORGET_LOG,
        lambda version: ([(Forgotten, fields)], None),
        what="the forget log",
    )
    return positions[-1]


class ForgetEntry(msgspec.Struct, frozen=True, kw_only=True):
    """The forget-log entry that erased one subject: what an audit shows in place of content."""

    subject: str
    position: int
    """Where the forget event is in the log (what an :class:`ErasedError` names)."""
    at: UtcTimestamp
    by: str
    reason: str
    erased_with: int
    """How many subjects that one erasure covered (a user's or tenant's executions)."""


def forget_entry(loom: Loom, error: ErasedError) -> ForgetEntry | None:
    """The forget event ``error`` names, or None when it names none (a key row missing: an
    interrupted erase, or a key table restored from an older backup)."""
    if error.position is None:
        return None
    for record in loom.log.notifications(
        after=error.position - 1, upto=error.position, topics=(Forgotten.TOPIC,)
    ):
        event = loom.log.decode(record)
        return ForgetEntry(
            subject=error.subject,
            position=record.position,
            at=event.timestamp,
            by=event.by,
            reason=event.reason,
            erased_with=len(event.subjects),
        )
    return None


_SCANNED: ContextVar[dict[str, list[Execution]] | None] = ContextVar("scanned", default=None)
"""While an erasure resolves several memory keys, the executions :func:`executions_holding`
found for each kind: twenty keys read the whole log once each (a regression review)."""


def executions_holding(loom: Loom, kind: str) -> Iterator[Execution]:
    """The live executions with a decision of ``kind``, opened: where an erased subject's
    copies may be (a document's recorded retrievals, a memory key's recalls), which an
    erasure's report names (``ErasedSubject.held_by``).

    Candidates are found by the decisions' kind, stored in clear, and only those are opened.
    An execution already erased, or one this Loom cannot open (sealed, and no master key),
    holds nothing readable here and is passed over. One pass over the log's decisions (one
    per erasure, however many keys it names): an erasure is rare, and its dry run reads only."""
    scanned = _SCANNED.get()
    if scanned is None:
        return _holding(loom, kind)
    if kind not in scanned:
        scanned[kind] = list(_holding(loom, kind))
    return iter(scanned[kind])


def _holding(loom: Loom, kind: str) -> Iterator[Execution]:
    candidates: dict[UUID, None] = {}
    for record in loom.log.notifications(topics=(Execution.DecisionRecorded.TOPIC,)):
        event = loom.log.decode(record)
        if getattr(event, "kind", None) == kind:
            candidates[event.originator_id] = None
    for execution_id in candidates:
        try:
            yield loom.execution(execution_id)
        except (ErasedError, EncryptionOffError):
            continue


def forget_events(loom: Loom) -> list[tuple[int, Forgotten]]:
    """Every forget event in the log, with its position, oldest first."""
    found = []
    for record in loom.log.notifications(topics=(Forgotten.TOPIC,)):
        found.append((record.position, loom.log.decode(record)))
    return found


__all__ = [
    "ErasedSubject",
    "ErasureReport",
    "ForgetEntry",
    "SubjectResolver",
    "erase",
    "executions_holding",
    "forget_entry",
    "forget_events",
]
