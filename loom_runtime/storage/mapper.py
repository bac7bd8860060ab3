"""The msgspec Mapper: how a domain event becomes a stored row, and back.

Why not eventsourcing's default JSON transcoder: it is several times slower and decodes
untyped (a datetime comes back as whatever the transcoding registry says). Why not a drop-in
msgspec *transcoder*: untyped msgspec decodes a datetime as ``str``. So msgspec sits in the
Mapper, where the event class is known: each event class gets a msgspec schema built from its
type hints, and the stored JSON is decoded *typed* against it (tz-aware datetimes,
``msgspec.Raw`` values kept as the exact stored bytes).

``originator_id`` and ``originator_version`` are not in the payload: they are columns of the
stored row and are restored from there (eventsourcing annotates ``originator_id`` with a
TypeVar, which msgspec cannot decode into anyway).

Schema evolution follows eventsourcing's convention: an event class with ``class_version = N``
defines static ``upcast_v1_v2(state)``, ... ``upcast_vN-1_vN(state)`` that edit the plain
dict in place. Old rows are upcast on read; the log itself is never rewritten. The stored form
stays JSON so an operator can read it with SQL.

A row is untrusted input (anyone with SQL access can edit it), so reading one never imports:
its topic is looked up in loom's closed set of event classes (:mod:`loom_runtime.storage.topics`), a
``Created`` event's ``originator_topic`` must name a registered aggregate, and any row that
fails either, or does not decode, is a :class:`~loom_runtime.errors.LogCorruptError`.

Given a :class:`~loom_runtime.redaction.Redactor`, the mapper redacts every string of every
payload before it becomes a row: it is the one place every event passes on its way to the
database, so it is where "nothing unredacted is stored" can be guaranteed (ADR 0012). The
fields an event class lists in ``IDENTIFIERS`` are the exception: an identifier is never
rewritten (a redacted doc id names another document), so one holding a secret is refused.
A value of a type declared with :func:`holds_no_text` (a sealed field or identifier: ciphertext, its
content redacted or checked before it was sealed) is stored unread.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic

from loom_runtime.codec import enc_hook
from loom_runtime.errors import LogCorruptError, NotSerialisableError, SecretRefusedError
from loom_runtime.log import Row
from loom_runtime.redaction import Redactor
from loom_runtime.storage.topics import event_class, is_aggregate_topic
from loom_runtime.timestamps import stdlib_class

_ROW_COLUMNS = frozenset({"originator_id", "originator_version"})
_NO_TOPIC = object()
_NO_TEXT: set[type] = {type(None), bool, int, float, datetime}
"""Types of a stored field's value that hold no text for the redactor to find (and those
:func:`holds_no_text` declares)."""
_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


def holds_no_text(cls: type) -> None:
    """Declare that a stored field's value of type ``cls`` holds no text for the redactor, so
    the mapper's pass stores it unread: a sealed field's envelope (ADR 0049), whose content
    was redacted before it was sealed and is ciphertext since. The redactor's walk handed
    such a struct back as it was, after three calls and a path string built for it: about 8%
    of the instructions sealing added to a recorded decision, for nothing. Why a declaration
    and not an import: the storage knows nothing of sealing."""
    _NO_TEXT.add(cls)


class MsgspecMapper(Mapper[UUID]):
    """Maps eventsourcing domain events to JSON rows with msgspec, typed both ways."""

    def __init__(self, *, redactor: Redactor | None = None) -> None:
        # The base class's transcoder, compressor and cipher are replaced wholesale: loom
        # stores plain JSON (readable with SQL), never compressed or encrypted per row.
        self.compressor = None
        self.cipher = None
        self.redactor = redactor

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        topic, optional, identifiers, class_version = _shape(type(domain_event))
        state = {
            k: v
            for k, v in vars(domain_event).items()
            if k not in _ROW_COLUMNS and not (v is None and k in optional)
        }
        try:
            if self.redactor is not None:
                state = _redacted(self.redactor, topic, identifiers, state)
            if class_version > 1:
                state["class_version"] = class_version
            payload = _encoder.encode(state)
        except (RecursionError, UnicodeEncodeError) as exc:
            # The last line of defence: every package validates its values up front (depth,
            # lone surrogates), so reaching this is a bug there, refused typed all the same.
            raise NotSerialisableError(
                f"event {topic} v{domain_event.originator_version} cannot be stored: "
                f"{type(exc).__name__} ({exc}); nothing was written. Values must nest at most "
                "loom_runtime.codec.MAX_DEPTH levels and hold only valid text",
                path=topic,
            ) from exc
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=payload,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        """The event a row holds, or :class:`LogCorruptError`; see :func:`decode_event`."""
        return decode_event(
            stream=stored_event.originator_id,
            version=stored_event.originator_version,
            topic=stored_event.topic,
            state=stored_event.state,
        )


def decode_event(*, stream: object, version: int, topic: str, state: bytes) -> Any:
    """The event a stored row holds, or :class:`LogCorruptError`; a row never imports anything.

    The topic is looked up in loom's closed set (:mod:`loom_runtime.storage.topics`) and a
    ``Created`` event's ``originator_topic`` must name a registered aggregate, both before
    anything could resolve them: eventsourcing would import the module either one names.
    """
    cls, decoded = decode_state(stream=stream, version=version, topic=topic, state=state)
    fields = msgspec.structs.asdict(decoded)
    del fields["class_version"]
    fields["originator_id"] = stream if isinstance(stream, UUID) else UUID(str(stream))
    fields["originator_version"] = version
    domain_event: Any = object.__new__(cls)
    object.__setattr__(domain_event, "__dict__", fields)
    return domain_event


def decode_state(*, stream: object, version: int, topic: str, state: bytes) -> tuple[type, Any]:
    """A row's event class and its stored fields, decoded typed and upcast, with no event built.

    Every check of :func:`decode_event` (which builds the event from this) is made here, with
    its errors: a reader that needs only the fields (a replay, which reads a decision's key
    and value from thousands of rows, decoding each with :func:`current_decoder` first)
    skips building an event per row, not the checks. The fields are a msgspec Struct: the
    event's stored fields as attributes, and ``class_version``.
    """
    cls = event_class(topic)
    if cls is None:
        raise LogCorruptError(
            f"{_where(stream, version)} has topic {topic!r}, which is none of "
            "loom's event classes; it was refused unread (import the package that "
            "defines it, or run `loom verify`: the row may have been edited)"
        )
    if not isinstance(state, bytes | bytearray | memoryview | str):  # a row edited to NULL
        # (a state stored as TEXT, by an import or a hand's INSERT, is read as its text)
        raise LogCorruptError(
            f"{_where(stream, version)} ({topic}) has no stored state (it holds "
            f"{type(state).__name__}); run `loom verify`: the row may have been edited"
        )
    try:
        decoded = _decode_state(cls, state)
    except (msgspec.DecodeError, msgspec.ValidationError, AttributeError, RecursionError) as exc:
        # RecursionError: nested past the decoder's limit, deeper than any value loom stores
        raise LogCorruptError(
            f"{_where(stream, version)} ({topic}) does not decode as "
            f"{cls.__qualname__}: {exc}. If the event class changed, give it a "
            "class_version and an upcaster; otherwise run `loom verify`: the row may "
            "have been edited"
        ) from exc
    originator_topic = getattr(decoded, "originator_topic", _NO_TOPIC)
    if originator_topic is not _NO_TOPIC and not is_aggregate_topic(originator_topic):
        raise LogCorruptError(
            f"{_where(stream, version)} has originator_topic {originator_topic!r}, "
            "which is none of loom's aggregates; it was refused unread (run `loom "
            "verify`: the row may have been edited)"
        )
    return cls, decoded


def current_decoder(cls: type) -> tuple[msgspec.json.Decoder[Any], int]:
    """The decoder of ``cls``'s current schema and its class version, for a reader that
    decodes thousands of its rows (a replay). It calls the decoder directly and keeps the
    result only when the state decodes at that class version, handing any other row to
    :func:`decode_state` for the upcast or the :class:`LogCorruptError`. What it keeps is
    then exactly what :func:`decode_state` returns, because the one check left out, of an
    ``originator_topic``, cannot apply: a class with that field is refused here.
    """
    if "originator_topic" in schema_for(cls).__struct_fields__:
        raise TypeError(f"{cls.__qualname__} rows name an aggregate: decode them with decode_state")
    return _decoder(cls)


def decode_row(row: Row) -> Any:
    """The event a loom :class:`~loom_runtime.log.Row` holds (see :func:`decode_event`)."""
    return decode_event(stream=row.stream, version=row.version, topic=row.topic, state=row.state)


def _decode_state(cls: type, payload: bytes) -> Any:
    """Decode a payload typed; upcast first when it was written by an older class version."""
    decoder, target = _decoder(cls)
    decoded: Any
    try:
        decoded = decoder.decode(payload)
    except msgspec.ValidationError:
        if target == 1:
            raise
        decoded = None  # an old payload may miss a field the new class requires
    if decoded is None or decoded.class_version != target:
        state = _upcast(cls, msgspec.json.decode(payload), target)
        decoded = decoder.decode(_encoder.encode(state))
    return decoded


def _upcast(cls: type, state: dict[str, Any], target: int) -> dict[str, Any]:
    """A payload decoded plain, brought to class version ``target`` by ``cls``'s upcasters
    (each edits the dict in place), without its ``class_version``. A version that is no
    whole number from 1 to ``target`` is ``ValidationError``: loom writes none of its own
    (its events are all at 1), and one past ``target`` is a newer loom's event, which this
    one cannot know the meaning of (read as its own, it was taken for the current version)."""
    version = state.pop("class_version", 1)
    if type(version) is not int or not 1 <= version <= target:
        raise msgspec.ValidationError(
            f"class_version {version!r} is none this loom reads (1 to {target}): "
            "a newer loom wrote it, or it was edited"
        )
    while version < target:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(state)
        version += 1
    return state


@cache
def _decoder(cls: type) -> tuple[msgspec.json.Decoder[Any], int]:
    """A decoder of ``cls``'s schema and its current class version, made once per class."""
    return msgspec.json.Decoder(schema_for(cls)), getattr(cls, "class_version", 1)


@cache
def schema_for(cls: type) -> type[msgspec.Struct]:
    """A msgspec Struct mirroring the stored fields of an event dataclass (cached per class).

    Untracked by the garbage collector (``gc=False``), as ``Row`` and ``Decision`` are: an
    instance only ever holds what one row's JSON decoded to, a tree, so it can be in no
    reference cycle, and a replay decodes one per decision (tracking each was ~0.03 µs).
    """
    hints = typing.get_type_hints(cls)
    optional = _optional_fields(cls)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (f.name, _present_type(hints[f.name]), None)
        if f.name in optional
        else (f.name, stdlib_class(hints[f.name]))
        for f in dataclasses.fields(cls)
        if f.name not in _ROW_COLUMNS
    ]
    fields.append(("class_version", int, 1))
    return msgspec.defstruct(f"{cls.__qualname__}Schema", fields, kw_only=True, gc=False)


@cache
def _shape(cls: type) -> tuple[str, frozenset[str], tuple[str, ...], int]:
    """What mapping an event of ``cls`` needs of its class, looked up once per class (every
    decision is mapped): its topic, its optional fields, its identifier fields (ADR 0012) and
    its class version."""
    return (
        get_topic(cls),
        _optional_fields(cls),
        tuple(getattr(cls, "IDENTIFIERS", ())),
        getattr(cls, "class_version", 1),
    )


@cache
def _optional_fields(cls: type) -> frozenset[str]:
    """The fields that default to ``None``: left out of the stored JSON while ``None``.

    So a field added later with a ``None`` default (a decision's ``meta``) changes no byte of
    the events that do not use it, and rows written before it existed decode unchanged.
    """
    return frozenset(f.name for f in dataclasses.fields(cls) if f.default is None)


def _present_type(hint: Any) -> Any:
    """An optional field's type when present: msgspec decodes ``Raw`` only on its own, not in
    a union with ``None`` (absent is the ``None`` default, so a stored ``null`` never occurs)."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return args[0] if args == [msgspec.Raw] else stdlib_class(hint)


def _redacted(
    redactor: Redactor, topic: str, identifiers: tuple[str, ...], state: dict[str, Any]
) -> dict[str, Any]:
    """``state`` with its values redacted and its identifiers checked, never rewritten.

    An event class lists its identifier fields in ``IDENTIFIERS`` (ADR 0012). Every package
    checks its identifiers at its own boundary first, with its own error; a refusal here
    means one path did not, and it is refused all the same, before anything is written.
    A value of a type that holds no text (a timestamp, a number) is not handed to the
    redactor, whose walk returns such a value as it is, nor is one the redactor itself
    returned as the codec encoded it (a decision's value, input and meta): it was redacted
    then, and reading its bytes again found nothing by construction.
    """
    redacted = {}
    for key, value in state.items():
        if key in identifiers:
            if type(value) not in _NO_TEXT:  # a sealed identifier was checked in clear
                redactor.check_identifier(value, path=f"{topic}.{key}")
            redacted[key] = value
        elif type(value) in _NO_TEXT or redactor.passed(value):
            redacted[key] = value
        else:
            redacted[key] = redactor.value(value, path=f"{topic}.{key}")
    return redacted


def redacted_rows(redactor: Redactor, rows: Sequence[Row]) -> list[Row]:
    """Rows that did not pass the mapper (an imported bundle's) with its redaction applied,
    as :meth:`MsgspecMapper.to_stored_event` applies it to a recorded event: identifiers
    checked (one holding a secret refused), values redacted or refused by the mode.

    A row with nothing to redact is kept byte for byte, so importing the same bundle again
    finds the rows it stored; one that changed is encoded as the mapper encodes an event.
    """
    encoder = MsgspecMapper()
    checked = []
    for row in rows:
        event = decode_row(row)
        cls: type = type(event)
        topic, _, identifiers, _ = _shape(cls)
        state = {k: v for k, v in vars(event).items() if k not in _ROW_COLUMNS}
        try:
            redacted = _redacted(redactor, topic, identifiers, state)
        except SecretRefusedError as exc:  # the same refusal, saying which row
            raise type(exc)(pattern=exc.pattern, path=f"event {row.version} ({exc.path})") from None
        if all(redacted[k] is v for k, v in state.items()):
            checked.append(row)
            continue
        vars(event).update(redacted)
        checked.append(msgspec.structs.replace(row, state=encoder.to_stored_event(event).state))
    return checked


def unknown_fields(row: Row) -> list[str]:
    """The members of a row's stored JSON that its event class does not define, sorted.

    The mapper's decode skips such a member, so a row holding one would be stored with it
    unread: never redacted, never sealed. No row loom writes holds one."""
    cls = event_class(row.topic)
    state = msgspec.json.decode(row.state)
    if cls is None or not isinstance(state, dict):
        return []  # not an event at all: refused by the decode
    # Upcast first: an older version's row holds the members its upcasters rename.
    members = _upcast(cls, state, _decoder(cls)[1])
    return sorted(set(members) - set(schema_for(cls).__struct_fields__))


def _where(stream: object, version: int) -> str:
    """How an error names a row (built only when one is raised: replay maps every row)."""
    return f"stored event {stream} v{version}"
