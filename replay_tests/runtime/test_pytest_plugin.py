"""The pytest plugin, exercised with pytester: bundles become tests that fail readably."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

# pytester forgets the modules imported after its snapshot; eventsourcing caches the storage
# factory by topic, so the next test would find a stale class. Imported here, it stays.
import loom_runtime.storage.sqlite  # noqa: F401
from loom_runtime import FlowRegistry, Loom
from loom_runtime.bundle import read_bundle, seal, write_bundle
from loom_runtime.execution import Execution

FLOWS = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("greet")
def greet(ctx, name: str) -> str:
    salutation = ctx.decide("model", lambda: "Hello", input={"prompt": PROMPT + name})
    return f"{salutation}, {name}"

PROMPT = "TEMPLATE"
"""


def flows_module(template: str) -> str:
    """The flows module's source, with the prompt template the code has at that time."""
    return FLOWS.replace("TEMPLATE", template)


@pytest.fixture
def recordings(pytester: pytest.Pytester, tmp_path: Path) -> Path:
    """A folder with one bundle, recorded by the code as it was (the 'Greet ' prompt)."""
    pytester.syspathinsert()
    namespace: dict[str, object] = {}
    exec(flows_module("Greet "), namespace)
    flows = namespace["flows"]
    assert isinstance(flows, FlowRegistry)
    folder = pytester.path / "recordings"
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


def test_missing_flows_option_is_a_usage_error(pytester: pytest.Pytester, recordings: Path) -> None:
    """Without --loom-flows the bundle test errors and says how to name the flows."""
    result = pytester.runpytest("--loom-bundles", str(recordings))
    result.stdout.fnmatch_lines(["*--loom-flows=MODULE:ATTR*"])
    assert result.ret != 0


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
    forged = seal(
        execution_id=real.execution_id,
        flow=real.flow,
        code_version=real.code_version,
        started_at_position=real.started_at_position,
        events=events,
    )
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
