"""A sealed execution's decision keys are sealed too (ADR 0049, amended 2026-12-04 "names").

A key is where a name ends up: ``ctx.decide(f"lookup {email}", ...)``, and every recorded HTTP
call's key holds its URL path (``http:GET api.example.com/users/alice@example.com``), which
the user of an API does not choose. Keys were stored in clear, so an erased execution left
them in the log. Now a sealed execution stores each key AES-SIV sealed under a key derived
from its data key: deterministic, so the events still name the same decision by the same
stored text before anything is opened, and gone with the data key.
"""

from __future__ import annotations

import binascii
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import (
    ErasedError,
    FlowContext,
    Loom,
    MasterKey,
    Redactor,
    SecretIdentifierError,
    SecretPattern,
    sealing,
)
from loom_runtime import bundle as bundle_module
from loom_runtime import loom as loom_module
from loom_runtime.backoff import Backoff
from loom_runtime.errors import LogCorruptError
from loom_runtime.sealing import ExecutionSealer
from replay_tests.runtime.test_transport import Unreachable

KEY = MasterKey(b"k" * 32)
PLANTED = "alice.7c1e@example.com"
NO_PAUSE = Backoff(attempts=2, first_pause=0.0, max_pause=0.0)


def _register(loom: Loom, *, broken: list[bool]) -> None:
    @loom.flow("lookup")
    def lookup(ctx: FlowContext, email: str) -> dict[str, Any]:
        calls: list[int] = []

        def profile() -> str:
            calls.append(1)
            if len(calls) == 1:
                raise TimeoutError("slow")  # a retried attempt: a DecisionFailed-free retry
            return "gold"

        def orders() -> int:
            if broken[0]:
                raise ConnectionError("down")  # a DecisionFailed under the planted key
            return 3

        tier = ctx.decide(f"http:GET api.example.com/users/{email}", profile, retry=NO_PAUSE)
        count = ctx.decide(f"orders of {email}", orders)
        return {"tier": tier, "orders": count}


def _failed_run(loom: Loom, broken: list[bool]) -> Any:
    """The flow registered and run with its orders call failing: the failed execution's id
    (a DecisionFailed under a planted key, for a reopening to drop)."""
    _register(loom, broken=broken)
    with pytest.raises(ConnectionError):
        loom.run("lookup", email=PLANTED)
    [failed] = loom.executions()
    return failed.execution_id


def _raw_bytes(path: Path) -> bytes:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("VACUUM")
    return b"".join(
        candidate.read_bytes()
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )


def _stored_text(loom: Loom, execution_id: Any) -> bytes:
    return b"".join(row.state for row in loom.log.rows(execution_id))


def test_a_key_naming_a_person_is_sealed_opened_for_the_key_and_gone_after_erasure(
    db_url: str,
) -> None:
    broken = [True]
    with Loom(db_url, encryption=KEY) as loom:
        failed = _failed_run(loom, broken)
        broken[0] = False
        # Reopened: its event names the dropped failed decision by its key.
        run = loom.resume(failed, retry_failed=True)
        assert run.output == {"tier": "gold", "orders": 3}
        stored = _stored_text(loom, run.execution_id)
        assert PLANTED.encode() not in stored
        assert b'"dropped":["sealed:' in stored
        execution = loom.execution(run.execution_id)
        assert list(execution.decisions) == [
            f"http:GET api.example.com/users/{PLANTED}",
            f"orders of {PLANTED}",
        ]
        assert all(d.key == k for k, d in execution.decisions.items())
        assert loom.replay(run.execution_id).identical
        loom.erase(execution=run.execution_id, reason="request", by="dpo")
        with pytest.raises(ErasedError):
            loom.execution(run.execution_id)
        assert loom.log.verify().problem is None
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        assert PLANTED.encode() not in _raw_bytes(path)


def test_a_sealed_key_is_deterministic_per_execution_and_differs_between_executions(
    tmp_path: Path,
) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY) as loom:
        _register(loom, broken=[False])
        first = loom.run("lookup", email=PLANTED)
        second = loom.run("lookup", email=PLANTED)
        keys = [
            [
                msgspec.json.decode(row.state)["key"]
                for row in loom.log.rows(run.execution_id)
                if row.topic == "loom.execution.DecisionRecorded"
            ]
            for run in (first, second)
        ]
    assert all(key.startswith("sealed:") for key in keys[0] + keys[1])
    assert not set(keys[0]) & set(keys[1])  # another execution's key: another text


def test_fork_override_export_and_import_see_the_keys_in_clear(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        _register(loom, broken=[False])
        run = loom.run("lookup", email=PLANTED)
        fork = loom.fork(run.execution_id, at=1, override={f"orders of {PLANTED}": 9})
        assert fork.output == {"tier": "gold", "orders": 9}
        assert PLANTED.encode() not in _stored_text(loom, fork.execution_id)
        bundle = tmp_path / "run.json"
        loom.export(run.execution_id, bundle)
    assert f"orders of {PLANTED}" in bundle.read_text()  # a bundle is a copy in clear
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", encryption=KEY) as other:
        _register(other, broken=[False])
        imported = other.import_bundle(bundle)
        assert PLANTED.encode() not in _stored_text(other, imported)
        assert other.import_bundle(bundle) == imported  # the same events: nothing written
        assert other.replay(imported).identical
        assert f"orders of {PLANTED}" in other.execution(imported).decisions


def test_an_execution_sealed_before_keys_were_keeps_its_keys_in_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An execution sealed by an earlier loom stored its keys in clear: it still opens,
    replays and resumes, and what it appends keeps them in clear (never both in one)."""

    class Earlier(ExecutionSealer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "names": False})

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    broken = [True]
    with monkeypatch.context() as patch, Loom(url, encryption=KEY) as loom:
        patch.setattr(loom_module, "ExecutionSealer", Earlier)
        failed = _failed_run(loom, broken)
    with Loom(url, encryption=KEY) as loom:
        _register(loom, broken=broken)
        broken[0] = False
        run = loom.resume(failed, retry_failed=True)
        assert run.output == {"tier": "gold", "orders": 3}
        assert f"orders of {PLANTED}".encode() in _stored_text(loom, run.execution_id)
        assert b'"key":"sealed:' not in _stored_text(loom, run.execution_id)
        assert loom.replay(run.execution_id).identical


def test_a_sealed_key_altered_in_the_log_is_refused_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    url = f"sqlite:///{path}"
    with Loom(url, encryption=KEY) as loom:
        _register(loom, broken=[False])
        run = loom.run("lookup", email=PLANTED)
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT rowid, state FROM stored_events WHERE topic = ?",
            ("loom.execution.DecisionRecorded",),
        ).fetchall()
        rowid, state = rows[-1]
        fields = msgspec.json.decode(state)
        assert fields["key"].startswith("sealed:")
        fields["key"] = "orders of somebody"  # a clear key where a sealed one belongs
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?",
            (msgspec.json.encode(fields), rowid),
        )
    with Loom(url, encryption=KEY) as loom, pytest.raises(LogCorruptError):
        loom.execution(run.execution_id)


def test_a_recorded_http_calls_url_path_is_sealed_replays_offline_and_is_erased(
    tmp_path: Path,
) -> None:
    """The key loom builds for a recorded HTTP call holds the URL path, chosen by the API."""
    path = tmp_path / "loom.db"
    url = f"sqlite:///{path}"

    def build(inner: httpx.BaseTransport) -> Loom:
        loom = Loom(url, encryption=KEY)

        @loom.flow("orders")
        def orders(ctx: FlowContext, email: str) -> Any:
            with httpx.Client(transport=loom_runtime.transport(inner)) as client:
                return client.get(f"https://api.example/users/{email}/orders").json()

        return loom

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"orders": 3})

    with build(httpx.MockTransport(answer)) as loom:
        run = loom.run("orders", email=PLANTED)
        [key] = loom.execution(run.execution_id).decisions
        assert key == f"http:GET api.example/users/{PLANTED}/orders"
        assert PLANTED.encode() not in _stored_text(loom, run.execution_id)
    with build(Unreachable()) as fresh:
        assert fresh.replay(run.execution_id).identical
        fresh.erase(execution=run.execution_id, reason="request", by="dpo")
    assert PLANTED.encode() not in _raw_bytes(path)


def test_a_keys_secret_check_reads_it_in_clear_never_its_sealed_text(tmp_path: Path) -> None:
    """The log refuses a secret in a key (ADR 0012) by reading the key, not its ciphertext:
    a pattern matching every sealed text fires on none (a match in ciphertext, found by
    chance, would refuse a valid key on every attempt: the sealing is deterministic), and a
    secret in a fork's override key, which no decide checked, is refused before it is sealed."""
    matches_sealed_text = SecretPattern.compile("sealed-text", r"sealed:[A-Za-z0-9+/]{8}")
    redactor = Redactor(extra=[matches_sealed_text])
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY, redactor=redactor) as loom:

        @loom.flow("token")
        def token(ctx: FlowContext) -> int:
            return ctx.decide("token AKIAIOSFODNN7EXAMPLE", lambda: 1) + ctx.decide("x", lambda: 1)

        _register(loom, broken=[False])
        run = loom.run("lookup", email=PLANTED)  # stored: the pattern never saw a sealed text
        assert loom.replay(run.execution_id).identical
        with pytest.raises(SecretIdentifierError):
            loom.run("token")  # refused at the decide, as in clear
        [failed] = [s for s in loom.executions() if s.flow == "token"]
        with pytest.raises(SecretIdentifierError):  # an override answers with no decide check
            loom.fork(failed.execution_id, at=0, override={"token AKIAIOSFODNN7EXAMPLE": 5})
        stored = b"".join(
            row.state
            for summary in loom.executions()
            for row in loom.log.rows(summary.execution_id)
        )
    assert b"AKIAIOSFODNN7EXAMPLE" not in stored


def test_a_loom_that_ignores_the_sealed_keys_refuses_the_execution_and_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loom from before keys were sealed, or a log edited to drop the flag, would rebuild
    the execution under the sealed texts, ask none of them and compute every recorded
    decision again (a recorded request sent again). The execution's input does not open
    there: refused, nothing computed."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    broken = [True]
    with Loom(url, encryption=KEY) as loom:
        failed = _failed_run(loom, broken)
    computed: list[str] = []
    with monkeypatch.context() as patch, Loom(url, encryption=KEY) as older:
        # The flags, not read: neither in the envelope nor in the input's place.
        patch.setattr(sealing, "sealed_names", lambda raw: False)
        patch.setattr(sealing, "_place_of", lambda envelope: "input")
        patch.setattr(loom_module, "input_flags", lambda raw: (False, False))

        @older.flow("lookup")
        def lookup(ctx: FlowContext, email: str) -> int:
            return (
                ctx.decide(
                    f"http:GET api.example.com/users/{email}", lambda: computed.append("sent")
                )
                or 0
            )

        broken[0] = False
        with pytest.raises(LogCorruptError):
            older.resume(failed, retry_failed=True)
    assert computed == []


def test_only_the_canonical_text_of_a_sealed_key_opens() -> None:
    """Base64 has more than one spelling of some bytes (the unused bits of a padded last
    character): two stored texts must never name one key."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    names = sealing.names_cipher(AESGCM(b"d" * 32))
    ad = [b"an-execution"]
    stored = sealing.seal_name(names, ad, "abcd")  # 20 bytes sealed: one "=" of padding
    assert stored.endswith("=") and sealing.open_name(names, ad, stored) == "abcd"
    last = stored[-2]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    other = alphabet[alphabet.index(last) ^ 1]  # the same decoded bytes, another spelling
    respelled = stored[:-2] + other + "="
    assert binascii.a2b_base64(respelled[7:]) == binascii.a2b_base64(stored[7:])
    with pytest.raises(LogCorruptError):
        sealing.open_name(names, ad, respelled)
    with pytest.raises(LogCorruptError):
        sealing.open_name(names, [b"another-execution"], stored)


def test_an_erasure_counts_a_reopening_only_when_it_holds_sealed_keys(tmp_path: Path) -> None:
    """What an erasure reports it destroys: a reopening holds sealed keys only when it dropped
    some, in an execution whose keys are sealed."""
    failing = [True]
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY) as loom:

        @loom.flow("own")
        def own(ctx: FlowContext) -> int:
            value = ctx.decide("one", lambda: 1)
            if failing[0]:
                raise RuntimeError("the flow's own code failed, no decision")
            return value

        with pytest.raises(RuntimeError):
            loom.run("own")
        [failed] = loom.executions()
        failing[0] = False
        loom.resume(failed.execution_id, retry_failed=True)  # Reopened, nothing dropped
        report = loom.erase(execution=failed.execution_id, reason="r", by="dpo", dry_run=True)
    # Created, the decision, Failed, Completed (the reopening and the resume hold no field).
    assert [s.events for s in report.subjects] == [4]


def test_an_imported_execution_whose_input_is_null_is_sealed_whole(tmp_path: Path) -> None:
    """Loom never starts an execution with a ``null`` input, but a bundle is untrusted and its
    hash is no signature. Sealed with its keys and values while its input stayed clear, the
    execution read as clear: its keys never opened. Its input is sealed too, so it opens."""
    with Loom(f"sqlite:///{tmp_path / 'clear.db'}") as loom:
        _register(loom, broken=[False])
        run = loom.run("lookup", email=PLANTED)
        loom.export(run.execution_id, tmp_path / "run.json")
    original = bundle_module.read_bundle(tmp_path / "run.json")
    first, *rest = original.events
    state = msgspec.json.decode(first.state)
    state["input"] = None
    edited = msgspec.structs.replace(first, state=msgspec.json.encode(state).decode())
    bundle_module.write_bundle(original.resealed([edited, *rest]), tmp_path / "crafted.json")
    with Loom(f"sqlite:///{tmp_path / 'sealed.db'}", encryption=KEY) as loom:
        imported = loom.import_bundle(tmp_path / "crafted.json")
        assert PLANTED.encode() not in _stored_text(loom, imported)
        assert f"orders of {PLANTED}" in loom.execution(imported).decisions
