"""ADR 0012: secrets are redacted before storage, and a replay reproduces the redacted record."""

from __future__ import annotations

import msgspec
import pytest
from sqlalchemy import text

from loom_runtime import (
    ConfigurationError,
    FlowContext,
    LogEvent,
    LogSettings,
    Loom,
    Redactor,
    SecretIdentifierError,
    SecretPattern,
    SecretRefusedError,
    codec,
)
from loom_runtime.context import Recorder, save
from loom_runtime.execution import Execution
from loom_runtime.log import open_log
from loom_runtime.redaction import BUILTIN_PATTERNS
from loom_runtime.stream import stream_id

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.sig-Abc123"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nZm9vYmFy\n-----END RSA PRIVATE KEY-----"
)

SECRETS = [
    ("bearer-token", f"Authorization: Bearer {TOKEN}", TOKEN),
    ("aws-key", "key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
    (
        "aws-secret",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("private-key", f"key:\n{PEM}\nend", "MIIEowIBAAKCAQEA7bq"),
    ("url-password", "postgresql://loom:hunter2-pw@db.internal:5432/loom", "hunter2-pw"),
]


class Noted(LogEvent):
    TOPIC = "test.redaction.Noted"
    text: str
    meta: dict[str, object]


def _stored(loom: Loom) -> list[tuple[str, bytes]]:
    """Every stored row's topic and state, read with SQL on the log's own tables."""
    table = loom.log.application.recorder.events_table_name  # type: ignore[attr-defined]
    with loom.log.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT topic, state FROM {table}")).all()
    return [(topic, bytes(state)) for topic, state in rows]


@pytest.mark.parametrize(("name", "value", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_each_builtin_pattern_is_replaced_by_its_marker(name: str, value: str, secret: str) -> None:
    """A built-in secret format becomes [REDACTED:<name>] and is counted under that name."""
    redactor = Redactor()
    redacted = redactor.text(value, path="v")
    assert secret not in redacted
    assert f"[REDACTED:{name}]" in redacted
    assert redactor.counts == {name: 1}


def test_the_text_around_a_secret_stays_readable() -> None:
    """Only the secret part is replaced: the scheme, user and host of a URL stay."""
    redacted = Redactor().text(
        "postgresql://loom:pw123@db:5432/x and Bearer abc123def456ghi7", path="v"
    )
    assert redacted == (
        "postgresql://loom:[REDACTED:url-password]@db:5432/x and Bearer [REDACTED:bearer-token]"
    )


def test_a_truncated_private_key_is_redacted_to_the_end() -> None:
    """A BEGIN line with no END (a cut-off paste) is not left half-stored."""
    redacted = Redactor().text("see -----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN", path="v")
    assert redacted == "see [REDACTED:private-key]"


def test_redaction_is_idempotent_and_counts_once() -> None:
    """A marker never matches again: a second pass changes and counts nothing."""
    redactor = Redactor()
    once = redactor.text(SECRETS[4][1], path="v")
    assert redactor.text(once, path="v") is once
    assert redactor.total == 1


def test_a_secret_that_follows_another_is_redacted_in_the_same_pass() -> None:
    """Some patterns want no word character before their token (``sk-`` inside a word is not
    a key). A secret glued to another one passed the first pass, and the marker put in front
    of it let a second pass find it: the stored text was not what redacting it gives, so an
    import of a bundle loom recorded changed it, and the replay of the import diverged."""
    redactor = Redactor()
    glued = "AIza" + "B" * 35 + "sk-ant-api03-abcdefghijklmnopqrstuv"
    once = redactor.text(glued, path="v")
    assert "sk-ant-api03" not in once
    assert redactor.text(once, path="v") == once
    # Each pass can free only the next one. Six: ten glued would be a 390-character run of
    # base64, a payload the built-in patterns pass by (ADR 0012, amended "payloads").
    six = ("AIza" + "A" * 34 + "1") * 6
    once = redactor.text(six, path="v")
    assert once == "[REDACTED:google-api-key]" * 6


def test_the_rest_of_a_password_beside_a_redacted_token_is_redacted() -> None:
    redactor = Redactor()
    once = redactor.text("password=ghp_" + "a1" * 18 + "!!tail and more", path="v")
    assert "!!tail" not in once and once.endswith(" and more")
    assert redactor.text(once, path="v") == once


def test_nested_values_are_redacted_and_clean_keys_kept() -> None:
    """Strings anywhere in plain data and in stored JSON are scanned; a key that holds no
    secret is kept (keys holding one: ``test_redaction_of_keys.py``)."""
    redactor = Redactor()
    value = {"Bearer abcdefghijk": [1, {"auth": f"Bearer {TOKEN}"}], "n": None}
    redacted = redactor.value(value, path="v")
    assert redacted == {
        "Bearer abcdefghijk": [1, {"auth": "Bearer [REDACTED:bearer-token]"}],
        "n": None,
    }
    raw = msgspec.Raw(msgspec.json.encode(value))
    assert msgspec.json.decode(redactor.raw(raw, path="v")) == redacted
    clean = msgspec.Raw(b'{"a":"b"}')
    assert redactor.raw(clean, path="v") is clean


def test_clean_json_is_scanned_once_and_a_secret_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decision's value passes the redactor twice (encode, then the mapper): the second pass
    over clean JSON is a lookup, counted here as no decode; JSON with a secret never is."""
    import loom_runtime.redaction as redaction

    decodes = 0
    real_decode = msgspec.json.decode

    def counting_decode(*args: object, **kwargs: object) -> object:
        nonlocal decodes
        decodes += 1
        return real_decode(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(redaction.msgspec.json, "decode", counting_decode)
    redactor = Redactor()
    clean = msgspec.Raw(b'{"answer":"vacuum reclaims dead tuples"}')
    for _ in range(3):
        assert redactor.raw(msgspec.Raw(bytes(clean)), path="v") == clean
    assert decodes == 1
    assert redactor.raw(msgspec.Raw(b"[1,2,null]"), path="v") == msgspec.Raw(b"[1,2,null]")
    assert decodes == 1  # no quote, no string, nothing to decode

    dirty = msgspec.Raw(msgspec.json.encode({"auth": f"Bearer {TOKEN}"}))
    for _ in range(2):
        assert b"[REDACTED:bearer-token]" in bytes(redactor.raw(dirty, path="v"))
    assert redactor.total == 2

    for index in range(300):  # the memory of clean values is bounded
        redactor.raw(msgspec.Raw(msgspec.json.encode(f"clean {index}")), path="v")
    assert len(redactor._clean) <= 256


def test_users_add_patterns_and_keep_the_builtins() -> None:
    """``extra`` patterns join the built-in set; ``patterns`` replaces it."""
    ticket = SecretPattern.compile("ticket", r"TKT-[0-9]{6}")
    both = Redactor(extra=[ticket])
    assert both.text("TKT-123456 / AKIAIOSFODNN7EXAMPLE", path="v") == (
        "[REDACTED:ticket] / [REDACTED:aws-key]"
    )
    only = Redactor(patterns=[ticket])
    assert only.text("TKT-123456 / AKIAIOSFODNN7EXAMPLE", path="v") == (
        "[REDACTED:ticket] / AKIAIOSFODNN7EXAMPLE"
    )
    assert len(only.patterns) == 1 < len(BUILTIN_PATTERNS)


def test_a_list_of_numbers_is_kept_whole_and_a_secret_after_numbers_is_found() -> None:
    """A vector passes as the same object (no walk), but one string among numbers is still
    scanned, and a refusal names its place in the list."""
    redactor = Redactor()
    vector = [0.25, -1.0, 3, True, None] * 100
    assert redactor.value(vector, path="v") is vector
    mixed = [*vector, f"Bearer {TOKEN}"]
    assert redactor.value(mixed, path="v")[-1] == "Bearer [REDACTED:bearer-token]"
    with pytest.raises(SecretRefusedError) as caught:
        Redactor(mode="refuse").value((1.0, 2.0, f"Bearer {TOKEN}"), path="v")
    assert caught.value.path == "v[2]"


def test_refusing_names_the_pattern_and_path_but_never_the_secret() -> None:
    """mode='refuse' raises a typed error whose message does not leak the value."""
    with pytest.raises(SecretRefusedError) as caught:
        Redactor(mode="refuse").text(f"Bearer {TOKEN}", path="decision 'model'")
    assert (caught.value.pattern, caught.value.path) == ("bearer-token", "decision 'model'")
    assert TOKEN not in str(caught.value)


def test_a_replay_reproduces_the_prompt_as_recorded_with_markers(loom: Loom) -> None:
    """The live run sees the redacted model answer; its replay is identical; no row holds it."""
    seen: dict[str, str] = {}

    @loom.flow("ask")
    def ask(ctx: FlowContext, question: str) -> str:
        prompt = f"{question}\nAuthorization: Bearer {TOKEN}"  # a secret the code adds
        answer: str = ctx.decide(
            "model", lambda: f"echo: {prompt}", input={"prompt": prompt}, kind="model"
        )
        seen["answer"] = answer
        return answer.upper()

    run = loom.run("ask", question="key AKIAIOSFODNN7EXAMPLE?")
    assert TOKEN not in seen["answer"] and "[REDACTED:bearer-token]" in seen["answer"]
    assert "[REDACTED:aws-key]" in seen["answer"]  # it came in through the flow's input
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output
    decision = loom.execution(run.execution_id).decisions["model"]
    assert b"Bearer [REDACTED:bearer-token]" in bytes(decision.input)
    stored = b"".join(state for _, state in _stored(loom))
    assert TOKEN.encode() not in stored
    assert b"AKIAIOSFODNN7EXAMPLE" not in stored
    assert loom.log.redactor is not None and loom.log.redactor.total >= 2


def test_a_recorded_failure_message_is_redacted_and_replays(loom: Loom) -> None:
    """Error messages are payload strings too: stored redacted, and the replay agrees."""

    @loom.flow("fetch")
    def fetch(ctx: FlowContext) -> str:
        def call() -> str:
            raise PermissionError(f"401 for Bearer {TOKEN}")

        try:
            return ctx.decide("call", call)
        except PermissionError as exc:
            return f"failed: {exc}"

    run = loom.run("fetch")
    assert loom.replay(run.execution_id).identical
    assert TOKEN.encode() not in b"".join(state for _, state in _stored(loom))


def test_every_event_payload_is_redacted_before_storage(loom: Loom) -> None:
    """A plain stream event (any package's) is redacted by the mapper, nested meta included."""
    loom.log.append(
        stream_id("notes"),
        expected_version=0,
        events=[(Noted, {"text": PEM, "meta": {"dsn": "mysql://app:s3cr3t@h/db"}})],
    )
    [(_, state)] = _stored(loom)
    assert msgspec.json.decode(state)["text"] == "[REDACTED:private-key]"
    assert msgspec.json.decode(state)["meta"] == {"dsn": "mysql://app:[REDACTED:url-password]@h/db"}


def test_refuse_mode_writes_nothing_for_an_event(db_url: str) -> None:
    """A refusing log raises before the insert: the stream and the log are unchanged."""
    log = open_log(LogSettings(db_url, redactor=Redactor(mode="refuse")))
    try:
        with pytest.raises(SecretRefusedError, match=r"test\.redaction\.Noted\.meta"):
            log.append(
                stream_id("notes"),
                expected_version=0,
                events=[
                    (Noted, {"text": "fine", "meta": {}}),
                    (Noted, {"text": "fine", "meta": {"k": f"Bearer {TOKEN}"}}),
                ],
            )
        assert log.position == 0
    finally:
        log.close()


def test_refuse_mode_stores_the_refusal_not_the_value_and_the_flow_sees_it(db_url: str) -> None:
    """A decision whose value holds a secret is refused before it is appended; the refusal
    is stored as the decision's failure (ADR 0026, amended "refusals"), never the value."""
    log = open_log(LogSettings(db_url, redactor=Redactor(mode="refuse")))
    try:
        execution = Execution.start(
            id=stream_id("run"),
            flow="f",
            code_version="1",
            input=msgspec.Raw(b"{}"),
            log_position=0,
        )
        save(log, execution)
        ctx = FlowContext(Recorder(log, execution), execution_id=execution.id, flow="f")
        with pytest.raises(SecretRefusedError, match="decision 'model'"):
            ctx.decide("model", lambda: f"Bearer {TOKEN}")
        assert log.position == 2  # Created, and the refusal as the decision's failure
        assert all(TOKEN.encode() not in row.state for row in log.rows(execution.id))
        assert ctx.decide("clean", lambda: "ok") == "ok"
    finally:
        log.close()


def test_redaction_can_be_switched_off(db_url: str) -> None:
    """redactor=None stores values as given (a deliberate choice, e.g. a local test log)."""
    log = open_log(LogSettings(db_url, redactor=None))
    try:
        log.append(
            stream_id("notes"),
            expected_version=0,
            events=[(Noted, {"text": f"Bearer {TOKEN}", "meta": {}})],
        )
        [notification] = log.notifications()
        assert TOKEN.encode() in notification.state
    finally:
        log.close()


def test_a_bad_redactor_setting_is_a_configuration_error(db_url: str) -> None:
    """Anything but a Redactor, 'builtin' or None is refused when the settings are made."""
    with pytest.raises(ConfigurationError, match="redactor must be"):
        LogSettings(db_url, redactor="on")  # type: ignore[arg-type]


def test_a_flow_receives_its_input_and_returns_its_output_as_stored(db_url: str) -> None:
    """Loom(redactor=...) applies to the flow's input and output too: what the live run sees
    and returns is the redacted round trip, so a replay compares equal."""
    with Loom(db_url) as loom:

        @loom.flow("echo")
        def echo(ctx: FlowContext, header: str) -> str:
            assert TOKEN not in header, "the live run saw the unredacted input"
            return f"got {header} and Bearer {TOKEN}"

        run = loom.run("echo", header=f"Authorization: Bearer {TOKEN}")
        assert TOKEN not in run.output and run.output.count("[REDACTED:bearer-token]") == 2
        assert loom.replay(run.execution_id).identical
    with Loom(db_url, redactor=None) as raw:

        @raw.flow("echo")
        def echo_raw(ctx: FlowContext, header: str) -> str:
            return header

        assert raw.run("echo", header=f"Bearer {TOKEN}").output == f"Bearer {TOKEN}"


def test_a_secret_inside_bytes_is_redacted_and_stays_bytes() -> None:
    """Bytes are scanned as text before base64 hides them; a redacted value is still bytes."""
    value = {"blob": f"Authorization: Bearer {TOKEN}".encode(), "bin": b"\xff\xfe " + PEM.encode()}
    raw = codec.encode(value, path="v", redactor=Redactor())
    decoded = msgspec.json.decode(raw, type=dict[str, bytes])
    assert decoded["blob"] == b"Authorization: Bearer [REDACTED:bearer-token]"
    assert decoded["bin"] == b"\xff\xfe [REDACTED:private-key]"  # latin-1: binary kept as is
    alone = codec.encode(bytearray(f"Bearer {TOKEN}".encode()), path="v", redactor=Redactor())
    assert msgspec.json.decode(alone, type=bytes) == b"Bearer [REDACTED:bearer-token]"


def test_a_secret_inside_bytes_is_refused_in_refuse_mode() -> None:
    """Refuse mode refuses a secret in bytes like one in text, naming where it was."""
    with pytest.raises(SecretRefusedError, match=r"v\[0\]"):
        codec.encode([f"Bearer {TOKEN}".encode()], path="v", redactor=Redactor(mode="refuse"))


def test_an_identifier_is_refused_every_time_and_a_clean_one_stays_clean() -> None:
    """Clean identifiers are remembered (each append checks its keys again); a refused one
    never is, so asking it again refuses it again."""
    redactor = Redactor()
    secret = "step-" + "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    for _ in range(2):
        redactor.check_identifier("step-1", path="key")
        with pytest.raises(SecretIdentifierError):
            redactor.check_identifier(secret, path="key")
        with pytest.raises(SecretIdentifierError):
            redactor.check_identifier(["step-1", secret], path="tags")
