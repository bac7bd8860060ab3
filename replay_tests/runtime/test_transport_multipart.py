"""ADR 0024, amended: a multipart request (a file upload) is compared part by part.

httpx draws a random boundary for every multipart body, so a recorded upload compared byte
for byte differed from its replay every time: the same flow reported a changed input, and a
real change showed as a line of base64. The canonical form is the parts themselves, without
the boundary. Recorded with ``httpx.MockTransport`` (what answers is not under test) and
replayed with an inner transport that fails if called.
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

import loom_runtime
from loom_runtime import DecisionInputChangedError, Loom
from replay_tests.runtime.test_transport import Unreachable

AUDIO = b"RIFF\x00\x01not really audio\xff\xfe"
KEY = "http:POST uploads.example/v1/transcriptions"


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"text": "hello"})


def build(url: str, inner: httpx.BaseTransport, *, model: str = "whisper-1") -> Loom:
    loom = Loom(url)

    @loom.flow("upload")
    def upload(ctx: Any) -> Any:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            response = client.post(
                "https://uploads.example/v1/transcriptions",
                data={"model": model},
                files={"file": ("a.wav", AUDIO, "audio/x-wav")},
            )
            return response.json()

    return loom


def test_the_same_upload_replays_identically(sqlite_url: str) -> None:
    """Two runs draw two boundaries; the replay of the same upload is identical all the same,
    and the stored input holds the parts, not the boundary."""
    with build(sqlite_url, httpx.MockTransport(answer)) as loom:
        run = loom.run("upload")
        stored = msgspec.json.decode(loom.execution(run.execution_id).decisions[KEY].input)
    assert run.output == {"text": "hello"}
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert stored["headers"]["content-type"] == "multipart/form-data"
    model, audio = stored["body"]["multipart"]
    assert model == {
        "headers": {"content-disposition": 'form-data; name="model"'},
        "body": {"text": "whisper-1"},
    }
    assert audio["headers"]["content-type"] == "audio/x-wav"
    assert audio["body"] == {"bytes": msgspec.json.decode(msgspec.json.encode(AUDIO))}


def test_a_changed_form_field_is_a_changed_input_shown_as_text(sqlite_url: str) -> None:
    """Asking for another model in the same upload is reported with a diff that names it."""
    with build(sqlite_url, httpx.MockTransport(answer)) as loom:
        run = loom.run("upload")
    with build(sqlite_url, Unreachable(), model="whisper-2") as fresh:
        result = fresh.replay(run.execution_id)
    [finding] = result.divergences
    assert isinstance(finding, DecisionInputChangedError)
    assert finding.key == KEY
    assert '-          "text": "whisper-1"' in finding.diff
    assert '+          "text": "whisper-2"' in finding.diff
