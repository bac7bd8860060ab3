"""The fingerprint covers title, text and meta, and not the order meta was built in."""

from __future__ import annotations

import hashlib

import pytest

from loom_knowledge import FINGERPRINT_ALGORITHM, Doc, fingerprint

BASE = Doc(id="a", text="body", title="Title", meta={"team": "db", "tier": 1})


@pytest.mark.parametrize(
    "changed",
    [
        Doc(id="a", text="body!", title="Title", meta={"team": "db", "tier": 1}),
        Doc(id="a", text="body", title="Title 2", meta={"team": "db", "tier": 1}),
        Doc(id="a", text="body", title=None, meta={"team": "db", "tier": 1}),
        Doc(id="a", text="body", title="", meta={"team": "db", "tier": 1}),
        Doc(id="a", text="body", title="Title", meta={"team": "db", "tier": 2}),
        Doc(id="a", text="body", title="Title", meta=None),
    ],
    ids=["text", "title", "title-removed", "title-empty", "meta-value", "meta-removed"],
)
def test_any_change_to_the_document_changes_the_fingerprint(changed: Doc) -> None:
    assert fingerprint(changed) != fingerprint(BASE)


def test_the_id_is_not_part_of_the_fingerprint() -> None:
    """The fingerprint is compared under the id; renaming is a removal plus a creation."""
    assert fingerprint(Doc(id="b", text="body", title="Title", meta=BASE.meta)) == fingerprint(BASE)


def test_meta_key_order_does_not_change_the_fingerprint_at_any_depth() -> None:
    one = Doc(id="a", text="t", meta={"a": 1, "b": {"x": [1, {"p": 1, "q": 2}], "y": 2}})
    two = Doc(id="a", text="t", meta={"b": {"y": 2, "x": [1, {"q": 2, "p": 1}]}, "a": 1})
    assert fingerprint(one) == fingerprint(two)


def test_the_fingerprint_is_sha256_of_the_sorted_compact_json_the_algorithm_names() -> None:
    """If this fails the encoding changed: bump FINGERPRINT_ALGORITHM, then update this test."""
    canonical = b'{"meta":{"team":"db","tier":1},"text":"body","title":"Title"}'
    assert FINGERPRINT_ALGORITHM == "sha256/msgspec-json-sorted/v1"
    assert fingerprint(BASE) == hashlib.sha256(canonical).hexdigest()
