"""`TieredMemory`: named tiers with TTL and size limits, and recall by recency or relevance.

A tier (working, episodic, semantic, procedural, or one of your own) is a policy over the
scopes stored in it: entries older than ``ttl`` are expired, and only the last
``max_entries`` appended are kept (the store's list order, not the entries' timestamps).
Each (tier, scope) is one key of the underlying store (:mod:`loom_memory.keys` defines it
and every other name this module stores under).

Eviction is a rewrite of the whole list, and the rewrite is where memory gets destroyed:
as clear-then-append, a crash between the two loses the scope. So it uses ``replace`` (one
atomic step) whenever the store has it. A store with only the required verbs gets a journal:
the surviving list is first appended under the scope's journal key, then the scope is
cleared and re-appended, then the journal is cleared; every access to a scope first finishes
a journal left by a crash, so the scope is never lost, only its eviction replayed.

Expiry is lazy: :meth:`TieredMemory.read` drops expired entries and writes the shorter list
back. :meth:`TieredMemory.search` applies TTL to its hits too (the path that skips the list
must not be the one that leaks stale context) but never writes back: a search sees an
arbitrary subset, and persisting it would delete everything the query did not match. A store
without ``search`` is refused with :class:`SearchNotSupportedError`; falling back to ``read``
would look like retrieval and be undetectable downstream.

Relevance recall ranks over a corpus that grows, so its result for one question differs
between a run and its replay; :meth:`TieredMemory.recall_relevant` therefore REQUIRES a
``decide`` (``ctx.decide``) and records the hits. Recency recall re-reads a list the caller
mostly controls, so its ``decide`` is optional. A caller outside a flow that wants an
unrecorded relevance search calls :meth:`TieredMemory.search`, where the bypass is visible.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from loom_memory.entry import MemoryEntry
from loom_memory.errors import (
    InvalidArgumentError,
    InvalidLimitError,
    SearchNotSupportedError,
    UnknownTierError,
)
from loom_memory.keys import journal_key, recall_key, recall_relevant_key, tier_key
from loom_memory.store import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    MemoryStore,
    SupportsReplace,
    SupportsSearch,
    check_key,
    check_search,
)
from loom_runtime import Decide

_TIER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """One tier's policy: how long an entry lives and how many a scope keeps.

    ``ttl=None`` never expires and ``max_entries=None`` never trims (semantic and procedural
    memory accumulate; only their relevance recall is useful).
    """

    name: str
    ttl: timedelta | None = None
    max_entries: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TIER_NAME.fullmatch(self.name):
            raise InvalidArgumentError(
                f"tier name must be 1-64 letters, digits, '_', '.' or '-', got {self.name!r}",
                parameter="name",
            )
        if self.ttl is not None and (
            not isinstance(self.ttl, timedelta) or self.ttl <= timedelta(0)
        ):
            raise InvalidArgumentError(
                f"tier {self.name!r}: ttl must be a positive timedelta or None, got {self.ttl!r}",
                parameter="ttl",
            )
        if self.max_entries is not None and (
            isinstance(self.max_entries, bool)
            or not isinstance(self.max_entries, int)
            or self.max_entries < 1
        ):
            raise InvalidArgumentError(
                f"tier {self.name!r}: max_entries must be an int >= 1 or None, "
                f"got {self.max_entries!r}",
                parameter="max_entries",
            )

    def keeps(self, entries: Sequence[MemoryEntry], now: datetime) -> list[MemoryEntry]:
        """The entries this tier keeps at ``now``: unexpired, then the newest ``max_entries``."""
        alive = self.unexpired(entries, now)
        if self.max_entries is not None:
            alive = alive[-self.max_entries :]
        return alive

    def unexpired(self, entries: Iterable[MemoryEntry], now: datetime) -> list[MemoryEntry]:
        """The entries younger than ``ttl`` at ``now`` (all of them without a ttl)."""
        if self.ttl is None:
            return list(entries)
        return [entry for entry in entries if now - entry.timestamp < self.ttl]


DEFAULT_TIERS = (
    Tier(name="working", ttl=timedelta(hours=1), max_entries=50),
    Tier(name="episodic", ttl=timedelta(days=30), max_entries=1000),
    Tier(name="semantic"),
    Tier(name="procedural"),
)
"""A conversation's scratchpad, its history, and two accumulating tiers that never evict."""


def utc_now() -> datetime:
    """The default TTL clock: aware UTC now (freezegun pins it in tests)."""
    return datetime.now(UTC)


class TieredMemory:
    """Named tiers over one :class:`~loom_memory.store.MemoryStore`.

    By default (:data:`DEFAULT_TIERS`): ``working`` keeps a scope's last 50 entries for an
    hour, ``episodic`` its last 1,000 for 30 days, ``semantic`` and ``procedural`` keep
    everything. Expiry and trimming happen when a scope is read or remembered into (the module
    docstring says why a search never writes back); relevance recall needs ``decide``.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        tiers: Iterable[Tier] = DEFAULT_TIERS,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        """Keep ``tiers`` in ``store``; ``clock`` returns the aware "now" TTL is measured at."""
        self.store = store
        self.tiers: dict[str, Tier] = {}
        for tier in tiers:
            if tier.name in self.tiers:
                raise InvalidArgumentError(
                    f"tier {tier.name!r} is declared twice", parameter="tiers"
                )
            self.tiers[tier.name] = tier
        self._clock = clock

    def remember(self, tier: str, scope: str, entries: Sequence[MemoryEntry]) -> None:
        """Append ``entries`` to the scope, then evict what the tier no longer keeps."""
        policy, key = self._locate(tier, scope)
        now = self._now()  # before anything is written: a clock that cannot say is refused
        self._finish_rewrite(key)
        self.store.append(key, entries)
        if policy.ttl is not None or policy.max_entries is not None:
            current = self.store.read(key)
            kept = policy.keeps(current, now)
            if len(kept) != len(current):
                self._rewrite(key, kept)

    def _now(self) -> datetime:
        """The clock's now, refused unless it is an aware datetime (a naive one cannot be
        compared with the entries' aware timestamps: ``clock=datetime.now`` is the slip)."""
        now = self._clock()
        if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
            raise InvalidArgumentError(
                f"clock must return an aware datetime (such as datetime.now(UTC)), not {now!r}",
                parameter="clock",
            )
        return now

    def read(self, tier: str, scope: str) -> list[MemoryEntry]:
        """The scope's unexpired entries in append order; expired ones are dropped for good."""
        policy, key = self._locate(tier, scope)
        self._finish_rewrite(key)
        current = self.store.read(key)
        alive = policy.unexpired(current, self._now())
        if len(alive) != len(current):
            self._rewrite(key, alive)
        return alive

    def recall(
        self, tier: str, scope: str, n: int, *, decide: Decide | None = None
    ) -> list[MemoryEntry]:
        """The newest ``n`` unexpired entries, oldest first; recorded when ``decide`` is given."""
        _check_n(n)
        self._locate(tier, scope)
        if decide is None:
            return self.read(tier, scope)[-n:]
        return decide(
            recall_key(tier, scope, n),
            lambda: self.read(tier, scope)[-n:],
            input={"tier": tier, "scope": scope, "n": n},
            type=list[MemoryEntry],
            kind="memory",
        )

    def search(
        self, tier: str, scope: str, query: str, *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> list[MemoryEntry]:
        """The best ``limit`` unexpired entries matching any term of ``query``; never writes.

        A query without terms (only punctuation or stop words) returns ``[]``. Expired hits are
        dropped after ranking, so the store is asked for :data:`MAX_SEARCH_LIMIT` hits when the
        tier has a ttl; more expired matches than that can leave fewer than ``limit`` results.
        """
        policy, key = self._locate(tier, scope)
        check_search(key, query, limit)
        if not isinstance(self.store, SupportsSearch):
            raise SearchNotSupportedError(
                f"{type(self.store).__name__} has no search, so tier {tier!r} cannot be searched "
                "by relevance: use a store with search (e.g. SqliteMemoryStore), or recall by "
                "recency with recall()"
            )
        self._finish_rewrite(key)
        asked = limit if policy.ttl is None else MAX_SEARCH_LIMIT
        hits = self.store.search(key, query, limit=asked)
        return policy.unexpired(hits, self._now())[:limit]

    def recall_relevant(
        self,
        tier: str,
        scope: str,
        query: str,
        *,
        decide: Decide,
        n: int = DEFAULT_SEARCH_LIMIT,
    ) -> list[MemoryEntry]:
        """The ``n`` most relevant unexpired entries, recorded as a ``kind="memory"`` decision.

        ``decide`` is required: the hits of a relevance search change as the tier grows, so an
        unrecorded recall would make a replay run a different prompt than the run did.
        """
        _check_n(n)
        if not callable(decide):
            raise InvalidArgumentError(
                "recall_relevant needs decide=ctx.decide: a relevance search's hits change as "
                "the tier grows, so it is recorded (search() is the unrecorded one)",
                parameter="decide",
            )
        _, key = self._locate(tier, scope)
        check_search(key, query, n)
        return decide(
            recall_relevant_key(tier, scope),
            lambda: self.search(tier, scope, query, limit=n),
            input={"tier": tier, "scope": scope, "query": query, "n": n},
            type=list[MemoryEntry],
            kind="memory",
        )

    def _locate(self, tier: str, scope: str) -> tuple[Tier, str]:
        policy = self.tiers.get(tier) if isinstance(tier, str) else None
        if policy is None:
            raise UnknownTierError(
                f"no tier {tier!r}: this memory has {sorted(self.tiers)}", parameter="tier"
            )
        return policy, tier_key(tier, check_key(scope))

    def _rewrite(self, key: str, entries: list[MemoryEntry]) -> None:
        """Make ``entries`` the list at ``key`` so that a crash midway loses nothing."""
        if isinstance(self.store, SupportsReplace):
            self.store.replace(key, entries)
            return
        journal = journal_key(key)
        self.store.append(journal, entries)
        self._finish_rewrite(key, pending=entries)

    def _finish_rewrite(self, key: str, *, pending: list[MemoryEntry] | None = None) -> None:
        """Complete a journalled rewrite of ``key`` (one a crash interrupted, if none given)."""
        if isinstance(self.store, SupportsReplace):
            return  # rewrites were atomic: there is never a journal
        journal = journal_key(key)
        if pending is None:
            pending = self.store.read(journal)
            if not pending:
                return
        self.store.clear(key)
        self.store.append(key, pending)
        self.store.clear(journal)


def _check_n(n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise InvalidLimitError(n)
