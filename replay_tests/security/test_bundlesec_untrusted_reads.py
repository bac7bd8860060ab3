"""What an attacker can write (a bundle, a log row) never yields a false verdict or a crash.

Three holes an adversarial review found after ADR 0018 closed the known ones:

* a SQLite row's stream id respelt (upper case, braces, hyphens, a BLOB) in the event and its
  chain row hides the event from every stream read while ``loom verify`` still said "ok";
* a bundle or a row nested deeper than the decoder's recursion limit escaped as a bare
  ``RecursionError`` (a traceback from the CLI) instead of a typed refusal;
* a recorded output holding a number out of a double's range (``1e400``, which loom never
  writes) escaped a replay as a bare ``msgspec.ValidationError``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import read_bundle, write_bundle
from loom_runtime.errors import BundleFormatError, LogCorruptError
from loom_runtime.execution import Execution
from loom_runtime.tools.cli import app

flows = FlowRegistry()

DEEP = 100_000
"""Far past any recursion limit: what a decoder must refuse, not recurse into."""


@flows.flow("answer", version="t")
def answer(ctx: FlowContext, question: str) -> Any:
    return ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")


def _record(folder: Path) -> tuple[str, Loom, Any]:
    url = f"sqlite:///{folder / 'loom.db'}"
    loom = Loom(url, flows=flows)
    return url, loom, loom.run("answer", question="db slow").execution_id


def _sql(url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Edit a SQLite log behind loom's back, as an attacker with the file would."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        for statement, parameters in statements:
            db.execute(statement, parameters)


def _cli(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(app, list(args))
    error = None if isinstance(result.exception, SystemExit) else result.exception
    return result.exit_code, result.output, error


# -- the chain vouches for a stream id only as the recorder spells it --------------------------


SPELLINGS: dict[str, Callable[[UUID], object]] = {
    "upper-case": lambda stream: stream.hex.upper(),
    "braces": lambda stream: f"{{{stream.hex}}}",
    "hyphens": str,
    "blob": lambda stream: stream.bytes,
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_verify_finds_an_event_hidden_from_its_stream_by_respelling_its_id(
    tmp_path: Path, spelling: str
) -> None:
    """An event row and its chain row whose stream id is respelt (the same UUID to a parser,
    another value to the recorder's ``WHERE originator_id = hex``) drop the event from every
    read of its stream, so ``verify`` must not report the log intact. SQLite only: a
    PostgreSQL ``uuid`` column holds one spelling."""
    url, loom, execution_id = _record(tmp_path)
    with loom:
        last = loom.execution(execution_id).version
    respelt = SPELLINGS[spelling](execution_id)
    _sql(
        url,
        ("UPDATE stored_events SET originator_id = ? WHERE rowid = ?", (respelt, last)),
        ("UPDATE loom_chain SET originator_id = ? WHERE notification_id = ?", (respelt, last)),
    )
    with Loom(url, flows=flows) as loom:
        assert loom.execution(execution_id).version == last - 1  # the edit hid its last event
        report = loom.log.verify()
    assert not report.ok, "verify vouched for a log whose stream reads lost an event"
    assert report.position == last
    code, output, error = _cli("verify", f"--db={url}")
    assert error is None and code == 1 and "TAMPERED" in output, output


def test_verify_still_passes_an_untouched_sqlite_log(tmp_path: Path) -> None:
    """The control: the recorder's own spelling (lower-case hex) verifies."""
    url, loom, _ = _record(tmp_path)
    with loom:
        assert loom.log.verify().ok
    code, output, error = _cli("verify", f"--db={url}")
    assert error is None and code == 0, output


# -- nesting past the decoder's limit is a typed refusal ---------------------------------------


def _bundle_with_last_state(folder: Path, state: str, *, inline: bool) -> Path:
    """A re-sealed bundle whose last event's state is ``state``, written as JSON with that
    state inline as an object (as ``bundle_json`` lays states out) or as a string."""
    with Loom(f"sqlite:///{folder / 'source.db'}", flows=flows) as loom:
        execution_id = loom.run("answer", question="q").execution_id
        real = read_bundle(loom.export(execution_id, folder / "real.json"))
    events = [*real.events[:-1], msgspec.structs.replace(real.events[-1], state=state)]
    forged = real.resealed(events)
    text = msgspec.json.encode(forged).decode()
    if inline:
        text = text.replace(msgspec.json.encode(state).decode(), state)
    path = folder / "forged.json"
    path.write_text(text)
    return path


def _deep_completed_state() -> str:
    return '{"output":' + "[" * DEEP + "]" * DEEP + ',"timestamp":"2026-12-02T00:00:00Z"}'


@pytest.mark.parametrize("inline", [True, False], ids=["inline-state", "string-state"])
def test_a_bundle_nested_past_the_decoder_limit_is_a_format_error(
    tmp_path: Path, inline: bool
) -> None:
    """Inline, the whole document nests too deep to decode (refused reading it); as a string,
    the state does (refused rebuilding the execution): both a BundleFormatError, and a
    one-line refusal from `loom replay FILE`, never a RecursionError."""
    path = _bundle_with_last_state(tmp_path, _deep_completed_state(), inline=inline)
    with pytest.raises(BundleFormatError, match=r"(?i)recursion"):
        Loom(flows=flows).replay_bundle(path)
    code, output, error = _cli("replay", str(path), f"--db=sqlite:///{tmp_path / 'other.db'}")
    assert error is None, f"escaped as {error!r}"
    assert code == 1 and "Traceback" not in output, output  # a failed check (ADR 0008)


@pytest.mark.parametrize(
    ("version", "topic"),
    [(2, Execution.DecisionRecorded.TOPIC), (3, Execution.Completed.TOPIC)],
    ids=["decision-row", "completed-row"],
)
def test_a_log_row_nested_past_the_decoder_limit_is_log_corrupt(
    tmp_path: Path, version: int, topic: str
) -> None:
    """A decision row (the replay's direct read) or any other row (the mapper's) whose state
    nests too deep is LogCorruptError, as any state that does not decode (ADR 0018)."""
    url, loom, execution_id = _record(tmp_path)
    loom.close()
    deep = "[" * DEEP + "]" * DEEP
    state = (
        f'{{"key":"search","kind":"retrieval","input":{deep},"value":[],'
        '"timestamp":"2026-12-02T00:00:00Z"}'
        if topic == Execution.DecisionRecorded.TOPIC
        else _deep_completed_state()
    )
    _sql(url, ("UPDATE stored_events SET state = ? WHERE rowid = ?", (state.encode(), version)))
    with Loom(url, flows=flows) as loom, pytest.raises(LogCorruptError, match=f"v{version}"):
        loom.replay(execution_id)


# -- an output loom could never have written diverges ------------------------------------------


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_a_recorded_output_out_of_a_doubles_range_is_refused(tmp_path: Path, number: str) -> None:
    """``1e400`` is JSON, but no double: loom never writes it (it stores only what it encoded).
    The replay refuses the bundle, as `loom import` and `loom diff` do, naming the event,
    rather than raising msgspec's ValidationError out of the comparison (it had reported the
    output changed; every reader of a bundle now checks its events' members first)."""
    state = '{"output":' + number + ',"timestamp":"2026-12-02T00:00:00Z"}'
    path = _bundle_with_last_state(tmp_path, state, inline=False)
    with pytest.raises(BundleFormatError, match=r"event 3 .* holds a value loom never writes"):
        Loom(flows=flows).replay_bundle(path)


def test_loom_diff_of_a_bundle_holding_an_out_of_range_number_is_a_refusal(
    tmp_path: Path,
) -> None:
    """`loom diff` compares decoded values too: a bundle whose output is ``1e400`` is an
    unusable bundle (exit 1, one line), not a traceback out of the comparison."""
    state = '{"output":1e400,"timestamp":"2026-12-02T00:00:00Z"}'
    forged = _bundle_with_last_state(tmp_path, state, inline=False)
    code, output, error = _cli("diff", str(tmp_path / "real.json"), str(forged))
    assert error is None, f"escaped as {error!r}"
    assert code == 1 and "never writes" in output, output


def _bundle_with_decision_field(folder: Path, field: str, raw: str) -> Path:
    """A re-sealed bundle whose decision event holds ``raw`` JSON as its ``field``."""
    path = _bundle_with_last_state(
        folder, '{"output":1,"timestamp":"2026-12-02T00:00:00Z"}', inline=False
    )
    real = read_bundle(path)
    decision = real.events[1]
    state = (
        decision.state.replace('"value":', f'"{field}":{raw},"value":', 1)
        if field == "meta"
        else decision.state.replace('"value":["q","runbook.md"]', f'"value":{raw}', 1)
    )
    assert state != decision.state
    forged = real.resealed(
        [real.events[0], msgspec.structs.replace(decision, state=state), *real.events[2:]]
    )
    path.write_text(msgspec.json.encode(forged).decode())
    return path


@pytest.mark.parametrize("field", ["value", "meta", "output"])
def test_an_import_of_a_bundle_holding_an_out_of_range_number_is_a_refusal(
    tmp_path: Path, field: str
) -> None:
    """The import checks every member of every state, and decoding ``1e400`` raised msgspec's
    ValidationError out of ``Loom.import_bundle`` and a traceback out of ``loom import``. It
    is a BundleFormatError, and that file is reported as failed (exit 1), one line."""
    if field == "output":
        state = '{"output":1e400,"timestamp":"2026-12-02T00:00:00Z"}'
        forged = _bundle_with_last_state(tmp_path, state, inline=False)
    else:
        forged = _bundle_with_decision_field(tmp_path, field, "1e400")
    target = Loom(f"sqlite:///{tmp_path / 'target.db'}")
    with target, pytest.raises(BundleFormatError, match="never writes"):
        target.import_bundle(forged)
    code, output, error = _cli("import", str(forged), f"--db=sqlite:///{tmp_path / 'cli.db'}")
    assert error is None, f"escaped as {error!r}"
    assert code == 1 and "never writes" in output and "Traceback" not in output, output


def test_bundle_show_of_a_meta_out_of_a_doubles_range_is_a_refusal(tmp_path: Path) -> None:
    """`loom bundle show` decodes a decision's meta to describe it: ``1e400`` there was a
    traceback; it is an unusable bundle (exit 1, one line), as in `loom diff`."""
    forged = _bundle_with_decision_field(tmp_path, "meta", '{"tokens":1e400}')
    code, output, error = _cli("bundle", "show", str(forged))
    assert error is None, f"escaped as {error!r}"
    assert code == 1 and "never writes" in output and "Traceback" not in output, output


# -- a recorded text cannot forge lines of the output ------------------------------------------


def test_bundle_show_prints_each_recorded_name_on_its_line(tmp_path: Path) -> None:
    """A flow name or a decision kind holding line breaks printed lines of its own in `loom
    bundle show`: a forged ``output:`` block, a forged value. Each is one line now."""
    path = _bundle_with_last_state(
        tmp_path, '{"output":1,"timestamp":"2026-12-02T00:00:00Z"}', inline=False
    )
    real = read_bundle(path)
    created, decision, *rest = real.events
    forged_flow = created.state.replace('"flow":"answer"', '"flow":"answer\\noutput:\\n  FORGED"')
    forged_kind = decision.state.replace('"kind":"retrieval"', '"kind":"x\\n  value:\\n    FORGED"')
    assert forged_flow != created.state and forged_kind != decision.state
    forged = real.resealed(
        [
            msgspec.structs.replace(created, state=forged_flow),
            msgspec.structs.replace(decision, state=forged_kind),
            *rest,
        ]
    )
    path.write_text(msgspec.json.encode(forged).decode())
    code, output, error = _cli("bundle", "show", str(path))
    assert error is None and code == 0, output
    assert not [line for line in output.splitlines() if line.strip().startswith("FORGED")]


@pytest.mark.parametrize("line_break", ["\n", "\u2028"], ids=["newline", "line-separator"])
def test_a_recorded_failure_message_cannot_forge_a_replay_verdict(
    tmp_path: Path, line_break: str
) -> None:
    """The recorded failure's message is quoted in the divergence a replay prints: with line
    breaks it printed a line of its own, "execution ... replayed identically"."""
    forged_line = "execution 00000000-0000-4000-8000-000000000000 (answer) replayed identically"
    message = msgspec.json.encode(f"boom{line_break}{forged_line}").decode()
    state = (
        '{"error_type":"builtins:ValueError","message":'
        + message
        + ',"timestamp":"2026-12-02T00:00:00Z"}'
    )
    path = _bundle_with_last_state(tmp_path, state, inline=False)
    real = read_bundle(path)
    failed = msgspec.structs.replace(real.events[-1], topic=Execution.Failed.TOPIC)
    path.write_text(msgspec.json.encode(real.resealed([*real.events[:-1], failed])).decode())
    code, output, error = _cli(
        "replay",
        str(path),
        f"--db=sqlite:///{tmp_path / 'x.db'}",
        "--flows",
        "replay_tests.security.test_bundlesec_untrusted_reads:flows",
    )
    assert error is None and code == 1, output
    assert [line for line in output.splitlines() if line.startswith("execution")] == [
        output.splitlines()[0]
    ], output


def _imported_with_breaks(folder: Path) -> tuple[str, Path, Any]:
    """A log holding a re-sealed bundle's execution whose code version and decision kind hold
    line breaks, each followed by a line loom prints; its URL, the bundle and the id."""
    _, loom, execution_id = _record(folder)
    with loom:
        real = read_bundle(loom.export(execution_id, folder / "real.json"))
    created, decision, *rest = real.events
    lineage = "forked from execution 00000000-0000-4000-8000-000000000000, taking its first 2"
    forged_version = created.state.replace('"code_version":"t"', f'"code_version":"t)\\n{lineage}"')
    forged_kind = decision.state.replace('"kind":"retrieval"', '"kind":"model\\nerror: FORGED"')
    assert forged_version != created.state and forged_kind != decision.state
    forged = real.resealed(
        [
            msgspec.structs.replace(created, state=forged_version),
            msgspec.structs.replace(decision, state=forged_kind),
            *rest,
        ]
    )
    path = folder / "forged.json"
    path.write_text(msgspec.json.encode(forged).decode())
    target = f"sqlite:///{folder / 'target.db'}"
    code, output, error = _cli("import", str(path), f"--db={target}")
    assert error is None and code == 0, output
    return target, path, execution_id


def test_executions_show_and_a_warning_print_a_recorded_text_on_its_line(
    tmp_path: Path,
) -> None:
    """The code version a bundle recorded printed its line breaks in `loom executions show`'s
    first line (a forged lineage line: "forked from execution ..."), and a recorded kind in
    the one-line warning of `loom replay --live` (a forged "error:" line), found by an attack
    review. Both are recorded text, shown on the line loom prints them on."""
    target, path, execution_id = _imported_with_breaks(tmp_path)
    code, output, error = _cli("executions", "show", str(execution_id), f"--db={target}")
    assert error is None and code == 0, output
    assert not [line for line in output.splitlines() if line.startswith("forked from")], output
    code, output, error = _cli(
        "replay",
        str(path),
        "--live=retrieval",
        "--flows",
        "replay_tests.security.test_bundlesec_untrusted_reads:flows",
    )
    assert error is None, output
    assert not [line for line in output.splitlines() if "FORGED" in line.split(":", 1)[0]]
    assert [line for line in output.splitlines() if line.startswith("error:")] == [], output


# -- arguments the flow's signature no longer takes ------------------------------------------

CHANGED_FLOWS = """
from loom_runtime import FlowContext, FlowRegistry

flows = FlowRegistry()


@flows.flow("answer", version="t2")
def answer(ctx: FlowContext, question: int) -> object:
    return ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")
"""


@pytest.mark.parametrize("target", ["bundle", "id"])
def test_recorded_arguments_the_flow_no_longer_takes_are_a_one_line_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """A recording whose arguments do not fit the current signature (the code changed, or the
    bundle was edited) is an answer of `loom replay FILE|ID`: exit 1 on one line, no
    traceback out of FlowInputError."""
    url, loom, execution_id = _record(tmp_path)
    with loom:
        path = loom.export(execution_id, tmp_path / "answer.json")
    (tmp_path / "changed_flows.py").write_text(CHANGED_FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, output, error = _cli(
        "replay",
        str(path) if target == "bundle" else str(execution_id),
        f"--db={url}",
        "--flows=changed_flows:flows",
    )
    assert error is None, f"escaped as {error!r}"
    assert code == 1 and "Traceback" not in output, output
    assert "does not fit its signature" in output, output
    assert len(output.strip().splitlines()) == 1, output


# -- a class version this loom never wrote ----------------------------------------------------


@pytest.mark.parametrize("class_version", ['"2"', "2", "0", "true", "2.0"])
def test_a_bundle_row_with_a_class_version_loom_never_wrote_is_a_refusal(
    tmp_path: Path, class_version: str
) -> None:
    """A stored ``class_version`` is what brings an older event up to date; loom writes none
    for its events (all at version 1). A crafted one raised a bare ``TypeError`` out of
    ``import_bundle`` (``"2" < 1``), and a number past the class's was read as the current
    version, as if a newer loom's event meant what this one's does. Each is a refusal:
    BundleFormatError, nothing imported."""
    state = '{"output":1,"class_version":' + class_version + ',"timestamp":"2026-12-02T00:00:00Z"}'
    forged = _bundle_with_last_state(tmp_path, state, inline=False)
    target = Loom(f"sqlite:///{tmp_path / 'target.db'}")
    with target:
        with pytest.raises(BundleFormatError):
            target.import_bundle(forged)
        assert not target.executions(), "nothing was to be imported"
    code, output, error = _cli("import", str(forged), f"--db=sqlite:///{tmp_path / 'cli.db'}")
    assert error is None, f"escaped as {error!r}"
    assert code == 1 and "Traceback" not in output, output


@pytest.mark.parametrize("class_version", ['"2"', "2"])
def test_a_log_row_with_a_class_version_loom_never_wrote_is_log_corrupt(
    tmp_path: Path, class_version: str
) -> None:
    """The same crafted version in a log row: LogCorruptError naming the row, never a
    ``TypeError`` or a newer event read as this loom's."""
    url, loom, execution_id = _record(tmp_path)
    loom.close()
    state = '{"output":["db slow","runbook.md"],"class_version":' + class_version
    state += ',"timestamp":"2026-12-02T00:00:00Z"}'
    _sql(url, ("UPDATE stored_events SET state = ? WHERE rowid = ?", (state.encode(), 3)))
    with Loom(url, flows=flows) as loom, pytest.raises(LogCorruptError, match="v3"):
        loom.execution(execution_id)


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("field", ["input", "value"])
def test_a_recorded_input_or_value_nested_deeper_than_loom_stores_is_refused(
    tmp_path: Path, field: str
) -> None:
    """An attack review: loom refuses to store an input or a value nested more than
    ``MAX_DEPTH`` levels (the run fails, or the decision is stored as that failure), but a
    bundle holding one replayed identical, since a replay hands the recorded bytes back
    (an input as the code encodes it is matched by its bytes, skipping the encoder's checks).
    Every reader refuses it, naming the decision; one at the limit still replays."""
    from loom_runtime.codec import MAX_DEPTH

    deep = FlowRegistry()

    @deep.flow("tree", version="t")
    def tree(ctx: FlowContext, depth: int) -> object:
        nested = _nested(depth)
        if field == "input":
            return ctx.decide("model", lambda: "approve", input={"doc": nested})
        return ctx.decide("model", lambda: nested) is not None

    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", flows=deep) as loom:
        run = loom.run("tree", depth=MAX_DEPTH - 2)
        real = read_bundle(loom.export(run.execution_id, tmp_path / "real.json"))
    assert Loom(flows=deep).replay_bundle(tmp_path / "real.json").identical  # the control
    events = list(real.events)
    state = msgspec.json.decode(events[1].state)
    if field == "input":
        state["input"] = {"doc": _nested(MAX_DEPTH + 10)}
    else:
        state["value"] = _nested(MAX_DEPTH + 10)
    events[1] = msgspec.structs.replace(events[1], state=msgspec.json.encode(state).decode())
    created = msgspec.json.decode(events[0].state)
    created["input"] = {"depth": MAX_DEPTH + 10}
    events[0] = msgspec.structs.replace(events[0], state=msgspec.json.encode(created).decode())
    path = write_bundle(real.resealed(events), tmp_path / "forged.json")
    with pytest.raises(BundleFormatError, match=rf"decision 'model'.*{field}.*{MAX_DEPTH}"):
        Loom(flows=deep).replay_bundle(path)
