"""The ``loom`` command line, on Typer (Click underneath) with Rich output (ADR 0008).

Exit codes: 0 ok, 1 a divergence or failed check, 2 a usage error (Click's own convention for
bad arguments, kept for loom's refusals of bad input too).

Packages above the runtime add their commands through the ``loom.cli`` entry-point group
(each entry point is a ``register(app)`` function), so this module never imports them and the
dependencies stay one way.
"""

from __future__ import annotations

from importlib.metadata import entry_points
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


def open_loom(db: str | None) -> Loom:
    """Open the log for a command; a bad URL or option is a usage error (exit 2)."""
    try:
        return Loom(db)
    except LoomError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


def _load_plugins() -> None:
    for entry_point in entry_points(group="loom.cli"):
        entry_point.load()(app)


_load_plugins()


def main() -> None:
    """Console-script entry point."""
    app()
