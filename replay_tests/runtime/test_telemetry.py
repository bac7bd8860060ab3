"""ADR 0030: with a tracer provider, an execution is a span and each decision a child span.

Spans are read from the OpenTelemetry SDK's in-memory exporter; model decisions come from the
real ``openai`` and ``anthropic`` SDKs talking to the loopback provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from loom_runtime import ConfigurationError, Loom, Run, tool, wrap
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import anthropic
    import openai
else:
    anthropic = deferred("anthropic")
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs


class Traced:
    """A tracer provider whose finished spans the test reads."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def take(self) -> list[ReadableSpan]:
        spans = self.spans()
        self.exporter.clear()
        return spans

    def loom(self, db: Path) -> Loom:
        return Loom(f"sqlite:///{db}", tracer_provider=self.provider)


@pytest.fixture
def traced() -> Iterator[Traced]:
    found = Traced()
    yield found
    found.provider.shutdown()


def execution_span(spans: list[ReadableSpan]) -> ReadableSpan:
    (found,) = [span for span in spans if span.name.startswith("loom ") and span.parent is None]
    return found


def decision_spans(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {
        str(span.attributes["loom.decision.key"]): span
        for span in spans
        if span.attributes is not None and "loom.decision.key" in span.attributes
    }


def register_triage(loom: Loom) -> None:
    @loom.flow("triage")
    def triage(ctx: Any, ticket: str) -> str:
        label = ctx.decide("classify", lambda: "billing", input={"ticket": ticket}, kind="llm")
        ctx.now()
        return f"{ticket}: {label}"


def recorded_triage(traced: Traced, tmp_path: Path) -> tuple[Run, Loom]:
    """A run of ``triage`` recorded (its spans taken), and a second traced Loom on its log,
    with no flow yet: a test registers the changed code there and replays the run."""
    loom = traced.loom(tmp_path / "loom.db")
    register_triage(loom)
    run = loom.run("triage", ticket="T-1")
    traced.take()
    return run, traced.loom(tmp_path / "loom.db")


def test_a_run_is_one_span_with_a_child_span_per_decision(traced: Traced, tmp_path: Path) -> None:
    loom = traced.loom(tmp_path / "loom.db")
    register_triage(loom)
    run = loom.run("triage", ticket="T-1")
    spans = traced.spans()
    root = execution_span(spans)
    assert root.name == "loom run triage"
    assert root.attributes == {
        "loom.operation": "run",
        "loom.replay": False,
        "loom.execution_id": str(run.execution_id),
        "loom.flow": "triage",
        "loom.code_version": loom.get_flow("triage").version,
        "loom.log_position": run.log_position,
    }
    decisions = decision_spans(spans)
    assert sorted(decisions) == ["classify", "now"]
    for key, kind in (("classify", "llm"), ("now", "clock")):
        span = decisions[key]
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        assert span.attributes is not None
        assert span.attributes["loom.decision.kind"] == kind
        assert span.attributes["loom.execution_id"] == str(run.execution_id)
        assert span.attributes["loom.log_position"] > run.log_position  # its own (ADR 0034)
        assert span.attributes["loom.replay"] is False
        assert "loom.decision.recorded" not in span.attributes
    assert root.status.status_code is not StatusCode.ERROR


def test_a_replay_span_says_replay_and_its_decisions_come_from_the_log(
    traced: Traced, tmp_path: Path
) -> None:
    loom = traced.loom(tmp_path / "loom.db")
    register_triage(loom)
    run = loom.run("triage", ticket="T-1")
    traced.take()
    assert loom.replay(run.execution_id).identical
    spans = traced.spans()
    root = execution_span(spans)
    assert root.name == "loom replay triage"
    assert root.attributes is not None
    assert root.attributes["loom.replay"] is True
    assert root.attributes["loom.execution_id"] == str(run.execution_id)
    decisions = decision_spans(spans)
    assert sorted(decisions) == ["classify", "now"]
    for span in decisions.values():
        assert span.attributes is not None
        assert span.attributes["loom.replay"] is True
        assert span.attributes["loom.decision.recorded"] is True


def test_a_replay_whose_flow_raises_is_an_error_span(traced: Traced, tmp_path: Path) -> None:
    """The replay catches what the flow raises, to report it as a changed outcome, and caught
    it inside the execution's span: a run's span says its error, a replay's said nothing (an
    attack review of the spans)."""
    run, other = recorded_triage(traced, tmp_path)

    @other.flow("triage")
    def triage(ctx: Any, ticket: str) -> str:
        raise ValueError("the new code fails")

    result = other.replay(run.execution_id)
    assert [type(d).__name__ for d in result.divergences][:1] == ["OutcomeChangedError"]
    root = execution_span(traced.spans())
    assert root.name == "loom replay triage"
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes is not None and root.attributes["error.type"] == "ValueError"


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        (object, "NotSerialisableError"),
        # Erasure review of 6 December: a value the redactor refuses was two spans.
        (
            lambda: {"ghp_" + "b" * 36: 2, "ghp_" + "c" * 36: 3},  # keys redacting alike
            "RedactedKeysCollideError",
        ),
    ],
    ids=["unencodable", "redactor-refusal"],
)
def test_a_value_the_log_refuses_is_one_error_span(
    traced: Traced, tmp_path: Path, value: Any, refusal: str
) -> None:
    """A decision whose value the log cannot store is recorded as its failure. Its span was
    ended by the refusal and a second one begun by the failure's record: two error spans for
    one decision, the first without its log position (an attack review of the spans)."""
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("unstorable")
    def unstorable(ctx: Any) -> str:
        try:
            ctx.decide("conn", value)
        except Exception:  # the refusal: the flow goes on, the failure is recorded
            return "fallback"
        return "stored"

    run = loom.run("unstorable")
    assert run.output == "fallback"
    spans = [span for span in traced.spans() if span.parent is not None]
    assert [span.name for span in spans] == ["loom decide conn"]
    [span] = spans
    assert span.attributes is not None
    assert span.attributes["error.type"] == refusal
    assert "loom.log_position" in span.attributes  # the failure's own event


def test_a_resumed_execution_marks_its_recorded_decisions(traced: Traced, tmp_path: Path) -> None:
    loom = traced.loom(tmp_path / "loom.db")
    failing = {"now": True}

    @loom.flow("steps")
    def steps(ctx: Any) -> int:
        first = ctx.decide("first", lambda: 1)
        if failing["now"]:
            raise RuntimeError("worker died")
        return first + ctx.decide("second", lambda: 2)

    with pytest.raises(RuntimeError):
        loom.run("steps")
    root = execution_span(traced.take())
    assert root.status.status_code is StatusCode.ERROR
    execution_id = root.attributes["loom.execution_id"] if root.attributes else None
    failing["now"] = False
    loom.resume(str(execution_id), retry_failed=True)
    spans = traced.spans()
    assert execution_span(spans).name == "loom resume steps"
    decisions = decision_spans(spans)
    assert decisions["first"].attributes is not None
    assert decisions["first"].attributes["loom.decision.recorded"] is True
    assert decisions["second"].attributes is not None
    assert "loom.decision.recorded" not in decisions["second"].attributes


def test_a_fork_span_marks_the_decisions_it_inherited(traced: Traced, tmp_path: Path) -> None:
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("pair")
    def pair(ctx: Any) -> list[int]:
        return [ctx.decide("first", lambda: 1), ctx.decide("second", lambda: 2)]

    parent = loom.run("pair")
    traced.take()
    fork = loom.fork(parent.execution_id, at="second", override={"second": 20})
    spans = traced.spans()
    root = execution_span(spans)
    assert root.name == "loom fork pair"
    assert root.attributes is not None
    assert root.attributes["loom.execution_id"] == str(fork.execution_id)
    decisions = decision_spans(spans)
    for key in ("first", "second"):  # inherited, and answered by its override
        assert decisions[key].attributes is not None
        assert decisions[key].attributes["loom.decision.recorded"] is True


def test_a_tracer_passed_for_a_provider_is_refused_saying_what_to_pass(tmp_path: Path) -> None:
    tracer = TracerProvider().get_tracer("app")
    with pytest.raises(ConfigurationError, match="must be an OpenTelemetry TracerProvider"):
        Loom(f"sqlite:///{tmp_path / 'loom.db'}", tracer_provider=tracer)  # type: ignore[arg-type]


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_tracing_without_the_otel_extra_names_the_extra(tmp_path: Path) -> None:
    script = f"""
import sys
import tomllib
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from loom_runtime import Loom, MissingExtraError
try:
    Loom({f"sqlite:///{tmp_path / 'loom.db'}"!r}, tracer_provider=object())
except MissingExtraError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert "pip install 'loom-replay[otel]'" in done.stdout


def test_a_failed_decision_is_an_error_span_live_and_on_replay(
    traced: Traced, tmp_path: Path
) -> None:
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("lookup")
    def lookup(ctx: Any) -> str:
        try:
            ctx.decide("fetch", _raise_lookup_error, kind="tool")
        except LookupError:
            return "fallback"
        return "found"

    run = loom.run("lookup")
    live = decision_spans(traced.take())["fetch"]
    assert live.status.status_code is StatusCode.ERROR
    assert live.attributes is not None and live.attributes["error.type"] == "LookupError"
    assert [event.name for event in live.events] == ["exception"]
    assert loom.replay(run.execution_id).identical
    replayed = decision_spans(traced.spans())["fetch"]
    assert replayed.status.status_code is StatusCode.ERROR
    assert replayed.attributes is not None
    assert replayed.attributes["error.type"] == "builtins:LookupError"


def _raise_lookup_error() -> str:
    raise LookupError("no such runbook")


@pytest.mark.parametrize(
    ("asked_ticket", "asked_kind", "divergence"),
    [
        ("changed", "llm", "DecisionInputChangedError"),
        # An attack review: a changed kind is a divergence the span said nothing of.
        ("T-1", "tool", "DecisionKindChangedError"),
    ],
)
def test_a_divergence_is_an_error_span_on_the_decision_that_diverged(
    traced: Traced, tmp_path: Path, asked_ticket: str, asked_kind: str, divergence: str
) -> None:
    run, other = recorded_triage(traced, tmp_path)

    @other.flow("triage")
    def triage(ctx: Any, ticket: str) -> str:
        asked = {"ticket": asked_ticket}
        return ctx.decide("classify", lambda: "x", input=asked, kind=asked_kind)

    result = other.replay(run.execution_id)
    assert divergence in [type(d).__name__ for d in result.divergences]
    span = decision_spans(traced.spans())["classify"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == divergence


def test_async_decisions_made_at_once_are_all_children_of_the_execution(
    traced: Traced, tmp_path: Path
) -> None:
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("fan_out")
    async def fan_out(ctx: Any) -> list[int]:
        async def value(n: int) -> int:
            await asyncio.sleep(0.001 * (3 - n))
            return n

        return list(
            await asyncio.gather(*(ctx.decide("part", lambda n=n: value(n)) for n in range(3)))
        )

    assert loom.run("fan_out").output == [0, 1, 2]
    spans = traced.spans()
    root = execution_span(spans)
    decisions = decision_spans(spans)
    assert sorted(decisions) == ["part", "part#2", "part#3"]
    assert {span.parent.span_id for span in decisions.values() if span.parent} == {
        root.context.span_id
    }


def test_decisions_made_from_a_thread_pool_are_children_of_the_execution(
    traced: Traced, tmp_path: Path
) -> None:
    """Threads do not inherit the current span; decision spans name their parent themselves."""
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("pool")
    def pool(ctx: Any) -> list[int]:
        with ThreadPoolExecutor(max_workers=2) as executor:
            return list(executor.map(lambda n: ctx.decide(f"tool-{n}", lambda: n), range(2)))

    loom.run("pool")
    spans = traced.spans()
    root = execution_span(spans)
    decisions = decision_spans(spans)
    assert sorted(decisions) == ["tool-0", "tool-1"]
    for span in decisions.values():
        assert span.parent is not None and span.parent.span_id == root.context.span_id


def test_spans_the_flow_starts_nest_under_the_execution(traced: Traced, tmp_path: Path) -> None:
    """The execution span is current while the body runs: an instrumented library's span
    (an HTTP client, a vector store) lands in the same trace."""
    loom = traced.loom(tmp_path / "loom.db")
    tracer = traced.provider.get_tracer("a library")

    @loom.flow("instrumented")
    def instrumented(ctx: Any) -> None:
        with tracer.start_as_current_span("library call"):
            pass

    loom.run("instrumented")
    spans = traced.spans()
    (library,) = [span for span in spans if span.name == "library call"]
    assert library.parent is not None
    assert library.parent.span_id == execution_span(spans).context.span_id


def test_an_openai_call_follows_the_genai_conventions_recorded_and_replayed(
    traced: Traced, tmp_path: Path
) -> None:
    with ProviderServer() as provider:
        loom = traced.loom(tmp_path / "loom.db")

        @loom.flow("ask")
        def ask(ctx: Any, url: str) -> str:
            client = wrap(openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0))
            answer = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "disk full"}]
            )
            return answer.choices[0].message.content or ""

        run = loom.run("ask", url=provider.openai_url)
    live = decision_spans(traced.take())["model:openai:chat.completions"]
    assert live.name == "chat gpt-4o-mini"
    assert live.kind is SpanKind.CLIENT
    assert live.attributes is not None
    tokens = live.attributes["gen_ai.usage.input_tokens"]
    assert isinstance(tokens, int) and tokens > 0
    expected = {
        "loom.decision.kind": "model",
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2025-01-01",
        "gen_ai.usage.input_tokens": tokens,
    }
    assert {name: live.attributes.get(name) for name in expected} == expected
    assert isinstance(live.attributes["gen_ai.usage.output_tokens"], int)
    assert loom.replay(run.execution_id).identical  # the provider is stopped: from the log
    replayed = decision_spans(traced.spans())["model:openai:chat.completions"]
    assert replayed.attributes is not None
    assert {name: replayed.attributes.get(name) for name in expected} == expected
    assert replayed.attributes["loom.replay"] is True


@pytest.mark.parametrize("beta", [None, "context-1m-2025-08-07"], ids=["plain", "beta"])
def test_an_anthropic_call_reports_its_token_usage(
    traced: Traced, tmp_path: Path, beta: str | None
) -> None:
    """Also asked with a beta header, which its decision's input holds beside the body (ADR
    0025, amended "beta headers"): the span still names the model."""
    with ProviderServer() as provider:
        loom = traced.loom(tmp_path / "loom.db")

        @loom.flow("ask")
        def ask(ctx: Any, url: str) -> str:
            client = wrap(anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0))
            client.messages.create(
                model="claude-haiku-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": "disk full"}],
                extra_headers={} if beta is None else {"anthropic-beta": beta},
            )
            return "done"

        loom.run("ask", url=provider.anthropic_url)
    span = decision_spans(traced.spans())["model:anthropic:messages"]
    assert span.name == "chat claude-haiku-4-5"
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == "anthropic"
    assert isinstance(span.attributes["gen_ai.usage.input_tokens"], int)
    assert isinstance(span.attributes["gen_ai.usage.output_tokens"], int)


def test_a_tool_call_is_an_execute_tool_span(traced: Traced, tmp_path: Path) -> None:
    @tool
    def search(query: str) -> str:
        return f"runbook for {query}"

    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("lookup")
    def lookup(ctx: Any) -> str:
        return search("disk full") + search("oom")

    loom.run("lookup")
    decisions = decision_spans(traced.spans())
    assert sorted(decisions) == ["tool:search", "tool:search#2"]
    for span in decisions.values():
        assert span.name == "execute_tool search"
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "search"


def test_a_model_decision_with_unexpected_stored_shapes_still_makes_its_span(
    traced: Traced, tmp_path: Path
) -> None:
    """Inputs and meta are untrusted data: a "model" decision whose input is not a request
    and whose meta has no usable usage gets a span without GenAI details, never a crash."""
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("odd")
    def odd(ctx: Any) -> str:
        decision = ctx.open_decision(
            "model:custom:generate", input=["not", "a", "request"], kind="model"
        )
        decision.record("text", meta={"model": 7, "usage": {"input_tokens": "many"}})
        return "ok"

    run = loom.run("odd")
    assert loom.replay(run.execution_id).identical
    for span in [decision_spans(traced.take())["model:custom:generate"]]:
        assert span.name == "generate"
        assert span.attributes is not None
        assert span.attributes["gen_ai.provider.name"] == "custom"
        for absent in (
            "gen_ai.request.model",
            "gen_ai.response.model",
            "gen_ai.usage.input_tokens",
        ):
            assert absent not in span.attributes


def test_an_open_decision_never_settled_ends_with_the_execution(
    traced: Traced, tmp_path: Path
) -> None:
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("abandon")
    def abandon(ctx: Any) -> str:
        ctx.open_decision("stream", kind="http")
        return "left"

    loom.run("abandon")
    span = decision_spans(traced.spans())["stream"]
    assert span.end_time is not None
    assert span.attributes is not None and span.attributes["loom.decision.unsettled"] is True


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_without_a_tracer_provider_nothing_is_traced_or_imported(tmp_path: Path) -> None:
    """Off by default: a run imports neither the telemetry module nor OpenTelemetry, and the
    library prints nothing (its log lines are INFO and DEBUG, below Python's last resort)."""
    script = f"""
import sys
import tomllib
from loom_runtime import Loom
loom = Loom({f"sqlite:///{tmp_path / 'loom.db'}"!r})
@loom.flow("f")
def f(ctx):
    return ctx.decide("k", lambda: 1)
loom.run("f")
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "loom_runtime.telemetry")))
print(loaded)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
    assert done.stderr == ""  # the library prints nothing of its own


def test_executions_are_logged_on_the_loom_runtime_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")
    register_triage(loom)
    with caplog.at_level(logging.INFO, logger="loom"):
        run = loom.run("triage", ticket="T-1")
        loom.replay(run.execution_id)
        with pytest.raises(ZeroDivisionError):
            loom.flow("broken")(lambda ctx: 1 / 0)
            loom.run("broken")
    lines = [(record.name, record.getMessage()) for record in caplog.records]
    failed = [message for _, message in lines if "failed" in message]
    assert lines[:3] == [
        (
            "loom.runtime",
            f"execution {run.execution_id} of flow 'triage' started at log position "
            f"{run.log_position}",
        ),
        ("loom.runtime", f"execution {run.execution_id} of flow 'triage' completed"),
        ("loom.runtime", f"replay of execution {run.execution_id}: 0 divergences"),
    ]
    assert len(failed) == 1 and failed[0].endswith("failed: ZeroDivisionError")


def test_memory_writes_and_knowledge_syncs_are_logged_on_their_loggers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from loom_knowledge import Doc, open_knowledge_base
    from loom_memory import EventSourcedMemory, MemoryEntry

    with (
        Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom,
        caplog.at_level(logging.DEBUG, logger="loom"),
    ):
        EventSourcedMemory(loom, name="notes").append("user:1", [MemoryEntry(content="hi")])
        kb = open_knowledge_base(loom, "runbooks")
        kb.sync([Doc(id="disk", text="Rotate the logs.")], source="wiki")
        kb.rebuild()
    messages: dict[str, list[str]] = {}
    for record in caplog.records:
        messages.setdefault(record.name, []).append(record.getMessage())
    assert any(
        message.startswith("memory 'notes': MemoryAppended of key 'user:1' at log position")
        for message in messages["loom.memory"]
    )
    assert messages["loom.knowledge"] == [
        "knowledge scope 'runbooks', source 'wiki' synced: 1 written, 0 unchanged, 0 removed, "
        "0 retained"
    ]
    assert any(message.startswith("rebuilding projection") for message in messages["loom.runtime"])


def test_opentelemetry_is_the_otel_extra_not_a_dependency() -> None:
    """Tracing is optional (ADR 0022's rule): the API and SDK come with ``[otel]`` only."""
    project = tomllib.loads(
        (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    )["project"]
    assert not any(name.startswith("opentelemetry") for name in project["dependencies"])
    assert [name.split(">")[0] for name in project["optional-dependencies"]["otel"]] == [
        "opentelemetry-api",
        "opentelemetry-sdk",
    ]


def _exported(spans: list[ReadableSpan]) -> str:
    """Everything a span exporter sends of ``spans``: names, attributes, events, statuses."""
    parts: list[str] = []
    for span in spans:
        parts += [span.name, repr(dict(span.attributes or {})), str(span.status.description)]
        for event in span.events:
            parts += [event.name, repr(dict(event.attributes or {}))]
    return "\n".join(parts)


def _register_care(loom: Loom, patient_input: str) -> None:
    @loom.flow("care")
    def care(ctx: Any, patient: str) -> str:
        with contextlib.suppress(LookupError):
            ctx.decide(f"chart:{patient}", lambda: _no_chart(patient), kind="lookup")
        note = ctx.decide(f"note:{patient}", lambda: "seen", input={"patient": patient_input})
        if patient.startswith("carol"):
            raise ValueError(f"{patient} is not on the ward")
        return str(note)


def _no_chart(patient: str) -> str:
    raise LookupError(f"no chart for {patient}")


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "clear"])
def test_a_sealed_execution_exports_no_key_message_or_input_in_its_spans(
    traced: Traced, tmp_path: Path, sealed: bool
) -> None:
    """The log seals a decision's key, a failure's message and an input (ADR 0049); a trace
    leaves the log for a collector that erasure cannot reach, so a sealed execution's spans
    carry none of them: a decision span names its kind and its log position, a failure its
    type. In clear (the control) the same spans carry the patient, so the check can see it."""
    from loom_runtime import MasterKey

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    key = MasterKey(bytes(range(32))) if sealed else None
    loom = Loom(url, tracer_provider=traced.provider, encryption=key)
    _register_care(loom, "alice@example.com")
    run = loom.run("care", patient="alice@example.com")
    with pytest.raises(ValueError, match="not on the ward"):
        loom.run("care", patient="carol@example.com")
    other = Loom(url, tracer_provider=traced.provider, encryption=key)
    _register_care(other, "bob@example.com")  # the note's input changed: a divergence
    assert not other.replay(run.execution_id).identical
    spans = traced.spans()
    exported = _exported(spans)
    for name in ("alice", "carol"):  # keys, a failure's message, a flow's error
        assert (name in exported) is not sealed, name
    assert "bob" not in exported  # a changed input is marked on its span, never shown
    decisions = [span for span in spans if span.parent is not None]
    assert len(decisions) == 6  # two runs and a replay, two decisions each
    assert all(span.attributes and "loom.decision.kind" in span.attributes for span in decisions)
    failed = [s for s in decisions if s.status.status_code is StatusCode.ERROR]
    assert {str((s.attributes or {})["error.type"]) for s in failed} == {
        "LookupError",
        "builtins:LookupError",
        "DecisionInputChangedError",
    }
    stored = [s for s in decisions if s.attributes and "loom.log_position" in s.attributes]
    assert len(stored) == 6
    ward = [s for s in spans if s.parent is None and s.status.status_code is StatusCode.ERROR]
    assert [str((s.attributes or {}).get("error.type")) for s in ward] == ["ValueError"]
    other.close()
    loom.close()


def test_a_sealed_model_or_tool_decision_takes_no_name_from_its_key(
    traced: Traced, tmp_path: Path
) -> None:
    """``kind`` is the caller's: a ``model`` or ``tool`` decision may have any key, so a
    sealed execution's GenAI names come from fixed tables, never from the key. A bundle of it
    replayed by a Loom with the master key is traced the same way."""
    from loom_runtime import MasterKey

    loom = Loom(
        f"sqlite:///{tmp_path / 'loom.db'}",
        tracer_provider=traced.provider,
        encryption=MasterKey(bytes(range(32))),
    )

    @loom.flow("care")
    def care(ctx: Any, patient: str) -> str:
        summary = ctx.decide(f"summary:{patient}", lambda: "s", kind="model")
        found = ctx.decide(f"lookup {patient}", lambda: "t", kind="tool")
        answer = ctx.decide(f"model:openai:responses.{patient}", lambda: "u", kind="model")
        chat = ctx.decide("model:openai:chat.completions", lambda: "v", kind="model")
        return str(summary) + str(found) + str(answer) + str(chat)

    run = loom.run("care", patient="alice@example.com")
    bundle = tmp_path / "care.json"
    loom.export(run.execution_id, bundle)
    assert loom.replay_bundle(bundle).identical
    spans = traced.spans()
    assert "alice" not in _exported(spans)
    chats = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 2  # the one key of loom's own shape, recorded and replayed
    assert all((s.attributes or {}).get("gen_ai.provider.name") == "openai" for s in chats)
    loom.close()


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "clear"])
def test_a_decorated_tool_keeps_its_name_in_a_sealed_trace(
    traced: Traced, tmp_path: Path, sealed: bool
) -> None:
    """A ``@tool``'s name is the program's, not the data's: a sealed trace names it as a clear
    one does. A ``tool`` decision no live ``@tool`` registered (its key is the caller's) stays
    unnamed there, even one spelt like a tool's key, once that tool is gone."""
    import gc

    from loom_runtime import MasterKey

    encryption = MasterKey(bytes(range(32))) if sealed else None
    loom = Loom(
        f"sqlite:///{tmp_path / 'loom.db'}",
        tracer_provider=traced.provider,
        encryption=encryption,
    )

    @tool(name="ward_search")
    def search(query: str) -> str:
        return "bed 4"

    def gone(query: str) -> str:
        return "x"

    tool(name="discharged")(gone)  # registered, then dropped: nothing holds it
    gc.collect()

    @loom.flow("care")
    def care(ctx: Any, patient: str) -> str:
        first = search(f"where is {patient}")
        again = search("beds free")
        own = ctx.decide(f"tool:{patient}", lambda: "y", kind="tool")
        stale = ctx.decide("tool:discharged", lambda: "z", kind="tool")
        return first + again + str(own) + str(stale)

    run = loom.run("care", patient="alice@example.com")
    assert loom.replay(run.execution_id).identical
    tools = [
        s
        for s in traced.spans()
        if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
    ]
    named = [(s.attributes or {}).get("gen_ai.tool.name") for s in tools]
    assert [s.name for s in tools].count("execute_tool ward_search") == 4  # 2 run, 2 replayed
    assert named.count("ward_search") == 4
    if sealed:
        assert "alice" not in _exported(traced.spans())
        assert "discharged" not in _exported(traced.spans())
        assert named.count(None) == 4
    else:
        assert named.count("alice@example.com") == 2
        assert named.count("discharged") == 2
    loom.close()


def test_a_failed_execution_span_in_clear_says_the_error_in_its_status(
    traced: Traced, tmp_path: Path
) -> None:
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("ward")
    def ward(ctx: Any) -> str:
        raise ValueError("carol is not on the ward")

    with pytest.raises(ValueError):
        loom.run("ward")
    span = execution_span(traced.spans())
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: carol is not on the ward"
    assert (span.attributes or {})["error.type"] == "ValueError"
    assert [event.name for event in span.events] == ["exception"]
    loom.close()


TOKEN = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
"""A key the default redactor knows (an OpenAI project key's shape)."""


def test_a_key_the_log_refuses_as_a_secret_reaches_no_span(traced: Traced, tmp_path: Path) -> None:
    """The log refuses a decision key holding a secret (it cannot be redacted without
    filing the value elsewhere); the decision's span had been opened with the key in its name
    and attribute, and was exported, "unsettled", with the token in clear."""
    from loom_runtime import SecretIdentifierError

    with traced.loom(tmp_path / "loom.db") as loom:

        @loom.flow("leaky-key")
        def leaky_key(ctx: Any) -> str:
            return str(ctx.decide(f"fetch:{TOKEN}", lambda: "x"))

        with pytest.raises(SecretIdentifierError):
            loom.run("leaky-key")
    assert TOKEN not in _exported(traced.spans())


def test_a_key_first_asked_by_a_replay_reaches_no_span_when_it_holds_a_secret(
    traced: Traced, tmp_path: Path
) -> None:
    """The code changed after the recording and now asks a key holding a secret: the replay
    reports the unrecorded key, as it must. Its span was started from the key unchecked, so
    the token left the process in the span's name and ``loom.decision.key``, although the log
    would have refused to store it and a live run's span never carried it."""
    asked = {"key": "fetch:plain"}
    with traced.loom(tmp_path / "loom.db") as loom:

        @loom.flow("changed-key")
        def changed_key(ctx: Any) -> str:
            return str(ctx.decide(asked["key"], lambda: "x"))

        run = loom.run("changed-key")
        asked["key"] = f"fetch:{TOKEN}"
        traced.take()
        assert not loom.replay(run.execution_id).identical
    spans = traced.spans()
    assert TOKEN not in _exported(spans)
    failed = {
        span.name.split(" ")[1]: (span.attributes or {})["error.type"]
        for span in spans
        if (span.attributes or {}).get("error.type")
    }
    # The control: the divergent decision still has its span, marked; and so is the replay's
    # own, which the flow left with that error.
    assert failed == {"decide": "UnrecordedDecisionError", "replay": "UnrecordedDecisionError"}


def test_a_span_name_is_bounded_however_long_the_key_or_model(
    traced: Traced, tmp_path: Path
) -> None:
    """OpenTelemetry's limits bound attributes, not names: a span named after a 1 MB key (or
    a model call's 1 MB model name) carried it whole to the collector, over common export
    message limits, on every run and replay of the execution."""
    long = "k" * (1 << 20)
    with traced.loom(tmp_path / "loom.db") as loom:

        @loom.flow("long-names")
        def long_names(ctx: Any) -> str:
            ctx.decide(long, lambda: "v")
            return str(
                ctx.decide(
                    "model:openai:chat.completions",
                    lambda: "m",
                    input={"model": long},
                    kind="model",
                )
            )

        run = loom.run("long-names")
        assert loom.replay(run.execution_id).identical
    spans = traced.spans()
    decisions = [span for span in spans if span.parent is not None]
    assert len(decisions) == 4
    assert all(len(span.name) <= 256 for span in spans)
    assert {span.name[:18] for span in decisions} == {"loom decide kkkkkk", "chat kkkkkkkkkkkkk"}


def test_a_secret_in_a_failure_message_is_redacted_in_spans_as_in_the_log(
    traced: Traced, tmp_path: Path
) -> None:
    """The log stores a failure's message redacted (ADR 0012); the spans carried it whole:
    the decision's exception event (message and traceback) and the execution's status."""

    def connect() -> str:
        raise ValueError(f"cannot reach postgresql://app:{TOKEN}@db/prod")

    with traced.loom(tmp_path / "loom.db") as loom:

        @loom.flow("leaky-failure")
        def leaky_failure(ctx: Any) -> str:
            return str(ctx.decide("connect", connect))

        with pytest.raises(ValueError):
            loom.run("leaky-failure")
    exported = _exported(traced.spans())
    assert TOKEN not in exported
    assert "ValueError" in exported and "cannot reach" in exported  # the control: still said


@pytest.mark.parametrize("where", ["decision", "flow"])
def test_a_url_credential_in_a_failure_message_reaches_no_span(
    traced: Traced, tmp_path: Path, where: str
) -> None:
    """An HTTP error's message names the URL it failed on, ``?key=`` included, which no pattern
    of the redactor knows. The log stores it without the URL's credentials (ADR 0024, amended
    "failure messages"); the decision's exception event and the execution's status carried
    it whole (an attack review of the spans)."""
    opaque = "9f3b2c71d4e8a6b05c1d2e3f4a5b6c7d"

    def fetch() -> str:
        raise ValueError(f"503 for url 'https://api.example.com/weather?q=Paris&key={opaque}'")

    with traced.loom(tmp_path / "loom.db") as loom:

        @loom.flow("weather")
        def weather(ctx: Any) -> str:
            return str(ctx.decide("fetch", fetch) if where == "decision" else fetch())

        with pytest.raises(ValueError):
            loom.run("weather")
    exported = _exported(traced.spans())
    assert opaque not in exported
    assert "api.example.com/weather?q=Paris" in exported  # the control: the URL is still said


class _Failing:
    """A span processor that raises when a span ends (a collector's client that is down)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: Any) -> None:
        raise ConnectionError("collector down")

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_a_span_processor_that_raises_changes_nothing_the_flow_sees_or_records(
    tmp_path: Path,
) -> None:
    """A processor raising in ``on_end`` came out of ``ctx.decide`` after the value was
    stored: a flow catching it took its fallback live, the execution was recorded failed,
    and its replay (which took the stored value) differed. Tracing changes no outcome."""
    provider = TracerProvider()
    provider.add_span_processor(_Failing())  # type: ignore[arg-type]
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", tracer_provider=provider) as loom:

        @loom.flow("robust")
        def robust(ctx: Any) -> str:
            try:
                return str(ctx.decide("a", lambda: "A"))
            except ConnectionError:
                return "fallback"

        run = loom.run("robust")
        assert run.output == "A"
        assert loom.execution(run.execution_id).error is None
        assert loom.replay(run.execution_id).identical


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


def _raise_unprintable() -> str:
    raise _Unprintable


def test_a_failure_that_cannot_print_itself_is_an_error_span(
    traced: Traced, tmp_path: Path
) -> None:
    """Core review of 6 December: the span took ``str(error)`` and raised in its place."""
    loom = traced.loom(tmp_path / "loom.db")

    @loom.flow("f")
    def f(ctx: Any) -> str:
        try:
            ctx.decide("fetch", _raise_unprintable, kind="tool")
        except _Unprintable:
            return "fallback"
        return "found"

    assert loom.run("f").output == "fallback"
    live = decision_spans(traced.take())["fetch"]
    assert live.status.status_code is StatusCode.ERROR
    (event,) = live.events
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "<exception str() failed>"
