"""Bad bundle bytes, fuzzed: arbitrary bytes, truncations and single-byte flips of real bundles.

The property: ``Loom.replay_bundle`` either replays or raises a
``BundleError`` subclass, never another exception. A real bundle carries a sha256 of its
content, so a truncated or altered one must be refused; the only alterations allowed through
are those that decode to exactly the same bundle (an equivalent re-encoding is the same
content: ADR 0013, and ``test_a_byte_alteration_that_decodes_equal_is_the_same_bundle``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loom_runtime import FlowContext, FlowRegistry, Loom, errors
from loom_runtime.bundle import BundleEvent, read_bundle, seal, write_bundle
from loom_runtime.errors import BundleError, BundleFormatError, BundleNotFoundError
from loom_runtime.execution import Execution

FUZZ = settings.get_profile("loom-fuzz")

flows = FlowRegistry()


@flows.flow("triage", version="fuzz")
def triage(ctx: FlowContext, question: str) -> dict[str, object]:
    hits = ctx.decide(f"search:{question}", lambda: [question, "runbook.md"], kind="retrieval")
    return {"hits": hits, "at": ctx.now().isoformat(), "n": ctx.random()}


@pytest.fixture(scope="module", params=[".json", ".msgpack"])
def bundle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real exported bundle (JSON, then msgpack) of a three-decision execution."""
    folder = tmp_path_factory.mktemp("bundle")
    with Loom(f"sqlite:///{folder / 'source.db'}", flows=flows) as loom:
        run = loom.run("triage", question="db slow ü 🦜")
        path = loom.export(run.execution_id, folder / f"triage{request.param}")
    assert Loom(flows=flows).replay_bundle(path).identical
    return path


def replay_bytes(data: bytes, like: Path, folder: Path) -> None:
    """Replay ``data`` saved under ``like``'s suffix: identical and unchanged, or a BundleError."""
    path = folder / f"mutated{like.suffix}"
    path.write_bytes(data)
    try:
        result = Loom(flows=flows).replay_bundle(path)
    except BundleError:
        return
    assert result.identical, result.describe()
    assert read_bundle(path) == read_bundle(like)  # accepted only if it decodes to the same


@FUZZ
@given(data=st.binary(max_size=2048))
@example(data=b"")
@example(data=b"{}")
@example(data=b"null")
@example(data=b'{"format":"loom-bundle","schema_version":99}')
@example(data=b'{"format":"loom-bundle","schema_version":1}')
@example(data=b'{"format":"loom-bundle","schema_version":1e400}')
@example(data=b"\x80")
def test_arbitrary_bytes_are_refused_as_bundle_errors(
    bundle: Path, tmp_path: Path, data: bytes
) -> None:
    """Arbitrary bytes are refused with a BundleError subclass, never another exception."""
    replay_bytes(data, bundle, tmp_path)


@FUZZ
@given(cut=st.floats(0, 1, exclude_max=True))
@example(cut=0.0)
@example(cut=0.9999999999999999)  # the last byte: a JSON bundle's newline is kept out
def test_every_truncation_is_refused(bundle: Path, tmp_path: Path, cut: float) -> None:
    """A bundle cut short anywhere in its document is refused with a BundleError subclass
    (a JSON bundle's final newline ends the file, not the document: without it, it is whole)."""
    data = bundle.read_bytes()
    if bundle.suffix == ".json":
        data = data.removesuffix(b"\n")
    truncated = data[: int(len(data) * cut)]
    path = tmp_path / f"cut{bundle.suffix}"
    path.write_bytes(truncated)
    with pytest.raises(BundleError):
        Loom(flows=flows).replay_bundle(path)


@FUZZ
@given(where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_a_single_byte_flip_is_refused_or_changes_nothing(
    bundle: Path, tmp_path: Path, where: float, xor: int
) -> None:
    """A one-byte flip anywhere is refused with a BundleError, or decodes to the same bundle."""
    data = bytearray(bundle.read_bytes())
    data[int(len(data) * where)] ^= xor
    replay_bytes(bytes(data), bundle, tmp_path)


@pytest.mark.parametrize("suffix", [".json", ".msgpack"])
def test_a_flip_in_every_byte_of_a_small_bundle_is_refused_or_changes_nothing(
    bundle: Path, tmp_path: Path, suffix: str
) -> None:
    """Exhaustively: flipping the low bit of each byte never escapes as a non-BundleError."""
    if bundle.suffix != suffix:
        pytest.skip("one exhaustive pass per format")
    data = bundle.read_bytes()
    for index in range(0, len(data), 3):
        mutated = bytearray(data)
        mutated[index] ^= 0x01
        replay_bytes(bytes(mutated), bundle, tmp_path)


def test_invalid_utf8_inside_a_bundle_is_refused_as_a_bundle_error(
    bundle: Path, tmp_path: Path
) -> None:
    """A bundle with invalid UTF-8 inside a string field is refused with a BundleError."""
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0x80
    path = tmp_path / f"invalid-utf8{bundle.suffix}"
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError):
        Loom(flows=flows).replay_bundle(path)


def flip_case_in_execution_id(data: bytes) -> bytes:
    text = data.decode()
    start = text.index('"execution_id": "') + len('"execution_id": "')
    at = next(i for i in range(start, start + 36) if text[i] in "abcdef")
    return (text[:at] + text[at].upper() + text[at + 1 :]).encode()


@pytest.mark.parametrize(
    "alter",
    [
        flip_case_in_execution_id,
        lambda data: data.replace(b'"schema_version"', b'"schema_versioo"'),
    ],
    ids=["uuid-case", "schema-version-key"],
)
def test_a_byte_alteration_that_decodes_equal_is_the_same_bundle(
    bundle: Path, tmp_path: Path, alter: object
) -> None:
    """The hash covers the decoded bundle, not the bytes (ADR 0013): an equivalent re-encoding
    (an upper-case UUID digit, an unknown key ignored) reads as the same bundle."""
    if bundle.suffix != ".json":
        pytest.skip("JSON only")
    assert callable(alter)
    path = tmp_path / "altered.json"
    altered = alter(bundle.read_bytes())
    assert altered != bundle.read_bytes()
    path.write_bytes(altered)
    assert read_bundle(path) == read_bundle(bundle)
    assert Loom(flows=flows).replay_bundle(path).identical


def forged(bundle: Path, tmp_path: Path, events: list[BundleEvent]) -> Path:
    """A structurally valid bundle with a correct hash (re-sealed), holding ``events``."""
    real = read_bundle(bundle)
    sealed = seal(
        execution_id=uuid4(),
        flow=real.flow,
        code_version=real.code_version,
        started_at_position=0,
        events=events,
    )
    return write_bundle(sealed, tmp_path / f"forged{bundle.suffix}")


FORGERIES = {
    "unknown-topic": lambda real: [
        msgspec.structs.replace(real[0], topic="no_such_module:Event"),
        *real[1:],
    ],
    "undecodable-state": lambda real: [msgspec.structs.replace(real[0], state="{}"), *real[1:]],
    "state-not-json": lambda real: [msgspec.structs.replace(real[0], state="]["), *real[1:]],
    "version-gap": lambda real: [real[0], msgspec.structs.replace(real[1], version=9)],
    "duplicated-event": lambda real: [real[0], real[0]],
    "no-created-event": lambda real: list(real[1:]),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_sealed_bundle_with_unusable_events_is_refused_as_a_bundle_error(
    bundle: Path, tmp_path: Path, forgery: str
) -> None:
    """A correctly hashed bundle whose events are not an execution raises a BundleError."""
    events = FORGERIES[forgery](list(read_bundle(bundle).events))
    path = forged(bundle, tmp_path, events)
    with pytest.raises(BundleError):
        Loom(flows=flows).replay_bundle(path)


def test_a_topic_in_a_bundle_is_never_imported(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-sealed bundle whose topic names a module is refused unread: nothing is imported."""
    name = f"loom_planted_{uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    events = list(read_bundle(bundle).events)
    events[1] = msgspec.structs.replace(events[1], topic=f"{name}:Event")
    path = forged(bundle, tmp_path, events)
    with pytest.raises(BundleFormatError):
        Loom(flows=flows).replay_bundle(path)
    assert name not in sys.modules
    assert not marker.exists()


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_importing_a_sealed_bundle_with_unusable_events_writes_nothing(
    bundle: Path, tmp_path: Path, forgery: str
) -> None:
    """import_bundle refuses a re-sealed bundle that is not an execution, inserting no row."""
    events = FORGERIES[forgery](list(read_bundle(bundle).events))
    path = forged(bundle, tmp_path, events)
    with Loom(f"sqlite:///{tmp_path / 'target.db'}", flows=flows) as loom:
        with pytest.raises(BundleError):
            loom.import_bundle(path)
        assert loom.log.position == 0


@pytest.mark.parametrize("where", ["missing.json", "."])
def test_a_path_with_no_bundle_file_is_refused_as_a_bundle_error(
    tmp_path: Path, where: str
) -> None:
    """replay_bundle of a missing path or of a directory raises BundleNotFoundError."""
    with pytest.raises(BundleNotFoundError):
        Loom(flows=flows).replay_bundle(tmp_path / where)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A module on sys.path that leaves a marker file if anything imports it."""
    folder = tmp_path_factory.mktemp("planted")
    name = f"loom_planted_{uuid4().hex}"
    marker = folder / "imported"
    (folder / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Boom(Exception):\n    pass\n"
    )
    sys.path.insert(0, str(folder))
    yield name, marker
    sys.path.remove(str(folder))
    assert name not in sys.modules and not marker.exists(), f"{name} was imported"


def restated(event: BundleEvent, topic: str, **changes: object) -> BundleEvent:
    """``event`` under ``topic`` with its stored state's fields changed (``value`` dropped)."""
    state = msgspec.json.decode(event.state)
    state.pop("value", None)
    state.update(changes)
    return msgspec.structs.replace(event, topic=topic, state=msgspec.json.encode(state).decode())


LOOM_ERROR_TYPES = sorted(
    f"loom_runtime.errors:{name}"
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, errors.LoomError)
)


@FUZZ
@given(topic=st.text(max_size=80) | st.sampled_from(["planted", "planted:Boom", "os:system"]))
@example(topic="loom_runtime.execution:Execution")
@example(topic="")
def test_a_created_event_naming_any_other_aggregate_is_refused_unimported(
    bundle: Path, tmp_path: Path, planted: tuple[str, Path], topic: str
) -> None:
    """A re-sealed bundle whose Created names any originator_topic but loom's execution is
    refused as a BundleFormatError, and nothing it names is imported."""
    name, marker = planted
    topic = topic.replace("planted", name)
    if topic == Execution.TOPIC:
        return
    events = list(read_bundle(bundle).events)
    created = restated(events[0], events[0].topic, originator_topic=topic)
    path = forged(bundle, tmp_path, [created, *events[1:]])
    with pytest.raises(BundleFormatError):
        Loom(flows=flows).replay_bundle(path)
    assert not marker.exists()


@FUZZ
@given(
    error_type=st.sampled_from([*LOOM_ERROR_TYPES, "planted:Boom", "planted", "builtins:KeyError"])
    | st.text(max_size=80),
    message=st.text(max_size=40),
)
@example(error_type="loom_runtime.errors:ReplayDivergence", message="")
def test_a_forged_failure_never_replays_identically(
    bundle: Path, tmp_path: Path, planted: tuple[str, Path], error_type: str, message: str
) -> None:
    """A re-sealed bundle whose first decision 'failed' with any error type (replay's own
    findings included) never replays as identical, and imports nothing."""
    name, marker = planted
    events = list(read_bundle(bundle).events)
    failed = restated(
        events[1],
        Execution.DecisionFailed.TOPIC,
        error_type=error_type.replace("planted", name),
        message=message,
    )
    path = forged(bundle, tmp_path, [events[0], failed, *events[2:]])
    assert not Loom(flows=flows).replay_bundle(path).identical
    assert not marker.exists()
