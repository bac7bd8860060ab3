"""A wrapped MCP ``ClientSession``: its tool calls and resource reads are recorded decisions.

An MCP server is a tool backend the agent does not own (a ticket system, a file server), so
what it answered must come from the log on replay, with the server gone (ADR 0028).
``wrap_session(session)`` returns a :class:`RecordedSession` that, inside a running flow
(:func:`~loom_runtime.context.recorder`: not inside another recorded call), makes

* ``await session.call_tool(name, arguments)`` a decision of kind ``"tool"``, key
  ``tool:mcp:<name>``, input ``{"name", "arguments"}`` (plus ``meta``, ``input_responses``,
  ``request_state`` when given: they are part of what is asked);
* ``await session.read_resource(uri)`` a decision of kind ``"resource"``, key
  ``resource:mcp:<scheme>://<host><path>`` (never the query string or userinfo, which may
  hold credentials), input ``{"uri"}``;
* ``await session.get_prompt(name, arguments)`` a decision of kind ``"prompt"``, key
  ``prompt:mcp:<name>``, input ``{"name", "arguments"}`` (plus the options, as a tool call);
* ``await session.complete(ref, argument, context_arguments)`` a decision of kind
  ``"complete"``, key ``complete:mcp:<the prompt's name or the template's URI>``, input
  ``{"ref", "argument", "context_arguments"}``: the completions a server suggests for a
  prompt's or a template's argument are what a user picks from;
* ``await session.list_tools()``, ``list_resources()``, ``list_resource_templates()`` and
  ``list_prompts()`` a decision of kind ``"list"``, key ``list:mcp:tools`` (``resources``,
  ``resource_templates``, ``prompts``), input the ``params`` given (``{"cursor"}``), or
  ``{}``: what a server offers is what the model is offered, an answer like any other;

each valued ``{"type": <result class>, "result": <its JSON>}`` (``model_dump(mode="json",
by_alias=True)``: the protocol's own field names, so an audit reads what the server sent) and
handed back as the SDK's result type rebuilt from that JSON, live and on replay alike. An
error the server answered with (an ``MCPError``: a JSON-RPC error, an unknown resource) is an
answer too: recorded as ``{"type": "MCPError", "result": <its ErrorData>}`` and raised again on
replay with the same code, message and data, so ``except MCPError`` takes the same path. Any
other failure (the connection closed, a request timed out: the SDK raises those as
``MCPError`` too, with its own codes) is recorded as the decision's failure. Arguments named
as credentials and a resource URI's userinfo and signing parameters are stored as the HTTP
transport stores them (:func:`~loom_runtime.http_request.without_credentials`,
:func:`~loom_runtime.http_request.url_without_credentials`). Timeouts and
progress callbacks are not part of the question and are not recorded; a replay calls none.
Everything else (``initialize``, ``send_ping``, ``async with``) goes to the session as is,
and outside a flow so do these: a ping asks whether the server is there, which a replay
without it must not be told it is.

The recorded type name and JSON are untrusted input (a bundle): only the result types this
module records are rebuilt, and JSON the installed SDK no longer validates is a
:class:`RecordedResultError` naming the decision, never a pydantic error from deep inside.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import msgspec

from loom_runtime.context import MCP_ERROR_META, computing, rebuild_with, recorder
from loom_runtime.driver import adrive
from loom_runtime.errors import MissingExtraError, RecordedResultError
from loom_runtime.execution import Decision
from loom_runtime.http_request import url_without_credentials, without_credentials

try:
    import pydantic
    import pydantic_core
    from mcp import ClientSession
    from mcp import types as mcp_types
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # the mcp extra is not installed
    raise MissingExtraError(
        extra="mcp", missing="mcp", needed_by="recording MCP sessions (loom_runtime.wrap_session)"
    ) from exc

_RECORDED_CLASSES: Final[tuple[type[pydantic.BaseModel] | None, ...]] = (
    mcp_types.CallToolResult,
    mcp_types.ReadResourceResult,
    mcp_types.GetPromptResult,
    mcp_types.ListToolsResult,
    mcp_types.ListResourcesResult,
    mcp_types.ListResourceTemplatesResult,
    mcp_types.ListPromptsResult,
    mcp_types.CompleteResult,
    getattr(mcp_types, "InputRequiredResult", None),  # asked for with allow_input_required (mcp 2)
)
RESULT_TYPES: Final = {cls.__name__: cls for cls in _RECORDED_CLASSES if cls is not None}
"""The result classes a recording may name, by name: a recorded name is never imported.
Anything else (an extension's claimed result) is refused before it is recorded."""
_CLIENT_SIDE: Final = frozenset({mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT})
"""The codes of an ``MCPError`` the client raises itself (the connection closed, no reply in
time): no server answered, so it is the decision's failure (reopened by ``retry_failed``),
never a recorded answer the reopened run would be handed again."""

SERVER_ERROR: Final = "MCPError"
"""The recorded type of an error the server answered with (its JSON is the ``ErrorData``)."""

REQUEST_OPTIONS: Final = ("meta", "input_responses", "request_state")
"""Keyword arguments of ``call_tool``/``read_resource``/``get_prompt`` that change what is
asked, so they are part of the recorded input when given."""

LISTING: Final = "list"
"""The kind of a recorded ``list_tools``/``list_resources``/``list_resource_templates``/
``list_prompts`` (key ``list:mcp:<what>``): not ``tool``, whose decisions are tool calls
(traced as ``execute_tool``) and whose keys a tool named ``tools`` could take."""


class _Recorded(msgspec.Struct, frozen=True):
    """A result as the log keeps it: its class name and its JSON."""

    type: str
    result: Any


class RecordedSession:
    """An MCP ``ClientSession`` whose tool calls, resource reads, prompts and listings are
    recorded in flows.

    Every other attribute is the wrapped session's own; :attr:`session` is the session.
    """

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    async def __aenter__(self) -> RecordedSession:
        await self.session.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self.session.__aexit__(*exc_info)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """``session.call_tool``, recorded as ``tool:mcp:<name>`` inside a flow."""
        return await _named(self.session, "call_tool", "tool", name, arguments, args, kwargs)

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """``session.get_prompt``, recorded as ``prompt:mcp:<name>`` inside a flow: the
        messages a server's prompt gives are put before the model as a tool's result is."""
        return await _named(self.session, "get_prompt", "prompt", name, arguments, args, kwargs)

    async def list_tools(self, **kwargs: Any) -> Any:
        """``session.list_tools``, recorded as ``list:mcp:tools`` inside a flow: the tools
        offered to the model on replay are those the server offered live."""
        return await _listing(self.session, "tools", kwargs)

    async def list_resources(self, **kwargs: Any) -> Any:
        """``session.list_resources``, recorded as ``list:mcp:resources`` inside a flow."""
        return await _listing(self.session, "resources", kwargs)

    async def list_resource_templates(self, **kwargs: Any) -> Any:
        """``session.list_resource_templates``, recorded as ``list:mcp:resource_templates``."""
        return await _listing(self.session, "resource_templates", kwargs)

    async def list_prompts(self, **kwargs: Any) -> Any:
        """``session.list_prompts``, recorded as ``list:mcp:prompts`` inside a flow."""
        return await _listing(self.session, "prompts", kwargs)

    async def complete(self, ref: Any, argument: dict[str, str], *args: Any, **kwargs: Any) -> Any:
        """``session.complete``, recorded as ``complete:mcp:<prompt name or template URI>``
        inside a flow: the suggestions for an argument (``{"name", "value"}``) the server
        gave, asked with the reference and the other arguments already chosen."""
        reference = pydantic_core.to_jsonable_python(ref, by_alias=True, exclude_none=True)
        if isinstance(reference, dict) and "uri" in reference:
            reference["uri"] = url_without_credentials(str(reference["uri"]))
            named = resource_name(str(ref.uri))
        else:
            named = str(getattr(ref, "name", ""))
        chosen = args[0] if args else kwargs.get("context_arguments")
        asked = {
            "ref": reference,
            "argument": without_credentials(dict(argument)),
            **({"context_arguments": without_credentials(dict(chosen))} if chosen else {}),
            **_options(kwargs),
        }
        return await _decide(
            f"complete:mcp:{named}",
            "complete",
            asked,
            lambda: self.session.complete(ref, argument, *args, **kwargs),
        )

    async def read_resource(self, uri: Any, *args: Any, **kwargs: Any) -> Any:
        """``session.read_resource``, recorded as ``resource:mcp:<uri>`` inside a flow."""
        asked = {"uri": url_without_credentials(str(uri)), **_options(kwargs)}
        return await _decide(
            f"resource:mcp:{resource_name(str(uri))}",
            "resource",
            asked,
            lambda: self.session.read_resource(uri, *args, **kwargs),
        )


def wrap_session(session: ClientSession) -> RecordedSession:
    """Record ``session``'s tool calls and resource reads made inside a flow."""
    if isinstance(session, RecordedSession):
        return session
    return RecordedSession(session)


def resource_name(uri: str) -> str:
    """The part of a resource URI a key names: scheme, host and path; no userinfo, no query."""
    try:
        parts = urlsplit(uri)
    except ValueError:  # urlsplit refuses it: cut by hand, as the stored input is
        return url_without_credentials(uri).partition("#")[0].partition("?")[0]
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


async def _named(
    session: ClientSession,
    method: str,
    kind: str,
    name: str,
    arguments: dict[str, Any] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """``session.<method>(name, arguments, ...)``, a call of a named tool or prompt
    (``call_tool``, ``get_prompt``), recorded as ``<kind>:mcp:<name>``. The session is asked
    only when the call is made: a replay's may be a closed one, or none."""
    # Credential-named arguments stored marked, as an HTTP body's fields are: the server
    # gets them as given (ADR 0028, amended "credentials").
    asked = {"name": name, "arguments": without_credentials(arguments or {}), **_options(kwargs)}
    return await _decide(
        f"{kind}:mcp:{name}",
        kind,
        asked,
        lambda: getattr(session, method)(name, arguments, *args, **kwargs),
    )


async def _listing(session: ClientSession, what: str, kwargs: dict[str, Any]) -> Any:
    """``session.list_<what>(...)``, a listing of what the server offers, recorded as
    ``list:mcp:<what>``; asked with its ``params`` (a page's ``cursor``, a ``_meta``) as
    given, without None fields and credentials, and the request options."""
    params = pydantic_core.to_jsonable_python(
        kwargs.get("params"), by_alias=True, exclude_none=True
    )
    asked = {**without_credentials(params or {}), **_options(kwargs)}
    return await _decide(
        f"{LISTING}:mcp:{what}", LISTING, asked, lambda: getattr(session, f"list_{what}")(**kwargs)
    )


def _options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The request options given (:data:`REQUEST_OPTIONS`) as stored: a credential-named field
    among them (a ``meta`` carrying an ``authorization``) marked, as in the arguments."""
    return without_credentials(
        {
            name: pydantic_core.to_jsonable_python(kwargs[name])
            for name in REQUEST_OPTIONS
            if kwargs.get(name) is not None
        }
    )


async def _decide(
    key: str, kind: str, asked: dict[str, Any], call: Callable[[], Awaitable[Any]]
) -> Any:
    """One call: answered from the log, or made and recorded; the result rebuilt either way.

    An :class:`~loom_runtime.context.OpenDecision`, so a sync flow that runs an event loop
    records as an async flow does.
    """
    ctx = recorder(key)
    if ctx is None:
        return await call()
    # A call recorded as cancelled (a timeout around it) waits in there for the flow's timeout.
    decision = await adrive(ctx.open_decision_in_turn(key, input=asked, kind=kind, type=_Recorded))
    if not decision.recorded:
        started = time.perf_counter()
        try:
            with computing(ctx, decision.key):
                result = await call()
        except MCPError as exc:
            if exc.error.code in _CLIENT_SIDE:  # no answer came: a failure, as any other,
                # with its code and data for the replay to raise the same MCPError again.
                decision.fail(exc, meta={MCP_ERROR_META: _dump(exc.error)})
                raise
            result = exc.error  # the server answered with an error: an answer all the same
        except Exception as exc:
            decision.fail(exc)
            raise
        except asyncio.CancelledError as cancelled:  # stored if the flow goes on
            decision.ended_in(cancelled, time.perf_counter() - started)
            raise
        recorded_type = SERVER_ERROR if isinstance(result, mcp_types.ErrorData) else None
        if recorded_type is None and RESULT_TYPES.get(type(result).__name__) is type(result):
            recorded_type = type(result).__name__
        if recorded_type is None:
            refused = RecordedResultError(
                key=key,
                reason=f"loom records {sorted(RESULT_TYPES)}, not {type(result).__name__}; "
                "make this call outside the flow",
            )
            decision.fail(refused)
            raise refused
        decision.record(_Recorded(type=recorded_type, result=_stored(_dump(result))))
    rebuilt = _rebuild(decision.key, decision.value)
    if isinstance(rebuilt, MCPError):
        raise rebuilt
    return rebuilt


def _rebuilt_failure(decision: Decision) -> Exception | None:
    """A recorded client-side ``MCPError`` (a timeout, a closed connection) as the SDK raised
    it: its code, message and data from the failure's meta (untrusted: validated as the SDK's
    ``ErrorData``; None, and the usual rebuilding, when it is not one)."""
    try:
        meta: Any = msgspec.json.decode(decision.meta) if decision.meta is not None else {}
        error = mcp_types.ErrorData.model_validate(meta[MCP_ERROR_META])
    except (msgspec.DecodeError, pydantic.ValidationError, TypeError, KeyError):
        return None
    return MCPError(error.code, error.message, error.data)


rebuild_with(f"{MCPError.__module__}:{MCPError.__qualname__}", _rebuilt_failure)


def _dump(model: pydantic.BaseModel) -> Any:
    return model.model_dump(mode="json", by_alias=True)


def _stored(result: Any) -> Any:
    """A result's JSON as stored: each resource content's ``uri`` (the server echoes the URI
    it was asked) as the question's is stored (:func:`url_without_credentials`). The flow is
    handed the result rebuilt from what is stored, live and on replay alike."""
    contents = result.get("contents") if isinstance(result, dict) else None
    for item in contents if isinstance(contents, list) else ():
        if isinstance(item, dict) and isinstance(item.get("uri"), str):
            item["uri"] = url_without_credentials(item["uri"])
    return result


def _rebuild(key: str, recorded: _Recorded) -> Any:
    """The SDK object a recorded answer stands for: a result, or the server's error."""
    cls = mcp_types.ErrorData if recorded.type == SERVER_ERROR else RESULT_TYPES.get(recorded.type)
    if cls is None:
        known = sorted([*RESULT_TYPES, SERVER_ERROR])
        raise RecordedResultError(key=key, reason=f"{recorded.type!r} is not one of {known}")
    try:
        rebuilt = cls.model_validate(recorded.result)
    except pydantic.ValidationError as exc:
        raise RecordedResultError(
            key=key, reason=f"it does not validate as {cls.__name__}: {exc}"
        ) from exc
    if isinstance(rebuilt, mcp_types.ErrorData):
        return MCPError.from_error_data(rebuilt)
    return rebuilt
