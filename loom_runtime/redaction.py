"""Redaction before storage: secrets in what loom records become markers before the log sees them.

An append-only log cannot forget: a bearer token that reaches it stays in every copy, backup
and bundle of it. So the one :class:`Redactor` of a log runs *before* anything is written, in
two places (ADR 0012):

* at the log boundary of a value (:mod:`loom_runtime.codec`): a decision's value and input
  are redacted as they are encoded, and what the live run gets back is the decoded round trip
  of the *redacted* bytes. The live run therefore already sees ``[REDACTED:bearer-token]``
  where the token was, and a replay, fed the same stored bytes, reproduces it exactly;
* in the mapper, over every string of every event payload (error messages, memory entries,
  document passages, values that reached an event without passing the codec): the guarantee
  that nothing unredacted is stored, whichever path produced the event.

Redaction is idempotent (a marker never matches again), so the second pass over an already
redacted value finds nothing and counts nothing. Only string *values* are scanned, never
mapping keys: replacing two keys by the same marker would silently merge them.

``mode="refuse"`` raises :class:`~loom_runtime.errors.SecretRefusedError` at the first match
instead, before anything is written. A private-key block with no END line (a truncated paste)
is redacted to the end of the string rather than left half-stored.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Literal, Union

import msgspec

from loom_runtime.errors import SecretRefusedError

RedactionMode = Literal["redact", "refuse"]
RedactorOption = Union["Redactor", Literal["builtin"], None]
"""How a log is configured: ``"builtin"`` (the default: a fresh redactor with the built-in
patterns), a :class:`Redactor` of your own, or ``None`` to store values as given."""
MARKER = "[REDACTED:{name}]"
_MARKER_PREFIX = "[REDACTED:"


@dataclass(frozen=True)
class SecretPattern:
    """A named regular expression for one kind of secret.

    If the expression has a group named ``secret``, only that group is replaced (so
    ``Bearer `` or ``user:`` stays readable around the marker); otherwise the whole match is.
    """

    name: str
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, name: str, pattern: str, flags: int = 0) -> SecretPattern:
        return cls(name, re.compile(pattern, flags))


BUILTIN_PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern.compile(
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
        r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
        re.DOTALL,
    ),
    SecretPattern.compile(
        "bearer-token", r"\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)", re.IGNORECASE
    ),
    SecretPattern.compile("aws-key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    SecretPattern.compile(
        "aws-secret",
        r"(?i:aws_?secret_?access_?key)\W{0,3}(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    ),
    SecretPattern.compile(
        "url-password", r"\b[a-z][a-z0-9+.\-]*://[^\s/:@]+:(?P<secret>[^\s/@]+)@", re.IGNORECASE
    ),
)
"""Common secret formats: PEM private keys, bearer tokens, AWS access keys and secret keys,
and passwords in URLs (``scheme://user:password@host``)."""


class Redactor:
    """Replaces secrets in strings (or refuses them) and counts what it replaced, per pattern.

    One instance per log: its counts are that log's (this process's) redactions since it was
    opened; the markers in the stored JSON are the durable record.
    """

    def __init__(
        self,
        *,
        patterns: Iterable[SecretPattern] = BUILTIN_PATTERNS,
        extra: Iterable[SecretPattern] = (),
        mode: RedactionMode = "redact",
    ) -> None:
        """``patterns`` replaces the built-in set; ``extra`` adds to it."""
        if mode not in ("redact", "refuse"):
            raise ValueError(f"mode must be 'redact' or 'refuse', not {mode!r}")
        self.patterns = (*patterns, *extra)
        self.mode: RedactionMode = mode
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def counts(self) -> dict[str, int]:
        """Values redacted so far, by pattern name."""
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        """Values redacted so far, all patterns."""
        with self._lock:
            return sum(self._counts.values())

    def text(self, value: str, *, path: str) -> str:
        """``value`` with every secret replaced by its marker (or refused)."""
        found: Counter[str] = Counter()
        redacted = value
        for pattern in self.patterns:
            if pattern.regex.search(redacted):
                replace = partial(self._replace, pattern=pattern, found=found, path=path)
                redacted = pattern.regex.sub(replace, redacted)
        if not found:
            return value  # the same object: callers keep their bytes when nothing changed
        with self._lock:
            self._counts.update(found)
        return redacted

    def value(self, value: object, *, path: str) -> object:
        """Plain data (str, list, tuple, dict values, ``msgspec.Raw``) with strings redacted.

        Returns ``value`` itself when nothing changed, so the caller can keep its bytes.
        """
        if isinstance(value, str):
            return self.text(value, path=path)
        if isinstance(value, msgspec.Raw):
            return self.raw(value, path=path)
        if isinstance(value, list | tuple):
            items = [self.value(item, path=f"{path}[{i}]") for i, item in enumerate(value)]
            changed = any(new is not old for new, old in zip(items, value, strict=True))
            return type(value)(items) if changed else value
        if isinstance(value, Mapping):
            pairs = {k: self.value(v, path=f"{path}.{k}") for k, v in value.items()}
            changed = any(pairs[k] is not v for k, v in value.items())
            return pairs if changed else value
        return value

    def raw(self, raw: msgspec.Raw, *, path: str) -> msgspec.Raw:
        """Stored JSON with its strings redacted; the same object when there was nothing to do.

        Decoded first, never matched as JSON text: escaping (``\\n`` for a newline, ``\\"``)
        would hide a secret from a pattern written for the string.
        """
        decoded = msgspec.json.decode(raw)
        redacted = self.value(decoded, path=path)
        return raw if redacted is decoded else msgspec.Raw(msgspec.json.encode(redacted))

    def _replace(
        self, match: re.Match[str], *, pattern: SecretPattern, found: Counter[str], path: str
    ) -> str:
        """The marker for one match (keeping the text around a ``secret`` group), or refuse."""
        group = "secret" if "secret" in pattern.regex.groupindex else 0
        secret = match.group(group)
        if secret.startswith(_MARKER_PREFIX):
            return match.group(0)  # already redacted: idempotent, not counted again
        if self.mode == "refuse":
            raise SecretRefusedError(pattern=pattern.name, path=path)
        found[pattern.name] += 1
        before = match.string[match.start() : match.start(group)]
        after = match.string[match.end(group) : match.end()]
        return before + MARKER.format(name=pattern.name) + after


def resolve_redactor(option: RedactorOption) -> Redactor | None:
    """The redactor an option stands for; ``"builtin"`` makes a new one (its own counts)."""
    if option == "builtin":
        return Redactor()
    if option is None or isinstance(option, Redactor):
        return option
    raise TypeError(f"redactor must be a Redactor, 'builtin' or None, not {option!r}")
