"""``loom recover`` and ``loom worker``: take over what crashed workers left (ADR 0040).

``loom recover`` is one pass, for a deploy hook or a cron job: it claims and finishes every
unfinished execution whose worker stopped heart-beating, and prints what it resumed. ``loom
worker`` is a long-running worker: it beats and recovers every ``--recover-every`` seconds until
SIGTERM or Ctrl-C, logging what it resumes on stderr. Both need the flows (``--flows``), and
both may run anywhere, any number at once: a claim is an append to the log, so each
execution is taken by exactly one of them.

Exit codes (the table of :class:`~loom_runtime.tools.cli.ExitCode`): 0 done (a recovered flow
that raised again is recorded as failed and reported on stderr, as ``loom run`` would record
it), 1 the log is damaged, 2 a usage error or a database that does not exist.
Registered on the ``loom`` app by the last line of :mod:`loom_runtime.tools.cli`.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from loom_runtime.errors import ConfigurationError, EncryptionOffError, LogCorruptError
from loom_runtime.recovery import (
    DEAD_AFTER,
    HEARTBEAT_EVERY,
    RECOVER_EVERY,
    is_abandoned,
    unfinished,
)
from loom_runtime.tools.cli import (
    DbOption,
    ExitCode,
    FlowsOption,
    JsonOption,
    app,
    console,
    err_console,
    fail,
    inert,
    open_with_flows,
    print_json,
    user_output,
)
from loom_runtime.tools.display import visible

if TYPE_CHECKING:
    from loom_runtime.loom import Loom

DeadAfterOption = Annotated[
    float,
    typer.Option(
        "--dead-after",
        min=0.001,
        help="Seconds without a heartbeat after which a worker is taken for dead.",
    ),
]
IncludeUnownedOption = Annotated[
    bool,
    typer.Option(
        "--include-unowned",
        help="Also take executions started outside a worker (or before workers existed): "
        "only when no such process can still be running them.",
    ),
]


@app.command()
def recover(
    dead_after: DeadAfterOption = DEAD_AFTER,
    include_unowned: IncludeUnownedOption = False,
    as_json: JsonOption = False,
    db: DbOption = None,
    flows: FlowsOption = None,
) -> None:
    """Finish every execution whose worker stopped heart-beating (one pass); print them."""
    _need_flows("recover", flows)
    with open_with_flows(db, flows) as loom, _failures_on_stderr(logging.WARNING):
        try:
            with user_output():
                runs = loom.recover(dead_after=dead_after, include_unowned=include_unowned)
            _note_left(loom, dead_after=dead_after, include_unowned=include_unowned)
        except LogCorruptError as exc:
            fail(str(exc))
        except EncryptionOffError as exc:  # a sealed execution, and no master key given
            fail(str(exc), code=ExitCode.USAGE)
    if as_json:
        print_json(runs)
        return
    for run in runs:
        console.print(inert(f"resumed execution {run.execution_id} (flow {run.flow!r})"))
    console.print(f"{len(runs)} execution(s) recovered")


@app.command()
def worker(
    heartbeat: Annotated[
        float, typer.Option("--heartbeat", min=0.001, help="Seconds between heartbeats.")
    ] = HEARTBEAT_EVERY,
    recover_every: Annotated[
        float, typer.Option("--recover-every", min=0.001, help="Seconds between recovery passes.")
    ] = RECOVER_EVERY,
    dead_after: DeadAfterOption = DEAD_AFTER,
    include_unowned: IncludeUnownedOption = False,
    stop_after: Annotated[
        float | None,
        typer.Option("--stop-after", min=0, help="Stop after this many seconds (default: never)."),
    ] = None,
    db: DbOption = None,
    flows: FlowsOption = None,
) -> None:
    """Run a worker that beats and recovers until SIGTERM or Ctrl-C (or --stop-after)."""
    _need_flows("worker", flows)
    for flag, seconds in (
        ("--heartbeat", heartbeat),
        ("--recover-every", recover_every),
        ("--stop-after", stop_after),
    ):
        if seconds is not None and not seconds <= threading.TIMEOUT_MAX:  # NaN too
            fail(
                f"{flag} ({seconds:g} s) is past the longest wait this platform takes "
                f"({threading.TIMEOUT_MAX:.0f} s); leave --stop-after out to run until stopped",
                code=ExitCode.USAGE,
            )
    if not 2 * heartbeat <= dead_after:  # in the flags' words (the library's names arguments)
        fail(
            f"--dead-after ({dead_after:g} s) must be at least twice --heartbeat "
            f"({heartbeat:g} s), or a live worker one beat late would be taken for dead",
            code=ExitCode.USAGE,
        )
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        with open_with_flows(db, flows) as loom, _failures_on_stderr(logging.INFO):
            try:
                with loom.worker(
                    heartbeat=heartbeat,
                    recover_every=recover_every,
                    dead_after=dead_after,
                    include_unowned=include_unowned,
                ) as worker_id:
                    console.print(
                        inert(f"worker {worker_id} running; stop it with SIGTERM or Ctrl-C")
                    )
                    with user_output():  # the flows it recovers run meanwhile
                        stopping.wait(stop_after)
                console.print(inert(f"worker {worker_id} stopped"))
            except ConfigurationError as exc:
                fail(str(exc), code=ExitCode.USAGE)
            except KeyboardInterrupt:
                pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _need_flows(command: str, flows: str | None) -> None:
    """Refuse to run without the flows: a pass could claim nothing it can finish (executions
    of flows not registered are left alone), so it would report "0 recovered" and succeed."""
    if not flows:
        fail(
            f"loom {command} finishes executions by running their flows: pass --flows "
            "MODULE:ATTR or set LOOM_FLOWS",
            code=ExitCode.USAGE,
        )


def _note_left(loom: Loom, *, dead_after: float, include_unowned: bool) -> None:
    """Say on stderr what the pass left that the operator can act on: without the notes, "0
    recovered" hid it. Unfinished executions of registered flows started outside a worker
    (unless they were asked for), and abandoned ones of flows not in --flows, with those
    flows' names (the skip itself is logged at DEBUG only)."""
    liveness = {w.worker: w.alive for w in loom.workers.workers(dead_after=dead_after)}
    unowned = 0
    unregistered: Counter[str] = Counter()
    for execution in unfinished(loom.log):
        if loom.flows.find(execution.flow) is None:
            if is_abandoned(execution.owner, liveness, include_unowned=include_unowned):
                unregistered[execution.flow] += 1
        elif not include_unowned and (execution.owner is None or execution.owner not in liveness):
            unowned += 1
    if unowned:
        err_console.print(
            f"note: {unowned} unfinished execution(s) started outside a worker were left: "
            "--include-unowned takes them when no process can still be running them",
            soft_wrap=True,
        )
    if unregistered:
        from loom_runtime.context import NAMED_IN_A_WARNING  # here: the CLI loads no log first

        named = unregistered.most_common(NAMED_IN_A_WARNING)
        more = len(unregistered) - len(named)
        flows = ", ".join(f"{flow!r} ({count})" for flow, count in named)
        err_console.print(
            inert(
                f"note: {unregistered.total()} unfinished execution(s) of flows not in --flows "
                f"were left, for a worker that has them: {flows}"
                + (f" and {more} more flow(s)" if more else ""),
                one_line=True,
            ),
            soft_wrap=True,
        )


_LEVELS = {"INFO": "note", "CRITICAL": "error"}
"""Logging's level names the command line names otherwise (others: in lower case)."""


class _InertFormatter(logging.Formatter):
    """A log line as :func:`~loom_runtime.tools.display.visible` shows it: the owner ids and
    error messages it quotes come from the log (an imported bundle names any owner it likes),
    so their control characters are shown as ``<U+XXXX>``, never sent to the terminal. The
    message is one line (a line break in a quoted owner printed a log line of its own); a
    traceback after it keeps its lines. Its level is named as the command line's own lines
    are: ``error:``, ``warning:``, ``note:`` (ADR 0008)."""

    def format(self, record: logging.LogRecord) -> str:
        one_line = logging.makeLogRecord(
            {
                **record.__dict__,
                "msg": visible(record.getMessage(), one_line=True),
                "args": None,
                "levelname": _LEVELS.get(record.levelname, record.levelname.lower()),
            }
        )
        return visible(super().format(one_line))


@contextmanager
def _failures_on_stderr(level: int) -> Iterator[None]:
    """Show the runtime's log (``loom.runtime``) at ``level`` and above on stderr meanwhile:
    what was recovered, and the failures a pass reports and goes past."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_InertFormatter("%(levelname)s: %(message)s"))
    runtime = logging.getLogger("loom.runtime")
    handler.setLevel(level)
    previous = runtime.level
    runtime.addHandler(handler)
    runtime.setLevel(min(level, previous or logging.WARNING))
    try:
        yield
    finally:
        runtime.removeHandler(handler)
        runtime.setLevel(previous)
