"""Bad input gets a clear, typed error, and nothing is lost or half-written."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_runtime import (
    ConfigurationError,
    ExecutionFinishedError,
    ExecutionNotFoundError,
    FlowAlreadyRegisteredError,
    FlowContext,
    FlowInputError,
    FlowNotFoundError,
    LabelError,
    Labels,
    Loom,
    LoomError,
    NotSerialisableError,
)
from loom_runtime.log import LogSettings


def test_unknown_flow_names_the_registered_ones(loom: Loom) -> None:
    """Running a name nobody registered says which names exist."""
    loom.flow("known")(lambda ctx: None)
    with pytest.raises(FlowNotFoundError, match=r"'nope'.*known"):
        loom.run("nope")
    assert loom.log.position == 0


def test_a_misspelt_flow_name_suggests_the_registered_one(loom: Loom) -> None:
    loom.flow("triage")(lambda ctx: None)
    loom.flow("answer")(lambda ctx: None)
    with pytest.raises(FlowNotFoundError, match=r"'triag'.*did you mean 'triage'\?"):
        loom.run("triag")
    with pytest.raises(FlowNotFoundError) as unlike:
        loom.run("zzz")
    assert "did you mean" not in str(unlike.value)


def test_a_recorded_flow_not_registered_is_named_without_a_guess(db_url: str) -> None:
    """Replaying (resuming, forking) takes the flow's name from the log: "did you mean
    'triage_v2'?" suggested an edit the user cannot make. It says which execution needs it."""
    with Loom(db_url) as recorder:
        recorder.flow("triage")(lambda ctx: ctx.decide("k", lambda: 1))
        run = recorder.run("triage")
    with Loom(db_url) as loom:
        loom.flow("triage_v2")(lambda ctx: None)
        for attempt in (loom.replay, lambda i: loom.fork(i, at=0)):
            with pytest.raises(FlowNotFoundError) as missing:
                attempt(run.execution_id)
            assert "did you mean" not in str(missing.value)
            assert f"execution {run.execution_id} was recorded by the flow 'triage'" in str(
                missing.value
            )


def test_flow_registered_twice_is_refused(loom: Loom) -> None:
    """Flow names key stored executions: a second registration under a taken name fails."""
    loom.flow("f")(lambda ctx: 1)
    with pytest.raises(FlowAlreadyRegisteredError):
        loom.flow("f")(lambda ctx: 2)


@pytest.mark.parametrize("bad_id", [uuid.uuid4(), "not-a-uuid"])
def test_unknown_execution_id(loom: Loom, bad_id: Any) -> None:
    """Replay, resume and lookup of an id not in the log raise ExecutionNotFoundError."""
    for call in (loom.replay, loom.resume, loom.execution):
        with pytest.raises(ExecutionNotFoundError):
            call(bad_id)


def test_unknown_argument_and_wrong_type_are_refused_before_anything_is_written(
    loom: Loom,
) -> None:
    """Input is checked against the signature up front."""

    @loom.flow("f")
    def f(ctx: FlowContext, n: int) -> int:
        return n

    with pytest.raises(FlowInputError, match="takes no argument"):
        loom.run("f", m=1)
    with pytest.raises(FlowInputError, match="Expected `int`"):
        loom.run("f", n="three")
    assert loom.log.position == 0


def test_non_serialisable_input_names_the_field(loom: Loom) -> None:
    """The error names the exact path of the offending value; nothing is appended."""

    @loom.flow("f")
    def f(ctx: FlowContext, payload: Any) -> None:
        return None

    with pytest.raises(NotSerialisableError) as caught:
        loom.run("f", payload={"ok": 1, "items": [1, object()]})
    assert caught.value.path == "input.payload.items[1]"
    assert loom.log.position == 0


def test_non_serialisable_decision_value_fails_the_execution(loom: Loom) -> None:
    """A decision value that cannot be stored is refused, and recorded as the failure."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> None:
        ctx.decide("k", lambda: {"conn": object()})

    with pytest.raises(NotSerialisableError) as caught:
        loom.run("f")
    assert caught.value.path == "decision 'k'.conn"
    assert any("recorded as the failure" in note for note in caught.value.__notes__)


def test_non_serialisable_output_is_refused_and_recorded(loom: Loom) -> None:
    """An output that cannot be stored fails the execution rather than vanishing."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> Any:
        return {1j}

    with pytest.raises(NotSerialisableError, match="output"):
        loom.run("f")


def test_compute_that_raises_is_recorded_and_reraised(loom: Loom) -> None:
    """The caller gets the original error; the log holds the failure; resume refuses it."""

    def compute() -> Any:
        raise KeyError("missing")

    @loom.flow("f")
    def f(ctx: FlowContext) -> Any:
        return ctx.decide("k", compute)

    with pytest.raises(KeyError) as caught:
        loom.run("f")
    execution_id = caught.value.__notes__[-1].rsplit(" ", 1)[-1]
    execution = loom.execution(execution_id)
    assert execution.error == ("builtins:KeyError", "'missing'")
    assert execution.decisions["k"].error_type == "builtins:KeyError"
    with pytest.raises(ExecutionFinishedError):
        loom.resume(execution_id)
    assert loom.replay(execution_id).identical


def test_bad_urls_and_options_are_configuration_errors(tmp_path: Any) -> None:
    """Each refusal says what a good value looks like."""
    with pytest.raises(ConfigurationError, match="sqlite:///"):
        Loom("sqlite://")
    with pytest.raises(ConfigurationError, match="Unsupported database"):
        Loom("mysql://x/y")
    with pytest.raises(ConfigurationError, match="never waits forever"):
        Loom(f"sqlite:///{tmp_path}/x.db", lock_timeout=0)
    with pytest.raises(ConfigurationError, match="persistence"):
        Loom(f"sqlite:///{tmp_path}/x.db", persistence="redis")  # type: ignore[arg-type]


def test_an_empty_url_is_refused_not_read_as_the_default(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--db "$LOOM_DB_URL"`` with the variable unset passes ``""``: it opened ./loom.db,
    so a script read (or wrote) the wrong database without a word (newcomer review). Only
    None, the argument not given, means "LOOM_DB_URL, else ./loom.db"."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="empty"):
        Loom("")
    result = CliRunner().invoke(app, ["run", "f", "--db", ""])
    assert result.exit_code == 2 and "empty" in result.output
    assert not (tmp_path / "loom.db").exists()


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("sqlite://nosuchdir/loom.db", "sqlite:///nosuchdir/loom.db"),
        ("sqlite://../x/loom.db", "sqlite:///../x/loom.db"),
        ("sqlite://loom.db", "sqlite:///loom.db"),
        ("sqlite://me:pw@host:5/loom.db", "sqlite:///host/loom.db"),
    ],
)
def test_a_sqlite_url_with_two_slashes_is_refused_before_any_file_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, meant: str
) -> None:
    """``sqlite://dir/loom.db`` names a *host* ``dir`` and the file ``loom.db``: SQLAlchemy
    refuses it, but the log's own connection opened ``./loom.db``, so a read-only command
    read the wrong log and a write left a stray file before its traceback. Refused first,
    with the URL the user likely meant (three slashes; four before an absolute path)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nosuchdir").mkdir()
    with pytest.raises(ConfigurationError, match="two slashes") as caught, Loom(url) as loom:
        loom.run("never-registered")
    assert meant in str(caught.value)
    assert "pw" not in str(caught.value)
    assert list(tmp_path.iterdir()) == [tmp_path / "nosuchdir"]  # nothing was created


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg"])
def test_every_common_postgresql_url_means_loom_s_driver(scheme: str) -> None:
    """``postgres://`` (the form Heroku, Render and many ``DATABASE_URL`` give) was refused
    as an unsupported database "postgres"; ``postgresql://`` already meant psycopg 3."""
    settings = LogSettings(f"{scheme}://user:secret@db.example/loom")
    assert settings.url.drivername == "postgresql+psycopg"
    assert settings.url.render_as_string(hide_password=False).endswith("@db.example/loom")


def test_flow_with_varargs_is_refused_at_registration(loom: Loom) -> None:
    """Inputs are recorded by name, so *args/**kwargs cannot be."""
    with pytest.raises(ConfigurationError, match=r"\*args"):
        loom.flow("f")(lambda ctx, *args: None)


def test_every_error_is_a_loom_error() -> None:
    """One hierarchy: catching LoomError catches every refusal loom makes on purpose."""
    import loom_runtime.errors as errors

    classes = [
        obj for obj in vars(errors).values() if isinstance(obj, type) and issubclass(obj, Exception)
    ]
    assert len(classes) > 10
    assert all(issubclass(cls, LoomError) for cls in classes)


@pytest.mark.parametrize(
    ("name", "version"),
    [
        (5, None),  # stored as a number: every listing of the log then failed to decode
        ("v", 7),
        ("", None),
        ("pay\u202eetalp", None),  # shown reversed
        ("zero\u200bwidth", None),  # looks like "zerowidth"
        ("line\u2028separator", None),
        ("pay\u2063", None),  # an invisible separator
        ("mongolian\u180evowel", None),
        ("f\nexecution x replayed identically", None),
        ("f\x00", None),
        ("f", "\ud800"),  # a lone surrogate: refused only at the first run before
    ],
)
def test_a_flow_name_or_version_that_is_no_plain_text_is_refused_at_registration(
    loom: Loom, name: Any, version: Any
) -> None:
    """A flow name (or version label) is stored in every execution's start and printed by
    every command: one that is not a string was stored as given and then made every listing
    of the log fail (``LogCorruptError``, "the row may have been edited") while ``loom
    verify`` said ok. A name or label that is no non-empty text without control or invisible
    characters is refused where it is registered, before anything is written."""
    with pytest.raises(ConfigurationError):
        loom.flow(name, version=version)(lambda ctx: 1)
    loom.flow("plain-name", version="v1.2")(lambda ctx: 1)  # the control
    assert loom.run("plain-name").output == 1
    assert [summary.flow for summary in loom.executions()] == ["plain-name"]


@pytest.mark.parametrize(
    "name",
    [
        "پیش‌نویس",  # Persian, with its zero-width non-joiner
        "क्‍ष",  # Devanagari with a zero-width joiner
        "👨‍👩‍👧",  # an emoji family
        "🏴󠁧󠁢󠁥󠁮󠁧󠁿",  # a flag
        "soft­hyphen",
        "billing.refund/v2: a flow",
    ],
)
def test_names_written_with_joiners_and_tags_are_registered(loom: Loom, name: str) -> None:
    """The first form refused every format character, so a Persian name (its zero-width
    non-joiner), an emoji sequence and a soft hyphen were refused, and a log recorded under
    such a name could not be replayed (a regression review). Only controls, line
    separators, bidi controls and invisible spaces are refused."""
    loom.flow(name, version="v1 👩‍💻")(lambda ctx: 1)
    run = loom.run(name)
    assert loom.replay(run.execution_id).identical


def test_a_flow_with_a_positional_only_parameter_is_refused_at_registration(loom: Loom) -> None:
    """Loom calls a flow with its arguments by keyword (its input is recorded by name): a
    positional-only parameter was accepted, and every run then stored a failed execution
    with a bare ``TypeError``."""

    def positional(ctx: FlowContext, a: int, /) -> int:
        return a

    with pytest.raises(ConfigurationError, match="positional-only"):
        loom.flow("p")(positional)


@pytest.mark.parametrize("default", [{"a"}, ["a"], {"a": 1}, bytearray(b"a")])
def test_a_flow_parameter_defaulting_to_a_mutable_collection_is_a_typed_refusal(
    loom: Loom, default: object
) -> None:
    """msgspec, which builds the flow's input type, refuses a non-empty list, dict or set as
    a default: registering such a flow raised its bare ``TypeError``, naming no flow and no
    parameter (an API review). It is a ``ConfigurationError`` naming both, with the fix."""

    def tagged(ctx: FlowContext, tags: object = default) -> int:
        return 1

    with pytest.raises(ConfigurationError, match=r"flow 'tagged'.*parameter 'tags'.*None"):
        loom.flow("tagged")(tagged)

    def empty(ctx: FlowContext, tags: list[str] = []) -> int:  # noqa: B006 (copied: allowed)
        return len(tags)

    loom.flow("empty")(empty)  # the control: an empty one is copied per call, so allowed
    assert loom.run("empty").output == 0


class _Options(msgspec.Struct):
    top_k: int = 5


def test_a_mutable_struct_default_keeps_msgspecs_own_reason(loom: Loom) -> None:
    """msgspec refuses a mutable Struct as a default too, saying to make it ``frozen``: the
    first form of the refusal above blamed a list, dict or set, naming no parameter (a
    regression review). Another refusal keeps msgspec's words, with the flow's name."""

    def ranked(ctx: FlowContext, options: _Options = _Options()) -> int:  # noqa: B008
        return options.top_k

    with pytest.raises(ConfigurationError, match=r"flow 'ranked'.*frozen=True") as refused:
        loom.flow("ranked")(ranked)
    assert "list, dict" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///{tmp}/a\x00b.db",
        "postgresql+psycopg://loom@127.0.0.1:6999/lo\x00om",
        "postgresql+psycopg://loom@127.0.0.1:6999/loom?host=/run/\x00pg",
    ],
    ids=["sqlite-path", "postgresql-database", "postgresql-query"],
)
def test_a_nul_anywhere_in_the_url_is_a_configuration_error(tmp_path: Path, url: str) -> None:
    """A NUL character in the database path reached sqlite3, whose bare ``ValueError``
    ("embedded null byte") named nothing (an API review); in a PostgreSQL URL libpq cut the
    connection string at it and connected to a server the URL does not name (a regression
    review). Refused before any connection, on every backend."""
    with pytest.raises(ConfigurationError, match="NUL"):
        Loom(url.format(tmp=tmp_path)).executions()


def test_a_single_string_for_live_kinds_or_tags_is_refused_not_read_as_its_characters(
    loom: Loom,
) -> None:
    """``replay(id, live="model")`` ran decisions of kind ``"m"`` live and ``"model"`` ones
    recorded (a counterfactual testing the wrong thing, silently); ``executions(tags="prod")``
    found nothing. Both are refused, as ``Labels(tags="prod")`` already was."""
    computed: list[str] = []

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        return ctx.decide("answer", lambda: computed.append("model") or "x", kind="model")

    run = loom.run("f", labels=Labels(tags=("prod",)))
    with pytest.raises(ConfigurationError, match="live"):
        loom.replay(run.execution_id, live="model")  # type: ignore[arg-type]
    with pytest.raises(LabelError):
        loom.executions(tags="prod")  # type: ignore[arg-type]
    assert loom.replay(run.execution_id, live={"model"}).identical  # the controls
    assert computed == ["model", "model"]
    assert [s.execution_id for s in loom.executions(tags=("prod",))] == [run.execution_id]


def test_the_id_of_another_kind_of_stream_is_no_execution_not_a_corrupt_log(loom: Loom) -> None:
    """Given the id of a memory's stream, ``loom.execution`` (and replay, resume, fork,
    export) said the log was edited and to run ``loom verify``, which then said ok: an
    operator could restore a backup of a healthy log. It is no execution: not found."""
    from loom_memory import EventSourcedMemory, MemoryEntry

    memory = EventSourcedMemory(loom)
    memory.append("k", [MemoryEntry(content="a note")])
    [stream] = {record.stream for record in loom.log.notifications()}
    with pytest.raises(ExecutionNotFoundError, match="not an execution"):
        loom.execution(stream)
    with pytest.raises(ExecutionNotFoundError):
        loom.replay(stream)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///file:plain.db",  # the log opened it as a URI, the engine as a path
        "sqlite:///file:mem.db?mode=memory&uri=true",
        "sqlite:///rel.db?mode=ro",  # silently ignored: the log opened and wrote
    ],
)
def test_a_sqlite_url_that_would_split_the_log_from_its_tables_is_refused(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """The log's own connections open a SQLite path as a URI and the SQLAlchemy engine (the
    workers, key and read-model tables) as a file name, so ``file:`` URLs put them in
    different databases (or the engine's in memory), and query parameters were ignored by one
    and not the other. Refused, before any file is made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="sqlite:///"):
        LogSettings(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("nul", ["path", "query"])
def test_a_nul_in_a_memory_stores_own_url_is_a_store_configuration_error(
    tmp_path: Path, nul: str
) -> None:
    """A store opened from its own URL met the NUL as sqlite3's bare ``ValueError`` (a
    regression review); refused as the log's URL is, before any connection."""
    from loom_memory import SqliteMemoryStore, StoreConfigurationError

    url = f"sqlite:///{tmp_path}/m\x00.db" if nul == "path" else f"sqlite:///{tmp_path}/m.db?x=%00"
    with pytest.raises(StoreConfigurationError, match="NUL"):
        SqliteMemoryStore(url)


def test_a_stores_nul_refusal_hides_the_password() -> None:
    """The refusal quoted a PostgreSQL store URL whole, password and all (a regression
    review); it shows it as the log's refusal does, with ``***``."""
    from loom_memory import StoreConfigurationError
    from loom_memory.sql import _create_engine

    with pytest.raises(StoreConfigurationError, match="NUL") as refused:
        _create_engine("postgresql+psycopg://app:s3cr%00et@127.0.0.1:6999/loom")
    assert "s3cr" not in str(refused.value) and "***" in str(refused.value)
