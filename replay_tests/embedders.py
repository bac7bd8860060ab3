"""The test embedder the vector, hybrid and knowledge tests share (one copy, not one per file)."""

from __future__ import annotations

from collections.abc import Sequence

from loom_memory import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting every text it is asked for; raises once ``broken`` (the
    model is gone), so a test proves a path never calls it."""

    def __init__(self, *, dimension: int = 1024) -> None:
        super().__init__(dimension=dimension)
        self.texts: list[str] = []
        self.broken = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.broken:
            raise AssertionError(f"the embedding model was called for {list(texts)!r}")
        self.texts.extend(texts)
        return super().embed(texts)


class MisdeclaredEmbedder(CountingEmbedder):
    """The test embedder declaring another ``model`` or ``dimension`` than it embeds with (a
    misconfigured adapter: a config value missing, a number where a name belongs)."""

    def __init__(self, *, model: object = "hash", dimension: object = 16) -> None:
        super().__init__(dimension=16)
        self._declared = (model, dimension)

    @property
    def model(self) -> str:
        return self._declared[0]  # type: ignore[return-value]

    @property
    def dimension(self) -> int:
        return self._declared[1]  # type: ignore[return-value]
