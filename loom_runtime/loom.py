"""``Loom``: the public entry point that registers flows, runs, resumes and replays them.

It is deliberately a thin facade: the log is :class:`~loom_runtime.log.EventLog`, an execution
is the :class:`~loom_runtime.execution.Execution` aggregate, decisions are answered by the
sources in :mod:`loom_runtime.context` and :mod:`loom_runtime.replay`. Sync flows are called
directly; ``async def`` flows run on ``asyncio.run`` from the sync methods, or are awaited from
``arun``/``aresume``/``areplay`` inside a running loop.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from uuid import UUID, uuid4

import msgspec
from eventsourcing.application import AggregateNotFoundError

from loom_runtime import codec
from loom_runtime.context import AsyncFlowContext, DecisionSource, FlowContext, Recorder, save
from loom_runtime.errors import (
    ConfigurationError,
    ExecutionConflictError,
    ExecutionFinishedError,
    ExecutionNotFoundError,
    FlowAlreadyRegisteredError,
    FlowNotFoundError,
    NotSerialisableError,
)
from loom_runtime.execution import Execution
from loom_runtime.flow import Flow
from loom_runtime.log import EventLog, LogSettings, Persistence, Synchronous
from loom_runtime.replay import Replayer, ReplayResult, compare_outcome

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """A finished execution: its id (for replay and audit) and its output."""

    execution_id: UUID
    flow: str
    output: Any
    log_position: int


class Loom:
    """One log (a SQLite file by default) and the flows that record into it."""

    def __init__(
        self,
        url: str | None = None,
        *,
        persistence: Persistence = "builtin",
        sqlite_synchronous: Synchronous = "NORMAL",
        lock_timeout: float = 5.0,
        pool_size: int = 5,
    ) -> None:
        """Open (creating if needed) the log at ``url``, else ``LOOM_DB_URL``, else ./loom.db."""
        self.log = EventLog(
            LogSettings(
                url,
                persistence=persistence,
                sqlite_synchronous=sqlite_synchronous,
                lock_timeout=lock_timeout,
                pool_size=pool_size,
            )
        )
        self._flows: dict[str, Flow] = {}

    # -- flows -------------------------------------------------------------------------------

    def flow(self, name: str | None = None, *, version: str | None = None) -> Callable[[F], F]:
        """Register a flow (``def`` or ``async def``) under ``name`` (default: its __name__).

        ``version`` labels the code that recorded an execution (default: a hash of the flow's
        source); a replay reports both labels. The function is returned unchanged.
        """

        def register(fn: F) -> F:
            flow_name = name or fn.__name__
            if flow_name in self._flows:
                raise FlowAlreadyRegisteredError(
                    f"a flow named {flow_name!r} is already registered; flow names key stored "
                    "executions, so each must be unique (pass another name to @loom.flow)"
                )
            self._flows[flow_name] = Flow(fn, name=flow_name, version=version)
            return fn

        return register

    def get_flow(self, name: str) -> Flow:
        try:
            return self._flows[name]
        except KeyError:
            known = ", ".join(sorted(self._flows)) or "none"
            raise FlowNotFoundError(
                f"no flow named {name!r} is registered in this process (registered: {known}); "
                "import the module that defines it before running or replaying"
            ) from None

    # -- running -----------------------------------------------------------------------------

    def run(self, flow: str, /, **arguments: Any) -> Run:
        """Run ``flow`` durably: every decision is in the log before the flow sees it."""
        definition, execution, kwargs = self._start(flow, arguments)
        return self._drive(definition, execution, kwargs)

    async def arun(self, flow: str, /, **arguments: Any) -> Run:
        """As :meth:`run`, from inside a running event loop."""
        definition, execution, kwargs = self._start(flow, arguments)
        return await self._adrive(definition, execution, kwargs)

    def resume(self, execution_id: UUID | str) -> Run:
        """Finish an interrupted execution: recorded decisions from the log, the rest live.

        A completed execution is returned as recorded (it completes exactly once). Two workers
        resuming the same execution race on the stream version: the loser gets
        :class:`ExecutionConflictError` and appends nothing.
        """
        execution = self._claim(execution_id)
        if execution.output is not None:
            return self._finished_run(execution)
        definition = self.get_flow(execution.flow)
        return self._drive(definition, execution, definition.decode_input(execution.input))

    async def aresume(self, execution_id: UUID | str) -> Run:
        """As :meth:`resume`, from inside a running event loop."""
        execution = self._claim(execution_id)
        if execution.output is not None:
            return self._finished_run(execution)
        definition = self.get_flow(execution.flow)
        return await self._adrive(definition, execution, definition.decode_input(execution.input))

    # -- replaying ---------------------------------------------------------------------------

    def replay(
        self, execution_id: UUID | str, *, live: frozenset[str] | set[str] = frozenset()
    ) -> ReplayResult:
        """Re-run the current code with every decision answered from the log; append nothing."""
        execution, definition, replayer, ctx, kwargs = self._prepare_replay(execution_id, live)
        output: msgspec.Raw | None = None
        error: BaseException | None = None
        try:
            result = (
                _run_coroutine(definition.fn(ctx, **kwargs), definition.name)
                if definition.is_async
                else definition.fn(ctx, **kwargs)
            )
            output = codec.encode(result, path="output")
        except Exception as exc:
            error = exc
        return self._replay_result(execution, definition, replayer, output, error)

    async def areplay(
        self, execution_id: UUID | str, *, live: frozenset[str] | set[str] = frozenset()
    ) -> ReplayResult:
        """As :meth:`replay`, from inside a running event loop."""
        execution, definition, replayer, ctx, kwargs = self._prepare_replay(execution_id, live)
        output: msgspec.Raw | None = None
        error: BaseException | None = None
        try:
            result = definition.fn(ctx, **kwargs)
            if definition.is_async:
                result = await result
            output = codec.encode(result, path="output")
        except Exception as exc:
            error = exc
        return self._replay_result(execution, definition, replayer, output, error)

    # -- reading -----------------------------------------------------------------------------

    def execution(self, execution_id: UUID | str) -> Execution:
        """The execution's current state, rebuilt from its events."""
        try:
            return self.log.repository.get(_as_uuid(execution_id))
        except AggregateNotFoundError:
            raise ExecutionNotFoundError(
                f"no execution {execution_id} in the log at {self.log.settings.url!r}"
            ) from None

    def close(self) -> None:
        """Release the log's connections."""
        self.log.close()

    def __enter__(self) -> Loom:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _start(
        self, flow: str, arguments: dict[str, Any]
    ) -> tuple[Flow, Execution, dict[str, Any]]:
        definition = self.get_flow(flow)
        raw_input, kwargs = definition.bind(arguments)
        execution = Execution.start(
            id=uuid4(),
            flow=definition.name,
            code_version=definition.version,
            input=raw_input,
            log_position=self.log.position,
        )
        save(self.log, execution)
        return definition, execution, kwargs

    def _claim(self, execution_id: UUID | str) -> Execution:
        execution = self.execution(execution_id)
        if execution.error is not None:
            error_type, message = execution.error
            raise ExecutionFinishedError(
                f"execution {execution.id} failed ({error_type}: {message}); a failed "
                "execution is final: run the flow again for a new one"
            )
        if execution.output is None:
            execution.claim(worker=f"{socket.gethostname()}:{os.getpid()}")
            save(self.log, execution)
        return execution

    def _context(
        self, definition: Flow, execution: Execution, source: DecisionSource
    ) -> FlowContext | AsyncFlowContext:
        cls = AsyncFlowContext if definition.is_async else FlowContext
        return cls(source, execution_id=execution.id, flow=definition.name)

    def _drive(self, definition: Flow, execution: Execution, kwargs: dict[str, Any]) -> Run:
        ctx = self._context(definition, execution, Recorder(self.log, execution))
        try:
            result = (
                _run_coroutine(definition.fn(ctx, **kwargs), definition.name)
                if definition.is_async
                else definition.fn(ctx, **kwargs)
            )
        except Exception as exc:
            self._fail(execution, exc)
            raise
        return self._complete(definition, execution, result)

    async def _adrive(self, definition: Flow, execution: Execution, kwargs: dict[str, Any]) -> Run:
        ctx = self._context(definition, execution, Recorder(self.log, execution))
        try:
            result = definition.fn(ctx, **kwargs)
            if definition.is_async:
                result = await result
        except Exception as exc:
            self._fail(execution, exc)
            raise
        return self._complete(definition, execution, result)

    def _complete(self, definition: Flow, execution: Execution, result: object) -> Run:
        try:
            raw, output = codec.round_trip(result, path="output", type=definition.output_type)
        except NotSerialisableError as exc:
            self._fail(execution, exc)
            raise
        execution.complete(output=raw)
        save(self.log, execution)
        return Run(
            execution_id=execution.id,
            flow=execution.flow,
            output=output,
            log_position=execution.log_position,
        )

    def _fail(self, execution: Execution, error: Exception) -> None:
        if isinstance(error, ExecutionConflictError):
            return  # another worker owns the execution now; it records the outcome
        execution.fail(error=error)
        save(self.log, execution)
        error.add_note(f"loom: recorded as the failure of execution {execution.id}")

    def _finished_run(self, execution: Execution) -> Run:
        definition = self._flows.get(execution.flow)
        output_type = definition.output_type if definition else Any
        return Run(
            execution_id=execution.id,
            flow=execution.flow,
            output=codec.decode(execution.output or b"null", type=output_type),
            log_position=execution.log_position,
        )

    def _prepare_replay(
        self, execution_id: UUID | str, live: frozenset[str] | set[str]
    ) -> tuple[Execution, Flow, Replayer, FlowContext | AsyncFlowContext, dict[str, Any]]:
        execution = self.execution(execution_id)
        definition = self.get_flow(execution.flow)
        replayer = Replayer(execution.decisions, live=frozenset(live))
        ctx = self._context(definition, execution, replayer)
        return execution, definition, replayer, ctx, definition.decode_input(execution.input)

    def _replay_result(
        self,
        execution: Execution,
        definition: Flow,
        replayer: Replayer,
        output: msgspec.Raw | None,
        error: BaseException | None,
    ) -> ReplayResult:
        divergences = replayer.divergences + compare_outcome(
            execution, replayer, output=output, error=error
        )
        return ReplayResult(
            execution_id=execution.id,
            flow=execution.flow,
            recorded_code_version=execution.code_version,
            code_version=definition.version,
            divergences=tuple(divergences),
            output=None if output is None else codec.decode(output, type=definition.output_type),
            live_values=replayer.live_values,
        )


def _run_coroutine(coroutine: Coroutine[Any, Any, T], flow: str) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise ConfigurationError(
        f"flow {flow!r} is async and an event loop is already running: "
        "use `await loom.arun(...)` / `aresume` / `areplay` instead"
    )


def _as_uuid(execution_id: UUID | str) -> UUID:
    if isinstance(execution_id, UUID):
        return execution_id
    try:
        return UUID(str(execution_id))
    except ValueError:
        raise ExecutionNotFoundError(
            f"{execution_id!r} is not an execution id (expected a UUID such as "
            "'3f2b…' printed by `loom run`)"
        ) from None
