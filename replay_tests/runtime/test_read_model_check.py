"""``loom verify --read-models``: every read model compared with a rebuild of it from the log,
in copies of the SQLite database (ADR 0009, amended "check").

A read model's tracking row says how far it applied the log, never that its rows are right:
emptied postings or counts, an edited passage, a tracking row moved behind, or a damaged
full-text index left searches wrong while ``loom doctor`` said ok. Each damage below is one an
attack review made; each is found, and a log that was only written through loom (revisions,
removals, erasures of a document and of a memory key, recorded vectors) checks out.
"""

from __future__ import annotations

import base64
import io
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loom_knowledge import Doc, open_knowledge_base
from loom_memory import EventSourcedMemory, HashingEmbedder, MemoryEntry, SqliteMemoryStore
from loom_runtime import (
    EncryptionOffError,
    Loom,
    MasterKey,
    ReadModelCheckError,
    ReadModelCheckUnsupportedError,
    read_model_check,
)
from loom_runtime.tools.cli import app

SECRET = b"r" * 32
KEY = MasterKey(SECRET)
ENV = {"LOOM_MASTER_KEY": base64.urlsafe_b64encode(SECRET).decode()}


def _docs(revision: int, count: int = 12) -> list[Doc]:
    return [
        Doc(
            id=f"runbook-{n}",
            title=f"Runbook {n}",
            text=f"restart the vacuum worker {n} when replication lag grows; revision {revision}"
            + (" and page the on-call" if n % 3 == 0 else ""),
        )
        for n in range(count)
    ]


def _written(loom: Loom) -> None:
    """A log written only through loom: a corpus synced twice (revisions), a document removed
    and one erased, vectors recorded, a SQL memory appended, replaced, removed from and one
    of its keys erased."""
    kb = open_knowledge_base(loom, "ops", embedder=HashingEmbedder(), min_score=0.0)
    kb.sync(_docs(1), source="wiki")
    kb.sync(_docs(2, count=10), source="wiki")  # ten revised, two removed by the sync
    kb.put_doc(Doc(id="notes", text="autovacuum thresholds explained"), source="manual")
    assert kb.search("vacuum worker", limit=3, mode="vector")  # records the passages' vectors
    loom.erase(document="ops:runbook-4", reason="test", by="test")
    memory = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
    memory.append("dave", [MemoryEntry(id="d1", content="Dave's card ends in 4242")])
    memory.append("erin", [MemoryEntry(id="e1", content="Erin prefers email")])
    memory.append("erin", [MemoryEntry(id="e2", content="Erin works nights")])
    memory.replace("erin", [MemoryEntry(id="e3", content="Erin prefers phone calls")])
    memory.append(
        "frank", [MemoryEntry(id="f1", content="Frank"), MemoryEntry(id="f2", content="F")]
    )
    memory.remove("frank", ["f1"])
    loom.erase(memory_key="memory:dave", reason="test", by="test")
    memory.close()


@pytest.fixture
def written(sqlite_url: str) -> Iterator[Loom]:
    with Loom(sqlite_url, encryption=KEY) as loom:
        _written(loom)
        yield loom


def _sql(loom: Loom, statement: str) -> None:
    """Run ``statement`` on the log's file as anyone with write access to it can."""
    path = loom.settings.url.database
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute(statement)
    conn.close()


def _folder_listing(loom: Loom) -> list[str]:
    path = loom.settings.url.database
    assert path is not None
    return sorted(entry.name for entry in Path(path).parent.iterdir())


def test_a_log_written_through_loom_checks_out(written: Loom) -> None:
    before = _folder_listing(written)
    report = written.check_read_models()
    assert report.ok, report
    assert report.position == written.log.position
    # The corpus, the SQL memory and the recorded vectors were all compared.
    assert {name.split(":")[0] for name in report.projections} >= {
        "knowledge",
        "loom_memory",
        "loom_embeddings",
    }, report.projections
    assert report.tables >= 15
    assert _folder_listing(written) == before  # the copies are gone


def test_a_vector_memory_written_through_loom_checks_out(sqlite_url: str) -> None:
    """A vector store keeps, per key, a random token its writes change (what tells a cached
    in-process index that the key's rows moved): a copy rebuilt draws other tokens, so the
    check found every vector memory "damaged", and no `loom rebuild` could clear it (a memory
    review). The tokens are not compared; that every key has one is."""
    from loom_memory import EventSourcedVectorMemory
    from loom_memory.vector import SqliteVectorStore

    with Loom(sqlite_url) as loom:
        store = SqliteVectorStore(
            loom.log.engine, embedder=HashingEmbedder(dimension=32), min_score=0.0
        )
        memory = EventSourcedVectorMemory(loom, store=store)
        memory.append("k", [MemoryEntry(content="deploy the blue button")])
        memory.append("j", [MemoryEntry(content="rotate the logs")])
        report = loom.check_read_models()
        assert report.ok, report
        memory.close()


def test_read_models_caught_up_write_by_write_equal_one_rebuilt_in_pages(sqlite_url: str) -> None:
    """Live, each write caught up on its own; rebuilt, a page of many writes at once. Counts
    kept per block of 256 positions, revisions ended and terms that come and go must end up
    the same rows either way, or every clean log would be reported as differing."""
    with Loom(sqlite_url) as loom:
        kb = open_knowledge_base(loom, "ops")
        for n in range(300):  # past a 256-position block, one document rewritten many times
            kb.put_doc(Doc(id=f"d{n % 7}", text=f"doc {n} term{n % 5}"), source="m")
        kb.remove_doc("d3", source="m")
        memory = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine, postings=True))
        memory.append("k", [MemoryEntry(id="1", content="alpha zzz")])
        memory.replace("k", [MemoryEntry(id="2", content="beta")])
        memory.append("k", [MemoryEntry(id="3", content="zzz again")])
        memory.remove("k", ["3"])
        memory.clear("k")
        memory.append("j", [MemoryEntry(id="4", content="gamma")])
        memory.close()
        report = loom.check_read_models()
    assert report.ok, report


@pytest.mark.parametrize(
    ("damage", "table"),
    [
        ("DELETE FROM loom_kb_postings WHERE term = 'vacuum'", "loom_kb_postings"),
        ("DELETE FROM loom_kb_terms_at", "loom_kb_terms_at"),
        (
            "UPDATE loom_kb_current_terms SET df = df + 1 WHERE term = 'restart'",
            "loom_kb_current_terms",
        ),
        (
            "UPDATE loom_kb_entries SET entry = replace(entry, 'restart', 'delete') "
            "WHERE seq = (SELECT max(seq) FROM loom_kb_entries WHERE entry LIKE '%restart%')",
            "loom_kb_entries",
        ),
        ("DELETE FROM loom_kb_documents WHERE doc_id = 'notes'", "loom_kb_documents"),
        ("DELETE FROM loom_memory_entries WHERE key = 'erin'", "loom_memory_entries"),
        ("DELETE FROM loom_kb_subject_embeddings", "loom_kb_subject_embeddings"),
    ],
)
def test_rows_edited_by_hand_are_found(written: Loom, damage: str, table: str) -> None:
    _sql(written, damage)
    report = written.check_read_models()
    assert not report.ok
    [difference] = [d for d in report.differences if d.table == table]
    assert difference.only_here + difference.only_rebuilt > 0, report


def test_a_tracking_row_moved_behind_is_found(written: Loom) -> None:
    _sql(written, "UPDATE loom_tracking SET position = 3 WHERE projection = 'knowledge'")
    report = written.check_read_models()
    assert not report.ok
    # Applied again over its own rows: refused by a unique key, or doubled rows.
    assert report.problems or report.differences, report


def test_a_damaged_full_text_index_is_found(written: Loom) -> None:
    _sql(written, "DELETE FROM loom_kb_fts_data WHERE id = (SELECT max(id) FROM loom_kb_fts_data)")
    report = written.check_read_models()
    assert not report.ok
    assert any(problem.startswith("loom_kb_fts: ") for problem in report.problems), report


def test_the_live_database_is_only_read(written: Loom) -> None:
    """The live file is snapshotted, never written: damage found stays until a rebuild."""
    _sql(written, "DELETE FROM loom_kb_terms_at")
    path = written.settings.url.database
    assert path is not None
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT count(*) FROM loom_kb_terms_at").fetchone()[0]
    assert not written.check_read_models().ok
    with sqlite3.connect(path) as conn:
        after = conn.execute("SELECT count(*) FROM loom_kb_terms_at").fetchone()[0]
    assert before == after == 0


def test_a_table_name_holding_quotes_is_compared_not_run(written: Loom) -> None:
    """Table names are the database's words: quoted as identifiers, never run as SQL."""
    _sql(written, 'CREATE TABLE "x""; DROP TABLE loom_kb_entries; --" (a INTEGER)')
    report = written.check_read_models()
    assert report.ok, report  # the same (empty) table in both copies


def test_the_cli_says_which_tables_differ_and_exits_1(written: Loom) -> None:
    url = written.settings.url.render_as_string(hide_password=False)
    runner = CliRunner(env=ENV)
    ok = runner.invoke(app, ["verify", "--read-models", "--db", url])
    assert ok.exit_code == 0, ok.output
    assert "agree with a rebuild from the log at log position" in ok.output

    _sql(written, "DELETE FROM loom_kb_postings WHERE term = 'vacuum'")
    damaged = runner.invoke(app, ["verify", "--read-models", "--db", url])
    assert damaged.exit_code == 1, damaged.output
    assert "DIFFERS table loom_kb_postings holds" in damaged.output
    assert "`loom rebuild` rebuilds them" in damaged.output
    as_json = runner.invoke(app, ["verify", "--read-models", "--json", "--db", url])
    assert as_json.exit_code == 1
    report = json.loads(as_json.output)
    assert report["ok"] is False and report["problem"] is None  # the chain is intact
    assert [d["table"] for d in report["read_models"]["differences"]] == ["loom_kb_postings"]

    repaired = runner.invoke(app, ["rebuild", "--db", url])
    assert repaired.exit_code == 0, repaired.output
    again = runner.invoke(app, ["verify", "--read-models", "--db", url])
    assert again.exit_code == 0, again.output


def test_without_the_flag_verify_reads_no_read_model(written: Loom) -> None:
    _sql(written, "DELETE FROM loom_kb_terms_at")
    url = written.settings.url.render_as_string(hide_password=False)
    result = CliRunner(env=ENV).invoke(app, ["verify", "--db", url])
    assert result.exit_code == 0, result.output
    assert "read model" not in result.output


@pytest.mark.postgres
def test_a_postgresql_log_is_a_usage_error(pg_url: str) -> None:
    with Loom(pg_url) as loom, pytest.raises(ReadModelCheckUnsupportedError, match="PostgreSQL"):
        loom.check_read_models()
    result = CliRunner().invoke(app, ["verify", "--read-models", "--db", pg_url])
    assert result.exit_code == 2, result.output
    assert "loom rebuild" in result.output


def test_a_database_file_gone_since_it_was_opened_is_refused(written: Loom) -> None:
    path = written.settings.url.database
    assert path is not None
    Path(path).rename(Path(path).with_suffix(".moved"))
    with pytest.raises(ReadModelCheckUnsupportedError, match="no SQLite database at"):
        written.check_read_models()


# -- found by a review of the first version ---------------------------------------------------


def test_counts_left_at_zero_by_one_batching_and_not_another_are_not_a_difference(
    sqlite_url: str,
) -> None:
    """300 writes over 50 documents, each caught up on its own: a term's bucket of counts by
    position gets +1 and later -1 in two catch-ups (a row at zero), where the rebuild's one
    page cancels them before writing (no row). Both sum to the same counts at every position:
    the first version called this clean log damaged and told the user to rebuild."""
    with Loom(sqlite_url) as loom:
        kb = open_knowledge_base(loom, "ops")
        for n in range(300):
            text = f"writer doc {n} term{n % 13} lorem ipsum"
            kb.put_doc(Doc(id=f"w{n % 50}", text=text), source="w")
        report = loom.check_read_models()
    assert report.ok, report


def test_a_write_while_the_check_copies_is_in_neither_copy_or_in_both(sqlite_url: str) -> None:
    """Another writer appends while the check runs: both copies are one snapshot (the second is
    copied from the first), so a write lands in both or in neither. Two backups of the live
    file were two snapshots: every check under load reported the rebuild's extra rows."""
    with Loom(sqlite_url) as loom:
        open_knowledge_base(loom, "ops").sync(_docs(1), source="wiki")
    stop = threading.Event()

    def write() -> None:
        with Loom(sqlite_url) as writer:
            kb = open_knowledge_base(writer, "ops")
            n = 0
            while not stop.is_set():
                kb.put_doc(Doc(id=f"w{n % 20}", text=f"written meanwhile {n}"), source="m")
                n += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        with Loom(sqlite_url) as loom:
            reports = [loom.check_read_models() for _ in range(3)]
    finally:
        stop.set()
        thread.join()
    assert all(report.ok for report in reports), reports


def test_an_encrypted_log_without_its_key_is_refused_not_called_damaged(written: Loom) -> None:
    url = written.settings.url.render_as_string(hide_password=False)
    with Loom(url) as keyless, pytest.raises(EncryptionOffError, match="LOOM_MASTER_KEY"):
        keyless.check_read_models()
    result = CliRunner(env={"LOOM_MASTER_KEY": None}).invoke(
        app, ["verify", "--read-models", "--db", url]
    )
    assert result.exit_code == 2, result.output
    assert "DIFFERS" not in result.output and "loom rebuild" not in result.output


def test_a_read_model_that_cannot_open_here_is_unchecked_not_damaged(
    written: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read model this environment cannot open (a stemmer not installed) says nothing about
    its rows: UNCHECKED, exit 2, and no advice to rebuild."""
    real = read_model_check.registered_projections

    def without_an_extra(log: Any, *, unopened: Any = None) -> Any:
        unopened("loom_memory:memory:loom_memory_", ModuleNotFoundError("snowballstemmer"))
        return [p for p in real(log, unopened=unopened) if not p.name.startswith("loom_memory")]

    monkeypatch.setattr(read_model_check, "registered_projections", without_an_extra)
    report = written.check_read_models()
    assert not report.ok and not report.differences and not report.problems
    assert report.unchecked == (
        "loom_memory:memory:loom_memory_: could not be opened here "
        "(ModuleNotFoundError: snowballstemmer)",
    )
    url = written.settings.url.render_as_string(hide_password=False)
    result = CliRunner(env=ENV).invoke(app, ["verify", "--read-models", "--db", url])
    assert result.exit_code == 2, result.output
    assert "UNCHECKED loom_memory:memory:loom_memory_" in result.output
    assert "loom rebuild" not in result.output


def test_ctrl_c_stops_the_check_even_as_a_database_error(
    written: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLAlchemy may raise its own error for a KeyboardInterrupt in a query: the first
    version recorded it as the read model's damage and printed a verdict."""

    def interrupted(*_args: Any, **_kwargs: Any) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Can't reconnect until invalid transaction is rolled back") from exc

    monkeypatch.setattr(read_model_check, "catch_up", interrupted)
    before = _folder_listing(written)
    with pytest.raises(KeyboardInterrupt):
        written.check_read_models()
    assert _folder_listing(written) == before  # the copies are deleted on the way out


_TERMINATED_MIDWAY = """
import sys, time
from pathlib import Path
from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom, read_model_check

url, marker = sys.argv[1], Path(sys.argv[2])
with Loom(url) as loom:
    open_knowledge_base(loom, "ops").put_doc(Doc(id="a", text="alpha"), source="m")

def stuck(*args, **kwargs):
    marker.touch()  # the copies exist now: the parent sends SIGTERM
    time.sleep(60)

read_model_check.catch_up = stuck
with Loom(url) as loom:
    loom.check_read_models()
"""


def test_sigterm_during_a_check_deletes_its_copies_and_ends_the_process(tmp_path: Path) -> None:
    """The copies hold the database in clear. The default SIGTERM ended the process with them
    on disk, where they outlived a later erasure; raising an exception from the handler (the
    second version) could land between a lock's acquire and its ``try`` and hang the close.
    The handler deletes the folder itself and ends the process as SIGTERM does."""
    database, marker = tmp_path / "loom.db", tmp_path / "copying"
    process = subprocess.Popen(
        [sys.executable, "-c", _TERMINATED_MIDWAY, f"sqlite:///{database}", str(marker)]
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the check never reached its read models"
    assert list(tmp_path.glob(".loom-check-*")), "the copies should exist mid-check"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    assert not list(tmp_path.glob(".loom-check-*"))


def test_copies_that_cannot_be_written_are_one_typed_error(
    written: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = sqlite3.connect

    def full(target: Any, *args: Any, **kwargs: Any) -> Any:
        if str(target).endswith(".db") and ".loom-check-" in str(target):
            raise sqlite3.OperationalError("database or disk is full")
        return connect(target, *args, **kwargs)

    monkeypatch.setattr(read_model_check.sqlite3, "connect", full)
    before = _folder_listing(written)
    with pytest.raises(ReadModelCheckError, match="disk is full"):
        written.check_read_models()
    assert _folder_listing(written) == before


def test_a_tampered_chain_leaves_the_read_models_unchecked_and_says_so(written: Loom) -> None:
    _sql(written, "UPDATE stored_events SET state = state || ' ' WHERE rowid = 3")
    url = written.settings.url.render_as_string(hide_password=False)
    runner = CliRunner(env=ENV)
    text = runner.invoke(app, ["verify", "--read-models", "--db", url])
    assert text.exit_code == 1, text.output
    assert "read models not checked: the log itself did not verify" in text.output
    as_json = runner.invoke(app, ["verify", "--read-models", "--json", "--db", url])
    assert json.loads(as_json.output)["read_models"] is None


def test_progress_labels_from_the_database_are_printed_inert(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bar's label may be a read model's tracking name, which is the database's text: Rich
    read it as markup, and a control sequence in it reached the terminal."""
    from rich.console import Console

    from loom_runtime.tools import cli

    screen = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=screen, force_terminal=True))
    with cli.progress_bars() as bar:
        bar("rebuilt: [bold magenta]x\x1b]0;PWNED\x07")(1, 1)
    shown = screen.getvalue()
    assert "\x1b]0;PWNED" not in shown
    assert "[bold magenta]x" in shown


# -- found by a regression review of the fixes ------------------------------------------------


def test_the_default_relative_database_path_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``./loom.db``, the CLI's default: the copies' folder was relative and opening a copy by
    URI raised a ValueError traceback."""
    monkeypatch.chdir(tmp_path)
    with Loom("sqlite:///loom.db") as loom:
        open_knowledge_base(loom, "ops").sync(_docs(1), source="wiki")
        assert loom.check_read_models().ok
    result = CliRunner(env={"LOOM_DB_URL": None}).invoke(app, ["verify", "--read-models"])
    assert result.exit_code == 0, result.output


def test_a_leftover_marker_row_at_zero_is_still_found(written: Loom) -> None:
    """Buckets summed to zero are left out of the comparison, but a store's SELF_COUNTED
    marker (level -1) is never left behind: one planted blocks the next write, so it is
    damage, zero or not."""
    _sql(
        written,
        "INSERT INTO loom_kb_rows_at (key, level, bucket, n) VALUES ('knowledge:ops', -1, 0, 0)",
    )
    report = written.check_read_models()
    assert [d.table for d in report.differences] == ["loom_kb_rows_at"], report


def test_a_read_model_the_rebuild_cannot_build_compares_no_half_built_table(
    written: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild emptied the tables, then failed (the log cannot be projected here): its
    half-built tables read as DIFFERS with advice to rebuild. Now: UNCHECKED, nothing else."""
    real = read_model_check.rebuild

    def fails_midway(log: Any, projection: Any, **kwargs: Any) -> int:
        if projection.name == "knowledge":
            projection.reset()
            raise RuntimeError("sealed events cannot be opened here")
        return real(log, projection, **kwargs)

    monkeypatch.setattr(read_model_check, "rebuild", fails_midway)
    report = written.check_read_models()
    assert not report.differences and not report.problems, report
    assert report.unchecked == (
        "knowledge: could not be rebuilt (RuntimeError: sealed events cannot be opened here)",
    )


def test_a_folder_that_cannot_be_created_is_one_typed_error(
    written: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(*_args: Any, **_kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(read_model_check.tempfile, "mkdtemp", read_only)
    with pytest.raises(ReadModelCheckError, match="could not create a folder"):
        written.check_read_models()
