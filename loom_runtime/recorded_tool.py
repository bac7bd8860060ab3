"""``@tool``: a function whose result is a recorded decision when a flow calls it.

An agent's tools (a search, a ticket lookup, a calculator) are nondeterministic inputs to the
model's next turn, so a replay must answer them from the log exactly as ``ctx.decide`` does;
but tool functions are written once and called by frameworks (LangGraph, an MCP server, a
hand-written loop) that know nothing of ``ctx``. So the decorator reads the running flow from
:func:`~loom_runtime.context.recorder` and, inside a flow, makes each call a decision
(ADR 0028):

* kind ``"tool"``, key ``tool:<name>`` (the function's ``__name__`` unless ``name=`` is
  given), numbered ``#2``, ``#3`` ... on repeated calls like any key;
* input: the call's arguments bound to their parameter names, defaults applied, so a replay
  in which the model asks the same tool something else reports a
  :class:`~loom_runtime.errors.DecisionInputChangedError` with the diff of the arguments;
* value: the result, decoded as the return annotation when msgspec can decode that type
  (a Struct comes back a Struct), as plain JSON otherwise. The live caller gets the decoded
  round trip too, so it sees what a replay will see;
* a raised exception is recorded as the decision's failure and raised again on replay.

Outside a flow the function is called as is: the decorator costs one ``ContextVar`` read.
So it is inside one of the flow's decisions computed live (a tool called by another tool, or
by a ``decide``'s compute): the outer call is the record, and a replay never runs its body.
``functools.wraps`` keeps the name, docstring, annotations and ``__wrapped__``, so frameworks
that build a tool schema from the signature (LangChain's ``@tool``) see the original function,
and an ``async def`` stays a coroutine function.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import typing
import weakref
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar, overload

import msgspec
import msgspec.inspect

from loom_runtime.context import (
    AsyncFlowContext,
    FlowContext,
    computing,
    recorder,
)
from loom_runtime.driver import Pending, Steps, adrive, drive
from loom_runtime.errors import DecisionKeyError
from loom_runtime.http_request import without_credentials

KIND: Final = "tool"

_LIVE: weakref.WeakValueDictionary[str, _Tool] = weakref.WeakValueDictionary()
"""The decorated tools alive in this process, by decision key (``tool:<name>``).

What a sealed execution's trace may call a tool decision (ADR 0030, amended "tool names"):
a live ``@tool``'s name is the program's, while any ``tool`` decision's key is the caller's
and may name a person. Weak, so a tool built and dropped (one per request, say) is forgotten
with its function."""


def registered_tool_name(key: str) -> str | None:
    """The name of the live ``@tool`` whose decisions ``key`` numbers (``tool:search#2`` ->
    ``search``), else None."""
    base = key.partition("#")[0]
    return base.removeprefix("tool:") if base in _LIVE else None


P = ParamSpec("P")
R = TypeVar("R")


@overload
def tool(function: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def tool(*, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None, /, *, name: str | None = None
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Record each call of the decorated function made inside a flow as a ``tool`` decision.

    ``@tool`` keys the decision by the function's name, ``@tool(name="search")`` by the
    given one (the name a model calls the tool by, when it differs). Sync and ``async def``
    functions alike; see the module docstring for what is recorded.
    """
    if function is not None:
        return _Tool(function, name=None).wrapper()
    return lambda decorated: _Tool(decorated, name=name).wrapper()


class _Tool:
    """One decorated function: its decision key, its signature and its return type."""

    def __init__(self, function: Callable[..., Any], *, name: str | None) -> None:
        if not callable(function):
            raise TypeError(f"@tool decorates a function, not {function!r}")
        tool_name = function.__name__ if name is None else name
        if not isinstance(tool_name, str) or not tool_name:
            raise DecisionKeyError(f"a tool name must be a non-empty str, not {tool_name!r}")
        self.function = function
        self.key = f"tool:{tool_name}"
        self.signature = inspect.signature(function)
        _LIVE[self.key] = self

    def wrapper(self) -> Callable[..., Any]:
        """The function to hand back: same metadata, same sync-or-async nature."""
        function = self.function
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                ctx = recorder(self.key)
                if ctx is None:
                    return await function(*args, **kwargs)
                return await adrive(self.steps(ctx, args, kwargs))

            return call_async

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            ctx = recorder(self.key)
            if ctx is None:
                return function(*args, **kwargs)
            return drive(self.steps(ctx, args, kwargs), self._refuse_awaitable)

        return call

    def steps(
        self, ctx: FlowContext | AsyncFlowContext, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Steps[Any]:
        """One call inside ``ctx``'s flow, for either driver: answered from the log, or run
        (awaited when it is a coroutine) and recorded, a failure included.

        An :class:`~loom_runtime.context.OpenDecision` rather than ``ctx.decide``, because a
        sync tool may be called from an async flow (and an async one from a sync flow that
        runs an event loop): the decision is the same, only the driver differs.
        """
        # Credential-named arguments (``token``, ``api_key``) stored marked, as an HTTP body's
        # are (ADR 0028, amended "credentials"); the tool gets them as given.
        asked = without_credentials(self.arguments(args, kwargs))
        if inspect.iscoroutinefunction(self.function):  # awaited: it can wait its turn (one
            # recorded as cancelled, by a timeout around it, waits there for the flow's timeout)
            decision = yield from ctx.open_decision_in_turn(
                self.key, input=asked, kind=KIND, type=self.returns
            )
        else:
            decision = ctx.open_decision(self.key, input=asked, kind=KIND, type=self.returns)
        if decision.recorded:
            return decision.value
        started = time.perf_counter()
        try:
            # held while the driver awaits the body: it runs then
            with computing(ctx, decision.key):
                result = self.function(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = yield Pending(decision.key, result)
        except Exception as exc:
            decision.fail(exc)
            raise
        except asyncio.CancelledError as cancelled:  # stored if the flow goes on
            decision.ended_in(cancelled, time.perf_counter() - started)
            raise
        return decision.record_or_refuse(result)

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults applied: what the tool was asked.

        Binding raises the ``TypeError`` a direct call would have raised, before anything is
        recorded.
        """
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    @functools.cached_property
    def returns(self) -> Any:
        """The type the recorded value decodes as: the return annotation, if msgspec decodes it.

        Resolved at the first call inside a flow, not at decoration, so an annotation naming
        a class defined later in the module resolves. An annotation that cannot be resolved
        (a name imported only for type checking) or that msgspec decodes only with a hook (a
        class of the caller's own, anywhere inside it) decodes as plain JSON instead: the
        value is recorded either way, and refusing would break a tool that works today.
        """
        try:
            returns = typing.get_type_hints(self.function).get("return", Any)
            decodable = not _needs_a_hook(msgspec.inspect.type_info(returns), seen=set())
        except (NameError, TypeError):
            return Any
        return returns if decodable else Any

    def _refuse_awaitable(self, pending: Pending) -> Any:
        close = getattr(pending.awaitable, "close", None)
        if close is not None:
            close()
        raise TypeError(
            f"{self.key} is a plain function that returned an awaitable: declare it "
            "`async def` so @tool awaits it"
        )


def _needs_a_hook(info: object, *, seen: set[int]) -> bool:
    """Whether a msgspec type description holds a type msgspec cannot decode by itself."""
    if isinstance(info, msgspec.inspect.CustomType):
        return True
    if not isinstance(info, msgspec.inspect.Type | msgspec.inspect.Field) or id(info) in seen:
        return False
    seen.add(id(info))  # a recursive Struct refers to its own description
    for name in info.__struct_fields__:
        part = getattr(info, name)
        parts = part if isinstance(part, tuple) else (part,)
        if any(_needs_a_hook(each, seen=seen) for each in parts):
            return True
    return False
