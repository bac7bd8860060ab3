"""The one error hierarchy of loom.

Every error loom raises on purpose derives from :class:`LoomError`, so a caller can catch
"anything loom refused" in one clause. Each package (runtime, memory, knowledge) adds its own
subclasses under this root; each message says what happened *and* what to do next. Driver
errors are translated with ``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations

import re
from typing import ClassVar, Self


class LoomError(Exception):
    """Root of every error loom raises on purpose."""


class ConfigurationError(LoomError):
    """The log or a store was configured with a value loom cannot use (bad URL, option)."""


class DatabaseUnavailableError(LoomError):
    """The log's database cannot be opened or connected to: a PostgreSQL database missing,
    refused or unreachable, or a SQLite file the driver cannot open.

    Checked once when the log is opened, so the cause is the driver's own ("database ... does
    not exist", "password authentication failed") instead of a connection pool's timeout.
    ``database`` names it (a SQLite log's path); the cause is on ``__cause__``.
    """

    def __init__(self, message: str, *, database: str) -> None:
        super().__init__(message)
        self.database = database


class DatabaseBusyError(DatabaseUnavailableError):
    """Another connection held the SQLite log's lock for the whole lock timeout while the log
    was being opened: another process creating it, writing to it, or holding a transaction
    open. The file is not damaged; opening it again later, or waiting longer, will do."""

    def __init__(self, *, database: str, lock_timeout: float) -> None:
        super().__init__(
            f"the SQLite log at {database} stayed locked by another connection for the whole "
            f"lock timeout ({lock_timeout:g} s): another process is creating it, writing to "
            "it or holding a transaction open. Try again, or wait longer with "
            "Loom(..., lock_timeout=SECONDS)",
            database=database,
        )
        self.lock_timeout = lock_timeout


class LoomClosedError(LoomError):
    """A Loom, or its log, was used after ``close()`` (or after its ``with`` block): open a
    new one. Nothing is written by the refused call."""


class NotSerialisableError(LoomError, TypeError):
    """A value that must go into the log cannot be encoded; ``path`` names the offending field.

    A decision's refusal is stored as its failure and rebuilt from its message on replay,
    where ``except NotSerialisableError`` must catch it as it did live: so ``path`` has a
    default (empty: not recorded)."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class ReplayDivergence(LoomError):
    """Base of every way a replay can differ from the recorded execution.

    A replay tells its own findings from what the flow raised by identity (the instances it
    collected), never by this class: a recording can name any class as a failure's type.
    """


class DecisionTypeChangedError(ReplayDivergence, TypeError):
    """A recorded decision's value does not decode as the type the code now declares for it
    (``ctx.decide(..., type=)``, a ``@tool``'s return annotation, an SDK result): the type
    changed since the recording, or the row was edited. Raised where the flow asks for it; a
    replay reports it whether or not the flow catches it (ADR 0002, amended "caught
    findings")."""

    def __init__(self, *, key: str, type: str, problem: str) -> None:
        super().__init__(
            f"the recorded value of decision {key!r} does not decode as {type} ({problem}): "
            "the type the code declares for it changed since the execution was recorded, or "
            "the log row was altered. Keep the type able to read old values (a new field "
            "with a default), or record the execution again"
        )
        self.key = key
        self.type = type
        self.problem = problem


class DecisionArgumentError(LoomError, TypeError):
    """An argument of ``ctx.decide`` (or of a recorded call built on it) other than its key is
    of the wrong kind: a ``compute`` that is not callable, a ``type`` values cannot be decoded
    as, a ``retry`` that is no ``Backoff``, a ``retry_on`` that is not callable. ``parameter``
    names it. Stored as the decision's failure, as a compute's own error is."""

    def __init__(self, message: str, *, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter

    @classmethod
    def replayed(cls, message: str) -> Self:
        """The refusal as a replay or resume raises it for the decision that recorded it: its
        recorded message, and the ``parameter`` that message begins with (empty if it does
        not read as this class writes it), so a flow that caught it takes the same path."""
        found = re.match(r"(compute|type|retry_on|retry)\b", message)
        return cls(message, parameter=found[1] if found else "")


class FlowNotFoundError(LoomError, KeyError):
    """No flow is registered under this name in this process."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class FlowAlreadyRegisteredError(LoomError):
    """A second flow was registered under a name that is taken (names key stored executions)."""


class FlowInputError(LoomError, TypeError):
    """The input given to a flow does not match its signature."""


class ExecutionNotFoundError(LoomError, KeyError):
    """No execution with this id is in the log."""

    def __str__(self) -> str:
        return str(self.args[0])


class StreamConflictError(LoomError):
    """Another writer appended to this event stream first; this append was refused whole.

    Nothing was written: re-read the stream's state and decide again.
    """


class WriteContentionError(StreamConflictError):
    """A write kept losing to other writers, or finding the database busy, for its whole time
    budget (``Loom(write_retry=RetryPolicy(budget=...))``, ADR 0019). Nothing was written.

    ``attempts`` and ``seconds`` say how hard it tried.
    """

    def __init__(self, *, what: str, attempts: int, seconds: float, budget: float) -> None:
        super().__init__(
            f"{what} was refused {attempts} times in {seconds:.1f} s because other writers kept "
            "appending to it or the database stayed busy; nothing was written. Run it again "
            "when fewer writers share it, or let writes wait longer with "
            f"Loom(..., write_retry=RetryPolicy(budget=...)) (the budget is {budget:g} s)"
        )
        self.attempts = attempts
        self.seconds = seconds


class ExecutionConflictError(StreamConflictError):
    """Another worker appended to this execution first; this worker's append was refused.

    Nothing was duplicated: the log kept exactly one of the two competing events.
    """


class ExecutionOwnedError(LoomError):
    """The execution is being run by a live worker: resuming it here would compute its open
    decision a second time and stop that worker at its next append. Wait for it, or pass
    ``force=True`` (``loom resume --force``) when that worker is known to be gone."""


class RecoveryLimitError(LoomError):
    """Recorded as the failure of an execution that recovery claimed
    :data:`~loom_runtime.recovery.MAX_CLAIMS` times without it finishing (a flow that kills
    the process that runs it): set aside, so that it no longer takes down each recoverer
    before the executions behind it. Reopen it once the cause is fixed
    (``loom resume ID --retry-failed``)."""


class LogWriteError(LoomError):
    """The log failed while storing an execution's event (the database, or the event's encoding).

    The writer's in-memory execution is put back to what the log holds (or, when the log
    cannot be read, this worker appends nothing more to it), so a later event can never leave
    a gap in the stream's versions. The cause is on ``__cause__``.
    """


class ExecutionFinishedError(LoomError):
    """The execution already failed, and resuming it was not asked to reopen the failure
    (``resume(id, retry_failed=True)``, ADR 0026)."""


class DecisionAfterEndError(LoomError):
    """A decision was asked, or its value handed in, after its execution had ended: a task or
    thread the flow started outlived it and still used its ``ctx`` (or a client recording
    through it). Nothing was stored: an execution's events end with its end, so an export or
    replay made now sees what one made later will. Await what the flow starts before it
    returns."""

    def __init__(self, *, execution_id: object, key: str) -> None:
        super().__init__(
            f"decision {key!r} came after execution {execution_id} had ended; nothing was "
            "stored. A task or thread the flow started outlived it: await or join it before "
            "the flow returns"
        )
        self.key = key


class SubflowOutsideDecisionError(LoomError):
    """A flow was started (``loom.run``/``arun``) by another flow's own code, outside any of
    its decisions. Nothing in the parent would record it: every replay and resume of the
    parent would run the child again live, its model calls included, and append a new
    execution. Start it inside ``ctx.decide`` (a sub-agent as a tool): the child records into
    its own execution and the parent records its result, which a replay answers (ADR 0002)."""

    def __init__(self, *, flow: str, parent: object) -> None:
        super().__init__(
            f"flow {flow!r} was started from the body of execution {parent} outside any "
            "decision: a replay or resume of it would start it again live. Start it inside "
            f"ctx.decide (e.g. ctx.decide('{flow}', lambda: loom.run('{flow}', ...).output))"
        )
        self.flow = flow


class ForkPointError(LoomError, ValueError):
    """``fork(..., at=...)`` names no point of the parent execution: a key it never recorded,
    or a number of decisions outside 0..the number it recorded (ADR 0027). Nothing was written."""


class PositionError(LoomError, ValueError):
    """A log position given (``upto=``) that is not one: positions are ints from 0."""


class OverrideTypeError(LoomError, TypeError):
    """A fork's override does not decode as the type the flow asks its decision with (ADR
    0027): the value given to ``fork(..., override=)`` is at fault, not the log. The fork is
    recorded as failed with this error; fork again with a value of that type."""

    def __init__(self, *, key: str, type: str, problem: str) -> None:
        super().__init__(
            f"the override of decision {key!r} given to the fork does not decode as {type} "
            f"({problem}): fork again with a value of that type"
        )
        self.key = key


class LogCorruptError(LoomError):
    """What the log (or a bundle) holds is not what loom wrote: an event with a topic outside
    loom's own event classes, a state that does not decode, a stream out of order, a database
    file that is not one. Nothing it names was imported; ``loom verify`` says where it broke."""


class RecordedComputeError(LoomError):
    """Raised inside a replay where the recorded run's ``compute`` raised.

    ``error_type`` and ``message`` are the original exception's, as recorded. A recorded error
    is rebuilt as its own class only when that class is already loaded (nothing a log names is
    imported); otherwise, and when the class cannot be built from a message, it is this.
    """

    def __init__(self, *, key: str, error_type: str, message: str) -> None:
        super().__init__(f"recorded failure of decision {key!r}: {error_type}: {message}")
        self.key = key
        self.error_type = error_type
        self.message = message


class RecordedResultError(LoomError, ValueError):
    """A recorded value cannot be rebuilt as the SDK object it was recorded from: the type it
    names is not one loom rebuilds, or the installed SDK no longer validates its JSON.

    Recorded data is untrusted input (a bundle, a row), so this names the decision instead of
    letting a validation error escape from deep inside the SDK.
    """

    def __init__(self, *, key: str, reason: str) -> None:
        super().__init__(
            f"the recorded result of decision {key!r} cannot be rebuilt: {reason}; replay it "
            "with the SDK version it was recorded with, or record the execution again"
        )
        self.key = key
        self.reason = reason


class UnrecordedDecisionError(ReplayDivergence):
    """The flow asked for a decision key that the recording never made."""

    def __init__(self, *, key: str, nearest: list[str]) -> None:
        hint = f"; nearest recorded keys: {', '.join(map(repr, nearest))}" if nearest else ""
        super().__init__(
            f"decision {key!r} was never recorded{hint}. The flow asks for something the "
            "recorded run did not: the code changed, or the key is built from live data."
        )
        self.key = key
        self.nearest = nearest


class CancellationNotRepeatedError(ReplayDivergence):
    """A call the recorded run cancelled (a timeout around it) was cancelled by nothing in
    the replay within its bound: the code took another path (a timeout removed or made
    longer). The flow received the recorded cancellation as a failure; a flow that caught it
    would otherwise hide the change (ADR 0026, amended "caught")."""

    def __init__(self, *, key: str, waited: float) -> None:
        super().__init__(
            f"decision {key!r} was cancelled in the recorded run (a timeout around it), but "
            f"nothing cancelled it in the replay within {waited:g} s: the code no longer "
            "times it out as it did; the recorded cancellation was raised into the flow"
        )
        self.key = key
        self.waited = waited


class DecisionInputChangedError(ReplayDivergence):
    """A recorded decision was asked for again with a different ``input``."""

    def __init__(self, *, key: str, diff: str) -> None:
        super().__init__(f"decision {key!r} was recorded with a different input:\n{diff}")
        self.key = key
        self.diff = diff


class DecisionKindChangedError(ReplayDivergence):
    """A recorded decision was asked for again with a different ``kind``: what audits and a
    counterfactual's ``live=`` read it as changed (a model call now called a retrieval)."""

    def __init__(self, *, key: str, recorded: str | None, asked: str | None) -> None:
        super().__init__(
            f"decision {key!r} was recorded as kind {recorded!r} and is now asked as kind {asked!r}"
        )
        self.key = key
        self.recorded = recorded
        self.asked = asked


class UnattributedCallError(ReplayDivergence):
    """Calls loom records (a request through a recording transport or wrapped client, a
    ``@tool``, an MCP call) were made while the replay ran, from a thread or task without
    the flow's context: not answered from the recording, so they went live.

    A thread does not inherit the flow's context (a ``ContextVar``); the recording made the
    same calls unrecorded and said so in a warning. The check is process-wide: a call of
    another thread of the process that is no part of the flow is counted too."""

    def __init__(self, *, calls: list[str], count: int) -> None:
        more = f" and {count - len(calls)} more" if count > len(calls) else ""
        super().__init__(
            f"{count} call(s) loom records were made while the replay ran, from a thread or "
            f"task without the flow's context, and went live: {', '.join(calls)}{more}. "
            "Start the flow's threads with its context: pool.submit(contextvars."
            "copy_context().run, fn, ...) (asyncio.to_thread copies it already)"
        )
        self.calls = calls
        self.count = count


class UnusedDecisionsError(ReplayDivergence):
    """The recording holds decisions that the replay never asked for."""

    def __init__(self, *, keys: list[str]) -> None:
        super().__init__(
            f"{len(keys)} recorded decision(s) never asked for by the replay: "
            + ", ".join(map(repr, keys))
        )
        self.keys = keys


class OutputChangedError(ReplayDivergence):
    """The replay returned a different output from the recorded one."""

    def __init__(self, *, diff: str) -> None:
        super().__init__(f"the flow's output changed:\n{diff}")
        self.diff = diff


_LINE_BREAKS = str.maketrans(
    {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def cause_of(error: BaseException) -> str:
    """The first line of ``error``'s message that says something (its type's name when
    none does): what a one-line report of a failure shows, where the rest may quote data
    or a traceback."""
    lines = (line for line in str(error).splitlines() if line.strip())
    return next(lines, type(error).__name__)


def _one_line(text: str) -> str:
    """``text`` with what starts a line (``\\n``, ``\\r``, U+2028, U+2029) escaped, and a
    backslash doubled so an escape can be told from the text: quoted inside a message, it
    prints on that message's line."""
    return text.translate(_LINE_BREAKS)


class OutcomeChangedError(ReplayDivergence):
    """The recorded run and the replay ended differently (returned vs raised, or another error)."""

    def __init__(self, *, recorded: str, replayed: str) -> None:
        # Each on one line: a recorded failure's message is the recording's word, and its
        # line breaks printed lines of their own ("... replayed identically").
        super().__init__(
            f"the recorded run {_one_line(recorded)}, but the replay {_one_line(replayed)}"
        )
        self.recorded = recorded
        self.replayed = replayed


class DecisionKeyError(LoomError, ValueError):
    """A decision key must be a non-empty string that can be stored (no lone surrogate): it is
    how a replay finds the recorded value. Also raised for a ``kind`` that is not a str or None."""


class BundleError(LoomError):
    """A bundle file cannot be used; the subclass says why."""


class BundleNotFoundError(BundleError):
    """The path names no readable bundle file (missing, a directory, or not readable)."""


class BundleFormatError(BundleError):
    """The file is not a loom bundle, or its events do not rebuild an execution."""


class BundleTruncatedError(BundleError):
    """The file ends (or breaks) before the bundle does: an incomplete copy or write."""


class BundleTamperedError(BundleError):
    """The bundle's content does not match its sha256: it was altered after export."""


class BundleVersionError(BundleError):
    """The bundle was written by a newer format than this loom reads."""


class BundleTooLargeError(BundleError):
    """The file is larger than the bundle size cap; it was refused before being read whole."""


class BundleConflictError(BundleError):
    """The target log already holds this execution with different events."""


class IntegrityUnsupportedError(LoomError):
    """The log's persistence keeps no hash chain, so it cannot be verified (ADR 0011)."""


class ReadModelCheckError(LoomError):
    """The log's read models could not be checked against a rebuild: the copies they are
    checked in could not be written (the disk full, the folder not writable)."""


class ReadModelCheckUnsupportedError(ReadModelCheckError):
    """The log's read models cannot be checked against a rebuild here: they are checked in a
    copy of a SQLite database file, and a PostgreSQL log has none."""


class SecretRefusedError(LoomError, ValueError):
    """A value matched a secret pattern and the redactor refuses instead of redacting.

    The value was not written (a decision's refused value is stored as the decision's
    failure, this error's message, so a replay raises it where the live run did).
    ``pattern`` names the matching pattern and ``path`` where the value was; the message
    never contains the value itself.
    """

    def __init__(self, *, pattern: str, path: str) -> None:
        super().__init__(
            f"{path} contains what looks like a secret ({pattern}); the log's redactor is set to "
            "refuse, so the value was not written. Remove the secret from the value, or configure "
            "Redactor(mode='redact') to store it with a [REDACTED:...] marker instead"
        )
        self.pattern = pattern
        self.path = path

    @classmethod
    def replayed(cls, message: str) -> Self:
        """The refusal as a replay raises it for the decision that recorded it (ADR 0026,
        amended "refusals"): its recorded message, and the ``path`` and ``pattern`` that
        message begins with (empty if it does not read as this class writes it)."""
        error = cls.__new__(cls)
        LoomError.__init__(error, message)
        # Split at fixed texts (the last of the one before the pattern, the first after it),
        # never matched by a pattern: a recorded message is untrusted and unbounded, and a
        # regular expression with two open groups took minutes on a crafted megabyte.
        before, after = cls._WRITTEN
        path, opened, rest = message.rpartition(before)  # the path may hold the text too
        pattern, closed, _ = rest.partition(after)
        error.path, error.pattern = (path, pattern) if opened and closed else ("", "")
        return error

    _WRITTEN: ClassVar[tuple[str, str]] = (" contains what looks like a secret (", "); the log's ")
    """The texts around the pattern in the message, after the path (:meth:`replayed`)."""


class RedactedKeysCollideError(SecretRefusedError):
    """Two keys of one mapping hold secrets that redact to the same marker.

    A key is redacted as a value is (ADR 0012), but a mapping cannot hold two equal keys: one
    entry would silently replace the other. So the value is refused instead, in any mode, and
    nothing is written. ``path`` names the mapping; the message never holds a key.
    """

    def __init__(self, *, pattern: str, path: str) -> None:
        LoomError.__init__(
            self,
            f"{path} has keys that hold secrets ({pattern}) and would be the same key once "
            "redacted, so one entry would be lost; the value was not written. Keep secrets out of "
            "mapping keys (use them as values, or key by a name that holds no secret)",
        )
        self.pattern = pattern
        self.path = path

    _WRITTEN: ClassVar[tuple[str, str]] = (" has keys that hold secrets (", ") and would be ")


class SecretIdentifierError(SecretRefusedError):
    """An identifier (an id, key, name, scope or source) holds what looks like a secret.

    Identifiers are never redacted, in any mode: a rewritten id no longer names what it named
    (a document written under one id and revised under another), so it is refused instead,
    before anything is written. ``path`` names the field; the message never holds the value.
    Each package raises its own subclass, under its own error root.
    """

    def __init__(self, *, pattern: str, path: str) -> None:
        LoomError.__init__(
            self,
            f"{path} looks like it holds a secret ({pattern}); identifiers are stored as given "
            "and never redacted, so nothing was written. Name it without the credential (a URL "
            "without its password, a key without a token); a credential that must be recorded "
            "belongs in a value, where it is redacted",
        )
        self.pattern = pattern
        self.path = path

    _WRITTEN: ClassVar[tuple[str, str]] = (" looks like it holds a secret (", "); identifiers ")


class MissingExtraError(ConfigurationError, ModuleNotFoundError):
    """A configured backend or a used feature needs an optional package that is not installed.

    ``extra`` names the loom extra that installs it (``postgres``, ``sqlalchemy``, ``http``);
    ``needed_by`` says what needs it. A ``ModuleNotFoundError`` too, whose ``name`` is the
    missing module: ``except ImportError`` and ``pytest.importorskip`` around an import of an
    optional part catch it.
    """

    def __init__(self, *, extra: str, missing: str, needed_by: str = "this log's backend") -> None:
        super().__init__(
            f"{needed_by} needs {missing!r}, which is not installed: "
            f"pip install 'loom-replay[{extra}]'"
        )
        self.extra = extra
        self.name = missing


# --- Recording SDK clients (loom_runtime.wrap, ADR 0025) ------------------------------------


class RecordedValueError(LogCorruptError):
    """A recorded decision's value is not what its kind stores (an ``http`` or ``model``
    decision whose value is not a recorded response): the row or bundle was altered, or
    written by something other than loom's recording. Nothing was sent in its place."""

    def __init__(self, *, key: str, expected: str, problem: str) -> None:
        super().__init__(
            f"decision {key!r} holds a value that is not {expected} ({problem}): the log row or "
            "bundle was altered or written by another program. Check the log with `loom verify`, "
            "and record the execution again to replace it"
        )
        self.key = key
        self.expected = expected
        self.problem = problem


class ReadPastRecordingError(ReplayDivergence):
    """A recorded response was read further than the recorded run read it.

    The live caller closed the response early, so the recording holds only what it read
    (``complete: false``) and the rest was never received: code that now reads on asks for
    data no log holds, and a replay (or resume) cannot make it up. Raised into the flow at
    the point it reads past the recorded part, so a replay reports the changed outcome.

    ``waited`` is set when the recorded run's read was cancelled there (a timeout around it):
    this run waited that many seconds at the point and nothing cancelled its read. A replay
    reports it whether or not the flow catches it (ADR 0002, amended "caught findings")."""

    def __init__(self, *, key: str, waited: float | None = None) -> None:
        if waited is None:
            why = "was recorded only as far as the recorded run read it before closing it"
        else:
            why = (
                "was recorded only as far as the recorded run read it before its read was "
                f"cancelled (a timeout around it); nothing cancelled this run's read within "
                f"{waited:g} s"
            )
        super().__init__(
            f"the response of decision {key!r} {why}, and this run reads past that point: the "
            "code reads more of the response than the recorded run did. Record the execution "
            "again to replay a longer read"
        )
        self.key = key
        self.waited = waited


class ModelResponseError(LoomError):
    """A provider's answer to a model decision cannot be stored as its answer: a success whose
    body is not the JSON it announced, or a stream that ended inside an event. Recorded as the
    decision's failure (a replay raises this again, with the same message), never half
    written. The message names the decision and what was received."""


class UnsupportedClientError(LoomError, TypeError):
    """``wrap()`` was given an object it does not know how to record; the message lists what
    it accepts (and how to record anything else)."""


# --- Who and what an execution ran for (loom_runtime.labels, ADR 0034) ----------------------


class LabelError(LoomError, ValueError):
    """An execution label (``tenant``, ``user``, ``session`` or a tag) cannot be recorded: not
    a string, empty, too long, with surrounding spaces or with a control or invisible
    character. ``label`` names which one; nothing was written."""

    def __init__(self, message: str, *, label: str) -> None:
        super().__init__(message)
        self.label = label


# --- Erasure by crypto-shredding (loom_runtime.sealing, loom_runtime.erasure, ADR 0049) -------


class ErasureError(LoomError):
    """Root of erasure's refusals: a log that cannot erase, a key that cannot be used."""


class EncryptionOffError(ErasureError, ConfigurationError):
    """``erase`` was asked of a log opened without encryption (nothing it holds is sealed, so
    nothing can be erased), a sealed execution was read without the master key, or personal
    data (an execution, an import, a memory entry, a document) was to be written without it
    into an encrypted log, where it would be in clear and beyond erasure's reach. The message
    says how to switch encryption on; nothing was written."""


class WrongMasterKeyError(ErasureError, ConfigurationError):
    """The master key given does not open this log's key table (its key-check row): a wrong
    or lost key, or a table holding data keys that lost its check row, against which no key
    can be proved. Refused when the log is opened, so sealed data is never read as erased."""


class ErasedError(ErasureError):
    """The execution's data key was destroyed by an erasure: its sealed fields (input,
    decisions, output, error messages) can no longer be read, by replay or anyone.
    ``subject`` is what was erased; ``position`` is where the forget event is in the log."""

    def __init__(self, message: str, *, subject: str, position: int | None) -> None:
        super().__init__(message)
        self.subject = subject
        self.position = position


class SubjectErasedError(ErasedError):
    """An append to an execution whose key was destroyed: nothing is stored under a key that
    no longer exists, so the write is refused and nothing was written."""


class RetentionPolicyError(ErasureError, ValueError):
    """A retention age that is not one (``loom retain --older-than 90 days``, ``0d``, a
    negative timedelta): the message shows the form to write. Nothing was written."""


class ErasureSubjectError(ErasureError, KeyError):
    """``erase`` named nothing it can erase: an unknown execution, a user or tenant with no
    sealed executions, or a kind of subject not erasable yet (documents, memory keys).
    Nothing was written."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
