"""The peers-retrieval history check reports how long each of its syncs took: on PostgreSQL
the reconciles that end most pages are most of the time the section waits for (the server's
CPU, not the worker's), and the table's note must show where that wait goes (ADR 0063)."""

from __future__ import annotations

import pytest

from benchmarks import peers_retrieval as pr
from benchmarks.harness import InstrumentError, Settings


@pytest.mark.slow  # reads the manuals and syncs five small corpora
def test_the_history_check_times_every_sync_and_its_note_names_them() -> None:
    from benchmarks.peers_corpora import docs

    try:
        docs("pg15.18")
    except InstrumentError:
        pytest.skip("the shared corpora are not on this machine")
    settings = Settings(quick=True, rounds=1, pg_url=None)
    found = pr._history_equivalence(pr._history_backends(settings)["SQLite"], ("vacuum",), 12)

    # the versions in order, the first of them the fresh corpus (no second sync of it)
    assert len(found.sync_seconds) == len(pr.HISTORY_VERSIONS)
    assert all(seconds > 0 for seconds in found.sync_seconds)
    note = pr._history_table({"SQLite": found}, 1).note
    assert "its syncs " in note and "the first the fresh corpus" in note
