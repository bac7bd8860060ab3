"""The pytest plugin, exercised with pytester: bundles become tests that fail readably."""

from __future__ import annotations

import importlib
import shlex
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import msgspec
import pytest

import loom_runtime
from loom_runtime import FlowRegistry, Loom
from loom_runtime.bundle import read_bundle, write_bundle
from loom_runtime.execution import Execution

FLOWS = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("greet")
def greet(ctx, name: str) -> str:
    salutation = ctx.decide("model", lambda: "Hello", input={"prompt": PROMPT + name})
    return f"{salutation}, {name}"

@flows.flow("refuse")
def refuse(ctx, name: str) -> str:
    ctx.decide("model", lambda: "Hello", input={"prompt": PROMPT + name})
    raise ValueError(f"refused {name}")

PROMPT = "TEMPLATE"
"""


def flows_module(template: str) -> str:
    """The flows module's source, with the prompt template the code has at that time."""
    return FLOWS.replace("TEMPLATE", template)


@pytest.fixture(scope="module", autouse=True)
def _loaded_before_pytester(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Run a flow and load every package's events before any pytester snapshot. pytester
    forgets the modules imported after its snapshot, but eventsourcing keeps their classes by
    topic (the storage factory, the events a forged bundle's unknown topic makes loom load):
    imported again by a later test, they would clash. hypothesis is imported here too: its
    pytest plugin imports it at the end of every session, and forgotten after each inner one,
    it was imported afresh by the next, a fifth of a second each, half of this module's time."""
    importlib.import_module("hypothesis.internal.observability")
    for entry_point in entry_points(group="loom.events"):
        entry_point.load()
    namespace: dict[str, object] = {}
    exec(flows_module("Greet "), namespace)
    flows = namespace["flows"]
    assert isinstance(flows, FlowRegistry)
    with Loom(f"sqlite:///{tmp_path_factory.mktemp('warm') / 'warm.db'}", flows=flows) as warm:
        warm.import_bundle(
            warm.export(
                warm.run("greet", name="Ada").execution_id,
                Path(tmp_path_factory.mktemp("warm-bundle") / "b.json"),
            )
        )


@pytest.fixture
def recordings(pytester: pytest.Pytester, tmp_path: Path) -> Path:
    """A folder with one bundle, recorded by the code as it was (the 'Greet ' prompt), and
    the test's folder on the import path (where it writes the flows modules)."""
    pytester.syspathinsert()
    return _recorded(pytester.path / "recordings", tmp_path)


def _recorded(folder: Path, tmp_path: Path) -> Path:
    """``folder`` made, holding one bundle recorded by the 'Greet ' prompt."""
    namespace: dict[str, object] = {}
    exec(flows_module("Greet "), namespace)
    flows = namespace["flows"]
    assert isinstance(flows, FlowRegistry)
    folder.mkdir()
    with Loom(f"sqlite:///{tmp_path / 'rec.db'}", flows=flows) as recorder:
        run = recorder.run("greet", name="Ada")
        recorder.export(run.execution_id, folder / "incident-1.json")
    return folder


def test_one_passing_test_per_bundle(pytester: pytest.Pytester, recordings: Path) -> None:
    """Unchanged code: the bundle's test passes, with no database anywhere."""
    pytester.makepyfile(flows_v1=flows_module("Greet "))
    result = pytester.runpytest("--loom-bundles", str(recordings), "--loom-flows=flows_v1:flows")
    result.assert_outcomes(passed=1)
    assert not list(pytester.path.glob("*.db"))


def test_collected_bundles_are_counted_with_the_other_tests(
    pytester: pytest.Pytester, recordings: Path
) -> None:
    """pytest said "collected 1 item" for a test file and a bundle, then ran 2: a bundle's
    test was added after pytest counted. Counted, ``--collect-only`` and ``-k`` agree."""
    pytester.makepyfile(flows_v1=flows_module("Greet "), test_other="def test_other(): pass\n")
    options = ["--loom-bundles", str(recordings), "--loom-flows=flows_v1:flows"]
    listed = pytester.runpytest(*options, "--collect-only", "-q")
    listed.stdout.fnmatch_lines(["*incident-1.json::replay?incident-1.json?", "2 tests collected*"])
    ran = pytester.runpytest(*options)
    ran.stdout.fnmatch_lines(["collected 2 items"])
    ran.assert_outcomes(passed=2)
    picked = pytester.runpytest(*options, "-k", "replay[incident-1.json]")
    picked.stdout.fnmatch_lines(["collected 2 items / 1 deselected / 1 selected"])
    picked.assert_outcomes(passed=1, deselected=1)


def test_a_changed_prompt_fails_with_the_diff(pytester: pytest.Pytester, recordings: Path) -> None:
    """Changed prompt template: the test fails and shows recorded vs replayed input."""
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    result = pytester.runpytest("--loom-bundles", str(recordings), "--loom-flows=flows_v2:flows")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*DecisionInputChangedError*",
            '*-  "prompt": "Greet Ada"*',
            '*+  "prompt": "Say hi to Ada"*',
        ]
    )


def test_update_reseals_a_collected_bundle_too(pytester: pytest.Pytester, recordings: Path) -> None:
    """--loom-bundles with --loom-update: the changed prompt is accepted and printed, the
    bundle re-sealed (replaying green afterwards), and still no database anywhere."""
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    options = (
        "-p",
        "no:randomly",
        "--loom-bundles",
        str(recordings),
        "--loom-flows=flows_v2:flows",
    )
    result = pytester.runpytest(*options, "--loom-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["re-sealed *incident-1.json, accepting:", '*+  "prompt": "Say hi to Ada"*']
    )
    pytester.runpytest(*options).assert_outcomes(passed=1)
    assert not list(pytester.path.glob("*.db"))


def test_the_fixture_replays_hand_written_cases(
    pytester: pytest.Pytester, recordings: Path
) -> None:
    """loom_replay(path) in a user's test, flows supplied by overriding loom_flows."""
    pytester.makepyfile(flows_v1=flows_module("Greet "))
    pytester.makeconftest(
        "import pytest, flows_v1\n@pytest.fixture\ndef loom_flows():\n    return flows_v1.flows\n"
    )
    bundle = recordings / "incident-1.json"
    pytester.makepyfile(
        test_incidents="def test_incident_1(loom_replay):\n"
        f"    assert loom_replay({str(bundle)!r}).output == 'Hello, Ada'\n"
    )
    pytester.runpytest().assert_outcomes(passed=1)


def reseal(path: Path, version: int, topic: str | None = None, **changes: object) -> None:
    """Rewrite event ``version`` of the bundle at ``path`` (its state's fields changed, a
    ``value`` field dropped when ``topic`` changes) and re-seal it, as a forger would."""
    real = read_bundle(path)
    events = list(real.events)
    event = events[version - 1]
    state = msgspec.json.decode(event.state)
    if topic is not None:
        del state["value"]
    state.update(changes)
    events[version - 1] = msgspec.structs.replace(
        event, topic=topic or event.topic, state=msgspec.json.encode(state).decode()
    )
    forged = real.resealed(events)
    write_bundle(forged, path)


def test_a_bundle_naming_a_module_fails_readably_without_importing_it(
    pytester: pytest.Pytester, recordings: Path
) -> None:
    """A re-sealed bundle whose Created names a planted module as its aggregate fails as a
    BundleFormatError, and the module's code never runs."""
    marker = pytester.path / "imported"
    pytester.makepyfile(planted=f"open({str(marker)!r}, 'w').close()\nclass Boom:\n    pass\n")
    reseal(recordings / "incident-1.json", 1, originator_topic="planted:Boom")
    pytester.makepyfile(flows_v1=flows_module("Greet "))
    result = pytester.runpytest("--loom-bundles", str(recordings), "--loom-flows=flows_v1:flows")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*BundleFormatError*originator_topic*planted:Boom*"])
    assert not marker.exists()


def test_a_forged_replay_finding_in_a_bundle_fails_the_test(
    pytester: pytest.Pytester, recordings: Path
) -> None:
    """A re-sealed bundle whose decision 'failed' with ReplayDivergence is red: a recorded
    error is never taken for the replay's own finding."""
    reseal(
        recordings / "incident-1.json",
        2,
        Execution.DecisionFailed.TOPIC,
        error_type="loom_runtime.errors:ReplayDivergence",
        message="forged",
    )
    pytester.makepyfile(flows_v1=flows_module("Greet "))
    result = pytester.runpytest("--loom-bundles", str(recordings), "--loom-flows=flows_v1:flows")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*OutcomeChangedError*ReplayDivergence*"])


MARKED = """
import pytest


@pytest.mark.loom(bundle="recordings/greet.json")
def test_greet(loom):
    BODY
"""


def marked_project(pytester: pytest.Pytester, prompt: str, body: str) -> Path:
    """A project whose one test runs ``body`` under the marker; returns the bundle's path."""
    pytester.syspathinsert()
    pytester.makeini("[pytest]\nloom_flows = greeter:flows\n")
    pytester.makepyfile(greeter=flows_module(prompt), test_greet=MARKED.replace("BODY", body))
    return pytester.path / "recordings" / "greet.json"


RUN = 'assert loom.run("greet", name="Ada").output == "Hello, Ada"'


def test_replay_only_is_the_default_and_a_missing_bundle_says_how_to_record(
    pytester: pytest.Pytester,
) -> None:
    bundle = marked_project(pytester, "Greet ", RUN)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*no loom bundle at *greet.json: record it with --loom-record=once*"]
    )
    assert not bundle.exists()


def test_once_records_then_replays_and_rewrite_records_afresh(pytester: pytest.Pytester) -> None:
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    first = read_bundle(bundle)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    assert read_bundle(bundle) == first  # replayed: the file is untouched
    pytester.runpytest("-p", "no:randomly", "--loom-record=rewrite").assert_outcomes(passed=1)
    assert read_bundle(bundle).execution_id != first.execution_id


def test_the_replayed_run_can_be_looked_up_like_a_recorded_one(pytester: pytest.Pytester) -> None:
    marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    marked_project(
        pytester,
        "Greet ",
        'run = loom.run("greet", name="Ada")\n'
        '    assert loom.execution(run.execution_id).decisions["model"].key == "model"',
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)


def test_update_refuses_a_new_decision_and_leaves_the_bundle(pytester: pytest.Pytester) -> None:
    """Only changed inputs and output are accepted: a key never recorded still fails."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    before = bundle.read_bytes()
    pytester.makepyfile(
        greeter=flows_module("Greet ").replace(
            'ctx.decide("model"', 'ctx.decide("tone", lambda: "warm") and ctx.decide("model"'
        )
    )
    result = pytester.runpytest("-p", "no:randomly", "--loom-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*UnrecordedDecisionError*'tone' was never recorded*"])
    assert bundle.read_bytes() == before


def test_other_arguments_than_recorded_fail_with_their_diff(pytester: pytest.Pytester) -> None:
    marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    marked_project(pytester, "Greet ", 'loom.run("greet", name="Grace")')
    result = pytester.runpytest("-p", "no:randomly", "--loom-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*BundleMismatch*--loom-record=rewrite*", '*-  "name": "Ada"*', '*+  "name": "Grace"*']
    )


def test_a_bundle_holds_one_run(pytester: pytest.Pytester) -> None:
    bundle = marked_project(pytester, "Greet ", f"{RUN}\n    {RUN}")
    result = pytester.runpytest("-p", "no:randomly", "--loom-record=once")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*BundleMismatch*holds one execution*"])
    assert not bundle.exists()  # the first run is not kept: its test failed


def test_the_marker_needs_a_bundle(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    pytester.makeini("[pytest]\nloom_flows = greeter:flows\n")
    pytester.makepyfile(
        greeter=flows_module("Greet "),
        test_greet="import pytest\n@pytest.mark.loom\ndef test_greet(loom):\n    pass\n",
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.stdout.fnmatch_lines(["*@pytest.mark.loom needs bundle=PATH*"])
    assert result.ret != 0


def test_an_unmarked_test_gets_a_plain_loom_on_a_temporary_file(
    pytester: pytest.Pytester,
) -> None:
    marked_project(pytester, "Greet ", RUN)
    pytester.makepyfile(
        test_plain="def test_plain(loom, tmp_path):\n"
        '    assert loom.run("greet", name="Ada").output == "Hello, Ada"\n'
        "    assert (tmp_path / 'loom.db').exists()\n"
    )
    pytester.runpytest("-p", "no:randomly", "test_plain.py").assert_outcomes(passed=1)
    assert not (pytester.path / "recordings").exists()


def test_a_recorded_failure_is_raised_again_when_replayed(pytester: pytest.Pytester) -> None:
    """A flow that raised when recorded raises the same when replayed: the test that expects
    it (``pytest.raises``) passes in both modes, as the one test body promises."""
    bundle = marked_project(
        pytester,
        "Greet ",
        'with pytest.raises(ValueError, match="refused Ada"):\n'
        '        loom.run("refuse", name="Ada")',
    )
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    assert read_bundle(bundle).execution().error is not None
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
    marked_project(pytester, "Greet ", 'loom.run("refuse", name="Ada")')
    unexpected = pytester.runpytest("-p", "no:randomly")  # the error says where it came from
    unexpected.assert_outcomes(failed=1)
    unexpected.stdout.fnmatch_lines(["*ValueError: refused Ada", "*replayed from *greet.json*"])


@pytest.mark.parametrize(
    "catch",
    [
        "with pytest.raises(Exception):\n        ",
        "try:\n        X\n    except Exception:\n        pass",
        'try:\n        X\n    except Exception:\n        pytest.skip("backend down")',
        'try:\n        X\n    except Exception:\n        pytest.xfail("known")',
    ],
    ids=["pytest.raises", "except", "skip", "xfail"],
)
def test_a_verdict_the_test_catches_still_fails_it(pytester: pytest.Pytester, catch: str) -> None:
    """A verdict is an ``AssertionError`` (so it fails the test like an ``assert``), and a
    test expecting the recorded failure broadly (``pytest.raises(Exception)``, its own
    ``except Exception``) caught it: a changed prompt, or a flow that no longer raises,
    passed. Caught or not, a verdict fails the test, naming what was caught."""
    # A flow that raises when recorded for those expecting its failure; one that succeeds
    # for those that skip or xfail when the run raises (a backend down, they say).
    flow = "greet" if "pytest.skip" in catch or "pytest.xfail" in catch else "refuse"
    run = f'loom.run("{flow}", name="Ada")'
    body = catch.replace("X", run) if "X" in catch else catch + run
    marked_project(pytester, "Greet ", body)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)  # unchanged: green
    pytester.makepyfile(greeter=flows_module("Say hi to "))
    changed = pytester.runpytest("-p", "no:randomly")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*DecisionInputChangedError*", "*the test caught this verdict*"])


def test_a_failing_test_records_no_bundle(pytester: pytest.Pytester) -> None:
    """A recording whose test fails (its assertion, or the flow raising unexpectedly) is not
    written: ``once`` would replay the rejected run as golden from then on. The next ``once``
    records again."""
    rejected = 'assert loom.run("greet", name="Ada").output == "Hi"'
    bundle = marked_project(pytester, "Greet ", rejected)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(failed=1)
    assert not bundle.exists()
    marked_project(pytester, "Greet ", 'loom.run("refuse", name="Ada")')
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(failed=1)
    assert not bundle.exists()
    marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    assert bundle.exists()


def test_a_failing_test_keeps_the_bundle_under_rewrite_and_update(
    pytester: pytest.Pytester,
) -> None:
    """Neither ``rewrite`` nor ``--loom-update`` replaces a bundle from a test that then
    fails: the committed recording stays byte for byte, and nothing is reported re-sealed."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    before = bundle.read_bytes()
    marked_project(pytester, "Say hi to ", f'{RUN}\n    assert False, "rejected"')
    pytester.runpytest("-p", "no:randomly", "--loom-record=rewrite").assert_outcomes(failed=1)
    assert bundle.read_bytes() == before
    result = pytester.runpytest("-p", "no:randomly", "--loom-update")
    result.assert_outcomes(failed=1)
    assert bundle.read_bytes() == before
    assert "re-sealed" not in result.stdout.str()


def test_a_marked_test_that_runs_no_flow_is_an_error(pytester: pytest.Pytester) -> None:
    """A marked test that never runs a flow through the fixture checks nothing: it is an
    error under ``once`` (which would record nothing, and CI would then ask for a recording
    that can never be made) and when replaying an existing bundle (which nothing replays)."""
    bundle = marked_project(pytester, "Greet ", "assert loom")
    result = pytester.runpytest("-p", "no:randomly", "--loom-record=once")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_greet*ran no flow through the loom fixture*"])
    marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    marked_project(pytester, "Greet ", "assert loom")
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1, errors=1)
    assert bundle.exists()


SHARED = """
import pytest


@pytest.mark.parametrize("name", ["Ada", "Grace"])
@pytest.mark.loom(bundle="recordings/greet.json")
def test_greet(loom, name):
    assert loom.run("greet", name=name).output == f"Hello, {name}"
"""


@pytest.mark.parametrize("mode", ["once", "rewrite"])
def test_two_tests_never_record_to_one_bundle(pytester: pytest.Pytester, mode: str) -> None:
    """Parametrized cases sharing one bundle path would each record over the other (all
    passing, the last one kept): recording refuses, naming both, and writes nothing."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.makepyfile(test_greet=SHARED)
    result = pytester.runpytest("-p", "no:randomly", f"--loom-record={mode}")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*greet.json is the bundle of 2 tests*test_greet[[]Ada[]]*test_greet[[]Grace[]]*"]
    )
    assert not bundle.exists()


@pytest.mark.parametrize("select", [["-k", "Grace"], ["test_greet.py::test_greet[Grace]"]])
def test_a_case_run_alone_still_may_not_record_a_bundle_another_case_names(
    pytester: pytest.Pytester, select: list[str]
) -> None:
    """The check looked at the session's tests only: one case selected alone (``-k``, or
    its node id, the next step a failure prints) recorded, then the other did, each over the
    bundle they share. The module's other tests are looked at too."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.makepyfile(test_greet=SHARED)
    result = pytester.runpytest("-p", "no:randomly", "--loom-record=rewrite", *select)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*greet.json is the bundle of 2 tests*"])
    assert not bundle.exists()


def test_parameters_with_a_bundle_each_record_and_replay(pytester: pytest.Pytester) -> None:
    """What the refusal above advises: a marker per parameter, one bundle each."""
    marked_project(pytester, "Greet ", RUN)
    pytester.makepyfile(
        test_greet=SHARED.replace('@pytest.mark.loom(bundle="recordings/greet.json")\n', "")
        .replace('"Ada"', 'pytest.param("Ada", marks=pytest.mark.loom(bundle="r/ada.json"))')
        .replace('"Grace"', 'pytest.param("Grace", marks=pytest.mark.loom(bundle="r/gr.json"))')
    )
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=2)
    assert (
        bytes(read_bundle(pytester.path / "r" / "gr.json").execution().input) == b'{"name":"Grace"}'
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


def test_a_divergence_from_an_untrusted_bundle_is_printed_inert(pytester: pytest.Pytester) -> None:
    """A recorded prompt holding a bidi override and a C1 control (an incident's user text)
    is shown as <U+XXXX> in the failure, in a marked test and a collected bundle alike, as
    the CLI and the --loom-update summary show it: never obeyed by the terminal."""
    bundle = marked_project(pytester, "Greet \\u202e\\x9b", 'loom.run("greet", name="Ada\\u202e")')
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    pytester.makepyfile(greeter=flows_module("Say hi to "))
    marked = pytester.runpytest("-p", "no:randomly")
    marked.assert_outcomes(failed=1)
    collected = pytester.runpytest(
        "-p", "no:randomly", f"--loom-bundles={bundle.parent}", "-k", "replay"
    )
    collected.assert_outcomes(failed=1)
    for result in (marked, collected):
        result.stdout.fnmatch_lines(['*-  "prompt": "Greet <U+202E><U+009B>Ada<U+202E>"*'])
        assert "\u202e" not in result.stdout.str() and "\x9b" not in result.stdout.str()
    marked_project(pytester, "Greet ", 'loom.run("greet", name="Bo")')
    mismatched = pytester.runpytest("-p", "no:randomly")
    mismatched.stdout.fnmatch_lines(["*BundleMismatch*", '*+  "name": "Bo"*'])
    assert "\u202e" not in mismatched.stdout.str() and "\x9b" not in mismatched.stdout.str()


def test_the_marker_without_the_fixture_is_an_error(pytester: pytest.Pytester) -> None:
    """A marked test that does not take the ``loom`` fixture would record and replay nothing
    and pass in every mode: it errors, saying to take the fixture."""
    marked_project(pytester, "Greet ", RUN)
    pytester.makepyfile(
        test_greet="import pytest\n\n\n"
        '@pytest.mark.loom(bundle="recordings/greet.json")\n'
        "def test_greet(loom_flows):\n"
        "    assert loom_flows\n"
    )
    for mode in ("once", "none"):
        result = pytester.runpytest("-p", "no:randomly", f"--loom-record={mode}")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*test_greet*does not take the loom fixture*"])


def test_update_reseals_a_bundle_a_hand_written_test_replays(
    pytester: pytest.Pytester, recordings: Path
) -> None:
    """``loom_replay`` under --loom-update accepts a changed prompt like the marker and the
    collected bundles do, printing it; only when the test passes, and green afterwards."""
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    pytester.makeconftest(
        "import pytest, flows_v2\n@pytest.fixture\ndef loom_flows():\n    return flows_v2.flows\n"
    )
    bundle = recordings / "incident-1.json"
    before = bundle.read_bytes()
    test = "def test_incident_1(loom_replay):\n    assert loom_replay({!r}).output == {!r}\n"
    pytester.makepyfile(test_incidents=test.format(str(bundle), "rejected"))
    pytester.runpytest("-p", "no:randomly", "--loom-update").assert_outcomes(failed=1)
    assert bundle.read_bytes() == before
    pytester.makepyfile(test_incidents=test.format(str(bundle), "Hello, Ada"))
    updated = pytester.runpytest("-p", "no:randomly", "--loom-update")
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(
        ["re-sealed *incident-1.json, accepting:", '*+  "prompt": "Say hi to Ada"*']
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)


def test_loom_flows_in_the_ini_is_found_from_the_rootdir(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """``loom_flows = myapp.flows:flows`` in the project's ini: the project's package is found
    from the rootdir, as ``loom --flows`` finds it from the current directory, without the
    ``pythonpath = .`` the pytest script would otherwise need (it does not put the current
    directory on the import path, as ``python -m pytest`` does)."""
    package = pytester.mkpydir("myapp_flows_pkg")
    (package / "flows.py").write_text(flows_module("Greet "))
    pytester.makeini("[pytest]\nloom_flows = myapp_flows_pkg.flows:flows\n")
    folder = _recorded(pytester.path / "recordings", tmp_path)
    assert str(pytester.path) not in sys.path
    pytester.runpytest("--loom-bundles", str(folder)).assert_outcomes(passed=1)


LOOM_SOURCE = str(Path(loom_runtime.__file__).parent)
"""Where loom's own modules are: a failure's traceback shows none of their frames."""


def test_a_divergence_fails_at_the_test_s_own_line_with_the_next_step(
    pytester: pytest.Pytester,
) -> None:
    """A changed prompt fails a marked test at its ``loom.run`` line, not inside loom (whose
    frames say nothing about the user's code), shows the fixture as what it is, and says
    what to run if the change is intended: --loom-update for a changed input, and
    --loom-record=rewrite for what an update cannot accept (a decision never recorded)."""
    marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    pytester.makepyfile(greeter=flows_module("Say hi to "))
    changed = pytester.runpytest("-p", "no:randomly")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "loom = BundleLoom(*greet.json*)",
            '>       assert loom.run("greet", name="Ada").output == "Hello, Ada"',
            "E   *DecisionInputChangedError*",
            "E   *accept it with pytest --loom-update test_greet.py::test_greet (it keeps*",
            "test_greet.py:6: *",
        ]
    )
    assert LOOM_SOURCE not in changed.stdout.str()
    pytester.makepyfile(
        greeter=flows_module("Greet ").replace(
            'ctx.decide("model"', 'ctx.decide("tone", lambda: "warm") and ctx.decide("model"'
        )
    )
    unrecorded = pytester.runpytest("-p", "no:randomly", "--loom-update")
    unrecorded.assert_outcomes(failed=1)
    unrecorded.stdout.fnmatch_lines(
        [
            "E   *UnrecordedDecisionError*",
            # this test alone: a bare --loom-record=rewrite records every marked test afresh
            "E   *record afresh with pytest --loom-record=rewrite test_greet.py::test_greet: *",
        ]
    )
    assert LOOM_SOURCE not in unrecorded.stdout.str()
    # --full-trace asks for every frame: a false divergence may be loom's own bug
    assert LOOM_SOURCE in pytester.runpytest("-p", "no:randomly", "--full-trace").stdout.str()


def test_code_that_now_crashes_on_replay_shows_where(pytester: pytest.Pytester) -> None:
    """The current code raising where the recorded run returned failed the test with
    "replay raised builtins:TypeError" alone: not where, and only the advice for an intended
    change. The error the code raised is now the verdict's cause, its frame in the flow shown."""
    marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    crashing = flows_module("Greet ").replace(
        'return f"{salutation}, {name}"', "return salutation + 1  # the bug"
    )
    pytester.makepyfile(greeter=crashing)
    crashed = pytester.runpytest("-p", "no:randomly")
    crashed.assert_outcomes(failed=1)
    crashed.stdout.fnmatch_lines(
        [
            "*return salutation + 1  # the bug",
            "E       TypeError: *",
            "greeter.py:*: TypeError",
            "*direct cause of the following exception*",
            "E   *OutcomeChangedError*",
            "E   *The current code raised TypeError on replay (its traceback is above*",
        ]
    )


@pytest.mark.parametrize("name", ["incident-1.json", "inc (1).json", "x=y [2].json"])
def test_a_collected_bundle_s_divergence_says_how_to_accept_it(
    pytester: pytest.Pytester, recordings: Path, name: str
) -> None:
    """The command names the bundle file itself, which ``--loom-bundles`` takes as it takes a
    folder: a ``-k 'replay[NAME]'`` could not parse a name such as a browser's second
    download (``inc (1).json``), so the advice failed for it."""
    (recordings / "incident-1.json").rename(recordings / name)
    (recordings / "other.json").write_bytes((recordings / name).read_bytes())
    pytester.makepyfile(flows_v2=flows_module("Say hi to "))
    result = pytester.runpytest("--loom-bundles", str(recordings), "--loom-flows=flows_v2:flows")
    result.assert_outcomes(failed=2)
    again = shlex.join(
        ["--loom-bundles-only", f"--loom-bundles=recordings/{name}", "--loom-flows=flows_v2:flows"]
    )
    assert f"accept it with pytest --loom-update {again} (" in result.stdout.str()
    # the command it gives runs that bundle's test alone, and accepts the change
    accepted = pytester.runpytest("--loom-update", *shlex.split(again))
    accepted.assert_outcomes(passed=1)
    pytester.runpytest(*shlex.split(again)).assert_outcomes(passed=1)
    other = pytester.runpytest("--loom-bundles=recordings", "--loom-flows=flows_v2:flows")
    other.assert_outcomes(passed=1, failed=1)  # the other bundle was left as it was


@pytest.mark.parametrize("update", [False, True], ids=["replay", "update"])
def test_a_collected_bundle_whose_code_now_crashes_shows_where(
    pytester: pytest.Pytester, recordings: Path, update: bool
) -> None:
    """A collected bundle's failure said "its traceback is above", and showed none: its
    report printed the verdict alone, and a replay without --loom-update kept no cause."""
    crashing = flows_module("Greet ").replace(
        'return f"{salutation}, {name}"', "return salutation + 1  # the bug"
    )
    pytester.makepyfile(flows_v3=crashing)
    options = ["--loom-bundles", str(recordings), "--loom-flows=flows_v3:flows"]
    crashed = pytester.runpytest(*options, *(["--loom-update"] if update else []))
    crashed.assert_outcomes(failed=1)
    crashed.stdout.fnmatch_lines(
        [
            "*return salutation + 1  # the bug",
            "TypeError: *",
            "*direct cause of the following exception*",
            "*OutcomeChangedError*",
            "*The current code raised TypeError on replay (its traceback is above*",
        ]
    )


def test_missing_flows_fail_each_test_in_one_line_and_a_bundle_folder_at_once(
    pytester: pytest.Pytester, recordings: Path
) -> None:
    """Without flows, a test taking the ``loom`` fixture errors with the one-line how-to,
    not a traceback through pytest's plugins; ``--loom-bundles`` without flows is refused
    before any test runs, as a usage error."""
    pytester.makepyfile(test_greet="def test_greet(loom):\n    pass\n")
    fixture = pytester.runpytest("-p", "no:randomly", "test_greet.py")
    fixture.assert_outcomes(errors=1)
    fixture.stdout.fnmatch_lines(["*loom needs to know where the flows are registered*"])
    assert "Traceback" not in fixture.stdout.str() and "pytest_plugin.py" not in (
        fixture.stdout.str()
    )
    collected = pytester.runpytest("--loom-bundles", str(recordings))
    assert collected.ret == pytest.ExitCode.USAGE_ERROR
    collected.stderr.fnmatch_lines(["*--loom-flows=MODULE:ATTR*"])


def test_a_bundle_loom_that_opens_no_database_names_none(tmp_path: Path) -> None:
    """Updating a collected bundle replays it without a database, but its repr showed the
    default ``sqlite:///loom.db``, a file it never opens."""
    from loom_runtime.tools.pytest_bundle import BundleLoom

    bundle = tmp_path / "b.json"
    options: dict[str, Any] = {"flows": FlowRegistry(), "bundle": bundle, "rerun": "x"}
    updating = BundleLoom(None, record=False, update=True, **options)
    assert repr(updating) == f"BundleLoom(no database, replaying {bundle})"
    on_file = BundleLoom(f"sqlite:///{tmp_path / 'l.db'}", record=True, update=False, **options)
    assert repr(on_file) == f"BundleLoom(sqlite:///{tmp_path / 'l.db'}, recording {bundle})"


def forge_failure(path: Path, error_type: str, message: str) -> None:
    """Re-seal the bundle of ``greet`` as if its model decision, and so the flow, had failed
    with ``error_type: message``: what anyone who can edit the committed file can write."""
    real = read_bundle(path)
    created, decided, _ = real.events
    state = msgspec.json.decode(decided.state)
    failed = {
        "timestamp": state["timestamp"],
        "key": state["key"],
        "kind": state.get("kind"),
        "input": state["input"],
        "error_type": error_type,
        "message": message,
    }
    ended = {"timestamp": state["timestamp"], "error_type": error_type, "message": message}
    events = [
        created,
        msgspec.structs.replace(
            decided,
            topic=Execution.DecisionFailed.TOPIC,
            state=msgspec.json.encode(failed).decode(),
        ),
        msgspec.structs.replace(
            real.events[2],
            topic=Execution.Failed.TOPIC,
            state=msgspec.json.encode(ended).decode(),
        ),
    ]
    write_bundle(real.resealed(events), path)


@pytest.mark.parametrize(
    "error_type", ["unittest.case:SkipTest", "_pytest.outcomes:Exit", "bdb:BdbQuit"]
)
def test_a_bundle_cannot_skip_or_stop_the_test_that_replays_it(
    pytester: pytest.Pytester, error_type: str
) -> None:
    """A recorded failure is rebuilt as its class when that class is loaded; a test runner's
    own control exceptions were too: a re-sealed bundle whose flow 'failed' with ``SkipTest``
    turned the regression test into a skip (exit 0, nothing checked), pytest's ``Exit`` ended
    the session. They are carried as ``RecordedComputeError``: the test fails."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    forge_failure(bundle, error_type, "flaky upstream")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*RecordedComputeError*{error_type}*flaky upstream*"])


def test_a_recorded_failure_raised_into_the_test_is_printed_inert(
    pytester: pytest.Pytester,
) -> None:
    """The verdicts were inert (ADR 0018, "pytestrev"); the recorded error raised again into
    the test was not: pytest printed the bundle's escape sequences to the terminal."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    forge_failure(bundle, "builtins:ValueError", "\x1b[2J\x1b]0;owned\x07\u202eboom")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1)
    output = "\n".join(result.outlines)
    assert "\x1b" not in output and "\u202e" not in output, output
    assert "ValueError: <U+001B>[2J<U+001B>]0;owned<U+0007><U+202E>boom" in output, output


APP_LOOM = """
import re
from pathlib import Path

from loom_runtime import FlowRegistry, Loom
from loom_runtime.redaction import Redactor, SecretPattern

flows = FlowRegistry()

@flows.flow("ask")
def ask(ctx, question: str) -> str:
    return ctx.decide("model", lambda: "42", input={"q": question, "auth": "itok-s3cr3tvalue"})

token = SecretPattern(name="internal-token", regex=re.compile(r"itok-[a-z0-9]+"), hints=("itok-",))
loom = Loom(None, flows=flows, redactor=Redactor(extra=[token]))
"""


def test_bundles_are_recorded_and_replayed_through_the_app_s_own_redactor(
    pytester: pytest.Pytester,
) -> None:
    """``loom_flows`` may name the app's own ``Loom``; the plugin replayed through the
    built-in redactor anyway, so a value the app redacts came back in clear, the failure
    printed it, and ``--loom-update`` (its advice) wrote it into the bundle to commit."""
    pytester.syspathinsert()
    pytester.makeini("[pytest]\nloom_flows = app:loom\n")
    pytester.makepyfile(
        app=APP_LOOM,
        test_ask=MARKED.replace("greet.json", "ask.json").replace(
            "BODY", 'assert loom.run("ask", question="meaning?").output == "42"'
        ),
    )
    bundle = pytester.path / "recordings" / "ask.json"
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    assert "itok-s3cr3tvalue" not in bundle.read_text()
    assert "[REDACTED:internal-token]" in bundle.read_text()
    replayed = pytester.runpytest("-p", "no:randomly", "--loom-update")
    replayed.assert_outcomes(passed=1)
    assert "itok-s3cr3tvalue" not in "\n".join(replayed.outlines)
    assert "itok-s3cr3tvalue" not in bundle.read_text()


TEARDOWN_FAILS = """
import pytest


@pytest.fixture
def checked():
    yield
    raise AssertionError("the fixture's own check failed at teardown")


@pytest.mark.loom(bundle="recordings/greet.json")
def test_greet(checked, loom):
    BODY
"""


def test_a_test_that_errors_in_teardown_records_and_re_seals_nothing(
    pytester: pytest.Pytester,
) -> None:
    """A bundle is written only for a test that passed; a test pytest reports as an error
    at teardown (another fixture's check) still recorded under ``once`` and re-sealed under
    ``--loom-update``: the write ran when the ``loom`` fixture ended, before that teardown."""
    bundle = marked_project(pytester, "Greet ", RUN)
    pytester.makepyfile(test_greet=TEARDOWN_FAILS.replace("BODY", RUN))
    recording = pytester.runpytest("-p", "no:randomly", "--loom-record=once")
    recording.assert_outcomes(passed=1, errors=1)
    assert not bundle.exists()
    marked_project(pytester, "Greet ", RUN)  # recorded by a test that passes whole
    pytester.runpytest("-p", "no:randomly", "--loom-record=once").assert_outcomes(passed=1)
    committed = bundle.read_bytes()
    pytester.makepyfile(
        greeter=flows_module("Hello "), test_greet=TEARDOWN_FAILS.replace("BODY", RUN)
    )
    updating = pytester.runpytest("-p", "no:randomly", "--loom-update")
    updating.assert_outcomes(passed=1, errors=1)
    assert bundle.read_bytes() == committed
    assert "re-sealed" not in "\n".join(updating.outlines)
