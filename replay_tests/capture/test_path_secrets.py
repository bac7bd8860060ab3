"""A secret that is part of a URL's path, in the known shapes, is never stored (ADR 0024,
amended 2026-12-06 "paths").

An attack review posted to a Slack incoming webhook, a Discord webhook and the Telegram Bot
API: each URL's path is its credential (``/services/T…/B…/<secret>``,
``/api/webhooks/<id>/<token>``, ``/bot<id>:<token>/…``), and each was stored whole in the
decision's key and in its input's URL. The secrets below match no redaction pattern.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec

import loom_runtime
from loom_runtime import Loom
from loom_runtime.http_request import url_without_credentials
from replay_tests.capture.raw_log import raw_log

MARK = "[REDACTED:path-secret]"  # http_request.PATH_SECRET_MARK
SLACK = "Zq8Xw2Lk9Vb4Nc7Rt1Yw6Hs3"
DISCORD = "Ab3dEf6hIj9lMn2pQr5tUv8xYz1Bc4De7Gh0Jk3Mn6Pq9St2Vw5Yz8Ab1De4Gh7"
TELEGRAM = "AAHf3kLm9Qr2St5Uv8Wx1Yz4Ab7Cd0Ef3Gh"
URLS = [
    f"https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{SLACK}",
    # Workflow Builder webhooks and triggers (second capture review, 6 December)
    f"https://hooks.slack.com/workflows/T0A1B2C3D/A0E4F5G6H/412345678901234567/{SLACK}",
    f"https://hooks.slack.com/triggers/T0A1B2C3D/412345678901234567/{SLACK}",
    f"https://discord.com/api/webhooks/1234567890123456789/{DISCORD}",
    f"https://discord.com/api/v10/webhooks/1234567890123456789/{DISCORD}/messages/55",
    f"https://api.telegram.org/bot7012345678:{TELEGRAM}/sendMessage",
    f"https://api.telegram.org/file/bot7012345678:{TELEGRAM}/photos/file_1.jpg",
    "https://discord.com/api/v10/channels/42/messages",  # the control: no secret in it
]
KEYS = [
    f"http:POST hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{MARK}",
    f"http:POST hooks.slack.com/workflows/T0A1B2C3D/A0E4F5G6H/412345678901234567/{MARK}",
    f"http:POST hooks.slack.com/triggers/T0A1B2C3D/412345678901234567/{MARK}",
    f"http:POST discord.com/api/webhooks/1234567890123456789/{MARK}",
    f"http:POST discord.com/api/v10/webhooks/1234567890123456789/{MARK}/messages/55",
    f"http:POST api.telegram.org/bot7012345678:{MARK}/sendMessage",
    f"http:POST api.telegram.org/file/bot7012345678:{MARK}/photos/file_1.jpg",
    "http:POST discord.com/api/v10/channels/42/messages",
]


def test_a_webhook_or_bot_token_in_a_path_is_in_no_row(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    inner = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))
    loom = Loom(f"sqlite:///{path}")

    @loom.flow("notify")
    def notify(ctx: Any) -> list[int]:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return [client.post(url, json={"text": "deploy done"}).status_code for url in URLS]

    with loom:
        run = loom.run("notify")
        decisions = loom.execution(run.execution_id).decisions
        assert list(decisions) == KEYS
        urls = [msgspec.json.decode(decision.input)["url"] for decision in decisions.values()]
        assert urls == [f"https://{key.partition(' ')[2]}" for key in KEYS]
        assert loom.replay(run.execution_id).identical
    stored = raw_log(path)
    assert [secret for secret in (SLACK, DISCORD, TELEGRAM) if secret.encode() in stored] == []
    assert b"deploy done" in stored and b"channels/42" in stored  # the control


def test_a_location_naming_a_webhook_is_stored_without_its_secret() -> None:
    assert (
        url_without_credentials(URLS[0])
        == f"https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/{MARK}"
    )
    assert url_without_credentials(URLS[-1]) == URLS[-1]
