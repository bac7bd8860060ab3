"""The README and the guides run: every Python block is executed, or is a declared fragment.

The convention (ADR 0031): the Python blocks of one page run in order in one namespace, as a
reader pasting them into one session would, in a fresh temporary directory (so the README's
``Loom()`` writes ``./loom.db`` there), with ``OPENAI_BASE_URL`` pointing at the loopback
provider of the capture tests and a ``runbooks/`` folder of the demo's documents. A block that
cannot run on its own, because it stands for the reader's code, is preceded by the line::

    <!-- fragment given: loom, execution_id -->

naming every free name the reader supplies (a module name stands for the reader's package, e.g.
``myapp``). A fragment is not executed, but it must compile, use no other free name (a missing
import fails here), and its imports of anything but the given names must succeed.

``docs/guides/record-an-existing-agent.md`` runs against a full LangGraph agent instead, in
``replay_tests/capture/test_langgraph_agent.py``; this file only checks that it stays covered.
"""

from __future__ import annotations

import ast
import builtins
import logging
import os
import re
import symtable
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from replay_tests.capture.provider_server import ProviderServer

ROOT = Path(__file__).resolve().parent.parent
AGENT_GUIDE = ROOT / "docs" / "guides" / "record-an-existing-agent.md"
AGENT_TEST = ROOT / "replay_tests" / "capture" / "test_langgraph_agent.py"
GUIDES = sorted(page for page in (ROOT / "docs" / "guides").glob("*.md") if page != AGENT_GUIDE)
PAGES = [ROOT / "README.md", *GUIDES]

FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
MARKER = re.compile(r"^[ \t]*<!--\s*fragment\b(?P<rest>.*?)-->", re.S | re.M)
"""A fragment marker is a line of its own (prose may quote one inline)."""
GIVEN = re.compile(r"\s+given:\s*(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*")


class Block(msgspec.Struct, frozen=True, kw_only=True):
    """One fenced Python block of a page, with the names its fragment marker gives (if any)."""

    page: Path
    line: int
    source: str
    given: frozenset[str] | None

    @property
    def where(self) -> str:
        """``page:line``, as a test id and a traceback's file name."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    """The page's Python blocks; a fragment marker applies to the block right after it."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for fence in FENCE.finditer(text):
        before = text[: fence.start()].rstrip()
        marker = MARKER.search(before, before.rfind("\n") + 1)
        given = None
        if marker is not None:
            names = GIVEN.fullmatch(marker["rest"])
            given = frozenset(n.strip() for n in names["names"].split(",")) if names else None
        indent = len(fence["indent"])
        source = "".join(line[indent:] for line in fence["body"].splitlines(keepends=True))
        line = text.count("\n", 0, fence.start()) + 1
        blocks.append(Block(page=page, line=line, source=source, given=given))
    return blocks


def _free_names(source: str) -> set[str]:
    """The global names ``source`` reads without binding them (builtins excluded)."""
    top = symtable.symtable(source, "<block>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        used |= {
            s.get_name()
            for s in table.get_symbols()
            if s.is_referenced() and (table is top or s.is_global())
        }
        tables += table.get_children()
    return used - bound - set(dir(builtins))


def _page_params() -> list[Any]:
    """The pages with at least one runnable block (the others are only fragments)."""
    return [
        pytest.param(page, id=str(page.relative_to(ROOT)))
        for page in PAGES
        if any(block.given is None for block in _blocks(page))
    ]


def _fragment_params() -> list[Any]:
    return [
        pytest.param(block, id=block.where)
        for page in PAGES
        for block in _blocks(page)
        if block.given is not None
    ]


def test_every_fragment_marker_is_well_formed_and_sits_on_a_block() -> None:
    """A misspelt marker would silently make a fragment runnable (and fail) or hide a block."""
    for page in [*PAGES, AGENT_GUIDE]:
        text = page.read_text(encoding="utf-8")
        markers = list(MARKER.finditer(text))
        for marker in markers:
            assert GIVEN.fullmatch(marker["rest"]), f"{page.name}: bad marker {marker[0]!r}"
            after = text[marker.end() :].lstrip("\n")
            assert FENCE.match(after), f"{page.name}: {marker[0]!r} is not right before a block"
        assert sum(b.given is not None for b in _blocks(page)) == len(markers), page.name


def test_the_agent_guide_is_run_by_the_capture_test() -> None:
    """The one guide this file leaves out is executed block by block elsewhere."""
    assert AGENT_GUIDE.name in AGENT_TEST.read_text(encoding="utf-8")
    assert "test_each_python_block_of_the_guide_runs" in AGENT_TEST.read_text(encoding="utf-8")


def test_readme_has_a_runnable_block_in_each_api_section() -> None:
    """The quickstart, the corpus and the memory sections each show code that runs."""
    readme = ROOT / "README.md"
    lines = readme.read_text(encoding="utf-8").splitlines()
    headings = [n for n, line in enumerate(lines, start=1) if line.startswith("## ")]
    for title in ("## Quickstart", "## The corpus", "## Memory"):
        start = next(n for n in headings if lines[n - 1].startswith(title))
        end = next((n for n in headings if n > start), len(lines))
        section = [b for b in _blocks(readme) if start < b.line < end]
        assert any(b.given is None for b in section), title


@pytest.mark.parametrize("page", _page_params())
def test_the_runnable_blocks_of_each_page_run_in_order(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page's non-fragment blocks, pasted in order into one session, run without error."""
    _run_page(page, tmp_path, monkeypatch)


def test_a_page_leaves_the_environment_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure guide sets ``os.environ["LOOM_MASTER_KEY"]``, as a user's session would.
    Left set, every later test of the worker opened its CLI logs encrypted: a damaged
    database then exited 2 (the key check's usage error) instead of 1, in whichever tests
    pytest-xdist happened to run after this page."""
    before = dict(os.environ)
    _run_page(ROOT / "docs" / "guides" / "erase-a-users-data.md", tmp_path, monkeypatch)
    assert dict(os.environ) == before


def test_a_page_leaves_logging_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tracing guide sets the ``loom`` logger to INFO, as a user's session would. Left
    set, a later test of the worker that captured the DEBUG records of ``loom.memory`` with
    ``caplog.at_level(DEBUG)`` (which sets the root logger's level, not ``loom``'s) got none,
    in whichever tests pytest-xdist happened to run after this page."""
    before = _logging_state()
    _run_page(ROOT / "docs" / "guides" / "trace-executions.md", tmp_path, monkeypatch)
    assert _logging_state() == before


def _logging_state() -> dict[str, object]:
    """The loggers with a level of their own, and the root logger's level and handlers: what
    a page's blocks may set."""
    loggers = logging.Logger.manager.loggerDict.values()
    state: dict[str, object] = {
        lg.name: lg.level for lg in loggers if isinstance(lg, logging.Logger) and lg.level
    }
    root = logging.getLogger()
    state[""] = (root.level, list(root.handlers))
    return state


def _restore_logging(state: dict[str, object]) -> None:
    """Put back what :func:`_logging_state` read: a level set since is cleared."""
    for lg in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(lg, logging.Logger):
            level = state.get(lg.name, logging.NOTSET)
            lg.setLevel(level if isinstance(level, int) else logging.NOTSET)
    level, handlers = cast(tuple[int, list[logging.Handler]], state[""])
    root = logging.getLogger()
    root.setLevel(level)
    root.handlers[:] = handlers


def _run_page(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``page``'s non-fragment blocks in order in one namespace, in ``tmp_path``; the
    process environment and the loggers' levels and root handlers are put back as they were
    whatever the blocks set (monkeypatch undoes only what it set itself, after the test)."""
    runnable = [block for block in _blocks(page) if block.given is None]
    monkeypatch.chdir(tmp_path)  # an empty folder, as a reader's: no runbooks/ of ours
    environment = dict(os.environ)
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    logged = _logging_state()
    with ProviderServer() as provider:
        monkeypatch.setenv("OPENAI_BASE_URL", provider.openai_url)
        try:
            for block in runnable:
                code = compile(block.source, block.where, "exec", dont_inherit=True)
                exec(code, namespace)
        finally:
            if hasattr(namespace.get("loom"), "close"):
                namespace["loom"].close()
            os.environ.clear()
            os.environ.update(environment)
            _restore_logging(logged)


@pytest.mark.parametrize("block", _fragment_params())
def test_each_fragment_uses_only_the_names_it_is_given(block: Block) -> None:
    """A fragment compiles, reads no undeclared name, and its loom imports exist."""
    free = _free_names(block.source)
    assert free <= block.given, f"{block.where}: undeclared {sorted(free - block.given)}"
    for node in ast.walk(ast.parse(block.source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module and module.split(".")[0] not in block.given:
                exec(compile(ast.Module([node], []), block.where, "exec"), {})
