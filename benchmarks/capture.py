"""Section "capture": what recording an unchanged OpenAI client costs, and what replaying it buys.

Every arm drives the real ``openai`` SDK against the loopback provider the capture tests use
(:class:`replay_tests.capture.provider_server.ProviderServer`), started afresh for each sample.

**call** and **stream**: one flow alternates, call by call and in a rotating order, two
clients sending the same request: the raw SDK as a user builds it
(``openai.OpenAI(base_url=...)``) and ``wrap(openai.OpenAI(...))``, which runs on the same
default HTTP client of the SDK with loom's transport in it. Alternating inside one sample
hands both the same background load, so the difference of their percentiles is what
recording adds. For a stream the figure is the time to the first chunk (a stream is stored
when it ends). The first calls of each client (connection set-up) are left out.

**append**: the same flow shape with each call replaced by ``ctx.decide`` of a response of the
same size, the request as its input: the bare durable append at loom's default (SQLite, WAL,
``synchronous=NORMAL``) that recording a call cannot avoid. The call target is "added at most
1 ms more than this append".

**conversation**: 50 model calls (20 with ``--quick``) of a tool-using conversation (each
question answered in two calls: one asks for the ``lookup`` tool, the tool runs as a decision,
one answers from its result; every request carries the whole conversation so far, as a chat
agent's do). loom
records it with a wrapped client; VCR.py records it with a raw client into a YAML cassette
with the settings of LangSmith's request cache (``langsmith.utils.with_cache``: match on
method, URI, path and body; request headers dropped). The server is stopped, and each replays
it (loom from a second ``Loom`` on the file and from the exported bundle; VCR.py with
``record_mode="none"``) alternately with the **SDK floor**, the same conversation answered
from memory by a mock transport in the SDK's own default HTTP client: what any replay
through the SDK costs at least. A replay's own time is its time minus the floor's; loom's is
also timed inside loom (its transport, its tool decisions and its work around the flow), which
is the verdict, since a difference of two large totals is mostly noise. A replay that is not
identical, or a cassette left partly unplayed, stops the harness.

**HTTP layer**: the request bodies the SDK sent in that conversation, posted by a plain
``httpx.Client`` with no SDK, recorded by ``loom_runtime.transport()`` and by VCR.py, and
replayed alternately with a client answered from memory: the replay machinery without the
SDK's request building.

Negative control: a streamed answer is recorded with a wrapped client and exported, one word
of one recorded chunk is changed in the bundle (same length, the input untouched, re-sealed)
and the bundle is replayed: the replay must report the changed output and nothing else. A
replay that did not re-emit the recorded chunks would call it identical.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Progress,
    Results,
    Sample,
    SectionResult,
    Settings,
    Stats,
    Table,
    interleave,
    scratch_directory,
)
from benchmarks.stores import fresh_sqlite, sqlite_bytes
from loom_runtime import Loom
from loom_runtime.bundle import read_bundle, write_bundle

CALLS = 400
QUICK_CALLS = 60
WARM_UP = 5
"""Calls of each client left out of the percentiles: the first ones open the connection."""
TURNS = 50
"""Model calls in the conversation (two per question: the tool call, then the answer)."""
QUICK_TURNS = 20
"""The conversation's model calls with ``--quick``: ~5 s less of a run a smoke test waits for."""
REPEATS = 5
QUICK_REPEATS = 1
"""Replays of the conversation per sample, each followed by its floor's (see ``_Paired``)."""
ADDED_TARGET_MS = 1.0
TTFT_TARGET_MS = 1.0
REPLAY_TARGET = 10_000.0

MODEL = "gpt-4o-mini"
API_KEY = "sk-loom-bench-not-a-key"
SYSTEM = "You answer operators' questions from the runbooks; look them up with the tool first."
TOPICS = (
    "disk pressure on the primary",
    "replication lag after a failover",
    "autovacuum falling behind on a hot table",
    "connection pool exhaustion at peak",
    "a long running transaction holding locks",
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find the runbook passage that answers a question.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]
CONTROL_QUESTION = "why does vacuum stall on the orders table"
CONTROL_WORD, CONTROL_ALTERED = "vacuum", "VACUUM"

Client = Any
"""An ``openai.OpenAI``; the SDK is imported only when the section runs."""


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Measure every arm in interleaved rounds, then run the negative control once."""
    calls = QUICK_CALLS if settings.quick else CALLS
    repeats = QUICK_REPEATS if settings.quick else REPEATS
    turns = QUICK_TURNS if settings.quick else TURNS
    arms = [
        Arm("call", partial(_paired_calls, calls, stream=False)),
        Arm("stream", partial(_paired_calls, calls, stream=True)),
        Arm("append", partial(_appends, calls)),
        Arm("loom conversation", partial(_loom_conversation, turns, repeats)),
        Arm("VCR.py conversation", partial(_vcr_conversation, turns, repeats)),
        Arm("HTTP layer", partial(_http_layer, _SdkFloor(turns).requests, repeats)),
    ]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    progress("negative control: a replay with one recorded chunk altered")
    note = f"median of {settings.rounds} interleaved rounds (low-high)"
    return SectionResult(
        notes=(
            *(paragraph.replace("\n", " ") for paragraph in __doc__.split("\n\n")[1:]),
            f"Sizes: {calls} calls of each client per sample ({WARM_UP} more first, left "
            f"out); the conversation and the HTTP layer replayed {repeats} times per sample "
            "(the median kept). The provider answers from a thread of this process.",
        ),
        tables=(
            _latency_table(results, note),
            _conversation_table(results, note, turns),
            _http_layer_table(results, note, turns),
            _recording_table(results, note, turns),
        ),
        controls=(altered_chunk_control(),),
    )


# -- call, stream, append --------------------------------------------------------------------


def _paired_calls(calls: int, *, stream: bool) -> Sample:
    """Per-call latency of the raw and the wrapped client, alternated inside one flow."""
    latencies: dict[str, list[float]] = {"raw": [], "recorded": []}
    with (
        _server() as server,
        _raw_client(server.openai_url) as raw,
        recording_client(server.openai_url) as recording,
        fresh_sqlite() as (url, _),
        Loom(url) as loom,
    ):
        timed = _time_to_first_chunk if stream else _time_call
        clients = [("raw", raw), ("recorded", recording)]

        def flow(ctx: Any, n: int) -> int:
            for index in range(n):
                messages = [
                    {"role": "user", "content": f"question {index}: {TOPICS[index % len(TOPICS)]}"}
                ]
                for name, client in clients if index % 2 else reversed(clients):
                    latencies[name].append(timed(client, messages))
            return n

        loom.flow("capture-calls")(flow)
        loom.run("capture-calls", n=calls + WARM_UP)
    raw_ms, recorded_ms = (latencies[name][WARM_UP:] for name, _ in clients)
    return {
        **_percentiles("raw", raw_ms),
        **_percentiles("recorded", recorded_ms),
        "added_p50": statistics.median(recorded_ms) - statistics.median(raw_ms),
        "added_p95": _p95(recorded_ms) - _p95(raw_ms),
    }


def _time_call(client: Client, messages: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    reply = client.chat.completions.create(model=MODEL, messages=messages)
    elapsed = time.perf_counter() - started
    if not reply.choices[0].message.content:
        raise InstrumentError("the provider answered an empty message: nothing was measured")
    return 1000 * elapsed


def _time_to_first_chunk(client: Client, messages: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    stream = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    chunks = iter(stream)
    next(chunks)
    elapsed = time.perf_counter() - started
    if sum(1 for _ in chunks) < 2:
        raise InstrumentError("the stream ended after its first chunk: nothing was measured")
    return 1000 * elapsed


def _appends(calls: int) -> Sample:
    """Per-decision latency of ``ctx.decide`` storing a response-sized value and its request."""
    with _server() as server, _raw_client(server.openai_url) as client:
        messages = [{"role": "user", "content": f"question 0: {TOPICS[0]}"}]
        value = client.chat.completions.create(model=MODEL, messages=messages).model_dump(
            mode="json"
        )
    request = {"model": MODEL, "messages": messages}
    appended_ms: list[float] = []
    with fresh_sqlite() as (url, _), Loom(url) as loom:

        def flow(ctx: Any, n: int) -> int:
            for index in range(n):
                started = time.perf_counter()
                ctx.decide(f"append-{index}", partial(dict, value), input=request, kind="model")
                appended_ms.append(1000 * (time.perf_counter() - started))
            return n

        loom.flow("capture-appends")(flow)
        loom.run("capture-appends", n=calls + WARM_UP)
    return _percentiles("append", appended_ms[WARM_UP:])


def _percentiles(name: str, samples_ms: list[float]) -> dict[str, float]:
    return {f"{name}_p50": statistics.median(samples_ms), f"{name}_p95": _p95(samples_ms)}


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20, method="inclusive")[18]


# -- the conversation ------------------------------------------------------------------------


def _converse(client: Client, lookup: Callable[[str], str], turns: int) -> list[str]:
    """A tool-using conversation of ``turns`` model calls; the answers, in order.

    Each question is answered in two calls: the provider asks for ``lookup`` (its query is the
    question), ``lookup`` runs, and the provider answers from the result. Every request carries
    the whole conversation so far, as a chat agent's do.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    answers = []
    for index in range(turns // 2):
        messages.append({"role": "user", "content": f"{index}: {TOPICS[index % len(TOPICS)]}"})
        asked = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        call = asked.choices[0].message.tool_calls[0]
        messages.append(asked.choices[0].message.model_dump(mode="json", exclude_none=True))
        result = lookup(call.function.arguments)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        answered = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        answer = answered.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": answer})
        answers.append(answer)
    return answers


def _lookup(arguments: str) -> str:
    """The tool: a runbook passage for the query (deterministic, so live and replay agree)."""
    query = json.loads(arguments)["query"]
    return f"runbooks/{len(query) % 7}.md says: for {query}, follow the checklist in order"


def _loom_conversation(turns: int, repeats: int) -> Sample:
    """Record the conversation, stop the server, replay from the log and from the bundle.

    Besides each replay's total, loom's own time is timed inside loom (see :class:`_LoomClock`),
    so the own-share verdict does not rest on a small difference of two large, noisy totals.
    """
    clock = _LoomClock(turns)
    with (
        fresh_sqlite() as (url, path),
        scratch_directory() as directory,
        _server() as server,
        recording_client(server.openai_url) as client,
    ):

        def conversation(ctx: Any, turns: int) -> list[str]:
            def lookup(arguments: str) -> str:
                compute = partial(_lookup, arguments)
                with clock.loom():
                    return ctx.decide("tool:lookup", compute, input=arguments, kind="tool")

            with clock.flow():
                return _converse(client, lookup, turns)

        with Loom(url) as loom:
            loom.flow("capture-conversation")(conversation)
            started = time.perf_counter()
            recorded = loom.run("capture-conversation", turns=turns)
            recording = time.perf_counter() - started
            bundle = loom.export(recorded.execution_id, directory / "conversation.json")
        server.stop()  # from here on a request would be refused
        _check_answers("the loom recording", recorded.output, turns)
        clock.time_transport_of(client)
        floor = _SdkFloor(turns)
        with Loom(url) as loom:
            loom.flow("capture-conversation")(conversation)
            from_log = floor.paired(
                clock.timed(lambda: _identical("log", loom.replay(recorded.execution_id))),
                repeats,
            )
            log_inside = clock.take()
            from_bundle = floor.paired(
                clock.timed(lambda: _identical("bundle", loom.replay_bundle(bundle))), repeats
            )
            bundle_inside = clock.take()
        return {
            "record_ms": 1000 * recording / turns,
            "log_replay_per_s": turns / from_log.replay,
            "log_own_ms": 1000 * from_log.own / turns,
            "log_inside_ms": 1000 * log_inside / turns,
            "bundle_replay_per_s": turns / from_bundle.replay,
            "bundle_own_ms": 1000 * from_bundle.own / turns,
            "bundle_inside_ms": 1000 * bundle_inside / turns,
            "floor_per_s": turns / statistics.median([from_log.floor, from_bundle.floor]),
            "log_kb": sqlite_bytes(path) / 1024,
            "bundle_kb": bundle.stat().st_size / 1024,
        }


class _LoomClock:
    """Loom's own time in a replay of the conversation, timed where loom runs.

    A replay's time is loom's work around the flow (reading the execution, checking the
    output) plus the flow's body; inside the body, loom runs in its transport (matching each
    call to its recorded decision, comparing the request, handing the recorded response back)
    and in the tool's ``ctx.decide``. Everything else in the body is the SDK and the
    benchmark's own conversation code. So loom's time = (replay - body) + transport + tool
    decisions. The difference to the SDK floor is kept beside it as a cross-check: it measures
    the same thing, but as a small difference of two large totals it is mostly noise.
    """

    def __init__(self, turns: int) -> None:
        self._turns = turns
        self._inside = 0.0
        self._body = 0.0
        self._calls = 0
        self._replays: list[float] = []

    @contextmanager
    def loom(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._inside += time.perf_counter() - started

    @contextmanager
    def flow(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._body += time.perf_counter() - started

    def time_transport_of(self, client: Client) -> None:
        """Time every request the wrapped client's loom transport handles from now on."""
        http_client = client._client  # the SDK's HTTP client, which holds loom's transport
        transport = http_client._transport
        clock = self

        class Timed:
            def handle_request(self, request: Any) -> Any:
                clock._calls += 1
                with clock.loom():
                    return transport.handle_request(request)

            def close(self) -> None:
                transport.close()

        http_client._transport = Timed()

    def timed(self, replay: Callable[[], None]) -> Callable[[], None]:
        """``replay``, adding loom's own seconds in it to this clock's samples."""

        def run() -> None:
            self._inside = self._body = 0.0
            self._calls = 0
            started = time.perf_counter()
            replay()
            total = time.perf_counter() - started
            if self._calls != self._turns or not 0 < self._body < total:
                raise InstrumentError(
                    f"loom's clock saw {self._calls} transport calls (expected {self._turns}) "
                    "or a flow body outside its replay: the own time would miss part of loom"
                )
            self._replays.append(total - self._body + self._inside)

        return run

    def take(self) -> float:
        """The median of loom's own seconds per replay since the last ``take``."""
        own, self._replays = statistics.median(self._replays), []
        return own


def _identical(source: str, result: Any) -> None:
    if not result.identical:
        raise InstrumentError(f"the timed replay from the {source} diverged: {result.describe()}")


def _vcr_conversation(turns: int, repeats: int) -> Sample:
    """Record the conversation into a VCR.py cassette, stop the server, play it back."""
    import vcr

    with (
        scratch_directory() as directory,
        _server() as server,
        _raw_client(server.openai_url) as client,
    ):
        cassette = directory / "conversation.yaml"
        with _vcr(vcr, directory, "new_episodes").use_cassette(cassette.name):
            started = time.perf_counter()
            recorded = _converse(client, _lookup, turns)
            recording = time.perf_counter() - started
        server.stop()  # from here on a request would be refused
        _check_answers("the VCR.py recording", recorded, turns)

        def play_back() -> None:
            with _vcr(vcr, directory, "none").use_cassette(cassette.name) as played:
                replayed = _converse(client, _lookup, turns)
                if not played.all_played:
                    raise InstrumentError("the VCR.py replay left recorded requests unplayed")
            if replayed != recorded:
                raise InstrumentError("the VCR.py replay answered differently from its recording")

        paired = _SdkFloor(turns).paired(play_back, repeats)
        return {
            "record_ms": 1000 * recording / turns,
            "replay_per_s": turns / paired.replay,
            "own_ms": 1000 * paired.own / turns,
            "cassette_kb": cassette.stat().st_size / 1024,
        }


@dataclass(frozen=True, kw_only=True)
class _Paired:
    """Seconds of a replay and of the floor right after it: medians over the repeats, and the
    median of the differences of each pair (the replay's own time: a pair shares its load,
    so this is steadier than a difference of medians)."""

    replay: float
    floor: float
    own: float


class _SdkFloor:
    """The conversation through the raw SDK, every reply handed over from memory.

    What replaying the conversation through the SDK costs at the very least (building each
    request, parsing each reply), whatever answers it. A replay's own share of its time is its
    time minus this floor's, measured alternately in the same sample so both see the same load.
    """

    def __init__(self, turns: int) -> None:
        from replay_tests.capture.provider_server import ROUTES

        self._turns = turns
        self._http = _sdk_http()
        self._replies: list[bytes] = []
        self.requests: list[bytes] = []
        """The request bodies the SDK sent, in order (what the HTTP-layer arm posts)."""

        def provider(request: Any) -> Any:
            self.requests.append(request.content)
            reply, _ = ROUTES[request.url.path](json.loads(request.content))
            self._replies.append(json.dumps(reply).encode())
            return _json_response(self._http, self._replies[-1])

        with self._client(provider) as live:
            self._recorded = _converse(live, _lookup, turns)
        self._answers = iter(self._replies)
        self._memory = self._client(lambda _: _json_response(self._http, next(self._answers)))

    def paired(self, replay: Callable[[], None], repeats: int) -> _Paired:
        """``replay`` and the floor, run alternately ``repeats`` times (see :class:`_Paired`)."""
        replays, floors = [], []
        for _ in range(repeats):
            replays.append(_seconds(replay))
            floors.append(_seconds(self._replay))
        return _Paired(
            replay=statistics.median(replays),
            floor=statistics.median(floors),
            own=statistics.median(r - f for r, f in zip(replays, floors, strict=True)),
        )

    def _replay(self) -> None:
        self._answers = iter(self._replies)
        if _converse(self._memory, _lookup, self._turns) != self._recorded:
            raise InstrumentError("the SDK floor answered differently from its recording")

    def _client(self, handler: Callable[[Any], Any]) -> Client:
        import openai

        return openai.OpenAI(
            base_url="http://provider.invalid/v1",
            api_key=API_KEY,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(transport=self._http.MockTransport(handler)),
        )


def _sdk_http() -> ModuleType:
    """The httpx-compatible package the SDK's default HTTP client is built on (``httpx2`` for
    current SDKs, ``httpx`` for older ones): the floor must run on the stack ``wrap`` runs on."""
    import openai

    from loom_runtime.http_transport import http_package

    return http_package(openai.DefaultHttpxClient, "Client")


def _http_layer(bodies: list[bytes], repeats: int) -> Sample:
    """The conversation's requests with no SDK: replayed by loom, by VCR.py, and from memory.

    A plain ``httpx.Client`` posts the bodies the SDK sent, recorded by loom's transport in a
    flow and by VCR.py in a cassette; with the server stopped each replays ``repeats`` times,
    alternated with a client answered from memory (httpx's own cost, the floor). Without the
    SDK's request building, what is left is the replay machinery itself.
    """
    import httpx
    import vcr

    import loom_runtime

    pending: list[bytes] = []
    answering = httpx.MockTransport(lambda _: _json_response(httpx, pending.pop(0)))
    with (
        fresh_sqlite() as (url, _),
        scratch_directory() as directory,
        _server() as server,
        httpx.Client(base_url=server.openai_url, transport=loom_runtime.transport()) as recording,
        httpx.Client(base_url=server.openai_url) as plain,
        httpx.Client(base_url=server.openai_url, transport=answering) as memory,
    ):

        def exchanges(ctx: Any) -> list[str]:
            return _post_all(recording, bodies)

        with Loom(url) as loom:
            loom.flow("capture-exchanges")(exchanges)
            recorded = loom.run("capture-exchanges")
        cassette = directory / "exchanges.yaml"
        with _vcr(vcr, directory, "new_episodes").use_cassette(cassette.name):
            taped = _post_all(plain, bodies)
        server.stop()  # from here on a request would be refused
        if taped != recorded.output:
            raise InstrumentError("loom and VCR.py recorded different replies to the same requests")
        replies = [reply.encode() for reply in taped]

        def from_memory() -> None:
            pending[:] = replies
            if _post_all(memory, bodies) != taped:
                raise InstrumentError("the httpx floor answered differently")

        def play_back() -> None:
            with _vcr(vcr, directory, "none").use_cassette(cassette.name):
                if _post_all(plain, bodies) != taped:
                    raise InstrumentError("the VCR.py replay answered differently")

        timings: dict[str, list[float]] = {"loom": [], "vcr": [], "floor": []}
        with Loom(url) as loom:
            loom.flow("capture-exchanges")(exchanges)

            def replay() -> None:
                _identical("log", loom.replay(recorded.execution_id))

            for _ in range(repeats):
                for name, work in (("loom", replay), ("vcr", play_back), ("floor", from_memory)):
                    timings[name].append(_seconds(work))
    return {f"{name}_per_s": len(bodies) / statistics.median(t) for name, t in timings.items()}


def _json_response(http: ModuleType, body: bytes) -> Any:
    """A response of the package ``http`` (httpx or httpx2) carrying a JSON body."""
    return http.Response(200, content=body, headers={"content-type": "application/json"})


def _post_all(client: Any, bodies: list[bytes]) -> list[str]:
    """Post every body to the chat completions route; the reply texts, in order."""
    headers = {"content-type": "application/json"}
    return [client.post("/chat/completions", content=body, headers=headers).text for body in bodies]


def _seconds(work: Callable[[], None]) -> float:
    """How long ``work`` takes, started without the previous work's garbage."""
    gc.collect()
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _vcr(vcr: Any, directory: Path, record_mode: str) -> Any:
    """A VCR configured as LangSmith's request cache configures it (``with_cache``)."""

    def without_headers(request: Any) -> Any:
        request.headers = {}
        return request

    return vcr.VCR(
        serializer="yaml",
        cassette_library_dir=str(directory),
        record_mode=record_mode,
        match_on=["uri", "method", "path", "body"],
        filter_headers=["authorization", "Set-Cookie"],
        before_record_request=without_headers,
    )


def _check_answers(what: str, answers: Any, turns: int) -> None:
    if not isinstance(answers, list) or len(answers) != turns // 2 or not all(answers):
        raise InstrumentError(f"{what} did not answer every question: {answers!r:.200}")
    if not all(str(answer).startswith("Answer: ") for answer in answers):
        raise InstrumentError(f"{what} answered without its tool result: {answers[0]!r}")


# -- the negative control --------------------------------------------------------------------


def altered_chunk_control() -> Control:
    """Replay a bundle in which one word of one recorded stream chunk was changed."""
    with (
        fresh_sqlite() as (url, _),
        scratch_directory() as directory,
        _server() as server,
        recording_client(server.openai_url) as client,
        Loom(url) as loom,
    ):
        exported = record_stream(loom, client, directory / "stream.json")
        altered = alter_first_chunk(exported, directory / "altered.json")
        server.stop()
        result = loom.replay_bundle(altered)
    found = tuple(type(divergence).__name__ for divergence in result.divergences)
    return Control(
        name=f"replay of a recorded stream with {CONTROL_WORD!r} changed in one chunk",
        expected="divergent (OutputChangedError only)",
        observed=f"divergent ({', '.join(found)})" if found else "identical",
        held=found == ("OutputChangedError",),
    )


def record_stream(loom: Loom, client: Client, path: Path) -> Path:
    """Record CONTROL_QUESTION answered as a stream (flow ``capture-stream``); its bundle."""

    def streamed(ctx: Any, question: str) -> str:
        messages = [{"role": "user", "content": question}]
        stream = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream)

    loom.flow("capture-stream")(streamed)
    recorded = loom.run("capture-stream", question=CONTROL_QUESTION)
    return loom.export(recorded.execution_id, path)


def alter_first_chunk(path: Path, into: Path) -> Path:
    """A copy of the bundle with CONTROL_WORD changed in the first recorded value holding it.

    Only the bytes of a decision's value are touched (its input asks the same question, and
    is left byte for byte as stored), with a word of the same length, and the bundle is
    re-sealed: what changed is exactly one streamed chunk.
    """
    bundle = read_bundle(path)
    events = list(bundle.events)
    for index, event in enumerate(events):
        value = bytes(msgspec.json.decode(event.state, type=_StoredValue).value).decode()
        if CONTROL_WORD in value:
            altered = value.replace(CONTROL_WORD, CONTROL_ALTERED, 1)
            events[index] = msgspec.structs.replace(
                event, state=event.state.replace(value, altered, 1)
            )
            break
    else:
        raise InstrumentError(f"no recorded value holds {CONTROL_WORD!r}: nothing to alter")
    resealed = bundle.resealed(events)
    return write_bundle(resealed, into)


class _StoredValue(msgspec.Struct):
    """An event's ``value`` field exactly as stored (empty when it has none; the rest skipped)."""

    value: msgspec.Raw = msgspec.Raw()


# -- shared ----------------------------------------------------------------------------------


@contextmanager
def _server() -> Iterator[Any]:
    """A fresh loopback provider for one sample, stopped afterwards."""
    from replay_tests.capture.provider_server import ProviderServer

    with ProviderServer() as server:
        yield server


def _raw_client(base_url: str) -> Client:
    """The baseline: the real SDK as a user builds it, nothing recorded."""
    import openai

    return openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)


def recording_client(base_url: str) -> Client:
    """The client under test: the real SDK, wrapped, so each call in a flow is recorded."""
    import openai

    from loom_runtime import wrap

    return wrap(openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0))


def _latency_table(results: Results, note: str) -> Table:
    append = results["append"]
    rows = []
    for label, arm, percentile in (
        ("call, p50", results["call"], "p50"),
        ("call, p95", results["call"], "p95"),
        ("stream, first chunk, p50", results["stream"], "p50"),
        ("stream, first chunk, p95", results["stream"], "p95"),
    ):
        added = arm[f"added_{percentile}"]
        if label.startswith("call"):
            appended = append[f"append_{percentile}"]
            allowed = ADDED_TARGET_MS + appended.median
            append_cell = appended.cell(" ms")
        else:
            allowed = TTFT_TARGET_MS
            append_cell = "n/a (stored when the stream ends)"
        rows.append(
            (
                label,
                arm[f"raw_{percentile}"].cell(" ms"),
                arm[f"recorded_{percentile}"].cell(" ms"),
                _difference(added),
                append_cell,
                f"{_met(added.median <= allowed)} (<= {allowed:.2f} ms)",
            )
        )
    return Table(
        title="Recording an unchanged OpenAI client: added latency per call",
        columns=(
            "measure",
            "raw SDK",
            "wrapped SDK",
            "added (wrapped - raw)",
            "bare durable append (default)",
            f"target: added <= {ADDED_TARGET_MS:g} ms (+ the append, for a call)",
        ),
        rows=tuple(rows),
        note=note + "; a difference is between the same sample's percentiles of clients "
        "alternated call by call",
    )


def _conversation_table(results: Results, note: str, turns: int) -> Table:
    loom, cassette = results["loom conversation"], results["VCR.py conversation"]
    vcr_speed = cassette["replay_per_s"]
    replays = (
        ("loom, from the log", loom["log_replay_per_s"], loom["log_own_ms"], "log"),
        ("loom, from the bundle", loom["bundle_replay_per_s"], loom["bundle_own_ms"], "bundle"),
        ("VCR.py cassette", vcr_speed, cassette["own_ms"], None),
    )
    sizes = {"log": loom["log_kb"], "bundle": loom["bundle_kb"], None: cassette["cassette_kb"]}
    rows = []
    for label, speed, own_ms, source in replays:
        # loom's share is timed inside loom; VCR.py's only as the difference to the floor.
        inside = loom[f"{source}_inside_ms"] if source else own_ms
        rows.append(
            (
                label,
                speed.cell("/s"),
                _met(speed.median >= REPLAY_TARGET),
                _difference(own_ms),
                inside.cell(" ms") if source else "n/a (not instrumented)",
                _own_speed(inside),
                f"{speed.median / vcr_speed.median:.2f}x",
                sizes[source].cell(" KB"),
            )
        )
    floor = loom["floor_per_s"]
    rows.append(
        (
            "SDK floor: replies from memory",
            floor.cell("/s"),
            _met(floor.median >= REPLAY_TARGET),
            "0 (the floor)",
            "",
            "",
            f"{floor.median / vcr_speed.median:.2f}x",
            "",
        )
    )
    return Table(
        title=f"A {turns}-call tool-using conversation replayed with the server stopped",
        columns=(
            "replayed by",
            "model calls/s (SDK included)",
            f"target >= {REPLAY_TARGET:,.0f}/s",
            "own time per call (minus the SDK floor)",
            "loom's time per call (timed inside loom)",
            f"own share as calls/s (target >= {REPLAY_TARGET:,.0f}/s)",
            "speed vs VCR.py",
            "stored size",
        ),
        rows=tuple(rows),
        note=note + "; minus the SDK floor: each replay minus the floor run right after it, "
        "median of the repeats in a sample (a small difference of large totals: a cross-check); "
        "timed inside loom: the replay's time outside the flow's body plus the time in loom's "
        "transport and the tool's ctx.decide, median of the repeats (the own-share verdict for "
        "loom; VCR.py's is the difference); stored size: the SQLite file (checkpointed), the "
        "bundle file, the YAML cassette",
    )


def _http_layer_table(results: Results, note: str, turns: int) -> Table:
    arm = results["HTTP layer"]
    vcr_speed, floor = arm["vcr_per_s"], arm["floor_per_s"]
    rows = []
    for label, speed in (
        ("loom, from the log", arm["loom_per_s"]),
        ("VCR.py cassette", vcr_speed),
    ):
        own_ms = 1000 / speed.median - 1000 / floor.median
        rows.append(
            (
                label,
                speed.cell("/s"),
                _met(speed.median >= REPLAY_TARGET),
                f"{own_ms:.2f} ms",
                _own_speed(Stats((own_ms,))),
                f"{speed.median / vcr_speed.median:.2f}x",
            )
        )
    rows.append(
        (
            "httpx floor: replies from memory",
            floor.cell("/s"),
            _met(floor.median >= REPLAY_TARGET),
            "0 (the floor)",
            "",
            f"{floor.median / vcr_speed.median:.2f}x",
        )
    )
    return Table(
        title=f"The same {turns} requests replayed with no SDK (a plain httpx.Client)",
        columns=(
            "replayed by",
            "requests/s",
            f"target >= {REPLAY_TARGET:,.0f}/s",
            "own time per request (minus the floor)",
            f"own share as requests/s (target >= {REPLAY_TARGET:,.0f}/s)",
            "speed vs VCR.py",
        ),
        rows=tuple(rows),
        note=note + "; the request bodies the SDK sent in the conversation, each replay the "
        "median of the repeats in a sample; own time from the medians",
    )


def _recording_table(results: Results, note: str, turns: int) -> Table:
    loom, cassette = results["loom conversation"], results["VCR.py conversation"]
    return Table(
        title=f"Recording the {turns}-call conversation against the loopback server",
        columns=("recorded by", "per model call", "stored size"),
        rows=(
            (
                "loom (SQLite file, defaults)",
                loom["record_ms"].cell(" ms"),
                loom["log_kb"].cell(" KB"),
            ),
            (
                "VCR.py cassette",
                cassette["record_ms"].cell(" ms"),
                cassette["cassette_kb"].cell(" KB"),
            ),
        ),
        note=note + "; includes the server's time to answer",
    )


def _own_speed(own_ms: Stats) -> str:
    """Calls per second the replay's own share of the time would allow, with its verdict.

    A share whose range reaches zero is noise, not a speed: no verdict. Otherwise the target
    counts as met only if even the slowest round's share meets it.
    """
    if min(own_ms.samples) <= 0:
        return "n/a (within noise: the range reaches 0)"
    speed = 1000 / own_ms.median
    return f"{speed:,.0f}/s: {_met(1000 / max(own_ms.samples) >= REPLAY_TARGET)}"


def _difference(stats: Stats) -> str:
    """A difference of latencies, with its sign: noise can make a small one negative."""
    low, high = min(stats.samples), max(stats.samples)
    return f"{stats.median:+.2f} ms ({low:+.2f} to {high:+.2f})"


def _met(met: bool) -> str:
    return "met" if met else "MISSED"
