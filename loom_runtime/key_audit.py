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
  so was the key);
- every destroyed key names, as ``erased_position``, a forget event that names its subject:
  else :attr:`Tampering.KEY_DESTROYED` (an erasure the forget log does not record);
- every subject a forget event names has its key destroyed: else
  :attr:`Tampering.ERASURE_INCOMPLETE` (an erasure interrupted between its forget event and
  its keys, or running now; ``loom erase`` run again completes it).

A sealed execution is found by its input (:func:`~loom_runtime.sealing.sealed_input`), so its
other events are not read; a subject a package above the runtime seals (a document, a memory
key) by the sealed texts in its events' state, the only events read whole.
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
    has_key_table,
    sealed_input,
    sealed_text_subject,
    subject_of,
)

if TYPE_CHECKING:
    from loom_runtime.log import EventLog

_CREATED: Final = Execution.Created.TOPIC
_EXECUTION_TOPICS: Final = "loom.execution."
"""The topics of an execution's own events: their sealed fields are all under the
execution's key, found once from its input."""
_SEALED_TEXT: Final = b'"loom.sealed:'
"""How a sealed text (:func:`~loom_runtime.sealing.seal_subject_text`) begins inside stored
JSON: a string whose text starts with the mark. A state without it holds none."""
PROGRESS_STEP: Final = 10_000
"""Events read between two calls of ``progress``."""


class _Input(msgspec.Struct):
    input: msgspec.Raw


class _Forget(msgspec.Struct):
    subjects: tuple[str, ...] = ()


_input = msgspec.json.Decoder(_Input)
_forget = msgspec.json.Decoder(_Forget)


def verify_keys(
    log: EventLog, *, upto: int, progress: Callable[[int, int], None] | None = None
) -> VerifyReport:
    """Check the key table against the log's events up to position ``upto`` (the head a
    :func:`~loom_runtime.integrity.verify_log` verified: read the chain first, since this
    trusts the events it reads). Ok at once for a log that was never encrypted.

    The report's ``checked`` counts the key rows checked; a problem is the one at the lowest
    log position, its ``detail`` saying how many more there are. ``progress(position, upto)``
    is called as the events are read, rising. Never raises on what it reads.
    """
    if not has_key_table(log.engine):
        return VerifyReport(checked=0)
    sealed: dict[str, int] = {}  # subject -> the first position holding its sealed data
    named: dict[str, list[int]] = {}  # subject -> the forget events naming it
    for position, subject in _found(log, upto, progress):
        if subject is None:
            continue
        if position < 0:
            named.setdefault(subject, []).append(-position)
        else:
            sealed.setdefault(subject, position)
    problems: list[tuple[int, Tampering, str]] = []
    later: list[tuple[str, int]] = []  # destroyed by a forget event past ``upto``
    checked = 0
    for subject, destroyed, created_at, erased_at in _key_rows(log):
        checked += 1
        first = sealed.pop(subject, created_at)
        forgets = named.get(subject, ())
        if not destroyed:
            if forgets:
                problems.append((forgets[0], Tampering.ERASURE_INCOMPLETE, _incomplete(subject)))
        elif erased_at is None or erased_at < 1:
            problems.append((max(first, 1), Tampering.KEY_DESTROYED, _destroyed(subject, None)))
        elif erased_at > upto:
            later.append((subject, erased_at))
        elif erased_at not in forgets:
            problems.append((erased_at, Tampering.KEY_DESTROYED, _destroyed(subject, erased_at)))
    for subject, erased_at in later:  # an erasure since the events were read, or a forgery
        if subject not in _named_at(log, erased_at):
            problems.append((erased_at, Tampering.KEY_DESTROYED, _destroyed(subject, erased_at)))
    problems.extend(
        (position, Tampering.KEY_MISSING, _missing(subject))
        for subject, position in sealed.items()
        if subject not in named
    )
    if not problems:
        return VerifyReport(checked=checked)
    position, problem, detail = min(problems, key=lambda found: found[0])
    if len(problems) > 1:
        detail += f" ({len(problems) - 1} more problem(s) in the key table)"
    return VerifyReport(checked=checked, problem=problem, position=position, detail=detail)


def _found(
    log: EventLog, upto: int, progress: Callable[[int, int], None] | None
) -> Iterator[tuple[int, str | None]]:
    """``(position, subject)`` for each sealed subject an event at ``position`` holds, and
    ``(-position, subject)`` for each subject the forget event there names."""
    reported = 0
    for record in log.notifications(upto=upto):
        position, topic = record.position, record.topic
        if progress is not None and position - reported >= PROGRESS_STEP:
            reported = position
            progress(position, upto)
        if topic == _CREATED:
            try:
                if sealed_input(_input.decode(record.state).input, record.stream):
                    yield position, subject_of(record.stream)
            except (msgspec.DecodeError, msgspec.ValidationError, LogCorruptError):
                pass  # unreadable as loom writes it: a replay of it refuses, naming it
        elif topic == Forgotten.TOPIC:
            for subject in _subjects_of(record.state):
                yield -position, subject
        elif not topic.startswith(_EXECUTION_TOPICS) and _SEALED_TEXT in record.state:
            for subject in _sealed_texts(record.state):
                yield position, subject
    if progress is not None:
        progress(upto, upto)


def _subjects_of(state: bytes) -> tuple[str, ...]:
    try:
        return _forget.decode(state).subjects
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ()


def _sealed_texts(state: bytes) -> set[str]:
    """The subjects of the sealed texts anywhere in a stored state."""
    try:
        value = msgspec.json.decode(state)
    except msgspec.DecodeError:
        return set()
    found: set[str] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            subject = sealed_text_subject(item)
            if subject is not None:
                found.add(subject)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _key_rows(log: EventLog) -> Iterator[tuple[str, bool, int, int | None]]:
    """``(subject, destroyed, created_position, erased_position)`` of every data key row (not
    the check row)."""
    from sqlalchemy import text

    query = text(
        f"SELECT subject, wrapped_key IS NULL, created_position, erased_position FROM {TABLE} "
        "WHERE subject <> :check"
    )
    with log.engine.connect() as connection:
        for subject, destroyed, created, erased in connection.execute(query, {"check": KEY_CHECK}):
            erased_at = None if erased is None else int(erased)
            yield str(subject), bool(destroyed), int(created or 0), erased_at


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


def _incomplete(subject: str) -> str:
    return (
        f"this forget event names {subject}, whose key is still live: an erasure was "
        "interrupted between its forget event and its keys (or is running now); run the "
        "same `loom erase ... --apply` again to complete it"
    )


__all__ = ["verify_keys"]
