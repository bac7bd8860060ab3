"""Bundles and log rows are untrusted input.

Reading one imports nothing (a topic or a recorded error type naming a module never runs its
code), cannot forge a verdict (a recorded error is never taken for a replay finding; outputs
compare as canonical bytes), fails typed on a tampered log (one line, exit 1, no traceback),
and is bounded (a size cap checked before reading; a diff printed in time linear in its size).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import BundleEvent, read_bundle, write_bundle
from loom_runtime.context import rebuild_error
from loom_runtime.errors import (
    BundleFormatError,
    BundleTooLargeError,
    OutcomeChangedError,
    OutputChangedError,
    RecordedComputeError,
)
from loom_runtime.execution import Decision, Execution
from loom_runtime.tools.cli import app

flows = FlowRegistry()
REPLAYED_OUTPUT: dict[str, object] = {}
"""What ``answer`` returns instead of its hits, when a test sets ``value``."""


@flows.flow("answer", version="t")
def answer(ctx: FlowContext, question: str) -> Any:
    hits = ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")
    return REPLAYED_OUTPUT.get("value", hits)


def _model_down() -> str:
    raise ValueError("model down")


@flows.flow("fragile", version="t")
def fragile(ctx: FlowContext, question: str) -> str:
    try:
        return ctx.decide("model", _model_down)
    except ValueError:
        return "fallback"


FLOWS_MODULE = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_untrusted_input import flows
"""


class Outer:
    """Holds a nested exception class, rebuilt by its dotted qualname."""

    class Inner(Exception):
        pass


# -- helpers -----------------------------------------------------------------------------------


def plant_module(folder: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A module on sys.path that leaves a marker file if anything imports it."""
    name = f"loom_planted_{uuid4().hex}"
    marker = folder / f"{name}.imported"
    (folder / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Boom(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    return name, marker


def assert_never_imported(name: str, marker: Path) -> None:
    assert name not in sys.modules
    assert not marker.exists(), f"{name} was imported: its top-level code ran"


def record(folder: Path, flow: str, **arguments: object) -> tuple[str, Path]:
    """Run ``flow`` into a fresh SQLite log; return its database URL and an exported bundle."""
    url = f"sqlite:///{folder / f'{flow}.db'}"
    with Loom(url, flows=flows) as loom:
        try:
            run_id = loom.run(flow, **arguments).execution_id
        except Exception:  # a flow that fails is recorded too: find its id
            run_id = loom.executions()[-1].execution_id
        bundle = loom.export(run_id, folder / f"{flow}.json")
    return url, bundle


def reseal(bundle: Path, edit: Callable[[list[BundleEvent]], list[BundleEvent]]) -> Path:
    """The bundle with its events edited and its content hash recomputed (a forger's copy)."""
    real = read_bundle(bundle)
    sealed = real.resealed(edit(list(real.events)))
    return write_bundle(sealed, bundle.with_name(f"forged-{bundle.name}"))


def with_state(
    event: BundleEvent, topic: str | None = None, *, drop: str = "", **changes: object
) -> BundleEvent:
    """``event`` with fields of its stored state replaced, and ``drop`` removed."""
    state = msgspec.json.decode(event.state)
    state.update(changes)
    state.pop(drop, None)
    return msgspec.structs.replace(
        event, topic=topic or event.topic, state=msgspec.json.encode(state).decode()
    )


def as_failure(event: BundleEvent, error_type: str, message: str = "forged") -> BundleEvent:
    """A recorded decision turned into a recorded failure of ``error_type``."""
    return with_state(
        event, Execution.DecisionFailed.TOPIC, drop="value", error_type=error_type, message=message
    )


def cli(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(app, list(args))
    error = None if isinstance(result.exception, SystemExit) else result.exception
    return result.exit_code, result.output, error


def assert_one_line_refusal(code: int, output: str, error: BaseException | None) -> None:
    assert error is None, f"escaped as {error!r}"
    assert code == 1, output
    assert "Traceback" not in output
    assert len(output.strip().splitlines()) == 1, output
    assert output.startswith("error:"), output


@pytest.fixture
def flows_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``--flows`` naming this module's registry, for the CLI."""
    (tmp_path / "untrusted_flows.py").write_text(FLOWS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "--flows=untrusted_flows:flows"


# -- 1. reading imports nothing ---------------------------------------------------------------


def test_a_created_event_naming_another_aggregate_is_refused_unimported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flows_option: str
) -> None:
    """A re-sealed bundle whose Created names a planted module as its originator_topic is
    refused by the API, the CLI and the pytest plugin's path, and the module is never run."""
    _, bundle = record(tmp_path, "answer", question="db slow")
    name, marker = plant_module(tmp_path, monkeypatch)
    path = reseal(bundle, lambda e: [with_state(e[0], originator_topic=f"{name}:Boom"), *e[1:]])
    with pytest.raises(BundleFormatError, match="originator_topic"):
        Loom(flows=flows).replay_bundle(path)
    code, output, error = cli("replay", str(path), flows_option)
    assert error is None and code == 1 and "originator_topic" in output  # a failed check
    assert_never_imported(name, marker)


def test_a_created_row_naming_another_aggregate_is_refused_unimported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flows_option: str
) -> None:
    """The same edit made in the database: `loom replay ID` refuses it in one line, unimported."""
    url, bundle = record(tmp_path, "answer", question="db slow")
    name, marker = plant_module(tmp_path, monkeypatch)
    execution_id = read_bundle(bundle).execution_id
    edit_row(url, 1, "state", lambda s: s.replace(b'"loom.execution"', f'"{name}:Boom"'.encode()))
    assert_one_line_refusal(*cli("replay", str(execution_id), f"--db={url}", flows_option))
    assert_never_imported(name, marker)


def test_a_recorded_error_type_naming_a_module_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DecisionFailed whose error_type names a planted module replays as a
    RecordedComputeError carrying that name; the module is never run."""
    _, bundle = record(tmp_path, "fragile", question="q")
    name, marker = plant_module(tmp_path, monkeypatch)
    path = reseal(bundle, lambda e: [e[0], as_failure(e[1], f"{name}:Boom"), *e[2:]])
    result = Loom(flows=flows).replay_bundle(path)
    assert not result.identical
    assert f"raised {name}:Boom" in result.describe()
    assert_never_imported(name, marker)


def test_a_recorded_error_is_rebuilt_only_from_classes_already_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """builtins and loaded modules rebuild the original class; anything else is a typed
    RecordedComputeError carrying the recorded name, and nothing is imported."""
    name, marker = plant_module(tmp_path, monkeypatch)

    def rebuilt(error_type: str) -> Exception:
        return rebuild_error(
            Decision(
                key="k", kind=None, input=msgspec.Raw(b"null"), error_type=error_type, message="m"
            )
        )

    assert type(rebuilt("builtins:ValueError")) is ValueError
    # Needs 3 arguments: made without its constructor (ADR 0002 "constructors").
    assert type(rebuilt("json.decoder:JSONDecodeError")) is json.JSONDecodeError
    assert type(rebuilt("msgspec:ValidationError")) is msgspec.ValidationError
    assert type(rebuilt(f"{__name__}:Outer.Inner")) is Outer.Inner
    for unknown in (f"{name}:Boom", f"{name}", "os:system", "builtins:len", "nope:"):
        error = rebuilt(unknown)
        assert isinstance(error, RecordedComputeError) and error.error_type == unknown
    assert_never_imported(name, marker)


def test_a_row_topic_naming_a_module_is_not_imported_by_doctor_or_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flows_option: str
) -> None:
    """A tampered row's topic naming a planted module: `loom doctor` and `loom replay ID`
    report it (exit 1) and the module is never run."""
    url, bundle = record(tmp_path, "answer", question="db slow")
    name, marker = plant_module(tmp_path, monkeypatch)
    edit_row(url, 2, "topic", lambda _: f"{name}:Boom")
    code, output, error = cli("doctor", f"--db={url}")
    assert error is None and code == 1 and "FAIL" in output and name in output
    execution_id = str(read_bundle(bundle).execution_id)
    assert_one_line_refusal(*cli("replay", execution_id, f"--db={url}", flows_option))
    assert_never_imported(name, marker)


# -- 2. a recorded error is never a replay finding ---------------------------------------------


@pytest.mark.parametrize(
    "error_type",
    [
        "loom_runtime.errors:ReplayDivergence",
        "loom_runtime.errors:OutputChangedError",
        "loom_runtime.errors:UnrecordedDecisionError",
        "loom_runtime.errors:RecordedComputeError",
    ],
)
def test_a_forged_replay_finding_in_the_recording_does_not_replay_identically(
    tmp_path: Path, error_type: str, flows_option: str
) -> None:
    """A re-sealed bundle whose first decision 'failed' with one of replay's own finding types
    reports a divergence: API not identical, CLI exit 1."""
    _, bundle = record(tmp_path, "answer", question="db slow")
    path = reseal(bundle, lambda e: [e[0], as_failure(e[1], error_type), *e[2:]])
    result = Loom(flows=flows).replay_bundle(path)
    assert not result.identical
    assert isinstance(result.divergences[0], OutcomeChangedError)
    code, output, error = cli("replay", str(path), flows_option)
    assert error is None and code == 1 and "diverged" in output


# -- 3. outputs compare as canonical bytes -----------------------------------------------------


@pytest.mark.parametrize(
    ("replayed"),
    [1, 1.0, {"hits": [1]}, {"hits": [True], "n": 1.0}],
    ids=["int", "float", "nested-int", "nested-float"],
)
def test_an_output_equal_only_after_decoding_diverges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replayed: object
) -> None:
    """Recorded True (or {"hits": [True], "n": 1}) against replayed 1 / 1.0 is a divergence."""
    recorded: object = True if not isinstance(replayed, dict) else {"hits": [True], "n": 1}
    monkeypatch.setitem(REPLAYED_OUTPUT, "value", recorded)
    _, bundle = record(tmp_path, "answer", question="q")
    assert Loom(flows=flows).replay_bundle(bundle).identical
    monkeypatch.setitem(REPLAYED_OUTPUT, "value", replayed)
    result = Loom(flows=flows).replay_bundle(bundle)
    assert [type(d) for d in result.divergences] == [OutputChangedError]


# -- 4. a tampered log fails typed, in one line ------------------------------------------------


def edit_row(url: str, version: int, column: str, edit: Callable[[Any], Any]) -> None:
    """Edit one column of the execution's event ``version`` in a SQLite log, as an attacker."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        (value,) = db.execute(
            f"SELECT {column} FROM stored_events WHERE originator_version = ?", (version,)
        ).fetchone()
        db.execute(
            f"UPDATE stored_events SET {column} = ? WHERE originator_version = ?",
            (edit(value), version),
        )


TAMPERINGS: dict[str, tuple[int, str, Callable[[Any], Any]]] = {
    "unknown-topic": (2, "topic", lambda _: "loom.execution.Nonexistent"),
    "foreign-topic": (2, "topic", lambda _: "no_such_module:Event"),
    "other-event-topic": (2, "topic", lambda _: Execution.Completed.TOPIC),
    "created-topic": (2, "topic", lambda _: Execution.Created.TOPIC),
    "not-created-first": (1, "topic", lambda _: Execution.Completed.TOPIC),
    "version-gap": (2, "originator_version", lambda v: v + 5),
    "state-not-json": (2, "state", lambda s: s[: len(s) // 2]),
    "state-wrong-shape": (2, "state", lambda _: b'{"key": 1}'),
}


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_replaying_or_exporting_a_tampered_log_is_a_one_line_refusal(
    tmp_path: Path, tampering: str, flows_option: str
) -> None:
    """`loom replay ID`, `loom export ID` and `loom executions show ID` on an edited topic,
    version or state: exit 1, one line, no traceback."""
    url, bundle = record(tmp_path, "answer", question="db slow")
    version, column, edit = TAMPERINGS[tampering]
    edit_row(url, version, column, edit)
    execution_id = str(read_bundle(bundle).execution_id)
    assert_one_line_refusal(*cli("replay", execution_id, f"--db={url}", flows_option))
    exported = tmp_path / "again.json"
    assert_one_line_refusal(*cli("export", execution_id, "-o", str(exported), f"--db={url}"))
    assert not exported.exists()
    assert_one_line_refusal(*cli("executions", "show", execution_id, f"--db={url}"))


@pytest.mark.parametrize("version", [1, 2])
def test_a_state_stored_as_text_reads_as_the_bytes_it_holds(
    tmp_path: Path, version: int, flows_option: str
) -> None:
    """An event's state stored as TEXT, as the sqlite3 shell's ``replace()`` leaves it, its JSON
    unchanged: every command reads it as before, and `loom verify` (the judge of edits) says
    where the log was altered. `loom executions list` and `loom doctor` raised a TypeError from
    ``bytes(str)`` before."""
    url, bundle = record(tmp_path, "answer", question="db slow")
    listed = cli("executions", "list", f"--db={url}")
    edit_row(url, version, "state", lambda state: bytes(state).decode())
    execution_id = str(read_bundle(bundle).execution_id)
    assert cli("executions", "list", f"--db={url}") == listed
    assert listed[0] == 0
    code, output, error = cli("verify", f"--db={url}")
    assert (code, error) == (1, None)
    assert output.startswith(f"TAMPERED at log position {version}: altered"), output
    for command in (
        ("executions", "show", execution_id),
        ("replay", execution_id, flows_option),
        ("export", execution_id, "-o", str(tmp_path / "again.json")),
        ("doctor",),
    ):
        code, output, error = cli(*command, f"--db={url}")
        assert (code, error) == (0, None), output
    assert read_bundle(tmp_path / "again.json").events == read_bundle(bundle).events


@pytest.mark.parametrize("kept", [0.5, 0.9])
def test_verifying_a_truncated_database_file_is_a_one_line_refusal(
    tmp_path: Path, kept: float
) -> None:
    """`loom verify` on a SQLite file cut short (in half, or its last pages): exit 1, one
    line, no traceback."""
    url, _ = record(tmp_path, "answer", question="db slow " * 20_000)
    path = Path(url.removeprefix("sqlite:///"))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * kept)])
    assert_one_line_refusal(*cli("verify", f"--db={url}"))


def test_verifying_a_file_that_is_not_a_database_is_a_one_line_refusal(tmp_path: Path) -> None:
    """`loom verify` on a file of garbage: exit 1, one line, no traceback."""
    path = tmp_path / "garbage.db"
    path.write_bytes(os.urandom(8192))
    assert_one_line_refusal(*cli("verify", f"--db=sqlite:///{path}"))


# -- 5. bounded: a size cap, and diffs linear in their size ------------------------------------


def test_a_bundle_over_the_cap_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flows_option: str
) -> None:
    """A (sparse) 64 GiB file is refused by size before any byte is read; the cap is set by
    keyword, by --max-bundle-bytes and by LOOM_MAX_BUNDLE_BYTES."""
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(64 << 30)
    with pytest.raises(BundleTooLargeError, match="max_bundle_bytes"):
        Loom(flows=flows).replay_bundle(huge)
    _, bundle = record(tmp_path, "answer", question="q")
    size = bundle.stat().st_size
    assert read_bundle(bundle, max_bytes=size) == read_bundle(bundle)
    with pytest.raises(BundleTooLargeError):
        read_bundle(bundle, max_bytes=size - 1)
    with pytest.raises(BundleTooLargeError):
        Loom(flows=flows).replay_bundle(bundle, max_bundle_bytes=size - 1)
    code, output, _ = cli("replay", str(bundle), flows_option, f"--max-bundle-bytes={size - 1}")
    assert code == 2 and "too large" in output
    monkeypatch.setenv("LOOM_MAX_BUNDLE_BYTES", str(size - 1))
    code, output, _ = cli("replay", str(bundle), flows_option)
    assert code == 2 and "too large" in output


def test_a_huge_output_divergence_is_reported_in_bounded_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flows_option: str
) -> None:
    """A 4 MB output that changed is reported by size and hash and a bounded excerpt, not a
    4 MB diff: the printed report is a few KB, whatever the values' size."""
    monkeypatch.setitem(REPLAYED_OUTPUT, "value", "y" * 4_000_000)
    _, bundle = record(tmp_path, "answer", question="q")
    monkeypatch.setitem(REPLAYED_OUTPUT, "value", "y" * 2_000_000 + "x" * 2_000_000)
    result = Loom(flows=flows).replay_bundle(bundle)
    assert [type(d) for d in result.divergences] == [OutputChangedError]
    assert len(result.describe()) < 5_000
    assert "4,000,002 bytes" in result.describe() and "sha256" in result.describe()
    code, output, _ = cli("replay", str(bundle), flows_option)
    assert code == 1 and len(output) < 10_000


def test_a_long_diff_is_cut_with_a_count_of_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diff of many changed lines prints a bounded number of them, then '... N more lines'."""
    monkeypatch.setitem(REPLAYED_OUTPUT, "value", [f"line {i}" for i in range(2_000)])
    _, bundle = record(tmp_path, "answer", question="q")
    monkeypatch.setitem(REPLAYED_OUTPUT, "value", [f"changed {i}" for i in range(2_000)])
    text = Loom(flows=flows).replay_bundle(bundle).describe()
    assert len(text.splitlines()) < 250
    assert "more lines" in text


def test_a_long_recorded_key_error_is_not_read_back_as_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recorded ``KeyError``'s message is read back as its key with ``ast.literal_eval``,
    whose syntax tree takes ~500 times the text: a 5 MB message in a 10 MB bundle took 2.5 GB.
    A short one still rebuilds the ``KeyError`` (the control); a long one is carried as
    recorded, and never parsed."""
    import ast

    parsed: list[int] = []
    real = ast.literal_eval

    def counted(text: str) -> object:
        parsed.append(len(text))
        return real(text)

    monkeypatch.setattr(ast, "literal_eval", counted)

    def rebuilt(message: str) -> Exception:
        raw = msgspec.Raw(b"null")
        decision = Decision(
            key="k", kind=None, input=raw, error_type="builtins:KeyError", message=message
        )
        return rebuild_error(decision)

    short = rebuilt("'disk.md'")
    assert type(short) is KeyError and short.args == ("disk.md",)
    long = rebuilt("[" + "0," * 50_000 + "0]")
    assert isinstance(long, RecordedComputeError)
    assert parsed == [len("'disk.md'")]
