"""The embedder seam: texts in, float vectors out, under a model identity and a dimension.

A vector store compares vectors only within one :attr:`Embedder.model`: two models (or one
model at two dimensions, or two versions of a hashing scheme) place texts in unrelated spaces,
and a cosine between them is a number that means nothing. So the identity is part of every
recorded embedding's address, ``(model, digest of the text)``, and a store opened with another
identity than it was indexed with refuses instead of mixing (ADR 0038).

Adapters, none of which imports anything heavy:

* :class:`HashingEmbedder` - deterministic and dependency-free, for tests and demos: signed
  feature hashing of the first-party terms (:func:`~loom_memory.text.tokenize`) and their
  character trigrams. Texts sharing no term and no trigram score 0, which is what lets a
  conformance run choose a floor that separates "related" from "not".
* :class:`OpenAIEmbedder` - any OpenAI-compatible embeddings endpoint, through a client passed
  in (``client.embeddings.create(model=, input=)``), so ``loom_runtime.wrap(openai.OpenAI())``
  records every call like any other model call.
* :class:`SentenceTransformersEmbedder` and :class:`FastEmbedEmbedder` - a model object the
  caller loaded (duck-typed: this module never imports either library, and loom never
  downloads weights).
"""

from __future__ import annotations

import functools
import hashlib
import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from loom_memory.errors import EmbedderError, InvalidArgumentError
from loom_memory.text import tokenize


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of :attr:`dimension` floats, one per text, in order."""

    @property
    def model(self) -> str:
        """The identity of the vector space: equal only for embedders whose vectors compare."""
        ...

    @property
    def dimension(self) -> int:
        """How many floats every vector has."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text of ``texts``, in the same order."""
        ...


FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: a vector is stored as float32, so a larger value cannot be."""


def checked_vectors(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Embed ``texts`` and refuse an answer of the wrong count, width or values.

    Every store calls the embedder through this, so a misbehaving adapter is an
    :class:`EmbedderError` naming it, never a vector silently truncated by ``zip``. The
    embedder's declared model and dimension are checked first, even for no texts (an open
    checks an embedder so, without calling it): the model is the address of every vector
    recorded in the log, and one that is not text would be appended as it is and never
    decode again.
    """
    _check_identity(embedder)
    if not texts:
        return []
    vectors = embedder.embed(list(texts))
    if isinstance(vectors, str | bytes) or not hasattr(vectors, "__len__"):
        raise EmbedderError(
            f"embedder {embedder.model!r} returned a {type(vectors).__name__} for "
            f"{len(texts)} texts: an embedder must return one vector per text, in a list"
        )
    if len(vectors) != len(texts):
        raise EmbedderError(
            f"embedder {embedder.model!r} returned {len(vectors)} vectors for {len(texts)} "
            "texts: an embedder must return exactly one vector per text, in order"
        )
    checked = []
    for index, vector in enumerate(vectors):
        floats = _floats(vector)
        if floats is None:
            raise EmbedderError(
                f"embedder {embedder.model!r} returned for text {index} a "
                f"{type(vector).__name__} that is not a sequence of real numbers (a str, a "
                "bool, None or a complex is not one): return floats"
            )
        if len(floats) != embedder.dimension:
            raise EmbedderError(
                f"embedder {embedder.model!r} returned a vector of {len(floats)} floats for "
                f"text {index}, but declares dimension {embedder.dimension}: fix the declared "
                "dimension (it is part of the index) or the model"
            )
        problem = values_problem(floats)
        if problem is not None:
            raise EmbedderError(
                f"embedder {embedder.model!r} returned a vector for text {index} that {problem}"
            )
        checked.append(floats)
    return checked


def _check_identity(embedder: Embedder) -> None:
    """Refuse an embedder whose declared model or dimension no store can use, with the checks
    an adapter's own arguments get."""
    try:
        _check_model(embedder.model)
        _check_dimension(embedder.dimension)
    except InvalidArgumentError as exc:
        raise EmbedderError(
            f"embedder {type(embedder).__name__} declares an unusable {exc.parameter}: {exc}"
        ) from exc


_FLOAT: Final = {float}
"""The element types of a vector of Python floats: copied as they are."""


def _floats(vector: object) -> list[float] | None:
    """``vector`` as floats, or None unless it is an iterable of real numbers (ints, floats,
    numpy's scalars; never a bool). ``float()`` alone read "1" and True as numbers and a str
    vector as its characters. This is every embedding's path, so the element types are
    collected in one pass and checked once each (a vector has one or two), a list of floats
    is copied as it is, and an array is read with its own ``tolist``: a 384-float vector
    costs about what ``list(map(float, vector))`` did."""
    if isinstance(vector, str | bytes | bytearray):
        return None
    try:
        if isinstance(vector, list | tuple):
            items: Any = vector
        else:
            tolist = getattr(vector, "tolist", None)  # numpy, torch: Python numbers at C speed
            items = tolist() if tolist is not None else list(vector)  # type: ignore[call-overload]
        kinds = set(map(type, items))
        if kinds == _FLOAT:
            return items if isinstance(items, list) and items is not vector else list(items)
        if not all(map(_real, kinds)):
            return None
        return list(map(float, items))
    except (TypeError, ValueError, OverflowError):  # not iterable; an int past float's range
        return None


@functools.cache
def _real(kind: type) -> bool:
    """Whether a vector's element of type ``kind`` is a real number: one :mod:`numbers` calls
    real (ints, floats, numpy's), or one a tensor library makes a number by ``__float__``
    alone (a TensorFlow scalar, a torch 0-d tensor, a ``Decimal``); never text, a bool
    (numpy's too: ``float(True)`` is 1) nor a complex (its ``__float__`` drops the imaginary
    part or raises). Cached: a vector has one or two element types, and every embedding asks."""
    if kind is bool or kind.__name__ == "bool_" or issubclass(kind, str | bytes | bytearray):
        return False
    if issubclass(kind, numbers.Complex) and not issubclass(kind, numbers.Real):
        return False
    return issubclass(kind, numbers.Real) or hasattr(kind, "__float__")


def values_problem(floats: Sequence[float]) -> str | None:
    """What keeps ``floats`` from being stored as a vector, or None: the one rule for an
    embedder's answers and a query vector alike (a query is compared with stored ones)."""
    if not all(map(math.isfinite, floats)):  # a NaN score passes no floor: "nothing found"
        return "holds a non-finite value (NaN or infinity)"
    if max(map(abs, floats), default=0.0) > FLOAT32_MAX:
        return "holds a value past float32's range (about 3.4e38), as which vectors are stored"
    return None


def _check_dimension(dimension: object) -> int:
    """A positive int: Python's or any integer type (numpy's ``int64``, from an array's
    shape), never a bool."""
    try:
        whole = None if isinstance(dimension, bool) else operator.index(dimension)  # type: ignore[arg-type]
    except TypeError:
        whole = None
    if whole is None or whole < 1:
        raise InvalidArgumentError(
            f"dimension must be a positive int, got {dimension!r}", parameter="dimension"
        )
    return whole


def _check_model(model: object) -> str:
    if not isinstance(model, str) or not model.strip():
        raise InvalidArgumentError(
            f"model must name the embedding model, got {model!r}: it is part of every "
            "recorded embedding's address",
            parameter="model",
        )
    return model


class HashingEmbedder:
    """Deterministic, dependency-free embeddings: hashed terms and character trigrams.

    Each term of :func:`~loom_memory.text.tokenize` adds weight 1 to one signed hashed
    coordinate, and each trigram of ``<term>`` a quarter of that, so texts that share a term
    score high, texts that share only word fragments ("postgres", "postgresql") score lower
    but above zero, and unrelated texts score about zero. The vector is L2-normalised; a text
    without terms is the zero vector, which is similar to nothing. The default width, 1024,
    keeps hash collisions between the few features of two short unrelated texts rare: at 256
    one in a handful of conformance pairs collided and scored 0.2, which is a false match.
    """

    _TRIGRAM_WEIGHT = 0.25

    def __init__(self, *, dimension: int = 1024) -> None:
        self._dimension = _check_dimension(dimension)

    @property
    def model(self) -> str:
        """``loom-hashing-v1/<dimension>``: the scheme's version and width are the space."""
        return f"loom-hashing-v1/{self._dimension}"

    @property
    def dimension(self) -> int:
        """The width given at construction."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text (all zeros for a text without terms)."""
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        # A short text has tens of features and the vector a thousand coordinates, so only the
        # coordinates a feature touched are summed and divided: the weights are quarters, so
        # every sum here is exact in any order, and the bits are those of the whole-vector
        # arithmetic in half the time (replay_tests/memory/test_embedder.py pins them).
        touched: dict[int, float] = {}
        for feature, weight in _features(tokenize(text), self._TRIGRAM_WEIGHT):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            number = int.from_bytes(digest, "little")
            index = (number >> 1) % self._dimension
            touched[index] = touched.get(index, 0.0) + (weight if number & 1 else -weight)
        norm = math.sqrt(sum(value * value for value in touched.values()))
        vector = [0.0] * self._dimension
        if norm:
            for index, value in touched.items():
                vector[index] = value / norm
        return vector


def _features(terms: Iterable[str], trigram_weight: float) -> Iterable[tuple[str, float]]:
    for term in terms:
        yield f"w:{term}", 1.0
        marked = f"<{term}>"
        for start in range(len(marked) - 2):
            yield f"c:{marked[start : start + 3]}", trigram_weight


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint, called through a client you pass in.

    ``client`` is duck-typed (``client.embeddings.create(model=, input=)`` returning ``.data``
    items with ``.index`` and ``.embedding``), so an ``openai.OpenAI`` wrapped by
    ``loom_runtime.wrap`` is recorded call by call. ``dimension`` is required: the width is
    part of the index and is checked on every answer, never discovered by a probe call.
    ``identity`` defaults to ``openai:<model>``; give another when the same model name serves
    different weights on different endpoints.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        dimension: int,
        identity: str | None = None,
        batch_size: int = 256,
    ) -> None:
        self._client = client
        self._name = _check_model(model)
        self._dimension = _check_dimension(dimension)
        self._identity = _check_model(identity) if identity is not None else f"openai:{model}"
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgumentError(
                f"batch_size must be a positive int, got {batch_size!r}", parameter="batch_size"
            )
        self._batch_size = batch_size

    @property
    def model(self) -> str:
        """The identity given, or ``openai:<model>``."""
        return self._identity

    @property
    def dimension(self) -> int:
        """The width given at construction."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in batches of ``batch_size``, each answer put back in input order."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            response = self._client.embeddings.create(model=self._name, input=batch)
            items = sorted(response.data, key=lambda item: item.index)
            vectors.extend([float(value) for value in item.embedding] for item in items)
        return vectors


class SentenceTransformersEmbedder:
    """A ``sentence_transformers.SentenceTransformer`` you loaded (this module never imports it).

    ``model`` names the weights (e.g. ``sentence-transformers/all-MiniLM-L6-v2``): the library
    does not reliably report the name a model was loaded from, and the name is the index.
    """

    def __init__(self, encoder: Any, *, model: str) -> None:
        self._encoder = encoder
        self._model = _check_model(model)
        self._dimension = _check_dimension(int(encoder.get_sentence_embedding_dimension()))

    @property
    def model(self) -> str:
        """The name given at construction."""
        return self._model

    @property
    def dimension(self) -> int:
        """What the loaded model reports."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The model's normalised embeddings of ``texts``."""
        encoded = self._encoder.encode(list(texts), normalize_embeddings=True)
        return [[float(value) for value in vector] for vector in encoded]


class FastEmbedEmbedder:
    """A ``fastembed.TextEmbedding`` you constructed (this module never imports fastembed).

    The identity is ``fastembed:<model_name>``; ``dimension`` is required because fastembed
    reports it only through its model catalogue.
    """

    def __init__(self, encoder: Any, *, dimension: int) -> None:
        self._encoder = encoder
        self._model = f"fastembed:{_check_model(encoder.model_name)}"
        self._dimension = _check_dimension(dimension)

    @property
    def model(self) -> str:
        """``fastembed:<model_name>``."""
        return self._model

    @property
    def dimension(self) -> int:
        """The width given at construction."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """fastembed's embeddings of ``texts`` (it yields one array per text)."""
        return [[float(value) for value in vector] for vector in self._encoder.embed(list(texts))]
