"""The pytest plugin under attack: what a bundle folder's entries and a test's ``except`` can
make of a run (an attack review's findings, ADR 0013 amendments of 2026-12-06)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_tests.runtime.test_pytest_plugin import (  # noqa: F401 (fixtures, by name)
    _loaded_before_pytester,
    _recorded,
    flows_module,
    recordings,
)

FORGED = "x\x1b]0;owned\x07\x1b[2J\nPASSED test_all.py::test_ok.json"
"""A bundle file name that retitles the terminal, clears it and forges a line of pytest's."""
NOT_UTF8 = os.fsdecode(b"bad\x9b\xff.json")
"""A file name that is not UTF-8: its byte 0x9b, printed raw, is a terminal's CSI."""


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        (FORGED, "x<U+001B>]0;owned<U+0007><U+001B>[2J<U+000A>PASSED test_all.py::test_ok.json"),
        (NOT_UTF8, "bad\\x9b\\xff.json"),
    ],
    ids=["escapes-and-newline", "not-utf-8"],
)
def test_a_bundle_name_that_does_not_print_as_itself_fails_named_inert(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
    name: str,
    shown: str,
) -> None:
    """pytest derives a test's id from its file's path and prints it raw (progress line,
    failure headline, summary), so the name retitled and cleared the terminal and forged a
    "PASSED" line. Such a file is a failed test named as ``visible`` shows it; the folder's
    ordinary bundle still passes."""
    (recordings / name).write_bytes((recordings / "incident-1.json").read_bytes())
    pytester.makepyfile(flows_v1=flows_module("Greet "))
    options = ["--loom-bundles", str(recordings), "--loom-flows=flows_v1:flows", "-rA"]
    for verbosity in ([], ["-v"]):
        result = pytester.runpytest(*options, *verbosity)
        result.assert_outcomes(passed=1, failed=1)
        output = result.stdout.str()
        assert "\x1b" not in output and "\x07" not in output, output
        assert not any(line.startswith("PASSED test_all.py") for line in result.outlines)
        assert name not in output and all(char not in output for char in "\udc9b\udcff")
        result.stdout.fnmatch_lines(
            [
                f"{shown} does not print as itself (<U+XXXX> and *",
                "PASSED recordings/incident-1.json::replay?incident-1.json?",
                f"FAILED recordings::refused?{shown}?*",
            ]
        )


def test_a_rerun_command_is_printed_on_one_line(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The next step a divergence prints names the folder's path as given, and kept a line
    break in it: a forged line after the command. Shown one-line; pytest's own test id is
    the test's path, which the user chose."""
    pytester.syspathinsert()
    folder = _recorded(pytester.path / "rec\nPASSED forged", tmp_path)
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    result = pytester.runpytest("--loom-bundles", str(folder), "--loom-flows=flows_v2:flows")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*accept it with pytest --loom-update *rec<U+000A>PASSED forged*"])
    assert not any(
        line.startswith("PASSED forged") and "--loom" in line for line in result.outlines
    )


CAUGHT = """
import pytest

def test_incident(loom_replay):
    BODY
"""


@pytest.mark.parametrize(
    "catch",
    [
        "try:\n        X\n    except Exception:\n        pass",
        'try:\n        X\n    except Exception:\n        pytest.skip("backend down")',
        'try:\n        X\n    except Exception:\n        pytest.xfail("known")',
        "with pytest.raises(Exception):\n        X",
    ],
    ids=["except", "skip", "xfail", "pytest.raises"],
)
def test_a_verdict_loom_replay_raises_fails_the_test_that_catches_it(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
    catch: str,
) -> None:
    """The marker's run failed a test that caught its verdict; ``loom_replay`` did not keep
    the verdict it raised, so the same test passed, skipped or xfailed on changed code."""
    pytester.makeini("[pytest]\nloom_flows = greeter:flows\n")
    run = f"loom_replay({str(recordings / 'incident-1.json')!r})"
    pytester.makepyfile(test_incident=CAUGHT.replace("BODY", catch.replace("X", run)))
    pytester.makepyfile(greeter=flows_module("Greet "))
    unchanged = pytester.runpytest("-p", "no:randomly")  # the control: as before
    if "pytest.raises" in catch:
        unchanged.assert_outcomes(failed=1)
        unchanged.stdout.fnmatch_lines(["*DID NOT RAISE*"])
    else:
        unchanged.assert_outcomes(passed=1)
    pytester.makepyfile(greeter=flows_module("Say hi to "))
    changed = pytester.runpytest("-p", "no:randomly")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*DecisionInputChangedError*", "*the test caught this verdict*"])


def linked_folder(folder: Path) -> Path:
    """``folder`` with two links out of it, to a bundle and to a text file elsewhere, and a
    folder named as a bundle; returns the bundle the link points to."""
    elsewhere = folder.parent / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / "someone-elses.json"
    outside.write_bytes((folder / "incident-1.json").read_bytes())
    (elsewhere / "notes.txt").write_text("not a bundle\n")
    (folder / "innocent.json").symlink_to("../elsewhere/someone-elses.json")
    (folder / "other.json").symlink_to("../elsewhere/notes.txt")
    (folder / "folder.json").mkdir()
    return outside


def test_a_link_in_a_bundle_folder_is_refused_and_never_written_through(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
) -> None:
    """``--loom-bundles`` followed a link out of the folder, read what it points to, named the
    test after it, and ``--loom-update`` re-sealed that file. A link (as a folder or a pipe
    named as a bundle) is a failed test named after itself, nothing read through it; the
    folder's own bundle is re-sealed as before."""
    outside = linked_folder(recordings)
    before = outside.read_bytes()
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    options = ["--loom-bundles", str(recordings), "--loom-flows=flows_v2:flows", "-rA"]
    result = pytester.runpytest("-p", "no:randomly", *options, "--loom-update")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "folder.json is not a regular file (a folder, a pipe or a device)*",
            "innocent.json is a symbolic link: *",
            "other.json is a symbolic link: *",
            "PASSED recordings/incident-1.json::replay?incident-1.json?",
            "FAILED recordings::refused?folder.json? - Failed: folder.json is*",
            "FAILED recordings::refused?innocent.json? - Failed: innocent.json*",
            "FAILED recordings::refused?other.json? - Failed: other.json*",
        ]
    )
    assert "elsewhere" not in result.stdout.str() and "notes.txt" not in result.stdout.str()
    assert outside.read_bytes() == before
    assert (recordings / "innocent.json").is_symlink() and (recordings / "other.json").is_symlink()
    result.stdout.fnmatch_lines(["re-sealed *recordings/incident-1.json, accepting:"])
    named = pytester.runpytest(
        "--loom-bundles", str(recordings / "innocent.json"), "--loom-flows=flows_v2:flows"
    )
    named.assert_outcomes(failed=1)  # named alone, as a failure's next step names a file
    named.stdout.fnmatch_lines(["*innocent.json*is a symbolic link*"])


SWAP = """
import os
from pathlib import Path

def pytest_runtest_setup(item):
    # After collection, the collected file becomes a link to a copy outside the folder.
    bundle = Path(item.path)
    outside = bundle.parent.parent / "elsewhere" / "copy.json"
    outside.parent.mkdir(exist_ok=True)
    outside.write_bytes(bundle.read_bytes())
    bundle.unlink()
    bundle.symlink_to(outside)
"""


def test_a_re_seal_replaces_a_link_planted_after_collection_not_its_target(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
) -> None:
    """A collected bundle is re-sealed at its own name: a link put there once the folder was
    collected is replaced, as ``loom export -o DIR`` replaces one, not written through."""
    pytester.makeconftest(SWAP)
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    options = ["--loom-bundles", str(recordings), "--loom-flows=flows_v2:flows", "--loom-update"]
    pytester.runpytest("-p", "no:randomly", *options).assert_outcomes(passed=1)
    bundle = recordings / "incident-1.json"
    copy = pytester.path / "elsewhere" / "copy.json"
    assert not bundle.is_symlink() and b"Say hi to Ada" in bundle.read_bytes()
    assert b"Say hi to Ada" not in copy.read_bytes()


def test_any_loom_error_of_a_collected_bundle_is_one_inert_line(
    pytester: pytest.Pytester,
    recordings: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A bundle whose flow is not registered failed with ~1,250 lines of pytest's own frames
    and locals, and the summary named ``_pytest.runner.CallInfo``. Every ``LoomError`` is its
    ``Type: message`` on one line, shown inert; with the flow registered, the bundle passes."""
    pytester.makepyfile(
        flows_none="from loom_runtime import FlowRegistry\nflows = FlowRegistry()\n",
        flows_v1=flows_module("Greet "),
    )
    options = ["--loom-bundles", str(recordings)]
    pytester.runpytest(*options, "--loom-flows=flows_v1:flows").assert_outcomes(passed=1)
    result = pytester.runpytest(*options, "--loom-flows=flows_none:flows")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "FlowNotFoundError: execution * was recorded by the flow 'greet', which is not "
            "registered in this process (registered: none)*",
            "FAILED *incident-1.json::replay?incident-1.json? - FlowNotFound*",
        ]
    )
    output = result.stdout.str()
    assert "/_pytest/" not in output and "/pluggy/" not in output, output
    assert len(result.outlines) < 20, output
