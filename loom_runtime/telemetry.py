"""OpenTelemetry spans for executions and decisions, made only when a Loom is given a provider.

``Loom(tracer_provider=provider)`` turns them on (ADR 0030); without one this module is never
imported and no decision pays anything for it. With one, each run, resume, fork or replay is
one span, and each decision the flow asks is a child span of it, so a trace in Jaeger,
Langfuse or Phoenix shows where an execution spent its time and links back to ``loom replay
ID`` through ``loom.execution_id``.

The decision spans come from wrapping the execution's :class:`DecisionSource`, not from hooks
in ``decide``: a source is asked once when a decision is called (``lookup``) and told once
when it is complete (``record``/``record_failure``), for ``decide`` and for an
:class:`~loom_runtime.context.OpenDecision` (a stream) alike. A span therefore starts when
the flow asks and ends when the value is stored, retries and pauses included. It is not made
the current span: concurrent decisions (``asyncio.gather``, a tool pool) start and end in any
order, which a context stack cannot express; the execution span is the current one, so spans
of instrumented libraries called by the flow still nest under the execution.

``model`` decisions (ADR 0025) follow the OpenTelemetry GenAI semantic conventions: span name
``"{operation} {model}"``, ``gen_ai.operation.name``, ``gen_ai.provider.name`` (and the older
``gen_ai.system`` that several backends still read), ``gen_ai.request.model`` from the recorded
request, ``gen_ai.response.model`` and token usage from the decision's meta.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Literal

import msgspec

from loom_runtime.context import REFUSALS, DecisionSource, Slot
from loom_runtime.errors import (
    ConfigurationError,
    DecisionInputChangedError,
    DecisionKindChangedError,
    MissingExtraError,
)
from loom_runtime.execution import Decision, Execution, printed
from loom_runtime.http_request import urls_without_credentials
from loom_runtime.recorded_tool import registered_tool_name
from loom_runtime.redaction import Redactor, as_stored

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
except ImportError as exc:  # the otel extra is not installed
    raise MissingExtraError(
        extra="otel", missing="opentelemetry-api", needed_by="tracing (Loom(tracer_provider=...))"
    ) from exc

logger = logging.getLogger("loom.runtime.telemetry")

Operation = Literal["run", "resume", "fork", "replay"]
"""What an execution span does: record (``run``/``resume``/``fork``) or ``replay``."""

_OPERATIONS = {  # the last part of a model key's path -> gen_ai.operation.name
    "completions": "chat",  # model:openai:chat.completions
    "responses": "chat",
    "messages": "chat",  # model:anthropic:messages
    "embeddings": "embeddings",
}
_PROVIDERS = frozenset({"openai", "anthropic"})
"""The providers ``wrap`` records (``model:<provider>:...``): the only provider names a sealed
execution's span takes from a key."""
_USAGE = (  # usage field as the provider reports it -> attribute
    ("input_tokens", "gen_ai.usage.input_tokens"),  # Anthropic, OpenAI Responses
    ("prompt_tokens", "gen_ai.usage.input_tokens"),  # OpenAI chat and embeddings
    ("output_tokens", "gen_ai.usage.output_tokens"),
    ("completion_tokens", "gen_ai.usage.output_tokens"),
)
_any_json = msgspec.json.Decoder()
NAME_LIMIT = 256
"""At most this many characters of a span's name. OpenTelemetry's limits (``SpanLimits``,
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``) bound attributes, not names, and a name holds a key or a
model name of any size: a longer one is cut, ending in ``…`` (the key attribute, under the
user's limits, and the log position still say which decision it is)."""


class Telemetry:
    """The spans of one Loom, made by one tracer of the provider it was given."""

    def __init__(self, tracer_provider: TracerProvider) -> None:
        if not isinstance(tracer_provider, TracerProvider):  # a Tracer passed by mistake, ...
            raise ConfigurationError(
                "tracer_provider must be an OpenTelemetry TracerProvider (an SDK "
                "TracerProvider, or opentelemetry.trace.get_tracer_provider()), not "
                f"{type(tracer_provider).__name__}"
            )
        self._tracer = tracer_provider.get_tracer("loom_runtime")

    @contextmanager
    def execution(
        self,
        operation: Operation,
        execution: Execution,
        source: DecisionSource,
        positions: MutableMapping[str, int],
        *,
        sealed: bool,
    ) -> Iterator[DecisionSource]:
        """The execution's span, current for the ``with`` block, and ``source`` wrapped so that
        each decision is a child span of it. A failure leaving the block marks the span.

        The execution's span has the position the execution started at; each decision's span
        has its own event's position, read from ``positions`` (by key) as the span ends: a
        recorded decision's is there from the start, a new one's once it is stored (ADR 0034).
        A decision computed live is first dropped from ``positions``, so one that is not
        stored (a replay's live key) has none, rather than its recording's.

        ``sealed`` (a Loom with a master key): the spans carry no decision key and no
        failure's message (ADR 0030, amended "sealed"), since a trace leaves the log for a
        collector that erasure cannot reach. Decision spans name their kind, GenAI names come
        from fixed tables only, and a failure gives its type (an exception event holds the
        message, and so would the status's description)."""
        attributes = {
            "loom.operation": operation,
            "loom.replay": operation == "replay",
            "loom.execution_id": str(execution.id),
            "loom.flow": execution.flow,
            "loom.code_version": execution.code_version,
            "loom.log_position": execution.log_position,
        }
        span = _started(self._tracer, f"loom {operation} {execution.flow}", attributes)
        traced = _TracedSource(source, self._tracer, span, attributes, positions, sealed)
        with trace.use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            try:
                yield traced
            except Exception as exc:  # as OpenTelemetry's own: an interrupt is no failure
                _fail(span, exc, sealed=sealed, described=True, redactor=traced.redactor)
                raise
            finally:
                traced.end_unsettled()
                _end(span)


class _TracedSource:
    """A :class:`DecisionSource` that opens a span per decision around the one it wraps."""

    def __init__(
        self,
        source: DecisionSource,
        tracer: trace.Tracer,
        parent: Span,
        execution: Mapping[str, str | bool | int],
        positions: MutableMapping[str, int],
        sealed: bool,
    ) -> None:
        self._source = source
        self._sealed = sealed
        """The execution is sealed: its spans carry no key and no failure's message."""
        self._tracer = tracer
        self._parent = trace.set_span_in_context(parent)
        self._shared = {name: execution[name] for name in ("loom.execution_id", "loom.replay")}
        self._positions = positions
        self._open: dict[str, Span] = {}
        self.redactor: Redactor | None = source.redactor

    @property
    def recorded(self) -> Mapping[str, Decision]:
        return self._source.recorded

    def lookup(self, slot: Slot) -> Decision | None:
        """Open the decision's span; a decision answered from the log closes it at once.

        A key to compute live is checked first, as the context checks it before computing:
        the log refuses a key holding a secret, and a span holding it would carry it to the
        collector."""
        try:
            decision = self._source.lookup(slot)
        except Exception as exc:  # a divergence, a changed input: the span says so
            # A replay's unrecorded key was never checked (the log took none of it): one the
            # log would refuse names the span by its kind only, as a sealed execution's.
            span = self._start(slot, keyless=not self._storable(slot.key))
            _end(span, error=exc, sealed=self._sealed, redactor=self.redactor)
            raise
        if decision is None:
            if self.redactor is not None:
                self.redactor.check_identifier(slot.key, path="key")
            self._open[slot.key] = self._start(slot)
            return None
        span = self._start(slot)
        span.set_attribute("loom.decision.recorded", True)
        self._locate(span, slot)
        _describe(span, slot, decision.meta)
        if decision.input != slot.input:  # a replay goes on past a changed input: mark it here
            _end(span, error_type=DecisionInputChangedError.__name__)
        elif decision.kind != slot.kind:  # and past a changed kind, as the replayer compares
            _end(span, error_type=DecisionKindChangedError.__name__)
        else:
            _end(span, error_type=decision.error_type)
        return decision

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        span = self._open.pop(slot.key, None) or self._start(slot)
        self._positions.pop(slot.key, None)  # computed live: its own event's, if stored
        try:
            stored = self._source.record(slot, value, type=type, meta=meta)
        except REFUSALS:
            # The context records the refusal as the decision's failure next: one span, ended
            # by that (a second, begun then, would say the decision twice).
            self._open[slot.key] = span
            raise
        except Exception as exc:
            _end(span, error=exc, sealed=self._sealed, redactor=self.redactor)
            raise
        self._locate(span, slot)
        _describe(span, slot, meta)
        _end(span)
        return stored

    def record_failure(
        self, slot: Slot, error: BaseException, *, meta: msgspec.Raw | None = None
    ) -> None:
        span = self._open.pop(slot.key, None) or self._start(slot)
        self._positions.pop(slot.key, None)
        try:
            self._source.record_failure(slot, error, meta=meta)
        finally:
            self._locate(span, slot)
            _describe(span, slot, meta)
            _end(span, error=error, sealed=self._sealed, redactor=self.redactor)

    def end_unsettled(self) -> None:
        """End the spans of decisions never completed (a stream the flow abandoned)."""
        for span in self._open.values():
            span.set_attribute("loom.decision.unsettled", True)
            _end(span)
        self._open.clear()

    def _locate(self, span: Span, slot: Slot) -> None:
        """Give ``span`` its decision's log position, if the decision is stored."""
        position = self._positions.get(slot.key)
        if position is not None:
            span.set_attribute("loom.log_position", position)

    def _storable(self, key: str) -> bool:
        """Whether the log would store ``key`` (no secret the redactor refuses in it)."""
        if self.redactor is None:
            return True
        try:
            self.redactor.check_identifier(key, path="key")
        except Exception:
            return False
        return True

    def _start(self, slot: Slot, *, keyless: bool = False) -> Span:
        name, kind, attributes = _naming(slot, sealed=self._sealed or keyless)
        return _started(
            self._tracer, name, {**self._shared, **attributes}, context=self._parent, kind=kind
        )


def _started(
    tracer: trace.Tracer,
    name: str,
    attributes: Mapping[str, str | bool | int],
    *,
    context: Any = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Span:
    """A span started, its name bounded (:data:`NAME_LIMIT`), or a span that records nothing
    when starting raised (a processor's ``on_start``): tracing never changes what a flow sees
    or what is recorded."""
    name = name if len(name) <= NAME_LIMIT else name[: NAME_LIMIT - 1] + "…"
    try:
        return tracer.start_span(name, context=context, kind=kind, attributes=attributes)
    except Exception:
        logger.debug("starting span %r raised; the decision goes on untraced", name, exc_info=True)
        return trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)


def _naming(slot: Slot, *, sealed: bool) -> tuple[str, SpanKind, dict[str, str | bool | int]]:
    """A decision span's name, kind and own attributes: GenAI names for a ``model`` call
    (``"chat gpt-4o"``) or a ``tool`` call (``"execute_tool search"``), else the key.

    Sealed, nothing is taken from the key: any decision may be given the kind ``model`` or
    ``tool``, so its key may name a person. The span names its kind and has no key attribute
    (its log position, set once it is stored, says which decision it is); a tool call is
    named only by a live ``@tool``'s name (the program's: an MCP call, whose name the model
    chose, is not); a model call's operation and provider come only from
    :data:`_OPERATIONS` and :data:`_PROVIDERS`; the request's model name stays."""
    attributes: dict[str, str | bool | int] = {"loom.decision.kind": slot.kind or ""}
    if not sealed:
        attributes["loom.decision.key"] = slot.key
    if slot.kind == "tool":  # tool:<name>, tool:mcp:<name> (ADR 0028)
        attributes["gen_ai.operation.name"] = "execute_tool"
        if sealed:
            tool = registered_tool_name(slot.key)
        else:
            tool = slot.key.removeprefix("tool:").removeprefix("mcp:").partition("#")[0]
        if tool is None:
            return "execute_tool", SpanKind.INTERNAL, attributes
        attributes["gen_ai.tool.name"] = tool
        return f"execute_tool {tool}", SpanKind.INTERNAL, attributes
    if slot.kind != "model":
        named = (slot.kind or "") if sealed else slot.key
        return f"loom decide {named}".rstrip(), SpanKind.INTERNAL, attributes
    provider, _, path = slot.key.removeprefix("model:").partition(":")  # ADR 0025
    endpoint = path.partition("#")[0].rsplit(".", 1)[-1]
    operation = _OPERATIONS.get(endpoint, None if sealed else path)
    if sealed and provider not in _PROVIDERS:
        provider = ""
    if operation is not None:
        attributes["gen_ai.operation.name"] = operation
    if provider:
        attributes["gen_ai.provider.name"] = provider
        attributes["gen_ai.system"] = provider
    label = operation or "loom decide model"
    asked = _json_object(slot.input)
    if asked.keys() == {"body", "headers"} and isinstance(asked["body"], dict):
        asked = asked["body"]  # asked with a beta header (ADR 0025, amended "beta headers")
    model = asked.get("model")
    if not isinstance(model, str):
        return label, SpanKind.CLIENT, attributes
    attributes["gen_ai.request.model"] = model
    return f"{label} {model}", SpanKind.CLIENT, attributes


def _describe(span: Span, slot: Slot, meta: msgspec.Raw | None) -> None:
    """What a model decision's meta measured, as GenAI attributes (nothing for other kinds)."""
    if slot.kind != "model" or meta is None:
        return
    measured = _json_object(meta)
    if isinstance(model := measured.get("model"), str):
        span.set_attribute("gen_ai.response.model", model)
    usage = measured.get("usage")
    if isinstance(usage, dict):
        for field, attribute in _USAGE:
            count = usage.get(field)
            if isinstance(count, int) and not isinstance(count, bool):
                span.set_attribute(attribute, count)


def _json_object(raw: msgspec.Raw) -> dict[str, Any]:
    """``raw`` as a JSON object, or empty: stored data is untrusted and a span is optional."""
    try:
        found = _any_json.decode(raw)
    except msgspec.DecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def _end(
    span: Span,
    *,
    error: BaseException | None = None,
    error_type: str | None = None,
    sealed: bool = False,
    redactor: Redactor | None = None,
) -> None:
    """End ``span``, marked as failed when the decision raised (live or as recorded).

    What a span processor raises as the span ends (a collector's client that is down) is
    logged at DEBUG and goes no further: it came out of ``ctx.decide`` after the value was
    stored, a flow catching it took another path live than its replay, and an uncaught one
    recorded the execution as failed with the tracer's error."""
    try:
        if error is not None:
            _fail(span, error, sealed=sealed, redactor=redactor)
        elif error_type is not None:
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR))
        span.end()
    except Exception:
        logger.debug("ending a span raised; the flow goes on as recorded", exc_info=True)


def _fail(
    span: Span,
    error: BaseException,
    *,
    sealed: bool,
    described: bool = False,
    redactor: Redactor | None = None,
) -> None:
    """Mark ``span`` failed with ``error``'s type; in clear also its exception event (the
    message and traceback) and, ``described``, the status description OpenTelemetry gives an
    execution's span (``"ValueError: ..."``), both of which a sealed execution's leaves out.
    Both are stored as the failure the log stores is: every URL they quote without its
    credentials (:func:`~loom_runtime.http_request.urls_without_credentials`), then through
    the log's ``redactor`` (ADR 0012): a traceback of a connection error quoting a URL's
    password, or an HTTP error's message its ``?key=``, left the process whole, from a log
    that held it redacted."""
    name = type(error).__name__
    span.set_attribute("error.type", name)
    if sealed:
        span.set_status(Status(StatusCode.ERROR))
        return
    message = as_stored(
        redactor, urls_without_credentials(printed(error)), path="span.exception.message"
    )
    stack = as_stored(
        redactor,
        urls_without_credentials("".join(traceback.format_exception(error))),
        path="span.exception.stacktrace",
    )
    span.add_event(
        "exception",
        {
            "exception.type": f"{type(error).__module__}.{type(error).__qualname__}",
            "exception.message": message,
            "exception.stacktrace": stack,
        },
    )
    span.set_status(Status(StatusCode.ERROR, f"{name}: {message}" if described else None))
