"""ADR 0012: the secrets users actually paste never reach the database file.

Each shape is planted in every kind of field loom stores (flow input, decision value, decision
input, the message of a failing compute, document text and title, memory entry, flow output,
and ``bytes`` values), then the raw bytes of the SQLite file, its WAL and an exported bundle
are searched for it. A planted non-secret canary goes through the same path and must be
found: the control that proves the search can fail.
"""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_memory import EventSourcedMemory, MemoryEntry
from loom_runtime import FlowContext, Loom, Redactor

# (shape, text as pasted, the secret part that must not be stored). Fake values, real shapes.
SHAPES = [
    (
        "openai",
        "key sk-T3stKey9aBcDeFgHiJkLmNoPqRsTuVwXyZ012345678ab ok",
        "T3stKey9aBcDeFgHiJkLmNo",
    ),
    (
        "openai-project",
        "OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34Yz56_-AbCdEf",
        "Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
    ),
    (
        "anthropic",
        "x-api-key: sk-ant-api03-Zy98Xw76Vu54Ts32Rq10Po98Nm76Lk54Ji32Hg10Fe98Dc76Ba54-AbCdAA",
        "Zy98Xw76Vu54Ts32Rq10Po98Nm76",
    ),
    (
        "github",
        "git clone https://x@github.com ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "A1b2C3d4E5f6G7h8I9j0K1",
    ),
    (
        "github-fine-grained",
        "token github_pat_11ABCDEFG0aBcDeFgHiJkL_MnOpQrStUvWxYz0123456789aBcDeFgHiJkLmNoPq",
        "MnOpQrStUvWxYz0123456789aBcDeF",
    ),
    (
        "google",
        "maps key AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q in the url",
        "SyA1b2C3d4E5f6G7h8I9j0K1",
    ),
    (
        "slack-bot",
        "SLACK=xoxb-1234567890123-9876543210987-AbCdEfGhIjKlMnOpQrStUvWx",
        "AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    (
        "slack-user",
        "xoxp-2234567890123-8876543210987-1234567890123-0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d",
        "0a1b2c3d4e5f6a7b8c9d0e1f",
    ),
    (
        "basic-auth",
        "Authorization: Basic c3ZjLXVzZXI6aHVudGVyMi1wYXNzd29yZA==",
        "c3ZjLXVzZXI6aHVudGVyMi1wYXNzd29yZA",
    ),
    ("password-assignment", "connect with password=Tr0ub4dor-3xyz then retry", "Tr0ub4dor-3xyz"),
    ("password-yaml", "db:\n  host: pg\n  password: hunter2-Xy\n", "hunter2-Xy"),
    (
        "password-json",
        'config {"user": "svc", "password": "c0rrect h0rse-battery"}',
        "c0rrect h0rse-battery",
    ),
    ("url-empty-user", "cache at redis://:r3dis-pw-9x@cache.internal:6379/0", "r3dis-pw-9x"),
    (
        "url-password-with-at-and-slash",
        "db postgresql://app:p@ss/w0rd-42x@db.internal:5432/app",
        "ss/w0rd-42x",
    ),
]
CANARY = "loom-canary-PLAINTEXT-7731"  # not a secret: must be stored, and found


def _texts() -> list[str]:
    return [text for _, text, _ in SHAPES] + [f"note {CANARY} ok"]


def _blob(text: str) -> bytes:
    return text.encode()


@pytest.fixture
def planted(sqlite_url: str, tmp_path: Path) -> tuple[bytes, bytes]:
    """Every shape in every field kind; returns (database file + WAL bytes, bundle bytes)."""
    db_path = Path(sqlite_url.removeprefix("sqlite:///"))
    with Loom(sqlite_url) as loom:

        @loom.flow("plant")
        def plant(ctx: FlowContext, texts: list[str], blobs: list[bytes]) -> dict[str, object]:
            value = ctx.decide("value", lambda: texts, input={"prompt": texts, "raw": blobs})
            ctx.decide("blob", lambda: blobs)
            for index, text in enumerate(texts):

                def fail(text: str = text) -> None:
                    raise RuntimeError(f"upstream said: {text}")

                with contextlib.suppress(RuntimeError):
                    ctx.decide(f"call {index}", fail)
            return {"output": value, "blobs": blobs}

        run = loom.run("plant", texts=_texts(), blobs=[_blob(t) for t in _texts()])
        kb = open_knowledge_base(loom, "pasted")
        kb.sync(
            [Doc(id=f"doc-{i}", text=f"Runbook.\n\n{t}", title=t) for i, t in enumerate(_texts())]
        )
        memory = EventSourcedMemory(loom)
        memory.append("notes", [MemoryEntry(content=t, origin=t) for t in _texts()])
        bundle = loom.export(run.execution_id, tmp_path / "run.json").read_bytes()
        wal = Path(f"{db_path}-wal")
        stored = db_path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    return stored, bundle


def test_the_search_finds_a_planted_canary(planted: tuple[bytes, bytes]) -> None:
    """Negative control: a non-secret marker planted the same way IS found, in every form."""
    stored, bundle = planted
    canary_text = f"note {CANARY} ok"
    assert CANARY.encode() in stored and CANARY.encode() in bundle
    encoded = base64.b64encode(_blob(canary_text))  # a bytes value, as the log keeps it
    assert encoded in stored and encoded in bundle


@pytest.mark.parametrize(("shape", "text", "secret"), SHAPES, ids=[s[0] for s in SHAPES])
def test_no_planted_secret_reaches_the_database_or_a_bundle(
    planted: tuple[bytes, bytes], shape: str, text: str, secret: str
) -> None:
    """0 found: not as text, and not base64-encoded inside a bytes value."""
    stored, bundle = planted
    for how, form in (("as text", secret.encode()), ("in bytes", base64.b64encode(_blob(text)))):
        assert form not in stored, f"{shape} stored {how} in the database file"
        assert form not in bundle, f"{shape} stored {how} in the exported bundle"


@pytest.mark.parametrize(("shape", "text", "secret"), SHAPES, ids=[s[0] for s in SHAPES])
def test_each_shape_is_redacted_by_the_builtin_set(shape: str, text: str, secret: str) -> None:
    """The unit view of the same table: each text loses its secret and gains a marker."""
    redacted = Redactor().text(text, path="v")
    assert secret not in redacted and "[REDACTED:" in redacted


@pytest.mark.parametrize(
    "benign",
    [
        "Bearer authentication.md",
        "Basic authentication explained",
        "see https://example.com/docs:intro@v2",
        "risk-assessment-framework-document-version",
        "sk-learn-model-selection-and-tuning-guide",
        "the password field is required",
        "Password: how to reset it",
        "password: ",
        "https://host:8080/path/user@example.com",
    ],
)
def test_prose_and_names_are_not_taken_for_secrets(benign: str) -> None:
    """A token has token-like characters and length: ordinary words around a keyword stay."""
    assert Redactor().text(benign, path="v") == benign
