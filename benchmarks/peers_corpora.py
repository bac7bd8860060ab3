"""The versioned corpora and judgments the peer sections share, and one keyword store for peers.

Pages are read whole from the shared corpora (``LOOM_BENCH_CORPORA`` overrides the directory);
every system is given the same passages, cut by loom's default chunker
(``pack_paragraphs(max_chars=1000)``), so chunking costs and ranks nothing differently.

:class:`KeywordTable` is the "equivalent keyword store" under the ingestion peers: a SQLite
file with an FTS5 table (``unicode61``, the same for every arm), every call
its own transaction, bm25 over OR-ed quoted terms. LangChain's ``index()`` and LlamaIndex's
``IngestionPipeline`` each write to one through a thin adapter, so what differs between the
arms is their reconcile logic and bookkeeping, not the index or an embedding model.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

from benchmarks.harness import InstrumentError
from loom_knowledge import Doc, pack_paragraphs, to_passages

DEFAULT_DIRECTORY = Path("/work/shared/data/corpora")
INDEX_PAGE = "bookindex.html"
"""The back-of-book index: the source of the judgments, so never part of a retrieval run."""

_TERM = re.compile(r"[^\W_]+")


def directory() -> Path:
    """Where the corpora are; a missing file is an instrument error, not a skipped section."""
    return Path(os.environ.get("LOOM_BENCH_CORPORA") or DEFAULT_DIRECTORY)


def _open(name: str) -> Iterable[dict[str, object]]:
    path = directory() / name
    if not path.exists():
        raise InstrumentError(f"{path} not found: set LOOM_BENCH_CORPORA to the corpora directory")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@cache
def docs(version: str) -> tuple[Doc, ...]:
    """Every page of ``version`` (e.g. ``pg15.18``) as a loom Doc: stable id, title, text."""
    return tuple(
        Doc(id=str(page["id"]), text=str(page["text"]), title=str(page.get("title") or ""))
        for page in _open(f"{version}.jsonl.gz")
    )


@cache
def qrels(name: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """Judgments ``name`` (e.g. ``qrels-pg17-index``) as (query, relevant page ids)."""
    return tuple(
        (str(row["query"]), frozenset(str(page) for page in _list(row["relevant"])))
        for row in _open(f"{name}.jsonl.gz")
    )


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise InstrumentError(f"a judgment's relevant pages are not a list: {value!r}")
    return value


def passages(doc: Doc) -> list[str]:
    """The passage texts loom stores for ``doc``: the same cut for every system."""
    return [passage.text for passage in to_passages(doc, revision=1, chunker=pack_paragraphs())]


def terms(text: str) -> list[str]:
    """Lower-case word terms, as ``unicode61`` would cut them."""
    return _TERM.findall(text.lower())


def match_expression(query: str) -> str:
    """An FTS5 MATCH of the query's terms, OR-ed and quoted (no operator reaches FTS5)."""
    return " OR ".join(f'"{term}"' for term in dict.fromkeys(terms(query)))


class KeywordTable:
    """Passages in an FTS5 table of a SQLite file; each write call is one transaction."""

    def __init__(self, path: Path) -> None:
        self.connection = sqlite3.connect(path, check_same_thread=False)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.executescript(
            "CREATE TABLE IF NOT EXISTS passages (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, "
            "source TEXT, text TEXT);"
            "CREATE INDEX IF NOT EXISTS passages_source ON passages(source);"
            "CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(text, "
            "content='passages', content_rowid='seq', tokenize='unicode61 remove_diacritics 0');"
        )
        self.rows_written = 0

    def add(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Insert or replace (id, source, text) rows and their index entries."""
        with self.connection:
            self._delete(self.connection, [row[0] for row in rows])
            for passage_id, source, text in rows:
                cursor = self.connection.execute(
                    "INSERT INTO passages (id, source, text) VALUES (?, ?, ?)",
                    (passage_id, source, text),
                )
                self.connection.execute(
                    "INSERT INTO passages_fts (rowid, text) VALUES (?, ?)", (cursor.lastrowid, text)
                )
        self.rows_written += len(rows)

    def delete(self, ids: Sequence[str]) -> None:
        """Remove rows by passage id."""
        with self.connection:
            self.rows_written += self._delete(self.connection, ids)

    def delete_source(self, source: str) -> None:
        """Remove every row of one source document."""
        ids = [
            row[0]
            for row in self.connection.execute(
                "SELECT id FROM passages WHERE source = ?", (source,)
            )
        ]
        self.delete(ids)

    @staticmethod
    def _delete(connection: sqlite3.Connection, ids: Sequence[str]) -> int:
        removed = 0
        for passage_id in ids:
            row = connection.execute(
                "SELECT seq, text FROM passages WHERE id = ?", (passage_id,)
            ).fetchone()
            if row is None:
                continue
            connection.execute(
                "INSERT INTO passages_fts (passages_fts, rowid, text) VALUES ('delete', ?, ?)", row
            )
            connection.execute("DELETE FROM passages WHERE seq = ?", (row[0],))
            removed += 1
        return removed

    def search(self, query: str, limit: int) -> list[tuple[str, str]]:
        """(source, text) of the best ``limit`` passages by bm25."""
        expression = match_expression(query)
        if not expression:
            return []
        return list(
            self.connection.execute(
                "SELECT p.source, p.text FROM passages_fts JOIN passages p ON p.seq = "
                "passages_fts.rowid WHERE passages_fts MATCH ? ORDER BY bm25(passages_fts) "
                "LIMIT ?",
                (expression, limit),
            )
        )

    def sources(self) -> set[str]:
        """The source documents that have at least one passage."""
        return {row[0] for row in self.connection.execute("SELECT DISTINCT source FROM passages")}

    def close(self) -> None:
        self.connection.close()
