"""The errors a memory store raises on purpose, all under :class:`loom_runtime.errors.LoomError`.

One root (:class:`MemoryStoreError`) lets a caller catch "anything the memory seam refused" in
one clause, while each subclass also derives from the builtin a Python caller would reach for
first (``TypeError``, ``ValueError``), so generic handlers keep working. Every message says what
to do next. Driver failures are translated to :class:`BackendError` with ``raise ... from exc``
so the database's own message stays on ``__cause__``.
"""

from __future__ import annotations

from loom_runtime import (
    ConfigurationError,
    LoomError,
    NotSerialisableError,
    SecretIdentifierError,
)


class MemoryStoreError(LoomError):
    """Root of every error the memory seam raises on purpose."""


class InvalidArgumentError(MemoryStoreError, ValueError):
    """An argument to a store verb is unusable; ``parameter`` names it."""

    def __init__(self, message: str, *, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class InvalidKeyError(InvalidArgumentError, TypeError):
    """A key is not a ``str`` of storable text: keys are compared as text, so anything else
    would alias, and a NUL or lone surrogate cannot be stored by every backend."""

    def __init__(self, key: object, *, problem: str | None = None) -> None:
        shown = f"{key[:60]!r}..." if isinstance(key, str) and len(key) > 60 else repr(key)
        super().__init__(
            f"memory key {shown} {problem}: use a key of valid text without NUL"
            if problem is not None
            else f"memory keys are str, got {type(key).__name__} {key!r}: convert it explicitly",
            parameter="key",
        )


class MemoryIdentifierSecretError(MemoryStoreError, SecretIdentifierError):
    """A memory key or entry id holds what looks like a secret; nothing was written.

    ``path`` names it (``key``, ``entries[2].id``, ``ids``), never the value. A redacted key
    would file the entries under another key, so ``read`` of the key given finds nothing.
    """


class InvalidLimitError(InvalidArgumentError):
    """A search limit is not a positive int (an empty result must be asked for by not searching)."""

    def __init__(self, limit: object) -> None:
        super().__init__(
            f"search limit must be a positive int, got {limit!r}: pass limit >= 1",
            parameter="limit",
        )


class EntryNotSerialisableError(MemoryStoreError, NotSerialisableError):
    """An entry cannot be stored so that it reads back equal; nothing of the call was written.

    ``path`` names the offending field, e.g. ``entries[1].content['meta'][0]``.
    """


class StoreConfigurationError(MemoryStoreError, ConfigurationError):
    """A store was constructed with a value it cannot use (table prefix, URL, missing FTS5)."""


class BackendError(MemoryStoreError):
    """The database failed underneath a store verb; the driver error is on ``__cause__``."""


class StoreNotOnLogDatabaseError(StoreConfigurationError):
    """An event-sourced memory was given a SQL store that does not write through the log's engine.

    Exactly-once projection needs the store's rows and the tracking position in ONE transaction,
    which is only possible on the log's own database and connection pool.
    """


class ProjectionFailedError(MemoryStoreError):
    """A write reached the log but the store failed to apply it; the store is unchanged.

    The write is durable (``position`` is its place in the log) and nothing was half-applied:
    the store's rows and its tracking position rolled back together. Fix the store and call
    ``catch_up()`` (any later write does too); the event is applied then, exactly once.
    """

    def __init__(self, message: str, *, position: int) -> None:
        super().__init__(message)
        self.position = position


class SearchNotSupportedError(MemoryStoreError, TypeError):
    """A relevance search was asked of a store without ``search``.

    Refused rather than degraded to ``read``: a silent fallback returns plausible entries that
    are not the relevant ones, which shows up only as worse answers, never as an error.
    """


class UnknownTierError(InvalidArgumentError):
    """A tier name that the :class:`~loom_memory.tiers.TieredMemory` was not configured with."""


class EmbedderError(MemoryStoreError):
    """An embedder answered with the wrong number of vectors, the wrong width or a non-finite
    value; nothing of the call was written."""


class EmbeddingModelChangedError(StoreConfigurationError):
    """A vector store was opened with another embedding model than the one it was indexed with.

    Vectors of two models live in unrelated spaces, so mixing them would rank by numbers that
    mean nothing. A changed model is a new index: give the store a new ``table_prefix`` (and
    rebuild it from the log), or open it with the model it names. A model whose width changed
    under the same name is refused too, when its recorded vectors are read: the name is their
    address in the log, so such a model needs another name.
    """


class EmbeddingNotRecordedError(MemoryStoreError):
    """A vector store projected from the log met a passage whose embedding the log lacks.

    A projection never calls the embedding model (a rebuild or an as-of read must not depend
    on it), so the write that logged the passage should have logged its embedding first.
    """
