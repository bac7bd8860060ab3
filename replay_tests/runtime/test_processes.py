"""Record, kill, resume and replay in real, separate Python processes.

Every test drives ``flows_for_processes.py`` in fresh interpreters (``sys.executable``), so
nothing is shared with the recording process but the SQLite file: no registered flow, no
cached aggregate, no open connection. The parent observes the children through the log
(read through a fresh connection), the JSON line each child prints, and files the children's live
dependencies append to.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest

from loom_runtime import Loom

HELPER = Path(__file__).with_name("flows_for_processes.py")
TIMEOUT = 30  # seconds any one child may take; every wait below is bounded
TOPIC = "loom.execution"

pytestmark = pytest.mark.slow


# -- helpers ------------------------------------------------------------------------------------


def _env(**overrides: str | os.PathLike[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_TEST_")}
    env.pop("LOOM_DB_URL", None)
    env.update({k: os.fspath(v) for k, v in overrides.items()})
    return env


def _start(db_url: str, *args: str, **env: str | os.PathLike[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HELPER), db_url, *args],
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(child: subprocess.Popen[str]) -> tuple[int, Any]:
    """Wait (bounded) for a child; its exit status and the JSON line it printed (or None)."""
    try:
        stdout, stderr = child.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"child {child.args!r} did not finish within {TIMEOUT}s")
    lines = stdout.strip().splitlines()
    payload = msgspec.json.decode(lines[-1]) if lines else None
    if child.returncode not in (0, 3, -signal.SIGKILL):
        pytest.fail(f"child {child.args!r} exited {child.returncode}:\n{stderr}")
    return child.returncode, payload


def _ok(db_url: str, *args: str, **env: str | os.PathLike[str]) -> Any:
    """Run a child to completion and return what it printed; it must exit 0."""
    child = _start(db_url, *args, **env)
    status, payload = _finish(child)
    assert status == 0, f"child {child.args!r} exited {status}: {payload}"
    return payload


def _killed(db_url: str, *args: str, **env: str | os.PathLike[str]) -> None:
    """Run a child that SIGKILLs itself; it must die of SIGKILL."""
    status, _ = _finish(_start(db_url, *args, **env))
    assert status == -signal.SIGKILL, f"expected the child to die of SIGKILL, got {status}"


def _events(db_url: str, execution_id: str | None = None) -> list[tuple[str, int, str, Any]]:
    """(originator_id, version, topic, decoded state) of every stored event, in log order,
    read through a connection of its own (what the children committed, nothing cached)."""
    with Loom(db_url) as reader:
        rows = [(n.stream.hex, n.version, n.topic, n.state) for n in reader.log.notifications()]
    wanted = None if execution_id is None else UUID(execution_id).hex
    return [
        (oid, version, topic, msgspec.json.decode(state))
        for oid, version, topic, state in rows
        if wanted is None or oid == wanted
    ]


def _only_execution(db_url: str) -> str:
    created = [e for e in _events(db_url) if e[2] == f"{TOPIC}.Created"]
    assert len(created) == 1, created
    return str(UUID(created[0][0]))


def _decision_keys(events: list[tuple[str, int, str, Any]]) -> list[str]:
    return [state["key"] for _, _, topic, state in events if topic == f"{TOPIC}.DecisionRecorded"]


def _topics(events: list[tuple[str, int, str, Any]]) -> Counter[str]:
    return Counter(topic.removeprefix(f"{TOPIC}.") for _, _, topic, _ in events)


def _assert_contiguous_versions(events: list[tuple[str, int, str, Any]]) -> None:
    by_stream: dict[str, list[int]] = {}
    for oid, version, _, _ in events:
        by_stream.setdefault(oid, []).append(version)
    for oid, versions in by_stream.items():
        assert sorted(versions) == list(range(1, len(versions) + 1)), (oid, versions)


def _side_effects(path: Path) -> list[tuple[int, int]]:
    """(step, pid) for every time a step's compute ran, in any process."""
    if not path.exists():
        return []
    return [(int(s), int(p)) for s, p in (line.split() for line in path.read_text().splitlines())]


@pytest.fixture
def search_server() -> Iterator[tuple[int, threading.Event]]:
    """A real TCP search service on 127.0.0.1; set the event to shut it (the port then refuses)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                query = conn.makefile("rb").readline().decode().strip()
                conn.sendall(f"{query}: slow query log|{query}: missing index\n".encode())
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port, stop
    stop.set()
    thread.join(timeout=5)


def _unreachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


# -- 1. record here, replay in a fresh process with every live dependency unreachable ----------


@pytest.mark.parametrize("flow", ["triage", "triage_async"])
def test_replay_in_a_fresh_process_needs_no_live_dependency(
    flow: str, db_url: str, tmp_path: Path, search_server: tuple[int, threading.Event]
) -> None:
    """A replay in another process, with search and model unreachable, is identical and inert."""
    port, stop = search_server
    recording_calls, replay_calls = tmp_path / "recording.calls", tmp_path / "replay.calls"
    [recorded] = _ok(
        db_url,
        "run",
        flow,
        "--input",
        '{"question": "why is the db slow?"}',
        LOOM_TEST_SEARCH_PORT=str(port),
        LOOM_TEST_CALLS=recording_calls,
    )
    assert recording_calls.read_text().split()[::2] == ["search", "model"]  # really live
    stop.set()
    deadline = time.monotonic() + 5
    while not _unreachable(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _unreachable(port), "the search service must be down before the replay"
    events_before = _events(db_url)

    [replayed] = _ok(
        db_url,
        "replay",
        recorded["execution_id"],
        LOOM_TEST_SEARCH_PORT=str(port),
        LOOM_TEST_UNREACHABLE="1",
        LOOM_TEST_CALLS=replay_calls,
    )

    assert replayed["divergences"] == []
    assert replayed["identical"] is True
    assert replayed["output"] == recorded["output"]
    assert replayed["position_after"] == replayed["position_before"]
    assert _events(db_url) == events_before  # nothing appended, seen from outside too
    assert not replay_calls.exists(), f"compute ran during replay: {replay_calls.read_text()}"


def test_the_unreachable_switch_really_breaks_live_calls(db_url: str) -> None:
    """Control for test 1: with LOOM_TEST_UNREACHABLE a live run fails at its first dependency."""
    child = _start(
        db_url,
        "run",
        "triage",
        "--input",
        '{"question": "q"}',
        LOOM_TEST_UNREACHABLE="1",
        LOOM_TEST_SEARCH_PORT="1",
    )
    stdout, stderr = child.communicate(timeout=TIMEOUT)
    assert child.returncode == 1, stdout
    assert "ConnectionError" in stderr
    assert _topics(_events(db_url)) == Counter(
        {"Created": 1, "DecisionRecorded": 1, "DecisionFailed": 1, "Failed": 1}
    )


def test_a_changed_prompt_shows_up_in_a_fresh_process_replay(
    db_url: str, tmp_path: Path, search_server: tuple[int, threading.Event]
) -> None:
    """Control for test 1: the same pipeline reports a divergence when the code changed."""
    port, _ = search_server
    [recorded] = _ok(
        db_url, "run", "triage", "--input", '{"question": "q"}', LOOM_TEST_SEARCH_PORT=str(port)
    )
    [replayed] = _ok(
        db_url,
        "replay",
        recorded["execution_id"],
        LOOM_TEST_UNREACHABLE="1",
        LOOM_TEST_VARIANT="changed-prompt",
    )
    assert replayed["identical"] is False
    assert [d["type"] for d in replayed["divergences"]] == ["DecisionInputChangedError"]
    assert "expert DBA" in replayed["divergences"][0]["message"]


# -- 2. interrupted by SIGKILL, resumed in another process, completed exactly once --------------

STEPS, AT = 6, 3


def _assert_resumed_exactly_once(
    db_url: str, execution_id: str, effects: Path, *, first: int, in_flight: int | None
) -> None:
    """The shared checks after a kill and a resume (see the two tests for ``in_flight``)."""
    ran = _side_effects(effects)
    pids = {pid for _, pid in ran}
    assert first in pids and len(pids) == 2, ran
    [resumer] = pids - {first}
    expected = Counter(range(1, STEPS + 1))
    if in_flight is not None:
        expected[in_flight] += 1  # killed inside compute: the lost result is computed again
    assert Counter(step for step, _ in ran) == expected
    done_before_kill = AT - 1 if in_flight is not None else AT
    for step, pid in ran:  # recorded decisions came from the log, not from a recompute
        if step <= done_before_kill:
            assert pid == first, ran
        if step > AT:
            assert pid == resumer, ran

    events = _events(db_url, execution_id)
    topics = _topics(events)
    assert topics["Completed"] == 1 and topics["Resumed"] == 1 and topics["Failed"] == 0
    keys = _decision_keys(events)
    assert sorted(keys) == sorted(f"step:{i}" for i in range(1, STEPS + 1))
    _assert_contiguous_versions(_events(db_url))

    output = _ok(db_url, "resume", execution_id)  # a finished execution: returned as recorded
    assert output["position_after"] == output["position_before"]
    assert _events(db_url, execution_id) == events
    assert output["output"] == [
        f"step {i} computed by {first if i <= done_before_kill else resumer}"
        for i in range(1, STEPS + 1)
    ]


def test_killed_inside_a_compute_then_resumed_completes_exactly_once(
    db_url: str, tmp_path: Path
) -> None:
    """SIGKILL inside step K's compute; a resume elsewhere recomputes only step K."""
    effects = tmp_path / "effects"
    _killed(
        db_url,
        "run",
        "steps",
        "--input",
        f'{{"n": {STEPS}}}',
        LOOM_TEST_SIDE_EFFECTS=effects,
        LOOM_TEST_KILL_AT=str(AT),
    )
    execution_id = _only_execution(db_url)
    assert _decision_keys(_events(db_url)) == [f"step:{i}" for i in range(1, AT)]
    first = _side_effects(effects)[0][1]

    resumed = _ok(db_url, "resume", execution_id, LOOM_TEST_SIDE_EFFECTS=effects)

    assert resumed["position_after"] > resumed["position_before"]
    # Step AT was in flight at the kill: its side effect happened, its result was never
    # stored, so it runs once in each process. Every other step runs exactly once in total.
    _assert_resumed_exactly_once(db_url, execution_id, effects, first=first, in_flight=AT)


def test_killed_between_decisions_then_resumed_completes_exactly_once(
    db_url: str, tmp_path: Path
) -> None:
    """The parent SIGKILLs the child while it sleeps after step K; no step runs twice."""
    effects, ready = tmp_path / "effects", tmp_path / "ready"
    child = _start(
        db_url,
        "run",
        "steps",
        "--input",
        f'{{"n": {STEPS}}}',
        LOOM_TEST_SIDE_EFFECTS=effects,
        LOOM_TEST_PAUSE_AFTER=str(AT),
        LOOM_TEST_READY=ready,
    )
    deadline = time.monotonic() + TIMEOUT
    while not ready.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never reached the pause"
        time.sleep(0.01)
    first = int(ready.read_text())
    os.kill(child.pid, signal.SIGKILL)
    status, _ = _finish(child)
    assert status == -signal.SIGKILL
    execution_id = _only_execution(db_url)
    assert _decision_keys(_events(db_url)) == [f"step:{i}" for i in range(1, AT + 1)]

    _ok(db_url, "resume", execution_id, LOOM_TEST_SIDE_EFFECTS=effects)

    _assert_resumed_exactly_once(db_url, execution_id, effects, first=first, in_flight=None)


# -- 3. two processes resume the same execution at once ------------------------------------------


def test_two_processes_resuming_at_once_one_wins_one_gets_a_conflict(
    db_url: str, tmp_path: Path
) -> None:
    """Both load the interrupted execution before either appends; exactly one completes it."""
    effects, barrier = tmp_path / "effects", tmp_path / "barrier"
    barrier.mkdir()
    _killed(
        db_url,
        "run",
        "steps",
        "--input",
        f'{{"n": {STEPS}}}',
        LOOM_TEST_SIDE_EFFECTS=effects,
        LOOM_TEST_KILL_AT=str(AT),
    )
    execution_id = _only_execution(db_url)
    version_at_kill = len(_events(db_url))

    children = [
        _start(
            db_url,
            "resume",
            execution_id,
            LOOM_TEST_SIDE_EFFECTS=effects,
            LOOM_TEST_BARRIER=barrier,
            LOOM_TEST_WORKER=name,
            LOOM_TEST_PARTIES="2",
        )
        for name in ("a", "b")
    ]
    outcomes = [_finish(child) for child in children]

    # The barrier held: both workers loaded the same version before either appended.
    assert sorted(p.read_text() for p in barrier.glob("*.loaded")) == [str(version_at_kill)] * 2
    assert sorted(status for status, _ in outcomes) == [0, 3], outcomes
    [loser] = [payload for status, payload in outcomes if status == 3]
    assert loser["error"] == "ExecutionConflictError"
    [winner] = [payload for status, payload in outcomes if status == 0]
    assert len(winner["output"]) == STEPS

    events = _events(db_url, execution_id)
    topics = _topics(events)
    assert topics["Completed"] == 1 and topics["Resumed"] == 1 and topics["Failed"] == 0
    keys = _decision_keys(events)
    assert len(keys) == len(set(keys)) == STEPS
    _assert_contiguous_versions(events)
    ran = Counter(step for step, _ in _side_effects(effects))
    assert ran == Counter(range(1, STEPS + 1)) + Counter([AT])  # the loser computed nothing


@pytest.mark.parametrize(
    "flow",
    # steps_with_fallback catches Exception around decide: a swallowed conflict must not let
    # the stale worker append after the winner (its in-memory version keeps moving).
    ["steps", "steps_with_fallback"],
)
def test_a_stale_worker_that_lost_the_execution_gets_a_conflict_and_appends_nothing(
    flow: str, db_url: str, tmp_path: Path
) -> None:
    """The original worker, paused while another process resumed and finished, loses cleanly."""
    effects, ready, go = tmp_path / "effects", tmp_path / "ready", tmp_path / "go"
    stale = _start(
        db_url,
        "run",
        flow,
        "--input",
        f'{{"n": {STEPS}}}',
        LOOM_TEST_SIDE_EFFECTS=effects,
        LOOM_TEST_PAUSE_AFTER=str(AT),
        LOOM_TEST_READY=ready,
        LOOM_TEST_GO=go,
    )
    deadline = time.monotonic() + TIMEOUT
    while not ready.exists():
        assert stale.poll() is None, stale.communicate()
        assert time.monotonic() < deadline, "the child never reached the pause"
        time.sleep(0.01)
    execution_id = _only_execution(db_url)
    winner = _ok(db_url, "resume", execution_id, LOOM_TEST_SIDE_EFFECTS=effects)
    finished = _events(db_url, execution_id)

    go.touch()
    status, payload = _finish(stale)

    assert status == 3, f"the stale worker exited {status} and printed {payload}"
    assert payload["error"] == "ExecutionConflictError"
    assert _events(db_url, execution_id) == finished  # the stale worker appended nothing
    assert _topics(finished)["Completed"] == 1
    assert _ok(db_url, "resume", execution_id)["output"] == winner["output"]


# -- 4. keyed matching under asyncio.gather, completion order randomised ------------------------

GATHER_KEYS = [
    "search",
    "model",
    "search#2",
    "fetch",
    "search#3",
    "model#2",
    "rank",
    "search#4",
    "fetch#2",
    "model#3",
]


def test_gathered_decisions_replay_by_key_whatever_order_they_finished_in(
    db_url: str, tmp_path: Path
) -> None:
    """Decisions recorded out of call order replay identically in a process with other timing."""
    runs = _ok(
        db_url, "run", "gather", "--input", '{"label": "g"}', "--times", "3", LOOM_TEST_SEED="1"
    )
    recorded_orders = [_decision_keys(_events(db_url, run["execution_id"])) for run in runs]
    for order, run in zip(recorded_orders, runs, strict=True):
        assert sorted(order) == sorted(GATHER_KEYS)
        # gather returns in call order; each value names the argument its call was made with
        assert [v.split(" token")[0] for v in run["output"]] == [
            "search(alpha)",
            "model(m1)",
            "search(beta)",
            "fetch(x)",
            "search(gamma)",
            "model(m2)",
            "rank(r)",
            "search(delta)",
            "fetch(y)",
            "model(m3)",
        ]
    assert any(order != GATHER_KEYS for order in recorded_orders), (
        "the randomised sleeps never reordered completions: the test proved nothing"
    )

    replay_calls = tmp_path / "replay.calls"
    replays = _ok(
        db_url,
        "replay",
        *(run["execution_id"] for run in runs),
        LOOM_TEST_SEED="987654",
        LOOM_TEST_UNREACHABLE="1",
        LOOM_TEST_CALLS=replay_calls,
    )
    for run, replayed in zip(runs, replays, strict=True):
        assert replayed["divergences"] == []
        assert replayed["identical"] is True
        assert replayed["output"] == run["output"]
        assert replayed["position_after"] == replayed["position_before"]
    assert not replay_calls.exists()
