"""A base64 payload in a recorded value is stored as it came (ADR 0012, amended "payloads").

openai's SDK asks for embeddings as base64 (``encoding_format="base64"``) and decodes them
itself, so every wrapped embedding call records a long base64 string per vector. Random
base64 holds a run shaped like a Google API key (``AIza`` and 35 token characters after a
non-word character) about once in 150,000 1,536-wide vectors. The redactor wrote its marker
there: the live run had the real vector, the replay decoded the marked string and raised
(``buffer size must be a multiple of element size``), and an unchanged agent "diverged"; in
refuse mode the live call was refused.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from loom_runtime import FlowContext, Loom, Redactor, SecretPattern, SecretRefusedError, wrap
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

RUN = "AIzaSy" + "B" * 34
"""40 base64 characters (30 bytes) that the google-api-key pattern matches."""
PACKED = base64.b64decode(RUN) + bytes(6138)  # 1,536 float32s, the run first
VECTOR = base64.b64encode(PACKED).decode()
assert VECTOR.startswith(RUN)


def _through(redactor: Redactor, value: object) -> object:
    return redactor.value(value, path="decision.value")


@pytest.mark.parametrize("mode", ["redact", "refuse"])
def test_a_long_base64_payload_is_stored_as_it_came(mode: str) -> None:
    """Whole or within text: an embedding, an image's ``b64_json``, a ``data:`` URL (openai's
    image input; a regression review found the first form, which asked for base64
    throughout, still refused it), a payload followed by a newline, JSON written as text."""
    value = {
        "data": [{"embedding": VECTOR}],
        "image": {"b64_json": "xx/+" * 64 + RUN},
        "image_url": {"url": f"data:image/png;base64,{VECTOR}"},
        "file": VECTOR + "\n",
        "tool_result": json.dumps({"pdf": VECTOR[100:]}),
    }
    redactor = Redactor(mode=mode)  # type: ignore[arg-type]
    assert _through(redactor, value) == value
    assert redactor.total == 0


@pytest.mark.parametrize(
    "text",
    [
        f"key {RUN}",  # prose
        RUN,  # the key alone, short
        f"{RUN}:{VECTOR}",  # not base64 throughout
        "s3/prod/" + "AKIAIOSFODNN7EXAMPLE" + "/config",  # a short path
        "A" * 200 + "/AKIAIOSFODNN7EXAMPLE/" + "b" * 20,  # a path under the payload length
    ],
)
def test_a_secret_outside_a_base64_payload_is_still_redacted(text: str) -> None:
    """Control: only text that is base64 throughout and long is a payload."""
    redacted = _through(Redactor(), {"v": text})
    assert redacted != {"v": text}, text
    with pytest.raises(SecretRefusedError):
        _through(Redactor(mode="refuse"), {"v": text})


def test_an_extra_pattern_still_reads_a_base64_payload() -> None:
    """The payload rule passes only the built-in patterns by: a team's own token pattern, for
    a token that is itself base64, still finds it there."""
    token = SecretPattern.compile("team-token", r"TEAMTOKEN[A-Za-z0-9]{8}", hints=("teamtoken",))
    payload = VECTOR[:400] + "TEAMTOKENabcd1234" + VECTOR[400:800]
    redacted = _through(Redactor(extra=[token]), {"v": payload})
    assert isinstance(redacted, dict) and "TEAMTOKENabcd1234" not in redacted["v"]
    assert RUN in redacted["v"]  # the built-in patterns still pass the payload by
    assert _through(Redactor(extra=[token]), redacted) == redacted  # idempotent


def test_redacting_a_payload_an_extra_pattern_marked_again_gives_it_back() -> None:
    """Regression review: a 261-character payload holding a team token and the run. The
    first form set markers aside and then saw 222 characters: no payload, so the run was
    redacted on the second call only, and a bundle's re-import conflicted. Markers now count
    as part of the run, and the passes of one call settle what another call settles: here
    the token's shorter marker leaves a 243-character run, no payload, in both."""
    token = SecretPattern.compile("team-token", r"TEAMTOKEN[A-Za-z0-9]{30}", hints=("teamtoken",))
    text = RUN + "x" * 182 + "TEAMTOKEN" + "y" * 30
    assert len(text) == 261
    redactor = Redactor(extra=[token])
    once = redactor.text(text, path="v")
    assert "TEAMTOKEN" not in once
    assert redactor.text(once, path="v") == once


class _Embeddings(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        reply = {
            "object": "list",
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
            "data": [{"object": "embedding", "index": 0, "embedding": VECTOR}],
        }
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def embeddings_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    thread.join()


def test_a_wrapped_embedding_whose_base64_holds_a_key_shaped_run_replays(
    embeddings_url: str, tmp_path: Path
) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("embed")
        def embed(ctx: FlowContext, text: str) -> list[float]:
            client = wrap(openai.OpenAI(base_url=embeddings_url, api_key="sk-x", max_retries=0))
            reply = client.embeddings.create(model="text-embedding-3-small", input=[text])
            return [float(x) for x in reply.data[0].embedding[:4]]

        run = loom.run("embed", text="rotate the keys")
        assert run.output == list(struct.unpack("<4f", PACKED[:16]))
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()


def test_text_after_an_unclosed_marker_is_redacted() -> None:
    """Second regression review: the rule counted anything from ``[REDACTED:`` to the next
    ``]`` as part of a run, so a truncated marker made the log lines after it a "payload" and
    an AWS key and a password there were stored in clear. A marker is not base64: it ends a
    run, whatever it holds."""
    text = (
        "prev: Bearer [REDACTED:bea\n"
        + "line of a log\n" * 20
        + "AWS AKIAIOSFODNN7EXAMPLE password=s3cr3tP4ss\nsee [1]"
    )
    redacted = Redactor().text(text, path="v")
    assert "AKIAIOSFODNN7EXAMPLE" not in redacted and "s3cr3tP4ss" not in redacted
    with pytest.raises(SecretRefusedError):
        Redactor(mode="refuse").text(text, path="v")


def test_a_marker_does_not_join_two_runs_into_a_payload() -> None:
    """Second regression review: a GitHub token (not base64: ``_``) between two runs, once
    its marker counted as run characters, joined them into a 345-character payload and the
    Google key beside it stayed in clear."""
    github = "ghp_" + "D" * 36
    google = "AIza" + "C" * 35
    text = f"{'x' * 200}/{github}/{google}/{'y' * 80}"
    redacted = Redactor().text(text, path="v")
    assert github not in redacted and google not in redacted, redacted


def test_the_payload_rule_reads_a_bounded_window_per_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Second regression review: measuring the run over the whole text for each match made
    glued key-shaped runs quadratic again (4,000 keys: 150 s against 0.33 s). Counted, not
    timed: the characters the rule reads per match stay under twice the payload length plus
    the match, however long the text."""
    from loom_runtime import redaction

    read: list[int] = []
    run_end = redaction._run_end

    def counting(text: str, start: int, stop: int) -> int:
        end = run_end(text, start, stop)
        read.append(end - start)
        return end

    monkeypatch.setattr(redaction, "_run_end", counting)
    glued = " ".join([("AIza" + "B" * 35) * 6] * 700)  # 4,200 keys, 6 to a run (234 chars)
    redacted = Redactor().text(glued, path="v")
    assert redacted.count("[REDACTED:google-api-key]") == 4200
    assert read and max(read) <= 2 * 256 + 39


def _payload_flow(payload: str) -> Any:
    def describe(ctx: FlowContext) -> str:
        request = {"model": "vision", "image_url": f"data:image/png;base64,{payload}"}
        return ctx.decide("describe", lambda: "a cat", input=request)

    return describe


def test_a_recording_made_before_the_payload_rule_replays_identical(tmp_path: Path) -> None:
    """An execution recorded before the payload rule (ADR 0012, amended "payloads", "older
    recordings") holds the marker the redactor then wrote into its input's payload. Today's
    redactor leaves that payload alone, so the same code asking the same question encoded
    another input, and the replay said "input changed" of an unchanged agent. The input is
    also compared as the redactor stored it then, so it replays identical; a payload that
    changed elsewhere still diverges."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    # What was stored then: the pattern's 39 characters (AIza and 35 more) marked.
    marked = "[REDACTED:google-api-key]" + VECTOR[39:]
    with Loom(url, redactor=None) as old:  # writes the bytes the old rule wrote, as they are
        old.flow("describe")(_payload_flow(marked))
        execution_id = old.run("describe").execution_id
    with Loom(url) as loom:
        loom.flow("describe")(_payload_flow(VECTOR))
        result = loom.replay(execution_id)
        assert result.identical, result.describe()
        redactor = loom.settings.redactor
        assert redactor is not None and redactor.total == 0  # nothing counted, nothing stored
        loom.flows = type(loom.flows)()
        loom.flow("describe")(_payload_flow(VECTOR[:-8] + "B" * 8))
        changed = loom.replay(execution_id)
    assert [type(d).__name__ for d in changed.divergences] == ["DecisionInputChangedError"]


def test_an_input_the_earlier_rule_would_refuse_is_reported_changed_not_raised(
    tmp_path: Path,
) -> None:
    """The comparison under the earlier rule may meet what that rule refuses (two keys that
    are payloads it would mark alike): a regression review saw it raise out of
    ``ctx.decide`` where "input changed" was due. Such an input is not the recorded one."""
    pad = "Q" * 300
    first, second = (f"{pad}/AIza{pair * 17}B{pad}" for pair in ("A1", "C3"))
    url = f"sqlite:///{tmp_path / 'log.db'}"

    def asking(input: object) -> Any:
        def flow(ctx: FlowContext) -> str:
            return str(ctx.decide("call", lambda: "ok", input=input))

        return flow

    with Loom(url, redactor=None) as old:
        old.flow("f")(asking({"note": "QQ[REDACTED:google-api-key]QQ"}))
        execution_id = old.run("f").execution_id
    with Loom(url) as loom:
        loom.flow("f")(asking({first: 1, second: 2}))
        result = loom.replay(execution_id)
    assert [type(d).__name__ for d in result.divergences] == ["DecisionInputChangedError"]
