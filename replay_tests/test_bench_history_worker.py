"""The peers-retrieval section checks "retrieval independent of history" in a worker process
per backend while it indexes: the check must survive the trip (its arguments and answer
pickled, its Loom opened in the worker) and give the same answer as in this process, with the
worker's own time for the table's note."""

from __future__ import annotations

import pytest

from benchmarks import peers_retrieval as pr
from benchmarks.harness import InstrumentError, Settings, spawned


@pytest.mark.slow  # a spawned interpreter imports loom and reads the manuals
def test_the_history_check_run_in_a_worker_answers_as_in_this_process() -> None:
    from benchmarks.peers_corpora import docs

    try:
        docs("pg15.18")
    except InstrumentError:
        pytest.skip("the shared corpora are not on this machine")
    settings = Settings(quick=True, rounds=1, pg_url=None)
    queries = ("create table", "vacuum", "index only scan")
    with spawned() as pool:
        remote = pool.submit(pr.history_check, settings, "SQLite", queries, 12).result()
    here = pr._history_equivalence(pr._history_backends(settings)["SQLite"], queries, 12)

    assert (
        (remote.fresh_equal, remote.fresh_total)
        == (here.fresh_equal, here.fresh_total)
        == (
            3,
            3,
        )
    )
    assert (
        (remote.as_of_equal, remote.as_of_total)
        == (here.as_of_equal, here.as_of_total)
        == (
            9,
            9,
        )
    )
    assert remote.seconds > 0 and remote.cpu_seconds > 0
    assert here.seconds == 0  # only the worker's entry point times itself
