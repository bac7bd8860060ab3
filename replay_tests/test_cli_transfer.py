"""``loom export`` of several executions and ``loom import``: a batch moves between logs,
nothing is duplicated, and one bad bundle does not stop the others."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from loom_runtime import Loom
from loom_runtime.tools.cli import ExitCode, app


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def source(tmp_path: Path) -> tuple[str, list[str]]:
    """A log holding three executions; its URL and their ids."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    with Loom(url) as loom:

        @loom.flow("double")
        def double(ctx: object, n: int) -> int:
            return ctx.decide("twice", lambda: n * 2)  # type: ignore[attr-defined]

        ids = [str(loom.run("double", n=n).execution_id) for n in range(3)]
    return url, ids


def test_several_executions_move_to_another_log_once(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    url, ids = source
    out = tmp_path / "bundles"
    exported = _invoke("export", *ids[:2], "-o", str(out), "--db", url)
    assert exported.exit_code == ExitCode.OK, exported.output
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{i}.json" for i in ids[:2])

    target = f"sqlite:///{tmp_path / 'target.db'}"
    imported = _invoke("import", str(out), "--db", target, "--json")
    assert imported.exit_code == ExitCode.OK, imported.output
    assert [r["status"] for r in json.loads(imported.stdout)] == ["imported", "imported"]
    with Loom(target) as loom:
        assert sorted(str(s.execution_id) for s in loom.executions()) == sorted(ids[:2])
        position = loom.log.position

    again = _invoke("import", str(out), "--db", target)
    assert again.exit_code == ExitCode.OK, again.output
    assert "imported 0 execution(s); 2 already in the log; 0 failed" in again.stdout
    with Loom(target) as loom:
        assert loom.log.position == position  # a re-run import writes nothing


@pytest.mark.parametrize("json_output", [False, True])
def test_export_says_on_stderr_that_a_bundle_is_outside_erasure(
    tmp_path: Path, source: tuple[str, list[str]], json_output: bool
) -> None:
    """A bundle is a copy in clear (ADR 0049): the command says so, as a note on stderr, so
    stdout carries only what was written (it was on stdout, and missing from ``--json``)."""
    url, ids = source
    result = _invoke(
        "export", ids[0], "-o", str(tmp_path / "b.json"), "--db", url, *["--json"] * json_output
    )
    assert result.exit_code == ExitCode.OK, result.output
    assert result.stderr.startswith("note: a bundle is a copy in clear, outside erasure's reach")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "erasure" not in result.stdout
    if json_output:
        assert [b["execution_id"] for b in json.loads(result.stdout)] == [ids[0]]


def test_export_all_writes_every_execution(tmp_path: Path, source: tuple[str, list[str]]) -> None:
    url, ids = source
    result = _invoke("export", "--all", "-o", str(tmp_path / "all"), "--db", url, "--json")
    assert result.exit_code == ExitCode.OK, result.output
    assert sorted(b["execution_id"] for b in json.loads(result.stdout)) == sorted(ids)


def test_one_bad_bundle_is_reported_and_the_others_go_in(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    url, ids = source
    out = tmp_path / "bundles"
    assert _invoke("export", "--all", "-o", str(out), "--db", url).exit_code == ExitCode.OK
    tampered = out / f"{ids[1]}.json"
    tampered.write_text(tampered.read_text().replace('"n": 1', '"n": 7'))
    target = f"sqlite:///{tmp_path / 'target.db'}"
    result = _invoke("import", str(out), "--db", target)
    assert result.exit_code == ExitCode.FAILED
    assert "imported 2 execution(s); 0 already in the log; 1 failed" in result.stdout
    # A file that failed is an error, not a warning (the command exits 1 for it), and the
    # refusal says how to get a good copy.
    assert result.stderr.startswith(f"error: {tampered}")
    assert " ".join(result.stderr.split()).count(str(tampered)) == 1  # named once
    assert "export it again" in result.stderr
    with Loom(target) as loom:
        assert sorted(str(s.execution_id) for s in loom.executions()) == sorted([ids[0], ids[2]])


@pytest.mark.parametrize(
    "args",
    [
        ["export", "-o", "out"],  # neither ids nor --all
        ["export", "--all", "ID", "-o", "out"],  # both
        ["export", "--all"],  # nowhere to write
        ["export", "not-a-uuid", "-o", "out.json"],
    ],
    ids=["nothing named", "ids and --all", "no output", "bad id"],
)
def test_export_usage_errors(
    tmp_path: Path, source: tuple[str, list[str]], args: list[str]
) -> None:
    url, _ = source
    result = _invoke(*args, "--db", url)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr.startswith("error: ")


def test_several_executions_are_refused_into_a_file(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    url, ids = source
    existing = tmp_path / "file.json"
    existing.write_text("{}")
    result = _invoke("export", *ids, "-o", str(existing), "--db", url)
    assert result.exit_code == ExitCode.USAGE
    assert existing.read_text() == "{}"


@pytest.mark.parametrize("suffix", [".json", ".msgpack", ".JSON"])
def test_several_executions_are_refused_into_a_bundle_file_name(
    tmp_path: Path, source: tuple[str, list[str]], suffix: str
) -> None:
    """``export A B -o out.json`` (no such path yet) made a directory named ``out.json`` and
    wrote the bundles into it: a name that says "one bundle file" is refused for several, with
    nothing made, as an existing file is. A directory already there keeps its name."""
    url, ids = source
    named = tmp_path / f"out{suffix}"
    for args in ([*ids[:2]], ["--all"]):
        result = _invoke("export", *args, "-o", str(named), "--db", url)
        assert result.exit_code == ExitCode.USAGE, result.output
        assert "directory" in result.stderr, result.stderr
        assert not named.exists()
    named.mkdir()  # the control: an existing directory so named is used as one
    kept = _invoke("export", *ids[:2], "-o", str(named), "--db", url)
    assert kept.exit_code == 0, kept.output
    assert len(list(named.iterdir())) == 2


def test_a_missing_path_imports_nothing(tmp_path: Path, source: tuple[str, list[str]]) -> None:
    url, ids = source
    bundle = tmp_path / "one.json"
    assert _invoke("export", ids[0], "-o", str(bundle), "--db", url).exit_code == ExitCode.OK
    target = tmp_path / "target.db"
    result = _invoke("import", str(bundle), str(tmp_path / "absent"), "--db", f"sqlite:///{target}")
    assert result.exit_code == ExitCode.USAGE
    assert not target.exists()


def test_an_import_of_only_unusable_files_creates_no_database(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """Every file refused before a row is written (a note, a tampered bundle): the command
    reports each, exits 1, and leaves no empty database behind at a path that may be a typo.
    One usable file among them is imported, in the order given."""
    url, ids = source
    note, tampered, good = tmp_path / "note.json", tmp_path / "tampered.json", tmp_path / "ok.json"
    note.write_text("not a bundle")
    assert _invoke("export", ids[0], "-o", str(tampered), "--db", url).exit_code == ExitCode.OK
    tampered.write_text(tampered.read_text().replace('"n": 0', '"n": 7'))
    target = tmp_path / "target.db"
    result = _invoke("import", str(note), str(tampered), "--db", f"sqlite:///{target}", "--json")
    assert result.exit_code == ExitCode.FAILED, result.output
    assert [r["status"] for r in json.loads(result.stdout)] == ["failed", "failed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.json", "source.db", "tampered.json"]

    assert _invoke("export", ids[1], "-o", str(good), "--db", url).exit_code == ExitCode.OK
    result = _invoke("import", str(note), str(good), "--db", f"sqlite:///{target}", "--json")
    assert result.exit_code == ExitCode.FAILED, result.output
    assert [r["status"] for r in json.loads(result.stdout)] == ["failed", "imported"]
    with Loom(f"sqlite:///{target}") as loom:
        assert [str(s.execution_id) for s in loom.executions()] == [ids[1]]


def test_export_into_a_directory_replaces_a_planted_link_not_what_it_points_to(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """The names in a directory are derived (``<id>.json``), so a link found under one was not
    chosen by the user: whoever could write to the directory (a shared ``/tmp/exports``) could
    plant ``<id>.json -> ~/.bashrc`` and have the export overwrite it. The bundle replaces the
    link itself, as ``tar`` replaces what it extracts over; a file named with ``-o FILE`` still
    follows its link (the user chose it: see ``test_bundle_atomic_write.py``)."""
    url, ids = source
    out = tmp_path / "shared"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / f"{ids[0]}.json").symlink_to(victim)

    result = _invoke("export", "--all", "-o", str(out), "--db", url)
    assert result.exit_code == ExitCode.OK, result.output
    assert victim.read_text() == "precious\n"
    written = out / f"{ids[0]}.json"
    assert not written.is_symlink()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(written.stat().st_mode) == 0o666 & ~umask  # not the link's 0o777
    assert json.loads(written.read_text())["execution_id"] == ids[0]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{i}.json" for i in ids)


def test_export_to_a_folder_that_is_not_there_is_one_line(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """``-o missing/f.json``: a usage error naming the path, not a FileNotFoundError traceback
    about the hidden partial file the write goes through."""
    url, ids = source
    target = tmp_path / "missing" / "f.json"
    result = _invoke("export", ids[0], "-o", str(target), "--db", url)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr.startswith(f"error: cannot write {target}: "), result.stderr
    assert ".partial" not in result.stderr and "Traceback" not in result.output


def test_import_reads_each_file_once_but_the_first_usable_one(
    tmp_path: Path, source: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Import reads files before it opens the database (so files that are all unusable
    create none), but only until one is usable: reading every file twice doubled the cost of
    importing a folder of large bundles. A bad file before the first good one is read once."""
    import loom_runtime.bundle
    import loom_runtime.loom

    url, _ = source
    out = tmp_path / "bundles"
    assert _invoke("export", "--all", "-o", str(out), "--db", url).exit_code == ExitCode.OK
    (out / "0-bad.json").write_text("{}")
    reads: list[str] = []
    real = loom_runtime.bundle.read_importable

    def counted(path: Path, **options: Any) -> Any:
        reads.append(path.name)
        return real(path, **options)

    monkeypatch.setattr(loom_runtime.bundle, "read_importable", counted)
    monkeypatch.setattr(loom_runtime.loom, "read_importable", counted)
    result = _invoke("import", str(out), "--db", f"sqlite:///{tmp_path / 'target.db'}")
    assert result.exit_code == ExitCode.FAILED  # the bad file
    assert "imported 3 execution(s); 0 already in the log; 1 failed" in result.stdout
    assert len(reads) == 5, reads  # the bad one once, the first good one twice, two once


def test_export_all_leaves_out_erased_executions_and_exports_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export --all` stopped at the first erased execution (exit 1, one error line) and
    left every later one out: after any erasure, no log could be moved. The erased ones are
    left out and named; every other one is written."""
    import base64

    from loom_runtime import MasterKey

    key = b"e" * 32
    monkeypatch.setenv("LOOM_MASTER_KEY", base64.urlsafe_b64encode(key).decode())
    url = f"sqlite:///{tmp_path / 'source.db'}"
    with Loom(url, encryption=MasterKey(key)) as loom:

        @loom.flow("double")
        def double(ctx: object, n: int) -> int:
            return ctx.decide("twice", lambda: n * 2)  # type: ignore[attr-defined]

        ids = [str(loom.run("double", n=n).execution_id) for n in range(4)]
        loom.erase(execution=ids[1], reason="request", by="dpo")
    out = tmp_path / "bundles"
    exported = _invoke("export", "--all", "-o", str(out), "--db", url)
    assert exported.exit_code == ExitCode.OK, exported.output
    kept = [ids[0], *ids[2:]]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{i}.json" for i in kept)
    assert f"1 erased execution(s) cannot be exported and were left out: {ids[1]}" in (
        exported.stderr
    )


def test_an_import_of_a_folder_with_no_bundle_says_so(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """Bundles only in subfolders (a nightly export's dated folders): "imported 0", exit 0,
    and nothing imported. Named, and a usage error; no database is made."""
    url, ids = source
    nested = tmp_path / "nested" / "2026-12-05"
    exported = _invoke("export", *ids[:2], "-o", str(nested), "--db", url)
    assert exported.exit_code == ExitCode.OK, exported.output
    target = tmp_path / "target.db"
    result = _invoke("import", str(tmp_path / "nested"), "--db", f"sqlite:///{target}")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "no bundle file" in result.stderr and "subfolders are not searched" in result.stderr
    assert not target.exists()
