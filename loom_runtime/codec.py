"""Encoding of the values loom puts in the log: flow inputs, decision values, outputs.

Why one module: a value crosses the log boundary in exactly one way. It is encoded to JSON
with msgspec *before* anything is appended, and what the caller gets back is the value
decoded from those bytes. That round trip is what makes a live run and its replay see the
same types (a tuple comes back as a list on both; a datetime comes back as a datetime only
when a ``type`` asks for it). A value msgspec cannot encode is refused up front with the
path of the offending field, so nothing half-written reaches the log.

The boundary is also where a log's :class:`~loom_runtime.redaction.Redactor` runs (ADR 0012):
given one, the stored bytes carry ``[REDACTED:...]`` markers instead of secrets, and because
the caller gets the round trip of those bytes, a live run sees exactly what its replay will.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any, TypeVar

import msgspec

from loom_runtime.errors import NotSerialisableError
from loom_runtime.redaction import Redactor

T = TypeVar("T")


def enc_hook(value: object) -> object:
    """Encode subclasses msgspec refuses but whose base it knows (freezegun's FakeDatetime)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


def encode(value: object, *, path: str, redactor: Redactor | None = None) -> msgspec.Raw:
    """Encode ``value`` to JSON, or raise :class:`NotSerialisableError` naming ``path.field``.

    With a ``redactor``, secrets in the value's strings are replaced by markers (or refused
    with :class:`~loom_runtime.errors.SecretRefusedError`) before the bytes are returned.
    """
    try:
        raw = msgspec.Raw(_encoder.encode(value))
    except (TypeError, ValueError, OverflowError) as exc:
        bad_path, bad_value = _find_unencodable(value, path)
        raise NotSerialisableError(
            f"{bad_path} cannot be stored in the log: {type(bad_value).__name__} is not "
            f"msgspec-serialisable ({exc}). Pass plain data (str, int, float, bool, None, "
            "list, dict with str keys, datetime, msgspec.Struct) or convert it first.",
            path=bad_path,
        ) from exc
    return raw if redactor is None else redactor.raw(raw, path=path)


def decode(raw: msgspec.Raw | bytes, *, type: type[T] | Any = Any) -> T:
    """Decode stored JSON, typed by ``type`` (``Any`` gives plain JSON values)."""
    return msgspec.json.decode(raw, type=type)


def round_trip(
    value: object, *, path: str, type: type[T] | Any = Any, redactor: Redactor | None = None
) -> tuple[msgspec.Raw, T]:
    """Encode ``value`` (redacted, given a redactor) and decode it back: the stored bytes and
    what a reader will see."""
    raw = encode(value, path=path, redactor=redactor)
    try:
        return raw, decode(raw, type=type)
    except msgspec.ValidationError as exc:
        raise NotSerialisableError(
            f"{path} does not fit its declared type {type!r}: {exc}", path=path
        ) from exc


def pretty(raw: msgspec.Raw | bytes | None) -> str:
    """Render stored JSON for humans (sorted keys, indented), for diffs and the CLI."""
    if raw is None:
        return "(none)"
    return json.dumps(json.loads(bytes(raw)), indent=2, sort_keys=True, ensure_ascii=False)


def diff(
    before: msgspec.Raw | bytes | None, after: msgspec.Raw | bytes | None, *, label: str
) -> str:
    """A unified diff of two stored JSON values, recorded (before) against replayed (after)."""
    return "".join(
        difflib.unified_diff(
            pretty(before).splitlines(keepends=True),
            pretty(after).splitlines(keepends=True),
            fromfile=f"recorded {label}",
            tofile=f"replayed {label}",
        )
    )


def _find_unencodable(value: object, path: str) -> tuple[str, object]:
    """Walk ``value`` to the first leaf msgspec refuses, so the error can name it."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str | int | float):
                return f"{path}[{key!r}] (key)", key
            if not _encodes(item):
                return _find_unencodable(item, f"{path}.{key}")
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            if not _encodes(item):
                return _find_unencodable(item, f"{path}[{index}]")
    elif isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            item = getattr(value, field)
            if not _encodes(item):
                return _find_unencodable(item, f"{path}.{field}")
    return path, value


def _encodes(value: object) -> bool:
    try:
        _encoder.encode(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True
