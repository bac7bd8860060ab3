"""Help that reads like a conventional CLI's: ``loom run [OPTIONS] FLOW``, flags without a type.

Typer (0.2x) writes a required argument in the usage line as ``{flow}`` and gives every flag
a ``<bool>`` type, as if ``--apply`` took a value, and a repeatable option the Python type
``<list[str]>``. No Typer setting changes either, and
``metavar=`` only renames the argument (``{FLOW}``) and cannot reach the options Typer adds
itself (``--help``, ``--install-completion``). So every ``loom`` command and group is built
from the two classes here, by :class:`LoomTyper` (ADR 0033): arguments are named in capitals
(required ``FLOW``, optional ``[FLOW]``), as Click and POSIX usage lines do, and a flag shows
no type at all.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandFunctionType

from loom_runtime.tools.display import visible

_USAGE_ERROR: type[Exception] = typer.BadParameter.__mro__[1]
"""Click's ``UsageError``: everything the parser refuses is one (a misspelt flag or command, a
missing argument, a value it cannot read). Typer (0.2x) vendors Click and exports only
``BadParameter`` of its exceptions, a subclass of it."""
_LIST_TYPE = re.compile(r"<list\[(.+)\]>")
"""Typer's type of a repeatable option or a variadic argument: the Python annotation."""
_ELEMENT_NAMES = {"Path": "path"}
"""An element type as Typer names it in a single value's type (``<path>``, not ``<Path>``)."""


def _shows(text: str) -> Callable[..., str]:
    """A ``display_type_rich`` that shows ``text`` (Typer calls it with ``ctx=``)."""
    return lambda **_: text


def _readable(params: list[Any], ctx: Any) -> list[Any]:
    """``params`` with a metavar where Typer would print a placeholder: an argument's name in
    capitals, none for a flag (Typer prints the metavar in place of the type), and an
    element's type for a list (``<str>`` for a repeatable option, ``<str>...`` for a variadic
    argument, where Typer prints ``<list[str]>``)."""
    for param in params:
        if param.metavar is not None:
            continue
        listed = _LIST_TYPE.fullmatch(param.display_type(ctx) or "")
        element = _ELEMENT_NAMES.get(listed[1], listed[1]) if listed else ""
        if param.param_type_name == "argument":
            param.metavar = (param.name or "").upper()
            if listed:
                # An argument's type column is not its metavar: Typer asks this method.
                param.display_type_rich = _shows(f"<{element}>...")
        elif getattr(param, "is_flag", False):
            param.metavar = ""
        elif listed:
            param.metavar = f"<{element}>"
    return params


def _reflowed(text: str | None) -> str | None:
    """``text`` with the lines of each paragraph joined. Typer joins a command's first
    paragraph only and prints the others' line breaks as the docstring has them, ragged at
    any width but the source's; joined, each paragraph is wrapped to the terminal. A paragraph
    marked ``\\b`` (Click's "keep my lines") is left as it is."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


class ReadableCommand(TyperCommand):
    """A command whose help names its arguments ``FLOW`` / ``[FLOW]``, types no flag and is
    wrapped to the terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _reflowed(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx), ctx)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces += param.get_usage_pieces(ctx)
                continue
            name = param.metavar + ("..." if param.nargs != 1 else "")
            pieces.append(name if param.required else f"[{name}]")
        return pieces


class ReadableGroup(TyperGroup):
    """A group (``loom``, ``loom knowledge``) whose own flags (``--help``, ``--version``,
    ``--install-completion``) show no type, and whose help is wrapped to the terminal; a
    command line it refuses is one line of stderr (:meth:`main`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _reflowed(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx), ctx)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """As Click's, except that what the parser refuses (a misspelt flag or command, a
        choice or number it cannot read, a missing argument) is one line of stderr, as every
        other loom error is, where Typer drew the usage line and a box; exit 2 as before."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except _USAGE_ERROR as refused:
            error: Any = refused
            where = f"{error.ctx.command_path} --help" if error.ctx is not None else "--help"
            message = " ".join(error.format_message().split())
            if message:  # a group given no command has printed its help, which says it all
                typer.echo(f"error: {visible(message, one_line=True)} (see {where})", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


class LoomTyper(typer.Typer):
    """A Typer app whose groups and commands have readable help (the classes above)."""

    def __init__(self, *, cls: type[ReadableGroup] = ReadableGroup, **options: Any) -> None:
        super().__init__(cls=cls, **options)

    def command(
        self, name: str | None = None, **options: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(name, cls=ReadableCommand, **options)
