"""The LangGraph agent of docs/examples/langgraph_agent.py, recorded and replayed end to end.

The agent runs as written (real ``openai`` SDK, real LangGraph) against the loopback provider:
the model calls ``search_runbooks``, the tool retrieves from a synced knowledge base, the model
answers citing what it was shown. Then the provider is stopped and every corpus table dropped,
and a fresh ``Loom`` replays the execution from the log alone.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from loom_knowledge import load_runbooks, open_knowledge_base
from loom_runtime import (
    DecisionInputChangedError,
    Loom,
    OutcomeChangedError,
    ReplayResult,
    wrap,
)
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred
from replay_tests.knowledge.corpus_tables import corpus_tables, drop_corpus_tables

if TYPE_CHECKING:
    import openai

    from docs.examples import langgraph_agent as example
else:
    openai = deferred("openai")
    example = deferred("docs.examples.langgraph_agent")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

QUESTION = "The disk is full on a host: what do I check first?"
ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "record-an-existing-agent.md"
SOURCES = [ROOT / "docs" / "examples" / "langgraph_agent.py", Path(__file__)]


@dataclass(frozen=True)
class Recorded:
    """A recorded run of the agent: its id, output and decision keys, and how many requests
    the provider served while it ran."""

    execution_id: str
    output: Any
    requests: int
    keys: list[str]


def _client(provider: ProviderServer) -> openai.OpenAI:
    """The example's client, pointed at the loopback provider."""
    # No retry: the controls call the stopped provider, and a backoff only waits (seconds).
    return wrap(openai.OpenAI(api_key="sk-loopback", base_url=provider.openai_url), retry=None)


def _replay(
    db_url: str,
    provider: ProviderServer,
    run: Recorded,
    *,
    instructions: str | None = None,
    live: frozenset[str] = frozenset(),
) -> ReplayResult:
    """Replay ``run`` in a fresh Loom on the same log, with the agent registered anew."""
    with Loom(db_url) as fresh:
        example.register(
            fresh, client=_client(provider), instructions=instructions or example.INSTRUCTIONS
        )
        return fresh.replay(run.execution_id, live=live)


@pytest.fixture
def recorded(db_url: str, provider: ProviderServer) -> Recorded:
    """The agent recorded against the provider; then the provider stopped, the corpus dropped."""
    with Loom(db_url) as loom:
        open_knowledge_base(loom, example.SCOPE).sync(load_runbooks(), source="runbooks")
        example.register(loom, client=_client(provider))
        run = loom.run(example.FLOW, question=QUESTION)
        keys = list(loom.execution(run.execution_id).decisions)
        drop_corpus_tables(loom.log.engine)
    provider.stop()
    return Recorded(
        execution_id=str(run.execution_id), output=run.output, requests=provider.count, keys=keys
    )


def test_the_agent_searches_the_runbooks_and_cites_what_it_was_shown(recorded: Recorded) -> None:
    """Live: one tool call with the question, an answer citing only passages it was shown."""
    assert recorded.requests == 2  # the tool call, then the answer
    assert recorded.keys == [
        "model:openai:chat.completions",
        "knowledge:runbooks:retrieve",
        "model:openai:chat.completions#2",
    ]
    assert recorded.output["tool_calls"] == [
        {"name": "search_runbooks", "arguments": json.dumps({"query": QUESTION})}
    ]
    assert "disk-full.md" in recorded.output["cited"]
    assert recorded.output["ungrounded"] == []


def test_replay_with_the_provider_stopped_and_the_corpus_deleted_is_identical(
    db_url: str, provider: ProviderServer, recorded: Recorded
) -> None:
    """Same prompts, tool calls, citations and answer, from the log alone: no request sent."""
    result = _replay(db_url, provider, recorded)

    assert result.identical, result.describe()
    assert result.output == recorded.output
    assert provider.count == recorded.requests
    with Loom(db_url) as loom:
        assert corpus_tables(loom.log.engine) == []  # the replay did not rebuild the corpus


def test_replaying_the_model_live_needs_the_provider(
    db_url: str, provider: ProviderServer, recorded: Recorded
) -> None:
    """Control: a replay that does call the (stopped) provider cannot reproduce the run."""
    result = _replay(db_url, provider, recorded, live=frozenset({"model"}))

    assert not result.identical
    assert isinstance(result.divergences[0], OutcomeChangedError)
    assert "APIConnectionError" in str(result.divergences[0])


def test_a_changed_prompt_template_is_reported_with_the_changed_message(
    db_url: str, provider: ProviderServer, recorded: Recorded
) -> None:
    """New instructions change the model request: the replay names the call and shows the line."""
    changed = example.INSTRUCTIONS.replace("answer briefly", "answer in French")
    assert changed != example.INSTRUCTIONS

    result = _replay(db_url, provider, recorded, instructions=changed)

    divergence = result.divergences[0]
    assert isinstance(divergence, DecisionInputChangedError)
    assert divergence.key == "model:openai:chat.completions"
    removed = [line for line in divergence.diff.splitlines() if line.startswith("-  ")]
    added = [line for line in divergence.diff.splitlines() if line.startswith("+  ")]
    assert len(removed) == len(added) == 1
    assert "answer briefly" in removed[0] and "answer in French" in added[0]


def test_a_fork_asks_the_model_again_as_if_retrieval_had_found_other_passages(
    db_url: str, provider: ProviderServer
) -> None:
    """What if the search had found the DNS runbook? The fork inherits the first model call,
    takes the override as the retrieval, and only the answer is asked live."""
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, example.SCOPE)
        kb.sync(load_runbooks(), source="runbooks")
        example.register(loom, client=_client(provider))
        run = loom.run(example.FLOW, question=QUESTION)

        dns = [p for p in kb.passages() if p.doc_id == "dns-failure.md"]
        fork = loom.fork(
            run.execution_id,
            at="knowledge:runbooks:retrieve",
            override={"knowledge:runbooks:retrieve": dns},
        )

        origins = {k: d.origin for k, d in loom.execution(fork.execution_id).decisions.items()}
        assert loom.replay(fork.execution_id).identical
    assert provider.count == 3  # the run's two calls, then the fork's answer
    assert origins == {
        "model:openai:chat.completions": "inherited",
        "knowledge:runbooks:retrieve": "override",
        "model:openai:chat.completions#2": None,
    }
    assert fork.output["cited"] == ["dns-failure.md"]
    assert fork.output["tool_calls"] == run.output["tool_calls"]


def _guide_blocks() -> list[Any]:
    """The guide's Python blocks, one test parameter each."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    return [pytest.param(block, id=f"block-{n}") for n, block in enumerate(blocks, start=1)]


def _excerpt_of(block: str, source: Path) -> bool:
    """Whether ``block`` is a run of ``source``'s lines, up to their common indentation."""
    want = block.rstrip("\n")
    lines = source.read_text(encoding="utf-8").splitlines()
    size = len(want.splitlines())
    return any(
        textwrap.dedent("\n".join(lines[start : start + size])) == want
        for start in range(len(lines) - size + 1)
    )


@pytest.mark.parametrize("block", _guide_blocks())
def test_each_python_block_of_the_guide_runs_or_is_a_piece_of_the_example(
    block: str, provider: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide cannot drift: a block starting with its imports runs as written (against the
    loopback provider), any other block is a verbatim piece of the example or of this test."""
    if not block.startswith(("import ", "from ")):
        assert any(_excerpt_of(block, source) for source in SOURCES), block
        return
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.openai_url)
    exec(compile(block, f"{GUIDE.name}, a block", "exec", dont_inherit=True), {})


def test_the_example_run_as_a_script_says_how_to_audit_its_execution(
    provider: ProviderServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python docs/examples/langgraph_agent.py`` as the guide says to run it (the key and
    the endpoint from the environment): it replays identically and prints the audit command
    of its execution, which then runs and shows what the agent cited."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.openai_url)
    example.main(QUESTION)
    printed = capsys.readouterr().out
    assert re.search(r"^replayed from \S+: identical$", printed, re.M), printed
    command = re.search(r"^what it saw and cited: loom (audit .+)$", printed, re.M)
    assert command is not None, printed
    audited = CliRunner().invoke(app, command[1].split())
    assert audited.exit_code == 0, audited.output
    assert "disk-full.md" in audited.output
