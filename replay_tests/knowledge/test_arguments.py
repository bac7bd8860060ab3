"""A missing argument is a typed loom error that says what to pass, not a bare TypeError."""

from __future__ import annotations

from typing import Any

import pytest

from loom_knowledge import Doc, InvalidArgumentError, KnowledgeError, open_knowledge_base
from loom_runtime import Loom


@pytest.mark.parametrize("verb", ["sync", "plan_sync"])
@pytest.mark.parametrize(
    "docs",
    [None, 42, "readme.md", (Doc(id=f"{n}.md", text="x") for n in range(2))],
    ids=["None", "int", "str", "generator"],
)
def test_sync_without_a_list_of_documents_says_what_to_pass(
    loom: Loom, verb: str, docs: Any
) -> None:
    """sync(None) is refused before anything is read or written, naming the argument; so is a
    generator, which the checks would exhaust before the reconcile reads it."""
    kb = open_knowledge_base(loom, "ops")
    with pytest.raises(InvalidArgumentError, match=r"docs must be .*Doc.*\[\]") as raised:
        getattr(kb, verb)(docs)
    assert isinstance(raised.value, KnowledgeError) and isinstance(raised.value, TypeError)
    assert loom.log.position == 0


def test_retrieve_without_decide_says_what_to_pass(loom: Loom) -> None:
    """retrieve(decide=None) names ctx.decide, and kb.search for an unrecorded search."""
    kb = open_knowledge_base(loom, "ops")
    with pytest.raises(InvalidArgumentError, match=r"ctx\.decide.*kb\.search"):
        kb.retrieve("disk full", decide=None)  # type: ignore[arg-type]
