"""Negative controls of the three conformance kits: backends that each break one rule fail
the clause written for it.

A review wrote backends that break one rule each and found kits that let them pass (ADR 0020,
amended 6 Dec). These are the ones that pin the clauses added then: a log whose
``insert_rows`` keeps the rows before a conflict, that drops preconditions, whose ``verify``
never looks, or that half closes; a projection that writes each event in a transaction of its
own behind a copy of its page, that applies events twice or skips removals, or that keeps its
rows but not its position across a restart; a memory store that clears by ``LIKE``, folds ids,
keeps the caller's objects, or limits before it matches. Each calls the kit's clause directly
and expects it to fail; the real backends pass the same clauses in the kits' own test modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pytest

from loom_memory import InMemoryMemoryStore, MemoryEntry, SqliteMemoryStore
from loom_memory.conformance import MemoryStoreContract
from loom_memory.entry import encode_entries
from loom_memory.events import MemoryRemoved
from loom_memory.projection import (
    InProcessMemoryProjection,
    SqlMemoryProjection,
    apply_event,
    memory_event,
    opened_entries,
)
from loom_memory.store import MAX_SEARCH_LIMIT, check_ids, check_key, check_search
from loom_runtime import Loom
from loom_runtime.integrity import VerifyReport
from loom_runtime.log import EventLog, LogSettings, Precondition, Row, open_log
from loom_runtime.log_conformance import EventLogContract
from loom_runtime.projection_conformance import TrackedProjectionContract
from replay_tests.memory.test_projection_conformance import MEMORY, MemoryHarness
from replay_tests.runtime.test_log_conformance import tamper_with

FAILS = (AssertionError, pytest.fail.Exception)
"""How a clause fails: an assert, or pytest.raises finding no refusal."""

# -- the event log ---------------------------------------------------------------------------


class _Log:
    """The real SQLite log behind a proxy, so that a mutant overrides one verb."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def position(self) -> int:
        return self.inner.position


class _NonAtomicInsertRows(_Log):
    def insert_rows(
        self, rows: Sequence[Row], *, precondition: Precondition | None = None
    ) -> list[int]:
        return [p for row in rows for p in self.inner.insert_rows([row], precondition=precondition)]


class _PreconditionIgnored(_Log):
    def append(
        self, stream: Any, *, expected_version: int, events: Any, precondition: Any = None
    ) -> list[int]:
        return self.inner.append(stream, expected_version=expected_version, events=events)


class _VerifyAlwaysOk(_Log):
    def verify(self, *, anchor: Any = None, progress: Any = None) -> VerifyReport:
        return VerifyReport(checked=len(list(self.inner.notifications())))


class _HalfClosed(_Log):
    """Refuses after close only the uses the kit once tried: append, position, events."""

    closed = False

    def close(self) -> None:
        self.closed = True

    def append(self, *args: Any, **kwargs: Any) -> list[int]:
        self._refuse()
        return self.inner.append(*args, **kwargs)

    def events(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._refuse()
        return self.inner.events(*args, **kwargs)

    @property
    def position(self) -> int:
        self._refuse()
        return self.inner.position

    def _refuse(self) -> None:
        from loom_runtime.errors import LoomClosedError

        if self.closed:
            raise LoomClosedError("closed")


@pytest.mark.parametrize(
    ("mutant", "clause"),
    [
        (_NonAtomicInsertRows, "test_inserting_a_taken_version_is_refused_whole"),
        (_PreconditionIgnored, "test_a_false_precondition_refuses_every_write_whole"),
        (_VerifyAlwaysOk, "test_verify_holds_the_log_to_an_anchor"),
        (_HalfClosed, "test_a_closed_log_refuses_every_use_and_closes_again_quietly"),
    ],
)
def test_the_log_kit_fails_a_broken_log(sqlite_url: str, mutant: type[_Log], clause: str) -> None:
    """Each broken log fails the clause written for its rule."""
    inner = open_log(LogSettings(sqlite_url))
    try:
        with pytest.raises(FAILS):
            getattr(EventLogContract(), clause)(mutant(inner))
    finally:
        inner.close()


def test_the_log_kit_sees_an_edit_a_blind_verify_misses(sqlite_url: str) -> None:
    """With the tamper fixture, a verify that never looks fails the clause of an edited row."""
    inner = open_log(LogSettings(sqlite_url))
    try:
        with pytest.raises(FAILS):
            EventLogContract().test_verify_reports_an_event_edited_behind_the_log(
                _VerifyAlwaysOk(inner),  # type: ignore[arg-type]
                tamper_with(inner),
            )
    finally:
        inner.close()


# -- tracked projections -----------------------------------------------------------------------


class _Wrapped:
    """A real projection whose pages pass through ``transform`` first."""

    def __init__(
        self, inner: InProcessMemoryProjection, transform: Callable[[list[Any]], list[Any]]
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.topics = inner.topics
        self.store = inner.store
        self._transform = transform

    def position(self) -> int:
        return self.inner.position()

    def reset(self) -> None:
        self.inner.reset()

    def apply(self, events: Sequence[tuple[int, Any]], *, after: int, upto: int) -> bool:
        return self.inner.apply(self._transform(list(events)), after=after, upto=upto)


def _twice(page: list[Any]) -> list[Any]:
    return [pair for pair in page for _ in range(2)]


def _without_removals(page: list[Any]) -> list[Any]:
    return [(p, event) for p, event in page if not isinstance(event, MemoryRemoved)]


class _NonAtomicSql(SqlMemoryProjection):
    """Copies its page, then commits each event and the position on their own."""

    def apply(self, events: Sequence[tuple[int, Any]], *, after: int, upto: int) -> bool:
        page = list(events)
        if self.position() != after:
            return False
        for _, event in page:
            mine = memory_event(event, self.memory)
            if mine is not None:
                apply_event(self.store, mine, opened_entries(None, mine))
        with self.engine.begin() as conn:
            self._set_position(conn, upto)
        return True


class _Reopening(MemoryHarness):
    """A harness whose projection keeps its rows in SQLite and its position in memory."""

    def reopen(self) -> None:
        self._projection = _volatile_position(self.loom)


def _volatile_position(loom: Loom) -> InProcessMemoryProjection:
    store = SqliteMemoryStore(loom.log.engine, table_prefix="volatile_")
    return InProcessMemoryProjection(store, memory=MEMORY)  # type: ignore[arg-type]


def _in_process() -> InProcessMemoryProjection:
    return InProcessMemoryProjection(InMemoryMemoryStore(), memory=MEMORY)


@pytest.mark.parametrize(
    ("make", "clause"),
    [
        (
            lambda loom: MemoryHarness(
                loom,
                _NonAtomicSql(
                    SqliteMemoryStore(loom.log.engine, table_prefix="na_"), memory=MEMORY
                ),
            ),
            "test_a_crash_mid_page_changes_nothing",
        ),
        (
            lambda loom: MemoryHarness(loom, _Wrapped(_in_process(), _twice)),
            "test_the_read_model_is_the_one_expected",
        ),
        (
            lambda loom: MemoryHarness(loom, _Wrapped(_in_process(), _without_removals)),
            "test_the_read_model_is_the_one_expected",
        ),
        (
            lambda loom: _Reopening(loom, _volatile_position(loom)),
            "test_a_reopened_projection_keeps_its_position_and_rows",
        ),
    ],
    ids=["non-atomic-sql", "applies-twice", "skips-removals", "volatile-position"],
)
def test_the_projection_kit_fails_a_broken_projection(
    sqlite_url: str, make: Callable[[Loom], MemoryHarness], clause: str
) -> None:
    """Each broken projection fails the clause written for its rule."""
    with Loom(sqlite_url) as loom:
        harness = make(loom)
        with pytest.raises(FAILS):
            _call(getattr(TrackedProjectionContract(), clause), harness)


# -- memory stores -----------------------------------------------------------------------------


class _ClearByLike(InMemoryMemoryStore):
    """clear deletes WHERE key LIKE :key, as SQLite would: wildcards and case reach others."""

    def clear(self, key: str) -> None:
        pattern = "".join(
            ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in check_key(key)
        )
        like = re.compile(pattern, re.IGNORECASE | re.DOTALL)
        for stored in [k for k in self._rows if like.fullmatch(k)]:
            del self._rows[stored]


class _RemoveFoldsIds(InMemoryMemoryStore):
    """remove compares ids case-folded and stripped."""

    def remove(self, key: str, ids: Iterable[str]) -> None:
        wanted = {i.strip().casefold() for i in check_ids(ids)}
        rows = self._rows.get(check_key(key), [])
        self._rows[key] = [
            r for r in rows if r.entry_id is None or r.entry_id.strip().casefold() not in wanted
        ]


class _KeepsReferences:
    """A required-only store holding the caller's objects."""

    def __init__(self) -> None:
        self._lists: dict[str, list[MemoryEntry]] = {}

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        encode_entries(entries)
        self._lists.setdefault(check_key(key), []).extend(entries)

    def read(self, key: str) -> list[MemoryEntry]:
        return self._lists.get(check_key(key), [])

    def clear(self, key: str) -> None:
        self._lists.pop(check_key(key), None)


class _LimitBeforeMatch(InMemoryMemoryStore):
    """search keeps the key's first ``limit`` entries, then matches among them."""

    def search(self, key: str, query: str, *, limit: int = 10) -> list[MemoryEntry]:
        _, clamped = check_search(key, query, limit, self.tokenizer)
        window = self.read(key)[:clamped]
        return [hit for hit in super().search(key, query, limit=MAX_SEARCH_LIMIT) if hit in window]


@pytest.mark.parametrize(
    ("mutant", "clause"),
    [
        (_ClearByLike, "test_clear_empties_only_its_own_key_among_similar_ones"),
        (_RemoveFoldsIds, "test_remove_matches_each_id_exactly"),
        (_KeepsReferences, "test_a_callers_edits_do_not_change_what_is_remembered"),
        (_LimitBeforeMatch, "test_search_respects_the_limit"),
    ],
)
def test_the_memory_kit_fails_a_broken_store(mutant: Callable[[], Any], clause: str) -> None:
    """Each broken store fails the clause written for its rule (a clause of an optional verb
    takes the store again for the capability)."""
    with pytest.raises(FAILS):
        _call(getattr(MemoryStoreContract(), clause), mutant())


def _call(clause: Callable[..., None], subject: object) -> None:
    """A kit clause called with ``subject`` for each of its fixtures: the store or harness,
    and the same object again for a capability's fixture (``removing``, ``expecting``...)."""
    clause(*[subject] * (clause.__code__.co_argcount - 1))  # less self
