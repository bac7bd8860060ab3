"""ADR 0012 and 0048 (rec): a pattern's ``requires`` characters skip its hint scans only when
no match could hold them, so a secret is still found in a long value without any of the other
patterns' characters around it."""

from __future__ import annotations

import re

import pytest

from loom_runtime import Redactor
from loom_runtime.redaction import BUILTIN_PATTERNS

PROSE = "the planner retrieved three passages about vacuum and autovacuum thresholds "
"""Longer than the one-search limit together with a secret, and holding no character any
built-in pattern requires: only the secret's own characters can let its pattern run."""

SECRETS = {
    "aws-key": "AKIAIOSFODNN7EXAMPLE",
    "google-api-key": "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_case_sensitive_key_in_lowercase_prose_is_redacted(name: str) -> None:
    """A key whose only required character is its own capital is still found and replaced."""
    requirements = "".join(pattern.requires for pattern in BUILTIN_PATTERNS)
    assert not set(PROSE) & set(requirements)
    text = f"{PROSE}{SECRETS[name]} {PROSE}"

    redacted = Redactor().text(text, path="value")

    assert SECRETS[name] not in redacted
    assert f"[REDACTED:{name}]" in redacted


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_key_spelled_in_lowercase_is_not_one(name: str) -> None:
    """The patterns are case-sensitive, which is what lets a capital be required."""
    text = f"{PROSE}{SECRETS[name].lower()} {PROSE}"

    assert Redactor().text(text, path="value") == text


def test_a_cased_requirement_belongs_to_a_case_sensitive_pattern() -> None:
    """``requires`` is checked against the value as written, not lower-cased: a letter there is
    sound only for a regex that matches that letter in that case alone."""
    for pattern in BUILTIN_PATTERNS:
        if any(char.isalpha() for char in pattern.requires):
            assert not pattern.regex.flags & re.IGNORECASE, pattern.name
