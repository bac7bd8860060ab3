"""A client derived from a wrapped one stays wrapped, its SDK retries off (ADR 0026, amended
"derived clients"; ADR 0025).

An attack review called ``wrapped.with_options(max_retries=2)``, as the OpenAI README shows
per request: the SDK's ``copy`` kept loom's HTTP client but turned the SDK's own retries on
again, so each attempt was a decision of its own and the replay handed back the recorded 503
and slept the SDK's retry pause again. A derived client (``with_options``, ``copy``) now
keeps ``max_retries=0`` and asks loom's retry policy for the count it was given.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import Loom, wrap
from loom_runtime.backoff import Backoff
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import anthropic
    import openai
else:
    anthropic = deferred("anthropic")
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

SAID: Any = [{"role": "user", "content": "q"}]
REPLY = {
    "id": "x",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}],
}


class Provider:
    """Answers 503 to the first ``busy`` requests, then a chat completion; counts them."""

    def __init__(self, busy: int = 1) -> None:
        self.busy = busy
        self.sent = 0

    def __call__(self, request: Any) -> Any:
        import httpx2

        self.sent += 1
        if self.sent <= self.busy:
            return httpx2.Response(503, headers={"retry-after": "0"}, json={"error": {}})
        return httpx2.Response(200, json=REPLY)

    def client(self, *, asynchronous: bool = False, retry: Backoff | None = None) -> Any:
        import httpx2

        if asynchronous:
            http: Any = openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(self))
            made: Any = openai.AsyncOpenAI(
                base_url="http://p.test/v1", api_key="k", http_client=http
            )
        else:
            http = openai.DefaultHttpxClient(transport=httpx2.MockTransport(self))
            made = openai.OpenAI(base_url="http://p.test/v1", api_key="k", http_client=http)
        return wrap(made, retry=retry)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses taken (``time.sleep``, ``asyncio.sleep``), not taken."""
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def asleep(seconds: float, *args: Any) -> Any:
        pauses.append(seconds)
        return await real_sleep(0, *args)

    monkeypatch.setattr(time, "sleep", pauses.append)
    monkeypatch.setattr(asyncio, "sleep", asleep)
    return pauses


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_with_options_max_retries_is_one_decision_and_a_replay_does_not_pause(
    sqlite_url: str, slept: list[float], asynchronous: bool
) -> None:
    provider = Provider()
    client = provider.client(asynchronous=asynchronous)  # loom retries nothing in a flow

    def build() -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("ask")
        def ask(ctx: Any) -> str:
            called = client.with_options(max_retries=2).chat.completions.create(
                model="m", messages=SAID
            )
            reply = asyncio.run(called) if asynchronous else called
            return str(reply.id)

        return loom

    with build() as loom:
        run = loom.run("ask")
        decisions = loom.execution(run.execution_id).decisions
    assert (run.output, provider.sent) == ("x", 2)
    assert list(decisions) == ["model:openai:chat.completions"]  # the attempts are one decision
    meta = msgspec.json.decode(decisions["model:openai:chat.completions"].meta or b"{}")
    assert meta["retries"] == 1
    slept.clear()
    with build() as loom:
        replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    assert provider.sent == 2 and slept == []  # no request, no pause


def test_with_options_max_retries_0_retries_nothing_in_a_flow(sqlite_url: str) -> None:
    provider = Provider()
    client = provider.client(retry=Backoff(first_pause=0.0, max_pause=0.0))
    with Loom(sqlite_url) as loom:

        @loom.flow("ask")
        def ask(ctx: Any) -> str:
            try:
                client.with_options(max_retries=0).chat.completions.create(model="m", messages=SAID)
            except openai.InternalServerError as exc:
                return f"refused {exc.status_code}"
            return "answered"

        assert loom.run("ask").output == "refused 503"
    assert provider.sent == 1


def test_outside_a_flow_a_derived_client_retries_as_often_as_it_was_told() -> None:
    provider = Provider(busy=2)
    client = provider.client(retry=Backoff(first_pause=0.0, max_pause=0.0))
    with pytest.raises(openai.InternalServerError):
        client.with_options(max_retries=1).chat.completions.create(model="m", messages=SAID)
    assert provider.sent == 2
    reply = client.copy(max_retries=1).chat.completions.create(model="m", messages=SAID)
    assert (reply.id, provider.sent) == ("x", 3)


def test_a_client_derived_from_a_derived_one_still_records(sqlite_url: str) -> None:
    """``copy``, chained ``with_options`` and a derived client given an HTTP client of its
    own: each stays wrapped (one decision each) with the SDK's retries off."""
    import httpx2

    provider = Provider(busy=0)
    client = provider.client()
    own = openai.DefaultHttpxClient(transport=httpx2.MockTransport(provider))
    derived = [
        client.copy(timeout=5.0),
        client.with_options(timeout=5.0).with_options(max_retries=3).copy(max_retries=2),
        client.with_options(http_client=own, max_retries=2),
    ]
    assert [each.max_retries for each in derived] == [0, 0, 0]
    with Loom(sqlite_url) as loom:

        @loom.flow("ask")
        def ask(ctx: Any) -> list[str]:
            return [each.chat.completions.create(model="m", messages=SAID).id for each in derived]

        run = loom.run("ask")
        decisions = list(loom.execution(run.execution_id).decisions)
    assert decisions == [f"model:openai:chat.completions{n}" for n in ("", "#2", "#3")]


def test_a_derived_anthropic_client_keeps_the_sdk_retries_off() -> None:
    client = wrap(anthropic.Anthropic(base_url="http://p.test", api_key="k"))
    assert client.with_options(max_retries=5).max_retries == 0
    assert client.copy(max_retries=5).with_options(timeout=3.0).max_retries == 0


class _RefusedBody(Provider):
    """A 503 whose body names a token, then a chat completion."""

    def __call__(self, request: Any) -> Any:
        import httpx2

        self.sent += 1
        if self.sent <= self.busy:
            token = "ghp_" + "a" * 36
            return httpx2.Response(503, json={"error": {"message": f"rejected token {token}"}})
        return httpx2.Response(200, json=REPLY)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_retried_call_whose_refused_attempt_the_redactor_refuses_stores_the_refusal(
    tmp_path: Any, asynchronous: bool
) -> None:
    """Under ``Redactor(mode="refuse")``, loom's retry keeps each attempt's refusal text in
    the decision's meta: a 503 naming a token, then a 200, refused the meta when the answer
    was stored, after the body was read, and nothing was stored; the replay said
    ``UnrecordedDecisionError`` (a second regression review of ADR 0026's "refused
    failures"). The refusal is the call's outcome once the retries end, as for a compute."""
    from loom_runtime import Redactor, SecretRefusedError

    provider = _RefusedBody()
    client = provider.client(asynchronous=asynchronous, retry=Backoff(attempts=2, first_pause=0))
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        async def ask_async() -> str:
            try:
                await client.chat.completions.create(model="m", messages=SAID)
            except SecretRefusedError as refused:
                return f"refused: {refused.pattern}"
            return "answered"

        def ask() -> str:
            try:
                client.chat.completions.create(model="m", messages=SAID)
            except SecretRefusedError as refused:
                return f"refused: {refused.pattern}"
            return "answered"

        async def asynchronous_flow(ctx: Any) -> str:
            return await ask_async()

        loom.flow("f")(asynchronous_flow if asynchronous else (lambda ctx: ask()))
        run = loom.run("f")
        assert run.output == "refused: github-token" and provider.sent == 2
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
        assert provider.sent == 2


def test_a_timeout_in_a_retry_pause_stays_a_timeout_when_an_attempt_is_refused(
    tmp_path: Any,
) -> None:
    """A timeout cutting a wrapped call in its retry pause stores the cut with the attempts
    so far: one whose refusal text names a token under ``mode="refuse"`` turned the flow's
    ``TimeoutError`` into ``SecretRefusedError`` and stored nothing (a second regression
    review). The cut is stored with where it was cut only, and the flow times out, live and
    on replay."""
    from loom_runtime import Redactor

    provider = _RefusedBody()
    retry = Backoff(attempts=3, first_pause=5, max_pause=5)
    client = provider.client(asynchronous=True, retry=retry)
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        async def f(ctx: Any) -> str:
            try:
                async with asyncio.timeout(0.2):
                    await client.chat.completions.create(model="m", messages=SAID)
            except TimeoutError:
                return "timed out"
            return "answered"

        run = loom.run("f")
        assert run.output == "timed out"
        [decision] = loom.execution(run.execution_id).decisions.values()
        assert "ghp_" not in str(decision.meta) and decision.meta is not None
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
