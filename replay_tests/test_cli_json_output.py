"""``--json`` output (ADR 0033, amended "json"): strict JSON, one document, written as encoded.

A review found that every ``--json`` went through Rich's ``print_json``, which parsed the text
again with Python's ``json`` and wrote it back: a recorded ``1e400`` came out as ``Infinity``
(not JSON), an integer past Python's 4,300 digits was a traceback, a file name that is not
UTF-8 was a ``UnicodeEncodeError`` after the import it reports had happened, and a decision of
1,536 floats took a minute and 2.8 GB to show.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.tools.cli import app, print_json

flows = FlowRegistry()


@flows.flow("echo", version="t")
def echo(ctx: FlowContext, text: Any) -> object:
    return ctx.decide("said", lambda: text)


def _refuse(constant: str) -> None:
    raise ValueError(f"not JSON: {constant}")


def _strict(text: str) -> Any:
    """``text`` parsed as strict JSON: ``Infinity``, ``NaN`` and friends are refused."""
    return json.loads(text, parse_constant=_refuse)


def test_recorded_numbers_keep_their_text(capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded number is shown as recorded: ``1e400`` stays ``1e400`` (strict JSON; a
    reader decides what it means) and 5,000 digits stay 5,000 digits."""
    digits = "9" * 5000
    print_json({"big": msgspec.Raw(b"1e400"), "digits": msgspec.Raw(digits.encode())})
    shown = capsys.readouterr().out
    assert "Infinity" not in shown
    parsed = json.loads(shown, parse_int=str, parse_float=str, parse_constant=_refuse)
    assert parsed == {"big": "1e400", "digits": digits}
    assert shown.count("\n") > 1  # indented for a reader, as before


def test_non_ascii_is_escaped_and_reads_back(capsys: pytest.CaptureFixture[str]) -> None:
    """Non-ASCII, bidi controls and astral characters are ``\\uXXXX`` escapes (surrogate pairs
    for the astral ones): inert on a terminal, and the same strings when parsed."""
    text = "caf\u00e9 \u202egnp.exe \u2066x\u2069 \U0001f600 \x1b]0;title\x07 \x85 \x7f"
    print_json({"text": text, "\u00e9": 1})
    shown = capsys.readouterr().out
    assert shown.isascii()
    assert "\x1b" not in shown and "\x07" not in shown and "\x7f" not in shown
    assert _strict(shown) == {"text": text, "\u00e9": 1}


def test_a_name_that_is_not_utf8_is_shown_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A string holding a file name's undecodable byte (``os.fsdecode``'s surrogate escape)
    cannot be UTF-8: its bytes are shown as ``\\xNN``, and the rest of the report still is."""
    print_json([{"path": "bundle-\udcff.json", "status": "imported"}])
    assert _strict(capsys.readouterr().out) == [{"path": "bundle-\\xff.json", "status": "imported"}]


@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8")
def test_import_json_reports_a_bundle_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Through the command: the import happened, so its report must be printed (it was a
    ``UnicodeEncodeError`` traceback, exit 1, after the execution went in)."""
    with Loom(f"sqlite:///{tmp_path / 'a.db'}", flows=flows) as loom:
        run = loom.run("echo", text="hi")
        exported = loom.export(run.execution_id, tmp_path / "bundle.json")
    odd = Path(bytes(tmp_path / "bundle-").decode() + "\udcff.json")
    exported.rename(odd)
    result = CliRunner().invoke(
        app, ["import", str(odd), f"--db=sqlite:///{tmp_path / 'b.db'}", "--json"]
    )
    assert result.exit_code == 0, result.output
    (report,) = _strict(result.stdout)
    assert report["status"] == "imported" and report["path"].endswith("bundle-\\xff.json")


def test_run_output_is_escaped_json(tmp_path: Path) -> None:
    """``loom run`` prints the output as JSON in text mode too, through the same writer:
    escaped, strict, after the execution's line."""
    result = CliRunner().invoke(
        app,
        [
            "run",
            "echo",
            "--input",
            '{"text": [1.5, "\u202e"]}',
            f"--db=sqlite:///{tmp_path / 'a.db'}",
            "--flows=replay_tests.test_cli_json_output:flows",
        ],
    )
    assert result.exit_code == 0, result.output
    first, _, rest = result.stdout.partition("\n")
    assert first.startswith("execution ")
    assert rest.isascii() and _strict(rest) == [1.5, "\u202e"]
