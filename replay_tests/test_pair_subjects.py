"""Erasure subjects named after a pair (a document, a memory key) read and parse one way.

The strings are what the key table and forget events already hold, so they are pinned as
literal text: a change to the rule would orphan every stored key of a document or memory key.
"""

from __future__ import annotations

import hashlib

from loom_knowledge.corpus.erasure import document_subject, named_document
from loom_memory.erasure import keys_named, memory_subject
from loom_runtime import pair_subject, subject_pair

TRICKY = 'a"b:c\\d]'
"""An id holding the characters a separator-based name would trip on."""


def test_a_pair_is_its_prefix_then_the_two_names_as_json() -> None:
    assert document_subject("ops", TRICKY) == 'document:["ops","a\\"b:c\\\\d]"]'
    assert memory_subject("memory", "user:7") == 'memory:["memory","user:7"]'
    assert named_document(document_subject("ops", TRICKY)) == ("ops", TRICKY)
    assert subject_pair("memory:", memory_subject("memory", "user:7")) == ("memory", "user:7")


def test_a_pair_too_long_for_the_key_table_is_named_by_the_digest_of_its_readable_name() -> None:
    long_id = "x" * 400
    readable = f'document:["ops","{long_id}"]'
    digest = "document:sha256:" + hashlib.sha256(readable.encode()).hexdigest()
    assert document_subject("ops", long_id) == digest
    assert named_document(digest) is None  # found by recomputing, not by parsing
    assert pair_subject("document:", "ops", "x" * 281) == 'document:["ops","' + "x" * 281 + '"]'
    assert pair_subject("document:", "ops", "x" * 282).startswith("document:sha256:")


def test_what_is_not_a_readable_pair_of_the_prefix_parses_to_none() -> None:
    for subject in ('memory:["m","k"]', "document:[1,2]", "document:[", "execution:abc"):
        assert named_document(subject) is None
    assert subject_pair("memory:", 'memory:["m","k","extra"]') is None


def test_a_forget_event_names_memory_keys_readably_or_by_digest() -> None:
    long_key = "k" * 400
    named = [memory_subject("m", "short"), memory_subject("m", long_key), memory_subject("n", "x")]
    assert keys_named(named, "m", held=["other", long_key]) == ["short", long_key]
