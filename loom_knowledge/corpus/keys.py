"""The names a corpus stores under, each grammar defined here once.

These strings are stored (in the log, in the passage index, in recorded decisions), so they
never change; a new form would be a new name beside the old one.

* ``knowledge:<scope>`` - the scope's event stream, and the memory key its passages live under.
* ``knowledge:<scope>:<doc_id>`` - a passage's provenance label: its taint, naming the document
  the untrusted text came from.
* ``knowledge:<scope>:retrieve`` - the decision key of a recorded retrieval. The query and the
  limit are the decision's INPUT, not part of its key, so a replay asked a different question
  reports a changed input with a diff of the two questions. Two retrievals of one scope in one
  flow are told apart by the flow context, which numbers a repeated key in program order
  (``...:retrieve``, ``...:retrieve#2``): as deterministic as the flow itself.
"""

from __future__ import annotations


def stream_name(scope: str) -> str:
    """The name of the event stream a scope's changes are appended to."""
    return f"knowledge:{scope}"


def corpus_key(scope: str) -> str:
    """The memory key a scope's passages live under."""
    return f"knowledge:{scope}"


def provenance_label(scope: str, doc_id: str) -> str:
    """The taint a passage carries: where the untrusted text came from."""
    return f"knowledge:{scope}:{doc_id}"


def retrieve_key(scope: str) -> str:
    """The decision key of a recorded retrieval from ``scope`` (the query is its input)."""
    return f"knowledge:{scope}:retrieve"
