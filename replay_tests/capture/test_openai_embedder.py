"""An OpenAIEmbedder over a wrapped OpenAI client is recorded, and replays with the server gone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from loom_memory import OpenAIEmbedder
from loom_runtime import Loom, wrap
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs


def _build(db: str) -> Loom:
    loom = Loom(db)

    @loom.flow("embed")
    def embed(ctx: Any, url: str, texts: list[str]) -> list[list[float]]:
        client = wrap(openai.OpenAI(base_url=url, api_key="sk-test-embedder-0123456789abcdef"))
        return OpenAIEmbedder(client, model="text-embedding-3-small", dimension=4).embed(texts)

    return loom


def test_wrapped_embeddings_are_recorded_and_replay_offline(
    provider: ProviderServer, sqlite_url: str
) -> None:
    with _build(sqlite_url) as loom:
        run = loom.run("embed", url=provider.openai_url, texts=["disk full", "restart"])
    assert len(run.output) == 2 and all(len(vector) == 4 for vector in run.output)
    served = provider.count
    provider.stop()
    with _build(sqlite_url) as fresh:
        result = fresh.replay(run.execution_id)
    assert provider.count == served
    assert result.identical, result.describe()
    assert result.output == run.output
