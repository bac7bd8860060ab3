"""The everyday regression loop (ADR 0029), end to end in a pytester project under git.

Record on first run, commit; the model goes away (CI has none) and the test still passes from
the bundle; change the prompt and the test fails with the diff; ``--loom-update`` re-seals the
bundle and prints what it accepted; the git diff of the bundle is the prompt line (and the
seal), so a reviewer reads the change the way they read code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

APP = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()
PROMPT = "TEMPLATE"


def model(prompt: str) -> str:
    REACHABLE


@flows.flow("greet")
def greet(ctx, name: str) -> str:
    salutation = ctx.decide("model", lambda: model(PROMPT + name), input={"prompt": PROMPT + name})
    return f"{salutation}, {name}"
"""

LIVE = 'return "Hello"'
UNREACHABLE = 'raise ConnectionError("no model in CI")'

TEST = """
import pytest


@pytest.mark.loom(bundle="recordings/greet.json")
def test_greet(loom):
    assert loom.run("greet", name="Ada").output == "Hello, Ada"
"""


def app(prompt: str, *, model: str) -> str:
    """The application module with this prompt template and this model."""
    return APP.replace("TEMPLATE", prompt).replace("REACHABLE", model)


def git(project: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=project, check=True, capture_output=True, text=True
    ).stdout


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a fresh process, as a developer runs it: the runs share no imported module."""
    return pytester.runpytest_subprocess("-p", "no:randomly", *args)


def changed_lines(diff: str) -> list[str]:
    """The ``-``/``+`` lines of a unified diff, without its file headers."""
    return [
        line
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    """A git repository with the app (model reachable), its test and ``loom_flows`` set."""
    pytester.syspathinsert()
    pytester.makeini("[pytest]\nloom_flows = greeter:flows\n")
    pytester.makepyfile(greeter=app("Greet ", model=LIVE), test_greet=TEST)
    (pytester.path / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
    git(pytester.path, "init", "-q")
    git(pytester.path, "config", "user.email", "dev@example.com")
    git(pytester.path, "config", "user.name", "dev")
    return pytester.path


@pytest.mark.slow
def test_record_replay_change_update(pytester: pytest.Pytester, project: Path) -> None:
    bundle = project / "recordings" / "greet.json"

    # 1. record on first run: the bundle appears, and is committed
    run(pytester, "--loom-record=once").assert_outcomes(passed=1)
    assert bundle.is_file()
    git(project, "add", "-A")
    git(project, "commit", "-qm", "record greet")

    # 2. CI: no model, replay-only by default: answered from the bundle
    pytester.makepyfile(greeter=app("Greet ", model=UNREACHABLE))
    run(pytester).assert_outcomes(passed=1)

    # 3. an intended prompt change: the test fails with the diff of the prompt
    pytester.makepyfile(greeter=app("Say hi to ", model=UNREACHABLE))
    failed = run(pytester)
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(
        [
            "*DecisionInputChangedError*",
            '*-  "prompt": "Greet Ada"*',
            '*+  "prompt": "Say hi to Ada"*',
        ]
    )
    assert not git(project, "status", "--porcelain", "recordings")  # a failure writes nothing

    # 4. accept it on purpose: green, and the accepted diff is printed
    updated = run(pytester, "--loom-update")
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(
        [
            "*loom --loom-update*",
            "re-sealed *greet.json, accepting:",
            '*+  "prompt": "Say hi to Ada"*',
        ]
    )
    run(pytester).assert_outcomes(passed=1)

    # 5. the review: the prompt line, and the seal (hash, export time), nothing else
    review = changed_lines(git(project, "diff", "--unified=0", "--", "recordings/greet.json"))
    assert sorted(review) == sorted(
        [
            '-          "prompt": "Greet Ada"',
            '+          "prompt": "Say hi to Ada"',
            *[line for line in review if '"content_hash"' in line or '"exported_at"' in line],
        ]
    )
    assert len(review) == 6
