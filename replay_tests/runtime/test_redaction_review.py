"""What an attack review of the builtin redactor found (ADR 0012, amended 2026-12-05
"redaction review"): secrets of the promised shapes stored in clear, and clean text that took
seconds to scan.

The url-password scan's cost is in the benchmark's redaction section (not timed here).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _full_passes(redactor: Redactor, text: str) -> str:
    """The redaction as it was before markers' neighbours were taken in one go: whole passes
    until one changes nothing (the reference the faster path must agree with)."""
    from collections import Counter

    from loom_runtime.redaction import _MARKERS

    found: Counter[str] = Counter()
    redacted = redactor._pass(text, found, hints=(text, text.lower()))
    while True:
        counted = found.total()
        outside = _MARKERS.sub(" ", redacted)
        again = redactor._pass(redacted, found, hints=(outside, outside.lower()))
        if found.total() == counted:
            return redacted
        redacted = again


@pytest.mark.parametrize("n", [10, 200])
def test_secrets_written_back_to_back_take_a_bounded_number_of_passes(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each secret of n written back to back needs the marker of the one before (a pattern
    wants no word character before its token): a whole pass each, n scans of the whole text
    (4,000 Google keys in 156 KB: 4.4 s). Counted, not timed: the passes are the cost."""
    redactor = Redactor()
    passes: list[int] = []
    original = Redactor._pass

    def counting(self: Redactor, *args: Any, **kwargs: Any) -> str:
        passes.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Redactor, "_pass", counting)
    # In runs of six keys (234 characters): a longer run of base64 is a payload, which the
    # built-in patterns pass by (ADR 0012, amended "payloads").
    google = " ".join([("AIza" + "B" * 35) * 6] * (n // 6)) + " " + ("AIza" + "B" * 35) * (n % 6)
    glued = google + ("AKIA" + "E" * 16 + "-") * n
    redacted = redactor.text(glued, path="v")
    assert "AIzaB" not in redacted and "AKIAE" not in redacted
    assert redacted.count("[REDACTED:") == 2 * n
    assert len(passes) <= 3
    monkeypatch.undo()
    assert redacted == _full_passes(Redactor(), glued)


_PIECES = st.sampled_from(
    [
        "AIza" + "B" * 35,
        "sk-" + "C" * 24,
        "ghp_" + "D" * 36,
        "xoxb-123456-abcdef",
        "AKIA" + "E" * 16,
        "Bearer ",
        "password=",
        '"password": "',
        "redis://u:",
        "@host ",
        "[REDACTED:openai-key]",
        " ",
        "-",
        "x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=10).map("".join))
def test_taking_markers_neighbours_first_settles_where_whole_passes_do(text: str) -> None:
    """Whatever pieces are glued together, the result is the whole-pass reference's, and
    redacting it again gives it back."""
    redacted = Redactor().text(text, path="v")
    assert redacted == _full_passes(Redactor(), text)
    assert Redactor().text(redacted, path="v") == redacted
