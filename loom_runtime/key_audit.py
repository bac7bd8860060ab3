"""``verify_keys``: the key table checked against the log it serves (ADR 0049, amended "verify").

The hash chain covers the events, not ``loom_subject_keys``, and a key row can be changed by
anyone with SQL access, without the master key: deleted, or set to "destroyed". Either makes a
subject's data unreadable, and an erased subject and a lost one read alike (an
:class:`~loom_runtime.errors.ErasedError`), so the chain alone let a silent deletion pass for
an erasure the forget log never recorded. What the log says, and the key table must agree
with, is checked here, with no master key (a data key's bytes are never read):

- every subject whose sealed data the log stores has a key row (loom creates it before the
  first sealed append, and never deletes one): else :attr:`Tampering.KEY_MISSING`, at the
  first event holding its data, unless a forget event names it (erased: the row is gone, but
  so was the key); the key-check row too, without which no master key opens the log;
- every destroyed key names, as ``erased_position``, a forget event that names its subject,
  and one after the key was made: else :attr:`Tampering.KEY_DESTROYED` (an erasure the forget
  log does not record);
- every subject a forget event names has its key destroyed: else
  :attr:`Tampering.ERASURE_INCOMPLETE` (an erasure interrupted between its forget event and
  its keys, or running now; ``loom erase`` run again completes it).

A sealed execution is found by its input (:func:`~loom_runtime.sealing.sealed_input`), so its
other events are not read; a subject a package above the runtime seals (a document, a memory
key) by the sealed texts in the fields its event class declares sealed (``LogEvent.SEALED``),
and nowhere else: a clear field (a document's metadata, a memory key's name) can hold any text,
one that looks sealed too. An event's texts are sealed when every one of them is
(:func:`~loom_runtime.sealing.sealed_subjects`), whatever the key rows say: they are what is
being checked, and a floor read from them (the first key's position) let one deleted or edited
row hide a document's texts (ADR 0049, amended "sealed floor"). Key rows are untrusted as well:
a value of any type reads as no position, and one past the log's head is ``key-altered``.

A log with no key table was never encrypted, or had its table dropped or renamed: a sealed
execution's input, which proves itself, tells the second (``key-missing``, the table gone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

import msgspec

from loom_runtime.errors import LogCorruptError
from loom_runtime.execution import Execution, Forgotten
from loom_runtime.integrity import Tampering, VerifyReport
from loom_runtime.sealing import (
    KEY_CHECK,
    TABLE,
    UNREADABLE,
    has_key_table,
    sealed_input,
    sealed_subjects,
    subject_of,
)
from loom_runtime.storage.topics import event_class

if TYPE_CHECKING:
    from loom_runtime.log import EventLog

_CREATED: Final = Execution.Created.TOPIC
PROGRESS_STEP: Final = 10_000
"""Events read between two calls of ``progress``."""
_INPUT: Final = "input"
_TEXT: Final = "text"
_FORGET: Final = "forget"
_POSITION_LIMIT: Final = 2**63 - 1
"""The largest position a log can hold (a signed 64-bit id): a row naming more names none."""


class _Input(msgspec.Struct):
    input: msgspec.Raw


class _Forget(msgspec.Struct):
    subjects: tuple[str, ...] = ()


_input = msgspec.json.Decoder(_Input)
_forget = msgspec.json.Decoder(_Forget)
_sealed_fields: dict[str, msgspec.json.Decoder[Any] | None] = {}
"""By topic: a decoder of the fields its event class declares sealed, or None (none)."""


def verify_keys(
    log: EventLog, *, upto: int, progress: Callable[[int, int], None] | None = None
) -> VerifyReport:
    """Check the key table against the log's events up to position ``upto`` (the head a
    :func:`~loom_runtime.integrity.verify_log` verified: read the chain first, since this
    trusts the events it reads). Ok for a log that was never encrypted: no key table, and no
    sealed execution (then only its ``Created`` events are read).

    The report's ``checked`` counts the key rows checked; a problem is the one at the lowest
    log position (a lost or forged row before an erasure left half done), its ``detail``
    saying how many more there are. ``progress(position, upto)`` is called as the events are
    read, rising. Never raises on what it reads; a key table whose columns are not loom's
    raises the database's error (SQLAlchemy's), as any unreadable table does.
    """
    if not has_key_table(log.engine):
        return _without_table(log, upto, progress)
    eras, named = _stored(log, upto, progress)
    sealed = {subject: first for subject, first in map(_first, eras.items()) if first}
    first_sealed = min(sealed.values(), default=1)
    problems: list[tuple[int, Tampering, str]] = []
    later: list[tuple[str, int]] = []  # destroyed by a forget event past ``upto``
    ahead: list[tuple[str, int]] = []  # made past ``upto``: since the events were read, or forged
    checked = 0
    checks = 0
    for subject, live, created_at, erased_at in _key_rows(log):
        if subject == KEY_CHECK:
            checks += live
            continue
        checked += 1
        stored = sealed.pop(subject, None)
        first = max(created_at or 1, 1) if stored is None else stored
        forgets = named.get(subject, ())
        if created_at is not None:
            before = _stored_by(eras.get(subject, []), created_at)
            if before is not None:
                problems.append((before, Tampering.KEY_ALTERED, _made_after(subject, created_at)))
            elif created_at > upto:
                ahead.append((subject, created_at))
        if live:
            if forgets:
                problems.append((forgets[0], Tampering.ERASURE_INCOMPLETE, _incomplete(subject)))
        elif erased_at is None:
            problems.append((first, Tampering.KEY_DESTROYED, _destroyed(subject, None)))
        elif created_at is None or created_at >= erased_at:
            problems.append((erased_at, Tampering.KEY_DESTROYED, _too_early(subject, created_at)))
        elif erased_at > upto:
            later.append((subject, erased_at))
        elif erased_at not in forgets:
            problems.append((erased_at, Tampering.KEY_DESTROYED, _destroyed(subject, erased_at)))
    if later or ahead:
        problems.extend(_past(log, upto, later, ahead))
    problems.extend(
        (position, Tampering.KEY_MISSING, _missing(subject))
        for subject, position in sealed.items()
        if subject not in named
    )
    if checked and not checks:
        problems.append((first_sealed, Tampering.KEY_MISSING, _no_check_row()))
    return _verdict(checked, problems)


def _past(
    log: EventLog, upto: int, later: list[tuple[str, int]], ahead: list[tuple[str, int]]
) -> Iterator[tuple[int, Tampering, str]]:
    """The problems of rows naming positions past ``upto``, checked against the log as it is
    now (its head read once): a destruction by an erasure made since the events were read is
    found there, a key made since is at or before that head; a made-up position is neither."""
    head = log.position
    for subject, erased_at in later:
        if erased_at > head or subject not in _named_at(log, erased_at):
            yield erased_at, Tampering.KEY_DESTROYED, _destroyed(subject, erased_at)
    for subject, created_at in ahead:
        if created_at > head:
            yield upto, Tampering.KEY_ALTERED, _made_past_head(subject, created_at, head)


def _verdict(checked: int, problems: list[tuple[int, Tampering, str]]) -> VerifyReport:
    """The report of ``problems``: the first by position, tampering before an erasure left
    half done, with a count of the rest."""
    if not problems:
        return VerifyReport(checked=checked)
    # An erasure left half done is an operator's next step; a lost or forged row is not, and
    # must not hide behind one (a script that erases again on "incomplete" would miss it).
    position, problem, detail = min(
        problems, key=lambda found: (found[1] is Tampering.ERASURE_INCOMPLETE, found[0])
    )
    if len(problems) > 1:
        detail += f" ({len(problems) - 1} more problem(s) in the key table)"
    return VerifyReport(checked=checked, problem=problem, position=position, detail=detail)


def _without_table(
    log: EventLog, upto: int, progress: Callable[[int, int], None] | None
) -> VerifyReport:
    """The check of a log with no key table: never encrypted, unless a sealed execution's
    input (which proves itself: it names its own execution, whose id did not exist before
    it) says otherwise; then the table was dropped or renamed, every key is lost with it, and
    the first sealed data is ``key-missing``. A document's or memory key's text alone does not
    tell a log that lost its table from a clear one holding an outsider's text shaped like a
    sealed one (ADR 0049, amended "sealed floor")."""
    executions = log.notifications(upto=upto, topics=(_CREATED,))
    if not any(_sealed_execution(r.state, r.stream) for r in executions):
        if progress is not None:
            progress(upto, upto)
        return VerifyReport(checked=0)
    eras, _ = _stored(log, upto, progress)
    sealed = sorted((first, subject) for subject, first in map(_first, eras.items()) if first)
    position, subject = sealed[0]
    return _verdict(0, [(position, Tampering.KEY_MISSING, _table_gone(subject, len(sealed)))])


_Eras = list[tuple[int, int | None]]
"""One subject's sealed data, by era: the position an era starts after (0, then each forget
event naming the subject) and the first sealed position in it (None: none yet)."""


def _stored(
    log: EventLog, upto: int, progress: Callable[[int, int], None] | None
) -> tuple[dict[str, _Eras], dict[str, list[int]]]:
    """The sealed data the log holds up to ``upto``, by subject and era (:data:`_Eras`), and
    the subjects forget events name, each with their positions.

    By era, because a key is compared with the data stored since the subject was last
    erased before the key was made: an erased subject's row deleted (its key was gone
    already) and the subject written again under a new key is a key made after the first
    era's data, and rightly so."""
    eras: dict[str, _Eras] = {}
    named: dict[str, list[int]] = {}
    for kind, position, subject in _found(log, upto, progress):
        found = eras.setdefault(subject, [(0, None)])
        if kind == _FORGET:
            named.setdefault(subject, []).append(position)
            found.append((position, None))
        elif found[-1][1] is None:
            found[-1] = (found[-1][0], position)
    return eras, named


def _first(item: tuple[str, _Eras]) -> tuple[str, int | None]:
    """A subject and the first position holding its sealed data (None: it holds none)."""
    subject, eras = item
    return subject, next((first for _, first in eras if first is not None), None)


def _stored_by(eras: _Eras, created_at: int) -> int | None:
    """The first position holding data sealed under a key made at ``created_at``, if one is
    not after it (the row was altered): in the era the key was made in, the one after the
    last forget event naming the subject before it."""
    first = next((first for start, first in reversed(eras) if start <= created_at), None)
    return first if first is not None and first <= created_at else None


def _found(
    log: EventLog, upto: int, progress: Callable[[int, int], None] | None
) -> Iterator[tuple[str, int, str]]:
    """``(kind, position, subject)``: a sealed execution's input (:data:`_INPUT`), the
    subject of an event's sealed texts (:data:`_TEXT`, :func:`_sealed_texts`), a subject a
    forget event names (:data:`_FORGET`)."""
    reported = 0
    for record in log.notifications(upto=upto):
        position, topic = record.position, record.topic
        if progress is not None and position - reported >= PROGRESS_STEP:
            reported = position
            progress(position, upto)
        if topic == _CREATED:
            if _sealed_execution(record.state, record.stream):
                yield _INPUT, position, subject_of(record.stream)
        elif topic == Forgotten.TOPIC:
            for subject in _subjects_of(record.state):
                yield _FORGET, position, subject
        else:
            for subject in _sealed_texts(topic, record.state):
                yield _TEXT, position, subject
    if progress is not None:
        progress(upto, upto)


def _sealed_execution(state: bytes, execution_id: Any) -> bool:
    try:
        return sealed_input(_input.decode(state).input, execution_id)
    except (*UNREADABLE, LogCorruptError):
        return False  # unreadable as loom writes it: a replay of it refuses, naming it


def _subjects_of(state: bytes) -> tuple[str, ...]:
    try:
        return _forget.decode(state).subjects
    except UNREADABLE:
        return ()


def _sealed_texts(topic: str, state: bytes) -> frozenset[str]:
    """The subjects that sealed the texts in the fields events of ``topic`` declare sealed
    (each a text, or a list of them; other values, a memory's clear entries, are no text),
    when every one of them is sealed (:func:`~loom_runtime.sealing.sealed_subjects`)."""
    if topic not in _sealed_fields:
        cls = event_class(topic)
        fields: tuple[str, ...] = getattr(cls, "SEALED", ())
        _sealed_fields[topic] = (
            msgspec.json.Decoder(msgspec.defstruct("Sealed", [(f, Any, None) for f in fields]))
            if fields
            else None
        )
    decoder = _sealed_fields[topic]
    if decoder is None:
        return frozenset()
    try:
        values = msgspec.structs.astuple(decoder.decode(state))
    except UNREADABLE:
        return frozenset()
    texts = [
        text
        for value in values
        for text in (value if isinstance(value, list) else (value,))
        if isinstance(text, str)
    ]
    return sealed_subjects(texts) or frozenset()


def _key_rows(log: EventLog) -> Iterator[tuple[str, bool, int | None, int | None]]:
    """``(subject, live, created_position, erased_position)`` of every key row, the check
    row's included; a position that is no whole number of the log's range is None."""
    from sqlalchemy import text

    query = text(
        f"SELECT subject, wrapped_key IS NOT NULL, created_position, erased_position FROM {TABLE}"
    )
    with log.engine.connect() as connection:
        for subject, live, created, erased in connection.execute(query):
            yield str(subject), bool(live), _position(created), _position(erased)


def _position(value: object) -> int | None:
    """A key row's position as loom writes it (an integer from 0), or None: SQLite stores
    whatever type an edit gives it, and a float or text there is no position."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _POSITION_LIMIT:
        return value
    return None


def _named_at(log: EventLog, position: int) -> tuple[str, ...]:
    """The subjects the forget event at ``position`` names (none if it is not one)."""
    for record in log.notifications(after=position - 1, upto=position, topics=(Forgotten.TOPIC,)):
        if record.position == position:
            return _subjects_of(record.state)
    return ()


def _missing(subject: str) -> str:
    return (
        f"sealed data of {subject} is stored here, but the key table ({TABLE}) has no row "
        "for it and no forget event names it: the row was deleted, or the key table was "
        "restored from a backup older than this position. Its data cannot be read, yet was "
        "never erased: restore the row from a backup that holds it"
    )


def _no_check_row() -> str:
    return (
        f"the key table ({TABLE}) holds data keys but not its key-check row "
        f"({KEY_CHECK!r} is missing or holds no key): no master key can be proved against it, "
        "so every encrypted open is refused; restore that row from the backup the other rows "
        "came from"
    )


def _destroyed(subject: str, erased_at: int | None) -> str:
    where = (
        "its row names no forget event"
        if erased_at is None
        else f"the forget log has no event at {erased_at} naming it"
    )
    return (
        f"the key of {subject} is destroyed but {where}: the key table was altered, and an "
        "erasure the forget log does not record made its data unreadable (restore the row "
        "from a backup that holds the key)"
    )


def _too_early(subject: str, created_at: int | None) -> str:
    made = "at no position" if created_at is None else f"at {created_at}"
    return (
        f"the key of {subject} is destroyed by the forget event its row names, but was made "
        f"{made}, not before it: a key made after an erasure was marked destroyed by it, so "
        "the data written under it is unreadable and no erasure records that (restore the row "
        "from a backup that holds the key)"
    )


def _made_after(subject: str, created_at: int) -> str:
    return (
        f"sealed data of {subject} is stored here, but its key's row says it was made at "
        f"{created_at}, not before: a key is made before anything is sealed under it, so the "
        "row was altered (restore the key table from a backup)"
    )


def _made_past_head(subject: str, created_at: int, head: int) -> str:
    return (
        f"the key of {subject} says it was made at log position {created_at}, past the log's "
        f"head ({head}): loom makes a key at the head, before its first write, so the row "
        "was altered (restore the key table from a backup)"
    )


def _table_gone(subject: str, subjects: int) -> str:
    return (
        f"sealed data of {subject} is stored here ({subjects} subject(s) in all), but the log "
        f"has no key table ({TABLE}): it is gone (dropped or renamed), and with it every data "
        "key and the key-check row, with no forget event erasing them. The data reads as "
        "erased, yet was never erased: restore the table from a backup"
    )


def _incomplete(subject: str) -> str:
    return (
        f"this forget event names {subject}, whose key is still live: an erasure was "
        "interrupted between its forget event and its keys, or is running now; if none is, "
        "run the same `loom erase ... --apply` again to complete it"
    )


__all__ = ["verify_keys"]
