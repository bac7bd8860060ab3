"""The flows and corpus the reliability workers write, and the test replays.

One module for both sides because a replay is only meaningful with the code that recorded:
the parent test registers exactly these flows, and the restarted checker resumes with them.

The workload is deliberately small but touches every write path loom has:

* ``pipeline`` (a sync flow): the recorded clock, a recorded retrieval from the corpus (so a
  flow's decide catches the corpus projection up, concurrently with the syncer), then several
  plain decisions, one key used three times (``step``, ``step#2``, ``step#3``);
* ``fanout`` (an async flow): four decisions under one key started together with
  ``asyncio.gather`` and finishing in a different order than they were called, then one more;
* the corpus: ``put_doc`` and repeated ``sync`` rounds that revise documents, change their
  passage counts and drop documents (each one comes back a round later).

Every computed value is ``"<label>:<random>"``: a replay can only reproduce it from the log,
and a checker can tell from a value which compute produced it. :data:`COMPUTED` lists the
labels computed in this process, which is how "recorded decisions are not recomputed on
resume" is observed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base, pack_paragraphs
from loom_runtime import Loom
from loom_runtime.context import AsyncFlowContext, FlowContext

SCOPE: Final = "ops"
SOURCE: Final = "wiki"
DOCS: Final = 8
CHUNKER: Final = pack_paragraphs(max_chars=60)  # one passage per ~45-character paragraph
FLOWS: Final = ("pipeline", "fanout")

COMPUTED: list[str] = []
"""Labels of the computes that ran in THIS process, in the order they ran."""


def _compute(label: str) -> str:
    COMPUTED.append(label)
    return f"{label}:{uuid.uuid4().hex[:12]}"


async def _compute_later(label: str, delay: float) -> str:
    await asyncio.sleep(delay)
    return _compute(label)


def label_of(value: object) -> str | None:
    """Which compute produced a recorded value (``None`` for the clock, uuids, retrievals)."""
    if isinstance(value, str) and ":" in value:
        return value.split(":", 1)[0]
    return None


def knowledge_base(loom: Loom) -> KnowledgeBase:
    """The one corpus every worker writes and every flow retrieves from, same options everywhere."""
    return open_knowledge_base(loom, SCOPE, chunker=CHUNKER)


def register_flows(loom: Loom) -> None:
    """Register ``pipeline`` and ``fanout`` on ``loom``."""

    @loom.flow("pipeline")
    def pipeline(ctx: FlowContext, topic: str) -> dict[str, Any]:
        started = ctx.now()
        hits = knowledge_base(loom).retrieve(topic, decide=ctx.decide, limit=2)
        plan = ctx.decide("plan", lambda: _compute("plan"), input={"topic": topic})
        steps = [
            ctx.decide("step", partial(_compute, f"step{i}"), input={"i": i}) for i in range(3)
        ]
        return {
            "started": started.isoformat(),
            "hits": [f"{hit.doc_id}#{hit.index}@{hit.revision}" for hit in hits],
            "plan": plan,
            "steps": steps,
        }

    @loom.flow("fanout")
    async def fanout(ctx: AsyncFlowContext, label: str) -> list[str]:
        # Called in order 0..3, finishing 0, 3, 2, 1: keys are fixed at call time, so the
        # recorded order differs from the key order and a replay must still match by key.
        probes: list[str] = await asyncio.gather(
            *(
                ctx.decide(
                    "probe",
                    partial(_compute_later, f"probe{n}", (-n % 4) * 0.002),
                    input={"n": n},
                )
                for n in range(4)
            )
        )
        summary = await ctx.decide("summary", lambda: _compute("summary"), input={"of": label})
        return [*probes, summary]


def run_one(loom: Loom, index: int) -> str:
    """Run the ``index``-th execution of a worker (alternating flows); its id."""
    if index % 2 == 0:
        run = loom.run("pipeline", topic=f"doc{index % DOCS} edition")
    else:
        run = loom.run("fanout", label=f"run{index}")
    return str(run.execution_id)


# -- the corpus ---------------------------------------------------------------------------------


def _text(n: int, edition: int, paragraphs: int) -> str:
    return "\n\n".join(
        f"doc{n} edition{edition} part{p} restart the pool" for p in range(paragraphs)
    )


def corpus_round(round_: int) -> list[Doc]:
    """Round ``round_`` of the source's complete document set.

    From round 1 on, two of the eight documents are missing (removed by that sync, back in the
    next) and about a third carry a new edition with a different number of passages, so
    successive syncs write revisions that shrink and grow and remove passages.
    """
    docs = []
    for n in range(DOCS):
        if round_ and (n + round_) % 4 == 0:
            continue
        edition = round_ if (n + round_) % 3 == 0 else 0
        docs.append(
            Doc(
                id=f"doc{n}",
                title=f"Runbook {n}",
                text=_text(n, edition, 1 + (n + edition) % 3),
                meta={"edition": edition},
            )
        )
    return docs


# -- the crash scenarios ------------------------------------------------------------------------


def corpus_scenario(loom: Loom) -> None:
    """Three put_docs (the third revises the first, shorter) then two editing syncs."""
    kb = knowledge_base(loom)
    first, second = corpus_round(0)[:2]
    kb.put_doc(first, source=SOURCE)
    kb.put_doc(second, source=SOURCE)
    kb.put_doc(Doc(id=first.id, title=first.title, text=_text(0, 9, 1)), source=SOURCE)
    kb.sync(corpus_round(1), source=SOURCE)
    kb.sync(corpus_round(2), source=SOURCE)


def execution_scenario(loom: Loom) -> None:
    """One document to retrieve, then pipeline, fanout, pipeline: 17 decisions, 3 completions."""
    register_flows(loom)
    knowledge_base(loom).put_doc(corpus_round(0)[0], source=SOURCE)
    for index in range(3):
        run_one(loom, index)


SCENARIOS: Final[dict[str, Callable[[Loom], None]]] = {
    "corpus": corpus_scenario,
    "execution": execution_scenario,
}
