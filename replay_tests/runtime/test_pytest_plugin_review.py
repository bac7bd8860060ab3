"""The pytest plugin after a review of its regression runs (ADR 0013, amended 2026-12-07
"plugin review"): a bundle that cannot be replayed, a folder's entry that is not replayed, a
bundle's text on the terminal, and the command a collected bundle's failure prints."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from loom_runtime.bundle import read_bundle, write_bundle
from loom_runtime.execution import Execution
from replay_tests.runtime.test_pytest_plugin import (  # noqa: F401 (fixtures, by name)
    LOOM_SOURCE,
    RUN,
    _loaded_before_pytester,
    _recorded,
    flows_module,
    forge_failure,
    marked_project,
    recordings,
)

RECORDED_FAILURE = 'with pytest.raises(CAUGHT):\n        loom.run("refuse", name="Ada")'
"""The guide's own pattern: a test expecting the failure its bundle recorded."""


def _renamed(flows: str, bundle: Path) -> str:
    return flows.replace('flow("refuse")', 'flow("refuse_v2")')


def _new_argument(flows: str, bundle: Path) -> str:
    return flows.replace("def refuse(ctx, name: str)", "def refuse(ctx, name: str, priority: int)")


def _edited(flows: str, bundle: Path) -> str:
    bundle.write_text(bundle.read_text().replace("refused Ada", "refused Bob"))
    return flows


def _conflicted(flows: str, bundle: Path) -> str:
    text = bundle.read_text()
    bundle.write_text(f"<<<<<<< HEAD\n{text}=======\n{text}>>>>>>> theirs\n")
    return flows


def _cut_short(flows: str, bundle: Path) -> str:
    text = bundle.read_text()
    bundle.write_text(text[: len(text) // 2])
    return flows


@pytest.mark.parametrize(
    ("change", "caught", "raised"),
    [
        (_renamed, "Exception", "FlowNotFoundError"),
        (_renamed, "KeyError", "FlowNotFoundError"),  # FlowNotFoundError is a KeyError
        (_new_argument, "Exception", "FlowInputError"),
        (_new_argument, "TypeError", "FlowInputError"),  # and FlowInputError a TypeError
        (_edited, "Exception", "Bundle*Error"),
        (_conflicted, "Exception", "Bundle*Error"),
        (_cut_short, "Exception", "Bundle*Error"),
    ],
    ids=[
        "renamed",
        "renamed-KeyError",
        "new-argument",
        "new-argument-TypeError",
        "edited-not-resealed",
        "merge-conflict",
        "cut-short",
    ],
)
def test_a_bundle_that_cannot_be_replayed_fails_the_test_that_catches_it(
    pytester: pytest.Pytester, change: Callable[[str, Path], str], caught: str, raised: str
) -> None:
    """The verdicts failed a test that caught them, but what stopped the replay before it
    began was raised as itself (a ``FlowNotFoundError``, a ``BundleError``): the test
    expecting its recorded failure caught it and passed with nothing replayed. It is a
    verdict now, named by what was raised, on one line with no traceback of loom's."""
    bundle = marked_project(pytester, "Greet ", RECORDED_FAILURE.replace("CAUGHT", caught))
    # the flow fails as the test expects: with a KeyError for the test catching KeyError
    flows = flows_module("Greet ").replace("ValueError(", f"{caught}(")
    pytester.makepyfile(greeter=flows)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)  # the control: green
    pytester.makepyfile(greeter=change(flows, bundle))
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"E   *BundleNotReplayed: *greet.json could not be replayed: {raised}: *",
            "E   *record it afresh with pytest --loom-record=rewrite test_greet.py::test_greet*",
        ]
    )
    output = result.stdout.str()
    assert LOOM_SOURCE not in output and "direct cause" not in output, output
    if caught == "Exception":
        result.stdout.fnmatch_lines(["*the test caught this verdict*"])
    # --full-trace still shows what was raised, and where in loom
    assert LOOM_SOURCE in pytester.runpytest("-p", "no:randomly", "--full-trace").stdout.str()


LOOM_REPLAY = """
import pytest

def test_incident(loom_replay):
    try:
        loom_replay(BUNDLE)
    except Exception:
        pytest.skip("backend down")
"""


def test_a_bundle_loom_replay_cannot_replay_fails_the_test_that_catches_it(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
) -> None:
    """The same through ``loom_replay``: a bundle cut short skipped the test that skips on
    any error ("backend down"). It fails, as a verdict ``loom_replay`` raised does."""
    pytester.makeini("[pytest]\nloom_flows = greeter:flows\n")
    bundle = recordings / "incident-1.json"
    pytester.makepyfile(
        greeter=flows_module("Greet "),
        test_incident=LOOM_REPLAY.replace("BUNDLE", repr(str(bundle))),
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
    _cut_short("", bundle)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E   *BundleNotReplayed: *incident-1.json could not be replayed: Bundle*Error: *"]
    )


def test_every_entry_of_a_bundle_folder_is_replayed_or_fails(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
) -> None:
    """A folder of bundles in the ``--loom-bundles`` folder, and a bundle named ``.JSON``,
    were left out of the run without a word: with every bundle's prompt changed, the run
    passed. Each is a test that fails saying why (a README is still no bundle)."""
    copy = (recordings / "incident-1.json").read_bytes()
    (recordings / "billing").mkdir()
    (recordings / "billing" / "incident-2.json").write_bytes(copy)
    (recordings / "INCIDENT-3.JSON").write_bytes(copy)
    (recordings / "README.md").write_text("exported incidents\n")
    pytester.makepyfile(flows_v1=flows_module("Greet "), flows_v2=flows_module("Say hi to "))
    options = ["-p", "no:randomly", "--loom-bundles", str(recordings), "-rA"]
    unchanged = pytester.runpytest(*options, "--loom-flows=flows_v1:flows")
    unchanged.assert_outcomes(passed=1, failed=2)
    unchanged.stdout.fnmatch_lines(
        [
            "INCIDENT-3.JSON ends in .JSON, and loom reads a bundle only as .json or .msgpack*",
            "billing is not a regular file (a folder*give this one a --loom-bundles of its own",
            "PASSED recordings/incident-1.json::replay?incident-1.json?",
            "FAILED recordings::refused?INCIDENT-3.JSON? - Failed: INCIDENT-3.JSON ends in*",
            "FAILED recordings::refused?billing? - Failed: billing is not a regular file*",
        ]
    )
    changed = pytester.runpytest(*options, "--loom-flows=flows_v2:flows")
    changed.assert_outcomes(failed=3)
    named = pytester.runpytest(
        "--loom-bundles", str(recordings / "INCIDENT-3.JSON"), "--loom-flows=flows_v1:flows"
    )
    named.assert_outcomes(failed=1)  # named alone, not "no such directory or bundle file"
    named.stdout.fnmatch_lines(["*INCIDENT-3.JSON ends in .JSON*"])


def test_hidden_entries_and_pycache_in_a_bundle_folder_are_not_refused(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
) -> None:
    """Every folder in a ``--loom-bundles`` folder failed as "not a regular file": a
    ``__pycache__`` Python made beside a helper module, a ``.git`` or an editor's hidden
    folder failed the run with nothing wrong in it. Those are tooling's, never a bundle's: left
    out, as a README is; a folder of another name still fails (above)."""
    for name in ("__pycache__", ".ipynb_checkpoints", ".git"):
        (recordings / name).mkdir()
        (recordings / name / "x.json").write_text("{}")
    pytester.makepyfile(flows_v1=flows_module("Greet "))
    options = ["-p", "no:randomly", "--loom-bundles", str(recordings), "-rA"]
    result = pytester.runpytest(*options, "--loom-flows=flows_v1:flows")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("content", [[], ["README.md"]], ids=["empty", "no-bundle"])
def test_a_bundle_folder_with_nothing_to_replay_fails(
    pytester: pytest.Pytester, content: list[str]
) -> None:
    """A ``--loom-bundles`` folder with no bundle in it replayed nothing, and the run passed
    on the project's other tests: one failing test says so."""
    pytester.syspathinsert()
    folder = pytester.mkdir("recordings")
    for name in content:
        (folder / name).write_text("exported incidents\n")
    pytester.makepyfile(flows_v1=flows_module("Greet "), test_other="def test_other(): pass\n")
    options = ["--loom-bundles", str(folder), "--loom-flows=flows_v1:flows", "-rA"]
    result = pytester.runpytest("-p", "no:randomly", *options)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"--loom-bundles={folder} holds no bundle (.json, .msgpack) to replay: *",
            "FAILED recordings::no-bundle - Failed: --loom-bundles=*",
        ]
    )


EVIL = "\x1b]0;owned\x07\x1b[2J\u202e\x9bboom"
"""A recorded failure's message that retitles and clears the terminal, reverses the text
after it and starts a C1 control sequence."""
SHOWN = "<U+001B>]0;owned<U+0007><U+001B>[2J<U+202E><U+009B>boom"

OWN_STR = """

class HTTPStatus(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status

    def __str__(self):
        return f"HTTP status {self.status}"
"""
"""An error class printing what its constructor sets: rebuilt from a recording as a subclass
whose ``__str__`` is the recorded message, which making its arguments inert left raw."""


def forge_cause(path: Path, message: str) -> None:
    """The bundle of ``greet`` re-sealed as if its model decision had failed with
    ``ValueError(message)`` and the flow with ``ValueError('boom')``: the current code raises
    the decision's error, another outcome, printed as the verdict's cause."""
    forge_failure(path, "builtins:ValueError", message)
    real = read_bundle(path)
    ended = msgspec.json.decode(real.events[-1].state)
    ended["message"] = "boom"
    events = [
        *real.events[:-1],
        msgspec.structs.replace(real.events[-1], state=msgspec.json.encode(ended).decode()),
    ]
    assert real.events[-1].topic == Execution.Failed.TOPIC
    write_bundle(real.resealed(events), path)


@pytest.mark.parametrize(
    "case",
    ["cause-marked", "cause-collected", "cause-loom-replay", "recorded-error-own-str"],
)
def test_a_bundle_s_text_is_printed_inert_wherever_it_reaches_a_failure(
    pytester: pytest.Pytester, case: str
) -> None:
    """The verdicts, and a recorded error's arguments, were made inert; the replayed code's
    error printed as a verdict's cause (a marked test's, a collected bundle's, a
    ``loom_replay``'s) was not, nor a rebuilt error whose class prints its own text: the
    bundle's escape sequences reached the terminal, in the failure and its summary line."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    if case == "recorded-error-own-str":
        pytester.makepyfile(greeter=flows_module("Greet ") + OWN_STR)
        forge_failure(bundle, "greeter:HTTPStatus", f"HTTP status 500{EVIL}")
        arguments: list[str] = []
    else:
        forge_cause(bundle, EVIL)
        arguments = [f"--loom-bundles={bundle.parent}", "-k", "replay"]
    if case == "cause-loom-replay":
        pytester.makepyfile(
            test_greet=f"def test_greet(loom_replay):\n    loom_replay({str(bundle)!r})\n"
        )
        arguments = []
    for style in ("auto", "native", "line"):
        result = pytester.runpytest("-p", "no:randomly", "-rA", f"--tb={style}", *arguments)
        result.assert_outcomes(failed=1)
        output = "\n".join(result.outlines)
        assert all(raw not in output for raw in "\x1b\x07\u202e\x9b"), output
        assert SHOWN in output, output


def test_a_collected_bundle_s_next_step_accepts_it_alone(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A collected bundle's failure said to accept it with ``pytest --loom-update
    --loom-bundles=FILE``: run as printed, from the project, that re-sealed every marked
    test's bundle whose replay had changed too, accepting changes no one had looked at. The
    command names ``--loom-bundles-only``: that bundle alone is collected and re-sealed (a
    test module elsewhere is not even imported)."""
    marked = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    incident = _recorded(pytester.path / "incidents", tmp_path) / "incident-1.json"
    pytester.makepyfile(greeter=flows_module("Say hi to "))
    before = marked.read_bytes(), incident.read_bytes()
    failed = pytester.runpytest("-p", "no:randomly", "--loom-bundles=incidents")
    failed.assert_outcomes(failed=2)
    step = re.search(
        r"accept it with pytest (--loom-update [^(]*--loom-bundles=incidents/[^(]*?) \(",
        failed.stdout.str(),
    )
    assert step is not None, failed.stdout.str()
    accepted = pytester.runpytest("-p", "no:randomly", *shlex.split(step[1]))
    assert marked.read_bytes() == before[0]  # the other test's bundle: not re-sealed
    accepted.assert_outcomes(passed=1)
    assert incident.read_bytes() != before[1] and b"Say hi to Ada" in incident.read_bytes()
    # nor does a test module elsewhere that no longer imports stop it
    incident.write_bytes(before[1])
    pytester.makepyfile(test_broken="import a_module_no_one_installed\n")
    pytester.runpytest("-p", "no:randomly", *shlex.split(step[1])).assert_outcomes(passed=1)
    assert b"Say hi to Ada" in incident.read_bytes()
    (pytester.path / "test_broken.py").unlink()
    again = pytester.runpytest("-p", "no:randomly", "--loom-bundles=incidents")
    again.assert_outcomes(passed=1, failed=1)  # the marked test still fails, for its own review
    alone = pytester.runpytest("-p", "no:randomly", "--loom-bundles-only")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["*--loom-bundles-only needs --loom-bundles=PATH*"])
