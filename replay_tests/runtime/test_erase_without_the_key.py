"""An erasure asked of an encrypted log opened without its master key (ADR 0049, amended
2026-12-02 "erasurerev"), on SQLite and PostgreSQL.

The refusal said the log "was opened without encryption, so what it holds is stored in clear
and no key can be destroyed": on a log whose data is sealed, that tells a data-protection
officer who forgot ``$LOOM_MASTER_KEY`` the opposite of the truth. It must say the log is
encrypted and the key is missing, and write nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from typer.testing import CliRunner

from loom_runtime import EncryptionOffError, FlowContext, Labels, Loom, MasterKey
from loom_runtime.tools.cli import app

KEY = MasterKey(b"k" * 32)


def _recorded(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("shout", lambda: text.upper())

        loom.run("note", text="alice's address", labels=Labels(user="alice"))


def test_an_encrypted_log_opened_without_its_key_says_the_key_is_missing(db_url: str) -> None:
    _recorded(db_url)
    with Loom(db_url) as keyless:
        head = keyless.log.position
        for attempt in (
            lambda: keyless.erase(user="alice", reason="r", by="dpo"),
            lambda: keyless.erase(user="alice", reason="r", by="dpo", dry_run=True),
            lambda: keyless.retain(older_than=timedelta(days=1), by="dpo"),
        ):
            with pytest.raises(EncryptionOffError) as refused:
                attempt()
            message = str(refused.value)
            assert "is encrypted" in message and "without its master key" in message
            assert "stored in clear" not in message
            assert "LOOM_MASTER_KEY" in message
        assert keyless.log.position == head


def test_the_cli_says_so_too(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _recorded(db_url)
    monkeypatch.delenv("LOOM_MASTER_KEY", raising=False)
    result = CliRunner().invoke(
        app, ["erase", "--user", "alice", "--reason", "r", "--apply", "--db", db_url]
    )
    assert result.exit_code == 2
    assert "without its master key" in result.output and "stored in clear" not in result.output


def test_a_log_never_encrypted_is_still_told_it_is_in_clear(db_url: str) -> None:
    with Loom(db_url) as plain:

        @plain.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return text

        plain.run("note", text="x", labels=Labels(user="u"))
        with pytest.raises(EncryptionOffError, match="stored in clear"):
            plain.erase(user="u", reason="r", by="dpo")
