"""Kill points: SIGKILL this process at the N-th time it reaches a named place inside loom.

Loom is not edited to be killable. A worker arms ONE point before it runs a scenario: the
function behind the point is replaced (on its class or module, where loom looks it up) by a
wrapper that counts calls and sends SIGKILL to its own process before the call (``before``)
or after it returned (``after``). SIGKILL is the crash that matters: no ``finally``, no
``atexit``, no rollback other than the database's own, exactly like a power cut of one worker.

:data:`CATALOGUE` is the list of distinct kill points the harness test runs: a point, the
occurrence to kill at, the scenario that reaches it and the area it exercises. The test
asserts that every armed point really killed its worker, so an entry that stopped being
reached (because loom's internals moved) fails loudly instead of silently testing nothing.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec

When = Literal["before", "after"]


class Hook(msgspec.Struct, frozen=True):
    """Where a point lives: ``module:Class`` (or ``module``), the attribute, and when to kill."""

    owner: str
    attribute: str
    when: When


POINTS: Final[dict[str, Hook]] = {
    # put_doc and sync: deciding, and appending the decision to the corpus stream
    "put_doc.enter": Hook(
        "loom_knowledge.corpus.knowledge_base:KnowledgeBase", "put_doc", "before"
    ),
    "sync.enter": Hook("loom_knowledge.corpus.knowledge_base:KnowledgeBase", "sync", "before"),
    "chunker": Hook("loom_knowledge.domain.chunking:ParagraphPacker", "__call__", "before"),
    "reconcile": Hook("loom_knowledge.corpus.knowledge_base", "reconcile", "before"),
    "stream.append.before": Hook(
        "loom_runtime.storage.application:EventsourcingLog", "append", "before"
    ),
    "stream.append.after": Hook(
        "loom_runtime.storage.application:EventsourcingLog", "append", "after"
    ),
    # projection catch-up: entering, inside a page's transaction, around the tracking write,
    # and between pages (after one page committed, before the next is read)
    "catch_up.enter": Hook("loom_knowledge.corpus.knowledge_base", "catch_up", "before"),
    "page.before": Hook("loom_runtime.projection:SQLProjection", "apply", "before"),
    "page.committed": Hook("loom_runtime.projection:SQLProjection", "apply", "after"),
    "handle.before": Hook("loom_knowledge.corpus.corpus_index:CorpusIndex", "handle", "before"),
    "handle.after": Hook("loom_knowledge.corpus.corpus_index:CorpusIndex", "handle", "after"),
    "tracking.before": Hook("loom_runtime.projection:SQLProjection", "_set_position", "before"),
    "tracking.after": Hook("loom_runtime.projection:SQLProjection", "_set_position", "after"),
    "store.append": Hook("loom_memory.sql:SqlMemoryStore", "append_batch", "before"),
    # ending a superseded or removed revision (its passages leave the live index here)
    "end_revision.before": Hook(
        "loom_knowledge.corpus.corpus_index:CorpusIndex", "_end_revision", "before"
    ),
    "end_revision.after": Hook(
        "loom_knowledge.corpus.corpus_index:CorpusIndex", "_end_revision", "after"
    ),
    # decide: before compute (the log was asked and had no answer), after compute before
    # the append (and after encoding), after the append before the flow sees the value
    "decide.before_compute": Hook("loom_runtime.context:Recorder", "lookup", "after"),
    "decide.after_compute": Hook("loom_runtime.context:Recorder", "record", "before"),
    "decide.encoded": Hook("loom_runtime.codec", "round_trip", "after"),
    "decide.appended": Hook("loom_runtime.context:Recorder", "record", "after"),
    "log.save.before": Hook(
        "loom_runtime.storage.application:EventsourcingLog", "_store", "before"
    ),
    "log.save.after": Hook("loom_runtime.storage.application:EventsourcingLog", "_store", "after"),
    # completion: output encoded but Completed not triggered, and Completed stored but the
    # run not yet returned to its caller
    "complete.before": Hook("loom_runtime.execution:Execution", "complete", "before"),
    "complete.saved": Hook("loom_runtime.loom:Loom", "_complete", "after"),
}


class KillPoint(msgspec.Struct, frozen=True):
    """One distinct place to die: the ``occurrence``-th hit of ``point`` in ``scenario``."""

    area: str
    scenario: str
    point: str
    occurrence: int

    @property
    def id(self) -> str:
        return f"{self.area}-{self.point}-{self.occurrence}"

    @property
    def spec(self) -> str:
        return f"{self.point}:{self.occurrence}"


def _points(area: str, scenario: str, point: str, *occurrences: int) -> list[KillPoint]:
    return [KillPoint(area, scenario, point, n) for n in occurrences]


# The corpus scenario: put_doc x3 (appends 1-3), sync x2 (appends 4-5), pages of 2 events.
# The execution scenario: one put_doc, then 17 decisions over three runs (see the workload).
CATALOGUE: Final[list[KillPoint]] = [
    *_points("put_doc", "corpus", "put_doc.enter", 2, 3),
    *_points("put_doc", "corpus", "chunker", 1, 3),
    *_points("put_doc", "corpus", "stream.append.before", 1, 3),
    *_points("put_doc", "corpus", "stream.append.after", 1, 2, 3),
    *_points("sync", "corpus", "sync.enter", 1, 2),
    *_points("sync", "corpus", "chunker", 5, 8),
    *_points("sync", "corpus", "reconcile", 1, 2),
    *_points("sync", "corpus", "stream.append.before", 4, 5),
    *_points("sync", "corpus", "stream.append.after", 4, 5),
    *_points("projection", "corpus", "catch_up.enter", 1, 2, 5),
    *_points("projection", "corpus", "page.before", 2, 4, 6),
    *_points("projection", "corpus", "page.committed", 1, 3, 5, 7),
    *_points("projection", "corpus", "handle.before", 1, 2, 5, 9, 13),
    *_points("projection", "corpus", "handle.after", 3, 10),
    *_points("projection", "corpus", "tracking.before", 1, 3, 6),
    *_points("projection", "corpus", "tracking.after", 1, 3, 6),
    *_points("projection", "corpus", "store.append", 2, 4, 7),
    *_points("projection", "corpus", "end_revision.before", 1, 2, 4),
    *_points("projection", "corpus", "end_revision.after", 1, 3),
    *_points("projection", "execution", "catch_up.enter", 3),
    *_points("decide", "execution", "decide.before_compute", 1, 2, 4, 8, 12),
    *_points("decide", "execution", "decide.after_compute", 1, 3, 6, 9, 14),
    *_points("decide", "execution", "decide.encoded", 2, 5, 11),
    *_points("decide", "execution", "decide.appended", 1, 4, 7, 10, 15),
    *_points("decide", "execution", "log.save.before", 2, 6),
    *_points("decide", "execution", "log.save.after", 2, 8),
    *_points("completion", "execution", "complete.before", 1, 2, 3),
    *_points("completion", "execution", "complete.saved", 1, 2, 3),
]


def _killing(original: Callable[..., Any], hook: Hook, at: int) -> Callable[..., Any]:
    calls = 0

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if hook.when == "before" and calls == at:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if hook.when == "after" and calls == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    return wrapper


def _owner(hook: Hook) -> Any:
    module_name, _, class_name = hook.owner.partition(":")
    owner: Any = importlib.import_module(module_name)
    return getattr(owner, class_name) if class_name else owner


def arm(point: str, occurrence: int) -> None:
    """Make the ``occurrence``-th hit of ``point`` SIGKILL this process."""
    hook = POINTS[point]
    owner = _owner(hook)
    setattr(owner, hook.attribute, _killing(getattr(owner, hook.attribute), hook, occurrence))


def count_hits() -> Counter[str]:
    """Count every point's hits instead of killing (how :data:`CATALOGUE` was calibrated)."""
    hits: Counter[str] = Counter()
    wrapped: dict[tuple[str, str], Callable[..., Any]] = {}
    for point, hook in POINTS.items():
        owner = _owner(hook)
        key = (hook.owner, hook.attribute)
        original = wrapped.setdefault(key, getattr(owner, hook.attribute))
        points = [p for p, h in POINTS.items() if (h.owner, h.attribute) == key]

        @functools.wraps(original)
        def counting(*args: Any, _o: Any = original, _p: Any = points, **kwargs: Any) -> Any:
            hits.update(_p)
            return _o(*args, **kwargs)

        if point == points[0]:
            setattr(owner, hook.attribute, counting)
    return hits
