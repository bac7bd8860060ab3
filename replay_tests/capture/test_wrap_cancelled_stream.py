"""A model stream the flow stops reading on a timeout replays to the same fallback (ADR 0026).

The SDK-level twin of ``replay_tests/runtime/test_cancelled_reads.py``: a wrapped
``AsyncOpenAI`` client's stream stalls after two chunks, the flow's ``wait_for`` gives up and
answers from what it read. The replay, with no provider at all, gets the same two chunks, then
waits where the live read waited until the flow's timeout cancels it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import pytest

from loom_runtime import Loom, wrap
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

KEY = "model:openai:chat.completions"


def _chunk(text: str) -> bytes:
    delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return b"data: " + msgspec.json.encode({**chunk, "choices": [delta]}) + b"\n\n"


class Stalls(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield _chunk("Restart ")
        yield _chunk("the ")
        await asyncio.sleep(5)
        yield _chunk("pod.")
        yield b"data: [DONE]\n\n"


class Provider(httpx.AsyncBaseTransport):
    """A provider whose stream stalls; ``None`` of them on replay (any request fails the test)."""

    def __init__(self, *, answers: bool) -> None:
        self.answers = answers

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert self.answers, "a replay sent a request"
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=Stalls())


def build(db: str, provider: Provider, *, timeout: float = 0.3) -> Loom:
    loom = Loom(db)

    @loom.flow("bounded-answer")
    async def bounded_answer(ctx: Any) -> str:
        http = httpx.AsyncClient(transport=provider)
        client = wrap(
            openai.AsyncOpenAI(base_url="http://llm.test/v1", api_key="sk-test", http_client=http)
        )
        read: list[str] = []

        async def read_all() -> None:
            said: Any = [{"role": "user", "content": "the pod is stuck"}]
            stream = await client.chat.completions.create(model="m", messages=said, stream=True)
            async for chunk in stream:
                read.append(chunk.choices[0].delta.content or "")

        try:
            await asyncio.wait_for(read_all(), timeout)
        except TimeoutError:
            return f"partial: {''.join(read)}"
        finally:
            await http.aclose()
        return f"whole: {''.join(read)}"

    return loom


def test_a_model_stream_cut_by_the_flow_s_timeout_replays_to_the_same_fallback(
    sqlite_url: str,
) -> None:
    with build(sqlite_url, Provider(answers=True)) as loom:
        run = asyncio.run(loom.arun("bounded-answer"))
        decision = loom.execution(run.execution_id).decisions[KEY]
    assert run.output == "partial: Restart the "
    with build(sqlite_url, Provider(answers=False)) as fresh:
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert result.identical, result.describe()
    assert result.output == run.output
    recorded = msgspec.json.decode(decision.value)
    assert len(recorded["events"]) == 2 and recorded.get("complete") is False
    assert 0.2 < recorded["cancelled_after"] < 5
