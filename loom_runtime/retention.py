"""Retention: erase the executions that started before a cutoff (ADR 0053), or the documents
of a knowledge scope, or the keys of an event-sourced memory, last written before it (ADR
0060).

A retention policy is an erasure selected by age: every sealed execution whose start (its
``Created`` event's time, in clear) is older than ``older_than``, optionally of one tenant,
has its key destroyed, and one forget event records the policy as the reason. It is the same
two writes as :func:`~loom_runtime.erasure.erase`, so ``loom verify`` passes before and after
and everything younger replays as before.

Why it is safe to run on a schedule: a run with nothing old enough left writes nothing (no
empty forget event a day), executions erased by an earlier run are reported as already
erased, and an interrupted run is completed by the next one (the keys it did not reach are
still live). An execution still running when its start passes the cutoff is erased too: its
next write is refused (:class:`~loom_runtime.errors.SubjectErasedError`), never stored under
a destroyed key.

Documents (``scope=``) and memory keys (``memory=``): the package above the runtime that seals
them selects them through the ``loom.retention`` entry points ``document`` and ``memory``,
``(loom, scope or memory name, cutoff) -> (subjects, not_erasable)`` (the runtime cannot import
those packages: dependencies point down).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from loom_runtime.entry_points import installed_named
from loom_runtime.erasure import (
    ErasedSubject,
    ErasureReport,
    apply,
    check_who,
    keyring_of,
    plan,
    plan_subjects,
)
from loom_runtime.errors import ErasureSubjectError, RetentionPolicyError

if TYPE_CHECKING:
    from loom_runtime.loom import Loom

_AGE: Final = re.compile(r"([0-9]{1,6})(w|d|h|min)")
_UNITS: Final = {"w": "weeks", "d": "days", "h": "hours", "min": "minutes"}
_AMBIGUOUS: Final = re.compile(r"[0-9]{1,6}(m|mo|months?|y|yrs?|years?)", re.IGNORECASE)
"""Ages a person may mean in months or years: ``6m`` is six minutes to one reader and six
months to another, and read as minutes an applied policy erases nearly everything."""
_TOO_LONG: Final = re.compile(r"[0-9]{7,50}(w|d|h|min)")
"""A well-formed age past :data:`_AGE`'s six digits: refused as too long, not as no age."""
RETENTION_KINDS: Final = "loom.retention"
AgedResolver = Callable[["Loom", str, datetime], tuple[Sequence[ErasedSubject], Sequence[str]]]
"""What a ``loom.retention`` entry point loads: the subjects of a scope (or a memory) older
than a cutoff, and what of them is stored in clear."""
_AGED: Final = {"document": "documents of scope", "memory": "keys of memory"}
"""The ``loom.retention`` entry points, and how a selector names what each selects."""
STARTED_BEFORE: Final = "started before"
"""How an erasure by age selects executions, opening its report's selector."""


def parse_age(text: str) -> timedelta:
    """An age as ``loom retain --older-than`` takes it: a whole number and a unit, ``w``
    (weeks), ``d`` (days), ``h`` (hours) or ``min`` (minutes): ``90d``, ``2w``, ``15min``.
    ``m`` is refused as ambiguous (minutes to one reader, months to another).

    One number and one unit, no fractions or combinations: a retention period is a policy
    someone reads in a crontab, so ``90d`` is written as it is meant.
    """
    given = text.strip() if isinstance(text, str) else None
    match = _AGE.fullmatch(given) if given is not None else None
    if match is None:
        if given is not None and _AMBIGUOUS.fullmatch(given):
            raise RetentionPolicyError(
                f"--older-than {text!r} is ambiguous: write min for minutes (15min), and "
                "months or years in days (180d for six months, 365d for a year)"
            )
        if given is not None and _TOO_LONG.fullmatch(given):
            raise RetentionPolicyError(
                f"--older-than {text!r} has more digits than an age needs: at most six, "
                "and no age may reach before the calendar begins"
            )
        raise RetentionPolicyError(
            f"--older-than {text!r} is not an age: write a whole number and a unit, w (weeks), "
            "d (days), h (hours) or min (minutes), e.g. 90d"
        )
    return _positive(timedelta(**{_UNITS[match.group(2)]: int(match.group(1))}))


def describe_age(age: timedelta) -> str:
    """``age`` in the largest of days, hours, minutes and seconds that divides it whole
    (``90d``, ``36h``, ``15min``, ``90s``): what a forget event's reason and a refusal say.
    Weeks are given in days (``2w`` is ``14d``), as retention periods are usually written;
    seconds, which :func:`parse_age` does not take, only for an age given from Python."""
    seconds, rest = divmod(age, timedelta(seconds=1))
    if rest:
        return str(age)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _positive(age: timedelta) -> timedelta:
    if age <= timedelta(0):
        raise RetentionPolicyError(
            f"--older-than must be a positive age, not {age}: an age of 0 would erase "
            "everything, including what is running now"
        )
    return age


def retain(
    loom: Loom,
    *,
    older_than: timedelta,
    tenant: str | None,
    reason: str | None,
    by: str,
    dry_run: bool,
    scope: str | None = None,
    memory: str | None = None,
) -> ErasureReport:
    """See :meth:`Loom.retain`."""
    if not isinstance(older_than, timedelta):
        raise RetentionPolicyError(f"older_than= is a timedelta, not {older_than!r}")
    named = (("document", scope), ("memory", memory))
    aged = [(kind, name) for kind, name in named if name is not None]
    if len(aged) + (tenant is not None) > 1:
        raise RetentionPolicyError(
            "name one selector, not both of two: tenant= (executions), scope= (a knowledge "
            "scope's documents) or memory= (a memory's keys); documents and memory keys carry "
            "no tenant label"
        )
    cutoff = _cutoff(_positive(older_than))
    reason = reason if reason is not None else f"retention: older than {describe_age(older_than)}"
    check_who(reason=reason, by=by)
    if aged:
        kind, name = aged[0]
        selector = f"{_AGED[kind]}={name} last written before {_at(cutoff)}"
        keyring = keyring_of(loom, selector)
        subjects, clear = _aged_resolver(kind)(loom, name, cutoff)
        report = plan_subjects(keyring, subjects, clear, selector=selector, by=by, reason=reason)
        return report if dry_run else apply(loom, keyring, report)
    selector = f"{STARTED_BEFORE} {_at(cutoff)}" + (
        f", tenant={tenant}" if tenant is not None else ""
    )
    keyring = keyring_of(loom, f"executions {selector}")
    ids = [
        summary.execution_id
        for summary in loom.executions(tenant=tenant)
        if summary.started_at < cutoff  # in UTC, whatever zone it was stored in (as_utc)
    ]
    report = plan(loom, keyring, ids, selector=selector, by=by, reason=reason)
    return report if dry_run else apply(loom, keyring, report)


def _cutoff(older_than: timedelta) -> datetime:
    """Now minus ``older_than``; an age reaching before year 1 is a typo (``999999w``), refused
    as one rather than an ``OverflowError`` out of the arithmetic."""
    try:
        return datetime.now(UTC) - older_than
    except OverflowError:
        raise RetentionPolicyError(
            f"--older-than {describe_age(older_than)} reaches before the calendar begins: a "
            "retention period is years, not millennia (ten years is 3650d)"
        ) from None


def _at(cutoff: datetime) -> str:
    return cutoff.isoformat(timespec="seconds")


def _aged_resolver(kind: str) -> AgedResolver:
    """The ``loom.retention`` entry point that selects ``kind`` (a scope's documents, a
    memory's keys) by age."""
    entry_point = installed_named(RETENTION_KINDS, kind)
    if entry_point is not None:
        resolver: AgedResolver = entry_point.load()
        return resolver
    raise ErasureSubjectError(
        f"no installed package selects {_AGED[kind]} by age: install loom-replay with the "
        f"package that writes them (the {RETENTION_KINDS!r} entry point {kind!r} names it); "
        "nothing was written"
    )


__all__ = ["parse_age", "retain"]
