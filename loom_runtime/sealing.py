"""Sealed fields: an execution's personal payloads encrypted under its own data key (ADR 0049).

Why per field and not per event: what orders, routes and audits a log (ids, kinds,
positions, times, labels) must stay readable after an erasure, so only the fields that can
hold personal data are sealed: a flow's input and output, a decision's value, input and meta
(a retried attempt's exception message is there), an error message. Each is AES-GCM under
the execution's data key, with the event's stream, version and field as associated data, so a
ciphertext moved to another place does not open. A decision's key is sealed too (a recorded
HTTP call's key holds its URL path, which may name a person), deterministically (AES-SIV
under a key derived from the data key): the events of one execution name the same decision
by the same stored text, so the execution is rebuilt before anything is opened. The chain
hashes the stored bytes, so it covers the ciphertext, and destroying a key changes no chained
byte: ``loom verify`` passes before and after an erasure.

Data keys live in ``loom_subject_keys`` in the log's own database, wrapped by a
:class:`KeyWrapper` (:class:`MasterKey`, or a KMS behind the same two methods). It is the one
state outside the log, on purpose: what is in the log can never be destroyed. A key-check row
(a key wrapped by the master key) makes a wrong master key a refusal at open, never data
silently read as erased.

Only the cryptography package does cryptography here (AES key wrap, RFC 3394, AES-GCM and
AES-SIV, RFC 5297);
this module only decides what is sealed, where, and under which key.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import os
import sqlite3
import string
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, runtime_checkable
from uuid import UUID

import msgspec

from loom_runtime.envelope import (
    MARK,
    NONCE_BYTES,
    UNREADABLE,
    Sealed,
    sealed_of_text,
    sealed_text,
)
from loom_runtime.errors import (
    ConfigurationError,
    EncryptionOffError,
    ErasedError,
    LogCorruptError,
    MissingExtraError,
    SubjectErasedError,
    WrongMasterKeyError,
    cause_of,
)
from loom_runtime.log import READ_ONLY, Precondition
from loom_runtime.retry import is_contention
from loom_runtime.storage.mapper import holds_no_text
from loom_runtime.subjects import SUBJECT_LENGTH

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
    from sqlalchemy import Dialect, Engine, Table

    from loom_runtime.execution import Execution
    from loom_runtime.log import EventLog, Record, Row
    from loom_runtime.redaction import Redactor

_ENVELOPE_HEAD: Final = b'{"' + MARK.encode() + b'":'
"""How a sealed JSON value's stored bytes begin (its encoder writes no space)."""
KEY_CHECK: Final = "loom:key-check"
"""The key table's row that proves the master key: a random key wrapped by it."""
TABLE: Final = "loom_subject_keys"
LIVE_SQL: Final = f"SELECT wrapped_key IS NOT NULL FROM {TABLE} WHERE subject = ?"
"""Whether a subject's key is live (true), destroyed (false) or missing (no row): what a
sealed append reads in its own transaction where the log can (a :class:`Precondition`)."""
_LIVE_LOCKED: Final = {"postgresql": f"{LIVE_SQL} FOR SHARE"}
""":data:`LIVE_SQL` as an append reads it, by dialect. On PostgreSQL a plain read returns the
last committed row without waiting for a transaction destroying the key, so an append could
commit after the destruction; the row's share lock makes it wait and read the key gone (or
makes the destruction wait for the append, which it then erases). SQLite's one write lock
already orders the two."""
_ALL_LIVE_SQL: Final = {
    "sqlite": (
        "SELECT NOT EXISTS (SELECT 1 FROM json_each(?) AS wanted WHERE NOT EXISTS "
        f"(SELECT 1 FROM {TABLE} AS k WHERE k.subject = wanted.value "
        "AND k.wrapped_key IS NOT NULL))"
    ),
    "postgresql": (
        "SELECT NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(?::jsonb) AS wanted(value) "
        f"WHERE NOT EXISTS (SELECT 1 FROM {TABLE} AS k WHERE k.subject = wanted.value "
        "AND k.wrapped_key IS NOT NULL FOR SHARE))"
    ),
}
""":data:`LIVE_SQL` for many subjects at once, by dialect: true when every subject of a JSON
array (the one parameter) has a live key. On PostgreSQL each key row is read ``FOR SHARE``,
as :data:`_LIVE_LOCKED` reads one: a destruction in flight is waited for and read."""
CACHED_KEYS: Final = 10_000
"""How many unwrapped data keys a Loom keeps (one per execution it wrote or read lately)."""
_DATA_KEY_BYTES: Final = 32


class _Envelope(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A sealed JSON value as stored. Untracked, as :class:`Sealed` (which is all it holds):
    every sealed decision makes one on record and on replay, and a tracked one was collector
    work for each."""

    sealed: Sealed = msgspec.field(name=MARK)
    names: bool = False
    """Set on an execution's sealed input only: its decision keys are sealed too
    (:func:`sealed_names`). Absent (False) in what a loom sealed before keys were."""
    nulls: bool = False
    """Set on an execution's sealed input only: its ``null`` values and output are sealed too
    (:func:`input_flags`). Absent (False) in what a loom sealed before they were."""


holds_no_text(_Envelope)  # ciphertext: the log's redactor has nothing to find in it


_envelope_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(_Envelope)


@runtime_checkable
class KeyWrapper(Protocol):
    """What wraps the data keys at rest: the seam for an external KMS.

    ``unwrap`` must raise (anything) for bytes it did not wrap: a wrong key is refused, never
    taken for an erased one.
    """

    def wrap(self, key: bytes) -> bytes:
        """``key`` (32 random bytes) wrapped for storage."""
        ...

    def unwrap(self, wrapped: bytes) -> bytes:
        """The key :meth:`wrap` wrapped; raises for bytes it did not wrap."""
        ...


def require_key_wrapper(encryption: object) -> None:
    """Refuse, when a Loom is made, an ``encryption`` that wraps no key: the text
    :meth:`MasterKey.generate` returns (for ``$LOOM_MASTER_KEY``) or a key's bytes were taken
    and failed at the first sealed write, inside a flow, with an ``AttributeError``."""
    if not (
        callable(getattr(encryption, "wrap", None))
        and callable(getattr(encryption, "unwrap", None))
    ):
        raise ConfigurationError(
            f"encryption takes a MasterKey (or a KeyWrapper of your KMS), not "
            f"{type(encryption).__name__}: pass MasterKey.from_env('LOOM_MASTER_KEY') for a "
            "base64 key in the environment, or MasterKey(key_bytes)"
        )


def require_cryptography() -> Any:
    """The ``cryptography`` module loom seals with (its AES key wrap), or
    :class:`MissingExtraError` naming the ``encryption`` extra: asked when a Loom is given a
    master key, so a missing extra is said at once, not at the first sealed write."""
    try:
        from cryptography.hazmat.primitives import keywrap
    except ImportError as exc:  # pragma: no cover - the encryption extra is missing
        raise MissingExtraError(
            extra="encryption", missing="cryptography", needed_by="encryption"
        ) from exc
    return keywrap


class MasterKey:
    """A 256-bit (or 128/192-bit) AES key that wraps data keys (AES key wrap, RFC 3394).

    Give it the key's bytes, or :meth:`from_env` for a base64 key in an environment variable
    (:meth:`generate` prints a new one). Its repr never shows the key.
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
            raise ConfigurationError(
                "a master key is 16, 24 or 32 bytes (AES); make one with "
                "`python -c 'from loom_runtime import MasterKey; print(MasterKey.generate())'`"
            )
        self._key = key

    @classmethod
    def from_env(cls, name: str = "LOOM_MASTER_KEY") -> MasterKey:
        """The key in environment variable ``name``, base64 (standard or URL-safe)."""
        text = os.environ.get(name, "").strip()
        if not text:
            raise ConfigurationError(
                f"encryption needs a master key in ${name} (base64 of 32 random bytes); make "
                "one with `python -c 'from loom_runtime import MasterKey; "
                "print(MasterKey.generate())'` and keep it where your other secrets are"
            )
        if len(text) == 32 and all(c in string.hexdigits for c in text):
            # All in base64's alphabet too, so it would decode, to another (192-bit) key.
            raise ConfigurationError(
                f"${name} looks like a key in hex (32 hex digits); loom reads base64: convert "
                "it with `python -c 'import base64,sys; "
                "print(base64.b64encode(bytes.fromhex(sys.argv[1])).decode())' HEX`"
            )
        standard = text.replace("-", "+").replace("_", "/")
        try:  # strict: no character outside the alphabet, nothing after the padding
            key = binascii.a2b_base64(standard + "=" * (-len(standard) % 4), strict_mode=True)
        except binascii.Error as exc:
            raise ConfigurationError(
                f"${name} is not one base64 key ({exc}): give the text "
                "MasterKey.generate() printed, alone on the line"
            ) from None
        return cls(key)

    @staticmethod
    def generate() -> str:
        """A new random 256-bit key, base64 (for ``LOOM_MASTER_KEY``)."""
        return base64.urlsafe_b64encode(os.urandom(32)).decode()

    def wrap(self, key: bytes) -> bytes:
        return bytes(require_cryptography().aes_key_wrap(self._key, key))

    def unwrap(self, wrapped: bytes) -> bytes:
        return bytes(require_cryptography().aes_key_unwrap(self._key, wrapped))

    def __repr__(self) -> str:
        return "MasterKey(<hidden>)"


def subject_of(execution_id: UUID) -> str:
    """The subject an execution's fields are sealed under: ``execution:<uuid>``."""
    return f"execution:{execution_id}"


def _aad(stream: UUID | str, version: int, field: str) -> bytes:
    return f"{stream}:{version}:{field}".encode()


# --- the key table --------------------------------------------------------------------------


@functools.cache
def key_table() -> Table:
    """``loom_subject_keys``: one row per subject; ``wrapped_key`` NULL once destroyed, with
    ``erased_position`` naming the forget event (a tombstone: what an ``ErasedError`` names).

    Only the definition: the table is created by the first write that seals
    (:meth:`Keyring.create`), never by opening a log. One object per process: SQLAlchemy
    caches a statement's compiled form per table object, and a new one per keyring made
    every keyring compile its statements again (a visible share of opening a log)."""
    from sqlalchemy import BigInteger, Column, LargeBinary, MetaData, String, Table

    return Table(
        TABLE,
        MetaData(),
        Column("subject", String(SUBJECT_LENGTH), primary_key=True),
        Column("wrapped_key", LargeBinary, nullable=True),
        Column("created_position", BigInteger, nullable=False),
        Column("erased_position", BigInteger, nullable=True),
    )


_CREATE_TABLE_SQL: dict[type, str] = {}


def _create_table_sql(dialect: Dialect) -> str:
    """``CREATE TABLE`` of :func:`key_table` in ``dialect``'s SQL, compiled once per dialect
    class and process (the DDL depends on nothing else)."""
    sql = _CREATE_TABLE_SQL.get(type(dialect))
    if sql is None:
        from sqlalchemy.schema import CreateTable

        sql = str(CreateTable(key_table()).compile(dialect=dialect))
        _CREATE_TABLE_SQL[type(dialect)] = sql
    return sql


@contextlib.contextmanager
def _key_table_shape() -> Iterator[None]:
    """Raise a read or write of the key table that fails on the table's own shape (a column
    dropped or renamed, the table gone mid-read) as :class:`LogCorruptError`, the one line
    ``loom verify`` already gave without the master key; with it, the database's error went
    out of every command as a traceback. Contention and a lost connection are raised as
    they are: they are no fault of the table. Only the slower paths are wrapped (a keyring's
    own connection failing, or a transaction of several rows); the reads an append makes are
    not, and cost nothing more."""
    try:
        yield
    except Exception as exc:
        if not _misshapen(exc):
            raise
        raise LogCorruptError(
            f"the key table ({TABLE}) could not be read: {cause_of(exc)}. Its columns are not "
            "the ones loom made (altered by hand, or restored from another schema): restore it "
            "from a backup, or run `loom verify` to see what else differs"
        ) from exc


def _misshapen(exc: BaseException) -> bool:
    """Whether a database error says a statement does not fit the table: SQLite's "no such
    column" and its kin, PostgreSQL's SQLSTATE class 42 (undefined column or table, a type
    that does not match)."""
    driver = getattr(exc, "orig", None) or exc
    if is_contention(exc):
        return False
    if isinstance(driver, sqlite3.OperationalError):
        message = str(driver)
        return any(
            said in message for said in ("no such column", "no column named", "no such table")
        )
    return str(getattr(driver, "sqlstate", None) or "").startswith("42")


class _Row(msgspec.Struct, frozen=True):
    wrapped_key: bytes | None
    erased_position: int | None


class Keyring:
    """The data keys of one log, unwrapped on first use and cached (a replay unwraps an
    execution's key once). A key found destroyed is refused with :class:`ErasedError`.

    Encryption is switched on for a log by its first sealed write, not by opening it: a log
    that has no key table keeps none until :meth:`create` makes one (with the key-check row),
    so a reader given a master key (``loom verify`` with ``$LOOM_MASTER_KEY`` set) never
    writes. Where the table exists, opening proves the master key against the key-check row:
    :class:`WrongMasterKeyError` otherwise. A keyring opened before another process switched
    encryption on looks again (and proves the key) when it first needs a row.
    """

    def __init__(self, engine: Engine, wrapper: KeyWrapper) -> None:
        self.engine = engine
        self.wrapper = wrapper
        self.table = key_table()
        self._active = False
        """Whether this log has a key table whose check row this master key opened."""
        self._cache: dict[str, AESGCM] = {}
        from sqlalchemy import text

        # Text, not a Core select: a write reads its key row on every append, and compiling a
        # select each time was most of encryption's cost per recorded decision.
        self._raw: Any = None
        marker = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._live_sql = f"SELECT wrapped_key IS NOT NULL FROM {TABLE} WHERE subject = {marker}"
        self._row_sql = f"SELECT wrapped_key, erased_position FROM {TABLE} WHERE subject = {marker}"
        self._insert_sql = (
            f"INSERT INTO {TABLE} (subject, wrapped_key, created_position) "
            f"VALUES ({marker}, {marker}, {marker})"
        )
        self._select_row = text(
            f"SELECT wrapped_key, erased_position FROM {TABLE} WHERE subject = :subject"
        )
        self._lock = threading.Lock()
        self._refresh()
        _keyrings[engine] = self

    def _refresh(self) -> bool:
        """Whether the log has a key table (proving the master key against it the first time
        it is found); reads only."""
        if not self._active:
            # First the check row itself, on the kept connection: where the table exists (an
            # encrypted log, the case that matters) that read is the whole test, and a pool
            # checkout for ``has_table`` was half of what a keyed open cost. It fails where
            # there is no table (or the connection fails): then the dialect's own test, not
            # ``inspect(engine)`` (an inspector is built for reflection and costs more).
            try:
                row = self._kept(self._row_sql, (KEY_CHECK,))
            except Exception:
                if self._has_table():
                    self._check(create=False)
            else:
                self._checked(row)
        return self._active

    def _has_table(self) -> bool:
        """Whether the key table exists: on SQLite one read of ``sqlite_master`` on the kept
        connection; elsewhere, or when that connection fails, the dialect's own test on a
        pooled connection. Why not that test always: on SQLite it checks a connection out
        and begins a transaction (a write transaction, the engine's ``BEGIN IMMEDIATE``),
        about 0.3 ms of a keyed Loom's first write to a clear log."""
        if self.engine.dialect.name == "sqlite":
            with contextlib.suppress(Exception):
                return not self._kept(_NO_KEY_TABLE_SQL["sqlite"], (TABLE,))[0]
        with self.engine.connect() as connection:
            return bool(self.engine.dialect.has_table(connection, TABLE))

    def _switch_on(self) -> None:
        """Create the key table and its check row (a sealed write is about to need them)."""
        if self._refresh():
            return
        from sqlalchemy.exc import DBAPIError

        # DBAPIError: another process created it between the check and the create.
        with contextlib.suppress(DBAPIError):
            self.table.metadata.create_all(self.engine, checkfirst=True)
        self._check(create=True)

    def _switch_on_with(self, first: dict[str, Any], *, position: int) -> bool:
        """Switch encryption on together with the first key, in one transaction: the table,
        its check row and ``first``. False (nothing written) if the table exists already,
        made by another process since this keyring looked, or earlier: the caller then takes
        the ordinary path, which proves the master key against that table's check row.

        Why one transaction: a log recorded with encryption from its first run paid the
        table's existence test twice, then a transaction for the check row and another for
        the key, a few milliseconds per fresh log (the benchmark section's whole margin).
        Why on the kept connection: a transaction through the engine checked out a second
        connection (the kept one is out), and opening it was most of what switching on cost
        (~0.7 ms against ~0.04 ms for the statements)."""
        check = (KEY_CHECK, self.wrapper.wrap(os.urandom(_DATA_KEY_BYTES)), 0)
        rows = [check, (first["subject"], first["wrapped_key"], position)]
        try:
            # Driver SQL, the DDL compiled once per dialect: a fresh Loom's engine has an
            # empty statement cache, and compiling the table and the insert was most of
            # what switching encryption on cost its first run (about 0.9 ms).
            self._kept_transaction(_create_table_sql(self.engine.dialect), rows)
        except Exception:  # the table exists (refused: nothing is kept)
            return False
        self._active = True
        return True

    def _check(self, *, create: bool) -> None:
        from sqlalchemy.exc import IntegrityError

        if not create:  # opening: a read on the kept connection (no transaction of its own)
            self._checked(self._fetch_row(KEY_CHECK))
            return
        table = self.table
        with _key_table_shape(), self.engine.begin() as connection:
            row = connection.execute(self._select_row, {"subject": KEY_CHECK}).first()
            wrapped = None if row is None else row[0]
            if wrapped is None:
                if row is not None or connection.exec_driver_sql(_DATA_KEY_SQL).first():
                    raise _no_check_row()  # never a check row of this key's own making
                try:
                    connection.execute(
                        table.insert().values(
                            subject=KEY_CHECK,
                            wrapped_key=self.wrapper.wrap(os.urandom(_DATA_KEY_BYTES)),
                            created_position=0,
                        )
                    )
                except IntegrityError:  # another process wrote it first: check against it
                    pass
                else:
                    self._active = True
                    return
        if wrapped is None:
            self._check(create=create)
            return
        self._prove(bytes(wrapped))

    def _checked(self, row: Any) -> None:
        """Prove the master key against the key-check ``row`` read at open. A table without
        its check row holds no data key yet (the row is written first, or with the first key);
        one that holds data keys without it, or whose check row holds no key, cannot prove any
        master key and is refused (:func:`_no_check_row`): read on, it made every execution
        look erased while its key was still in the table."""
        if row is not None and row[0] is not None:
            self._prove(bytes(row[0]))
        elif row is not None or self._holds_data_keys():
            raise _no_check_row()

    def _holds_data_keys(self) -> bool:
        """Whether the key table holds any row besides the check row (read only when the check
        row is missing: a fresh table's brief state, or an altered one)."""
        try:
            return self._kept(_DATA_KEY_SQL, ()) is not None
        except Exception:
            with _key_table_shape(), self.engine.connect() as connection:
                return connection.exec_driver_sql(_DATA_KEY_SQL).first() is not None

    def _prove(self, wrapped: bytes) -> None:
        """Refuse a master key that does not unwrap the key-check row."""
        try:
            self.wrapper.unwrap(wrapped)
        except Exception as exc:
            raise WrongMasterKeyError(
                f"the master key given does not open this log's key table ({TABLE}): it is "
                "not the key the log was encrypted with. Nothing was read; give the right key "
                "(LOOM_MASTER_KEY). A lost master key cannot be recovered: the sealed data is "
                "unreadable, never silently treated as erased"
            ) from exc
        self._active = True

    def _remember(self, subject: str, aead: AESGCM) -> None:
        """Cache an unwrapped key (the caller holds the lock); the oldest goes past
        :data:`CACHED_KEYS`, so a long-lived worker keeps a bounded number in memory."""
        self._cache[subject] = aead
        if len(self._cache) > CACHED_KEYS:
            del self._cache[next(iter(self._cache))]

    def _aead(self, key: bytes) -> AESGCM:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return AESGCM(key)

    def create(self, subject: str, *, position: int) -> AESGCM:
        """A new data key for ``subject``, stored wrapped (once: a subject keeps its key)."""
        key = os.urandom(_DATA_KEY_BYTES)
        row = {"subject": subject, "wrapped_key": self.wrapper.wrap(key)}
        if self._active or not self._switch_on_with(row, position=position):
            self._switch_on()
            self._store_key(row, position=position)
        aead = self._aead(key)
        with self._lock:
            self._remember(subject, aead)
        return aead

    def _store_key(self, row: dict[str, Any], *, position: int) -> None:
        """Insert a key row with driver SQL on the kept connection, or the ordinary way if
        that connection fails (a duplicate subject then fails there, as it always did). Why:
        every new execution stores its key, and a transaction through the engine cost four
        times the CPU of the insert itself, a visible share of a short execution."""
        values = (row["subject"], row["wrapped_key"], position)
        try:
            self._kept(self._insert_sql, values, fetch=False)
        except Exception:
            with _key_table_shape(), self.engine.begin() as connection:
                connection.execute(self.table.insert(), {**row, "created_position": position})

    def ensure(self, subject: str, *, position: int) -> AESGCM:
        """The key for a write to ``subject``: its live key, or a new one if it has none; a
        destroyed key is :class:`SubjectErasedError` (an import cannot bring an erased
        execution back)."""
        if subject not in self._cache and self._row(subject) is None:
            return self.create(subject, position=position)
        return self.live_key(subject)

    def ensure_all(self, subjects: Sequence[str], *, position: int) -> None:
        """Make the keys ``subjects`` have none of yet, in one transaction, and cache them:
        a sync writing many new documents paid a transaction per key. A destroyed key stays
        destroyed (the write that needs it is refused by :meth:`ensure`); a key another
        process made meanwhile is left to :meth:`ensure` too."""
        from sqlalchemy import select
        from sqlalchemy.exc import IntegrityError

        wanted = list(dict.fromkeys(subjects))
        if not wanted:
            return
        self._switch_on()
        table = self.table
        held: set[str] = set()
        with _key_table_shape(), self.engine.connect() as connection:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                held.update(
                    connection.execute(
                        select(table.c.subject).where(table.c.subject.in_(chunk))
                    ).scalars()
                )
        keys = {subject: os.urandom(_DATA_KEY_BYTES) for subject in wanted if subject not in held}
        if not keys:
            return
        rows = [
            {"subject": s, "wrapped_key": self.wrapper.wrap(k), "created_position": position}
            for s, k in keys.items()
        ]
        try:
            with _key_table_shape(), self.engine.begin() as connection:
                connection.execute(table.insert(), rows)
        except IntegrityError:
            return  # another process made one of them: each write finds its own
        with self._lock:
            for subject, key in keys.items():
                self._remember(subject, self._aead(key))

    def _row(self, subject: str) -> _Row | None:
        if not self._refresh():
            return None
        row = self._fetch_row(subject)
        if row is None:
            return None
        return _Row(None if row[0] is None else bytes(row[0]), row[1])

    def key(self, subject: str) -> AESGCM:
        """The subject's data key (cached); :class:`ErasedError` if it was destroyed."""
        cached = self._cache.get(subject)
        if cached is not None:
            return cached
        row = self._row(subject)
        if row is None or row.wrapped_key is None:
            raise _erased(ErasedError, subject, None if row is None else row.erased_position)
        try:
            aead = self._aead(self.wrapper.unwrap(row.wrapped_key))
        except Exception as exc:
            if self._active:  # the master key opened the key-check row: this row is at fault
                raise LogCorruptError(
                    f"the data key row of {subject} in {TABLE} does not unwrap with the master "
                    "key, which opens this log's key-check row: the row was altered or copied "
                    f"from another log (restore the key table from a backup): {type(exc).__name__}"
                ) from exc
            raise WrongMasterKeyError(
                f"the data key of {subject} does not unwrap with the master key given"
            ) from exc
        with self._lock:
            self._remember(subject, aead)
        return aead

    def read_key(self, subject: str) -> AESGCM:
        """The key for reading one whole execution (its state, its replay, its export): the
        cached key once its row is read again and found live, else as :meth:`key` (a
        destroyed key is :class:`ErasedError`, and leaves the cache).

        Why a read per execution and not per field: the cache would otherwise outlive an
        erasure made by another process, and this Loom would go on opening what the erasure
        made unreadable everywhere else; one primary-key read on the kept connection per
        execution opened costs a few decisions' worth of opening, never one per field."""
        if subject in self._cache and self._is_live(subject):
            return self._cache[subject]
        self.forget([subject])
        return self.key(subject)

    def write_key(self, subject: str) -> AESGCM:
        """The key for a write whose log reads :data:`LIVE_SQL` in the append's own
        transaction (:class:`ExecutionSealer`'s precondition): the cached key, with no read
        of its own; :meth:`live_key` when none is cached."""
        cached = self._cache.get(subject)
        return cached if cached is not None else self.live_key(subject)

    def live_key(self, subject: str) -> AESGCM:
        """The key for a write: the key table is read again (another process may have erased
        the subject since it was cached), and a destroyed key is :class:`SubjectErasedError`."""
        if subject in self._cache and self._is_live(subject):
            return self._cache[subject]
        row = self._row(subject)
        if row is None or row.wrapped_key is None:
            self.forget([subject])
            raise _erased(SubjectErasedError, subject, None if row is None else row.erased_position)
        return self.key(subject)

    def live_precondition(self, subject: str) -> Precondition:
        """What an append sealed under ``subject``'s key must find in its own transaction: the
        key still live (:data:`LIVE_SQL`), else :class:`SubjectErasedError` naming the forget
        event, with nothing stored. So a write that read the key live just before another
        process destroyed it is refused rather than stored under the destroyed key."""

        def refusal() -> ErasedError:
            self.forget([subject])
            row = self._row(subject)
            return _erased(
                SubjectErasedError, subject, None if row is None else row.erased_position
            )

        sql = _LIVE_LOCKED.get(self.engine.dialect.name, LIVE_SQL)
        return Precondition(sql=sql, parameter=subject, refusal=refusal)

    def all_live_precondition(self, subjects: Iterable[str]) -> Precondition:
        """:meth:`live_precondition` for an append sealed under many subjects' keys (a sync's
        documents): every key still live in the append's own transaction, else
        :class:`SubjectErasedError` naming the first subject found erased, nothing stored.
        One subject is :meth:`live_precondition` itself."""
        wanted = sorted(set(subjects))
        if len(wanted) == 1:
            return self.live_precondition(wanted[0])

        def refusal() -> ErasedError:
            self.forget(wanted)
            rows = {subject: self._row(subject) for subject in wanted}
            subject = next(
                (s for s, row in rows.items() if row is None or row.wrapped_key is None), wanted[0]
            )
            row = rows[subject]
            return _erased(
                SubjectErasedError, subject, None if row is None else row.erased_position
            )

        sql = _ALL_LIVE_SQL[self.engine.dialect.name]
        return Precondition(
            sql=sql, parameter=msgspec.json.encode(wanted).decode(), refusal=refusal
        )

    def _is_live(self, subject: str) -> bool:
        """Whether ``subject``'s key row still holds a key, read on a connection this keyring
        keeps: a pool checkout per append cost ten times the read itself. Any failure of that
        connection answers False, and the caller reads the row the ordinary way."""
        try:
            row = self._kept(self._live_sql, (subject,))
        except Exception:
            return False
        return row is not None and bool(row[0])

    def _fetch_row(self, subject: str) -> Any:
        """``subject``'s key row (wrapped key, erased position), or None: read on the kept
        connection, or the ordinary way if that connection fails. Why not the ordinary way
        always: each keyring (each Loom) compiled the statement again, and with the
        transaction around it that was most of what opening an encrypted log, and reading
        its first key, cost beyond opening a clear one."""
        try:
            return self._kept(self._row_sql, (subject,))
        except Exception:
            with _key_table_shape(), self.engine.connect() as connection:
                return connection.execute(self._select_row, {"subject": subject}).first()

    @contextlib.contextmanager
    def _kept_cursor(self) -> Iterator[Any]:
        """A cursor on the connection this keyring keeps, under its lock, committed after the
        block (no transaction left open: a checkpoint waits on one). If anything fails, the
        connection is rolled back and closed again, and the error raised."""
        with self._lock:
            try:
                if self._raw is None:
                    self._raw = self.engine.raw_connection()
                cursor = self._raw.cursor()
                try:
                    yield cursor
                finally:
                    cursor.close()
                self._raw.commit()
            except Exception:
                with contextlib.suppress(Exception):
                    if self._raw is not None:
                        self._raw.rollback()  # the pool would on return; not left to it
                self._close_raw()
                raise

    def _kept(self, sql: str, parameters: tuple[Any, ...], *, fetch: bool = True) -> Any:
        """Driver SQL ``sql`` run and committed on the connection this keyring keeps; its
        first row if ``fetch``."""
        with self._kept_cursor() as cursor:
            cursor.execute(sql, parameters)
            return cursor.fetchone() if fetch else None

    def _kept_transaction(self, ddl: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """``ddl``, then :attr:`_insert_sql` of each of ``rows``, in one transaction on the
        kept connection (on SQLite, whose engine connections are in autocommit, an explicit
        ``BEGIN IMMEDIATE``, which the commit ends). Nothing is kept if any fails."""
        with self._kept_cursor() as cursor:
            if self.engine.dialect.name == "sqlite":
                cursor.execute("BEGIN IMMEDIATE")
            cursor.execute(ddl)
            cursor.executemany(self._insert_sql, rows)

    def _close_raw(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            try:  # noqa: SIM105 - closing a connection that already failed may fail again
                raw.close()
            except Exception:
                pass

    def close(self) -> None:
        """Release the connection kept for write checks, leave the engine's registry and
        forget the unwrapped keys.

        Why leave the registry here: it holds its keyrings, and each keyring its engine, so
        an entry kept its own weak key alive and nothing a closed Loom had opened (engine,
        keyring, data keys) was ever freed."""
        with self._lock:
            self._close_raw()
            self._cache.clear()
        if _keyrings.get(self.engine) is self:
            del _keyrings[self.engine]

    def live(self, subjects: Iterable[str]) -> list[str]:
        """Which of ``subjects`` have a key that is not destroyed."""
        return self._subjects(subjects, destroyed=False)

    def destroyed(self, subjects: Iterable[str]) -> list[str]:
        """Which of ``subjects`` had a key that an erasure destroyed (its row is kept, with
        the forget event's position): what an erasure can report without reading the log."""
        return self._subjects(subjects, destroyed=True)

    def _subjects(self, subjects: Iterable[str], *, destroyed: bool) -> list[str]:
        from sqlalchemy import select

        wanted = list(subjects)
        table = self.table
        found: list[str] = []
        if not self._refresh():
            return found
        key = table.c.wrapped_key
        with _key_table_shape(), self.engine.connect() as connection:
            for start in range(0, len(wanted), 500):
                found.extend(
                    connection.execute(
                        select(table.c.subject).where(
                            table.c.subject.in_(wanted[start : start + 500]),
                            key.is_(None) if destroyed else key.is_not(None),
                        )
                    ).scalars()
                )
        return found

    def destroy(self, subjects: Sequence[str], *, position: int) -> int:
        """Destroy the keys of ``subjects`` (their rows keep only the forget event's position);
        returns how many were live."""
        from sqlalchemy import update

        table = self.table
        destroyed = 0
        with _key_table_shape(), self.engine.begin() as connection:
            for start in range(0, len(subjects), 500):
                result = connection.execute(
                    update(table)
                    .where(
                        table.c.subject.in_(subjects[start : start + 500]),
                        table.c.wrapped_key.is_not(None),
                    )
                    .values(wrapped_key=None, erased_position=position)
                )
                destroyed += result.rowcount or 0
        self.forget(subjects)
        return destroyed

    def forget(self, subjects: Iterable[str]) -> None:
        """Drop cached keys (after they were destroyed, here or elsewhere)."""
        with self._lock:
            for subject in subjects:
                self._cache.pop(subject, None)

    def forget_destroyed(self, subjects: Iterable[str]) -> None:
        """Drop the cached keys of ``subjects`` whose rows no longer hold one: destroyed by
        another process since this one cached them. A projection calls it before it opens a
        page's sealed data: with the stale key it would project the text of a subject erased
        elsewhere (and commit it, in the pages before the one holding the forget event). Only
        cached subjects are read (one not cached is read when it is opened anyway): one on the
        kept connection (a page of one write), several in batched queries (a sync's page
        names hundreds)."""
        cached = [subject for subject in set(subjects) if subject in self._cache]
        if len(cached) == 1:
            self.forget([] if self._is_live(cached[0]) else cached)
        elif cached:
            self.forget(set(cached) - set(self.live(cached)))


_DATA_KEY_SQL: Final = f"SELECT 1 FROM {TABLE} WHERE subject <> '{KEY_CHECK}' LIMIT 1"
"""Whether the key table holds a row other than its check row: a data key, live or destroyed."""


def _no_check_row() -> WrongMasterKeyError:
    """The refusal of a key table that holds data keys but no key-check row to prove a master
    key against: every key is refused, so nothing is read as erased and no key adopts it."""
    return WrongMasterKeyError(
        f"this log's key table ({TABLE}) holds data keys but not its key-check row "
        f"({KEY_CHECK!r} is missing or holds no key): it was altered or partly restored, so no "
        "master key can be proved against it. Nothing was read or written, and nothing was "
        "erased: restore that row from the backup the other rows came from"
    )


def _erased(cls: type[ErasedError], subject: str, position: int | None) -> ErasedError:
    where = (
        f"by the forget event at log position {position}"
        if position is not None
        else "(its key is not in the key table: erased by an interrupted erase, or the key "
        "table was restored from an older backup)"
    )
    if cls is SubjectErasedError:
        text = f"{subject} was erased {where}; nothing more can be stored for it"
    else:
        what = (
            "its input, decisions, output and error messages"
            if subject.startswith("execution:")
            else "its sealed text"
        )
        text = (
            f"{subject} was erased {where}: {what} can no longer be read (see `loom erase` "
            "and the forget log)"
        )
    return cls(text, subject=subject, position=position)


_keyrings: weakref.WeakKeyDictionary[Engine, Keyring] = weakref.WeakKeyDictionary()
"""The keyring opened on each database engine: what a read model that holds sealed text (the
corpus index) opens it with. A projection is given only the log's engine (``loom rebuild``
builds it from ``loom.projections``), and the keyring is the engine's, so it is found there."""


def keyring_for(engine: Engine) -> Keyring | None:
    """The keyring of the Loom that opened ``engine`` with encryption, or None (no master key
    was given: sealed text cannot be opened)."""
    return _keyrings.get(engine)


_sealed_after: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()
""":func:`sealed_after`'s answer per engine, once there is one: it never changes after."""


def sealed_after(engine: Engine) -> int | None:
    """The lowest ``created_position`` of the log's data keys (every sealed field is appended
    after its key was made, at the head then), or None while the log has no data key: read
    without the master key, from rows anyone with SQL access can edit.

    So it is never what makes a text clear. Deleting the first key's row, or raising the
    rows' positions, moved it past sealed texts, and the corpus index served their ciphertext
    as the document's text while ``loom verify`` read past them (ADR 0049, amended "sealed
    floor"): whether a stored text is sealed is decided by the text itself
    (:func:`sealed_subjects`). What this position still decides is safe whichever way a row
    edit moves it: a revision whose every text is shaped like a sealed one, stored at or
    before it, is never opened nor served (the erased state), since it is either an
    outsider's text shaped so on purpose or a sealed one whose rows were altered. Keys are
    never deleted and later ones are made at later positions, so an answer once found stands
    and is remembered per engine; None is not (it is read again, until the log has a data
    key)."""
    found = _sealed_after.get(engine)
    if found is not None:
        return found
    from sqlalchemy import text

    if not has_key_table(engine):  # the log was never encrypted
        return None
    # Any error here is raised: taken for "no key table", a lock or a lost connection would
    # have a sealed revision indexed as its ciphertext, for good.
    with engine.connect() as connection:
        lowest = connection.execute(
            text(f"SELECT min(created_position) FROM {TABLE} WHERE subject <> :check"),
            {"check": KEY_CHECK},
        ).scalar()
    if not isinstance(lowest, int) or isinstance(lowest, bool):
        return None
    _sealed_after[engine] = lowest
    return lowest


_switched_on: weakref.WeakSet[Engine] = weakref.WeakSet()
"""Engines of keyless Looms whose log was seen with a key table: encryption is never switched
off, so once seen it is never looked for again on that engine."""

_NO_KEY_TABLE_SQL: Final = {
    "sqlite": "SELECT NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)",
    "postgresql": "SELECT to_regclass(?) IS NULL",
}
"""A keyless append's precondition, by the log's dialect: the log has no key table
(encryption is off). PostgreSQL's ``to_regclass`` resolves the name on the search path, as
the keyring creates the table and as ``has_table`` looked for it."""


def write_keyring(log: EventLog, what: str) -> tuple[Keyring | None, Precondition | None]:
    """The keyring a write of personal data (``what``) to ``log`` seals under, and the
    :class:`Precondition` its append must be given: ``(keyring, None)`` for a Loom with the
    master key; ``(None, precondition)`` for a keyless one, whose append the log refuses with
    :class:`EncryptionOffError` (nothing written) if the log has a key table by then.

    Why refuse: a clear write into an encrypted log is personal data that erasure cannot
    reach, made silently by a process started without ``$LOOM_MASTER_KEY`` (ADR 0049,
    amended "keyless"). Why in the append's own transaction: it costs one statement in a
    transaction already open, where a read before the append cost a connection of its own,
    and it sees what the commit will, so encryption switched on by another process just
    before cannot let the batch land in clear (on PostgreSQL the append's server-side
    function reads it, in the same one statement). A log that cannot read a precondition
    is read here instead, with ``(None, None)`` when it has no key table. A positive answer
    is cached per engine: encryption is never switched off. Readers never call this."""
    engine = log.engine
    keyring = _keyrings.get(engine)
    if keyring is not None:
        return keyring, None
    if engine in _switched_on:
        raise _keyless_refusal(engine, what)
    if log.checks_preconditions:
        return None, Precondition(
            sql=_NO_KEY_TABLE_SQL[engine.dialect.name],
            parameter=TABLE,
            refusal=lambda: _keyless_refusal(engine, what),
        )
    if not has_key_table(engine):
        return None, None
    raise _keyless_refusal(engine, what)


def has_key_table(engine: Engine) -> bool:
    """Whether the log on ``engine`` has the key table: it was encrypted (encryption, once
    switched on, is never switched off), unless the table was dropped or renamed since, which
    only the log's own sealed data can tell (:func:`~loom_runtime.key_audit.verify_keys`).
    One read, for a Loom without a keyring."""
    # Read-only: on SQLite a plain connection begins IMMEDIATE, and waited for (then failed
    # on) any writer holding the lock, for a question a reader can answer.
    with engine.connect().execution_options(**{READ_ONLY: True}) as connection:
        return bool(engine.dialect.has_table(connection, TABLE))


def _keyless_refusal(engine: Engine, what: str) -> EncryptionOffError:
    """The refusal of a keyless write of ``what`` to ``engine``'s encrypted log, remembered."""
    _switched_on.add(engine)
    return EncryptionOffError(
        f"this log is encrypted (it has erasable data) but was opened without its master key, "
        f"so {what} would be stored in clear, beyond erasure's reach: open it with "
        "Loom(url, encryption=MasterKey.from_env()) and set $LOOM_MASTER_KEY; nothing was written"
    )


def seal_subject_text(aead: AESGCM, subject: str, text: str, place: str) -> str:
    """``text`` sealed under ``subject``'s key, stored as a string (``loom.sealed:{...}``).

    ``place`` is the associated data: where the text is stored (a document, its revision and
    field), so a ciphertext moved to another place does not open. For subjects other than an
    execution, whose events are not sealed by :class:`ExecutionSealer`."""
    return seal_text(aead, subject, text, place.encode())


def sealed_text_subject(text: str) -> str | None:
    """The subject whose key sealed ``text``, or None if ``text`` is clear."""
    sealed = sealed_of_text(text)
    return None if sealed is None else sealed.subject


def sealed_subjects(texts: Iterable[str]) -> frozenset[str] | None:
    """The subjects that sealed the texts one stored event holds in the fields it declares
    sealed, when every one of them is a sealed text; None when one is not, or there are none.

    Why the text itself decides, and all of an event's texts together: a sealed write seals
    every text of the event (a document's title and each passage), so an event mixing clear
    and sealed-looking text is an outsider's clear text (a document about loom quoting one),
    and no key row (anyone with SQL access can edit them, ADR 0049 amended "sealed floor")
    moves that line. What it cannot tell apart: an outsider's text written in clear whose every
    part is shaped exactly like a sealed text, on purpose; such a revision is read as sealed."""
    subjects = set()
    for text in texts:
        sealed = sealed_of_text(text)
        if sealed is None:
            return None
        subjects.add(sealed.subject)
    return frozenset(subjects) if subjects else None


def open_subject_text(keyring: Keyring | None, text: str, place: str) -> str:
    """``text`` opened if sealed (:func:`seal_subject_text`), as it is if clear.

    :class:`ErasedError` once its subject's key is destroyed; :class:`EncryptionOffError`
    without a keyring; :class:`LogCorruptError` if it was altered or moved from ``place``."""
    sealed = sealed_of_text(text)
    if sealed is None:
        return text
    return Opener(keyring)._open(sealed, place.encode()).decode()


# --- sealing and opening fields ------------------------------------------------------------


def is_sealed_raw(raw: msgspec.Raw | bytes | None) -> bool:
    """Whether stored JSON is a sealed field (cheap: a prefix test)."""
    return raw is not None and bytes(memoryview(raw)[: len(_ENVELOPE_HEAD)]) == _ENVELOPE_HEAD


def sealed_input(raw: msgspec.Raw | bytes | None, execution_id: UUID) -> bool:
    """Whether an execution is sealed, from its stored input (``Created.input``).

    Sealed or clear is decided once per execution, never per field: a sealed execution has
    every personal field sealed, a clear one none, whatever its values look like. Its input is
    sealed when it is a sealed field under the execution's *own* subject, which a clear input
    cannot be: a flow's input is keyed by parameter names (no dot, so never the mark), and the
    execution's id does not exist until after its input was given. The subject is in the
    stored bytes, so the chain covers this decision too.

    So an input that begins with the mark but is not this execution's sealed input was
    altered: :class:`LogCorruptError`. Read as clear, the execution's sealed fields would
    never be opened, nor would an erasure destroy its key ("recorded in clear").
    """
    if raw is None or not is_sealed_raw(raw):
        return False
    envelope = _input_envelope(raw)
    if envelope is None or envelope.sealed.subject != subject_of(execution_id):
        raise LogCorruptError(
            f"the input of execution {execution_id} holds loom's sealed mark but is not the "
            "execution's own sealed input: it was altered or moved; run `loom verify`"
        )
    return True


def seal_raw(aead: AESGCM, subject: str, raw: msgspec.Raw, ad: bytes) -> Any:
    """A JSON value sealed, as the struct the mapper stores: ``{"loom.sealed": {...}}``.

    A struct, not ``msgspec.Raw``: the log's redactor passes structs by (ciphertext holds no
    secret to find, and the value was redacted before it was sealed), where scanning the
    base64 of every sealed value cost more than sealing it.
    """
    nonce = os.urandom(NONCE_BYTES)
    return _Envelope(Sealed(subject, nonce, aead.encrypt(nonce, bytes(raw), ad)))


def seal_text(aead: AESGCM, subject: str, text: str, ad: bytes) -> str:
    nonce = os.urandom(NONCE_BYTES)
    return sealed_text(Sealed(subject, nonce, aead.encrypt(nonce, text.encode(), ad)))


def sealed_of_raw(raw: msgspec.Raw | bytes) -> Sealed | None:
    """The sealed field stored JSON holds, or None if it is clear."""
    if not is_sealed_raw(raw):
        return None
    try:
        return _envelope_decoder.decode(raw).sealed
    except UNREADABLE:
        return None


SEALED_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "loom.execution.Created": ("input", "overrides"),
    "loom.execution.DecisionRecorded": ("key", "value", "input", "meta"),
    "loom.execution.DecisionFailed": ("key", "input", "message", "meta"),
    "loom.execution.Reopened": ("dropped",),
    "loom.execution.Completed": ("output",),
    "loom.execution.Failed": ("message",),
}
"""The fields of each execution event that can hold personal data, by topic: the ones sealed.
A decision's ``meta`` too: a retried attempt's exception message is recorded there. A key
(and the keys a reopening dropped) only in an execution whose input says so
(:func:`sealed_names`)."""
_RAW: Final = 0
_TEXT: Final = 1
_STARTED: Final = 2
_NAME: Final = 3
_NAMES: Final = 4
_KINDS: Final = {"message": _TEXT, "key": _NAME, "dropped": _NAMES}
"""How each field of :data:`SEALED_FIELDS` is sealed: JSON (the rest), text, a decision key,
a tuple of decision keys; and the execution's input (:data:`_STARTED`, see :func:`_kind`)."""
_NAMES_AD: Final = ":names"
"""Added to the associated data of an execution's input when its keys are sealed."""
_NULLS_AD: Final = ":nulls"
"""Added after it when its ``null`` values and output are sealed."""
_NULL_SEALED: Final = frozenset({"value", "output"})
"""The fields sealed even when ``null`` in an execution that says so (:func:`input_flags`):
replaced by ``null``, they would be a replay's answer and outcome. A decision's input is not:
a forged ``null`` input only makes a replay diverge (the code asks with its real one), and
sealing it would double the AES-GCM calls of a decision without input."""


def _kind(topic: str, field: str) -> int:
    """How ``field`` of events of ``topic`` is sealed (:data:`_KINDS`)."""
    if topic == _CREATED and field == "input":
        return _STARTED
    return _KINDS.get(field, _RAW)


_FIELDS_OF_CLASS: dict[type, tuple[tuple[str, int], ...]] = {}
""":data:`SEALED_FIELDS` by event class, each with its kind (:data:`_KINDS`), filled as
classes are met (one lookup per event)."""


def _fields_of(cls: type) -> tuple[tuple[str, int], ...]:
    """The sealed fields of events of class ``cls``, kept in :data:`_FIELDS_OF_CLASS`."""
    topic = getattr(cls, "TOPIC", "")
    fields = SEALED_FIELDS.get(topic, ())
    return _FIELDS_OF_CLASS.setdefault(cls, tuple((name, _kind(topic, name)) for name in fields))


NAME_PREFIX: Final = "sealed:"
"""How a sealed decision key is stored: the prefix, then the base64 of its AES-SIV
ciphertext. Only :func:`sealed_names` decides that an execution's keys are sealed (a clear
key may begin so); in such an execution a key that does not open is a corrupt log."""
_NAMES_KEY_NONCE: Final = b"loom.names\x00\x00"
_NAMES_KEY_INFO: Final = b"loom.decision-key-names"


def names_cipher(aead: AESGCM) -> AESSIV:
    """The AES-SIV cipher of an execution's decision keys, derived from its data key.

    The keyring hands out a data key only as its AES-GCM cipher, so the AES-SIV key is one
    AES-GCM encryption of a constant under a fixed nonce and label (a pseudo-random function
    of the data key, as :func:`loom_memory.embedding_events.keyed_digest` derives its HMAC
    key, under a nonce of its own: the keystream is the nonce's, whatever the label). AES-SIV
    is deterministic: the same key of one execution seals to the same text, which is what
    lets its events name one decision before anything is opened; it reveals only that two
    stored keys of one execution are equal, which their events show anyway.
    """
    from cryptography.hazmat.primitives.ciphers.aead import AESSIV

    return AESSIV(aead.encrypt(_NAMES_KEY_NONCE, bytes(64), _NAMES_KEY_INFO)[:64])


class SealedName(str):
    """A decision key as stored sealed (:func:`seal_name`): checked for secrets in clear
    before it was sealed, so the log's mapper stores it unread (:func:`holds_no_text`)."""

    __slots__ = ()


class SealedNames(tuple[str, ...]):
    """The decision keys a reopening dropped, sealed, as :class:`SealedName`."""

    __slots__ = ()


holds_no_text(SealedName)
holds_no_text(SealedNames)


def seal_name(names: AESSIV, ad: list[bytes], name: str) -> str:
    """A decision key as a sealed execution stores it; ``ad``: ``[<its execution's id>]``,
    so a sealed key does not open in another execution (whose cipher differs anyway)."""
    return (
        NAME_PREFIX + binascii.b2a_base64(names.encrypt(name.encode(), ad), newline=False).decode()
    )


def open_name(names: AESSIV, ad: list[bytes], text: object) -> str:
    """A stored decision key of a sealed execution, opened; :class:`LogCorruptError` for one
    that is not sealed there (altered, moved from another execution, or written in clear)."""
    if isinstance(text, str) and text.startswith(NAME_PREFIX):
        encoded = text[len(NAME_PREFIX) :]
        try:
            sealed = binascii.a2b_base64(encoded, strict_mode=True)
            # Only the canonical text: another spelling of the same bytes would name the same
            # decision under another text before anything is opened.
            if binascii.b2a_base64(sealed, newline=False).decode() == encoded:
                return names.decrypt(sealed, ad).decode()
        except Exception:  # binascii.Error, InvalidTag, UnicodeDecodeError: all corrupt
            pass
    raise _unopened_name(ad[0].decode())


def _clear_field(stream: UUID | str, version: int | None, field: str) -> LogCorruptError:
    """A field of a sealed execution found in clear (or not a sealed value): every personal
    field of a sealed execution is stored sealed (or ``null``), so this one was put there by
    an edit, which needs no key. Read as it is, it would be a replay's answer as if recorded.
    ``version``: the event's, None where the state no longer says which."""
    name = field.partition(":")[0]  # the input's associated data may say ":names"
    event = "" if version is None else f" of event {version}"
    return LogCorruptError(
        f"the {name}{event} of sealed execution {stream} is not a sealed value: a sealed "
        "execution stores it sealed, so it was altered; run `loom verify`"
    )


def _unopened_name(stream: str) -> LogCorruptError:
    return LogCorruptError(
        f"a decision key of execution {stream} does not open where it is stored: it was "
        f"altered, moved or written in clear, or {_key_row_or_events(f'execution:{stream}')}"
    )


def _key_row_or_events(subject: str) -> str:
    """Where to look when a sealed value does not open with its subject's key: the events
    (which ``loom verify`` checks) or the key's row (which it cannot: a row swapped with
    another's unwraps, to the wrong key)."""
    return (
        f"the data key row of {subject} in {TABLE} was altered (swapped with another's, or "
        "restored from another backup); `loom verify` checks the events: if it passes, they "
        "are intact and the key row is the cause (restore the key table from a backup)"
    )


def holds_sealed_fields(topic: str, state: bytes, *, names: bool) -> bool:
    """Whether a stored event of a sealed execution holds a sealed field (what an erasure
    reports it destroys): every event of a topic of :data:`SEALED_FIELDS`, but a reopening
    only when it dropped keys and the execution's keys are sealed (``names``)."""
    if topic != _REOPENED:
        return topic in SEALED_FIELDS
    return names and bool(_fields_decoder.decode(state).get("dropped", _EMPTY) != _EMPTY)


def sealed_names(raw: msgspec.Raw | bytes | None) -> bool:
    """Whether an execution's decision keys are sealed, from its stored, sealed input
    (``Created.input``): set by the loom that sealed it, covered by the chain."""
    envelope = _input_envelope(raw)
    return envelope is not None and envelope.names


def input_flags(raw: msgspec.Raw | bytes | None) -> tuple[bool, bool]:
    """Whether an execution's keys (:func:`sealed_names`) and its ``null`` values and output
    are sealed, from one decode of its stored input (an input can be large, and every read of
    a sealed execution asks both)."""
    envelope = _input_envelope(raw)
    return (False, False) if envelope is None else (envelope.names, envelope.nulls)


def input_place(raw: msgspec.Raw | bytes | None) -> str:
    """The field name an execution's sealed input was sealed under, in its associated data:
    ``input`` and each flag its envelope carries, so an edit that drops one does not open."""
    return _place_of(_input_envelope(raw))


def _place_of(envelope: _Envelope | None) -> str:
    if envelope is None:
        return "input"
    return "input" + (_NAMES_AD if envelope.names else "") + (_NULLS_AD if envelope.nulls else "")


def _input_envelope(raw: msgspec.Raw | bytes | None) -> _Envelope | None:
    if raw is None or not is_sealed_raw(raw):
        return None
    try:
        return _envelope_decoder.decode(raw)
    except UNREADABLE:
        return None


_CREATED: Final = "loom.execution.Created"
_REOPENED: Final = "loom.execution.Reopened"
_EMPTY: Final = msgspec.Raw(b"[]")


class ExecutionSealer:
    """Seals one execution's events before they are stored, under its data key."""

    def __init__(
        self,
        keyring: Keyring,
        execution_id: UUID,
        redactor: Redactor | None = None,
        *,
        names: bool,
        nulls: bool,
    ) -> None:
        self.keyring = keyring
        self.execution_id = execution_id
        self.subject = subject_of(execution_id)
        self._stream = str(execution_id)  # formatted once: a UUID's str is a cost per event
        self.names = names
        """Whether its decision keys are sealed: yes for an execution this loom starts or
        imports, no for one an earlier loom sealed with its keys in clear (never both in one
        execution, so it says so in its input's envelope, :func:`sealed_names`)."""
        self.nulls = nulls
        """Whether its ``null`` values and output are sealed (:data:`_NULL_SEALED`): as
        ``names``, by what sealed the execution first (:func:`input_flags`)."""
        self._null_sealed = _NULL_SEALED if nulls else frozenset()
        self._names: tuple[AESGCM, AESSIV] | None = None  # the data key's, derived once
        self.redactor = redactor
        """The log's redactor: a message is redacted before it is sealed (values were
        redacted when they were encoded), since the log's own pass cannot see into it."""
        self.precondition = keyring.live_precondition(self.subject)
        """What an append of this execution needs to find: its key still live, read by the
        append's own transaction where the log can (``EventLog.checks_preconditions``)."""

    def seal_events(self, events: Sequence[Any], *, checked: bool = False) -> list[Any]:
        """Copies of ``events`` with their personal fields sealed.

        A destroyed key is :class:`SubjectErasedError` and nothing is stored. ``checked``:
        the log reads :attr:`precondition` in the append's own transaction, after its
        inserts, so the cached key is used as it is (if it was destroyed meanwhile, that read
        refuses the append); otherwise the key table is read again here, first.
        """
        if not events:
            return []
        keyring = self.keyring
        subject = self.subject
        # The cached key taken without :meth:`Keyring.write_key`'s call when there is one.
        aead = keyring._cache.get(subject) if checked else None
        if aead is None:
            aead = keyring.write_key(subject) if checked else keyring.live_key(subject)
        # Each decision is one event sealed on its own, so the work per field is inlined
        # here (the ``null`` test, the associated data, the envelope): the calls around one
        # AES-GCM seal of a 1 KB value cost more than the seal itself.
        encrypt = aead.encrypt
        urandom = os.urandom
        null = _NULL  # read here, not bound at import: the earlier form is simulated by tests
        null_sealed = self._null_sealed
        sealed = []
        for event in events:
            cls = type(event)
            fields = _FIELDS_OF_CLASS.get(cls)
            if fields is None:
                fields = _fields_of(cls)
            if not fields:
                sealed.append(event)
                continue
            # A shallow copy as the mapper reads it (its ``__dict__``): ``copy.copy`` goes
            # through ``__reduce_ex__``, several times the cost of the seal itself. The new
            # object's own ``__dict__`` filled in place: a dict copied and then set through
            # ``object.__setattr__`` cost a third more (~1.2 K instructions an event).
            copied = object.__new__(cls)
            state = copied.__dict__
            state.update(vars(event))
            stream = event.originator_id
            # The associated data's stream (a UUID's str is a cost, hence the execution's own,
            # formatted once per sealer) and version, formatted once per event.
            place = (
                f"{self._stream if stream is self.execution_id else stream}"
                f":{event.originator_version}:"
            )
            for name, kind in fields:
                value = state[name]
                # Only a 4-byte value can be ``null`` (a ``Raw`` compares by its bytes).
                if value is None or (len(value) == 4 and value == null and name not in null_sealed):
                    continue
                if kind:
                    if kind == _TEXT:
                        if self.redactor is not None:
                            value = self.redactor.value(value, path=f"{event.TOPIC}.{name}")
                        state[name] = seal_text(aead, subject, value, (place + name).encode())
                    elif kind == _STARTED:
                        state[name] = self._seal_input(aead, value, place + name)
                    elif self.names:
                        state[name] = self._seal_names(aead, value, kind, event.TOPIC, name)
                    continue
                nonce = urandom(NONCE_BYTES)
                # The value's own buffer (a ``msgspec.Raw`` the codec made; AES-GCM reads a
                # contiguous byte buffer): ``bytes(value)`` copied the 1 KB value first,
                # ~1.7 K instructions an event.
                state[name] = _Envelope(
                    Sealed(subject, nonce, encrypt(nonce, value, (place + name).encode()))
                )
            sealed.append(copied)
        return sealed

    def sealed_name(self, key: str) -> str:
        """``key`` as this execution stores a decision key: deterministic under its data key
        (a destroyed one is :class:`SubjectErasedError`). What names the sub-agents its
        decisions start (:func:`~loom_runtime.context.sub_agent`): a child's id is stored in
        clear, and one derived from the key in clear would confirm a guess of a sealed key."""
        return str(
            self._seal_names(self.keyring.live_key(self.subject), key, _NAME, _CREATED, "key")
        )

    def _seal_input(self, aead: AESGCM, value: Any, place: str) -> _Envelope:
        """The execution's input sealed at ``place`` (``stream:version:field``), saying whether
        its keys and nulls are sealed twice: in the envelope (:func:`sealed_names`,
        :func:`input_flags`) and in the associated data (:func:`input_place`). A loom from
        before keys were sealed would rebuild such an execution under the sealed texts, ask
        none of them, and compute every recorded decision again (a recorded request sent
        again); its input does not open there, so it refuses the execution instead. The same
        holds for an edit that removes a flag (one removing ``nulls`` would let a sealed value
        replaced by ``null`` read as recorded)."""
        nonce = os.urandom(NONCE_BYTES)
        flags = (_NAMES_AD if self.names else "") + (_NULLS_AD if self.nulls else "")
        ad = (place + flags).encode()
        sealed = Sealed(self.subject, nonce, aead.encrypt(nonce, value, ad))
        return _Envelope(sealed, self.names, self.nulls)

    def _seal_names(self, aead: AESGCM, value: Any, kind: int, topic: str, field: str) -> Any:
        """A decision key (``kind`` :data:`_NAME`) or a tuple of them, sealed.

        Checked for secrets in clear first, as the log's mapper checks an identifier in clear
        (ADR 0012): it stores the sealed text unread (:class:`SealedName`), since a pattern
        found in ciphertext means nothing, and one found by chance would refuse a valid key
        on every attempt (the sealing is deterministic)."""
        if self.redactor is not None:
            self.redactor.check_identifier(value, path=f"{topic}.{field}")
        cached = self._names
        if cached is None or cached[0] is not aead:  # a key unwrapped again: derived again
            cached = self._names = (aead, names_cipher(aead))
        names, ad = cached[1], [self._stream.encode()]
        if kind == _NAME:
            return SealedName(seal_name(names, ad, value))
        return SealedNames(seal_name(names, ad, name) for name in value)

    def seal_rows(self, rows: Sequence[Row], *, position: int) -> list[Row]:
        """Copies of stored rows in clear (an imported bundle's) with their personal fields
        sealed, under this execution's key (made now, at log ``position``, if it has none):
        what :meth:`seal_events` does to events, done to their stored JSON."""
        aead = self.keyring.ensure(self.subject, position=position)
        return [
            msgspec.structs.replace(row, state=self._seal_state(aead, row))
            if row.topic in SEALED_FIELDS
            else row
            for row in rows
        ]

    def _seal_state(self, aead: AESGCM, row: Row) -> bytes:
        fields = _fields_decoder.decode(row.state)
        for name in SEALED_FIELDS[row.topic]:
            raw = fields.get(name)
            kind = _kind(row.topic, name)
            # The input is sealed even when ``null`` (loom never starts one so, a bundle may):
            # it is what says the execution is sealed (:func:`sealed_input`), and clear, the
            # execution would read as clear with its other fields sealed, never opened.
            if raw is None or (
                _is_null(raw) and kind != _STARTED and name not in self._null_sealed
            ):
                continue
            ad = _aad(row.stream, row.version, name)
            if kind >= _NAME and not self.names:
                continue
            if kind == _TEXT:
                text = msgspec.json.decode(raw, type=str)
                stored = msgspec.json.encode(seal_text(aead, self.subject, text, ad))
            elif kind == _NAME:
                key = msgspec.json.decode(raw, type=str)
                sealed_key = self._seal_names(aead, key, kind, row.topic, name)
                stored = msgspec.json.encode(str(sealed_key))
            elif kind == _NAMES:
                keys = msgspec.json.decode(raw, type=tuple[str, ...])
                stored = msgspec.json.encode(self._seal_names(aead, keys, kind, row.topic, name))
            elif kind == _STARTED:
                stored = _envelope_encoder.encode(self._seal_input(aead, bytes(raw), ad.decode()))
            else:
                stored = _envelope_encoder.encode(seal_raw(aead, self.subject, raw, ad))
            fields[name] = msgspec.Raw(stored)
        return msgspec.json.encode(fields)


_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


_NULL = msgspec.Raw(b"null")
"""A field that is JSON ``null`` (a decision without input, a flow returning None): left in
clear, since it holds nothing personal and its absence is visible anyway; half the AES-GCM
calls of a decision without input. A sealed execution's fields are each sealed or ``null``
(anything else in clear is a corrupt log), so a clear ``null`` among them reads as it is, and
one sealed by an earlier loom opens. A ``Raw`` equals another by its bytes."""


def _is_null(value: object) -> bool:
    """Whether a field is JSON ``null`` (:data:`_NULL`)."""
    return isinstance(value, msgspec.Raw) and value == _NULL


class Opener:
    """Opens the sealed fields of stored executions with a log's keyring (None: no
    encryption, and a sealed field is :class:`EncryptionOffError`, or :class:`ErasedError`
    when ``erased_at`` finds its subject in the forget log, which is stored in clear)."""

    def __init__(
        self, keyring: Keyring | None, *, erased_at: Callable[[str], int | None] | None = None
    ) -> None:
        self.keyring = keyring
        self.erased_at = erased_at

    def _aead(self, sealed: Sealed) -> AESGCM:
        if self.keyring is None:
            # Erased is the answer whatever the key: asking for the key would send whoever
            # checks an erasure after a key that reveals only that (ADR 0049, "keyless").
            position = None if self.erased_at is None else self.erased_at(sealed.subject)
            if position is not None:
                raise _erased(ErasedError, sealed.subject, position)
            raise EncryptionOffError(
                f"{sealed.subject} is sealed and the log was opened without "
                "encryption: open it with Loom(url, encryption=MasterKey.from_env("
                "'LOOM_MASTER_KEY')) (the CLI reads $LOOM_MASTER_KEY)"
            )
        return self.keyring.key(sealed.subject)

    def raw(
        self,
        raw: msgspec.Raw,
        stream: UUID | str,
        version: int,
        field: str,
        *,
        null_ok: bool = True,
    ) -> msgspec.Raw:
        """A JSON field of a sealed execution, opened: ``null`` as it is where ``null_ok``
        (:func:`input_flags`), anything else in clear is :func:`_clear_field` (a sealed
        execution stores every other value sealed)."""
        sealed = sealed_of_raw(raw)
        if sealed is None:
            if null_ok and bytes(raw) == b"null":
                return raw
            raise _clear_field(stream, version, field)
        return msgspec.Raw(self._open(sealed, _aad(stream, version, field)))

    def _raw_field(
        self, raw: msgspec.Raw, stream: str, version: int, field: str, null_ok: bool
    ) -> msgspec.Raw:
        """:meth:`raw` for the replay's loop: the same answer, the checks inlined, and the
        cached key taken without :meth:`_aead`'s call when there is one."""
        # The bytes copied whole and ``startswith``: a third of the cost of slicing a
        # memoryview (~0.1 against ~0.3 µs, twice per decision), and the decode reads the copy.
        data = bytes(raw)
        if not data.startswith(_ENVELOPE_HEAD):
            if null_ok and data == b"null":
                return raw
            raise _clear_field(stream, version, field)
        try:
            sealed = _envelope_decoder.decode(data).sealed
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _clear_field(stream, version, field) from None
        keyring = self.keyring
        aead = None if keyring is None else keyring._cache.get(sealed.subject)
        ad = f"{stream}:{version}:{field}".encode()  # :func:`_aad`, without its call
        if aead is None:
            return msgspec.Raw(self._open(sealed, ad))
        try:
            return msgspec.Raw(aead.decrypt(sealed.nonce, sealed.ciphertext, ad))
        except Exception:  # InvalidTag: _open raises it typed
            return msgspec.Raw(self._open(sealed, ad))

    def text(self, text: str, stream: UUID | str, version: int, field: str) -> str:
        """A message of a sealed execution, opened; one in clear is :func:`_clear_field`."""
        sealed = sealed_of_text(text)
        if sealed is None:
            raise _clear_field(stream, version, field)
        return self._open(sealed, _aad(stream, version, field)).decode()

    def _open(self, sealed: Sealed, ad: bytes) -> bytes:
        aead = self._aead(sealed)  # ErasedError, EncryptionOffError: raised as they are
        try:
            return bytes(aead.decrypt(sealed.nonce, sealed.ciphertext, ad))
        except Exception as exc:  # InvalidTag, imported only when it is raised
            from cryptography.exceptions import InvalidTag

            if not isinstance(exc, InvalidTag):
                raise
            raise LogCorruptError(
                f"a sealed field of {sealed.subject} does not open where it is stored: it was "
                f"altered or moved, or {_key_row_or_events(sealed.subject)}"
            ) from exc

    def execution(self, execution: Execution) -> Execution:
        """``execution`` with its sealed fields opened in place (unchanged when clear).

        Sealed or clear is decided by its input: an execution started with encryption on has
        every personal field sealed; one started before has none.
        """
        if not sealed_input(execution.input, execution.id):
            return execution
        self._check_live(execution.id)
        stream = str(execution.id)  # formatted once: a UUID's str is a cost per field
        envelope = cast(_Envelope, _input_envelope(execution.input))  # sealed_input: decodes
        names = self._names(execution.id) if envelope.names else None
        null_ok = not envelope.nulls
        execution.input = msgspec.Raw(
            self._open(envelope.sealed, _aad(stream, 1, _place_of(envelope)))
        )
        if execution.overrides is not None:  # a fork's, sealed with its start (version 1)
            execution.overrides = self.raw(execution.overrides, stream, 1, "overrides")
        decisions = execution.decisions
        versions = execution.decision_versions
        # Keys sealed: the two maps are rebuilt under the opened keys, in recorded order.
        opened, opened_versions = (decisions, versions) if names is None else ({}, {})
        name_ad = [stream.encode()]
        field = self._raw_field
        replace = msgspec.structs.replace
        null = _NULL
        # One pass with the per-field work inlined: a replay opens every decision, and the
        # calls around each AES-GCM open cost more than the open itself.
        for key, decision in decisions.items():
            version = versions[key]
            name = key if names is None else open_name(names, name_ad, key)
            value, input_ = decision.value, decision.input
            opened_value = (
                value if value is None else field(value, stream, version, "value", null_ok)
            )
            # Most decisions have no input (``null``, never sealed): no call for it (a ``Raw``
            # compares by its bytes, and only a 4-byte one can be ``null``).
            opened_input = (
                input_
                if len(input_) == 4 and input_ == null
                else field(input_, stream, version, "input", True)
            )
            meta = decision.meta  # most decisions have none
            opened_meta = (
                meta
                # sealed before keys were, maybe before meta was (ADR 0049, "erasurerev")
                if meta is None or (names is None and not is_sealed_raw(meta))
                else field(meta, stream, version, "meta", True)
            )
            if decision.message is not None:
                message = self.text(decision.message, stream, version, "message")
                decision = replace(
                    decision,
                    key=name,
                    input=opened_input,
                    value=opened_value,
                    message=message,
                    meta=opened_meta,
                )
            elif (
                name is not key
                or opened_value is not value
                or opened_input is not input_
                or opened_meta is not meta
            ):
                decision = replace(
                    decision, key=name, input=opened_input, value=opened_value, meta=opened_meta
                )
            opened[name] = decision  # in place when the keys are clear (an existing key)
            opened_versions[name] = version
        execution.decisions, execution.decision_versions = opened, opened_versions
        if execution.output is not None:
            execution.output = self.raw(
                execution.output, stream, execution.version, "output", null_ok=null_ok
            )
        if execution.error is not None:
            error_type, message = execution.error
            execution.error = (error_type, self.text(message, stream, execution.version, "message"))
        execution.reopenings = [
            msgspec.structs.replace(
                r,
                message=self._any_text(r.message, stream),
                dropped=r.dropped
                if names is None
                else tuple(open_name(names, name_ad, key) for key in r.dropped),
            )
            for r in execution.reopenings
        ]
        return execution

    def _names(self, execution_id: UUID) -> AESSIV:
        """The cipher of a sealed execution's decision keys (:func:`names_cipher`)."""
        subject = subject_of(execution_id)
        aead = self._aead(Sealed(subject, b"", b""))  # EncryptionOffError without a keyring
        return names_cipher(aead)

    def _check_live(self, execution_id: UUID) -> None:
        """Refuse (:class:`ErasedError`) a sealed execution whose key was destroyed, even if
        this Loom still caches it (:meth:`Keyring.read_key`); without a keyring the first
        sealed field refuses instead (:class:`EncryptionOffError`)."""
        if self.keyring is not None:
            self.keyring.read_key(subject_of(execution_id))

    def _any_text(self, text: str, stream: UUID | str) -> str:
        """A reopened failure's message: sealed at a version the state no longer holds, so
        shown as sealed (its text is in the ``Failed`` event, opened by an export); one in
        clear is :func:`_clear_field`, as a message read where it is stored would be."""
        if sealed_of_text(text) is None:
            raise _clear_field(stream, None, "reopened failure's message")
        return "(sealed)"

    def rows(self, rows: Sequence[Row]) -> list[Row]:
        """Stored rows with their sealed fields opened (what an import compares a bundle to)."""
        return [
            msgspec.structs.replace(row, state=state)
            for row, state in zip(rows, self.states(rows), strict=True)
        ]

    def states(self, rows: Sequence[Row | Record]) -> list[bytes]:
        """One execution's stored events' JSON, oldest first, sealed fields opened if the
        execution is sealed (:func:`sealed_input` of its first event): what a bundle carries.
        A clear execution's fields are never opened, whatever they look like."""
        first = rows[0] if rows else None
        if first is None or first.topic != _CREATED:
            return [row.state for row in rows]
        stored_input = _fields_decoder.decode(first.state).get("input")
        if not sealed_input(stored_input, first.stream):
            return [row.state for row in rows]
        self._check_live(first.stream)
        envelope = _input_envelope(stored_input)  # decoded once: sealed_input said it does
        names = self._names(first.stream) if envelope and envelope.names else None
        null_sealed = _NULL_SEALED if envelope and envelope.nulls else frozenset()
        input_at = _place_of(envelope)
        return [self._state(row, names, null_sealed=null_sealed, input_at=input_at) for row in rows]

    def _state(
        self,
        row: Row | Record,
        names: AESSIV | None,
        *,
        null_sealed: frozenset[str],
        input_at: str,
    ) -> bytes:
        """A stored event's JSON with its sealed fields opened: what a bundle carries.
        ``names``: the execution's keys are sealed, with this cipher; ``null_sealed``: the
        fields it seals even when ``null``; ``input_at``: where its input was sealed."""
        topic, stream, version, state = row.topic, row.stream, row.version, row.state
        fields = SEALED_FIELDS.get(topic)
        if not fields:
            return state
        decoded = msgspec.json.decode(state)
        opened = False  # nothing opened: the stored bytes as they are, not encoded again
        for name in fields:
            value = decoded.get(name)
            kind = _kind(topic, name)
            place = input_at if kind == _STARTED else name  # where it was sealed
            if kind >= _NAME:
                if names is None or value is None:
                    continue
                opened = True
                ad = [str(stream).encode()]
                if kind == _NAME:
                    decoded[name] = open_name(names, ad, value)
                elif isinstance(value, list):
                    decoded[name] = [open_name(names, ad, key) for key in value]
                else:
                    raise _unopened_name(str(stream))
                continue
            if value is None:
                if name in null_sealed and name in decoded:
                    raise _clear_field(stream, version, name)  # a sealed one replaced
                continue  # ``null`` (or absent) is stored in clear
            if name == "meta" and names is None and not (isinstance(value, dict) and MARK in value):
                continue  # sealed before keys were, maybe before meta was ("erasurerev")
            opened = True
            if kind == _TEXT:
                if not isinstance(value, str):
                    raise _clear_field(stream, version, name)
                decoded[name] = self.text(value, stream, version, name)
            else:
                raw = self.raw(msgspec.Raw(msgspec.json.encode(value)), stream, version, place)
                decoded[name] = msgspec.json.decode(raw)
        return msgspec.json.encode(decoded) if opened else state
