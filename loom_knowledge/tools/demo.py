"""``loom demo``: the headline, end to end, on the embedded SQLite default.

1. ingest a small corpus of runbooks (shipped in the package) from a source folder;
2. ask an incident question: retrieve (recorded), ground, ask the offline model (recorded),
   check the citations;
3. revise a runbook and re-sync (the superseded passages stop retrieving);
4. delete the ENTIRE corpus: the source folder and every corpus table;
5. replay the execution in a FRESH process: identical request and citations;
6. rebuild the corpus from the log alone: equal to the original, passage for passage.

``python -m loom_knowledge.tools.demo replay --db URL --scope SCOPE [--mode MODE] ID`` is step
5's fresh process.

``loom demo --mode hybrid`` (or ``vector``) retrieves by BM25 and embeddings fused, with
:class:`~loom_memory.HashingEmbedder`: deterministic, dependency-free, no weights to download,
so the demo runs anywhere. A real model plugs into the same ``embedder=`` seam
(``SentenceTransformersEmbedder``, ``FastEmbedEmbedder``, ``OpenAIEmbedder``). The replay
process is given the embedder's identity only, with a model that refuses to embed: the query's
vector and the passages are recorded, so the replay never needs the model.

The demo never touches a database it did not create. By default it writes a new SQLite file
of its own in a temporary folder (NOT ``./loom.db``, NOT ``LOOM_DB_URL``): a user who followed
the README's corpus example has a ``runbooks`` scope there, and a reconcile of the demo's
runbooks would remove and overwrite their documents. Given ``--db`` explicitly, it writes
only a fresh ``demo-<hex>`` scope and source of its own, and leaves the corpus tables alone
(they hold the database's other scopes): step 4 deletes only the source folder and step 6
is skipped, since a rebuild rebuilds every scope.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, Final
from uuid import uuid4

from loom_knowledge.corpus.corpus_files import load_docs
from loom_knowledge.corpus.knowledge_base import KnowledgeBase, drop_corpus, open_knowledge_base
from loom_knowledge.corpus.retrieval import MODES, Mode
from loom_knowledge.domain.grounding import encode_request
from loom_knowledge.domain.types import Doc, Passage
from loom_knowledge.models.answering import answer_from_corpus
from loom_knowledge.models.model import ExtractiveModel
from loom_memory import Embedder, EmbedderError, HashingEmbedder
from loom_runtime import FlowContext, Loom


def load_runbooks() -> list[Doc]:
    """The incident runbooks shipped in ``loom_knowledge/tools/runbooks`` (the demo corpus)."""
    return load_docs(files("loom_knowledge.tools") / "runbooks")


SCOPE: Final = "runbooks"
FLOW: Final = "incident-answer"
QUESTION: Final = "The database is slow and queries time out: what should I check first?"
REVISED_DOC: Final = "database-slow-queries.md"
REVISION_NOTE: Final = (
    "\n\nUpdate after incident 4711: before anything else, look for sessions that are idle in "
    "transaction and hold locks; they make every other query slow.\n"
)

DEMO_FLOOR: Final = 0.1
"""The hashing embedder's cosine floor: a runbook passage sharing word fragments with the
question scores above it, an unrelated one about zero. A real model needs its own floor."""

Say = Callable[[str], None]


class AbsentModel:
    """An embedder's identity with no model behind it: what the replay process is given.

    ``model`` and ``dimension`` are the real embedder's (they are part of the recorded input
    a replay compares); ``embed`` raises, so a replay that needed the model would fail loudly.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.model = embedder.model
        self.dimension = embedder.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Refuse: this process has no embedding model."""
        raise EmbedderError(
            f"the embedding model {self.model!r} is not available in this process "
            f"(asked to embed {len(texts)} texts)"
        )


def demo_database() -> str:
    """The URL of a new SQLite file in a new temporary folder: the demo's own log.

    Kept after the demo, so its executions can be explored (``loom audit ID --db URL``).
    """
    return f"sqlite:///{Path(tempfile.mkdtemp(prefix='loom-demo-')) / 'loom.db'}"


def demo_scope() -> str:
    """A scope (and source) name no one else uses, for a demo run in someone's database."""
    return f"demo-{uuid4().hex[:12]}"


def open_demo_scope(
    loom: Loom, scope: str, *, mode: Mode = "lexical", embedder: Embedder | None = None
) -> KnowledgeBase:
    """The demo's knowledge base: lexical only, or with ``embedder`` (default: the hashing
    one) and :data:`DEMO_FLOOR` for the vector modes."""
    if mode == "lexical":
        return open_knowledge_base(loom, scope)
    chosen = HashingEmbedder() if embedder is None else embedder
    return open_knowledge_base(loom, scope, embedder=chosen, min_score=DEMO_FLOOR)


def register_incident_flow(
    loom: Loom, *, scope: str = SCOPE, mode: Mode = "lexical", embedder: Embedder | None = None
) -> str:
    """Register the demo's flow on ``loom`` (the live run and the fresh replay share it),
    retrieving in ``mode`` (see :func:`open_demo_scope` for the embedder)."""
    kb = open_demo_scope(loom, scope, mode=mode, embedder=embedder)
    model = ExtractiveModel()

    @loom.flow(FLOW, version="demo-1")
    def incident_answer(ctx: FlowContext, question: str) -> dict[str, Any]:
        grounded = answer_from_corpus(kb, question, decide=ctx.decide, model=model, mode=mode)
        return {
            "answer": grounded.answer.text,
            "cited": list(grounded.answer.cited_doc_ids),
            "ungrounded": list(grounded.citations.ungrounded),
            "request_sha256": hashlib.sha256(encode_request(grounded.request)).hexdigest(),
            "passages": [[p.doc_id, p.index, p.revision] for p in grounded.passages],
        }

    return FLOW


def write_source_folder(folder: Path) -> list[Doc]:
    """Copy the shipped runbooks into ``folder``: the "source of truth" the corpus syncs from."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc in load_runbooks():
        (folder / doc.id).write_text(doc.text, encoding="utf-8")
    return load_docs(folder)


def corpus_state(loom: Loom, *, scope: str = SCOPE) -> tuple[list[Any], list[Passage]]:
    """The manifest and every passage of the demo scope: what "equal corpora" compares."""
    kb = open_knowledge_base(loom, scope)
    return list(kb.list_docs()), kb.passages()


def run_demo(loom: Loom, *, say: Say, owns_database: bool, mode: Mode = "lexical") -> bool:
    """Run the six steps, reporting each; True when replay (and rebuild) matched.

    ``owns_database``: the demo created ``loom``'s database, so it may use the README's scope
    and drop the corpus tables; otherwise it writes only a fresh scope of its own. ``mode``:
    how the flow retrieves (``hybrid`` and ``vector`` with the hashing embedder).
    """
    scope = SCOPE if owns_database else demo_scope()
    source = "runbook-repo" if owns_database else scope
    scratch = Path(tempfile.mkdtemp(prefix="loom-demo-"))  # the source of truth, deleted in 4
    try:
        same, rebuilt = _steps(
            loom,
            say=say,
            owns_database=owns_database,
            scope=scope,
            source=source,
            scratch=scratch,
            mode=mode,
        )
    finally:  # deleted at step 4 on success; a failure before it must not leave it behind
        shutil.rmtree(scratch, ignore_errors=True)
    return same and rebuilt


def _steps(
    loom: Loom,
    *,
    say: Say,
    owns_database: bool,
    scope: str,
    source: str,
    scratch: Path,
    mode: Mode,
) -> tuple[bool, bool]:
    """:func:`run_demo`'s six steps in ``scratch``: whether the replay was identical, and
    the rebuild equal (True when skipped)."""
    folder = scratch / "runbooks"
    register_incident_flow(loom, scope=scope, mode=mode)
    kb = open_knowledge_base(loom, scope)
    url = loom.log.settings.url.render_as_string(hide_password=True)
    say(
        f"0. a new log of its own: {url} (explore it with --db; ./loom.db is not touched)"
        if owns_database
        else f"0. in {url}, only in a new scope of its own: {scope}"
    )

    docs = write_source_folder(folder)
    result = kb.sync(docs, source=source)
    say(
        f"1. synced {len(docs)} runbooks from {folder}: "
        f"{len(result.written)} written, {len(result.unchanged)} unchanged"
    )

    run = loom.run(FLOW, question=QUESTION)
    recorded = loom.execution(run.execution_id)
    request = json.loads(bytes(recorded.decisions["model"].input or b"null"))
    retrieval = (
        "BM25" if kb.embedder is None else f"{mode} retrieval, {kb.embedder.model} embeddings"
    )
    say(f"2. asked: {QUESTION!r} ({retrieval}; execution {run.execution_id})")
    for message in request["messages"]:
        label = message["provenance"] and "knowledge:{scope}:{doc_id}".format(
            **message["provenance"]
        )
        first_line = message["content"].splitlines()[0][:90]
        say(f"   {message['role']:>6} {label or '':<40} {first_line}")
    say(f"   answer: {run.output['answer']}")
    say(f"   cited {run.output['cited']}, ungrounded {run.output['ungrounded'] or 'none'}")

    revised = folder / REVISED_DOC
    revised.write_text(revised.read_text(encoding="utf-8") + REVISION_NOTE, encoding="utf-8")
    result = kb.sync(load_docs(folder), source=source)
    say(
        f"3. revised {REVISED_DOC}: written {list(result.written)}, "
        f"{len(result.unchanged)} unchanged; now revision "
        f"{next(r.revision for r in kb.list_docs() if r.id == REVISED_DOC)}"
    )
    before = corpus_state(loom, scope=scope)

    shutil.rmtree(scratch)
    if owns_database:
        drop_corpus(loom)
        say("4. deleted the corpus: the source folder and every corpus table")
    else:
        say(
            "4. deleted the source folder; the corpus tables also hold this database's other "
            "scopes, so they stay (the replay reads none of them)"
        )

    replayed = replay_in_fresh_process(
        loom.log.settings.url.render_as_string(False), run.execution_id, scope=scope, mode=mode
    )
    same = replayed["identical"] and replayed["output"] == run.output
    say(
        f"5. replayed in a fresh process with no corpus"
        f"{'' if mode == 'lexical' else ' and no embedding model'}: "
        f"{'IDENTICAL' if same else 'DIVERGED'} (request sha256 "
        f"{replayed['output'] and replayed['output']['request_sha256'][:16]}..., "
        f"citations {replayed['output'] and replayed['output']['cited']})"
    )
    for divergence in replayed["divergences"]:
        say(f"   {divergence}")

    rebuilt = True
    if owns_database:
        after = corpus_state(loom, scope=scope)
        rebuilt = after == before
        say(
            f"6. rebuilt the corpus from the log: {len(after[0])} documents, {len(after[1])} "
            f"passages, {'EQUAL' if rebuilt else 'DIFFERENT'} to the original passage for passage"
        )
    else:
        say(
            "6. rebuild skipped: it would rebuild every scope of this database (run loom demo "
            "without --db to see the corpus rebuilt from the log alone)"
        )
    # Never a password on screen: a URL that has one is named by a placeholder.
    db = "URL" if loom.log.settings.url.password else shlex.quote(url)
    _say_next(say, db, run.execution_id, scope=scope, mode=mode)
    return bool(same), rebuilt


def _say_next(say: Say, db: str, execution_id: object, *, scope: str, mode: Mode) -> None:
    """The commands that explore the execution afterwards (``db``: the ``--db`` argument
    as printed). ``loom replay ID`` cannot: the flow is the demo's own, registered with its
    scope and mode, and has no ``--flows`` target, so the replay goes through the demo's
    replay entry, as step 5 did."""
    say("next:")
    say(f"   what the agent knew: loom audit {execution_id} --db {db}")
    say(
        f"   replay it again: {shlex.quote(sys.executable)} -m loom_knowledge.tools.demo "
        f"replay --db {db} --scope {shlex.quote(scope)} --mode {mode} {execution_id}"
    )


def replay_in_fresh_process(
    db_url: str, execution_id: object, *, scope: str = SCOPE, mode: Mode = "lexical"
) -> dict[str, Any]:
    """Replay ``execution_id`` in a new interpreter; returns its JSON report."""
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "loom_knowledge.tools.demo",
            "replay",
            "--db",
            db_url,
            "--scope",
            scope,
            "--mode",
            mode,
            str(execution_id),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"the replay process failed:\n{completed.stderr}")
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def _replay_main(argv: list[str]) -> int:
    """Entry of the fresh replay process: register the flow, replay, print a JSON report.

    In a vector mode the flow is given the hashing embedder's identity with no model behind
    it (:class:`AbsentModel`): what the replay needs is in the log.
    """
    parser = argparse.ArgumentParser(prog="python -m loom_knowledge.tools.demo")
    parser.add_argument("command", choices=["replay"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--scope", required=True)
    parser.add_argument("--mode", choices=MODES, default="lexical")
    parser.add_argument("execution_id")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stopped:  # argparse exits on bad arguments: report, do not exit
        return int(stopped.code or 0)
    with Loom(args.db) as loom:
        absent = AbsentModel(HashingEmbedder())
        register_incident_flow(loom, scope=args.scope, mode=args.mode, embedder=absent)
        result = loom.replay(args.execution_id)
    print(
        json.dumps(
            {
                "identical": result.identical,
                "output": result.output,
                "divergences": [f"{type(d).__name__}: {d}" for d in result.divergences],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(_replay_main(sys.argv[1:]))
