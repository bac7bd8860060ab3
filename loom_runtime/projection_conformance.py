"""The projection conformance kit: every clause of a tracked projection as one pytest test.

A read model's author subclasses :class:`TrackedProjectionContract` and provides ONE fixture,
``harness``, yielding a :class:`ProjectionHarness`: the projection under test, new and empty,
over a fresh log, and how to write events it reads and look at what its readers see::

    import pytest
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
from inside ``apply``. Dropping the projection's storage is optional (a harness that can do it
implements :class:`DropsStorage`; presence is the feature flag) and skipped, by name, if absent.

What the kit cannot see:

* two processes racing on one projection: it checks that a page already applied is refused
  (the mechanism), not the database locking that makes the refusal atomic across processes;
  that is the reliability suite's (real processes, SIGKILL).
* anything ``read_model`` leaves out: a projection is only as conformant as the harness is
  thorough in reading it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Protocol, overload, runtime_checkable

import pytest

from loom_runtime.projection import TrackedProjection, catch_up, rebuild

if TYPE_CHECKING:
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


class InjectedCrash(Exception):
    """The fault the kit raises part-way through a page."""


class _CrashingPage(Sequence[tuple[int, Any]]):
    """A page that yields ``survive`` events, then raises :class:`InjectedCrash`."""

    def __init__(self, page: Page, *, survive: int) -> None:
        self._page = list(page)
        self._survive = survive

    @overload
    def __getitem__(self, index: int) -> tuple[int, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[int, Any]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, Any] | Sequence[tuple[int, Any]]:
        return self._page[index]

    def __len__(self) -> int:
        return len(self._page)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        yield from self._page[: self._survive]
        raise InjectedCrash(f"injected after {self._survive} of {len(self._page)} events")


class _Watched:
    """The projection under test behind a proxy that records every page it accepts and can
    crash one page part-way through."""

    def __init__(
        self, inner: TrackedProjection, *, crash_page: int | None = None, survive: int = 1
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0
        self.applied: list[int] = []
        self.pages: list[tuple[list[tuple[int, Any]], int, int]] = []
        """Each page applied: its events, the position it was read after, its ``upto``."""
        self._crash_page = crash_page
        self._survive = survive

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
        offered: Page = page
        if self._crash_page is not None and len(self.pages) == self._crash_page:
            offered = _CrashingPage(page, survive=self._survive)
        accepted = self.inner.apply(offered, after=after, upto=upto)
        if accepted:
            self.pages.append((page, after, upto))
            self.applied.extend(position for position, _ in page)
        return accepted


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

    # -- crashes: rows and position together or not at all ------------------------------------

    def test_a_crash_mid_page_changes_nothing(self, harness: ProjectionHarness) -> None:
        """A page that fails part-way leaves the position and the read model as they were."""
        harness.write(0)
        before = catch_up(harness.log, harness.projection)
        seen = harness.read_model()
        harness.write(1)
        with pytest.raises(InjectedCrash):
            catch_up(harness.log, _Watched(harness.projection, crash_page=0))
        assert harness.projection.position() == before
        assert harness.read_model() == seen

    def test_the_catch_up_after_a_crash_completes(self, harness: ProjectionHarness) -> None:
        """After a crashed page, the next catch-up reaches the head with a whole read model."""
        harness.write(0)
        catch_up(harness.log, harness.projection)
        harness.write(1)
        with pytest.raises(InjectedCrash):
            catch_up(harness.log, _Watched(harness.projection, crash_page=0))
        reached = catch_up(harness.log, harness.projection)
        recovered = harness.read_model()
        assert rebuild(harness.log, harness.projection) == reached
        assert harness.read_model() == recovered

    def test_a_crash_on_a_later_page_keeps_the_pages_before_it(
        self, harness: ProjectionHarness
    ) -> None:
        """Pages applied before a crashed page stay applied, exactly as a clean build to there."""
        harness.write(0)
        harness.write(1)
        watched = _Watched(harness.projection, crash_page=2)
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
