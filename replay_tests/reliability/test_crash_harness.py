"""Crashes: SIGKILL a real worker at every catalogued point, restart, check.

For each kill point of :data:`reliability_faults.CATALOGUE` (put_doc, sync, projection
catch-up, decide, completion) a fresh worker arms the point and runs its scenario on a fresh
database, and must die of SIGKILL there. A second, freshly started process then opens the
same database and runs every invariant of :mod:`reliability_checks`: the log decodes, versions
are contiguous, the corpus as the crash left it has no orphan and no document missing a
passage, every execution completed once or is resumed to completion without recomputing a
recorded decision, and the caught-up corpus equals a rebuild from the log.

Each kill point is its own test (``-k projection-tracking``), on SQLite and, when the suite's
server is up, PostgreSQL. The worker pairs are independent, so the first test to ask starts
every selected kill point of its backend on a small thread pool and each test then waits for
its own: the folder stays within a few minutes on two cores instead of running ~150 pairs of
interpreters one after the other.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from reliability_faults import CATALOGUE, KillPoint
from reliability_worker import Outcome, Zygote, run

# One pytest-xdist worker runs the whole module: the harness starts every kill point the
# session selected, and each worker's session holds all of them, so two workers would each run
# all ~100 worker pairs (ADR 0031).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("crash-harness")]

PARALLEL: Final = (os.cpu_count() or 2) + 1  # the workers wait on the database part of the time
TIMEOUT: Final = 60  # seconds for any one worker; every wait is bounded
BACKENDS: Final = ("sqlite", "postgresql")

# In the execution scenario the kill normally leaves the current run unfinished, so the check
# resumes exactly one execution. These points die where no run is in flight.
NOTHING_TO_RESUME: Final = {"log.save.before:2", *(f"complete.saved:{n}" for n in (1, 2, 3))}


class CrashRun(msgspec.Struct, frozen=True):
    """The killed worker and the check that followed it."""

    killed: Outcome
    checked: Outcome


Databases = Callable[[KillPoint], AbstractContextManager[str]]


class Harness:
    """Runs kill points ahead of their tests, :data:`PARALLEL` at a time, per backend."""

    def __init__(
        self,
        selected: dict[str, list[KillPoint]],
        databases: dict[str, Databases],
        scratch: Path,
    ) -> None:
        self._selected = selected
        self._databases = databases
        self._scratch = scratch
        self._pool = ThreadPoolExecutor(PARALLEL)
        self._zygotes: list[Zygote] = []
        self._local = threading.local()
        self._runs: dict[tuple[str, str], Future[CrashRun]] = {}

    def run(self, kill: KillPoint, backend: str) -> CrashRun:
        if (kill.id, backend) not in self._runs:
            for point in self._selected[backend]:  # start the backend's whole selection
                key = (point.id, backend)
                self._runs.setdefault(key, self._pool.submit(self._one, point, backend))
        return self._runs[(kill.id, backend)].result()

    def _one(self, kill: KillPoint, backend: str) -> CrashRun:
        zygote = self._zygote()
        with self._databases[backend](kill) as url:
            killed = zygote.run(url, "crash", kill.scenario, kill.spec, timeout=TIMEOUT)
            checked = zygote.run(url, "check", timeout=TIMEOUT)
        return CrashRun(killed=killed, checked=checked)

    def _zygote(self) -> Zygote:
        """This pool thread's zygote (one each, so jobs never queue behind one another)."""
        if not hasattr(self._local, "zygote"):
            self._local.zygote = Zygote(Path(tempfile.mkdtemp(dir=self._scratch)))
            self._zygotes.append(self._local.zygote)
        zygote: Zygote = self._local.zygote
        return zygote

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        for zygote in self._zygotes:
            zygote.close()


@pytest.fixture(scope="module")
def harness(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    selected: dict[str, list[KillPoint]] = {backend: [] for backend in BACKENDS}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "module", None) is request.module and "kill" in params:
            selected[params["backend"]].append(params["kill"])
    sqlite_dir = tmp_path_factory.mktemp("crash")

    def sqlite(kill: KillPoint) -> AbstractContextManager[str]:
        return nullcontext(f"sqlite:///{sqlite_dir / kill.id}.db")

    databases: dict[str, Databases] = {"sqlite": sqlite}
    if os.environ.get("LOOM_TEST_PG_URL"):
        fresh: Callable[[], AbstractContextManager[str]] = request.getfixturevalue(
            "postgres_database"
        )
        databases["postgresql"] = lambda _kill: fresh()
    instance = Harness(selected, databases, tmp_path_factory.mktemp("zygotes"))
    yield instance
    instance.close()


def _tail(text: str) -> str:
    return text[-3000:]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kill", CATALOGUE, ids=[kill.id for kill in CATALOGUE])
def test_a_worker_killed_here_leaves_a_log_a_restart_recovers(
    kill: KillPoint, backend: str, harness: Harness, request: pytest.FixtureRequest
) -> None:
    """SIGKILLed at this point, the log a fresh process opens is readable and converges."""
    if backend == "postgresql":
        request.getfixturevalue("postgres_database")  # skips, loudly, without a server
    crashed = harness.run(kill, backend)

    assert crashed.killed.killed, (
        f"{kill.spec} was never reached in the {kill.scenario} scenario (exit "
        f"{crashed.killed.status}): the catalogue no longer matches loom\n"
        f"{_tail(crashed.killed.stderr)}"
    )
    assert crashed.checked.status == 0, _tail(crashed.checked.stderr)
    report: dict[str, Any] = crashed.checked.payload
    assert report["violations"] == []
    if kill.scenario == "execution":
        expected = 0 if kill.spec in NOTHING_TO_RESUME else 1
        assert report["stats"].get("resumed", 0) == expected, report


def test_the_catalogue_has_enough_distinct_points_in_every_area() -> None:
    """At least 50 distinct kill points, spread over the five areas of the catalogue."""
    assert len({kill.id for kill in CATALOGUE}) == len(CATALOGUE) >= 50
    areas = {kill.area for kill in CATALOGUE}
    assert areas == {"put_doc", "sync", "projection", "decide", "completion"}


def test_a_point_that_is_never_reached_is_reported_as_such(tmp_path: Path) -> None:
    """Control: a worker armed past the last hit survives, so the kill assertion can fail."""
    survived = run(
        f"sqlite:///{tmp_path / 'loom.db'}", "crash", "corpus", "sync.enter:99", timeout=TIMEOUT
    )
    assert (survived.status, survived.payload) == (0, {"survived": True}), survived.stderr
