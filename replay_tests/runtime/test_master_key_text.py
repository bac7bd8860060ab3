"""``MasterKey.from_env`` reads base64 and nothing else (ADR 0049, amended 2026-12-05 "key
rows").

It decoded without validation: characters outside the alphabet were dropped and anything
after the padding ignored, so a key pasted twice, with a comment, or with a stray character
was taken as the key; and a 128-bit key written in hex (32 hex digits, all in base64's
alphabet) became a different 192-bit key, under which a fresh log's first sealed write would
have switched encryption on, refusing the intended key ever after.
"""

from __future__ import annotations

import base64

import pytest

from loom_runtime import ConfigurationError, MasterKey

RAW = bytes(range(32))
TEXT = base64.b64encode(RAW).decode()
URL_RAW = bytes([0xFB, 0xFF, 0xBF] * 10 + [0xFF, 0xFE])
URLSAFE = base64.urlsafe_b64encode(URL_RAW).decode()
assert {"-", "_"} <= set(URLSAFE)  # the url-safe alphabet's own characters are exercised


def _read(monkeypatch: pytest.MonkeyPatch, text: str) -> MasterKey:
    monkeypatch.setenv("LOOM_MASTER_KEY", text)
    return MasterKey.from_env()


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        (TEXT, RAW),
        (f"  {TEXT}\n", RAW),
        (TEXT.rstrip("="), RAW),
        (URLSAFE, URL_RAW),
        (URLSAFE.rstrip("="), URL_RAW),
    ],
    ids=["standard", "spaces and newline", "unpadded", "url-safe", "url-safe unpadded"],
)
def test_base64_keys_are_read(monkeypatch: pytest.MonkeyPatch, text: str, raw: bytes) -> None:
    wrapped = _read(monkeypatch, text).wrap(b"d" * 32)
    assert MasterKey(raw).unwrap(wrapped) == b"d" * 32


@pytest.mark.parametrize(
    "text",
    [TEXT + TEXT, TEXT + " # prod key", TEXT[:10] + "!!" + TEXT[10:], TEXT + "garbage"],
    ids=["pasted twice", "with a comment", "a stray character", "after the padding"],
)
def test_text_that_is_not_one_base64_key_is_refused(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    with pytest.raises(ConfigurationError, match="LOOM_MASTER_KEY"):
        _read(monkeypatch, text)


def test_a_key_in_hex_is_refused_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="hex"):
        _read(monkeypatch, bytes(range(16)).hex())
