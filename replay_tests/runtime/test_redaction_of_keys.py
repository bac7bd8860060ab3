"""Secrets in mapping keys are redacted too (ADR 0012, amended "keys").

The redactor scanned only string values, so ``{"Bearer <token>": ...}`` or a dict keyed by
connection URLs was stored with the secret in clear: the one shape of plain data it did not
read. A key is now redacted as a value is; two keys that would become the same marker are
refused, typed, instead of merged (one of them would silently vanish), and refuse mode refuses
a secret key, naming where it was but never the key.
"""

from __future__ import annotations

import msgspec
import pytest

from loom_runtime import (
    FlowContext,
    Loom,
    RedactedKeysCollideError,
    Redactor,
    SecretRefusedError,
)
from loom_runtime.stream import stream_id
from replay_tests.runtime.test_redaction import TOKEN, Noted, _stored

URL_KEY = "postgresql://app:hunter2-pw@db.internal/app"


def test_a_secret_in_a_key_is_redacted_at_any_depth() -> None:
    redactor = Redactor()
    value = {f"Bearer {TOKEN}": 1, "pools": [{URL_KEY: {"size": 4}}], "n": None}
    redacted = redactor.value(value, path="v")
    assert redacted == {
        "Bearer [REDACTED:bearer-token]": 1,
        "pools": [{"postgresql://app:[REDACTED:url-password]@db.internal/app": {"size": 4}}],
        "n": None,
    }
    assert list(redacted) == ["Bearer [REDACTED:bearer-token]", "pools", "n"]  # order kept
    assert redactor.counts == {"bearer-token": 1, "url-password": 1}
    assert value[f"Bearer {TOKEN}"] == 1  # the caller's dict is left as it was
    raw = msgspec.Raw(msgspec.json.encode(value))
    assert msgspec.json.decode(redactor.raw(raw, path="v")) == redacted


def test_clean_keys_leave_the_value_itself() -> None:
    value = {"prompt": "hello", "nested": {"a": [1, 2]}}
    assert Redactor().value(value, path="v") is value


def test_keys_that_would_merge_are_refused_without_the_secret() -> None:
    value = {"Bearer abc123def456ghi7": 1, "Bearer zyx987wvu654tsr3": 2}
    with pytest.raises(RedactedKeysCollideError) as caught:
        Redactor().value({"outer": value}, path="decision 'model'")
    assert caught.value.path == "decision 'model'.outer"
    assert isinstance(caught.value, SecretRefusedError)
    assert "abc123" not in str(caught.value) and "zyx987" not in str(caught.value)


def test_refuse_mode_refuses_a_secret_key_and_names_where() -> None:
    with pytest.raises(SecretRefusedError) as caught:
        Redactor(mode="refuse").value({"a": {URL_KEY: 1}}, path="v")
    assert (caught.value.pattern, caught.value.path) == ("url-password", "v.a.<key>")
    assert "hunter2" not in str(caught.value)


def test_a_decision_and_an_event_never_store_a_secret_key(loom: Loom) -> None:
    """The flow sees the redacted key, its replay is identical, and no row holds a secret."""

    @loom.flow("keys")
    def keys(ctx: FlowContext, pool: str) -> dict[str, int]:
        return ctx.decide("pools", lambda: {pool: 4}, input={pool: "size"})

    run = loom.run("keys", pool=URL_KEY)
    assert run.output == {"postgresql://app:[REDACTED:url-password]@db.internal/app": 4}
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    loom.log.append(
        stream_id("notes"),
        expected_version=0,
        events=[(Noted, {"text": "t", "meta": {f"Bearer {TOKEN}": 1}})],
    )
    stored = b"".join(state for _, state in _stored(loom))
    assert b"hunter2" not in stored and TOKEN.encode() not in stored
    assert b"[REDACTED:url-password]" in stored and b"[REDACTED:" in stored.split(b"meta")[-1]
