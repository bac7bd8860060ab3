"""The capture benchmark's negative control alters exactly one recorded chunk, and holds.

The control (:func:`benchmarks.capture.alter_first_chunk`) is what lets the section refuse to
publish when a replay stops re-emitting what was recorded; these tests prove it changes one
streamed chunk and nothing else (so its divergence cannot come from a changed input or a
broken bundle) and that the replay it feeds reports exactly the changed output. No speed is
asserted (that is the benchmark's business); loom's own-time formula is, on a fake clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from benchmarks import capture
from loom_runtime import Loom
from loom_runtime.bundle import read_bundle
from replay_tests.capture.provider_server import ProviderServer


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Loom, Path, ProviderServer]]:
    """A streamed answer recorded by a wrapped client and exported; the server then stopped."""
    with (
        ProviderServer() as server,
        capture.recording_client(server.openai_url) as client,
        Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom,
    ):
        exported = capture.record_stream(loom, client, tmp_path / "stream.json")
        server.stop()
        yield loom, exported, server


def test_the_control_changes_one_streamed_chunk_and_nothing_else(
    recorded: tuple[Loom, Path, ProviderServer], tmp_path: Path
) -> None:
    _, exported, _ = recorded
    altered = capture.alter_first_chunk(exported, tmp_path / "altered.json")

    before, after = read_bundle(exported), read_bundle(altered)  # re-sealed: reads cleanly
    changed = [
        (old, new)
        for old, new in zip(before.events, after.events, strict=True)
        if old.state != new.state
    ]
    assert len(changed) == 1
    old, new = (msgspec.json.decode(event.state) for event in changed[0])
    assert old["input"] == new["input"]
    assert old["value"]["final"] == new["value"]["final"]
    chunks = [
        (was, now)
        for was, now in zip(old["value"]["events"], new["value"]["events"], strict=True)
        if was != now
    ]
    assert len(chunks) == 1
    assert _content(chunks[0][0]) == f"{capture.CONTROL_WORD} "
    assert _content(chunks[0][1]) == f"{capture.CONTROL_ALTERED} "


def test_the_unaltered_bundle_replays_identically_and_the_altered_one_on_output_only(
    recorded: tuple[Loom, Path, ProviderServer], tmp_path: Path
) -> None:
    loom, exported, server = recorded
    altered = capture.alter_first_chunk(exported, tmp_path / "altered.json")

    assert loom.replay_bundle(exported).identical
    result = loom.replay_bundle(altered)
    assert [type(d).__name__ for d in result.divergences] == ["OutputChangedError"]
    assert capture.CONTROL_ALTERED in str(result.divergences[0])
    assert server.count == 1  # the recording; neither replay reached the server


def test_the_section_control_holds() -> None:
    control = capture.altered_chunk_control()

    assert control.held, control
    assert control.observed == "divergent (OutputChangedError)"


def _content(event: dict[str, Any]) -> str:
    """The text a Chat Completions chunk event carries."""
    return str(event["data"]["choices"][0]["delta"].get("content"))


def test_loom_s_clock_refuses_a_replay_it_did_not_see_whole() -> None:
    """The own-share verdict times loom inside its transport: a replay whose model calls did
    not all pass through the timed transport (or with no flow body timed) would report too
    little of loom, so the clock stops the harness instead of publishing it."""
    clock = capture._LoomClock(capture.TURNS)
    with pytest.raises(capture.InstrumentError, match="transport calls"):
        clock.timed(lambda: None)()


def test_loom_s_clock_counts_the_replay_outside_the_body_and_loom_inside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loom's own time = (replay - body) + transport, on a clock whose every interval is
    known: 3 s of loom before the flow's body and 2 s after it, and in the body per turn
    0.5 s of SDK code and 0.25 s in loom's transport. Dropping the transport's share, counting
    the whole replay, or counting the body as loom's would each give another figure."""
    now = [0.0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(capture, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    clock = capture._LoomClock(capture.TURNS)

    class Transport:
        def handle_request(self, request: Any) -> str:
            advance(0.25)  # loom: match the call, compare the request, hand back the response
            return "response"

        def close(self) -> None:
            pass

    class Client:
        class _client:
            _transport = Transport()

    clock.time_transport_of(Client)

    def replay() -> None:
        advance(3.0)  # loom before the body: the execution read
        with clock.flow():
            for _ in range(capture.TURNS):
                advance(0.5)  # the SDK and the conversation's own code
                Client._client._transport.handle_request(None)
        advance(2.0)  # loom after it: the output checked

    clock.timed(replay)()
    assert clock.take() == 3.0 + 2.0 + capture.TURNS * 0.25
    with pytest.raises(ValueError):  # taken: the next verdict starts from no samples
        clock.take()
