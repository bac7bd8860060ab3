"""A document that cannot be stored faithfully cannot be built; the error names the field."""

from __future__ import annotations

import msgspec
import pytest

from loom_knowledge import Doc, InvalidDocumentError, KnowledgeError
from loom_runtime.errors import LoomError


def test_a_valid_document_round_trips_through_json_unchanged() -> None:
    doc = Doc(id="a", text="body", title="T", meta={"team": "db", "tags": ["x", 1, 2.5, None]})
    assert msgspec.json.decode(msgspec.json.encode(doc), type=Doc) == doc


@pytest.mark.parametrize("doc_id", ["", "   ", "\n\t"])
def test_a_blank_id_is_refused(doc_id: str) -> None:
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id=doc_id, text="body")
    assert caught.value.field == "id"


def test_text_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match="text is a bytes") as caught:
        Doc(id="a", text=b"body")  # type: ignore[arg-type]
    assert caught.value.field == "text"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"text": "a\x00b"}, "text"),
        ({"text": "ok", "title": "t\x00"}, "title"),
        ({"text": "lone \ud800 surrogate"}, "text"),
        ({"text": "ok", "meta": {"k": "v\x00"}}, "meta['k']"),
        ({"text": "ok", "meta": {"k\ud800": 1}}, "meta key 'k\\ud800'"),
    ],
)
def test_strings_that_cannot_be_stored_faithfully_are_refused(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id="a", **kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert field in str(caught.value)


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        ({"tags": ("a", "b")}, "meta['tags']"),
        ({"nested": {"score": float("nan")}}, "meta['nested']['score']"),
        ({"when": {1, 2}}, "meta['when']"),
        ({"tags": ["ok", object()]}, "meta['tags'][1]"),
        ({1: "x"}, "meta key 1"),
    ],
)
def test_meta_that_would_not_survive_a_json_round_trip_is_refused(
    meta: dict[object, object], field: str
) -> None:
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id="a", text="ok", meta=meta)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_meta_that_is_not_a_dict_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match="meta must be a dict"):
        Doc(id="a", text="ok", meta=["x"])  # type: ignore[arg-type]


def test_the_error_is_a_knowledge_error_under_the_loom_root() -> None:
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id="", text="ok")
    assert isinstance(caught.value, KnowledgeError)
    assert isinstance(caught.value, LoomError)


def test_decoding_an_invalid_document_fails_validation() -> None:
    with pytest.raises(msgspec.ValidationError, match="NUL"):
        msgspec.json.decode(b'{"id": "a", "text": "x\\u0000"}', type=Doc)
