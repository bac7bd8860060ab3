"""TieredMemory: TTL and size eviction that never loses a scope, and recall recorded by decide.

Which verbs a rewrite or a search called is invisible in the resulting entries, so these tests
record every store call and assert on them (ADR 0009: an eviction rewrite that clears a scope
and re-appends it must never lose the scope).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

from loom_memory import (
    DEFAULT_SEARCH_LIMIT,
    EntryNotSerialisableError,
    EventSourcedMemory,
    InMemoryMemoryStore,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidLimitError,
    MemoryEntry,
    SearchNotSupportedError,
    SqliteMemoryStore,
    Tier,
    TieredMemory,
    UnknownTierError,
)
from loom_memory.keys import recall_relevant_key, tier_key
from loom_memory.tiers import DEFAULT_TIERS
from loom_runtime import DecisionInputChangedError, FlowContext, Loom

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
WRITES = frozenset({"append", "clear", "replace", "remove"})
KEY = "tier/working/s"


class RecordingStore:
    """The three required verbs over an in-memory store, each call logged as (verb, key)."""

    def __init__(self) -> None:
        self.inner = InMemoryMemoryStore()
        self.calls: list[tuple[str, str]] = []
        self.crash_on_append_after_clear = False

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        cleared_just_now = self.calls[-1:] == [("clear", key)]
        self.calls.append(("append", key))
        if self.crash_on_append_after_clear and cleared_just_now and entries:
            raise RuntimeError(f"injected crash between clear and append of {key!r}")
        self.inner.append(key, entries)

    def read(self, key: str) -> list[MemoryEntry]:
        self.calls.append(("read", key))
        return self.inner.read(key)

    def clear(self, key: str) -> None:
        self.calls.append(("clear", key))
        self.inner.clear(key)

    def writes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] in WRITES]


class ReplacingStore(RecordingStore):
    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        self.calls.append(("replace", key))
        self.inner.replace(key, entries)


class SearchingStore(ReplacingStore):
    def search(self, key: str, query: str, *, limit: int = DEFAULT_SEARCH_LIMIT) -> list[Any]:
        self.calls.append(("search", key))
        return self.inner.search(key, query, limit=limit)


class Clock:
    """An injectable clock that a test moves by hand."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class RecordingDecide:
    """A stand-in for ctx.decide that records each call and computes live."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self,
        key: str,
        compute: Callable[[], Any],
        *,
        input: object = None,
        type: Any = Any,
        kind: str | None = None,
    ) -> Any:
        self.calls.append({"key": key, "input": input, "type": type, "kind": kind})
        return compute()


def at(clock: Clock, *contents: str) -> list[MemoryEntry]:
    return [MemoryEntry(content=content, timestamp=clock.now) for content in contents]


def contents(entries: Iterable[MemoryEntry]) -> list[Any]:
    return [entry.content for entry in entries]


# -- tiers -----------------------------------------------------------------------------------


def test_the_default_tiers_are_the_four_named_ones() -> None:
    """working and episodic evict; semantic and procedural accumulate."""
    tiers = {tier.name: tier for tier in DEFAULT_TIERS}
    assert list(tiers) == ["working", "episodic", "semantic", "procedural"]
    assert tiers["semantic"].ttl is None and tiers["semantic"].max_entries is None
    assert tiers["working"].ttl is not None and tiers["working"].max_entries is not None


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "a/b"},
        {"name": ""},
        {"name": "t", "ttl": timedelta(0)},
        {"name": "t", "ttl": 60},
        {"name": "t", "max_entries": 0},
        {"name": "t", "max_entries": True},
    ],
)
def test_a_bad_tier_is_refused(fields: dict[str, Any]) -> None:
    """A tier name with '/', a non-positive ttl or max_entries raise InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        Tier(**fields)


def test_a_tier_declared_twice_is_refused() -> None:
    """Two tiers with one name would silently shadow each other."""
    with pytest.raises(InvalidArgumentError, match="twice"):
        TieredMemory(InMemoryMemoryStore(), tiers=[Tier(name="t"), Tier(name="t", ttl=None)])


def test_user_defined_tiers_are_separate_scopes() -> None:
    """The same scope in two tiers is two lists."""
    memory = TieredMemory(InMemoryMemoryStore(), tiers=[Tier(name="a"), Tier(name="b")])
    memory.remember("a", "s", [MemoryEntry(content="in a")])
    memory.remember("b", "s", [MemoryEntry(content="in b")])
    assert contents(memory.read("a", "s")) == ["in a"]
    assert contents(memory.read("b", "s")) == ["in b"]


# -- TTL -------------------------------------------------------------------------------------


def test_entries_expire_after_the_ttl_under_a_frozen_clock() -> None:
    """With the default clock: alive before the ttl, gone (and dropped from the store) after."""
    store = ReplacingStore()
    memory = TieredMemory(store, tiers=[Tier(name="working", ttl=timedelta(hours=1))])
    with freeze_time("2030-01-01 12:00:00", tz_offset=0) as frozen:
        memory.remember("working", "s", [MemoryEntry(content="a")])
        frozen.tick(timedelta(minutes=30))
        memory.remember("working", "s", [MemoryEntry(content="b")])
        frozen.tick(timedelta(minutes=29))
        assert contents(memory.read("working", "s")) == ["a", "b"]
        assert store.writes() == [("append", KEY), ("append", KEY)]
        frozen.tick(timedelta(minutes=1))  # "a" is exactly one hour old
        assert contents(memory.read("working", "s")) == ["b"]
    assert store.writes()[-1] == ("replace", KEY)
    assert contents(store.inner.read(KEY)) == ["b"]


def test_the_ttl_clock_is_injectable() -> None:
    """TTL is measured at clock(), not at the wall clock."""
    clock = Clock()
    memory = TieredMemory(
        InMemoryMemoryStore(), tiers=[Tier(name="working", ttl=timedelta(seconds=10))], clock=clock
    )
    memory.remember("working", "s", at(clock, "a"))
    clock.now += timedelta(seconds=9)
    assert contents(memory.read("working", "s")) == ["a"]
    clock.now += timedelta(seconds=1)
    assert memory.read("working", "s") == []


# -- max_entries and the eviction rewrite ---------------------------------------------------


def test_max_entries_keeps_the_newest_and_rewrites_with_replace() -> None:
    """Over max_entries the oldest go; the rewrite is one replace, never clear + append."""
    store = ReplacingStore()
    memory = TieredMemory(store, tiers=[Tier(name="working", max_entries=2)])
    for word in ("a", "b", "c"):
        memory.remember("working", "s", [MemoryEntry(content=word)])
    assert contents(memory.read("working", "s")) == ["b", "c"]
    assert store.writes() == [("append", KEY)] * 3 + [("replace", KEY)]


def test_a_store_without_replace_rewrites_through_a_journal() -> None:
    """Fallback order: journal the kept list, clear, re-append, clear the journal."""
    store = RecordingStore()
    memory = TieredMemory(store, tiers=[Tier(name="working", max_entries=1)])
    memory.remember("working", "s", [MemoryEntry(content="a")])
    memory.remember("working", "s", [MemoryEntry(content="b")])
    journal = "rewrite/working/s"
    assert store.writes()[-4:] == [
        ("append", journal),
        ("clear", KEY),
        ("append", KEY),
        ("clear", journal),
    ]
    assert contents(memory.read("working", "s")) == ["b"]
    assert store.inner.read(journal) == []


def test_a_crash_between_clear_and_append_does_not_lose_the_scope() -> None:
    """The fallback dies after clear; the next access finishes the rewrite from the journal."""
    store = RecordingStore()
    memory = TieredMemory(store, tiers=[Tier(name="working", max_entries=2)])
    memory.remember("working", "s", [MemoryEntry(content="a"), MemoryEntry(content="b")])
    store.crash_on_append_after_clear = True
    with pytest.raises(RuntimeError, match="between clear and append"):
        memory.remember("working", "s", [MemoryEntry(content="c")])
    assert store.inner.read(KEY) == []  # the crash really hit between the two calls
    store.crash_on_append_after_clear = False
    restarted = TieredMemory(store, tiers=[Tier(name="working", max_entries=2)])
    assert contents(restarted.read("working", "s")) == ["b", "c"]
    assert store.inner.read("rewrite/working/s") == []


# -- recall by recency -----------------------------------------------------------------------


def test_recall_returns_the_newest_n_oldest_first() -> None:
    """recall(n) is the tail of the scope in append order."""
    memory = TieredMemory(InMemoryMemoryStore())
    memory.remember("episodic", "s", [MemoryEntry(content=w) for w in "abcd"])
    assert contents(memory.recall("episodic", "s", 2)) == ["c", "d"]
    assert contents(memory.recall("episodic", "s", 10)) == ["a", "b", "c", "d"]


def test_recall_with_decide_is_a_recorded_memory_decision() -> None:
    """Given decide, recall goes through it with kind='memory' and its arguments as input."""
    memory = TieredMemory(InMemoryMemoryStore())
    memory.remember("episodic", "s", [MemoryEntry(content="a")])
    decide = RecordingDecide()
    assert contents(memory.recall("episodic", "s", 3, decide=decide)) == ["a"]
    [call] = decide.calls
    assert call["kind"] == "memory" and call["type"] == list[MemoryEntry]
    assert call["input"] == {"tier": "episodic", "scope": "s", "n": 3}
    assert all(part in call["key"] for part in ("episodic", "s", "3"))


# -- recall by relevance ---------------------------------------------------------------------


def test_recall_relevant_requires_decide_as_a_keyword() -> None:
    """decide is keyword-only with no default: a relevance recall is always recorded."""
    parameter = inspect.signature(TieredMemory.recall_relevant).parameters["decide"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.default is inspect.Parameter.empty
    memory = TieredMemory(InMemoryMemoryStore())
    with pytest.raises(TypeError, match="decide"):
        memory.recall_relevant("semantic", "s", "deploy")  # type: ignore[call-arg]


def test_recall_relevant_keys_on_tier_and_scope_with_the_query_as_input() -> None:
    """The decision key names tier and scope only; query and n are its input; kind 'memory'."""
    memory = TieredMemory(InMemoryMemoryStore())
    memory.remember("semantic", "runbooks", [MemoryEntry(content="restart the deploy")])
    decide = RecordingDecide()
    hits = memory.recall_relevant("semantic", "runbooks", "deploy", decide=decide, n=4)
    assert contents(hits) == ["restart the deploy"]
    [call] = decide.calls
    assert call["kind"] == "memory"
    assert call["key"] == recall_relevant_key("semantic", "runbooks")
    assert call["input"] == {"tier": "semantic", "scope": "runbooks", "query": "deploy", "n": 4}


def test_a_changed_recall_query_is_a_changed_input_with_a_diff(tmp_path: Path) -> None:
    """Replaying a flow whose recall query changed reports DecisionInputChangedError."""
    memory = TieredMemory(InMemoryMemoryStore())
    memory.remember("semantic", "kb", [MemoryEntry(content="deploy with the blue button")])
    question = ["deploy"]
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("answer")
        def answer(ctx: FlowContext) -> list[Any]:
            return contents(
                memory.recall_relevant("semantic", "kb", question[0], decide=ctx.decide)
            )

        run = loom.run("answer")
        question[0] = "blue button"
        [divergence] = loom.replay(run.execution_id).divergences
    assert isinstance(divergence, DecisionInputChangedError)
    assert "deploy" in divergence.diff and "blue button" in divergence.diff


def test_a_recall_query_holding_a_secret_is_recalled_and_recorded_redacted(
    tmp_path: Path,
) -> None:
    """A query quoting a password is recalled, not refused; the log holds it redacted."""
    memory = TieredMemory(InMemoryMemoryStore())
    memory.remember("semantic", "kb", [MemoryEntry(content="reset the password in the portal")])
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("answer")
        def answer(ctx: FlowContext) -> list[Any]:
            query = "password=Hunter2x9 portal"
            return contents(memory.recall_relevant("semantic", "kb", query, decide=ctx.decide))

        run = loom.run("answer")
        assert run.output == ["reset the password in the portal"]
        assert loom.replay(run.execution_id).identical
        [decision] = loom.execution(run.execution_id).decisions.values()
    assert b"Hunter2x9" not in bytes(decision.input)


def test_a_replay_recalls_what_the_run_recalled_though_memory_grew(tmp_path: Path) -> None:
    """Recorded through ctx.decide, the hits of a run replay unchanged after new entries."""
    store = InMemoryMemoryStore()
    memory = TieredMemory(store)
    memory.remember("semantic", "kb", [MemoryEntry(content="deploy with the blue button")])
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("answer")
        def answer(ctx: FlowContext) -> list[Any]:
            hits = memory.recall_relevant("semantic", "kb", "deploy", decide=ctx.decide)
            recent = memory.recall("semantic", "kb", 1, decide=ctx.decide)
            return contents(hits) + contents(recent)

        run = loom.run("answer")
        memory.remember("semantic", "kb", [MemoryEntry(content="deploy deploy deploy now")])
        assert contents(memory.search("semantic", "kb", "deploy")) != [
            "deploy with the blue button"
        ]
        replayed = loom.replay(run.execution_id)
        assert replayed.identical and replayed.output == run.output
        kinds = {d.kind for d in loom.execution(run.execution_id).decisions.values()}
        assert kinds == {"memory"}


# -- search ----------------------------------------------------------------------------------


def test_search_on_a_store_without_search_fails_loudly() -> None:
    """No silent fallback to read: SearchNotSupportedError, and the store is not touched."""
    store = ReplacingStore()
    memory = TieredMemory(store)
    with pytest.raises(SearchNotSupportedError, match="ReplacingStore"):
        memory.search("semantic", "s", "deploy")
    with pytest.raises(SearchNotSupportedError):
        memory.recall_relevant("semantic", "s", "deploy", decide=RecordingDecide())
    assert store.calls == []


def test_search_drops_expired_hits_and_writes_nothing_back() -> None:
    """Expired hits are filtered; the partial view is never persisted (zero writes)."""
    clock = Clock()
    store = SearchingStore()
    memory = TieredMemory(store, tiers=[Tier(name="working", ttl=timedelta(hours=1))], clock=clock)
    memory.remember("working", "s", at(clock, "deploy old"))
    clock.now += timedelta(minutes=40)
    memory.remember("working", "s", at(clock, "deploy new", "unrelated"))
    clock.now += timedelta(minutes=30)
    writes_before = len(store.writes())
    assert contents(memory.search("working", "s", "deploy")) == ["deploy new"]
    assert len(store.writes()) == writes_before
    assert contents(store.inner.read(KEY)) == ["deploy old", "deploy new", "unrelated"]


def test_search_respects_the_limit_after_dropping_expired_hits() -> None:
    """limit counts unexpired hits: expired ones do not take a slot."""
    clock = Clock()
    memory = TieredMemory(
        InMemoryMemoryStore(), tiers=[Tier(name="working", ttl=timedelta(hours=1))], clock=clock
    )
    memory.remember("working", "s", at(clock, "deploy deploy deploy"))
    clock.now += timedelta(minutes=59)
    memory.remember("working", "s", at(clock, "deploy a", "deploy b"))
    clock.now += timedelta(minutes=2)
    assert sorted(contents(memory.search("working", "s", "deploy", limit=2))) == [
        "deploy a",
        "deploy b",
    ]


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda m: m.remember("nope", "s", []), id="remember"),
        pytest.param(lambda m: m.read("nope", "s"), id="read"),
        pytest.param(lambda m: m.recall("nope", "s", 1), id="recall"),
        pytest.param(lambda m: m.search("nope", "s", "q"), id="search"),
        pytest.param(lambda m: m.read(3, "s"), id="non-string-tier"),
    ],
)
def test_an_unknown_tier_is_refused(call: Callable[[TieredMemory], object]) -> None:
    """A tier that was not configured raises UnknownTierError naming the configured ones."""
    store = SearchingStore()
    with pytest.raises(UnknownTierError, match="working"):
        call(TieredMemory(store))
    assert store.calls == []


@pytest.mark.parametrize("scope", [3, None, b"s", ("s",)])
def test_a_non_string_scope_is_refused_and_nothing_is_stored(scope: Any) -> None:
    """A scope is part of a key, so it must be a str; nothing is written."""
    store = SearchingStore()
    memory = TieredMemory(store)
    with pytest.raises(InvalidKeyError):
        memory.remember("working", scope, [MemoryEntry(content="x")])
    with pytest.raises(InvalidKeyError):
        memory.recall_relevant("working", scope, "x", decide=RecordingDecide())
    assert store.calls == []


@pytest.mark.parametrize("n", [0, -1, True, 1.5])
def test_a_non_positive_n_is_refused_before_deciding(n: Any) -> None:
    """recall and recall_relevant refuse n <= 0 before recording anything."""
    memory = TieredMemory(InMemoryMemoryStore())
    decide = RecordingDecide()
    with pytest.raises(InvalidLimitError):
        memory.recall("working", "s", n, decide=decide)
    with pytest.raises(InvalidLimitError):
        memory.recall_relevant("working", "s", "q", decide=decide, n=n)
    with pytest.raises(InvalidLimitError):
        memory.search("working", "s", "q", limit=n)
    assert decide.calls == []


def test_an_unserialisable_entry_is_refused_and_nothing_is_stored() -> None:
    """remember validates the whole batch before the store keeps any of it."""
    store = ReplacingStore()
    memory = TieredMemory(store)
    memory.remember("working", "s", [MemoryEntry(content="kept")])
    with pytest.raises(EntryNotSerialisableError):
        memory.remember("working", "s", [MemoryEntry(content="x"), MemoryEntry(content={1: 2})])
    assert contents(memory.read("working", "s")) == ["kept"]


@pytest.mark.parametrize("query", ["?!", "the of and", "   "])
def test_a_query_without_terms_recalls_nothing(query: str) -> None:
    """Only punctuation or stop words: the documented result is [] (recorded as such)."""
    memory = TieredMemory(InMemoryMemoryStore())
    memory.remember("semantic", "s", [MemoryEntry(content="the of and ?!")])
    assert memory.search("semantic", "s", query) == []
    decide = RecordingDecide()
    assert memory.recall_relevant("semantic", "s", query, decide=decide) == []
    assert len(decide.calls) == 1


# -- over the event-sourced store -----------------------------------------------------------


def test_tiered_eviction_over_an_event_sourced_store_rebuilds_identically(
    tmp_path: Path,
) -> None:
    """Eviction is a logged replace, so a rebuilt SQLite store holds exactly the kept entries."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        store = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
        memory = TieredMemory(store, tiers=[Tier(name="working", max_entries=2)])
        for word in ("alpha", "beta", "gamma"):
            memory.remember("working", "s", [MemoryEntry(content=word)])
        store.rebuild()
        assert contents(store.read(KEY)) == ["beta", "gamma"]
        assert contents(memory.search("working", "s", "alpha beta")) == ["beta"]


def test_a_clock_that_is_not_aware_is_refused_before_anything_is_written() -> None:
    """``clock=datetime.now`` (naive) is a likely slip: remember appended first, then failed
    on the TTL arithmetic with a bare TypeError, leaving the tier over its max_entries, and
    every later read of the scope raised the same. Refused, typed, with nothing written."""
    store = InMemoryMemoryStore()
    tier = Tier(name="working", ttl=timedelta(hours=1), max_entries=2)
    memory = TieredMemory(store, tiers=[tier], clock=datetime.now)
    entries = [MemoryEntry(content=text, id=text) for text in ("a", "b", "c")]
    with pytest.raises(InvalidArgumentError, match="clock"):
        memory.remember("working", "s", entries)
    assert store.read(tier_key("working", "s")) == []
