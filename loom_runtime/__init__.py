"""loom_runtime: the log, flows, ``ctx.decide``, replay and projections.

Every nondeterministic result of a flow is recorded with ``ctx.decide(key, compute)`` into one
append-only event log, so an execution can be replayed later, anywhere, to the same output.

The names here are the runtime's whole public surface, for applications and for the packages
built on it (``loom_memory``, ``loom_knowledge``): the log port and its events
(:class:`EventLog`, :class:`LogEvent`, :func:`stream_id`), tracked projections
(:class:`SQLProjection`, :func:`catch_up`, :func:`rebuild`), the one storage rule
(:func:`text_problem`, :func:`json_problem`) and the value codec (:mod:`loom_runtime.codec`).
:func:`transport` and :func:`async_transport` record the HTTP requests of any httpx client
made inside a flow (the ``http`` extra); :func:`wrap` records an OpenAI or Anthropic client's
calls as ``model`` decisions and an MCP session's tool calls and resource reads (the ``mcp``
extra); :func:`tool` records the calls of an agent's tool functions.
Every name is imported on first use, so importing the package costs almost nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom_runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from loom_runtime.backoff import Attempt, Backoff, transient
    from loom_runtime.codec import MAX_DATA_DEPTH, too_deep
    from loom_runtime.context import (
        AsyncFlowContext,
        Decide,
        FlowContext,
        OpenDecision,
        current_context,
    )
    from loom_runtime.erasure import ErasedSubject, ErasureReport, ForgetEntry
    from loom_runtime.errors import (
        ConfigurationError,
        DatabaseUnavailableError,
        DecisionInputChangedError,
        DecisionKeyError,
        EncryptionOffError,
        ErasedError,
        ErasureError,
        ErasureSubjectError,
        ExecutionConflictError,
        ExecutionFinishedError,
        ExecutionNotFoundError,
        FlowAlreadyRegisteredError,
        FlowInputError,
        FlowNotFoundError,
        ForkPointError,
        IntegrityUnsupportedError,
        LabelError,
        LoomError,
        MissingExtraError,
        ModelResponseError,
        NotSerialisableError,
        OutcomeChangedError,
        OutputChangedError,
        RecordedComputeError,
        RecordedResultError,
        RecordedValueError,
        ReplayDivergence,
        RetentionPolicyError,
        SecretIdentifierError,
        SecretRefusedError,
        StreamConflictError,
        SubjectErasedError,
        UnrecordedDecisionError,
        UnsupportedClientError,
        UnusedDecisionsError,
        WriteContentionError,
        WrongMasterKeyError,
    )
    from loom_runtime.execution import Decision, Execution, Forgotten
    from loom_runtime.flow import FlowRegistry
    from loom_runtime.http_transport import async_transport, transport
    from loom_runtime.integrity import Anchor, Tampering, VerifyReport, verify_log
    from loom_runtime.labels import Labels
    from loom_runtime.log import (
        READ_ONLY,
        DomainEventProtocol,
        EventLog,
        LogSettings,
        Precondition,
        open_log,
    )
    from loom_runtime.loom import Loom, Run
    from loom_runtime.mcp_session import RecordedSession, wrap_session
    from loom_runtime.projection import (
        SQLProjection,
        catch_up,
        rebuild,
        tracked_names,
        tracking_table,
    )
    from loom_runtime.recorded_tool import tool
    from loom_runtime.redaction import Redactor, SecretPattern
    from loom_runtime.replay import ReplayResult
    from loom_runtime.retention import parse_age
    from loom_runtime.retry import RetryPolicy
    from loom_runtime.schema import serialise_ddl
    from loom_runtime.sealing import (
        Keyring,
        KeyWrapper,
        MasterKey,
        Sealed,
        keyring_for,
        open_subject_text,
        seal_subject_text,
        sealed_text_subject,
        write_keyring,
    )
    from loom_runtime.storable import json_problem, text_problem
    from loom_runtime.stream import Change, LogEvent, stream_id
    from loom_runtime.subjects import pair_subject, subject_pair
    from loom_runtime.timeline import position_at
    from loom_runtime.wrap import wrap

__all__ = [
    "MAX_DATA_DEPTH",
    "READ_ONLY",
    "Anchor",
    "AsyncFlowContext",
    "Attempt",
    "Backoff",
    "Change",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "Decide",
    "Decision",
    "DecisionInputChangedError",
    "DecisionKeyError",
    "DomainEventProtocol",
    "EncryptionOffError",
    "ErasedError",
    "ErasedSubject",
    "ErasureError",
    "ErasureReport",
    "ErasureSubjectError",
    "EventLog",
    "Execution",
    "ExecutionConflictError",
    "ExecutionFinishedError",
    "ExecutionNotFoundError",
    "FlowAlreadyRegisteredError",
    "FlowContext",
    "FlowInputError",
    "FlowNotFoundError",
    "FlowRegistry",
    "ForgetEntry",
    "Forgotten",
    "ForkPointError",
    "IntegrityUnsupportedError",
    "KeyWrapper",
    "Keyring",
    "LabelError",
    "Labels",
    "LogEvent",
    "LogSettings",
    "Loom",
    "LoomError",
    "MasterKey",
    "MissingExtraError",
    "ModelResponseError",
    "NotSerialisableError",
    "OpenDecision",
    "OutcomeChangedError",
    "OutputChangedError",
    "Precondition",
    "RecordedComputeError",
    "RecordedResultError",
    "RecordedSession",
    "RecordedValueError",
    "Redactor",
    "ReplayDivergence",
    "ReplayResult",
    "RetentionPolicyError",
    "RetryPolicy",
    "Run",
    "SQLProjection",
    "Sealed",
    "SecretIdentifierError",
    "SecretPattern",
    "SecretRefusedError",
    "StreamConflictError",
    "SubjectErasedError",
    "Tampering",
    "UnrecordedDecisionError",
    "UnsupportedClientError",
    "UnusedDecisionsError",
    "VerifyReport",
    "WriteContentionError",
    "WrongMasterKeyError",
    "async_transport",
    "catch_up",
    "current_context",
    "json_problem",
    "keyring_for",
    "lazy_exports",
    "open_log",
    "open_subject_text",
    "pair_subject",
    "parse_age",
    "position_at",
    "rebuild",
    "seal_subject_text",
    "sealed_text_subject",
    "serialise_ddl",
    "stream_id",
    "subject_pair",
    "text_problem",
    "too_deep",
    "tool",
    "tracked_names",
    "tracking_table",
    "transient",
    "transport",
    "verify_log",
    "wrap",
    "wrap_session",
    "write_keyring",
]

# Where each public name lives, imported on first use (PEP 562) so that importing the
# package costs nothing until a name is used.
_EXPORTS = {
    "MAX_DATA_DEPTH": "loom_runtime.codec",
    "too_deep": "loom_runtime.codec",
    "SQLProjection": "loom_runtime.projection",
    "catch_up": "loom_runtime.projection",
    "rebuild": "loom_runtime.projection",
    "tracked_names": "loom_runtime.projection",
    "tracking_table": "loom_runtime.projection",
    "serialise_ddl": "loom_runtime.schema",
    "json_problem": "loom_runtime.storable",
    "text_problem": "loom_runtime.storable",
    "Change": "loom_runtime.stream",
    "stream_id": "loom_runtime.stream",
    "position_at": "loom_runtime.timeline",
    "DomainEventProtocol": "loom_runtime.log",
    "Anchor": "loom_runtime.integrity",
    "AsyncFlowContext": "loom_runtime.context",
    "ConfigurationError": "loom_runtime.errors",
    "ModelResponseError": "loom_runtime.errors",
    "RecordedValueError": "loom_runtime.errors",
    "UnsupportedClientError": "loom_runtime.errors",
    "DatabaseUnavailableError": "loom_runtime.errors",
    "Decide": "loom_runtime.context",
    "Decision": "loom_runtime.execution",
    "DecisionInputChangedError": "loom_runtime.errors",
    "DecisionKeyError": "loom_runtime.errors",
    "EventLog": "loom_runtime.log",
    "Execution": "loom_runtime.execution",
    "ExecutionConflictError": "loom_runtime.errors",
    "ExecutionFinishedError": "loom_runtime.errors",
    "ExecutionNotFoundError": "loom_runtime.errors",
    "FlowAlreadyRegisteredError": "loom_runtime.errors",
    "FlowContext": "loom_runtime.context",
    "FlowInputError": "loom_runtime.errors",
    "FlowNotFoundError": "loom_runtime.errors",
    "FlowRegistry": "loom_runtime.flow",
    "IntegrityUnsupportedError": "loom_runtime.errors",
    "LabelError": "loom_runtime.errors",
    "Labels": "loom_runtime.labels",
    "LogEvent": "loom_runtime.stream",
    "LogSettings": "loom_runtime.log",
    "Precondition": "loom_runtime.log",
    "READ_ONLY": "loom_runtime.log",
    "Loom": "loom_runtime.loom",
    "LoomError": "loom_runtime.errors",
    "MissingExtraError": "loom_runtime.errors",
    "NotSerialisableError": "loom_runtime.errors",
    "OutcomeChangedError": "loom_runtime.errors",
    "OutputChangedError": "loom_runtime.errors",
    "RecordedComputeError": "loom_runtime.errors",
    "Redactor": "loom_runtime.redaction",
    "ReplayDivergence": "loom_runtime.errors",
    "ReplayResult": "loom_runtime.replay",
    "RetryPolicy": "loom_runtime.retry",
    "Run": "loom_runtime.loom",
    "SecretIdentifierError": "loom_runtime.errors",
    "SecretPattern": "loom_runtime.redaction",
    "SecretRefusedError": "loom_runtime.errors",
    "StreamConflictError": "loom_runtime.errors",
    "Tampering": "loom_runtime.integrity",
    "UnrecordedDecisionError": "loom_runtime.errors",
    "UnusedDecisionsError": "loom_runtime.errors",
    "VerifyReport": "loom_runtime.integrity",
    "WriteContentionError": "loom_runtime.errors",
    "open_log": "loom_runtime.log",
    "OpenDecision": "loom_runtime.context",
    "current_context": "loom_runtime.context",
    "transport": "loom_runtime.http_transport",
    "async_transport": "loom_runtime.http_transport",
    "wrap": "loom_runtime.wrap",
    "verify_log": "loom_runtime.integrity",
    "tool": "loom_runtime.recorded_tool",
    "RecordedResultError": "loom_runtime.errors",
    "RecordedSession": "loom_runtime.mcp_session",
    "wrap_session": "loom_runtime.mcp_session",
    "Attempt": "loom_runtime.backoff",
    "Backoff": "loom_runtime.backoff",
    "transient": "loom_runtime.backoff",
    "ForkPointError": "loom_runtime.errors",
    "EncryptionOffError": "loom_runtime.errors",
    "ErasedError": "loom_runtime.errors",
    "ErasureError": "loom_runtime.errors",
    "ErasureSubjectError": "loom_runtime.errors",
    "SubjectErasedError": "loom_runtime.errors",
    "WrongMasterKeyError": "loom_runtime.errors",
    "ErasedSubject": "loom_runtime.erasure",
    "ErasureReport": "loom_runtime.erasure",
    "ForgetEntry": "loom_runtime.erasure",
    "RetentionPolicyError": "loom_runtime.errors",
    "parse_age": "loom_runtime.retention",
    "KeyWrapper": "loom_runtime.sealing",
    "MasterKey": "loom_runtime.sealing",
    "Sealed": "loom_runtime.sealing",
    "Keyring": "loom_runtime.sealing",
    "keyring_for": "loom_runtime.sealing",
    "open_subject_text": "loom_runtime.sealing",
    "seal_subject_text": "loom_runtime.sealing",
    "sealed_text_subject": "loom_runtime.sealing",
    "write_keyring": "loom_runtime.sealing",
    "pair_subject": "loom_runtime.subjects",
    "subject_pair": "loom_runtime.subjects",
    "Forgotten": "loom_runtime.execution",
}

if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all __getattr__
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
