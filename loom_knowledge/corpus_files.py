"""Documents from a directory of text files, and the runbooks ``loom demo`` ships with.

A directory is the simplest source a corpus is synced from (a docs folder, a wiki export), so
the mapping is fixed and predictable: one file, one document; the id is the file's path
relative to the root with ``/`` separators, so it is the same on every OS and stable across
runs, which a reconcile depends on (a changed id is a removal plus a creation).
"""

from __future__ import annotations

import re
from importlib.resources import files
from importlib.resources.abc import Traversable

from loom_knowledge.errors import InvalidDocumentError
from loom_knowledge.types import Doc

SUFFIXES = (".md", ".txt")
"""The file types read as documents; anything else in the directory is ignored."""

_HEADING = re.compile(r"#{1,6}[ \t]+(?P<title>.+?)(?:[ \t]+#+)?[ \t]*")
"""An ATX heading; a closing `#` run needs a space before it, so `# Using C#` keeps its `#`."""


def _walk(directory: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    """Every readable file under ``directory`` with its relative id, skipping hidden entries."""
    found: list[tuple[str, Traversable]] = []
    for entry in directory.iterdir():
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            found.extend(_walk(entry, f"{prefix}{entry.name}/"))
        elif entry.name.endswith(SUFFIXES):
            found.append((f"{prefix}{entry.name}", entry))
    return found


def _to_doc(doc_id: str, raw: str) -> Doc:
    """A document from a file: a leading markdown heading becomes the title, not text.

    Moved rather than copied, so the title is not indexed twice in the first passage.
    """
    first, _, rest = raw.lstrip().partition("\n")
    heading = _HEADING.fullmatch(first.strip())
    if heading is None:
        return Doc(id=doc_id, text=raw.strip())
    return Doc(id=doc_id, text=rest.strip(), title=heading["title"])


def load_docs(directory: Traversable) -> list[Doc]:
    """Read every ``.md``/``.txt`` file under ``directory`` into a document, sorted by id.

    Hidden files and directories (``.git``) are skipped. A file that is not UTF-8 raises
    :class:`InvalidDocumentError` naming it, instead of ingesting mojibake.
    """
    docs = []
    for doc_id, entry in sorted(_walk(directory, ""), key=lambda found: found[0]):
        try:
            raw = entry.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidDocumentError(doc_id=doc_id, field="text", reason="is not UTF-8") from exc
        docs.append(_to_doc(doc_id, raw))
    return docs


def load_runbooks() -> list[Doc]:
    """The incident runbooks shipped in ``loom_knowledge/runbooks`` (the demo corpus)."""
    return load_docs(files("loom_knowledge") / "runbooks")
