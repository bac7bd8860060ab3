"""What an attack review of the builtin redactor found (ADR 0012, amended 2026-12-05
"redaction review"): secrets of the promised shapes stored in clear, and clean text that took
seconds to scan.

The url-password scan's cost is in the benchmark's redaction section (not timed here).
"""

from __future__ import annotations

from typing import Any

import pytest

from loom_runtime import Redactor

AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    "text",
    [
        f'{{"aws_secret_access_key": "{AWS}"}}',
        f"{{'aws_secret_access_key': '{AWS}'}}",
        f'AWS_SECRET_ACCESS_KEY = "{AWS}"',
    ],
    ids=["json", "python-dict", "shell-quoted"],
)
def test_an_aws_secret_in_json_or_a_dict_s_text_is_redacted(text: str) -> None:
    """``": "`` is four characters; the pattern allowed three between name and value."""
    assert AWS not in Redactor().text(text, path="v")


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('config {"user": "svc", "password": "don\'t-tell-Xy9 anyone"}', "t-tell-Xy9 anyone"),
        ("password = 'say \"hi\" 7Qz-secret'", "7Qz-secret"),
        ('DB_PASSWORD="pa\'ss w0rd-9"', "ss w0rd-9"),
    ],
    ids=["apostrophe-in-double", "double-in-single", "shell"],
)
def test_a_quoted_password_ends_only_at_its_own_closing_quote(text: str, secret: str) -> None:
    redacted = Redactor().text(text, path="v")
    assert secret not in redacted, redacted


@pytest.mark.parametrize(
    "value",
    [
        {"username": "svc", "password": "Tr0ub4dor-3xyz"},
        {"db": {"password": "hunter2-Xy9"}},
        {"client_secret": "cs-9f8e7d6c5b4a"},
        {"apiKey": "k-77f0e1d2c3"},
        [{"refresh_token": "rt-1a2b3c4d"}],
    ],
    ids=["tool-arguments", "nested", "client-secret", "camel-case", "in-a-list"],
)
def test_a_credential_named_mapping_entry_is_redacted_as_its_text_would_be(value: Any) -> None:
    """``"password": "..."`` is a promised shape; as a mapping (a ``@tool``'s arguments, a
    config dict) its name and value were scanned apart and neither matched."""
    redacted = Redactor().value(value, path="v")
    assert not any(
        secret in repr(redacted)
        for secret in ("Tr0ub4dor", "hunter2", "cs-9f8e", "k-77f0", "rt-1a2b")
    ), redacted
    assert "[REDACTED:" in repr(redacted)


@pytest.mark.parametrize(
    "text",
    [
        "redis://:pw-Xy9-secret@cache.internal:6379/0",
        "postgresql://app:c0rrect-h0rse@db.example/prod",
        "https://user:" + "p" * 200 + "@host.example/path",
    ],
    ids=["empty-user", "user", "long-password"],
)
def test_a_url_password_is_still_redacted(text: str) -> None:
    """The control for bounding the url-password pattern's scheme and password."""
    redacted = Redactor().text(text, path="v")
    assert "[REDACTED:url-password]" in redacted and "@" in redacted


def test_clean_fields_beside_credential_names_are_kept() -> None:
    """The control: words that contain a credential word are not one (``max_tokens``,
    ``password_hint`` as a number, a bare ``key``)."""
    value = {"max_tokens": 5, "key": "user:42", "tokens": ["a"], "password_length": 12}
    assert Redactor().value(value, path="v") == value
