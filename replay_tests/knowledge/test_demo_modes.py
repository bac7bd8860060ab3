"""``loom demo --mode hybrid``: the headline with hybrid retrieval and the hashing embedder,
replayed in a fresh process that has no embedding model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge.tools.demo import AbsentModel, _replay_main, run_demo
from loom_memory import EmbedderError, HashingEmbedder
from loom_runtime import Loom
from loom_runtime.tools.cli import app


def _text(output: str) -> str:
    return " ".join(output.split())  # Rich wraps long lines


@pytest.mark.slow  # runs `loom demo` in subprocesses
def test_demo_in_hybrid_mode_replays_without_corpus_or_model(demo_folder: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--mode", "hybrid"])
    assert result.exit_code == 0, result.output
    text = _text(result.output)
    assert "hybrid retrieval, loom-hashing-v1/1024 embeddings" in text
    assert "no corpus and no embedding model: IDENTICAL" in text
    assert "EQUAL to the original passage for passage" in text


@pytest.mark.slow  # runs `loom demo` in subprocesses
def test_the_hybrid_demo_records_the_query_vector_and_the_retrieval(sqlite_url: str) -> None:
    """The flow's retrieval is hybrid: an embedding decision, then the passages with the mode,
    model and floor in the retrieval's input."""
    lines: list[str] = []
    with Loom(sqlite_url) as loom:
        assert run_demo(loom, say=lines.append, owns_database=True, mode="hybrid")
        found = re.search(r"execution ([0-9a-f-]{36})", "\n".join(lines))
        assert found is not None
        decisions = loom.execution(found.group(1)).decisions.values()
        kinds = sorted(decision.kind for decision in decisions)
    assert kinds == ["embedding", "model", "retrieval"]


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--mode", "dense", "--db", f"sqlite:///{tmp_path}/x"])
    assert result.exit_code == 2
    assert "not one of lexical, vector, hybrid" in _text(result.output)
    assert not (tmp_path / "x").exists()


def test_the_replay_process_has_the_identity_and_not_the_model() -> None:
    absent = AbsentModel(HashingEmbedder())
    assert (absent.model, absent.dimension) == (HashingEmbedder().model, 1024)
    with pytest.raises(EmbedderError, match="not available"):
        absent.embed(["a question"])


def test_the_replay_entry_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert _replay_main(["replay", "--db", "sqlite://", "--scope", "s", "--mode", "dense", "x"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_demo_that_fails_leaves_no_source_folder_behind(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source folder was deleted at step 4 only, so a demo failing before it left a
    ``loom-demo-*`` folder in the temporary directory for every attempt."""
    import tempfile

    import loom_knowledge.tools.demo as demo

    temporary = tmp_path / "temporary"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the model is down")

    monkeypatch.setattr(demo, "answer_from_corpus", broken)
    with Loom(sqlite_url) as loom, pytest.raises(RuntimeError, match="the model is down"):
        run_demo(loom, say=lambda line: None, owns_database=True)
    assert list(temporary.iterdir()) == []


@pytest.mark.slow  # runs the demo's replay in a subprocess
def test_the_demo_ends_with_commands_that_explore_its_execution(sqlite_url: str) -> None:
    """The demo said "explore it with --db", but its flow has no --flows target, so `loom
    replay ID` could not run it. It ends by printing the commands that can: the audit, and
    the demo's own replay entry (the fresh process of step 5)."""
    import shlex
    import subprocess
    import sys

    lines: list[str] = []
    with Loom(sqlite_url) as loom:
        assert run_demo(loom, say=lines.append, owns_database=True)
    audit = next(line for line in lines if "loom audit" in line).split(": ", 1)[1]
    replay = next(line for line in lines if "tools.demo replay" in line).split(": ", 1)[1]
    audited = CliRunner().invoke(app, shlex.split(audit)[1:])
    assert audited.exit_code == 0, audited.output
    args = shlex.split(replay)
    assert args[:3] == [sys.executable, "-m", "loom_knowledge.tools.demo"]  # this interpreter
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and '"identical": true' in done.stdout, done.stderr


def test_a_mode_whose_extra_is_missing_exits_as_a_setup_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``loom demo --mode hybrid`` without the vector extra said what to install but exited
    1 ("a check failed"); a missing extra is the setup's, exit 2, as `knowledge sync
    --stemmer` without the stem extra exits."""
    from loom_knowledge.tools import demo
    from loom_runtime import MissingExtraError

    def needs_numpy(*args: object, **kwargs: object) -> bool:
        raise MissingExtraError(extra="vector", missing="numpy", needed_by="hybrid retrieval")

    monkeypatch.setattr(demo, "run_demo", needs_numpy)
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    result = CliRunner().invoke(app, ["demo", "--mode", "hybrid", "--db", db])
    assert result.exit_code == 2, result.output
    assert "loom-replay[vector]" in result.output
