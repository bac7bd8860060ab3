"""Execution bundles: one portable file holding everything a replay needs.

A bundle is the execution's stored events exactly as the log holds them (topic, version,
the JSON state bytes), plus the flow name, the code-version label and the log positions the
execution ran at, in a versioned msgspec envelope with a sha256 content hash. JSON by default
(an operator can read it), msgpack when the path ends in ``.msgpack``.

A JSON bundle is written to be reviewed in a git diff (ADR 0029): keys sorted, indented, one
event per block, and each event's state written as the JSON object it is rather than as one
escaped string, so a re-recorded prompt shows as the one line that changed. The hash is over
the events' exact state text, not the file's layout: a state is written as an object only when
reading it back gives that text byte for byte, and bundles written before (states as strings)
read as they always did.

Reading refuses, with a typed error that says which: a path with no file, a file that is not
a bundle, a truncated one, one whose content no longer matches its hash (tampered), and one
written by a newer format than this loom reads. The envelope's ``format`` and
``schema_version`` are read before anything else, so a future bundle is refused as *future*,
not as garbage.

The hash proves integrity, not authenticity (ADR 0013): anyone can re-seal an edited bundle.
So its events are checked as an execution before any of them is mapped: only execution topics,
versions 1..n in order, a ``Created`` first and only first; and any failure to rebuild the
execution from them is a :class:`~loom_runtime.errors.BundleFormatError`, never the mapper's
own error. Nothing a bundle names is imported (ADR 0018): the mapper reads only loom's closed
set of topics and aggregates, and a recorded error type is rebuilt only from a class already
loaded. A file over the size cap (:data:`MAX_BUNDLE_BYTES`) is refused before it is read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal, TypeVar
from uuid import UUID

import msgspec

from loom_runtime.errors import (
    BundleError,
    BundleFormatError,
    BundleNotFoundError,
    BundleTamperedError,
    BundleTooLargeError,
    BundleTruncatedError,
    BundleVersionError,
    ConfigurationError,
)
from loom_runtime.execution import EXECUTION_TOPICS, Execution, project_rows
from loom_runtime.log import Row
from loom_runtime.sealing import is_sealed_raw
from loom_runtime.timestamps import UtcTimestamp, plain_datetime

T = TypeVar("T")

FORMAT: Final = "loom-bundle"
SCHEMA_VERSION: Final = 1

MAX_BUNDLE_BYTES: Final = 256 * 1024 * 1024
"""The default size cap of a bundle file read (256 MiB); ``LOOM_MAX_BUNDLE_BYTES`` overrides it.

A bundle is untrusted input, decoded whole into memory (several times its size): without a
cap, any file handed to ``loom replay`` or the pytest plugin could exhaust memory. A real
execution's bundle is kilobytes to a few megabytes; raise the cap for one you trust."""

MAX_BUNDLE_BYTES_ENV: Final = "LOOM_MAX_BUNDLE_BYTES"


class BundleEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One stored event: its position in the source log, topic, version and exact state."""

    position: int
    topic: str
    version: int
    state: str
    """The stored JSON state as text (a string, so msgpack and JSON bundles hold the same)."""


class Bundle(msgspec.Struct, frozen=True, kw_only=True):
    """A self-contained recording of one execution (see the module docstring)."""

    format: Literal["loom-bundle"] = FORMAT
    schema_version: int = SCHEMA_VERSION
    execution_id: UUID
    flow: str
    code_version: str
    started_at_position: int
    positions: tuple[int, int]
    exported_at: UtcTimestamp
    events: tuple[BundleEvent, ...]
    content_hash: str = ""

    def execution(self) -> Execution:
        """The execution rebuilt from the bundle's events, with no database.

        Raises :class:`BundleFormatError` when the events are not an execution's (see the
        module docstring); nothing the events name is imported.
        """
        check_events(self.events)
        rows = self.rows()
        # Before anything reads them: the mapper skips a member its event does not define,
        # so a decision given a failure's members beside its value read as that value to a
        # replay, `bundle show` and `loom diff`, and as a failure to a reviewer of the JSON.
        check_fields(rows)
        try:
            _check_once(rows)
            execution = project_rows(rows)
        except BundleFormatError:
            raise
        except Exception as exc:  # the mapper's, msgspec's or eventsourcing's: all one refusal
            raise BundleFormatError(
                f"the bundle's events do not rebuild an execution ({type(exc).__name__}: {exc}); "
                "it was edited and re-sealed, or written by a broken exporter: export it again"
            ) from exc
        if not isinstance(execution, Execution):
            raise BundleFormatError("the bundle's events do not rebuild an execution")
        _check_positions(execution)
        _check_depth(execution)
        if is_sealed_raw(execution.input):
            # An export opens every sealed field, and a flow's input is keyed by parameter
            # names (never the mark): imported, this would read as sealed and never open.
            raise BundleFormatError(
                "the bundle's execution input holds loom's sealed mark, which an exported "
                "bundle never carries (an export opens every sealed field): it was crafted"
            )
        return execution

    def resealed(self, events: list[BundleEvent]) -> Bundle:
        """This bundle with ``events`` in place of its own, sealed again: what re-recording
        writes (``pytest --loom-update``), and how a test forges an edited recording."""
        return seal(
            execution_id=self.execution_id,
            flow=self.flow,
            code_version=self.code_version,
            started_at_position=self.started_at_position,
            events=events,
        )

    def rows(self) -> list[Row]:
        """The events as the rows the source log stored, to insert into another log."""
        return [
            Row(
                stream=self.execution_id,
                version=event.version,
                topic=event.topic,
                state=event.state.encode(),
            )
            for event in self.events
        ]


class _Envelope(msgspec.Struct):
    """What is read first: enough to refuse a non-bundle or a future one by name."""

    format: str = ""
    schema_version: int = 0


def check_events(events: tuple[BundleEvent, ...]) -> None:
    """Refuse events that cannot be an execution's stream, before any of them is mapped."""
    if not events:
        raise BundleFormatError("the bundle holds no events")
    for expected, event in enumerate(events, start=1):
        if event.topic not in EXECUTION_TOPICS:
            raise BundleFormatError(
                f"event {expected} of the bundle has topic {event.topic!r}, which is not an "
                f"execution event ({', '.join(EXECUTION_TOPICS)}); it is refused unread"
            )
        if event.version != expected:
            raise BundleFormatError(
                f"event {expected} of the bundle has version {event.version}; an execution's "
                "events are numbered 1, 2, 3... without gaps or repeats"
            )
        if (event.topic == Execution.Created.TOPIC) != (expected == 1):
            raise BundleFormatError(
                "an execution's stream starts with exactly one Created event; this bundle's "
                f"event {expected} is {event.topic!r}"
            )


def _check_depth(execution: Execution) -> None:
    """Refuse a decision whose recorded input or value nests deeper than loom stores
    (``codec.MAX_DEPTH``): live, such an input fails the run and such a value is stored as
    the decision's failure, but a replay hands the recorded bytes back (an input the code
    encodes to the same bytes is matched without the encoder's checks), so a bundle holding
    one replayed identical. Only JSON with more brackets than the limit is decoded to be
    measured: no other can nest that deep."""
    from loom_runtime.codec import MAX_DEPTH, too_deep

    for key, decision in execution.decisions.items():
        for field, raw in (("input", decision.input), ("value", decision.value)):
            data = b"" if raw is None else bytes(raw)
            if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
                continue
            try:
                deep = too_deep(msgspec.json.decode(data)) is not None
            except RecursionError:  # past the decoder's own limit
                deep = True
            if deep:
                raise BundleFormatError(
                    f"decision {key!r}: its {field} nests more than {MAX_DEPTH} levels deep, "
                    "which loom never stores: it was crafted"
                )


def _after_first_failure(standing: dict[str, int], failed: set[str]) -> set[str]:
    """What :meth:`Execution.reopen` drops: the standing decisions from the first failed one
    on (ADR 0026, amended "reopened after"); a reopening by a loom before that dropped the
    failed ones alone, which :func:`_check_once` accepts too."""
    first = min((standing[key] for key in failed), default=None)
    return set() if first is None else {key for key, at in standing.items() if at >= first}


def _check_once(rows: list[Row]) -> None:
    """Refuse a decision key recorded while its decision stands, and an execution ended while
    it stands ended: streams loom never writes (numbering gives a repeated call ``k#2``; only a
    reopening drops decisions, the failed ones and those recorded after the first of them, and
    a failure). Projected, the later event silently replaces the earlier, so a re-sealed
    bundle could show a reader one answer or outcome and be replayed, "identical", against
    another, never asked about the first.

    And refuse a decision marked as a fork's (its ``origin``) where loom never marks one: a
    replay does not count an inherited decision it never asks as unused (ADR 0027, "paths"),
    so the mark on a decision the code no longer asks made a replay say identical (ADR 0027,
    amended "marks").

    Checked on a bundle only, which anyone can re-seal: a log has its hash chain, and its
    invariant checkers must still read such a log to report the bug that wrote it.
    """
    from loom_runtime.storage.mapper import decode_state

    standing: dict[str, int] = {}  # the standing keys, each with its event's version
    failed: set[str] = set()  # the standing keys whose decision failed
    ended = False
    marks = _Marks()
    for row in rows:
        if row.topic == Execution.Created.TOPIC:
            _, created = decode_state(
                stream=row.stream, version=row.version, topic=row.topic, state=row.state
            )
            marks.start(created)
        elif row.topic in _DECISION_TOPICS or row.topic == Execution.Reopened.TOPIC:
            _, fields = decode_state(
                stream=row.stream, version=row.version, topic=row.topic, state=row.state
            )
            if row.topic != Execution.Reopened.TOPIC:
                marks.check(row.version, fields.key, fields.origin)
            if row.topic == Execution.Reopened.TOPIC:
                dropped, reopened = set(fields.dropped), _after_first_failure(standing, failed)
                if dropped not in (failed, reopened):
                    extra = sorted(dropped - reopened)
                    raise BundleFormatError(
                        f"event {row.version} of the bundle reopens the execution dropping "
                        f"{extra or sorted(dropped)!r}, which did not fail and was not recorded "
                        "after a failed decision; a reopening drops those alone: it was "
                        "edited and re-sealed"
                    )
                for key in dropped:
                    standing.pop(key, None)
                failed.difference_update(dropped)
                ended = False
            elif fields.key in standing:
                raise BundleFormatError(
                    f"event {row.version} of the bundle records decision {fields.key!r} again; "
                    "an execution records a key once (a reopening drops a failed one first): "
                    "it was edited and re-sealed"
                )
            else:
                standing[fields.key] = row.version
                if row.topic == Execution.DecisionFailed.TOPIC:
                    failed.add(fields.key)
        elif row.topic in _ENDING_TOPICS:
            if ended:
                raise BundleFormatError(
                    f"event {row.version} of the bundle ends the execution again; an execution "
                    "ends once (a reopening of its failure excepted): it was edited and re-sealed"
                )
            ended = True


_LOG_INTEGERS: Final = range(2**63)
"""What a log's integer columns hold (SQLite's INTEGER, PostgreSQL's BIGINT), less the
negatives that no position or count is."""


def _check_positions(execution: Execution) -> None:
    """Refuse a start position or fork point that no log holds. ``log_position`` is where an
    export scans the log from, in SQL: one past 64 bits was imported, and every later export of
    it was the driver's ``OverflowError`` traceback. ``forked_at`` counts decisions, stored and
    read beside it, and is bounded the same way."""
    for name, value in (
        ("log_position", execution.log_position),
        ("forked_at", execution.forked_at),
    ):
        if value is not None and value not in _LOG_INTEGERS:
            raise BundleFormatError(
                f"the bundle's execution has a {name} outside 0..2**63-1, which loom never "
                "writes and no log holds: it was edited and re-sealed"
            )


class _Marks:
    """Where a bundle's decisions may be marked as a fork's (ADR 0027): ``inherited`` on the
    decisions a fork took from its parent, stored right after its start (events 2, 3, ...,
    no more than it took), and ``override`` on a key a fork was given an override for.
    Anywhere else the mark is a forger's."""

    def __init__(self) -> None:
        self.took = 0
        """How many of its parent's decisions the execution took (0: not a fork)."""
        self.overridden: frozenset[str] = frozenset()
        self.next_inherited = 2
        """The version an inherited decision may have next: they follow the start unbroken."""

    def start(self, created: Any) -> None:
        if created.parent_id is None:
            return
        self.took = created.forked_at or 0
        if created.overrides is not None:
            # Not a map: left empty here, and the execution's rebuild refuses it, naming it.
            with contextlib.suppress(msgspec.DecodeError):
                self.overridden = frozenset(msgspec.json.decode(created.overrides, type=dict))

    def check(self, version: int, key: str, origin: str | None) -> None:
        if origin is None:
            return
        if origin == "inherited" and version == self.next_inherited and version - 1 <= self.took:
            self.next_inherited += 1
            return
        if origin == "override" and key in self.overridden:
            return
        where = (
            "a fork's first decisions, taken from its parent"
            if origin == "inherited"
            else "a key the fork was given an override for"
        )
        raise BundleFormatError(
            f"event {version} of the bundle is decision {key!r} marked "
            f"{origin!r}, which loom marks only on {where}: it was edited and re-sealed"
        )


_CLOCK_SKEW = timedelta(days=1)
"""How far ahead of this machine's clock an imported execution may have started: another
machine's clock may be ahead, or a local time stored as UTC (up to 14 hours)."""


def read_importable(path: Path, *, max_bytes: int | None = None) -> tuple[Bundle, list[Row]]:
    """Read a bundle (:func:`read_bundle`) and check all an import checks before it reads
    the log: that its id is an execution's (random), that its events rebuild an execution,
    which started in the past, with no field the mapper would skip (stored unread). Returns
    the bundle and its rows.

    The CLI reads files this way before it opens a database, until the first usable one, so
    a command whose every file is unusable creates none.
    """
    bundle = read_bundle(path, max_bytes=max_bytes)
    execution = bundle.execution()
    version = bundle.execution_id.version
    if not (version == 4 or (version == 8 and execution.started_by is not None)):
        # Named streams (a knowledge scope, a memory key, the forget log) have computable
        # uuid5 ids: an execution planted in one before its first write takes it over. A
        # sub-agent's id is derived too, but as a version 8 UUID, which no named stream is
        # (context.SubAgents.ids); a recording run never takes up an imported one.
        raise BundleFormatError(
            f"the bundle's execution id {bundle.execution_id} is not a random (version 4) "
            "UUID, as every execution's is, nor a sub-agent's (version 8, naming the execution "
            "that started it): it was edited, and may name another stream of the log; nothing "
            "was imported"
        )
    _started_in_the_past(execution)
    return bundle, bundle.rows()


def _started_in_the_past(execution: Execution) -> None:
    """Refuse a bundle's execution that starts after this machine's clock (beyond
    :data:`_CLOCK_SKEW`): its times are the bundle's word, and a start in the future would
    never be older than any retention age, so no policy would ever erase it (ADR 0053). A
    start without a timezone is UTC, as retention reads it."""
    started = execution.created_on
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    if started > datetime.now(UTC) + _CLOCK_SKEW:
        raise BundleFormatError(
            f"the bundle's execution {execution.id} starts at {started.isoformat()}, after this "
            "machine's clock: its times were edited, or the recording machine's clock was wrong, "
            "and no retention age would ever select it; nothing was imported"
        )


def check_fields(rows: list[Row]) -> None:
    """Refuse a row holding a member its event does not define: a newer loom's, or crafted
    (none that this loom writes holds one). The mapper's decode skips such a member, so it
    would be read past by every reader of the bundle and, imported, stored unread: never
    redacted, never sealed."""
    from loom_runtime.storage.mapper import unknown_fields

    for row in rows:
        try:
            extra = unknown_fields(row)
        except (msgspec.DecodeError, RecursionError) as exc:  # 1e400: JSON, but no double
            raise BundleFormatError(
                f"event {row.version} of the bundle ({row.topic}) holds a value loom never "
                f"writes ({exc}): it was edited"
            ) from exc
        if extra:
            raise BundleFormatError(
                f"event {row.version} of the bundle ({row.topic}) holds "
                f"{', '.join(map(repr, extra))}, which that event does not have here: a newer "
                "loom wrote it, or it was crafted"
            )


_DECISION_TOPICS: Final = (Execution.DecisionRecorded.TOPIC, Execution.DecisionFailed.TOPIC)
_ENDING_TOPICS: Final = (Execution.Completed.TOPIC, Execution.Failed.TOPIC)


def content_hash(bundle: Bundle) -> str:
    """sha256 of the canonical JSON of everything but the hash itself."""
    unhashed = msgspec.structs.replace(bundle, content_hash="")
    return hashlib.sha256(msgspec.json.encode(unhashed, order="sorted")).hexdigest()


def seal(
    *,
    execution_id: UUID,
    flow: str,
    code_version: str,
    started_at_position: int,
    events: list[BundleEvent],
) -> Bundle:
    """A bundle of these events with its content hash filled in."""
    bundle = Bundle(
        execution_id=execution_id,
        flow=flow,
        code_version=code_version,
        started_at_position=started_at_position,
        positions=(events[0].position, events[-1].position),
        exported_at=plain_datetime(datetime.now(UTC)),
        events=tuple(events),
    )
    return msgspec.structs.replace(bundle, content_hash=content_hash(bundle))


def write_bundle(
    bundle: Bundle,
    path: Path,
    *,
    follow_link: bool = True,
    over_any_file: bool = False,
    private: bool = False,
) -> Path:
    """Write ``bundle`` to ``path`` (msgpack for ``.msgpack``, else JSON); returns the path.

    The file is replaced whole or not at all: the bundle is written to a new file beside it,
    flushed to disk, and renamed over it. Written in place, a write cut short (a full disk, a
    killed ``pytest --loom-update`` re-sealing a committed recording) left neither the old
    bundle nor the new one. A symbolic link stays a link: the file it points to is replaced;
    with ``follow_link=False`` the link itself is, for a name the caller derived rather than
    chose (``loom export -o DIR`` names each ``<id>.json``): a link planted under it must not
    send the bundle over the file it points to. An existing file keeps its permissions; a new
    one gets the usual ones (0o666 less the umask), or, ``private``, its owner's only (0o600:
    the clear copy of an execution its log keeps sealed, ADR 0049).

    Only a bundle (or an empty file) is replaced: any other file there raises
    :class:`FileExistsError`, unwritten. Re-exporting over a bundle is the point of ``-o``;
    over anything else it is a slip that cost the file (``loom export ID -o loom.db``
    replaced the very log it read). A bundle is told by how it begins (:func:`_replaceable`),
    so one over the size cap, cut short or of another version is replaced too.
    ``over_any_file``: the caller's own file, whatever it holds now (a test's recording that
    ``--loom-record=rewrite`` writes again, even left conflicted by a merge).
    """
    data = msgspec.msgpack.encode(bundle) if path.suffix == ".msgpack" else bundle_json(bundle)
    target = path.resolve() if follow_link and path.is_symlink() else path
    if not over_any_file and not _replaceable(target):
        raise FileExistsError(
            errno.EEXIST,
            "it exists and does not read as a loom bundle, the only file an export replaces: "
            "remove it, or write elsewhere",
            str(path),
        )
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        mode = 0o600 if private else 0o666
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:  # no such folder, no permission: name the file asked for
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileNotFoundError):
            kept = target.lstat()  # a link being replaced has no mode worth keeping
            if stat.S_ISREG(kept.st_mode):
                partial.chmod(stat.S_IMODE(kept.st_mode))
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


def _replaceable(target: Path) -> bool:
    """Whether writing a bundle at ``target`` loses nothing but a bundle: no file there, an
    empty one, no regular file (a link not followed is replaced, not what it points to; a
    folder is refused by the rename), or one that begins as a bundle does: a JSON object, or
    a msgpack map for ``.msgpack``. By its beginning, not by reading it whole: a bundle over
    the size cap, one cut short by an interrupted copy, or one of another version is replaced
    as any bundle is, and a database (``SQLite format 3``), notes or a key is not."""
    try:
        found = target.lstat()
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(found.st_mode) or found.st_size == 0:
        return True
    try:
        head = _read_regular(target, _HEAD_BYTES, capped=False).lstrip()
    except (OSError, BundleError):
        return False
    return head[:1] in (_MSGPACK_MAPS if target.suffix == ".msgpack" else (b"{",))


_HEAD_BYTES: Final = 4096
"""How much of an existing file :func:`_replaceable` reads: past any leading whitespace."""
_MSGPACK_MAPS: Final = (*(bytes([marker]) for marker in range(0x80, 0x90)), b"\xde", b"\xdf")
"""The first byte of a msgpack map (fixmap, map 16, map 32): a msgpack bundle's."""


def bundle_json(bundle: Bundle) -> bytes:
    """The reviewable JSON text of ``bundle`` (see the module docstring): sorted, indented,
    each event's state inline as an object when that reads back to the same text, and ended
    by a newline, as a text file is (an editor or an end-of-file fixer adds one, and each
    re-seal stripped it again: a stray hunk in every reviewed diff)."""
    document = msgspec.to_builtins(bundle, order="sorted")
    for event in document["events"]:
        event["state"] = _inline_state(event["state"])
    encoded = msgspec.json.encode(document, order="sorted")  # a Raw state keeps its key order
    return msgspec.json.format(encoded, indent=2) + b"\n"


def _inline_state(state: str) -> str | msgspec.Raw:
    """``state`` as raw JSON to embed, if decoding and re-encoding it gives it back exactly
    (how :func:`read_bundle` reads it); else as the string it is."""
    text = state.encode()
    try:
        decoded = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return state
    if isinstance(decoded, dict) and msgspec.json.encode(decoded) == text:
        return msgspec.Raw(text)
    return state


def read_bundle(path: Path, *, max_bytes: int | None = None) -> Bundle:
    """Read and check a bundle; each way it can be unusable is its own typed error.

    A file over ``max_bytes`` (default: ``LOOM_MAX_BUNDLE_BYTES``, else
    :data:`MAX_BUNDLE_BYTES`) is refused by its size before it is read, and at most
    ``max_bytes + 1`` bytes are ever read (a file that grows). Anything but a regular file (a
    FIFO, a device, a folder) is refused unread, without waiting on it.
    """
    limit = bundle_size_cap(max_bytes)
    try:
        data = _read_regular(path, limit)
    except OSError as exc:  # missing, unreadable
        raise _no_bundle_at(path, exc.strerror or str(exc)) from exc
    _refuse_over(path, len(data), limit)
    if path.suffix != ".msgpack" and not data.lstrip().startswith(b"{"):
        # A bundle cut short still begins as one; text that does not is another file (a
        # note, a key, an empty file), and "export it again" would send the reader astray.
        raise BundleFormatError(
            f"{path} is not a loom bundle: a bundle is the JSON object `loom export` writes, "
            "and this file does not begin with one"
        )
    try:
        envelope = _decode(data, path, _Envelope)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError: well-formed, wrong shape
        raise BundleFormatError(f"{path} is not a loom bundle: {exc}") from exc
    except RecursionError as exc:  # nested past the decoder's limit: no bundle loom writes
        raise _too_deep(path) from exc
    except msgspec.DecodeError as exc:
        raise BundleTruncatedError(
            f"{path} is not a complete bundle (it ends or breaks before its end: {exc}); "
            "export it again"
        ) from exc
    if envelope.format != FORMAT:
        raise BundleFormatError(f"{path} is not a loom bundle (format {envelope.format!r})")
    if envelope.schema_version > SCHEMA_VERSION:
        raise BundleVersionError(
            f"{path} is a version {envelope.schema_version} bundle; this loom reads up to "
            f"version {SCHEMA_VERSION}: upgrade loom to replay it"
        )
    try:
        bundle = _decode(data, path, Bundle)
    except RecursionError as exc:
        raise _too_deep(path) from exc
    except msgspec.ValidationError as exc:
        raise BundleTamperedError(f"{path} does not match the bundle format: {exc}") from exc
    except msgspec.DecodeError as exc:  # e.g. invalid UTF-8 in a field the envelope skipped
        raise BundleTamperedError(
            f"{path} was altered or corrupted after export: it no longer decodes ({exc}); "
            "export it again"
        ) from exc
    if not bundle.events or content_hash(bundle) != bundle.content_hash:
        raise BundleTamperedError(
            f"{path} was altered after export: its content no longer matches its sha256 "
            f"({bundle.content_hash[:16] or 'missing'}...); export it again from its log "
            "(loom export ID -o FILE), or record it again"
        )
    check_events(bundle.events)
    return bundle


def _read_regular(path: Path, limit: int, *, capped: bool = True) -> bytes:
    """At most ``limit + 1`` bytes of the regular file at ``path``; anything else (a FIFO, a
    device, a folder) is refused unread.

    Opened without blocking and checked on the open descriptor: a FIFO's open waits for a
    writer, so every reader handed one hung (``loom import``, ``bundle show``, ``diff``), and
    a check of the path before opening it races with the path's replacement.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            what = "a directory" if stat.S_ISDIR(found.st_mode) else "a pipe or a device"
            raise _no_bundle_at(path, f"it is {what}, not a regular file, as a bundle is")
        if capped:  # else only its first ``limit + 1`` bytes are wanted, whatever its size
            _refuse_over(path, found.st_size, limit)
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            return file.read(limit + 1)
    finally:
        os.close(descriptor)


def _no_bundle_at(path: Path, why: str) -> BundleNotFoundError:
    return BundleNotFoundError(
        f"cannot read a bundle at {path}: {why}; pass the path of a file written by "
        "`loom export` (Loom.export)"
    )


def bundle_size_cap(max_bytes: int | None = None) -> int:
    """The cap in force: ``max_bytes``, else ``LOOM_MAX_BUNDLE_BYTES``, else the default."""
    if max_bytes is None:
        setting = os.environ.get(MAX_BUNDLE_BYTES_ENV, "")
        try:
            max_bytes = int(setting) if setting else MAX_BUNDLE_BYTES
        except ValueError:
            raise ConfigurationError(
                f"{MAX_BUNDLE_BYTES_ENV} must be a number of bytes, not {setting!r}"
            ) from None
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ConfigurationError(
            f"the bundle size cap must be a whole number of bytes from 1, not {max_bytes!r}"
        )
    return max_bytes


def _refuse_over(path: Path, size: int, limit: int) -> None:
    if size > limit:
        raise BundleTooLargeError(
            f"{path} is too large to read as a bundle: {size:,} bytes or more, over the cap of "
            f"{limit:,}; it was not read. If you trust the file, raise the cap "
            f"({MAX_BUNDLE_BYTES_ENV} for every command, `loom replay --max-bundle-bytes`, or "
            "max_bundle_bytes= in Python)"
        )


def _too_deep(path: Path) -> BundleFormatError:
    """The refusal of a file nested past the decoder's recursion limit: loom's own values nest
    at most ``codec.MAX_DEPTH`` levels, so no bundle it wrote does."""
    return BundleFormatError(
        f"{path} is not a loom bundle: it nests deeper than any value loom stores "
        "(RecursionError while decoding it)"
    )


def _decode(data: bytes, path: Path, into: type[T]) -> T:
    if path.suffix == ".msgpack":
        decoded = msgspec.msgpack.decode(data, type=into)
        if isinstance(decoded, Bundle):
            for event in decoded.events:  # JSON text in msgpack: the same two readings
                _refuse_repeated_members(event.state, path)
        return decoded
    if into is not Bundle:
        return msgspec.json.decode(data, type=into)
    document = msgspec.json.decode(data)
    _refuse_repeated_members(data, path)
    events = document.get("events") if isinstance(document, dict) else None
    for event in events if isinstance(events, list) else ():
        if isinstance(event, dict) and isinstance(event.get("state"), dict):
            # written inline by bundle_json: back to the exact text the hash covers
            event["state"] = msgspec.json.encode(event["state"]).decode()
        elif isinstance(event, dict) and isinstance(event.get("state"), str):
            _refuse_repeated_members(event["state"], path)
    return msgspec.convert(document, type=into)


def _refuse_repeated_members(text: bytes | str, path: Path) -> None:
    """Refuse JSON holding an object member twice, which no bundle loom writes holds.

    A JSON bundle is reviewed as text (ADR 0029), and JSON leaves a repeated member undefined:
    msgspec keeps the last, a reader sees the first, so a second ``events`` (or a second
    ``output`` in a state) would be replayed, sealed and "identical", unseen. msgspec cannot
    report one; the standard parser's pair hook can. Called once msgspec has decoded the
    text, so the two parsers should agree on everything else; where they do not, the text is
    no bundle loom wrote either (a nesting too deep for this parser is ``RecursionError``,
    refused by the caller as for msgspec).
    """

    def pairs(members: list[tuple[str, object]]) -> None:
        """Each object's members as parsed: checked, then dropped (nothing is kept but the
        check, so the parse holds no second copy of the document)."""
        names = {name for name, _ in members}
        if len(names) != len(members):
            counted = Counter(name for name, _ in members)
            repeated = next(name for name, count in counted.items() if count > 1)
            raise BundleFormatError(
                f"{path} is not a loom bundle: an object in it holds {repeated!r} more than "
                "once (JSON leaves which one counts undefined; loom never writes that)"
            )

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError as exc:  # JSONDecodeError, or an integer over Python's digit limit
        raise BundleFormatError(f"{path} is not a loom bundle: {exc}") from exc
