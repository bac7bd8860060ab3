"""``loom diff A B`` and ``loom bundle show F``: a bundle read as text, in review (ADR 0029).

A re-recorded bundle lands in a pull request; these commands say what changed in terms a
reviewer knows (the flow's arguments, a fork's lineage, each decision's input, value and
origin, the outcome), with the same bounded unified diffs a failed replay shows. Ids,
timestamps and log positions are not compared: two recordings of the same behaviour are the
same. A bundle is untrusted input, so every value is printed through
:func:`~loom_runtime.tools.display.visible`, and every key and kind through
:func:`~loom_runtime.tools.display.identifier`, so that two that differ never print alike.

Exit codes: 0 the same (or shown), 1 they differ or a bundle is unusable (tampered, not a
bundle: a failed check), 2 a usage error or a file that does not exist, is over the size cap
or is from a newer loom (``exit_code_of``, as ``loom replay``). Errors go to stderr.
Registered on the ``loom`` app by the last line of :mod:`loom_runtime.tools.cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
import typer

from loom_runtime.tools.cli import (
    ExitCode,
    JsonOption,
    app,
    exit_code_of,
    fail,
    no_bundle_file,
    print_json,
)
from loom_runtime.tools.display import describe_meta, identifier, visible
from loom_runtime.tools.readable_help import LoomTyper

if TYPE_CHECKING:
    from loom_runtime.bundle import Bundle
    from loom_runtime.execution import Decision, Execution

bundle_app = LoomTyper(help="Read bundle files.", no_args_is_help=True)
app.add_typer(bundle_app, name="bundle")

Change = Literal[
    "flow",
    "arguments",
    "lineage",
    "added",
    "removed",
    "kind",
    "origin",
    "input",
    "value",
    "outcome",
]


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One way two recordings differ; ``key`` names the decision when it is one's."""

    change: Change
    key: str | None = None
    diff: str


class DiffReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``loom diff --json`` prints."""

    a: str
    b: str
    same: bool
    differences: list[Difference]


class DecisionView(msgspec.Struct, frozen=True, kw_only=True):
    """One decision as ``loom bundle show --json`` prints it (values as recorded JSON)."""

    key: str
    kind: str | None
    input: msgspec.Raw
    value: msgspec.Raw | None
    error: str | None
    meta: msgspec.Raw | None
    origin: str | None


class BundleView(msgspec.Struct, frozen=True, kw_only=True):
    """What ``loom bundle show --json`` prints."""

    execution_id: str
    flow: str
    code_version: str
    exported_at: str
    input: msgspec.Raw
    decisions: list[DecisionView]
    output: msgspec.Raw | None
    error: str | None


@app.command("diff")
def diff_command(
    a: Annotated[Path, typer.Argument(help="The bundle before (e.g. the committed one).")],
    b: Annotated[Path, typer.Argument(help="The bundle after (e.g. the re-recorded one).")],
    as_json: JsonOption = False,
) -> None:
    """Compare two bundles by behaviour (exit 1 when they differ).

    The flow's arguments, a fork's lineage, each decision's input, value and origin,
    decisions only one made, and the outcome, as unified diffs; ids, timestamps and log
    positions are not compared.
    """
    (_, before), (_, after) = _read(a), _read(b)
    try:
        differences = compare(before, after, sides=(str(a), str(b)))
    except (msgspec.DecodeError, RecursionError) as exc:  # 1e400, nesting past the decoder
        fail(f"{a} or {b} holds a value loom never writes ({exc}): it was edited; not compared")
    if as_json:
        report = DiffReport(a=str(a), b=str(b), same=not differences, differences=differences)
        print_json(report)
    elif not differences:
        typer.echo(f"same: {visible(str(a), one_line=True)} and {visible(str(b), one_line=True)}")
    for difference in [] if as_json else differences:
        where = f" {_key(difference.key)}" if difference.key else ""
        typer.echo(f"{difference.change}{where}:")
        typer.echo(visible(difference.diff).rstrip("\n"))
    raise typer.Exit(ExitCode.FAILED if differences else ExitCode.OK)


@bundle_app.command("show")
def show_command(
    path: Annotated[Path, typer.Argument(help="A bundle file (.json or .msgpack).")],
    as_json: JsonOption = False,
) -> None:
    """Show a bundle's execution in full.

    Its arguments, every decision (input, value or failure, what was measured) and outcome.
    """
    bundle, execution = _read(path)
    view = _view(execution, exported_at=bundle.exported_at.isoformat())
    if as_json:
        print_json(view)
        return
    try:
        lines = _lines(view)
    except (msgspec.DecodeError, RecursionError) as exc:  # a meta of 1e400, say
        fail(f"{path} holds a value loom never writes ({exc}): it was edited")
    typer.echo(visible("\n".join(lines)))


def _lines(view: BundleView) -> list[str]:
    """``bundle show``'s text: a header, the arguments, each decision, the outcome.

    A recorded name or message is shown on one line (:func:`_one`): with its line breaks it
    printed lines of its own, a forged ``output:`` block or value. Values are pretty JSON,
    whose strings hold their line breaks escaped.
    """
    from loom_runtime.codec import pretty

    lines = [
        f"execution {view.execution_id}  flow {_one(view.flow)}  code {_one(view.code_version)}",
        f"exported {view.exported_at}",
        "arguments:",
        _indented(pretty(view.input)),
    ]
    for decision in view.decisions:
        kind = f" ({identifier(decision.kind)})" if decision.kind else ""
        origin = f" [{_one(decision.origin)}]" if decision.origin else ""
        lines += [
            f"decision {_key(decision.key)}{kind}{origin}",
            "  input:",
            _indented(pretty(decision.input), 4),
        ]
        if decision.error is not None:
            lines.append(f"  raised {_one(decision.error)}")
        else:
            lines += ["  value:", _indented(pretty(decision.value), 4)]
        if decision.meta is not None:
            measured = describe_meta(msgspec.json.decode(decision.meta))
            lines.append(f"  measured: {_one(measured)}")
    if view.error is not None:
        lines.append(f"raised {_one(view.error)}")
    else:
        lines += ["output:", _indented(pretty(view.output))]
    return lines


def _one(text: str) -> str:
    return visible(text, one_line=True)


def _key(key: str) -> str:
    """A decision key as ``diff`` and ``show`` print it: quoted, one line, and apart from any
    other key (NFC ``café`` and NFD ``cafe`` + U+0301 printed alike, "removed" then "added")."""
    return identifier(repr(key))


def compare(before: Execution, after: Execution, *, sides: tuple[str, str]) -> list[Difference]:
    """Every difference in behaviour between two recorded executions, in recorded order."""
    from loom_runtime.diff import diff

    def changed(
        change: Change,
        old: msgspec.Raw | bytes | None,
        new: msgspec.Raw | bytes | None,
        key: str | None,
        label: str,
    ) -> Difference:
        return Difference(change=change, key=key, diff=diff(old, new, label=label, sides=sides))

    found: list[Difference] = []
    if before.flow != after.flow:
        found.append(changed("flow", _name(before.flow), _name(after.flow), None, "flow"))
    # Arguments and inputs compare as their bytes, as a replay compares them: their key
    # order is what the code (a model) reads (ADR 0002, "key order"); values and outputs with
    # keys in any order, as a replay's output check does.
    if bytes(before.input) != bytes(after.input):
        found.append(changed("arguments", before.input, after.input, None, "arguments"))
    if _lineage(before) != _lineage(after):
        found.append(changed("lineage", _lineage(before), _lineage(after), None, "lineage"))
    for key in [*before.decisions, *(k for k in after.decisions if k not in before.decisions)]:
        old, new = before.decisions.get(key), after.decisions.get(key)
        label = f"decision {_key(key)}"
        if old is None or new is None:
            change: Change = "added" if old is None else "removed"
            found.append(changed(change, _recorded(old), _recorded(new), key, label))
            continue
        if old.kind != new.kind:
            found.append(changed("kind", _name(old.kind), _name(new.kind), key, f"kind of {label}"))
        if old.origin != new.origin:  # what a replay counts as unused (ADR 0027, "paths")
            origins = _name(old.origin), _name(new.origin)
            found.append(changed("origin", *origins, key, f"origin of {label}"))
        if bytes(old.input) != bytes(new.input):
            found.append(changed("input", old.input, new.input, key, f"input of {label}"))
        if _outcome(old) != _outcome(new):
            found.append(changed("value", _outcome(old), _outcome(new), key, f"value of {label}"))
    if _ending(before) != _ending(after):
        found.append(changed("outcome", _ending(before), _ending(after), None, "outcome"))
    return found


def _read(path: Path) -> tuple[Bundle, Execution]:
    """The bundle and its execution; a missing file exits 2, an unusable bundle exits 1."""
    from loom_runtime.bundle import read_bundle
    from loom_runtime.errors import BundleError, BundleNotFoundError, ConfigurationError

    try:
        bundle = read_bundle(path)
        return bundle, bundle.execution()
    except BundleNotFoundError:
        named = (
            ""
            if path.suffix or "/" in str(path)
            else "; an execution id? this reads bundle files: write one with "
            "`loom export ID -o FILE`"
        )
        fail(no_bundle_file(path) + named, code=ExitCode.USAGE)
    except (BundleError, ConfigurationError) as exc:
        fail(str(exc), code=exit_code_of(exc))


def _view(execution: Execution, *, exported_at: str) -> BundleView:
    return BundleView(
        execution_id=str(execution.id),
        flow=execution.flow,
        code_version=execution.code_version,
        exported_at=exported_at,
        input=execution.input,
        decisions=[
            DecisionView(
                key=d.key,
                kind=d.kind,
                input=d.input,
                value=d.value,
                error=f"{d.error_type}: {d.message}" if d.error_type is not None else None,
                meta=d.meta,
                origin=d.origin,
            )
            for d in execution.decisions.values()
        ],
        output=execution.output,
        error=": ".join(execution.error) if execution.error is not None else None,
    )


def _outcome(decision: Decision) -> bytes:
    """A decision's value, or its recorded failure, as comparable JSON: a failure with the
    meta members it is rebuilt from (a group's errors, an MCP error's code), which decide the
    ``except`` a replay takes as much as its type does (ADR 0029, amended "failure meta")."""
    if decision.error_type is not None:
        failure: dict[str, Any] = {"raised": decision.error_type, "message": decision.message}
        rebuilt_from = _failure_meta(decision.meta)
        if rebuilt_from:
            failure["meta"] = rebuilt_from
        return msgspec.json.encode(failure, order="sorted")
    return _canonical(decision.value)


def _failure_meta(meta: msgspec.Raw | None) -> dict[str, Any]:
    """The members of a failure's ``meta`` it is rebuilt from (``FAILURE_META``)."""
    from loom_runtime.context import FAILURE_META

    decoded: Any = None if meta is None else msgspec.json.decode(meta)
    if not isinstance(decoded, dict):
        return {}
    return {name: decoded[name] for name in FAILURE_META if name in decoded}


def _recorded(decision: Decision | None) -> bytes | None:
    """A decision whole (input and outcome), for one that only one side recorded."""
    if decision is None:
        return None
    outcome = msgspec.json.decode(_outcome(decision))
    return msgspec.json.encode({"input": msgspec.json.decode(decision.input), "outcome": outcome})


def _ending(execution: Execution) -> bytes:
    if execution.error is not None:
        return msgspec.json.encode({"raised": execution.error[0], "message": execution.error[1]})
    if execution.output is None:
        return msgspec.json.encode({"unfinished": True})
    return msgspec.json.encode({"returned": msgspec.json.decode(execution.output)}, order="sorted")


def _canonical(raw: msgspec.Raw | bytes | None) -> bytes:
    """Sorted-key JSON: the same value compares equal whatever its stored key order."""
    decoded: Any = None if raw is None else msgspec.json.decode(raw)
    return msgspec.json.encode(decoded, order="sorted")


def _lineage(execution: Execution) -> bytes:
    """Whether the execution is a fork, and of how many of its parent's decisions with which
    overrides, as comparable JSON: a replay reads them (an inherited decision the code no
    longer asks is not unused, ADR 0027), so a run and a fork of the same decisions replay
    differently. Not the parent's id: a fork recorded again forks a parent recorded again."""
    overrides = None if execution.overrides is None else msgspec.json.decode(execution.overrides)
    lineage = {
        "fork": execution.parent_id is not None,
        "forked_at": execution.forked_at,
        "overrides": overrides,
    }
    return msgspec.json.encode(lineage, order="sorted")


def _name(value: str | None) -> bytes:
    """A flow's name, a kind or an origin as the JSON a diff shows, apart from any other
    (:func:`~loom_runtime.tools.display.identifier`)."""
    return msgspec.json.encode(None if value is None else identifier(value))


def _indented(text: str, by: int = 2) -> str:
    # At "\n" only: ``splitlines`` also breaks at NEL, U+2028 and others a recorded string
    # holds unescaped in pretty JSON, which would print a line of the value's own making.
    return "\n".join(" " * by + line for line in text.split("\n"))
