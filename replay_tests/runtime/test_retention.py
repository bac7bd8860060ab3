"""Retention (ADR 0053): executions started before a cutoff are erased by destroying their
keys, a dry run unless asked, from Python and from ``loom retain``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import msgspec
import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from loom_runtime import (
    ErasedError,
    FlowContext,
    Labels,
    Loom,
    MasterKey,
    RetentionPolicyError,
    parse_age,
)
from loom_runtime.bundle import read_bundle, write_bundle
from loom_runtime.errors import BundleFormatError

KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


def _history(loom: Loom) -> tuple[list[UUID], list[UUID]]:
    """Two old executions per tenant (started 2026-01-01) and one recent one each (April)."""
    _register(loom)
    old, new = [], []
    with freeze_time("2026-01-01T12:00:00Z"):
        for tenant in ("t1", "t1", "t2", "t2"):
            old.append(loom.run("note", text="old", labels=Labels(tenant=tenant)).execution_id)
    with freeze_time("2026-04-01T12:00:00Z"):
        for tenant in ("t1", "t2"):
            new.append(loom.run("note", text="new", labels=Labels(tenant=tenant)).execution_id)
    return old, new


def test_retain_erases_what_started_before_the_cutoff_and_nothing_else(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        old, new = _history(loom)
        with freeze_time("2026-04-15T12:00:00Z"):  # 104 days after the old ones, 14 after
            head = loom.log.position
            dry = loom.retain(older_than=timedelta(days=90), tenant="t1", dry_run=True)
            assert loom.log.position == head and not dry.applied
            assert {s.execution_id for s in dry.subjects} == {str(i) for i in old[:2]}
            report = loom.retain(older_than=timedelta(days=90), tenant="t1")
        assert report.applied and report.position is not None
        assert "2026-01-15" in report.selector and "tenant=t1" in report.selector
        for execution_id in old[:2]:
            with pytest.raises(ErasedError):
                loom.replay(execution_id)
        for execution_id in old[2:] + new:
            assert loom.replay(execution_id).identical
        assert loom.log.verify().problem is None
        with freeze_time("2026-04-15T12:00:00Z"):
            everyone = loom.retain(older_than=timedelta(days=90))
            again = loom.retain(older_than=timedelta(days=90))
        assert {s.execution_id for s in everyone.subjects} == {str(i) for i in old[2:]}
        assert set(everyone.already_erased) == {str(i) for i in old[:2]}
        assert again.subjects == () and again.position is None  # nothing left: nothing written
        for execution_id in new:
            assert loom.replay(execution_id).identical


def test_a_nightly_run_reads_nothing_of_what_earlier_runs_erased_and_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retention run selects every execution older than its age, most of them erased by
    earlier runs: it read every one's rows each night, and its text report (the mail cron
    sends) named each one, growing by every execution ever erased (found by an acceptance
    audit). The keys say what was erased: no row of theirs is read, and the text names the
    first 20 and counts the rest (``--json`` lists them all)."""
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _register(loom)
        with freeze_time("2026-01-01T12:00:00Z"):
            erased = [loom.run("note", text=f"old {n}").execution_id for n in range(25)]
        with freeze_time("2026-04-15T12:00:00Z"):
            first = loom.retain(older_than=timedelta(days=90))
            assert len(first.subjects) == 25
            late = loom.run("note", text="later").execution_id
        read: list[UUID] = []
        rows = loom.log.rows
        monkeypatch.setattr(
            loom.log, "rows", lambda stream: read.append(stream) or rows(stream), raising=False
        )
        with freeze_time("2026-08-01T12:00:00Z"):
            again = loom.retain(older_than=timedelta(days=90), dry_run=True)
        assert set(again.already_erased) == {str(i) for i in erased}
        assert [s.execution_id for s in again.subjects] == [str(late)]
        assert set(read) <= {late}  # no row of an erased execution was read
    with freeze_time("2026-08-01T12:00:00Z"):
        text = CliRunner().invoke(app, ["retain", "--older-than", "90d", "--db", url])
        listed = CliRunner().invoke(app, ["retain", "--older-than", "90d", "--json", "--db", url])
    assert text.exit_code == 0, text.output
    assert text.stdout.count("already erased") == 21  # 20 named, one line counting the rest
    assert "and 5 more already erased (--json lists them)" in text.stdout
    assert len(json.loads(listed.stdout)["already_erased"]) == 25


@pytest.mark.parametrize("text", ["90", "0d", "-5d", "90x", "", "d", "9" * 30 + "d", "1.5d"])
def test_a_bad_age_is_refused_with_a_clear_error(text: str) -> None:
    with pytest.raises(RetentionPolicyError, match="older-than"):
        parse_age(text)


@pytest.mark.parametrize("text", ["1000000d", "99999999d", "1234567h"])
def test_an_age_of_too_many_digits_is_refused_as_such(text: str) -> None:
    """A whole number and a unit, refused as "not an age: write a whole number and a unit"
    (found by an acceptance audit): the cause is the six digits an age may have."""
    with pytest.raises(RetentionPolicyError, match="at most six"):
        parse_age(text)


def test_ages_read_in_weeks_days_hours_and_minutes() -> None:
    assert parse_age("90d") == timedelta(days=90)
    assert parse_age("2w") == timedelta(weeks=2)
    assert parse_age("36h") == timedelta(hours=36)
    assert parse_age("15min") == timedelta(minutes=15)


@pytest.mark.parametrize("text", ["6m", "6mo", "1y", "6M"])
def test_an_age_in_months_or_years_or_a_bare_m_is_refused_saying_why(text: str) -> None:
    """``6m`` read as six minutes by a policy meant as six months would erase nearly
    everything once applied: an ambiguous unit is refused, with both spellings that work."""
    with pytest.raises(RetentionPolicyError, match="min for minutes") as refused:
        parse_age(text)
    assert "180d" in str(refused.value) or "365d" in str(refused.value)


@pytest.mark.parametrize(
    ("age", "said"),
    [
        (timedelta(days=90), "90d"),
        (timedelta(weeks=2), "14d"),
        (timedelta(days=182), "182d"),
        (timedelta(hours=36), "36h"),
        (timedelta(minutes=15), "15min"),
        (timedelta(seconds=90), "90s"),
    ],
)
def test_a_policy_s_reason_names_its_age_as_it_is_written(
    db_url: str, age: timedelta, said: str
) -> None:
    """The forget event's reason is read by people auditing erasures: ``older than 90d``,
    not Python's ``90 days, 0:00:00``."""
    with Loom(db_url, encryption=KEY) as loom:
        assert loom.retain(older_than=age, dry_run=True).reason == f"retention: older than {said}"


def test_a_zero_or_negative_age_is_refused_from_python(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom, pytest.raises(RetentionPolicyError):
        loom.retain(older_than=timedelta(0))


def test_loom_retain_is_a_dry_run_unless_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        old, new = _history(loom)
    runner = CliRunner()
    with freeze_time("2026-04-15T12:00:00Z"):
        dry = runner.invoke(app, ["retain", "--older-than", "90d", "--db", url])
        assert dry.exit_code == 0, dry.output
        assert "would erase 4 execution(s) started before 2026-01-15" in dry.stdout
        assert "pass --apply" in dry.stdout
        applied = runner.invoke(
            app, ["retain", "--older-than", "90d", "--apply", "--json", "--db", url]
        )
        assert applied.exit_code == 0, applied.output
        report = json.loads(applied.stdout)
        assert report["applied"]
        assert {s["execution_id"] for s in report["subjects"]} == {str(i) for i in old}
        bad = runner.invoke(app, ["retain", "--older-than", "90 days", "--db", url])
        assert bad.exit_code == 2 and "older-than" in bad.output
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _register(loom)
        assert all(loom.replay(i).identical for i in new)
    monkeypatch.delenv("LOOM_MASTER_KEY")
    keyless = runner.invoke(app, ["retain", "--older-than", "90d", "--db", url])
    assert keyless.exit_code == 2
    assert "cannot erase executions started before " in keyless.stderr


@pytest.mark.parametrize("text", ["999999w", "999999d"])
def test_an_age_reaching_before_the_calendar_is_refused_typed(db_url: str, text: str) -> None:
    """An age longer than the calendar (19,000 years) is a typo, refused as one, not an
    ``OverflowError`` out of the cutoff's arithmetic; nothing is written."""
    with Loom(db_url, encryption=KEY) as loom:
        head = loom.log.position
        with pytest.raises(RetentionPolicyError, match="older-than"):
            loom.retain(older_than=parse_age(text))
        with pytest.raises(RetentionPolicyError, match="older-than"):
            loom.retain(older_than=timedelta.max)
        assert loom.log.position == head


def test_loom_retain_refuses_an_age_before_the_calendar_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _history(loom)
    result = CliRunner().invoke(app, ["retain", "--older-than", "999999w", "--db", url])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --older-than") and result.stderr.count("\n") == 1


def _naive_copy(source: Loom, execution_id: UUID, into: Loom, path: Path) -> UUID:
    """Import ``execution_id`` into ``into`` from a bundle whose timestamps have no timezone,
    as one written by another tool (or edited by hand) may have."""
    _edited_copy(source, execution_id, path, r'("timestamp":\s*"[^"]+?)(Z|[+]00:00)"', r'\1"')
    return into.import_bundle(path)


def _edited_copy(source: Loom, execution_id: UUID, path: Path, pattern: str, by: str) -> Path:
    """``execution_id`` exported to ``path`` with ``pattern`` replaced ``by`` in every event's
    stored state, re-sealed (so only the edit is different)."""
    bundle = read_bundle(source.export(execution_id, path))
    edited = [
        msgspec.structs.replace(event, state=re.sub(pattern, by, event.state))
        for event in bundle.events
    ]
    assert edited != list(bundle.events)
    write_bundle(bundle.resealed(edited), path)
    return path


def test_a_start_recorded_without_a_timezone_is_read_as_utc(db_url: str, tmp_path: Path) -> None:
    """An imported execution whose start has no timezone neither stops every later run (a
    naive and an aware time cannot be compared) nor escapes the policy: it is taken as UTC."""
    with Loom(f"sqlite:///{tmp_path / 'plain.db'}") as plain, Loom(db_url, encryption=KEY) as loom:
        old, new = _history(plain)
        _register(loom)
        imported_old = _naive_copy(plain, old[0], loom, tmp_path / "old.loom")
        imported_new = _naive_copy(plain, new[0], loom, tmp_path / "new.loom")
        with freeze_time("2026-04-15T12:00:00Z"):
            report = loom.retain(older_than=timedelta(days=90))
        assert {s.execution_id for s in report.subjects} == {str(imported_old)}
        assert loom.replay(imported_new).identical


def test_a_bundle_that_starts_in_the_future_is_refused_by_import(
    db_url: str, tmp_path: Path
) -> None:
    """A bundle's times are untrusted: one that starts after the importing clock (its times
    edited to 2999, then re-sealed) would never be older than any retention age, so no policy
    would ever erase it. Import refuses it, writing nothing; a start within a day ahead (one
    machine's clock ahead of another's, a local time stored as UTC) is still imported."""
    ahead = (datetime.now(UTC) + timedelta(hours=20)).isoformat()
    with Loom(f"sqlite:///{tmp_path / 'plain.db'}") as plain, Loom(db_url, encryption=KEY) as loom:
        _old, new = _history(plain)
        _register(loom)
        head = loom.log.position
        future = _timed_copy(plain, new[0], tmp_path / "future.loom", "2999-04-01T12:00:00Z")
        with pytest.raises(BundleFormatError) as refused:
            loom.import_bundle(future)
        assert "starts at 2999-04-01T12:00:00+00:00, after this machine's clock" in str(
            refused.value
        )
        assert loom.log.position == head and loom.executions() == []
        skewed = _timed_copy(plain, new[1], tmp_path / "skewed.loom", ahead)
        assert loom.import_bundle(skewed) == new[1]
        assert loom.replay(new[1]).identical


def _timed_copy(source: Loom, execution_id: UUID, path: Path, when: str) -> Path:
    """``execution_id`` exported to ``path`` with every event's time replaced by ``when``."""
    return _edited_copy(
        source, execution_id, path, r'"timestamp":\s*"[^"]+"', f'"timestamp":"{when}"'
    )


def test_a_tenant_no_execution_has_is_named_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt tenant (``t3`` for ``t1``) in a nightly policy selected nothing and said
    nothing, every night. ``loom retain`` now warns, naming the known tenants; it still exits 0
    and writes nothing, since a policy may be set up before a tenant's first execution."""
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _history(loom)
        at = loom.log.position
    runner = CliRunner()
    for apply in ([], ["--apply"]):
        typo = runner.invoke(
            app, ["retain", "--older-than", "90d", "--tenant", "t3", *apply, "--db", url]
        )
        assert typo.exit_code == 0, typo.output
        assert typo.stderr == (
            "warning: no execution has tenant 't3' (known: 't1', 't2'); check the name\n"
        )
    known = runner.invoke(app, ["retain", "--older-than", "9999d", "--tenant", "t1", "--db", url])
    assert known.exit_code == 0 and known.stderr == "", known.output
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        assert loom.log.position == at
