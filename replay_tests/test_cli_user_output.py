"""What the user's code prints goes to stderr: a command's stdout is its own output alone.

A ``--flows`` module that printed while it loaded, or a flow whose body printed, wrote into
the command's stdout, so ``loom run --json`` (and ``replay``, ``fork``, ``knowledge sync``)
printed a line that is not JSON before the document, and a pipe of any command's output
carried the app's chatter. The lines still reach the terminal, on stderr.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from typer.testing import CliRunner, Result

from loom_runtime.tools.cli import app

CHATTY = """
print("loading the flows module")

from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("double")
def double(ctx, n: int) -> int:
    print("the flow body speaks")
    return ctx.decide("twice", lambda: n * 2)
"""


@pytest.fixture
def chatty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A flows module of a name of its own: a process imports a module once, and each test
    must see its module load (xdist runs several tests in one process)."""
    name = f"chatty_flows_{uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(CHATTY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:flows"


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _json(result: Result) -> Any:
    """The command's stdout as one JSON document (strict: nothing else printed before it)."""
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def _run(db_url: str, flows: str) -> str:
    result = _invoke(
        "run", "double", "--input", '{"n": 21}', "--db", db_url, "--flows", flows, "--json"
    )
    run = _json(result)
    assert run["output"] == 42 and "the flow body speaks" in result.stderr
    # A module is imported once per process: the first command of a test loads it.
    assert "loading the flows module" in result.stderr
    return str(run["execution_id"])


def test_run_json_is_json_when_the_flows_module_and_the_flow_print(
    db_url: str, chatty: str
) -> None:
    _run(db_url, chatty)


def test_replay_and_fork_json_are_json_when_the_flow_prints(
    db_url: str, chatty: str, tmp_path: Path
) -> None:
    execution_id = _run(db_url, chatty)
    replayed = _invoke("replay", execution_id, "--db", db_url, "--flows", chatty, "--json")
    assert _json(replayed)["identical"] is True
    assert "the flow body speaks" in replayed.stderr
    bundle = tmp_path / "run.json"
    assert _invoke("export", execution_id, "-o", str(bundle), "--db", db_url).exit_code == 0
    from_bundle = _invoke("replay", str(bundle), "--flows", chatty, "--json")
    assert _json(from_bundle)["identical"] is True
    forked = _invoke(
        "fork", execution_id, "--at", "twice", "--override", "twice=8", "--db", db_url,
        "--flows", chatty, "--json",
    )  # fmt: skip
    assert _json(forked)["output"] == 8
    again = _invoke(
        "knowledge", "counterfactual", execution_id, "--db", db_url, "--flows", chatty, "--json"
    )
    assert again.exit_code == 0, (again.stdout, again.stderr)
    assert json.loads(again.stdout)["unchanged"] is True
    assert "the flow body speaks" in again.stderr


def test_knowledge_sync_json_is_json_when_the_flows_module_prints(
    db_url: str, chatty: str, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("restart the worker\n")
    result = _invoke(
        "knowledge", "sync", str(folder), "--scope", "kb", "--db", db_url, "--flows", chatty,
        "--apply", "--json",
    )  # fmt: skip
    assert _json(result)["written"] == ["a.md"]
    assert "loading the flows module" in result.stderr


def test_the_command_s_own_output_stays_on_stdout(db_url: str, chatty: str) -> None:
    """The control: only the user's lines move; the command's own output (the run's id and
    output, then a listing) is still on stdout, and on stdout alone."""
    result = _invoke("run", "double", "--input", '{"n": 21}', "--db", db_url, "--flows", chatty)
    assert result.exit_code == 0
    assert "42" in result.stdout and "42" not in result.stderr
    found = re.search(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", result.stdout)
    assert found is not None
    execution_id = found[0]
    listed = _invoke("executions", "list", "--db", db_url, "--json")
    assert listed.exit_code == 0
    assert [row["execution_id"] for row in json.loads(listed.stdout)] == [execution_id]


UTF8_AND_SHELL = """
import io, subprocess, sys

sys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8")  # a common idiom
print("loading, in UTF-8: \\u00e9")

from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("double")
def double(ctx, n: int) -> int:
    print("the flow body speaks")
    subprocess.run([sys.executable, "-c", "print('a tool it runs speaks too')"], check=True)
    return ctx.decide("twice", lambda: n * 2)
"""


def test_in_a_real_process_the_code_s_own_stdout_and_its_subprocesses_go_to_stderr(
    tmp_path: Path,
) -> None:
    """Through real file descriptors, as `loom` runs from a shell: a module replacing
    ``sys.stdout`` with a UTF-8 wrapper of its buffer made every run fail (the redirect had
    swapped ``sys.stdout``, so the wrapper took stderr's buffer and closed it when collected:
    a regression review), and a tool's subprocess wrote into the JSON."""
    import os
    import subprocess
    import sys

    (tmp_path / "utf8_flows.py").write_text(UTF8_AND_SHELL)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    command = [sys.executable, "-m", "loom_runtime", "run", "double", "--input", '{"n": 21}']
    done = subprocess.run(
        [*command, "--db", db, "--flows", "utf8_flows:flows", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == 42
    for line in ("loading, in UTF-8", "the flow body speaks", "a tool it runs speaks too"):
        assert line in done.stderr
