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
is a document. Dangling links (a link loop among them), links to a hidden file or folder
(``notes.md -> .git/config``: hidden entries are skipped, so their links are too), and
anything that is neither a file nor a directory (a FIFO would block the read) are skipped too.

The folder may change while it is synced, and the walk's checks must still hold when a file
is read: each is opened without following a link in any component of its path (the walk
starts at the resolved root and records a link's checked target, so no path it found holds
one) and without blocking, and must still be a regular file of at most ``max_file_bytes``, measured
before a byte is read. A file that vanished or changed into something else in between refuses
the sync (sync again), rather than reading a FIFO for ever or a link to ``/etc`` the walk
never saw.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from importlib.resources.abc import Traversable
from pathlib import Path

import msgspec

from loom_knowledge.domain.types import Doc
from loom_knowledge.errors import InvalidDocumentError, InvalidOptionError

logger = logging.getLogger("loom.knowledge")

SUFFIXES = (".md", ".txt")
"""The file types read as documents; anything else in the directory is ignored."""

MAX_FILE_BYTES = 64 * 1024 * 1024
"""The largest file :func:`scan_docs` reads by default: a document is kept in the log for good,
and a sparse file of any apparent size would otherwise be read whole into memory first."""

_LINE_BREAK = re.compile(r"[\r\n\u2028\u2029\x85]")
"""What ends a file's first line, and so its heading: a carriage return alone (classic Mac
files) and the Unicode line, paragraph and next-line separators too. Split at a line feed
alone, such a file's whole body was its title and its text empty: a document no search could
find."""

_HEADING = re.compile(r"#{1,6}[ \t]+(?P<title>.+)")
"""An ATX heading's opening; its closing `#` run is cut by :func:`_title`, not by the pattern
(a lazy title before an optional `[ \t]+#+` made the engine try every split of a long run of
spaces: quadratic in a line a synced file controls)."""


class DocScan(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`scan_docs` read from a directory, and the links it did not follow."""

    docs: list[Doc]
    skipped: list[str]
    """Relative paths of links not followed: out of the root, to a hidden path, or dangling."""


class _Walk:
    """One walk of a root: the files found, and the links skipped (see the module docstring)."""

    def __init__(self, root: Traversable, *, follow_external_links: bool) -> None:
        self.root = Path(root).resolve() if isinstance(root, Path) else None
        self.follow_external_links = follow_external_links
        self.found: list[tuple[str, Traversable]] = []
        """Each document's id and what to read: the entry, or a link's checked target."""
        self.skipped: list[str] = []
        self.entered: set[Path] = set()

    def walk(self, top: Traversable, top_prefix: str) -> None:
        """Find the files under ``top``: a loop over a stack of folders, not a recursion, so
        a tree of any depth git can hold is walked (the caller sorts what is found)."""
        pending: list[tuple[Traversable, str]] = [(top, top_prefix)]
        while pending:
            directory, prefix = pending.pop()
            try:
                entries = list(directory.iterdir())
            except OSError as exc:
                raise _unexamined(prefix or "./", exc) from exc
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                relative = f"{prefix}{entry.name}"
                try:
                    followed = self._followed(entry, relative)
                    if followed is None:
                        continue
                    # a followed link's checked target: no link on a path found
                    is_dir = entry.is_dir()
                    is_file = not is_dir and entry.is_file()
                except OSError as exc:  # an lstat or stat of the entry's full path
                    raise _unexamined(relative, exc) from exc
                if is_dir:
                    pending.append((followed, f"{relative}/"))
                elif is_file and entry.name.endswith(SUFFIXES):
                    self.found.append((relative, followed))

    def _followed(self, entry: Traversable, relative: str) -> Traversable | None:
        """What to read for ``entry``: itself, or a link's target as checked here; None for a
        link the rules above do not follow (recorded when it matters)."""
        if self.root is None or not isinstance(entry, Path) or not entry.is_symlink():
            return entry
        try:
            target = entry.resolve()
        except RuntimeError:  # a link loop (Python 3.13 returns a path that does not exist)
            self.skipped.append(relative)
            return None
        if not target.exists():
            self.skipped.append(relative)
            return None
        inside = target.is_relative_to(self.root)
        # Below the root, or below where the target leaves the tree it shares with the root
        # (a hidden folder above both, such as ~/.work, is not the target's business).
        below = self.root if inside else Path(os.path.commonpath([self.root, target]))
        if any(part.startswith(".") for part in target.relative_to(below).parts):
            self.skipped.append(relative)
            return None
        if inside:
            return None if target.is_dir() else target
        if not self.follow_external_links:
            self.skipped.append(relative)
            return None
        if target.is_dir():
            if target in self.entered:
                return None  # a link cycle outside the root
            self.entered.add(target)
        return target


def _unexamined(relative: str, exc: OSError) -> InvalidOptionError:
    """The refusal of a walk that could not list or examine ``relative``: a path longer than
    the system allows says so (it would fail the same way every time), anything else is
    taken for the folder changing under the sync."""
    shown = relative if len(relative) <= 160 else f"{relative[:70]}…{relative[-70:]}"
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidOptionError(
            f"the path of {shown!r} in the folder is too long for this system "
            f"({exc.strerror}): a folder is read by path, so shorten its names or nesting"
        )
    return InvalidOptionError(
        f"could not examine {shown!r} in the folder ({exc.strerror}); did it change during "
        "the sync? sync again"
    )


def _to_doc(doc_id: str, raw: str) -> Doc:
    """A document from a file: a leading markdown heading becomes the title, not text.

    Moved rather than copied, so the title is not indexed twice in the first passage.
    """
    content = raw.lstrip()
    line_break = _LINE_BREAK.search(content)
    first = content if line_break is None else content[: line_break.start()]
    heading = _HEADING.fullmatch(first.strip())
    if heading is None:
        return Doc(id=doc_id, text=raw.strip())
    # The rest starts at the line break, which the strip drops: a "\n" file's text is what
    # it always was, so an unchanged file re-synced writes nothing.
    return Doc(id=doc_id, text=content[len(first) :].strip(), title=_title(heading["title"]))


def _title(heading: str) -> str:
    """A heading's text without its closing `#` run, which needs a space or tab before it, so
    `# Using C#` keeps its `#` (``heading`` is stripped: it ends in neither)."""
    unclosed = heading.rstrip("#")
    if unclosed != heading and unclosed.endswith((" ", "\t")):
        return unclosed.rstrip(" \t")
    return heading


def _read(doc_id: str, entry: Traversable, *, max_file_bytes: int) -> bytes:
    """The bytes of ``entry`` if it is still the regular file the walk found (module docstring).

    Opened without following a link and without blocking (``O_NOFOLLOW``, ``O_NONBLOCK``
    where the OS has them), checked on the open descriptor, then read up to the cap.
    """
    if not isinstance(entry, Path):  # a package resource: shipped data, not a synced folder
        return entry.read_bytes()
    try:
        descriptor = _open_link_free(entry)
    except OSError as exc:
        raise InvalidDocumentError(
            doc_id=doc_id,
            field="file",
            reason=f"could not be read ({exc.strerror}); did it change during the sync? sync again",
        ) from exc
    # Checked before the descriptor becomes a file object: fdopen refuses a folder's with an
    # IsADirectoryError of its own, which named no document.
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise InvalidDocumentError(
            doc_id=doc_id,
            field="file",
            reason="is no longer a regular file; did it change during the sync? sync again",
        )
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(max_file_bytes + 1) if status.st_size <= max_file_bytes else b""
    if status.st_size > max_file_bytes or len(data) > max_file_bytes:
        raise InvalidDocumentError(
            doc_id=doc_id,
            field="file",
            reason=f"is over the {max_file_bytes} bytes a sync reads (max_file_bytes, "
            "--max-file-bytes)",
        )
    return data


_NO_LINK = getattr(os, "O_NOFOLLOW", 0)


def _open_link_free(path: Path) -> int:
    """A read descriptor of ``path`` (absolute, and link-free when the walk found it), opened
    one component at a time from ``/``, none of them followed if it is now a link.

    ``O_NOFOLLOW`` alone covers the last component: a directory on the path swapped for a link
    after the walk would carry the read anywhere a same-named file lies. Where the OS has no
    ``dir_fd`` opens (Windows) the path is opened whole, the last component still unfollowed.
    """
    last = os.O_RDONLY | _NO_LINK | getattr(os, "O_NONBLOCK", 0)
    if os.open not in os.supports_dir_fd:
        return os.open(path, last)
    directory = os.open(path.anchor, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in path.parts[1:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NO_LINK, dir_fd=directory)
            os.close(directory)
            directory = inner
        return os.open(path.name, last, dir_fd=directory)
    finally:
        os.close(directory)


def scan_docs(
    directory: str | os.PathLike[str] | Traversable,
    *,
    follow_external_links: bool = False,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> DocScan:
    """Read every ``.md``/``.txt`` file under ``directory`` into a document, sorted by id.

    ``directory`` is a path (``"runbooks"``, a ``Path``) or a package resource
    (``importlib.resources.files(...) / "runbooks"``). Hidden files and directories
    (``.git``) are skipped, and so are links out of the root unless
    ``follow_external_links`` (see the module docstring). A file that is not UTF-8 raises
    :class:`InvalidDocumentError` naming it, instead of ingesting mojibake, and so does a file
    over ``max_file_bytes`` (:data:`MAX_FILE_BYTES`) or one that changed after the walk saw
    it (see the module docstring); a directory that
    does not exist raises :class:`InvalidOptionError` rather than reading as an empty corpus
    (which a sync would take as "delete everything").
    """
    if isinstance(directory, str | os.PathLike):
        directory = Path(directory)
    if not directory.is_dir():
        raise InvalidOptionError(f"no directory of documents at {directory}")
    walk = _Walk(directory, follow_external_links=follow_external_links)
    walk.walk(walk.root or directory, "")  # from the resolved root: no link on any path found
    docs = []
    for doc_id, entry in sorted(walk.found, key=lambda found: found[0]):
        try:
            # utf-8-sig: a byte order mark (Windows editors) is not text, nor a heading's start
            raw = _read(doc_id, entry, max_file_bytes=max_file_bytes).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidDocumentError(doc_id=doc_id, field="text", reason="is not UTF-8") from exc
        docs.append(_to_doc(doc_id, raw))
    return DocScan(docs=docs, skipped=sorted(walk.skipped))


def load_docs(
    directory: str | os.PathLike[str] | Traversable,
    *,
    follow_external_links: bool = False,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> list[Doc]:
    """The documents of :func:`scan_docs`, each link it skipped a warning on the
    ``loom.knowledge`` logger.

    Warned, not just dropped: ``kb.sync(load_docs(folder))`` removes from the corpus a
    document whose file became a link out of the folder (a runbook moved to a shared checkout
    and linked back), which the folder still seems to hold. :func:`scan_docs` lists them.
    """
    scan = scan_docs(
        directory, follow_external_links=follow_external_links, max_file_bytes=max_file_bytes
    )
    for link in scan.skipped:
        logger.warning(
            "skipped link %r: it points %s",
            link,
            skipped_because(
                directory,
                follow_external_links=follow_external_links,
                to_follow="follow_external_links=True",
            ),
        )
    return scan.docs


def skipped_because(directory: object, *, follow_external_links: bool, to_follow: str) -> str:
    """Where a link :func:`scan_docs` skipped may point (its walk does not say which rule
    fired), ending with how to follow links out of ``directory`` (``to_follow``) when
    they were not followed."""
    if follow_external_links:  # only a hidden target or none is left to skip
        return "to a hidden file or folder (never read), or nowhere"
    return (
        f"outside {directory}, to a hidden file or folder, or nowhere "
        f"({to_follow} to read links out of it)"
    )
