"""Flows, and a tiny CLI, that ``test_processes.py`` runs in real, fresh Python processes.

Run by file path (the test tree has no packages)::

    python flows_for_processes.py DB_URL run FLOW [--input JSON] [--times N]
    python flows_for_processes.py DB_URL resume EXECUTION_ID
    python flows_for_processes.py DB_URL replay EXECUTION_ID [EXECUTION_ID ...]

Each command prints ONE JSON line on stdout. ``run`` and ``resume`` exit with status 3 and print
``{"error": "ExecutionConflictError", ...}`` when another worker won the execution.

The flows' live dependencies are switched by environment variables, so the parent test decides
what the child can reach and observes what the child did through files:

* ``LOOM_TEST_CALLS``: a file every live dependency appends one line to when it is called.
* ``LOOM_TEST_UNREACHABLE=1``: every live dependency raises ``ConnectionError``.
* ``LOOM_TEST_SEARCH_PORT``: the search service is a real TCP server on 127.0.0.1 at this port.
* ``LOOM_TEST_VARIANT=changed-prompt``: the triage flows build a different model prompt.
* ``LOOM_TEST_SIDE_EFFECTS``: a file each step of ``steps`` appends ``"<step> <pid>"`` to.
* ``LOOM_TEST_KILL_AT=K``: step K's compute SIGKILLs its own process after its side effect.
* ``LOOM_TEST_PAUSE_AFTER=K`` and ``LOOM_TEST_READY``: after step K is recorded the flow
  creates the READY file and sleeps (between decisions) so the parent can SIGKILL it, or, with
  ``LOOM_TEST_GO``, until the GO file exists (a stale worker that another one took over from).
* ``LOOM_TEST_BARRIER`` (a directory), ``LOOM_TEST_WORKER`` (a name), ``LOOM_TEST_PARTIES``:
  ``resume`` waits, after loading the execution and before appending anything, until every
  party has loaded it too.
* ``LOOM_TEST_SEED``: seeds the random sleeps of the ``gather`` flow.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from loom_runtime import Loom
from loom_runtime.errors import ExecutionConflictError, LoomError

PROMPT = "Answer {question!r} using only these hits: {hits}"
CHANGED_PROMPT = "You are an expert DBA. Answer {question!r} from: {hits}"

# (key, argument) in call order; keys repeat so the occurrence counter (key#2, ...) is exercised.
GATHER_CALLS: tuple[tuple[str, str], ...] = (
    ("search", "alpha"),
    ("model", "m1"),
    ("search", "beta"),
    ("fetch", "x"),
    ("search", "gamma"),
    ("model", "m2"),
    ("rank", "r"),
    ("search", "delta"),
    ("fetch", "y"),
    ("model", "m3"),
)

_rng = random.Random(os.environ.get("LOOM_TEST_SEED"))


def _note_call(name: str) -> None:
    path = os.environ.get("LOOM_TEST_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as calls:
            calls.write(f"{name} {os.getpid()}\n")
    if os.environ.get("LOOM_TEST_UNREACHABLE") == "1":
        raise ConnectionError(f"{name} is unreachable in this process (LOOM_TEST_UNREACHABLE=1)")


# -- live dependencies --------------------------------------------------------------------------


def search(question: str) -> list[str]:
    """A search service over TCP: one request line, one reply line of ``|``-separated hits."""
    _note_call("search")
    port = int(os.environ["LOOM_TEST_SEARCH_PORT"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(question.encode() + b"\n")
        reply = conn.makefile("rb").readline().decode().strip()
    return reply.split("|")


def call_model(prompt: str) -> str:
    """A stand-in model: a nondeterministic answer, so only the log can reproduce it."""
    _note_call("model")
    return f"answer#{uuid.uuid4().hex[:8]} to {len(prompt)} chars"


def _prompt(question: str, hits: list[str]) -> str:
    template = CHANGED_PROMPT if os.environ.get("LOOM_TEST_VARIANT") == "changed-prompt" else PROMPT
    return template.format(question=question, hits=", ".join(hits))


# -- flows --------------------------------------------------------------------------------------


def register(loom: Loom) -> None:
    """Register every flow of this module on ``loom``."""

    @loom.flow("triage")
    def triage(ctx: Any, question: str) -> dict[str, Any]:
        at = ctx.now()
        hits = ctx.decide(
            f"search:{question}", lambda: search(question), input={"q": question}, kind="retrieval"
        )
        prompt = _prompt(question, hits)
        answer = ctx.decide("model", lambda: call_model(prompt), input={"prompt": prompt})
        return {"answer": answer, "hits": hits, "at": at.isoformat()}

    @loom.flow("triage_async")
    async def triage_async(ctx: Any, question: str) -> dict[str, Any]:
        at = ctx.now()
        hits = await ctx.decide(
            f"search:{question}", lambda: search(question), input={"q": question}, kind="retrieval"
        )
        prompt = _prompt(question, hits)
        answer = await ctx.decide("model", lambda: call_model(prompt), input={"prompt": prompt})
        return {"answer": answer, "hits": hits, "at": at.isoformat()}

    @loom.flow("steps")
    def steps(ctx: Any, n: int) -> list[str]:
        values = []
        for i in range(1, n + 1):
            values.append(ctx.decide(f"step:{i}", lambda i=i: _step(i), input={"i": i}))
            _maybe_pause(after=i)
        return values

    @loom.flow("steps_with_fallback")
    def steps_with_fallback(ctx: Any, n: int) -> list[str | None]:
        # A flow that degrades gracefully: a failed step falls back, a failed fallback is None.
        values = []
        for i in range(1, n + 1):
            value = _tolerant(ctx, f"step:{i}", lambda i=i: _step(i), input={"i": i})
            if value is None:
                value = _tolerant(ctx, f"fallback:{i}", lambda: "fallback", input={"i": i})
            values.append(value)
            _maybe_pause(after=i)
        return values

    @loom.flow("gather")
    async def gather(ctx: Any, label: str) -> list[str]:
        async def one(key: str, argument: str) -> str:
            # The key (and its occurrence number) is fixed here, in call order; completion
            # order is then randomised both before the decision is awaited and inside compute.
            pending = ctx.decide(key, lambda: _gathered(key, argument), input={"arg": argument})
            await asyncio.sleep(_rng.uniform(0, 0.01))
            return await pending

        return list(await asyncio.gather(*(one(key, arg) for key, arg in GATHER_CALLS)))


def _tolerant(ctx: Any, key: str, compute: Any, *, input: Any) -> Any:
    try:
        return ctx.decide(key, compute, input=input)
    except Exception:  # deliberately broad, as flows with fallbacks are written
        return None


def _step(i: int) -> str:
    with open(os.environ["LOOM_TEST_SIDE_EFFECTS"], "a", encoding="utf-8") as effects:
        effects.write(f"{i} {os.getpid()}\n")
    if os.environ.get("LOOM_TEST_KILL_AT") == str(i):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"step {i} computed by {os.getpid()}"


def _maybe_pause(*, after: int) -> None:
    if os.environ.get("LOOM_TEST_PAUSE_AFTER") != str(after):
        return
    # Written aside, then renamed: the parent polls for the file and reads the pid at once, so
    # it must never see the file before the pid is in it.
    ready = Path(os.environ["LOOM_TEST_READY"])
    ready.with_suffix(".writing").write_text(str(os.getpid()))
    ready.with_suffix(".writing").replace(ready)
    go = os.environ.get("LOOM_TEST_GO")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the parent SIGKILLs us here, between two decisions,
        if go and Path(go).exists():  # or lets us go on once another worker took over
            return
        time.sleep(0.01)


async def _gathered(key: str, argument: str) -> str:
    _note_call(key)
    await asyncio.sleep(_rng.uniform(0, 0.03))
    return f"{key}({argument}) token {uuid.uuid4().hex[:8]}"


# -- CLI ----------------------------------------------------------------------------------------


def _barrier_after_load(loom: Loom) -> None:
    """Make ``loom.resume`` wait, once loaded and before appending, for every other party."""
    directory = os.environ.get("LOOM_TEST_BARRIER")
    if not directory:
        return
    parties = int(os.environ.get("LOOM_TEST_PARTIES", "2"))
    load = loom.execution

    def execution(execution_id: Any) -> Any:
        loaded = load(execution_id)
        Path(directory, f"{os.environ['LOOM_TEST_WORKER']}.loaded").write_text(str(loaded.version))
        deadline = time.monotonic() + 20
        while len(list(Path(directory).glob("*.loaded"))) < parties:
            if time.monotonic() > deadline:
                raise TimeoutError("the other resumers never loaded the execution")
            time.sleep(0.005)
        loom.execution = load  # type: ignore[method-assign]  # one-shot
        return loaded

    loom.execution = execution  # type: ignore[method-assign]


def _emit(payload: Any) -> None:
    sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("db_url")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("flow")
    run.add_argument("--input", default="{}")
    run.add_argument("--times", type=int, default=1)
    commands.add_parser("resume").add_argument("execution_id")
    commands.add_parser("replay").add_argument("execution_ids", nargs="+")
    args = parser.parse_args(argv)

    with Loom(args.db_url) as loom:
        register(loom)
        if args.command == "run":
            arguments = msgspec.json.decode(args.input)
            try:
                runs = [loom.run(args.flow, **arguments) for _ in range(args.times)]
            except ExecutionConflictError as exc:
                _emit({"error": type(exc).__name__, "message": str(exc)})
                return 3
            _emit([{"execution_id": str(r.execution_id), "output": r.output} for r in runs])
        elif args.command == "resume":
            _barrier_after_load(loom)
            before = loom.log.position
            try:
                resumed = loom.resume(args.execution_id)
            except ExecutionConflictError as exc:
                _emit({"error": type(exc).__name__, "message": str(exc)})
                return 3
            except LoomError as exc:
                _emit({"error": type(exc).__name__, "message": str(exc)})
                return 4
            _emit(
                {
                    "output": resumed.output,
                    "position_before": before,
                    "position_after": loom.log.position,
                }
            )
        else:
            results = []
            for execution_id in args.execution_ids:
                before = loom.log.position
                result = loom.replay(execution_id)
                results.append(
                    {
                        "identical": result.identical,
                        "divergences": [
                            {"type": type(d).__name__, "message": str(d)}
                            for d in result.divergences
                        ],
                        "output": result.output,
                        "position_before": before,
                        "position_after": loom.log.position,
                    }
                )
            _emit(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
