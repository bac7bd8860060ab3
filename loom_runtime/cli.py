"""The ``loom`` command line, on Typer (Click underneath) with Rich output (ADR 0008).

Exit codes: 0 ok, 1 a divergence or failed check, 2 a usage error (Click's own convention for
bad arguments, kept for loom's refusals of bad input too).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from loom_runtime.errors import LoomError
from loom_runtime.loom import Loom

app = typer.Typer(
    name="loom",
    help="Record, replay and audit AI-agent executions from one append-only event log.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(highlight=False)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="LOOM_DB_URL",
        help="Database URL: sqlite:///path/to/loom.db (default ./loom.db) or "
        "postgresql+psycopg://user:pw@host:port/db.",
    ),
]


@app.callback()
def _root() -> None:
    """Record, replay and audit AI-agent executions from one append-only event log."""


def _open(db: str | None) -> Loom:
    try:
        return Loom(db)
    except LoomError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def demo(db: DbOption = None) -> None:
    """Record a small flow, replay it with its live dependencies unreachable, print both."""
    from loom_runtime.demo import run_demo

    with _open(db) as loom:
        result = run_demo(loom, say=console.print)
    raise typer.Exit(0 if result.identical else 1)


def main() -> None:
    """Console-script entry point."""
    app()
