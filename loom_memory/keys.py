"""The names tiered memory stores under, each grammar defined here once.

These strings are stored (as store keys, and as the keys of recorded decisions), so they never
change; a new form would be a new name beside the old one.

* ``tier/<tier>/<scope>`` - the store key of one scope of one tier. Tier names cannot contain
  ``/``, so two (tier, scope) pairs never share a key.
* ``rewrite/<tier>/<scope>`` - the journal of an eviction rewrite on a store without
  ``replace`` (see :mod:`loom_memory.tiers`).
* ``memory.recall:<tier>:<n>:<scope>`` - the decision key of a recorded recency recall.
* ``memory.recall_relevant:<tier>:<scope>`` - the decision key of a recorded relevance recall.
  The query and ``n`` are the decision's INPUT, not part of its key: the log redacts the input
  (a query quoting a secret is recalled, not refused), and a replay asked another question
  reports a changed input with a diff. Two recalls of one scope in one flow are numbered by the
  flow context in program order (``...``, ``...#2``).
"""

from __future__ import annotations


def tier_key(tier: str, scope: str) -> str:
    """The store key of ``scope`` in ``tier``."""
    return f"tier/{tier}/{scope}"


def journal_key(key: str) -> str:
    """The store key journalling an eviction rewrite of the scope at :func:`tier_key` ``key``."""
    return "rewrite/" + key.removeprefix("tier/")


def recall_key(tier: str, scope: str, n: int) -> str:
    """The decision key of a recorded recency recall of the newest ``n`` entries."""
    return f"memory.recall:{tier}:{n}:{scope}"


def recall_relevant_key(tier: str, scope: str) -> str:
    """The decision key of a recorded relevance recall (the query is its input)."""
    return f"memory.recall_relevant:{tier}:{scope}"
