"""Bad bundle bytes, fuzzed: arbitrary bytes, truncations and single-byte flips of real bundles.

The property (issue 6, requirement 7): ``Loom.replay_bundle`` either replays or raises a
``BundleError`` subclass, never another exception. A real bundle carries a sha256 of its
content, so a truncated or altered one must be refused; the only alterations allowed through
are those that decode to exactly the same bundle (see the strict xfail at the end: some do).
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import msgspec
import pytest
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import BundleEvent, read_bundle, seal, write_bundle
from loom_runtime.errors import BundleError

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


def is_known_utf8_bug(error: Exception) -> bool:
    """The bug pinned by ``test_invalid_utf8_inside_a_bundle_is_refused_as_a_bundle_error``."""
    return isinstance(error, msgspec.DecodeError) and "UTF-8" in str(error)


def replay_bytes(data: bytes, like: Path, folder: Path) -> None:
    """Replay ``data`` saved under ``like``'s suffix: identical and unchanged, or a BundleError.

    Inputs that hit the known invalid-UTF-8 bug are discarded (``reject``) rather than
    failing here: that bug has its own strict xfail, and the rest of the space stays guarded.
    """
    path = folder / f"mutated{like.suffix}"
    path.write_bytes(data)
    try:
        result = Loom(flows=flows).replay_bundle(path)
    except BundleError:
        return
    except msgspec.DecodeError as error:
        if is_known_utf8_bug(error):
            reject()
        raise
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
def test_every_truncation_is_refused(bundle: Path, tmp_path: Path, cut: float) -> None:
    """A bundle cut short anywhere is refused with a BundleError subclass."""
    data = bundle.read_bytes()
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


@pytest.mark.xfail(
    strict=True,
    reason="BUG: flipping the high bit (xor 0x80) of one byte inside a string field of a JSON "
    "or msgpack bundle escapes read_bundle as msgspec.DecodeError('Invalid UTF-8 encoded "
    "string'), not BundleTruncatedError/BundleTamperedError: the _Envelope pass skips the "
    "field without validating it, and the second decode catches only ValidationError",
)
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
    start = text.index('"execution_id":"') + len('"execution_id":"')
    at = next(i for i in range(start, start + 36) if text[i] in "abcdef")
    return (text[:at] + text[at].upper() + text[at + 1 :]).encode()


@pytest.mark.xfail(
    strict=True,
    reason="FINDING: the content hash covers the DECODED bundle, not the file's bytes, so "
    "byte alterations that decode equal pass read_bundle: upper-casing a hex digit of "
    "execution_id (a single 0x20 flip), or renaming the 'schema_version' key (unknown keys are "
    "ignored and the field defaults to 1)",
)
@pytest.mark.parametrize(
    "alter",
    [
        flip_case_in_execution_id,
        lambda data: data.replace(b'"schema_version"', b'"schema_versioo"'),
    ],
    ids=["uuid-case", "schema-version-key"],
)
def test_any_byte_alteration_of_a_json_bundle_is_refused(
    bundle: Path, tmp_path: Path, alter: object
) -> None:
    """Any alteration of a bundle file's bytes is refused as tampering."""
    if bundle.suffix != ".json":
        pytest.xfail("JSON only")  # keeps the strict xfail meaningful per format
    assert callable(alter)
    path = tmp_path / "altered.json"
    path.write_bytes(alter(bundle.read_bytes()))
    with pytest.raises(BundleError):
        read_bundle(path)


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


@pytest.mark.xfail(
    strict=True,
    reason="BUG: a re-sealed bundle (valid hash) whose events do not rebuild an execution "
    "escapes replay_bundle as TopicError, MapperDeserialisationError, OriginatorVersionError "
    "or AssertionError from eventsourcing, not a BundleError; an unknown topic also makes "
    "read time IMPORT the module the topic names",
)
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_sealed_bundle_with_unusable_events_is_refused_as_a_bundle_error(
    bundle: Path, tmp_path: Path, forgery: str
) -> None:
    """A correctly hashed bundle whose events are not an execution raises a BundleError."""
    events = FORGERIES[forgery](list(read_bundle(bundle).events))
    path = forged(bundle, tmp_path, events)
    with pytest.raises(BundleError):
        Loom(flows=flows).replay_bundle(path)
