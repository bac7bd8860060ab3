"""The scale-out section's contended writes fork each writer and each audit from a zygote of
the reliability worker script started once per run, instead of a fresh interpreter per writer
per sample: the forked writers must still race on one log, released together, and the audit
must still judge what they reported, so the rows and the control mean what they meant."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest

from benchmarks import scaleout
from benchmarks.harness import InstrumentError, scratch_directory
from benchmarks.stores import fresh_sqlite

pytestmark = pytest.mark.slow  # zygote interpreters import loom; the writers race for seconds


def test_forked_writers_race_together_and_the_audit_sees_their_writes() -> None:
    with ExitStack() as stack:
        writers = scaleout._Writers(stack, 2)
        url, _ = stack.enter_context(fresh_sqlite())
        directory = stack.enter_context(scratch_directory())

        reports = writers.run(url, directory / "go", [], scaleout.QUICK_CONTENDED_OPS)
        (directory / "reports.json").write_text(json.dumps(reports))
        audit = writers.audit(url, directory / "reports.json")

        ready = sorted(path.name for path in directory.glob("go.ready.*"))

    assert len(reports) == 2
    assert len(ready) == 2  # both had opened the log when the start signal was given
    assert (audit["failures"], audit["lost"], audit["duplicated"]) == (0, 0, 0)
    assert audit["chain_ok"] and not audit["violations"]


def test_the_starved_control_still_fails_writes_through_the_zygotes() -> None:
    with ExitStack() as stack:
        writers = scaleout._Writers(stack, 4)
        arm = scaleout._contended_arm(
            writers,
            "SQLite",
            None,
            ops=scaleout.QUICK_CONTENDED_OPS,  # the fewest any run makes: still starved
            retry_budget=scaleout.CONTROL_RETRY_BUDGET_S,
        )
        sample = arm.measure()

    assert sample["failures"] > 0
    assert (sample["lost"], sample["duplicated"], sample["chain_ok"]) == (0, 0, 1.0)


def test_a_writer_that_fails_is_an_instrument_error_not_a_figure() -> None:
    with ExitStack() as stack:
        writers = scaleout._Writers(stack, 1)
        directory = stack.enter_context(scratch_directory())
        missing = directory / "no-such-directory" / "log.db"

        with pytest.raises(InstrumentError, match="contended-write worker failed"):
            writers.run(f"sqlite:///{missing}", directory / "go", [], 1)
