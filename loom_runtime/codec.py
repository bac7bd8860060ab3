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

Nesting is bounded (:data:`MAX_DEPTH`, ADR 0012): a value nested deeper is refused with
:class:`NotSerialisableError` before it is encoded, measured by a loop rather than recursion,
because every later step (msgspec, the redactor, a reader) recurses and would otherwise fail
with ``RecursionError`` halfway through a write.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, time
from typing import Any, Final, TypeVar, cast

import msgspec

from loom_runtime.errors import DecisionArgumentError, NotSerialisableError
from loom_runtime.redaction import Redactor, as_stored
from loom_runtime.timestamps import plain_datetime, stdlib_class

T = TypeVar("T")

MAX_DEPTH: Final = 256
"""How many containers (lists, tuples, sets, dicts, Structs, dataclasses) may nest in a value
loom records: a decision's value or input, a flow's input or output. Real data nests a few
levels; JSON libraries stop at 100-512. Deeper values are refused whole, before anything is
written (ADR 0012)."""

MAX_DATA_DEPTH: Final = MAX_DEPTH // 2
"""How deeply the data a store keeps may nest: a memory entry's content, a document's meta.
Half of :data:`MAX_DEPTH`, so stored data always fits inside what records it (an entry inside
a list of entries inside a recorded read, a passage inside a retrieval)."""

_SCALARS = (str, int, float, bool, bytes, type(None))
_BINARY = (bytes, bytearray, memoryview)
_TEXT = (str, int, float, bool, type(None))  # the scalars that are not bytes


def enc_hook(value: object) -> object:
    """Encode subclasses msgspec refuses but whose base it knows: freezegun's FakeDatetime,
    frameworks' str subclasses (LangChain's message text), numpy's float64. They are stored
    as their base type, which is what a replay returns: a datetime as the stdlib datetime it
    equals (:func:`~loom_runtime.timestamps.plain_datetime`, by the class behind the subclass,
    never a name freezegun swaps), which msgspec writes as it writes any (UTC as ``Z``;
    ``isoformat`` wrote ``+00:00``, and a recording made under ``freeze_time`` replayed
    elsewhere as changed)."""
    if isinstance(value, datetime):  # checked before date, of which it is one
        return plain_datetime(value)
    if isinstance(value, date):
        return stdlib_class(type(value))(value.year, value.month, value.day)
    if isinstance(value, time):
        return stdlib_class(type(value))(
            value.hour, value.minute, value.second, value.microsecond, value.tzinfo, fold=value.fold
        )
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


def _builtins_hook(value: object) -> object:
    """:func:`enc_hook` for ``msgspec.to_builtins``, which also needs stored JSON decoded."""
    if isinstance(value, msgspec.Raw):
        return msgspec.json.decode(value)
    return enc_hook(value)


def encode(value: object, *, path: str, redactor: Redactor | None = None) -> msgspec.Raw:
    """Encode ``value`` to JSON, or raise :class:`NotSerialisableError` naming ``path.field``.

    With a ``redactor``, secrets in the value's strings are replaced by markers (or refused
    with :class:`~loom_runtime.errors.SecretRefusedError`) before the bytes are returned.
    """
    deep, binary, unordered, non_finite, colliding = _inspect(value, MAX_DEPTH)
    if deep is not None:
        raise _refused(
            f"{path}{deep}",
            f"it nests more than {MAX_DEPTH} levels deep (loom_runtime.codec.MAX_DEPTH); "
            "flatten the value or store it as a string",
            redactor,
        )
    if non_finite is not None:
        raise _refused(
            f"{path}{non_finite}",
            "it is NaN or infinite, which JSON has no number for (it would be stored as null); "
            "store it as a string or None",
            redactor,
        )
    if colliding is not None:
        raise _refused(
            f"{path}{colliding}",
            "two of its keys are the same text once stored (such as 1 and '1'): JSON keys "
            "are text, so one value would be lost; give the keys one type",
            redactor,
        )
    if unordered:
        # A set encodes in its iteration order, which string hashes seed per process: a
        # recorded set compared unequal in any other process. Its members are put in the order
        # of their JSON, the one order members of any type (frozensets, which ``<`` orders
        # only by inclusion, mixed types, which it cannot) have in every process; nothing
        # else of the value changes (ADR 0002, amended "sets").
        try:
            value = _sets_by_json(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _not_serialisable(value, path, exc, redactor) from exc
    if redactor is not None and binary:
        value = _binary_redacted(value, path=path, redactor=redactor)
    try:
        data = _encoder.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _not_serialisable(value, path, exc, redactor) from exc
    if redactor is None:
        return msgspec.Raw(data)
    try:
        return redactor.encoded(data, path=path)
    except RecursionError as exc:  # a msgspec.Raw inside the value hides its depth until here
        raise NotSerialisableError(
            f"{path} cannot be stored in the log: it nests more than {MAX_DEPTH} levels deep",
            path=path,
        ) from exc


def _sets_by_json(value: object) -> object:
    """``value`` with each set, at any depth, a list of its members ordered by their JSON.

    Containers are copied only where a set is below them (dict keys and order kept); a Struct
    or dataclass holding one is copied with that field replaced, so it encodes as declared.
    Called only for a value :func:`_inspect` found a set in, whose depth it has checked."""
    if isinstance(value, set | frozenset):
        if not value:  # no order to give; left a set, it stays a Struct's default
            return value
        members = [_sets_by_json(member) for member in value]
        return sorted(members, key=_encoder.encode)
    if isinstance(value, dict):
        items = {key: _sets_by_json(item) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return items if changed else value
    if isinstance(value, list | tuple):
        converted = [_sets_by_json(item) for item in value]
        changed = any(new is not old for new, old in zip(converted, value, strict=True))
        return converted if changed else value
    found = _members(value)
    if found is None or found[0] != "field":
        return value
    changes = {
        str(name): new for name, child in found[1] if (new := _sets_by_json(child)) is not child
    }
    for name in _omitted_defaults(value, changes):  # left out of its JSON: nothing to order
        del changes[name]
    if not changes:
        return value
    # Copied and its fields set, no hook run: ``structs.replace`` runs ``__post_init__``,
    # which may make the ordered list a set again (or refuse it); set even when frozen.
    copied = copy.copy(value)
    for name, new in changes.items():
        if isinstance(copied, msgspec.Struct):
            msgspec.structs.force_setattr(copied, name, new)
        else:
            object.__setattr__(copied, name, new)
    return copied


def _omitted_defaults(value: object, names: Iterable[str]) -> list[str]:
    """Of ``names``, the fields an ``omit_defaults`` Struct leaves out of its JSON because
    they hold their default: ordered into a list, they would no longer be it, and be stored
    where msgspec (and a recording made before sets were ordered) leaves them out.

    msgspec is asked (the Struct encoded once, its keys read): it omits by rules of its own
    (the default object itself, an empty built-in container from a factory, never in an
    ``array_like`` Struct), which an equality test got wrong both ways."""
    if not isinstance(value, msgspec.Struct) or not value.__struct_config__.omit_defaults:
        return []
    if value.__struct_config__.array_like:
        return []
    try:
        present = msgspec.json.decode(_encoder.encode(value))
    except (TypeError, ValueError, OverflowError, msgspec.DecodeError):
        return []  # the encode that follows names what is wrong
    encoded = {field.name: field.encode_name for field in msgspec.structs.fields(value)}
    return [name for name in names if encoded.get(name, name) not in present]


def _not_serialisable(
    value: object, path: str, exc: Exception, redactor: Redactor | None = None
) -> NotSerialisableError:
    """The error naming the field of ``value`` msgspec could not encode."""
    bad_path, bad_value = _find_unencodable(value, path)
    return _refused(
        bad_path,
        f"{type(bad_value).__name__} is not msgspec-serialisable ({_shown(str(exc), redactor)})."
        " Pass plain data (str, int, float, bool, None, list, dict with str keys, datetime, "
        "msgspec.Struct) or convert it first.",
        redactor,
    )


def _refused(where: str, why: str, redactor: Redactor | None) -> NotSerialisableError:
    """The refusal of the value at ``where``, named as the log would store the name."""
    shown = _shown(where, redactor)
    return NotSerialisableError(f"{shown} cannot be stored in the log: {why}", path=shown)


def _shown(text: str, redactor: Redactor | None) -> str:
    """A refusal's path (built from the value's own keys) or reason as the log would store
    it: a secret held in a key is redacted in the error the flow sees, as in the failure
    stored for its replay, so both read the same."""
    return text if redactor is None else as_stored(redactor, text, path="refusal")


def encodes_to(value: object, raw: msgspec.Raw) -> bool:
    """Whether msgspec encodes ``value`` to exactly the bytes ``raw`` holds.

    Unchecked and unredacted on purpose: only for recognising a value already stored (whose
    bytes passed every check when they were written), never for producing bytes to store.
    """
    try:
        data = _encoder.encode(value)
    except Exception:  # not encodable, or nested past msgspec's own limit: not the same
        return False
    if data != bytes(raw):
        return False
    # A NaN or infinity encodes as the null stored for None: never the value stored (ADR 0002,
    # amended "non-finite floats").
    return b"null" not in data or not _holds_non_finite(value)


def _holds_non_finite(value: object) -> bool:
    """Whether a NaN or infinite float is anywhere in ``value``: :func:`_inspect`'s answer
    without its paths and labels, for the replay's fast path, which runs it on every input
    holding a ``null`` (the whole walk cost as much as the encode it spares). Only containers
    are stacked; a float is non-finite when ``x - x`` is not 0."""
    stack = [value]
    while stack:
        item = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()  # a float key is written as a string
        elif isinstance(item, list | tuple):
            children = item
        elif isinstance(item, float):
            return item - item != 0.0
        elif (members := _members(item)) is not None:
            children = (child for _, child in members[1])
        else:
            continue
        for child in children:
            if isinstance(child, float):
                if child - child != 0.0:
                    return True
            elif not isinstance(child, _LEAVES):
                stack.append(child)
    return False


_LEAVES: Final = (str, int, bool, type(None), bytes, bytearray, memoryview)
"""What holds no float: skipped by :func:`_holds_non_finite` without being stacked."""


def _binary_redacted(value: object, *, path: str, redactor: Redactor) -> object:
    """``value`` with the secrets inside its bytes redacted (or refused), before encoding.

    base64 would hide a secret inside bytes from every pattern, so they are scanned as the
    text they hold first (ADR 0012). Structs and dataclasses become plain data so every bytes
    value is reachable; the JSON they encode to is the same.
    """
    try:
        plain = msgspec.to_builtins(value, builtin_types=_BINARY, enc_hook=_builtins_hook)
    except (TypeError, ValueError, OverflowError):
        return value  # not encodable: the encode that follows names the offending field
    return redactor.value(plain, path=path)


_untyped = msgspec.json.Decoder()
decode_untyped: Callable[[msgspec.Raw | bytes], Any] = _untyped.decode
"""``decode(raw)`` with no type, called directly: a replay decodes one value per decision, and
a call through :func:`decode` was a visible share of it."""


def decode(raw: msgspec.Raw | bytes, *, type: type[T] | Any = Any) -> T:
    """Decode stored JSON, typed by ``type`` (``Any`` gives plain JSON values).

    Untyped (most decisions) through one reused ``Decoder``: ``msgspec.json.decode`` looks its
    ``type`` up again on every call, which is a sixth of decoding a 1 KB value, and a replay
    decodes one value per decision.
    """
    if type is Any:
        return _untyped.decode(raw)  # type: ignore[no-any-return]
    try:
        return msgspec.json.decode(raw, type=type)
    except TypeError as exc:  # msgspec's refusal of the type itself, never of the value
        raise DecisionArgumentError(
            f"type={type!r} is no type a value can be decoded as ({exc}): give a plain data "
            "type, a msgspec Struct, a dataclass or a datetime",
            parameter="type",
        ) from exc


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


def same_json(one: msgspec.Raw | bytes, other: msgspec.Raw | bytes) -> bool:
    """Whether two stored JSON values are the same once re-encoded with sorted keys.

    Comparing decoded Python values would call ``true``, ``1`` and ``1.0`` equal; bytes keep
    them apart, and sorting keys keeps an object's key order from counting as a change.
    A value that does not decode (a number out of a double's range such as ``1e400``, or one
    nested past the decoder's limit) is one loom never encodes, so it equals nothing: a
    recording holding one was edited, and a replay reports its output changed (an import, a
    conflict) rather than raising the decoder's error (ADR 0018, amended).
    """
    try:
        return msgspec.json.encode(msgspec.json.decode(one), order="sorted") == msgspec.json.encode(
            msgspec.json.decode(other), order="sorted"
        )
    except (msgspec.DecodeError, RecursionError):
        return False


def pretty(raw: msgspec.Raw | bytes | None, *, sort_keys: bool = True) -> str:
    """Render stored JSON for humans (indented; keys sorted unless ``sort_keys`` is false, so
    the same object reads the same however it was built), for diffs and the CLI."""
    if raw is None:
        return "(none)"
    try:
        return json.dumps(json.loads(bytes(raw)), indent=2, sort_keys=sort_keys, ensure_ascii=False)
    except (ValueError, RecursionError):
        # What Python's ``json`` refuses and loom never writes (an integer past its 4,300
        # digits, nesting past its depth: an edited row) is shown as stored, not raised: a
        # display has nothing to read in it (``loom verify`` says whether it was edited).
        return bytes(raw).decode("utf-8", "replace")


def too_deep(value: object, *, limit: int = MAX_DEPTH) -> str | None:
    """The path (``[0].k[2]``) of the first container nested more than ``limit`` deep, or None.

    A loop over an explicit stack, never recursion: it must measure a value nested 100,000
    levels deep without itself raising ``RecursionError``. Scalars are never pushed, so a flat
    list of a million numbers costs one pass over it.
    """
    return _inspect(value, limit)[0]


def _inspect(value: object, limit: int) -> tuple[str | None, bool, bool, str | None, str | None]:
    """:func:`too_deep`'s answer, whether a bytes-like value is anywhere in ``value``, whether
    a set is, the path of a NaN or infinite float in it, and the path of a mapping two of
    whose keys are the same JSON text (``1`` and ``"1"``: stored twice, one value lost on
    reading) (None: none).

    One walk for all of them, since :func:`encode` needs them of every value it stores: two
    walks of the same value were a visible share of recording a decision (a second walk for
    the floats cost five times the encode of a value holding a ``None``). The depth answer is
    the walk's first: a value found too deep is refused whatever else it holds. Containers are
    visited in the order a stack of them gives (the last child first), the order the path of
    the first one too deep has always been reported in. A float is non-finite when ``x - x``
    is not 0 (NaN and the infinities give NaN). Keys can collide only in a mapping holding a
    key that is not a str: only then are its keys encoded to be compared (~25 ns a key
    otherwise, about 1% of recording a decision).
    """
    if isinstance(value, _TEXT):
        finite = not isinstance(value, float) or value - value == 0.0
        return None, False, False, None if finite else "", None
    if isinstance(value, _BINARY):
        return None, True, False, None, None
    binary = unordered = False
    non_finite: str | None = None
    colliding: str | None = None
    stack: list[tuple[object, int, str, object]] = [(value, 0, "", None)]
    trail: list[tuple[str, object]] = []  # (kind, key) of each level down to the current item
    while stack:
        item, depth, kind, key = stack.pop()
        del trail[depth:]
        trail.append((kind, key))
        members = _members(item)
        if members is None:
            continue
        if depth >= limit:
            return "".join(_label(kind, key) for kind, key in trail), binary, unordered, None, None
        child_kind, items = members
        if child_kind == "member":
            unordered = True
        keyed = child_kind == "key" and colliding is None
        for name, child in items:
            if keyed and type(name) is not str:  # once per mapping, at its first such key
                keyed = False
                if _keys_collide(item):
                    colliding = "".join(_label(kind, key) for kind, key in trail)
            if isinstance(child, _TEXT):
                if isinstance(child, float) and child - child != 0.0 and non_finite is None:
                    here = "".join(_label(kind, key) for kind, key in trail)
                    non_finite = here + _label(child_kind, name)
                continue
            if isinstance(child, _BINARY):
                binary = True
                continue
            stack.append((child, depth + 1, child_kind, name))
    return None, binary, unordered, non_finite, colliding


def _keys_collide(mapping: object) -> bool:
    """Whether two keys of ``mapping`` (a dict) encode to the same JSON text (msgspec's own
    spelling of a number key is asked; a key it cannot encode is left for the encode to
    name)."""
    keys = cast("dict[object, object]", mapping)
    try:
        spelt = msgspec.json.decode(_encoder.encode(dict.fromkeys(keys, 0)))
    except (TypeError, ValueError, OverflowError):
        return False
    return len(spelt) != len(keys)


def _members(value: object) -> tuple[str, Iterable[tuple[object, object]]] | None:
    """The kind of container ``value`` is and its ``(key, child)`` pairs; None for a scalar."""
    items: Iterable[tuple[object, object]]
    if isinstance(value, dict):
        kind, items = "key", value.items()
    elif isinstance(value, list | tuple):
        kind, items = "index", enumerate(value)
    elif isinstance(value, set | frozenset):
        kind, items = "member", ((None, item) for item in value)
    elif isinstance(value, msgspec.Struct):
        kind = "field"
        items = ((name, getattr(value, name, None)) for name in value.__struct_fields__)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = "field"
        items = ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
    elif (fields := getattr(type(value), "__attrs_attrs__", None)) is not None:
        kind = "field"  # an attrs instance, which msgspec encodes as its fields
        items = ((a.name, getattr(value, a.name, None)) for a in fields)
    else:
        return None
    return kind, items


def _label(kind: str, key: object) -> str:
    if kind == "index":
        return f"[{key}]"
    if kind == "member":
        return "[*]"
    if kind in ("key", "field") and isinstance(key, str):
        return f".{key}"
    return f"[{key!r}]" if kind == "key" else ""


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
