"""Two threads of one process catching up one corpus index at once (ADR 0051, "threads").

A Loom's corpus index is one object per Loom (a service), so a worker's recovery thread, which
runs flows that retrieve, and its main thread, which syncs, catch it up at the same time. The
tracking row serialises their transactions in the database, but the page being applied (its
held rows, its opened passages) is state of the object: a second thread starting its page
while the first was inside one took that state from under it, and the first committed an
index that differs from a rebuild (the soak on PostgreSQL found it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from loom_knowledge import open_knowledge_base
from loom_knowledge.corpus.knowledge_base import corpus_index, drop_corpus
from loom_runtime import Loom, catch_up
from replay_tests.knowledge.test_page_writes import _doc, _dump

PAUSE = 1.0
"""How long the first thread waits, inside its page, for the second to start its own."""


@pytest.mark.waits  # PAUSE: the first thread holds its page
def test_two_threads_catching_up_one_index_leave_what_one_would(loom: Loom) -> None:
    kb = open_knowledge_base(loom, "ops")
    docs = [_doc(f"d{n}", "alpha", "beta") for n in range(6)]
    kb.sync(docs)
    kb.sync([_doc(d.id, "edited", "gamma") if n % 2 else d for n, d in enumerate(docs)])
    kb.remove_doc("d0")
    expected = _dump(loom.log.engine)

    drop_corpus(loom)
    index = corpus_index(loom)
    handle = index.handle
    first_page: list[object] = []
    inside = threading.Event()

    def paused_handle(conn: Any, position: int, event: Any) -> None:
        if not first_page:  # the first thread's first event: let the second one start
            first_page.append(index._page)
            inside.set()
            waited = time.monotonic() + PAUSE
            while index._page is first_page[0] and time.monotonic() < waited:
                time.sleep(0.01)
        handle(conn, position, event)

    index.handle = paused_handle  # type: ignore[method-assign]
    first = threading.Thread(target=catch_up, args=(loom.log, index))
    first.start()
    assert inside.wait(timeout=30)
    # A shorter page than the first's: the two threads' pages differ, as they do when each
    # reads the log's head at its own moment.
    second = threading.Thread(target=catch_up, args=(loom.log, index), kwargs={"page_size": 2})
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    assert not first.is_alive() and not second.is_alive()

    assert _dump(loom.log.engine) == expected
