"""The knowledge package's ``loom`` commands, registered through the ``loom.cli`` entry point."""

from __future__ import annotations

import typer

from loom_runtime.cli import DbOption, console, open_loom


def demo(db: DbOption = None) -> None:
    """Ingest runbooks, answer an incident, delete the corpus, replay it in a fresh process,
    rebuild it from the log."""
    from loom_knowledge.demo import run_demo

    with open_loom(db) as loom:
        ok = run_demo(loom, say=console.print)
    raise typer.Exit(0 if ok else 1)


def register(app: typer.Typer) -> None:
    """Add this package's commands to the ``loom`` CLI."""
    app.command()(demo)
