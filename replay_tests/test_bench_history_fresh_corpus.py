"""The peers-retrieval history check takes its first sync as the fresh corpus it compares the
final search with (ADR 0063, amended): right only when the check ends on its first version's
pages, so any other version list is refused before a sync runs."""

from __future__ import annotations

import pytest

from benchmarks import peers_retrieval as pr
from benchmarks.harness import InstrumentError, Settings


def test_the_history_check_refuses_to_call_a_different_first_version_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first sync stands in for the fresh corpus only if the check ends on its pages."""
    from benchmarks.peers_corpora import docs

    try:
        docs("pg15.18")
    except InstrumentError:
        pytest.skip("the shared corpora are not on this machine")
    monkeypatch.setattr(pr, "HISTORY_VERSIONS", ("pg15.18", "pg17"))
    settings = Settings(quick=True, rounds=1, pg_url=None)
    with pytest.raises(InstrumentError, match="first version"):
        pr._history_equivalence(pr._history_backends(settings)["SQLite"], ("vacuum",), 12)
