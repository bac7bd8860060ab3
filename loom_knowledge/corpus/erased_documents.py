"""Which erased documents bear on an execution's decisions: what the audit (ADR 0055) and a
counterfactual's request diffs show in place of an erased document's text.

Here, beside the corpus, rather than in the audit's module: the counterfactual (a corpus
verb) needs the same answer, and the corpus does not depend on the tools built on it."""

from __future__ import annotations

import functools
from collections.abc import Callable

from loom_knowledge.corpus.corpus_index import CorpusIndex
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_knowledge.domain.grounding import GroundedRequest
from loom_runtime import Execution, Loom, catch_up


def made_elsewhere(loom: Loom, execution: Execution) -> tuple[Callable[[str], bool], bool]:
    """Whether the decision at a key of ``execution`` was made in another log: by an imported
    execution, itself or the ancestor a fork inherited it from (followed up the forks while
    the decision is inherited). An execution recorded here, and a fork's own decisions, no.
    And whether ``execution`` itself was imported."""
    chain = [execution]  # up to the first imported one: all it holds was decided elsewhere
    while loom.imported(chain[-1].id) is None:
        if chain[-1].parent_id is None:
            return (lambda key: False), False  # recorded here, every fork of it too
        chain.append(loom.execution(chain[-1].parent_id))

    def elsewhere(key: str) -> bool:
        # Made elsewhere if every fork below the imported execution inherited it.
        return all(
            (decision := member.decisions.get(key)) is not None and decision.origin == "inherited"
            for member in chain[:-1]
        )

    return elsewhere, len(chain) == 1


Erasures = Callable[[str], dict[str, int]]
"""Per scope, the documents erased there, each with the position of its forget event."""


def _no_erasures(scope: str) -> dict[str, int]:
    """No erasure of this log names an imported execution's documents."""
    return {}


class DecisionErasures:
    """Which documents' erasures bear on each decision of ``execution``: what the audit, and a
    counterfactual's request diffs, show in place of an erased document's text.

    The corpus index is caught up first (its history must include every change up to now).
    What an imported execution decided was decided in another log: this log's documents of
    the same scope, id and revision (and their erasures) say nothing of its passages. Asked
    per decision, since a fork made here decides in this log what it did not inherit."""

    def __init__(self, loom: Loom, execution: Execution) -> None:
        self.index: CorpusIndex = corpus_index(loom)
        catch_up(loom.log, self.index)
        # Whether the decision at a key was made in another log; whether it itself was.
        self.elsewhere, self.imported = made_elsewhere(loom, execution)
        self._here: Erasures = functools.cache(self.index.erasures)

    def of(self, key: str) -> Erasures:
        """The erasures that bear on the decision at ``key`` (none if made in another log)."""
        return _no_erasures if self.elsewhere(key) else self._here


def erased_messages(request: GroundedRequest | None, erasures: Erasures) -> dict[int, int]:
    """The messages of ``request`` whose document was erased since (ADR 0055), by their
    provenance: each one's index, and the position of the forget event."""
    erased: dict[int, int] = {}
    if request is not None:
        for number, message in enumerate(request.messages):
            where = message.provenance
            if where is not None and where.doc_id in (gone := erasures(where.scope)):
                erased[number] = gone[where.doc_id]
    return erased
