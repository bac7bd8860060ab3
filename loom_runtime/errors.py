"""The one error hierarchy of loom.

Every error loom raises on purpose derives from :class:`LoomError`, so a caller can catch
"anything loom refused" in one clause. Each package (runtime, memory, knowledge) adds its own
subclasses under this root; each message says what happened *and* what to do next. Driver
errors are translated with ``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations


class LoomError(Exception):
    """Root of every error loom raises on purpose."""


class ConfigurationError(LoomError):
    """The log or a store was configured with a value loom cannot use (bad URL, option)."""


class NotSerialisableError(LoomError, TypeError):
    """A value that must go into the log cannot be encoded; ``path`` names the offending field."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path
