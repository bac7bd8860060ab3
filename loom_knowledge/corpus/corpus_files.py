"""Documents from a directory of text files.

A directory is the simplest source a corpus is synced from (a docs folder, a wiki export), so
the mapping is fixed and predictable: one file, one document; the id is the file's path
relative to the root with ``/`` separators, so it is the same on every OS and stable across
runs, which a reconcile depends on (a changed id is a removal plus a creation).

Links do not carry the corpus out of the folder: a symbolic link (to a file or a directory)
whose target lies outside the root is NOT followed unless ``follow_external_links=True``,
and is reported in :attr:`DocScan.skipped` instead. The log is append-only, so a link to
``/etc`` in a docs folder would otherwise put ``/etc/passwd`` in it for good. A directory
link inside the root is not followed either (its target is read under its own path: ids stay
unique and deterministic, and a link to an ancestor cannot loop); a file link inside the root
is a document. Dangling links and anything that is neither a file nor a directory (a FIFO
would block the read) are skipped too.
"""

from __future__ import annotations

import os
import re
from importlib.resources.abc import Traversable
from pathlib import Path

import msgspec

from loom_knowledge.domain.types import Doc
from loom_knowledge.errors import InvalidDocumentError, InvalidOptionError

SUFFIXES = (".md", ".txt")
"""The file types read as documents; anything else in the directory is ignored."""

_HEADING = re.compile(r"#{1,6}[ \t]+(?P<title>.+?)(?:[ \t]+#+)?[ \t]*")
"""An ATX heading; a closing `#` run needs a space before it, so `# Using C#` keeps its `#`."""


class DocScan(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`scan_docs` read from a directory, and the links it did not follow."""

    docs: list[Doc]
    skipped: list[str]
    """Relative paths of links not followed: out of the root, or dangling."""


class _Walk:
    """One walk of a root: the files found, and the links skipped (see the module docstring)."""

    def __init__(self, root: Traversable, *, follow_external_links: bool) -> None:
        self.root = Path(root).resolve() if isinstance(root, Path) else None
        self.follow_external_links = follow_external_links
        self.found: list[tuple[str, Traversable]] = []
        self.skipped: list[str] = []
        self.entered: set[Path] = set()

    def walk(self, directory: Traversable, prefix: str) -> None:
        for entry in directory.iterdir():
            if entry.name.startswith("."):
                continue
            relative = f"{prefix}{entry.name}"
            if not self._followed(entry, relative):
                continue
            if entry.is_dir():
                self.walk(entry, f"{relative}/")
            elif entry.is_file() and entry.name.endswith(SUFFIXES):
                self.found.append((relative, entry))

    def _followed(self, entry: Traversable, relative: str) -> bool:
        """False for a link the rules above do not follow (recorded when it matters)."""
        if self.root is None or not isinstance(entry, Path) or not entry.is_symlink():
            return True
        target = entry.resolve()
        if not target.exists():
            self.skipped.append(relative)
            return False
        if target.is_relative_to(self.root):
            return not target.is_dir()
        if not self.follow_external_links:
            self.skipped.append(relative)
            return False
        if target.is_dir():
            if target in self.entered:
                return False  # a link cycle outside the root
            self.entered.add(target)
        return True


def _to_doc(doc_id: str, raw: str) -> Doc:
    """A document from a file: a leading markdown heading becomes the title, not text.

    Moved rather than copied, so the title is not indexed twice in the first passage.
    """
    first, _, rest = raw.lstrip().partition("\n")
    heading = _HEADING.fullmatch(first.strip())
    if heading is None:
        return Doc(id=doc_id, text=raw.strip())
    return Doc(id=doc_id, text=rest.strip(), title=heading["title"])


def scan_docs(
    directory: str | os.PathLike[str] | Traversable, *, follow_external_links: bool = False
) -> DocScan:
    """Read every ``.md``/``.txt`` file under ``directory`` into a document, sorted by id.

    ``directory`` is a path (``"runbooks"``, a ``Path``) or a package resource
    (``importlib.resources.files(...) / "runbooks"``). Hidden files and directories
    (``.git``) are skipped, and so are links out of the root unless
    ``follow_external_links`` (see the module docstring). A file that is not UTF-8 raises
    :class:`InvalidDocumentError` naming it, instead of ingesting mojibake; a directory that
    does not exist raises :class:`InvalidOptionError` rather than reading as an empty corpus
    (which a sync would take as "delete everything").
    """
    if isinstance(directory, str | os.PathLike):
        directory = Path(directory)
    if not directory.is_dir():
        raise InvalidOptionError(f"no directory of documents at {directory}")
    walk = _Walk(directory, follow_external_links=follow_external_links)
    walk.walk(directory, "")
    docs = []
    for doc_id, entry in sorted(walk.found, key=lambda found: found[0]):
        try:
            raw = entry.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidDocumentError(doc_id=doc_id, field="text", reason="is not UTF-8") from exc
        docs.append(_to_doc(doc_id, raw))
    return DocScan(docs=docs, skipped=sorted(walk.skipped))


def load_docs(
    directory: str | os.PathLike[str] | Traversable, *, follow_external_links: bool = False
) -> list[Doc]:
    """The documents of :func:`scan_docs` (links out of the root are not followed)."""
    return scan_docs(directory, follow_external_links=follow_external_links).docs
