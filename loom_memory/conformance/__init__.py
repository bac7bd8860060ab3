"""The memory-store conformance kit: every clause of the seam as one pytest test.

A backend author subclasses :class:`MemoryStoreContract` and provides ONE fixture, ``store``,
yielding a fresh, empty store::

    import pytest
    from loom_memory.conformance import MemoryStoreContract

    class TestMyStore(MemoryStoreContract):
        @pytest.fixture
        def store(self):
            store = MyStore(...)
            yield store
            store.close()  # if MyStore has the optional close; else yield alone

and adds ``pytest.register_assert_rewrite("loom_memory.conformance")`` to the conftest.py that
precedes it, so a failing clause shows its values. The class has no ``Test`` prefix so that
pytest never collects the kit itself. Each test states one clause in its docstring, so
``-k`` selects clauses and a failure names the clause broken.

One module per capability holds its clauses (``required``, ``replace``, ``remove``,
``search``, ``validity``, ``close``, ``similarity``, ``stemming``); :class:`MemoryStoreContract`
inherits them all, and registering this package for assertion rewriting covers every module in
it. Optional verbs are
tested when present and SKIPPED, naming the capability, when absent (presence is the feature
flag). The id round trip is tested on every store, because the
``remove`` fallback depends on it precisely where ``remove`` is missing.

The argument checks are pinned on every verb that takes the argument, optional verbs
included: each non-``str`` key of ``helpers.BAD_KEYS``, each position of ``BAD_POSITIONS``,
each limit of ``BAD_LIMITS``, a bare ``str`` of ids. Edges a backend gets wrong by
construction are pinned too: keys that a ``LIKE`` or a prefix would mix up are cleared one at
a time, ids differing only in case, spaces or accents are removed one at a time, a limit is
applied after matching, ``replace`` keeps duplicates, and a caller's edits to what it
appended or read never reach the store (ADR 0004, amended 6 Dec).

What the kit cannot see:

* what ``close`` releases. A store may still answer after ``close`` (SQLAlchemy re-creates a
  disposed engine's pool), so the only clause is that a second ``close`` is harmless; that
  connections are returned is the backend's own test.
* index maintenance. A backend that joins its index back to its rows passes every clear,
  replace and remove clause even if its index grows stale without bound. Test that in the
  backend's own suite by reading the index without the join.
* ranking. FTS5's BM25, PostgreSQL's BM25 (b = 0) and an IDF sum disagree on order, so no
  clause pins one. The validity clauses pin only the rule that a search ranks as a key
  holding just the entries it admits would: history never sways it.
* a similarity backend must choose a floor: "a query matching nothing returns []" is free for
  an inverted index, but cosine similarity is defined against every entry, so an unthresholded
  vector store returns the whole key, least-unrelated first. Put a minimum score in the
  backend's options (it is a property of the embedding model) and set it for the kit. The
  ``similarity`` clauses are the ones only such a backend can fail: an unrelated query
  returns [] (run on every searching store), and, on a store with
  :class:`~loom_memory.similarity.SupportsSimilarity`, the floor is honoured (also when
  raised per call) and a store reopened with another embedding model is refused (provide a
  ``reopen_with_other_model`` fixture for that one, or it skips saying so).
"""

from loom_memory.conformance.contract import MemoryStoreContract
from loom_memory.conformance.helpers import entry

__all__ = ["MemoryStoreContract", "entry"]
