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
redacted value finds nothing and counts nothing; the mapper skips it for the values the codec's
pass returned (:meth:`Redactor.passed`), and reads every other one. Mapping keys are redacted
as values are; two keys of one mapping that would become the same marker are refused
(:class:`~loom_runtime.errors.RedactedKeysCollideError`) rather than merged.

``mode="refuse"`` raises :class:`~loom_runtime.errors.SecretRefusedError` at the first match
instead, before anything is written. A private-key block with no END line (a truncated paste)
is redacted to the end of the string rather than left half-stored.

Identifiers (ids, keys, names) are never rewritten, in either mode: a rewritten id names
something else. :meth:`Redactor.check_identifier` refuses one that holds a secret instead,
which is why a pattern may carry a ``check`` that tells a token from a word
(``Bearer authentication.md`` names a file). Bytes are scanned as the text they hold, since
base64 would hide a secret from every pattern.
"""

from __future__ import annotations

import base64
import copy
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar, Union

import msgspec

from loom_runtime.envelope import TEXT_PREFIX, written_sealed_text
from loom_runtime.errors import (
    RedactedKeysCollideError,
    SecretIdentifierError,
    SecretRefusedError,
)

T = TypeVar("T")
RedactionMode = Literal["redact", "refuse"]
RedactorOption = Union["Redactor", Literal["builtin"], None]
"""How a log is configured: ``"builtin"`` (the default: a fresh redactor with the built-in
patterns), a :class:`Redactor` of your own, or ``None`` to store values as given."""
MARKER = "[REDACTED:{name}]"
_MARKER_PREFIX = "[REDACTED:"
_MARKER_BYTES = _MARKER_PREFIX.encode()
_MARKER_IN_A_RUN = re.compile(rb"[A-Za-z0-9+/]\[REDACTED:|\[REDACTED:[^\]]{0,100}\][A-Za-z0-9+/]")
"""A marker beside a base64 character (:func:`marked_in_a_run`); a marker's name read at most
100 characters far, so text full of unclosed markers (a crafted recording) is read once."""


@dataclass(frozen=True)
class SecretPattern:
    """A named regular expression for one kind of secret.

    If the expression has a group named ``secret``, only that group is replaced (so
    ``Bearer `` or ``user:`` stays readable around the marker); otherwise the whole match is.

    ``hints`` are lower-case substrings at least one of which every match contains: a string
    whose lower-cased form holds none of them skips the regex. Every value loom stores is
    scanned, almost all of them clean, so this is what keeps redaction cheap. No hints: the
    regex always runs.

    ``requires`` is a set of characters at least one of which every match contains (``-`` of
    ``sk-``, ``:`` of ``://``): looked for with ``in`` before any hint, because a single
    character is found at memchr speed while every substring scan walks the whole string.

    ``check``, when given, must also accept the matched secret: some shapes cannot be told
    from ordinary words by a regex alone (``Bearer authentication.md`` is a file name, not a
    token), and a false positive in an identifier refuses a write (ADR 0012).
    """

    name: str
    regex: re.Pattern[str]
    hints: tuple[str, ...] = ()
    check: Callable[[str], bool] | None = None
    requires: str = ""

    @classmethod
    def compile(
        cls,
        name: str,
        pattern: str,
        flags: int = 0,
        *,
        hints: tuple[str, ...] = (),
        check: Callable[[str], bool] | None = None,
        requires: str = "",
    ) -> SecretPattern:
        hints = tuple(hint.lower() for hint in hints)
        return cls(name, re.compile(pattern, flags), hints, check, requires)

    def may_match(self, value: str, lowered: str) -> bool:
        """False when ``value`` (``lowered`` is its lower-case form) cannot hold a match."""
        # Plain loops, not any(...) over a generator: this runs for every pattern on every
        # string loom stores, and a generator costs more than the scans on short strings.
        if self.requires:
            for char in self.requires:
                if char in value:
                    break
            else:
                return False
        if not self.hints:
            return True
        for hint in self.hints:  # noqa: SIM110 - see above
            if hint in lowered:
                return True
        return False


def token_like(candidate: str) -> bool:
    """True for a string shaped like a generated credential rather than a word or a name.

    The rule of gitleaks' and detect-secrets' generic detectors, made deterministic: a token
    is long and mixes character classes. At least 16 characters with a digit and a letter
    (hex and base64 tokens; a random 16-character base64 string lacks a digit about 6% of
    the time), or at least 24 with both cases. ``authentication.md`` or ``token-rotation``
    are neither.
    """
    if len(candidate) < 16:
        return False
    has_digit = any(c.isdigit() for c in candidate)
    has_lower = any(c.islower() for c in candidate)
    has_upper = any(c.isupper() for c in candidate)
    if has_digit and (has_lower or has_upper):
        return True
    return len(candidate) >= 24 and has_lower and has_upper


def basic_credentials(candidate: str) -> bool:
    """True when ``candidate`` is base64 of ``user:password`` (what a Basic header carries).

    ``Basic`` is an ordinary English word; the payload after it is what makes the header.
    """
    try:
        decoded = base64.b64decode(candidate, validate=True).decode("utf-8")
    except ValueError:  # binascii.Error (not base64) and UnicodeDecodeError are both ValueErrors
        return False
    return ":" in decoded and decoded.isprintable()


_TOKEN = r"[A-Za-z0-9_\-]"
"""A character of the base64url / alphanumeric tokens most API vendors issue.

Patterns that begin with a literal (``sk-``, ``AIza``, ``xox``) put it first and check the
word boundary with a lookbehind after it (``sk-(?<!\\wsk-)`` rather than ``\\bsk-``): ``re``
then finds candidates with its fast literal search instead of trying every position, ~20x
less time on a 1 KB string (measured, ADR 0012)."""

BUILTIN_PATTERNS: tuple[SecretPattern, ...] = (
    # PEM private keys; an unterminated block (a cut-off paste) is redacted to the end.
    SecretPattern.compile(
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
        r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
        re.DOTALL,
        hints=("private key",),
        requires="-",
    ),
    # RFC 6750 bearer tokens (JWTs, opaque tokens): the scheme word stays readable.
    SecretPattern.compile(
        "bearer-token",
        r"bearer(?<!\wbearer)\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
        re.IGNORECASE,
        hints=("bearer",),
        check=token_like,
    ),
    # RFC 7617 Basic credentials: base64 of user:password after the scheme word.
    SecretPattern.compile(
        "basic-auth",
        r"basic(?<!\wbasic)\s+(?P<secret>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])",
        re.IGNORECASE,
        hints=("basic",),
        check=basic_credentials,
    ),
    # AWS access key ids (gitleaks aws-access-token prefixes).
    SecretPattern.compile(
        "aws-key",
        r"A(?<!\wA)(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}\b",
        hints=("akia", "asia", "abia", "acca"),
        requires="A",  # the regex is case-sensitive: no capital A, no key (one memchr, not 4 scans)
    ),
    # AWS secret access keys: 40 base64 characters after their variable name (and up to six
    # characters of quotes, spaces and a separator: `": "` of JSON is four).
    SecretPattern.compile(
        "aws-secret",
        r"(?i:aws_?secret_?access_?key)\W{0,6}(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        hints=("secret",),
    ),
    # Anthropic keys: sk-ant-api03-... / sk-ant-admin01-... (before openai, which shares sk-).
    SecretPattern.compile(
        "anthropic-key",
        rf"sk-ant-(?<!\wsk-ant-){_TOKEN}{{20,}}",
        hints=("sk-ant-",),
        requires="-",
    ),
    # OpenAI keys: legacy sk-<48>, project / service-account / admin keys sk-proj-..., all
    # random base64url: a hyphenated slug after sk- (sk-learn-...) is not one.
    SecretPattern.compile(
        "openai-key",
        rf"sk-(?<!\wsk-)(?:proj-|svcacct-|admin-)?(?P<secret>{_TOKEN}{{20,}})",
        hints=("sk-",),
        requires="-",
        check=token_like,
    ),
    # GitHub tokens: classic (ghp_ personal, gho_ OAuth, ghu_/ghs_ app, ghr_ refresh) and
    # fine-grained personal access tokens (github_pat_).
    SecretPattern.compile(
        "github-token",
        r"g(?<!\wg)(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})",
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        requires="_",
    ),
    # Google API keys: AIza and 35 base64url characters.
    SecretPattern.compile(
        "google-api-key",
        rf"AIza(?<!\wAIza){_TOKEN}{{35}}",
        hints=("aiza",),
        requires="A",  # case-sensitive, as aws-key
    ),
    # Slack tokens: bot (xoxb), user (xoxp), app-level, legacy workspace and refresh tokens.
    SecretPattern.compile(
        "slack-token",
        r"xox(?<!\wxox)[abposre]-[0-9]{6,}-[A-Za-z0-9-]{6,}",
        hints=("xox",),
        requires="-",
    ),
    # Passwords and keys assigned in config, shell or JSON text: password=..., "password":
    # "...", api_key: ..., client_secret=... (detect-secrets' KeywordDetector's keywords).
    # A quoted value is taken whole, spaces and the other quote included (it ends only at the
    # quote that opened it); a bare one ends at a separator. After
    # a colon a bare value must hold a non-letter: "Password: how to reset it" is a heading.
    SecretPattern.compile(
        "password-assignment",
        r"(?<![A-Za-z0-9])(?:passwd|password|passphrase|pwd|api[_-]?key|secret[_-]?key"
        r"|client[_-]?secret|(?:access|auth|refresh)[_-]?token)[\"']?\s*"
        r"(?:=|:(?=\s*[\"']|\s*[^\s\"',;&}]*[^A-Za-z\s\"',;&}]))\s*"
        r"(?P<quote>[\"'])?(?P<secret>(?(quote)(?:(?!(?P=quote))[^\n])+|[^\s\"',;&}]+))",
        re.IGNORECASE,
        hints=(
            *("passw", "passphrase", "pwd", "_token", "-token", "accesstoken", "authtoken"),
            *("api_key", "api-key", "apikey", "secret_key", "secret-key", "secretkey"),
            *("client_secret", "client-secret", "clientsecret", "refreshtoken"),
        ),
        requires=":=",
    ),
    # Passwords in URLs, scheme://user:password@host: the user may be empty (redis://:pw@h)
    # and the password may hold '/' or '@': it runs to the LAST '@' that a host name follows
    # (a pasted password is rarely percent-encoded; redacting a path segment too is the safe
    # error). A port followed by a path is not a password. Scheme, user and password are
    # bounded (32, 256, 256 characters): unbounded, text without spaces holding many "x://y:"
    # (a minified list of service URLs) was rescanned to its end from each, quadratic time.
    SecretPattern.compile(
        "url-password",
        r"\b[a-z][a-z0-9+.\-]{0,31}://[^\s/:@]{0,256}:(?!\d{1,5}/)(?P<secret>[^\s?#]{1,256})"
        r"@(?=[A-Za-z0-9.\-\[\]:]*(?:[/?#\s]|\Z))",
        re.IGNORECASE,
        hints=("://",),
        requires=":",
    ),
)
"""Common secret formats, each a shape gitleaks or detect-secrets also detects: PEM private
keys, bearer and Basic credentials, AWS, OpenAI, Anthropic, GitHub, Google and Slack keys,
password assignments and passwords in URLs."""
_BUILTIN: frozenset[int] = frozenset(map(id, BUILTIN_PATTERNS))
"""The built-in patterns, by id, that a payload passes by (:func:`_in_payload`; a team's own
still read it): an id is looked up per match, where hashing the pattern cost 0.7 µs."""


_CREDENTIAL_ENTRY = "password-assignment"
"""The pattern a credential-named mapping entry is counted and marked as: its shape."""

_CREDENTIAL_KEY = re.compile(
    r"(?<![A-Za-z0-9])(?:passwd|password|passphrase|pwd|api[_-]?key|secret[_-]?key"
    r"|client[_-]?secret|(?:access|auth|refresh)[_-]?token)\Z",
    re.IGNORECASE,
)
"""A mapping key naming a credential: password-assignment's keywords, ending the name after a
non-alphanumeric character or at its start (``db_password``, ``apiKey``; not ``password_hint``
nor ``dbPassword``, as the text form's pattern would not take them)."""


_CREDENTIAL_KEYS: dict[str, bool] = {}
""":func:`credential_key` of the names met so far (a payload's names repeat: every message of
a conversation is ``role`` and ``content``); 4,096 at most (names come from payloads)."""


def credential_key(name: str) -> bool:
    """Whether a mapping entry named ``name`` holds a credential (:data:`_CREDENTIAL_KEY`)."""
    known = _CREDENTIAL_KEYS.get(name)
    if known is None:
        if len(_CREDENTIAL_KEYS) >= 4096:
            _CREDENTIAL_KEYS.clear()
        known = _CREDENTIAL_KEYS[name] = _CREDENTIAL_KEY.search(name) is not None
    return known


_INERT_ITEMS = frozenset({int, float, bool, type(None)})
"""Item types that hold no text: a list of only these is returned without a walk."""

_CLEAN_CACHE_SIZE = 256
"""How many clean JSON values a redactor remembers (a few hundred KB at ~1 KB each)."""

_PASSED_SIZE = 64
"""How many values a redactor remembers having made from fresh bytes (:meth:`Redactor.encoded`)
until the mapper stores them: one per thread recording a decision at a time."""

_MARKERS = re.compile(rf"{re.escape(_MARKER_PREFIX)}[^\]]*\]")
"""Markers, cut out of a text before its hints are looked for again (:meth:`Redactor._text`)."""

_ONE_SEARCH_LENGTH = 48
"""Strings up to this long are first searched for all hints at once (:meth:`Redactor._hintless`):
below it, one regex search beat twelve patterns' ``in`` scans (0.3-0.6 µs against ~1.1 µs at
9-32 characters); above it the scans, at memchr speed, win (1.4 against 1.2 µs at 64)."""

_PAYLOAD_LENGTH = 256
"""A run of base64 characters this long is a payload (:func:`_in_payload`): an embedding of
48 floats is 256 characters, a secret a few dozen."""
_RUN = re.compile(r"[A-Za-z0-9+/]*")
"""Base64 characters, as many as there are (always matches, maybe empty)."""
_RUN_WHOLE = re.compile(r"[A-Za-z0-9+/]+")
"""Base64 characters only (what is left of a match must be, for it to lie in a payload)."""

_CLEAN_NAME_LENGTH = 200
"""Identifiers longer than this are checked every time rather than remembered."""

_CLEAN_NAMES_CHARS = 2_000_000
"""How many characters of clean identifiers a redactor remembers (a few MB): every document
id of a corpus of tens of thousands, which a sync checks at its boundary and again in the
event that lists them all. 256 names (the earlier bound, first in first out) held none of a
10,000-id sync by the time it came round again, so every check ran every pattern. A name is
remembered only once found clean, and patterns never change after a redactor is made: a
name holding a secret is checked, and refused, every time."""


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
        hints = [hint for pattern in self.patterns for hint in pattern.hints]
        self._hints = (
            re.compile("|".join(map(re.escape, hints)))
            if all(pattern.hints for pattern in self.patterns)
            else None
        )
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        # JSON found clean lately (oldest first): the same JSON met again by another path (a
        # store's entries, a value not passed by ``encoded``) is a lookup, not a walk.
        # Patterns and mode never change after here.
        self._clean: dict[bytes, None] = {}
        # Values this redactor returned from ``encoded`` lately, by identity (holding each,
        # so its id is not reused while it is here): their bytes are already redacted.
        self._passed: dict[int, msgspec.Raw] = {}
        # Identifiers found clean lately: a flow asks the same keys and kinds in every run,
        # and each is checked on every append (read without the lock: a dict lookup is atomic).
        self._clean_names: dict[str, None] = {}
        self._clean_chars = 0
        """The characters of the names in ``_clean_names`` (bounded by _CLEAN_NAMES_CHARS)."""
        self._passes_by = True
        """Whether sealed texts and base64 payloads are passed by (False only in
        :meth:`marking_payloads`'s copy)."""
        self._marking: Redactor | None = None
        self._checking: Redactor | None = None

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
        return self._at(path, self._text, value)

    def value(self, value: object, *, path: str) -> object:
        """Plain data (str, bytes, list, tuple, dict keys and values, ``msgspec.Raw``) with
        strings redacted (bytes scanned as the text they hold).

        Returns ``value`` itself when nothing changed, so the caller can keep its bytes.
        """
        return self._at(path, self._walk, value)

    def secret_in(self, value: str) -> str | None:
        """The name of the first pattern ``value`` holds a secret of, or None; counts nothing.

        How identifiers are checked (ADR 0012): an identifier is never rewritten, so a caller
        either stores it as given (None) or refuses it, naming the field and this pattern.
        """
        lowered = value.lower()
        if self._hintless(lowered):
            return None
        for pattern in self.patterns:
            if not pattern.may_match(value, lowered):
                continue
            group = _secret_group(pattern)
            for match in pattern.regex.finditer(value):
                if _is_secret(pattern, match.group(group)):
                    return pattern.name
        return None

    def check_identifier(
        self,
        value: object,
        *,
        path: str,
        error: type[SecretIdentifierError] = SecretIdentifierError,
    ) -> None:
        """Raise ``error`` (naming ``path``, never the value) if an identifier holds a secret.

        ``value`` is one identifier (a str, or None for an absent one) or a list of them.
        Whatever the mode, an identifier is checked, never rewritten (ADR 0012).
        """
        if type(value) is str and value in self._clean_names:
            return  # a decision's key and kind, checked on every append: no list built
        names = value if isinstance(value, list | tuple) else [value]
        for index, name in enumerate(names):
            if not isinstance(name, str) or name in self._clean_names:
                continue
            pattern = self.secret_in(name)
            if pattern is not None:
                where = path if names is not value else f"{path}[{index}]"
                raise error(pattern=pattern, path=where)
            if len(name) <= _CLEAN_NAME_LENGTH:
                self._remember_clean(name)

    def _remember_clean(self, name: str) -> None:
        """Remember ``name`` as clean, forgetting the oldest names beyond the budget."""
        with self._lock:
            if name in self._clean_names:  # another thread checked it meanwhile
                return
            self._clean_names[name] = None
            self._clean_chars += len(name)
            while self._clean_chars > _CLEAN_NAMES_CHARS:
                oldest = next(iter(self._clean_names))
                del self._clean_names[oldest]
                self._clean_chars -= len(oldest)

    def check(self, value: object, *, path: str) -> None:
        """Raise what storing ``value`` would raise (a secret in refuse mode, keys that would
        be one key once redacted in any mode), counting nothing: for a plan that must refuse
        what its write will, before the write counts what it redacts."""
        if self._checking is None:  # two threads may both make one: the same patterns
            self._checking = self._fresh_copy(self.mode)
        self._checking.value(value, path=path)

    def marking_payloads(self) -> Redactor:
        """This redactor's patterns as loom ran them before 7 December 2026, when a key-shaped
        run inside a base64 payload or a sealed text was marked too: only to recognise an
        input recorded then (ADR 0012, amended "older recordings"), never to store one.

        In redact mode whatever this one's is: such an input was stored with its marker, and
        a refusal here would fail a replay the current rule answers.
        """
        if self._marking is None:  # two threads may both make one: the same patterns
            marking = self._fresh_copy("redact")
            marking._passes_by = False
            self._marking = marking
        return self._marking

    def _fresh_copy(self, mode: RedactionMode) -> Redactor:
        """This redactor (a subclass's own rules kept: no ``__init__`` is run) in ``mode``,
        with counts and caches of its own."""
        fresh = copy.copy(self)
        fresh.mode = mode
        fresh._counts = Counter()
        fresh._lock = threading.Lock()
        fresh._clean, fresh._passed, fresh._clean_names = {}, {}, {}
        fresh._clean_chars = 0
        fresh._marking = fresh._checking = None
        return fresh

    def raw(self, raw: msgspec.Raw, *, path: str) -> msgspec.Raw:
        """Stored JSON with its strings redacted; the same object when there was nothing to do."""
        return self._at(path, self._raw, raw)

    def encoded(self, data: bytes, *, path: str) -> msgspec.Raw:
        """JSON just encoded, as :meth:`raw` returns it, remembered so :meth:`passed` knows it.

        Takes ``bytes``, which nobody can change afterwards: the value it returns (a view of
        ``data``, or the redacted copy) holds what was checked for as long as it lives.
        """
        checked = self.raw(msgspec.Raw(data), path=path)  # a subclass's ``raw`` still runs
        with self._lock:
            if len(self._passed) >= _PASSED_SIZE:
                del self._passed[next(iter(self._passed))]
            self._passed[id(checked)] = checked
        return checked

    def passed(self, value: object) -> bool:
        """Whether ``value`` is one this redactor returned from :meth:`encoded` lately.

        Such a value needs no second look: a decision's value is redacted as the codec
        encodes it, and the mapper's pass over its event (which makes the guarantee for every
        other value) asks this instead of reading its bytes again.
        """
        return self._passed.get(id(value)) is value

    def _hintless(self, lowered: str) -> bool:
        """True when ``lowered``, a short string, holds no hint of any pattern: none can match.

        One search for every hint at once answers what each pattern's ``may_match`` would
        (every pattern has hints, else this is never True), several times cheaper on a short
        string, a decision's fresh key first; on a long one the per-pattern ``in`` scans win.
        """
        return (
            self._hints is not None
            and len(lowered) <= _ONE_SEARCH_LENGTH
            and self._hints.search(lowered) is None
        )

    def _at(self, path: str, redact: Callable[[T], T], value: T) -> T:
        """Run ``redact``; a refusal deep inside gets its full path only here, when it happens
        (building a path string for every clean field would cost more than the scan)."""
        try:
            return redact(value)
        except _Refusal as refusal:
            where = path + "".join(reversed(refusal.where))
            error = (
                RedactedKeysCollideError if isinstance(refusal, _Collision) else SecretRefusedError
            )
            raise error(pattern=refusal.pattern, path=where) from None

    def _text(self, value: str) -> str:
        lowered = value.lower()
        if self._hintless(lowered) or (self._passes_by and self._ciphertext(value)):
            return value
        found: Counter[str] = Counter()
        redacted = self._pass(value, found, hints=(value, lowered))
        if not found:
            return value  # the same object: callers keep their bytes when nothing changed
        # A marker changes what is around it: a pattern that wants no word character beside
        # its token (``sk-`` glued to an earlier key) matches once the key next to it is a
        # marker, a token cut short by one may now pass its pattern's check, and a match the
        # first pass skipped as overlapping another may stand alone. So passes run again
        # until one changes nothing, and redacting the stored text again gives it back (a
        # replay compares inputs so, and an import redacts a bundle's rows again). Each
        # changing pass turns at least one secret into a marker, which never matches, so
        # they end. Their hints are looked for outside the markers: a marker's name holds
        # other patterns' hints ("password" in password-assignment), and the scan they would
        # start finds nothing a marker could complete.
        #
        # Before those passes, the matches a marker makes possible right after it are taken
        # where they start (:meth:`_after_markers`): secrets written back to back each need
        # the marker of the one before, and a full pass per secret made n of them cost n
        # scans of the whole text (4,000 in 156 KB: 4.4 s). The passes below then confirm the
        # text is settled, in one pass when those were all there was.
        redacted = self._after_markers(redacted, found)
        while True:
            counted = found.total()
            outside = _MARKERS.sub(" ", redacted)
            again = self._pass(redacted, found, hints=(outside, outside.lower()))
            if found.total() == counted:
                break
            redacted = again
        with self._lock:
            self._counts.update(found)
        return redacted

    def _ciphertext(self, value: str) -> bool:
        """Whether ``value`` is a sealed text (``loom.sealed:{...}``, ADR 0049), stored as it is.

        Its clear text was redacted before it was sealed, and its ciphertext is random base64,
        which holds a run shaped like a Google API key about once in 250,000 sealed vectors: a
        marker written there made the envelope unreadable, and readers took it for clear text
        (ADR 0012, amended "ciphertext"). Only a text exactly as loom writes one is passed by
        (no other member, no space: :func:`~loom_runtime.envelope.written_sealed_text`), and
        only if its subject, made of identifiers each refused at its own boundary when it held
        a secret, holds none. A clear text crafted in that shape keeps whatever its ciphertext
        member encodes, as any base64 does: the redactor guards against accidents, not against
        a writer set on storing a secret.
        """
        if not value.startswith(TEXT_PREFIX):
            return False
        sealed = written_sealed_text(value)
        return sealed is not None and self.secret_in(sealed.subject) is None

    def _after_markers(self, value: str, found: Counter[str]) -> str:
        """``value`` with every match that starts right after a marker replaced, the markers
        those make included, rightmost first: a replacement at a marker's end moves only
        what is after it, so the ends still waiting (all to its left) keep their places."""
        waiting = [marker.end() for marker in _MARKERS.finditer(value)]
        text = value
        while waiting:
            at = waiting.pop()
            for pattern in self.patterns:
                match = pattern.regex.match(text, at)
                if match is None or match.end() == at:
                    continue
                replaced = self._replace(match, pattern=pattern, found=found)
                if replaced == match.group(0):
                    continue
                text = text[: match.start()] + replaced + text[match.end() :]
                waiting += [at + marker.end() for marker in _MARKERS.finditer(replaced)]
                break
        return text

    def _pass(self, value: str, found: Counter[str], *, hints: tuple[str, str]) -> str:
        """``value`` with what each pattern matches replaced once, counted in ``found``;
        ``hints``: the text (and its lower case) a pattern's hints are looked for in."""
        redacted = value
        for pattern in self.patterns:
            if not pattern.may_match(*hints):
                continue
            if pattern.regex.search(redacted):
                replace = partial(self._replace, pattern=pattern, found=found)
                redacted = pattern.regex.sub(replace, redacted)
        return redacted

    def _walk(self, value: object) -> object:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, bytes | bytearray | memoryview):
            return self._binary(value)
        if isinstance(value, msgspec.Raw):
            return self._raw(value)
        if isinstance(value, list | tuple):
            if _INERT_ITEMS.issuperset(map(type, value)):
                # An embedding or a list of counts: no item is text, so no pattern can match,
                # and walking thousands of floats one by one cost more than the append itself.
                return value
            return self._walk_items(value, enumerate(value), lambda i: f"[{i}]")
        if isinstance(value, dict):
            keyed = self._credential_entries(self._keys(value))
            return self._walk_items(keyed, keyed.items(), lambda k: f".{k}")
        return value

    def _credential_entries(self, value: dict[Any, Any]) -> dict[Any, Any]:
        """``value``, or a copy whose text under a credential's name (``"password"``,
        ``client_secret``, ``apiKey``: :func:`credential_key`) is the password-assignment
        marker: ``"password": "..."`` is that pattern's shape, and as a mapping (a tool's
        arguments, a config) its name and its value were scanned apart, neither matching."""
        copy: dict[Any, Any] | None = None
        for key, item in value.items():
            if type(item) is not str or not item or type(key) is not str:
                continue
            if not credential_key(key):
                continue
            if _MARKER_PREFIX in item and not _MARKERS.sub("", item):
                continue  # already redacted
            if self.mode == "refuse":
                refusal = _Refusal(_CREDENTIAL_ENTRY)
                refusal.where.append(f".{key}")
                raise refusal
            with self._lock:
                self._counts[_CREDENTIAL_ENTRY] += 1
            copy = dict(value) if copy is None else copy
            copy[key] = MARKER.format(name=_CREDENTIAL_ENTRY)
        return value if copy is None else copy

    def _keys(self, value: dict[Any, Any]) -> dict[Any, Any]:
        """``value``, or a copy (same order) whose string keys are redacted as values are.

        A clean key is remembered as an identifier is, so a mapping's usual keys cost a
        lookup each. Two keys redacted to the same marker cannot both stay: refused, typed,
        rather than one entry silently lost.
        """
        renamed: dict[str, str] | None = None
        for key in value:
            if type(key) is not str or key in self._clean_names:
                continue
            try:
                redacted = self._text(key)
            except _Refusal as refusal:
                refusal.where.append(".<key>")
                raise
            if redacted is not key:
                renamed = renamed or {}
                renamed[key] = redacted
            elif len(key) <= _CLEAN_NAME_LENGTH:
                self._remember_clean(key)
        if renamed is None:
            return value
        copy = {renamed.get(key, key): item for key, item in value.items()}
        if len(copy) < len(value):
            raise _Collision(self.secret_in(next(iter(renamed))) or "secret")
        return copy

    def _binary(self, value: bytes | bytearray | memoryview) -> object:
        """Bytes scanned as the text they hold, before base64 hides it from every pattern.

        UTF-8 when they decode as UTF-8, else latin-1 (which decodes any byte, so an ASCII
        secret inside binary data is still found). A redacted value stays bytes: the
        redacted text encoded back the same way, so a typed reader still gets ``bytes``.
        """
        data = bytes(value)
        try:
            text, encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = data.decode("latin-1"), "latin-1"
        redacted = self._text(text)
        return value if redacted is text else redacted.encode(encoding)

    def _walk_items(
        self,
        container: list[Any] | tuple[Any, ...] | dict[Any, Any],
        items: Iterable[tuple[Any, Any]],
        label: Callable[[Any], str],
    ) -> object:
        """The container, or a copy with redacted items once the first one changes."""
        copy: dict[Any, Any] | None = None
        for key, item in items:
            try:
                redacted = self._walk(item)
            except _Refusal as refusal:
                refusal.where.append(label(key))
                raise
            if redacted is not item:
                if copy is None:
                    copy = (
                        dict(container)
                        if isinstance(container, dict)
                        else dict(enumerate(container))
                    )
                copy[key] = redacted
        if copy is None:
            return container
        if isinstance(container, dict):
            return copy
        return type(container)(copy.values())

    def _raw(self, raw: msgspec.Raw) -> msgspec.Raw:
        data = bytes(raw)
        if b'"' not in data:
            return raw  # JSON without a quote holds no string: nothing to redact
        with self._lock:
            if data in self._clean:
                return raw
        # Decoded first, never matched as JSON text: escaping (``\\n`` for a newline, ``\\"``)
        # would hide a secret from a pattern written for the string.
        decoded = msgspec.json.decode(raw)
        redacted = self._walk(decoded)
        if redacted is not decoded:
            return msgspec.Raw(msgspec.json.encode(redacted))
        with self._lock:
            if len(self._clean) >= _CLEAN_CACHE_SIZE:
                del self._clean[next(iter(self._clean))]
            self._clean[data] = None
        return raw

    def _replace(self, match: re.Match[str], *, pattern: SecretPattern, found: Counter[str]) -> str:
        """The marker for one match (keeping the text around a ``secret`` group), or refuse."""
        group = _secret_group(pattern)
        secret = match.group(group)
        if not _is_secret(pattern, secret):
            return match.group(0)  # already redacted (idempotent), or a word, not a token
        if self._passes_by and id(pattern) in _BUILTIN and _in_payload(match):
            return match.group(0)  # chance, in base64 that encodes something else
        if self.mode == "refuse":
            raise _Refusal(pattern.name)
        found[pattern.name] += 1
        before = match.string[match.start() : match.start(group)]
        after = match.string[match.end(group) : match.end()]
        return before + MARKER.format(name=pattern.name) + after


def marked_in_a_run(data: bytes) -> bool:
    """Whether stored JSON ``data`` holds a redaction marker beside a base64 character: where
    the rule before the payload rule marked a chance run inside a payload or a sealed text
    (the match never took a whole payload). A marker after ``Bearer `` or ``password=`` (an
    HTTP call's recorded headers) is not: the earlier rule would give the same bytes."""
    return _MARKER_BYTES in data and _MARKER_IN_A_RUN.search(data) is not None


def _in_payload(match: re.Match[str]) -> bool:
    """Whether ``match`` lies inside a run of at least :data:`_PAYLOAD_LENGTH` base64
    characters: a payload, as an SDK sends or receives an embedding, an image or a file
    (``"embedding": "…"``, ``data:image/png;base64,…``).

    A built-in pattern's match there is chance (ADR 0012, amended "payloads"): base64 hides
    any secret it encodes from every pattern, and random base64 holds a Google-API-key-shaped
    run about once per thousand MiB. A marker there broke the payload: a replay decoded it
    and raised, and refuse mode refused the call. A secret written in clear sits beside a
    space, quote, ``.``, ``-``, ``_``, ``:`` or ``=`` long before 256 characters; a team's own
    pattern still reads a payload.

    Measured around the match in the text as it is now, at most 256 characters each way
    (right first, then only what is still needed on the left): no scan of the whole text per
    match (glued key-shaped runs made that quadratic). A marker is not base64, so it ends a
    run: a run a marker split is read as two, in this pass and in every later one, so the
    passes settle and redacting the result again gives it back."""
    text = match.string
    start, end = match.span()
    if _run_end(text, start, end) != end:
        return False  # the match itself holds other characters
    needed = _PAYLOAD_LENGTH - (end - start) - (_run_end(text, end, end + _PAYLOAD_LENGTH) - end)
    if needed <= 0:
        return True
    # The rest must be base64 right before the match: most matches are beside a space.
    return needed <= start and _RUN_WHOLE.fullmatch(text, start - needed, start) is not None


def _run_end(text: str, start: int, stop: int) -> int:
    """Where the run of base64 characters from ``start`` ends, looking no further than
    ``stop``."""
    run = _RUN.match(text, start, stop)
    return start if run is None else run.end()


def _secret_group(pattern: SecretPattern) -> str | int:
    """The group a match's secret is in: ``secret`` when the pattern names one, else all."""
    return "secret" if "secret" in pattern.regex.groupindex else 0


def _is_secret(pattern: SecretPattern, secret: str) -> bool:
    """Whether a matched secret is one: not only markers, and accepted by the pattern's check.

    Text beside a marker is still secret: in ``password=ghp_…!!x`` the token is redacted
    first, and ``!!x`` is the rest of the password, which a test for a leading marker kept
    in clear."""
    if _MARKER_PREFIX in secret and not _MARKERS.sub("", secret):
        return False
    return pattern.check is None or pattern.check(secret)


class _Refusal(Exception):
    """A match in refuse mode, unwinding to the public call that knows where it started."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern
        self.where: list[str] = []  # innermost first: "[2]", ".prompt", ...


class _Collision(_Refusal):
    """Keys of one mapping redacted to the same marker (refused in any mode)."""


def as_stored(redactor: Redactor | None, text: str, *, path: str) -> str:
    """``text`` as the log would store it through ``redactor``; withheld whole when the
    redactor refuses it (a policy that refuses a secret rather than replacing it): for what
    is shown beside the log (a span, a replay's verdict), never stored."""
    if redactor is None:
        return text
    try:
        return redactor.text(text, path=path)
    except SecretRefusedError as refused:  # named by its pattern, never by its value
        return f"[withheld: it holds a {refused.pattern}, which the redactor refuses]"
    except Exception:
        return "[withheld: the redactor refused it]"


def resolve_redactor(option: RedactorOption) -> Redactor | None:
    """The redactor an option stands for; ``"builtin"`` makes a new one (its own counts)."""
    if option == "builtin":
        return Redactor()
    if option is None or isinstance(option, Redactor):
        return option
    raise TypeError(f"redactor must be a Redactor, 'builtin' or None, not {option!r}")
