"""Fixtures of the capture tests: the loopback provider the real SDKs talk to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from replay_tests.capture.provider_server import ProviderServer


@pytest.fixture
def provider() -> Iterator[ProviderServer]:
    """A running loopback OpenAI/Anthropic server, stopped after the test (if it still runs)."""
    server = ProviderServer()
    yield server
    server.stop()
