"""``--loom-update`` re-seals only what it accepted: the other fields of a re-sealed event keep
their recorded bytes (ADR 0013, amended).

A re-sealed decision is one whose input changed; its state was decoded to Python and encoded
again to set the new input, so every other field of it came back in msgspec's spelling: an
escaped ``"caf\\u00e9"`` as ``"café"``, ``1E2`` as ``100.0``, ``1.50`` as ``1.5``, and a
``1e400`` as no number at all. The recorded value a reviewer approved then changed in the
re-sealed bundle without anyone asking, and the git diff of it showed changes nobody made.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from loom_runtime import FlowContext, Loom
from loom_runtime.bundle import read_bundle
from loom_runtime.execution import Execution
from loom_runtime.tools.pytest_bundle import reseal

RECORDED = '{"text":"caf\\u00e9","score":1E2,"weight":1.50,"huge":1e400}'


def test_a_resealed_decision_keeps_its_other_fields_byte_for_byte(tmp_path: Path) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("ask")
        def ask(ctx: FlowContext, q: str) -> object:
            return ctx.decide("model", lambda: {"text": "café"}, input={"prompt": q})

        run = loom.run("ask", q="old prompt")
        bundle = read_bundle(loom.export(run.execution_id, tmp_path / "b.json"))
    decision = Execution.DecisionRecorded.TOPIC
    state = next(e.state for e in bundle.events if e.topic == decision)
    canonical = msgspec.json.encode(msgspec.json.decode(state)["value"]).decode()
    assert canonical in state
    spelt = msgspec.structs.replace(
        bundle,
        events=tuple(
            msgspec.structs.replace(e, state=e.state.replace(canonical, RECORDED))
            if e.topic == decision
            else e
            for e in bundle.events
        ),
    )

    resealed = reseal(spelt, inputs={"model": msgspec.Raw(b'{"prompt":"new prompt"}')}, output=None)

    after = next(e.state for e in resealed.events if e.topic == decision)
    before = next(e.state for e in spelt.events if e.topic == decision)
    assert RECORDED in after  # the value as recorded, not as msgspec would spell it
    assert after == before.replace('{"prompt":"old prompt"}', '{"prompt":"new prompt"}')
    unchanged = [e for e in resealed.events if e.topic != decision]
    assert unchanged == [e for e in spelt.events if e.topic != decision]
