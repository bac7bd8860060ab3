"""Sync a generated corpus in a fresh process, optionally SIGKILLing itself part-way.

Run by file path (the test tree has no packages) from ``test_knowledge_crash.py``::

    python sync_worker.py DB_URL CORPUS [--kill-in POINT:N]

``DB_URL`` is a SQLite or a PostgreSQL URL (the test runs on both backends).

``CORPUS`` is ``v1`` (40 documents of three passages each) or ``v2`` (v1 with eight documents
shortened to one passage, one retitled, six dropped and five added). ``--kill-in`` makes the
N-th call of POINT kill the process with SIGKILL, where POINT is:

* ``chunk``: the chunker, while the sync is still deciding (nothing appended yet);
* ``append_batch`` / ``remove``: the verb of the passage store class the corpus uses on
  DB_URL's backend, while the projection applies the sync's already-appended events inside
  its transaction (a page writes its held passages and ends with one ``append_batch`` at its
  end, and before it ends a revision of a document it wrote earlier).

Prints one JSON line: the sync's result and how many events it appended.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import msgspec
from sqlalchemy.engine import make_url

from loom_knowledge import Chunker, Doc, open_knowledge_base, pack_paragraphs
from loom_memory import PostgresMemoryStore, SqliteMemoryStore
from loom_runtime import Loom

SCOPE = "runbooks"
SOURCE = "wiki"


def _paragraph(doc: int, para: int) -> str:
    """~700 characters, so the default 1000-character packer keeps each paragraph apart."""
    return " ".join(f"rb{doc} step{para} word{w}" for w in range(40))


def _v1() -> list[Doc]:
    return [
        Doc(
            id=f"rb-{n:02}",
            title=f"Runbook {n}",
            text="\n\n".join(_paragraph(n, p) for p in range(3)),
            meta={"team": f"team{n % 4}"},
        )
        for n in range(40)
    ]


def _v2() -> list[Doc]:
    docs: list[Doc] = []
    for doc in _v1():
        n = int(doc.id.removeprefix("rb-"))
        if n < 8:
            docs.append(msgspec.structs.replace(doc, text=f"rb{n} shortened to one passage"))
        elif n == 8:
            docs.append(msgspec.structs.replace(doc, title="Runbook 8, retitled"))
        elif n < 15:
            continue  # dropped upstream: 6 of 40, well inside the mass-delete guard
        else:
            docs.append(doc)
    docs += [Doc(id=f"rb-{n:02}", text=_paragraph(n, 0)) for n in range(40, 45)]
    return docs


CORPORA: dict[str, Callable[[], list[Doc]]] = {"v1": _v1, "v2": _v2}


def _killing(original: Callable[..., Any], at: int) -> Callable[..., Any]:
    """``original``, except that its ``at``-th call SIGKILLs this process first."""
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db_url")
    parser.add_argument("corpus", choices=sorted(CORPORA))
    parser.add_argument("--kill-in", default=None, help="POINT:N, e.g. append_batch:3")
    args = parser.parse_args()

    chunker: Chunker = pack_paragraphs()
    if args.kill_in is not None:
        point, at = args.kill_in.split(":")
        if point == "chunk":
            chunker = _killing(chunker, int(at))
        else:
            postgres = make_url(args.db_url).get_backend_name() == "postgresql"
            store = PostgresMemoryStore if postgres else SqliteMemoryStore
            setattr(store, point, _killing(getattr(store, point), int(at)))

    with Loom(args.db_url) as loom:
        kb = open_knowledge_base(loom, SCOPE, chunker=chunker)
        before = loom.log.position
        result = kb.sync(CORPORA[args.corpus](), source=SOURCE)
        appended = loom.log.position - before
    sys.stdout.write(
        msgspec.json.encode({"result": msgspec.to_builtins(result), "appended": appended}).decode()
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
