"""A document's meta that changed after its checks cannot poison the log (ADR 0010, amended
"corpus review").

A ``Doc`` is checked when it is made, but its meta is a dict: the caller's, or reachable
through ``doc.meta``. A value changed afterwards used to be appended by ``put_doc`` or
``sync`` and then refused by the corpus index, and the log is append-only, so every scope's
catch-up, every rebuild and every fresh process failed at that event for good.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loom_knowledge import Doc, InvalidDocumentError, KnowledgeBase, open_knowledge_base
from loom_knowledge.domain.types import MAX_META_DEPTH
from loom_runtime import Loom


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"k": "leaf"}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


MUTATIONS: dict[str, tuple[Callable[[dict[Any, Any]], None], str]] = {
    "a NUL in a value": (lambda meta: meta.update(note="pasted\x00text"), "meta['note']"),
    "a lone surrogate": (lambda meta: meta.update(note="\ud800"), "meta['note']"),
    "nesting past the limit": (
        lambda meta: meta.update(deep=_nested(MAX_META_DEPTH + 5)),
        "meta.deep.k.k",
    ),
    "a key that is not a str": (lambda meta: meta.__setitem__(1, "x"), "meta key 1"),
    "a tuple": (lambda meta: meta.update(tags=("a", "b")), "meta['tags']"),
    "a set": (lambda meta: meta.update(tags={1}), "meta['tags']"),
}
"""What a meta may become after its document was made, and how the field the refusal names
starts (a path too deep goes on to the level that is one too many)."""


@pytest.fixture
def other(loom: Loom) -> KnowledgeBase:
    """Another scope of the same log, written before: a poisoned event stopped it too."""
    kb = open_knowledge_base(loom, "other")
    kb.put_doc(Doc(id="runbook", text="disk full: rotate the logs"))
    return kb


def _still_answers(loom: Loom, db_url: str, other: KnowledgeBase) -> None:
    """Every scope still catches up, rebuilds, and opens in a fresh process."""
    assert [p.doc_id for p in other.search("disk")] == ["runbook"]
    other.rebuild()
    assert [p.doc_id for p in other.search("disk")] == ["runbook"]
    other.put_doc(Doc(id="later", text="a later write"))
    with Loom(db_url) as fresh:
        found = open_knowledge_base(fresh, "other").search("disk")
    assert [p.doc_id for p in found] == ["runbook"]


@pytest.mark.parametrize("mutation", MUTATIONS.values(), ids=MUTATIONS.keys())
@pytest.mark.parametrize("write", ["put_doc", "sync", "plan_sync"])
def test_a_meta_changed_after_its_checks_is_refused_typed_and_nothing_is_appended(
    loom: Loom,
    db_url: str,
    other: KnowledgeBase,
    mutation: tuple[Callable[[dict[Any, Any]], None], str],
    write: str,
) -> None:
    change, field = mutation
    kb = open_knowledge_base(loom, "s")
    doc = Doc(id="a", text="cpu hot", meta={"team": "sre"})
    assert doc.meta is not None
    change(doc.meta)
    before = loom.log.position
    with pytest.raises(InvalidDocumentError) as caught:
        if write == "put_doc":
            kb.put_doc(doc)
        else:
            getattr(kb, write)([Doc(id="b", text="fine"), doc])
    assert caught.value.doc_id == "a"
    assert caught.value.field.startswith(field)
    assert loom.log.position == before
    _still_answers(loom, db_url, other)


def test_a_caller_s_meta_changed_after_the_document_was_made_is_not_the_document_s(
    loom: Loom, db_url: str, other: KnowledgeBase
) -> None:
    """The document keeps the meta it was checked with: a template dict reused for the next
    document (or poisoned by it) changes no document made from it before."""
    shared: dict[str, Any] = {"team": "sre", "tags": ["cpu"]}
    doc = Doc(id="a", text="cpu hot", meta=shared)
    shared["note"] = "pasted\x00text"
    shared["tags"].append("late\x00")
    kb = open_knowledge_base(loom, "s")
    kb.put_doc(doc)
    assert doc.meta == {"team": "sre", "tags": ["cpu"]}
    assert [p.meta for p in kb.search("cpu")] == [{"team": "sre", "tags": ["cpu"]}]
    _still_answers(loom, db_url, other)


class _Float(float):
    """A float subclass (numpy's float64 is one): the JSON rule lets it by, msgspec does not."""


@pytest.mark.parametrize("value", [_Float(0.5), 10**5000], ids=["float-subclass", "huge-int"])
def test_meta_msgspec_cannot_write_is_refused_typed(loom: Loom, value: object) -> None:
    """Second regression review: the constructor's copy of the meta and the fingerprint of a
    document whose meta was changed raised msgspec's bare TypeError or ValueError."""
    with pytest.raises(InvalidDocumentError) as raised:
        Doc(id="a.md", text="t", meta={"x": value})
    assert raised.value.field == "meta"
    doc = Doc(id="a.md", text="t", meta={"x": 1})
    assert doc.meta is not None
    doc.meta["x"] = value
    kb = open_knowledge_base(loom, "s")
    before = loom.log.position
    with pytest.raises(InvalidDocumentError):
        kb.put_doc(doc)
    assert loom.log.position == before
