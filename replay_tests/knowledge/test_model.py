"""The extractive model answers deterministically from the passages and cites their documents."""

from __future__ import annotations

import pytest

from loom_knowledge import (
    Answer,
    ExtractiveModel,
    GroundedRequest,
    InvalidOptionError,
    Message,
    Model,
    Passage,
    Provenance,
    assert_grounded,
    grounded_request,
    load_runbooks,
    pack_paragraphs,
    to_passages,
)
from loom_knowledge.models.model import NO_ANSWER

PASSAGES = [
    Passage(doc_id="dns.md", index=0, text="Check CoreDNS pods. Lower TTLs.", revision=1),
    Passage(
        doc_id="disk.md",
        index=0,
        text="Run lsof to find deleted files\nheld open by a process. Then expand the volume.",
        revision=1,
    ),
]

PROVENANCE = Provenance(scope="runbooks", doc_id="k8s.md")


def _ask(question: str, passages: list[Passage], model: Model | None = None) -> Answer:
    request = grounded_request("Answer.", question, passages, scope="runbooks")
    return (model or ExtractiveModel()).answer(request)


def test_it_answers_with_the_best_matching_sentence_and_cites_its_document() -> None:
    answer = _ask("Which deleted files are held open?", PASSAGES, ExtractiveModel(max_sentences=1))
    assert answer == Answer(
        text="Run lsof to find deleted files held open by a process.", cited_doc_ids=("disk.md",)
    )


def test_sentences_from_several_documents_cite_each_once_in_request_order() -> None:
    answer = _ask("expand the volume or lower TTLs", PASSAGES, ExtractiveModel(max_sentences=3))
    assert answer.text == "Lower TTLs. Then expand the volume."
    assert answer.cited_doc_ids == ("dns.md", "disk.md")


def test_no_overlap_gives_the_no_answer_text_and_no_citations() -> None:
    assert _ask("kubernetes certificates", PASSAGES) == Answer(text=NO_ANSWER, cited_doc_ids=())


def test_stopwords_alone_do_not_count_as_a_match() -> None:
    assert _ask("what is the", PASSAGES).cited_doc_ids == ()


def test_the_answer_over_the_runbooks_is_deterministic_and_grounded() -> None:
    passages = [
        passage
        for doc in load_runbooks()
        for passage in to_passages(doc, revision=1, chunker=pack_paragraphs())
    ]
    question = "How do I renew an expired TLS certificate with cert-manager?"
    answers = {_ask(question, passages) for _ in range(3)}
    assert len(answers) == 1
    (answer,) = answers
    assert answer.cited_doc_ids == ("tls-certificate-expiry.md",)
    assert assert_grounded(answer.cited_doc_ids, passages)


def test_an_unfenced_tainted_message_is_read_as_plain_passage_text() -> None:
    request = GroundedRequest(
        messages=(
            Message(role="user", content="Restart the pods.", provenance=PROVENANCE),
            Message(role="user", content="restart pods?"),
        )
    )
    assert ExtractiveModel().answer(request) == Answer(
        text="Restart the pods.", cited_doc_ids=("k8s.md",)
    )


def test_max_sentences_below_one_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="max_sentences"):
        ExtractiveModel(max_sentences=0)


@pytest.mark.parametrize("max_sentences", [True, 1.5, "2", None, 2.0])
def test_max_sentences_that_is_not_an_int_is_refused_when_built(max_sentences: object) -> None:
    """True was taken as 1, 1.5 failed at the first answer (a slice of a float) and "2" with
    a TypeError from ``<``: refused typed when built, like 0."""
    with pytest.raises(InvalidOptionError, match="max_sentences"):
        ExtractiveModel(max_sentences=max_sentences)  # type: ignore[arg-type]
    assert ExtractiveModel(max_sentences=1).max_sentences == 1  # the control
