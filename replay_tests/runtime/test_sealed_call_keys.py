"""ADR 0049, amended (keys): a sealed execution's HTTP keys name where a call went (method and
host), never the path, which can name a person (``/users/alice@example.com``). Keys are
stored in clear, so a path in one would outlive an erasure; in the sealed input it goes with
the key. A replay or resume keys each call as it was recorded, so recordings made in either
form, and bundles moved between clear and encrypted logs, replay identically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest

import loom_runtime
from loom_runtime import DecisionInputChangedError, Labels, Loom, MasterKey
from replay_tests.runtime.test_erasure import _raw_bytes_postgres, _raw_bytes_sqlite
from replay_tests.runtime.test_transport import Unreachable

KEY = MasterKey(b"k" * 32)


def _server(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"path": request.url.path})


def _build(
    url: str, inner: Any, *, encryption: MasterKey | None = None, part: str = "orders"
) -> Loom:
    loom = Loom(url, encryption=encryption)

    @loom.flow("profile")
    def profile(ctx: Any, email: str) -> list[Any]:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return [
                client.get(f"https://crm.example/users/{email}/{name}").json()
                for name in ("profile", part)
            ]

    return loom


def _raw(url: str) -> bytes:
    return _raw_bytes_sqlite(url) if url.startswith("sqlite") else _raw_bytes_postgres(url)


def test_a_sealed_http_call_keeps_its_path_out_of_the_key_and_an_erasure_leaves_none(
    db_url: str,
) -> None:
    email = f"planted-{uuid4().hex}@example.com"
    with _build(db_url, httpx.MockTransport(_server), encryption=KEY) as loom:
        run = loom.run("profile", email=email, labels=Labels(user="alice"))
        decisions = loom.execution(run.execution_id).decisions
        assert list(decisions) == ["http:GET crm.example", "http:GET crm.example#2"]
        assert all(email not in key for key in decisions)
    with _build(db_url, Unreachable(), encryption=KEY) as fresh:
        assert fresh.replay(run.execution_id).identical
        fresh.erase(user="alice", reason="request 12", by="dpo")
    raw = _raw(db_url)
    assert b"crm.example" in raw  # the keys are there, in clear
    assert raw.count(email.encode()) == 0


def test_a_clear_execution_keeps_the_path_in_its_keys(db_url: str) -> None:
    with _build(db_url, httpx.MockTransport(_server)) as loom:
        run = loom.run("profile", email="bob")
        assert list(loom.execution(run.execution_id).decisions) == [
            "http:GET crm.example/users/bob/profile",
            "http:GET crm.example/users/bob/orders",
        ]


@pytest.mark.parametrize(
    "recorded_sealed", [True, False], ids=["sealed-to-clear", "clear-to-sealed"]
)
def test_a_bundle_moved_between_clear_and_encrypted_logs_replays_with_its_own_keys(
    tmp_path: Path, recorded_sealed: bool
) -> None:
    """The form a call was recorded with is kept wherever its execution goes: a replay or a
    resume in a log of the other kind looks the call up in the form the recording holds."""
    source = KEY if recorded_sealed else None
    target = None if recorded_sealed else KEY
    with _build(
        f"sqlite:///{tmp_path / 'a.db'}", httpx.MockTransport(_server), encryption=source
    ) as a:
        run = a.run("profile", email="carol")
        keys = list(a.execution(run.execution_id).decisions)
        bundle = a.export(run.execution_id, tmp_path / "run.json")
    assert ("/users/carol/" in keys[0]) is not recorded_sealed
    with _build(f"sqlite:///{tmp_path / 'b.db'}", Unreachable(), encryption=target) as b:
        assert b.replay_bundle(bundle).identical
        imported = b.import_bundle(bundle)
        assert list(b.execution(imported).decisions) == keys
        assert b.replay(imported).identical


def test_a_changed_path_in_a_sealed_recording_is_a_changed_input_with_the_url_diffed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with _build(url, httpx.MockTransport(_server), encryption=KEY) as loom:
        run = loom.run("profile", email="dave")
    with _build(url, Unreachable(), encryption=KEY, part="invoices") as changed:
        result = changed.replay(run.execution_id)
    assert not result.identical
    (divergence,) = [d for d in result.divergences if isinstance(d, DecisionInputChangedError)]
    assert divergence.key == "http:GET crm.example#2"
    assert "/users/dave/invoices" in str(divergence) and "/users/dave/orders" in str(divergence)
