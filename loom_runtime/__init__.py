"""loom_runtime: the log, flows, ``ctx.decide``, replay and projections.

Every nondeterministic result of a flow is recorded with ``ctx.decide(key, compute)`` into one
append-only event log, so an execution can be replayed later, anywhere, to the same output.
"""

from loom_runtime.context import AsyncFlowContext, Decide, FlowContext
from loom_runtime.errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    DecisionInputChangedError,
    DecisionKeyError,
    ExecutionConflictError,
    ExecutionFinishedError,
    ExecutionNotFoundError,
    FlowAlreadyRegisteredError,
    FlowInputError,
    FlowNotFoundError,
    IntegrityUnsupportedError,
    LoomError,
    MissingExtraError,
    NotSerialisableError,
    OutcomeChangedError,
    OutputChangedError,
    RecordedComputeError,
    ReplayDivergence,
    SecretIdentifierError,
    SecretRefusedError,
    StreamConflictError,
    UnrecordedDecisionError,
    UnusedDecisionsError,
    WriteContentionError,
)
from loom_runtime.execution import Decision, Execution
from loom_runtime.flow import FlowRegistry
from loom_runtime.integrity import Anchor, Tampering, VerifyReport, verify_log
from loom_runtime.log import EventLog, LogSettings, open_log
from loom_runtime.loom import Loom, Run
from loom_runtime.redaction import Redactor, SecretPattern
from loom_runtime.replay import ReplayResult
from loom_runtime.retry import RetryPolicy
from loom_runtime.stream import LogEvent

__all__ = [
    "Anchor",
    "AsyncFlowContext",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "Decide",
    "Decision",
    "DecisionInputChangedError",
    "DecisionKeyError",
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
    "IntegrityUnsupportedError",
    "LogEvent",
    "LogSettings",
    "Loom",
    "LoomError",
    "MissingExtraError",
    "NotSerialisableError",
    "OutcomeChangedError",
    "OutputChangedError",
    "RecordedComputeError",
    "Redactor",
    "ReplayDivergence",
    "ReplayResult",
    "RetryPolicy",
    "Run",
    "SecretIdentifierError",
    "SecretPattern",
    "SecretRefusedError",
    "StreamConflictError",
    "Tampering",
    "UnrecordedDecisionError",
    "UnusedDecisionsError",
    "VerifyReport",
    "WriteContentionError",
    "open_log",
    "verify_log",
]
