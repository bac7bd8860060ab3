"""The projection conformance kit: every clause of a tracked projection as one pytest test.

A read model's author subclasses :class:`TrackedProjectionContract` and provides ONE fixture,
``harness``, yielding a :class:`ProjectionHarness`: the projection under test, new and empty,
over a fresh log, and how to write events it reads and look at what its readers see::

    import pytest
    from loom_runtime import Loom
    from loom_runtime.projection_conformance import TrackedProjectionContract

    class TestMyReadModel(TrackedProjectionContract):
        @pytest.fixture
        def harness(self, tmp_path):
            with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
                yield MyHarness(loom)

and adds ``pytest.register_assert_rewrite("loom_runtime.projection_conformance")`` to the
conftest.py that precedes it, so a failing clause shows its values. The class has no ``Test``
prefix so that pytest never collects the kit itself; each test states one clause in its
docstring, so ``-k`` selects clauses and a failure names the clause broken.

The kit drives the projection only through the :class:`~loom_runtime.projection.
TrackedProjection` protocol and :func:`~loom_runtime.projection.catch_up` /
:func:`~loom_runtime.projection.rebuild`, and judges it only by the harness's ``read_model``:
it holds for any read model, SQL or in-process, whatever its tables. To count and to break
pages it wraps the projection in a proxy that delegates every call: a crash is a page whose
iteration raises part-way through, which is what a store failing on its n-th write looks like
from inside ``apply``. A projection may pass over its page more than once (a first pass to
prepare, another to write), so the kit crashes each of the first three passes ``apply`` makes,
and requires that at least one of those crashes lands after ``apply`` started writing: a
projection that copies its page and writes only from the copy cannot be crashed mid-write by
the kit, so it fails, saying so (iterate the page you are given while you write). The kit
sees a write start as a row-changing statement (INSERT, UPDATE, DELETE, ...) sent through a
SQLAlchemy engine it can find (``projection.engine``, ``log.engine``), as the read model
changing in place, or through :class:`CountsWrites`.

Three capabilities of the harness are optional (presence is the feature flag) and their
clauses skip, by name, when absent:

* :class:`ExpectsReadModel`: the read model the harness's batches should build, worked out
  without the projection. Without it the kit compares the projection only with itself, and a
  projection that applies an event twice, or skips one kind, passes.
* :class:`Reopens`: open the projection again over the same storage, as a restarted process
  would; the position and the rows must survive together. Implement it wherever the
  projection's storage outlives the process (SQL tables, files).
* :class:`DropsStorage`: drop the storage, then reopen; the projection starts from 0 and
  rebuilds the same.

(The crash clauses, the expected read model and the reopen were added after a review found
projections the kit let pass: ADR 0022, amended 6 Dec.)

What the kit cannot see:

* two processes racing on one projection: it checks that a page already applied is refused
  (the mechanism), not the database locking that makes the refusal atomic across processes;
  that is the reliability suite's (real processes, SIGKILL).
* anything ``read_model`` leaves out: a projection is only as conformant as the harness is
  thorough in reading it.
* a write it cannot see start (a storage behind no SQLAlchemy engine, whose writes are
  invisible until committed): such a harness implements :class:`CountsWrites`, or the crash
  clause fails for want of a crash it can place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final, Protocol, overload, runtime_checkable

import pytest

from loom_runtime.projection import TrackedProjection, catch_up, rebuild

if TYPE_CHECKING:
    from types import TracebackType

    from loom_runtime.log import EventLog

Page = Sequence[tuple[int, Any]]
"""A page of ``(log position, event)`` pairs, as :func:`catch_up` hands to ``apply``."""


class ProjectionHarness(Protocol):
    """What a projection's test module provides for the kit."""

    @property
    def log(self) -> EventLog:
        """The log the projection is caught up from (fresh and empty when the test starts)."""
        ...

    @property
    def projection(self) -> TrackedProjection:
        """The projection under test (new, at position 0, when the test starts)."""
        ...

    def write(self, step: int) -> int:
        """Append batch ``step`` (0, 1, 2, ...) of events the projection reads; return how
        many. Each batch must change what ``read_model`` shows."""
        ...

    def read_model(self) -> object:
        """Everything the projection's readers can see now, as a value compared with ``==``."""
        ...


@runtime_checkable
class DropsStorage(Protocol):
    """Optional: the harness can drop the projection's storage, as an operator might."""

    def drop(self) -> None:
        """Drop the projection's tables, then reopen ``projection`` as a new process would."""
        ...


@runtime_checkable
class ExpectsReadModel(Protocol):
    """Optional: the harness knows what the projection should show."""

    def expected_read_model(self) -> object:
        """What ``read_model`` must equal once every batch written so far is applied, worked
        out without the projection under test (from what ``write`` wrote)."""
        ...


@runtime_checkable
class Reopens(Protocol):
    """Optional: the harness can open the projection again over the same storage."""

    def reopen(self) -> None:
        """Make ``projection`` a new object over the same storage, dropping nothing, as a
        restarted process would open it."""
        ...


@runtime_checkable
class CountsWrites(Protocol):
    """Optional: the harness can tell the kit that the projection's storage was written to,
    where the kit cannot see it (no SQLAlchemy engine, and nothing visible before a commit)."""

    def writes(self) -> int:
        """How many writes the projection's storage has been sent so far, committed or not."""
        ...


class InjectedCrash(Exception):
    """The fault the kit raises part-way through a page."""


_ROW_CHANGING: Final = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "MERGE", "UPSERT"})
"""First words of the statements that mean a write to a read model has started."""


class _WriteWatch:
    """Counts the statements, and among them the row-changing ones, sent through some
    SQLAlchemy engines while it is entered: how the kit knows that a crash landed after
    ``apply`` started writing, where uncommitted writes are invisible to ``read_model``."""

    def __init__(self, *candidates: object) -> None:
        from sqlalchemy import Engine

        self.engines: list[Engine] = []
        for candidate in candidates:
            if isinstance(candidate, Engine) and all(e is not candidate for e in self.engines):
                self.engines.append(candidate)
        self.statements = 0
        self.writes = 0

    def restart(self) -> None:
        """Count from zero: called as ``apply`` begins, so that what ``catch_up`` read
        before it (the page, the position) is not taken for ``apply``'s work."""
        self.statements = 0
        self.writes = 0

    def _seen(self, *args: Any) -> None:
        self.statements += 1
        words = str(args[2]).split(None, 1)  # (conn, cursor, statement, ...)
        if words and words[0].upper() in _ROW_CHANGING:
            self.writes += 1

    def __enter__(self) -> _WriteWatch:
        from sqlalchemy import event

        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        from sqlalchemy import event

        for engine in self.engines:
            event.remove(engine, "before_cursor_execute", self._seen)


class _Page(Sequence[tuple[int, Any]]):
    """A page that records the passes made over it to the end, and on pass ``crash_pass``
    (1-based) yields ``survive`` events (None: all of them), tells ``on_crash`` and raises
    :class:`InjectedCrash`. A pass that stops early (a peek at the first event) is not one
    the kit can crash: the fault fires only when the next event is asked for."""

    def __init__(
        self,
        page: Page,
        *,
        crash_pass: int | None = None,
        survive: int | None = 1,
        on_crash: Callable[[], None] | None = None,
    ) -> None:
        self._page = list(page)
        self._crash_pass = crash_pass
        self._survive = survive
        self._on_crash = on_crash
        self.passes = 0
        self.full: list[int] = []
        """The passes (1-based) that iterated the page to its end."""

    @overload
    def __getitem__(self, index: int) -> tuple[int, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[int, Any]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, Any] | Sequence[tuple[int, Any]]:
        return self._page[index]

    def __len__(self) -> int:
        return len(self._page)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        self.passes += 1
        this = self.passes
        if this != self._crash_pass:
            yield from self._page
            self.full.append(this)
            return
        survive = len(self._page) if self._survive is None else self._survive
        yield from self._page[:survive]
        if self._on_crash is not None:
            self._on_crash()
        raise InjectedCrash(
            f"injected on pass {self.passes} after {survive} of {len(self._page)} events"
        )


class _Watched:
    """The projection under test behind a proxy that records every page it accepts, counts
    the passes ``apply`` makes over each to its end, and can crash one page part-way through
    one pass (``crash_pass`` None: the last full pass ``apply`` began over the page before)."""

    def __init__(
        self,
        inner: TrackedProjection,
        *,
        crash_page: int | None = None,
        crash_pass: int | None = 1,
        survive: int | None = 1,
        on_crash: Callable[[], None] | None = None,
        watch: _WriteWatch | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0
        self.applied: list[int] = []
        self.pages: list[tuple[list[tuple[int, Any]], int, int]] = []
        """Each page applied: its events, the position it was read after, its ``upto``."""
        self.passes: list[list[int]] = []
        """For each page accepted, the passes (1-based) ``apply`` made over it to its end."""
        self._crash_page = crash_page
        self._crash_pass = crash_pass
        self._survive = survive
        self._on_crash = on_crash
        self._watch = watch

    @property
    def topics(self) -> Sequence[str]:
        return self.inner.topics

    def position(self) -> int:
        return self.inner.position()

    def reset(self) -> None:
        self.inner.reset()

    def apply(self, events: Page, *, after: int, upto: int) -> bool:
        self.calls += 1
        page = list(events)
        offered = _Page(page)
        if self._crash_page is not None and len(self.pages) == self._crash_page:
            last = max(self.passes[-1]) if self.passes and self.passes[-1] else 1
            crash_pass = self._crash_pass or last
            offered = _Page(
                page, crash_pass=crash_pass, survive=self._survive, on_crash=self._on_crash
            )
        if self._watch is not None:
            self._watch.restart()
        accepted = self.inner.apply(offered, after=after, upto=upto)
        if accepted:
            self.pages.append((page, after, upto))
            self.applied.extend(position for position, _ in page)
            self.passes.append(offered.full)
        return accepted


def _full_passes(watched: _Watched) -> list[int]:
    """The passes ``apply`` made to the end of the first page it accepted: the ones the kit
    can crash. A projection that never iterates its page gives the kit nowhere to fault it."""
    assert watched.passes and watched.passes[0], (
        "apply never iterated its page to the end, so the kit cannot inject a fault into it: "
        "iterate the page apply is given"
    )
    return sorted(watched.passes[0])  # in the order begun: a pass may nest in another


def _strictly_increasing(positions: list[int]) -> bool:
    return all(a < b for a, b in pairwise(positions))


class TrackedProjectionContract:
    """Subclass as ``TestYourProjection`` and provide a ``harness`` fixture (see the module)."""

    @pytest.fixture
    def dropping(self, harness: ProjectionHarness) -> DropsStorage:
        """The harness, for clauses of the optional storage drop; skips when it is absent."""
        if not isinstance(harness, DropsStorage):
            pytest.skip("optional capability 'drop' (DropsStorage) not provided by the harness")
        return harness

    @pytest.fixture
    def expecting(self, harness: ProjectionHarness) -> ExpectsReadModel:
        """The harness, for the clause of the optional expected read model; skips without."""
        if not isinstance(harness, ExpectsReadModel):
            pytest.skip(
                "optional capability 'expected_read_model' (ExpectsReadModel) not provided by "
                "the harness: the projection is compared only with itself"
            )
        return harness

    @pytest.fixture
    def reopening(self, harness: ProjectionHarness) -> Reopens:
        """The harness, for the clause of the optional reopen; skips when it is absent."""
        if not isinstance(harness, Reopens):
            pytest.skip("optional capability 'reopen' (Reopens) not provided by the harness")
        return harness

    # -- catch-up: every event after the position, exactly once -------------------------------

    def test_a_new_projection_is_at_position_zero(self, harness: ProjectionHarness) -> None:
        """A new projection over an empty log is at position 0, and catching up keeps it there."""
        assert harness.projection.position() == 0
        empty = harness.read_model()
        assert catch_up(harness.log, harness.projection) == 0
        assert harness.read_model() == empty

    def test_catch_up_reaches_the_head(self, harness: ProjectionHarness) -> None:
        """catch_up returns the position reached, and the projection then reports it."""
        harness.write(0)
        reached = catch_up(harness.log, harness.projection)
        assert reached > 0
        assert harness.projection.position() == reached

    def test_catch_up_applies_every_event_once(self, harness: ProjectionHarness) -> None:
        """A catch-up hands every event written to apply once, in log order."""
        written = harness.write(0) + harness.write(1)
        watched = _Watched(harness.projection)
        reached = catch_up(harness.log, watched)
        assert len(watched.applied) == written
        assert _strictly_increasing(watched.applied)
        assert watched.applied[0] > 0 and watched.applied[-1] <= reached

    def test_catch_up_starts_after_the_tracked_position(self, harness: ProjectionHarness) -> None:
        """A later catch-up applies only the events written since, all after the position."""
        harness.write(0)
        before = catch_up(harness.log, harness.projection)
        written = harness.write(1)
        watched = _Watched(harness.projection)
        catch_up(harness.log, watched)
        assert len(watched.applied) == written
        assert watched.applied[0] > before

    def test_a_second_catch_up_with_nothing_new_writes_nothing(
        self, harness: ProjectionHarness
    ) -> None:
        """With nothing new in the log, a catch-up calls apply not once and changes nothing."""
        harness.write(0)
        reached = catch_up(harness.log, harness.projection)
        seen = harness.read_model()
        watched = _Watched(harness.projection)
        assert catch_up(harness.log, watched) == reached
        assert watched.calls == 0
        assert harness.projection.position() == reached
        assert harness.read_model() == seen

    def test_page_size_does_not_change_the_read_model(self, harness: ProjectionHarness) -> None:
        """Applied one event per page, the read model is the one built in large pages."""
        harness.write(0)
        harness.write(1)
        reached = catch_up(harness.log, harness.projection)
        whole = harness.read_model()
        harness.projection.reset()
        watched = _Watched(harness.projection)
        assert catch_up(harness.log, watched, page_size=1) == reached
        assert all(len(page) <= 1 for page, _, _ in watched.pages)
        assert harness.read_model() == whole

    def test_a_page_already_applied_is_refused(self, harness: ProjectionHarness) -> None:
        """apply refuses (returns False) a page at or below its position and changes nothing."""
        harness.write(0)
        watched = _Watched(harness.projection)
        reached = catch_up(harness.log, watched)
        seen = harness.read_model()
        page, after, upto = watched.pages[0]
        assert harness.projection.apply(page, after=after, upto=upto) is False
        assert harness.projection.position() == reached
        assert harness.read_model() == seen

    def test_a_page_read_before_a_reset_is_refused(self, harness: ProjectionHarness) -> None:
        """apply refuses a page read after a position the projection has left backwards (a
        rebuild reset it between another projector's read and its apply): applied, it would
        move the position past the events the reset cleared, which no catch-up would apply."""
        harness.write(0)
        watched = _Watched(harness.projection)
        catch_up(harness.log, watched, page_size=1)
        page, after, upto = watched.pages[-1]
        assert after > 0  # a page past the first event: there is something below it to lose
        harness.projection.reset()
        assert harness.projection.apply(page, after=after, upto=upto) is False
        assert harness.projection.position() == 0
        assert catch_up(harness.log, harness.projection) == upto

    # -- what the read model should be (optional: ExpectsReadModel) ----------------------------

    def test_the_read_model_is_the_one_expected(
        self, harness: ProjectionHarness, expecting: ExpectsReadModel
    ) -> None:
        """Caught up after each batch, and rebuilt, the read model is the one the harness
        expects from what it wrote: an event applied twice, or one kind skipped, shows."""
        for step in range(3):
            harness.write(step)
            catch_up(harness.log, harness.projection)
            assert harness.read_model() == expecting.expected_read_model(), f"after batch {step}"
        rebuild(harness.log, harness.projection)
        assert harness.read_model() == expecting.expected_read_model(), "rebuilt"

    # -- crashes: rows and position together or not at all ------------------------------------

    def test_a_crash_mid_page_changes_nothing(self, harness: ProjectionHarness) -> None:
        """A page that fails part-way, on any of the first three passes apply makes over it,
        leaves the position and the read model as they were; and at least one such crash
        lands after apply started writing (else the kit cannot tell atomic from not)."""
        harness.write(0)
        first = _Watched(harness.projection)
        before = catch_up(harness.log, first)
        seen = harness.read_model()
        harness.write(1)
        counted = harness if isinstance(harness, CountsWrites) else None
        landed: list[bool] = []

        def wrote(watch: _WriteWatch, writes: int) -> None:
            """At the crash: had apply sent a write yet? The read model is looked at only
            where apply has sent no statement: inside a SQL transaction, a read could wait
            for the write lock that transaction holds."""
            landed.append(
                watch.writes > 0
                or (counted is not None and counted.writes() > writes)
                or (watch.statements == 0 and harness.read_model() != seen)
            )

        tried = _full_passes(first)[:3]
        for crash_pass in tried:
            for survive in (1, None):  # after the first event; after every event
                engine = getattr(harness.projection, "engine", None)
                with _WriteWatch(engine, harness.log.engine) as watch:
                    writes = counted.writes() if counted is not None else 0
                    crashing = _Watched(
                        harness.projection,
                        crash_page=0,
                        crash_pass=crash_pass,
                        survive=survive,
                        on_crash=partial(wrote, watch, writes),
                        watch=watch,
                    )
                    with pytest.raises(InjectedCrash):
                        catch_up(harness.log, crashing)
                assert harness.projection.position() == before, (crash_pass, survive)
                assert harness.read_model() == seen, (crash_pass, survive)
        assert any(landed), (
            f"no crash the kit injected (on passes {tried} apply made over a page to its end) "
            "landed after apply started writing: iterate the page "
            "apply is given while writing, not only a copy made first, or implement "
            "CountsWrites on the harness if the kit cannot see the storage's writes"
        )

    def test_the_catch_up_after_a_crash_completes(self, harness: ProjectionHarness) -> None:
        """After a page crashed on the last pass apply makes over it, the next catch-up
        reaches the head with a whole read model."""
        harness.write(0)
        first = _Watched(harness.projection)
        catch_up(harness.log, first)
        harness.write(1)
        crashing = _Watched(harness.projection, crash_page=0, crash_pass=_full_passes(first)[-1])
        with pytest.raises(InjectedCrash):
            catch_up(harness.log, crashing)
        reached = catch_up(harness.log, harness.projection)
        recovered = harness.read_model()
        assert rebuild(harness.log, harness.projection) == reached
        assert harness.read_model() == recovered

    def test_a_crash_on_a_later_page_keeps_the_pages_before_it(
        self, harness: ProjectionHarness
    ) -> None:
        """Pages applied before a crashed page stay applied, exactly as a clean build to there
        (the page crashed on the last pass apply made over the pages before it)."""
        harness.write(0)
        harness.write(1)
        watched = _Watched(harness.projection, crash_page=2, crash_pass=None)
        with pytest.raises(InjectedCrash):
            catch_up(harness.log, watched, page_size=1)
        kept = watched.pages[-1][2]
        assert harness.projection.position() == kept
        survived = harness.read_model()
        assert rebuild(harness.log, harness.projection, upto=kept) == kept
        assert harness.read_model() == survived

    # -- reset, rebuild, as of a position -----------------------------------------------------

    def test_reset_forgets_the_rows_and_the_position(self, harness: ProjectionHarness) -> None:
        """reset empties the read model and takes the position back to 0."""
        empty = harness.read_model()
        harness.write(0)
        catch_up(harness.log, harness.projection)
        assert harness.read_model() != empty  # the harness's batch must show
        harness.projection.reset()
        assert harness.projection.position() == 0
        assert harness.read_model() == empty

    def test_rebuild_gives_the_read_model_built_step_by_step(
        self, harness: ProjectionHarness
    ) -> None:
        """Rebuilt from position 0 in one go, the read model equals the one caught up in steps."""
        for step in range(3):
            harness.write(step)
            reached = catch_up(harness.log, harness.projection)
        stepwise = harness.read_model()
        assert rebuild(harness.log, harness.projection) == reached
        assert harness.projection.position() == reached
        assert harness.read_model() == stepwise

    def test_upto_builds_the_read_model_as_of_a_position(self, harness: ProjectionHarness) -> None:
        """Rebuilt with upto=P, the read model is the one the projection had at position P."""
        harness.write(0)
        then = catch_up(harness.log, harness.projection)
        as_of_then = harness.read_model()
        harness.write(1)
        now = catch_up(harness.log, harness.projection)
        current = harness.read_model()
        assert rebuild(harness.log, harness.projection, upto=then) == then
        assert harness.projection.position() == then
        assert harness.read_model() == as_of_then
        assert catch_up(harness.log, harness.projection) == now
        assert harness.read_model() == current

    def test_catch_up_never_applies_past_upto(self, harness: ProjectionHarness) -> None:
        """catch_up(upto=P) stops at P: no event after P reaches apply."""
        harness.write(0)
        then = catch_up(harness.log, harness.projection)
        harness.write(1)
        harness.projection.reset()
        watched = _Watched(harness.projection)
        assert catch_up(harness.log, watched, upto=then) == then
        assert watched.applied and max(watched.applied) <= then

    def test_a_reopened_projection_keeps_its_position_and_rows(
        self, harness: ProjectionHarness, reopening: Reopens
    ) -> None:
        """Opened again over the same storage, the projection is at the position it reached
        and shows the same read model, and a catch-up calls apply not once: rows and position
        outlive the process together (a position kept in memory beside durable rows fails)."""
        harness.write(0)
        harness.write(1)
        reached = catch_up(harness.log, harness.projection)
        built = harness.read_model()
        reopening.reopen()
        assert harness.projection.position() == reached
        assert harness.read_model() == built
        watched = _Watched(harness.projection)
        assert catch_up(harness.log, watched) == reached
        assert watched.calls == 0
        assert harness.read_model() == built

    def test_dropped_storage_is_rebuilt_from_the_log(
        self, harness: ProjectionHarness, dropping: DropsStorage
    ) -> None:
        """Its storage dropped and reopened, the projection starts from 0 and rebuilds the same."""
        harness.write(0)
        harness.write(1)
        reached = catch_up(harness.log, harness.projection)
        built = harness.read_model()
        dropping.drop()
        assert harness.projection.position() == 0
        assert catch_up(harness.log, harness.projection) == reached
        assert harness.read_model() == built
