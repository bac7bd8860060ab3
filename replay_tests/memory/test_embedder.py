"""The embedder seam: the deterministic test embedder and the duck-typed adapters."""

from __future__ import annotations

import hashlib
import math
import struct
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from loom_memory import (
    Embedder,
    EmbedderError,
    FastEmbedEmbedder,
    HashingEmbedder,
    InvalidArgumentError,
    OpenAIEmbedder,
    SentenceTransformersEmbedder,
)
from loom_memory.embedder import checked_vectors


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    """The same text gives the same unit vector in every call (and so in every process)."""
    embedder = HashingEmbedder(dimension=64)
    first, again = embedder.embed(["disk full on node-7"]), embedder.embed(["disk full on node-7"])
    assert first == again
    assert math.isclose(math.fsum(v * v for v in first[0]), 1.0)
    assert embedder.model == "loom-hashing-v1/64" and embedder.dimension == 64


@pytest.mark.parametrize(
    ("dimension", "digest"),
    [
        (1024, "8b8608edb7a5946e0967e86aa9373d8e0167ad8725b9c01abb36a56b05bd0ae3"),
        (64, "deba0c2db113f7f3b0013d9ca35c31791f1f2eb5171fef0ac2c6b154545f9006"),
        (7, "698f0c8e251c4a84f48e05f6ac985bface5939cb81c71e1da5de84db90a1c68c"),
    ],
)
def test_hashing_embedder_gives_the_same_bits_in_every_release(dimension: int, digest: str) -> None:
    """``loom-hashing-v1`` names one function: vectors stored by an earlier release are
    compared with queries embedded by this one, so a change of a single bit (in the features,
    the hash, the arithmetic) needs a new model name. The digests are of the vectors of the
    release before the arithmetic was made sparse; 7 coordinates make collisions, and
    cancelled coordinates, certain."""
    texts = [
        "Restart the worker pool when the queue backs up.",
        "PostgreSQL: VACUUM FULL locks the table",
        "Ünïcode façade — naïve café",
        "a",
        "",
        "disk full disk full disk full",
    ]
    vectors = HashingEmbedder(dimension=dimension).embed(texts)
    packed = b"".join(struct.pack(f"<{dimension}d", *vector) for vector in vectors)
    assert hashlib.sha256(packed).hexdigest() == digest


def test_hashing_embedder_scores_shared_terms_above_fragments_above_unrelated() -> None:
    """A shared term scores above a shared word fragment, which scores above nothing shared."""
    [query, same, fragment, unrelated] = HashingEmbedder().embed(
        ["postgres", "postgres vacuum", "postgresql vacuum", "lunch menu"]
    )
    assert _cosine(query, same) > _cosine(query, fragment) > _cosine(query, unrelated)
    assert _cosine(query, unrelated) < 0.1


def test_hashing_embedder_folds_like_the_tokenizer() -> None:
    """Case, NFKC and stop words are the first-party tokenizer's: STRASSE is Straße."""
    embedder = HashingEmbedder()
    assert embedder.embed(["STRASSE"]) == embedder.embed(["the straße"])


def test_hashing_embedder_gives_a_text_without_terms_the_zero_vector() -> None:
    """Punctuation and stop words only: the zero vector, similar to nothing."""
    assert HashingEmbedder(dimension=8).embed(["the of ?!"]) == [[0.0] * 8]


@pytest.mark.parametrize("dimension", [0, -3, 2.0, True])
def test_hashing_embedder_refuses_a_bad_dimension(dimension: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        HashingEmbedder(dimension=dimension)


class _Lying:
    """An embedder whose answers break the contract in a chosen way."""

    model = "lying"
    dimension = 3

    def __init__(self, answer: list[list[float]]) -> None:
        self.answer = answer

    def embed(self, texts: Any) -> list[list[float]]:
        return self.answer


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ([[1.0, 0.0, 0.0]], "returned 1 vectors for 2 texts"),
        ([[1.0, 0.0], [1.0, 0.0]], "vector of 2 floats"),
        ([[1.0, 0.0, 0.0], [math.nan, 0.0, 0.0]], "non-finite"),
    ],
)
def test_checked_vectors_refuses_a_broken_answer(answer: list[list[float]], said: str) -> None:
    """A wrong count, width or a NaN is an EmbedderError naming the model, never truncated."""
    embedder = _Lying(answer)
    assert isinstance(embedder, Embedder)
    with pytest.raises(EmbedderError, match=said):
        checked_vectors(embedder, ["a", "b"])


class _Declaring:
    """An embedder declaring the given ``model`` and ``dimension``; its vectors fit width 3."""

    def __init__(self, model: object, dimension: object) -> None:
        self.model = model
        self.dimension = dimension
        self.calls = 0

    def embed(self, texts: Any) -> list[list[float]]:
        self.calls += 1
        return [[1.0, 0.0, 0.0] for _ in texts]


@pytest.mark.parametrize(
    ("model", "dimension"), [(5, 3), (None, 3), (" ", 3), ("m", True), ("m", 0), ("m", 3.0)]
)
def test_an_unusable_model_or_dimension_is_refused_before_the_model_is_called(
    model: object, dimension: object
) -> None:
    """The model is every recorded vector's address in the log: a model of 5 or None was
    appended as is and the event never decoded again (LogCorruptError for every reader). So
    the declared identity is checked first, even with no texts (which is how an open checks
    an embedder without calling it)."""
    embedder = _Declaring(model, dimension)
    for texts in ([], ["a"]):
        with pytest.raises(EmbedderError, match=r"model|dimension"):
            checked_vectors(embedder, texts)  # type: ignore[arg-type]
    assert embedder.calls == 0
    assert checked_vectors(_Declaring("m", 3), []) == []  # type: ignore[arg-type]  # control


@pytest.mark.parametrize(
    "vector",
    ["1.0", b"abc", 7, None, [1.0, None, 0.0], [1.0, 1j, 0.0], ["1", "0", "0"], [True, 0.0, 0.0]],
)
def test_a_vector_that_is_not_real_numbers_is_refused(vector: Any) -> None:
    """``float()`` read a str vector as three characters (or failed with ValueError), took
    "1" and True as numbers, and raised TypeError on None or a complex: each is an
    EmbedderError naming the model now."""
    embedder = _Lying([vector])
    with pytest.raises(EmbedderError, match="lying"):
        checked_vectors(embedder, ["a"])


@pytest.mark.parametrize("answer", [None, 3, "abc"])
def test_an_answer_that_is_no_list_of_vectors_is_refused(answer: Any) -> None:
    """``len(None)`` raised a bare TypeError out of every store (bridges review); a str of
    the right length was read as one vector per character."""
    with pytest.raises(EmbedderError, match="lying"):
        checked_vectors(_Lying(answer), ["a", "b", "c"])


class _FloatLike:
    """A tensor library's scalar: a number by ``__float__`` alone (a TensorFlow scalar, a
    torch 0-d tensor), registered nowhere in :mod:`numbers`."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


class _TensorRow:
    """A tensor row with no ``tolist`` (TensorFlow's eager tensor): it iterates to scalars."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def __iter__(self) -> Any:
        return (_FloatLike(value) for value in self.values)

    def __len__(self) -> int:
        return len(self.values)


@pytest.mark.parametrize(
    "vector",
    [
        [_FloatLike(1.0), _FloatLike(0.5), _FloatLike(0.25)],
        _TensorRow([1.0, 0.5, 0.25]),
        [Decimal("1"), Decimal("0.5"), Decimal("0.25")],
    ],
    ids=["scalars by __float__", "a tensor row without tolist", "Decimal"],
)
def test_numbers_of_tensor_libraries_are_taken(vector: Any) -> None:
    """The first element check took only what :mod:`numbers` registers as real: a TensorFlow
    embedder's vectors, stored before, were refused (regression review)."""
    assert checked_vectors(_Lying([vector]), ["a"]) == [[1.0, 0.5, 0.25]]


def test_a_dimension_that_is_a_numpy_integer_is_taken() -> None:
    np = pytest.importorskip("numpy")
    embedder = _Lying([[1.0, 0.5, 0.25]])
    embedder.dimension = np.int64(3)  # type: ignore[assignment]
    assert checked_vectors(embedder, ["a"]) == [[1.0, 0.5, 0.25]]


def test_real_numbers_of_any_type_are_taken() -> None:
    """ints and float subclasses (numpy's floats among them) are floats in a vector."""
    np = pytest.importorskip("numpy")
    answer = [[1, np.float32(0.5), np.float64(0.25)], np.asarray([0.0, 1.0, 2.0], np.float32)]
    assert checked_vectors(_Lying(answer), ["a", "b"]) == [[1.0, 0.5, 0.25], [0.0, 1.0, 2.0]]


class _FakeEmbeddings:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def create(self, *, model: str, input: list[str]) -> Any:
        self.calls.append({"model": model, "input": input})
        items = [
            SimpleNamespace(index=n, embedding=[float(len(text)), float(n)])
            for n, text in enumerate(input)
        ]
        return SimpleNamespace(data=list(reversed(items)))


def test_openai_embedder_batches_and_restores_input_order() -> None:
    """Inputs go in batches; each answer is put back in input order by its index."""
    client = SimpleNamespace(embeddings=_FakeEmbeddings())
    embedder = OpenAIEmbedder(client, model="text-embedding-3-small", dimension=2, batch_size=2)
    vectors = embedder.embed(["a", "bb", "ccc"])
    assert vectors == [[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]]
    assert [call["input"] for call in client.embeddings.calls] == [["a", "bb"], ["ccc"]]
    assert embedder.model == "openai:text-embedding-3-small"


def test_openai_embedder_identity_can_name_the_endpoint() -> None:
    client = SimpleNamespace(embeddings=_FakeEmbeddings())
    embedder = OpenAIEmbedder(client, model="m", dimension=2, identity="vllm:m@gpu-1")
    assert embedder.model == "vllm:m@gpu-1"


def test_sentence_transformers_and_fastembed_adapters_are_duck_typed() -> None:
    """Both adapters take a loaded model object; neither imports its library."""

    class Encoder:
        model_name = "BAAI/bge-small-en-v1.5"

        def get_sentence_embedding_dimension(self) -> int:
            return 2

        def encode(self, texts: list[str], *, normalize_embeddings: bool) -> list[list[float]]:
            assert normalize_embeddings
            return [[1.0, float(len(text))] for text in texts]

        def embed(self, texts: list[str]) -> Any:
            return iter([[0.5, float(len(text))] for text in texts])

    st = SentenceTransformersEmbedder(Encoder(), model="all-MiniLM-L6-v2")
    fe = FastEmbedEmbedder(Encoder(), dimension=2)
    assert (st.model, st.dimension, st.embed(["ab"])) == ("all-MiniLM-L6-v2", 2, [[1.0, 2.0]])
    assert (fe.model, fe.embed(["abc"])) == ("fastembed:BAAI/bge-small-en-v1.5", [[0.5, 3.0]])
