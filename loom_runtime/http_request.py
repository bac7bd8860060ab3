"""The canonical form of a request a recorded ``http`` decision is keyed and compared by (ADR 0024).

Kept apart from the transport (:mod:`loom_runtime.http_transport`), which sends, records and
replays: this module only says what of a request is the question. The key names the call
(method, host, path); the input carries the rest a replay compares, with everything left out
that would make an unchanged request differ from run to run or that must never be stored:

* credentials, by name (headers, query parameters) or because the log's redactor flags them,
  and the secret part of a path that is a credential (:func:`path_without_secrets`);
* headers that describe the client software or the connection, not the request;
* a multipart body's random boundary: the body is its parts;
* a form body (``application/x-www-form-urlencoded``, how an OAuth token request is sent) is
  its name/value pairs, credentials left out by the rule a query's are.
"""

from __future__ import annotations

import re
import zlib
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import msgspec

if TYPE_CHECKING:
    import httpx

    from loom_runtime.redaction import Redactor

KIND = "http"

JSON_DECODE_ERRORS = (msgspec.DecodeError, RecursionError)
"""What reading a body as JSON raises when it is not JSON loom can hold: malformed, or nested
deeper than msgspec decodes (about 1,000 levels: ``RecursionError``, which a walk of a
decoded body nearly as deep can raise too). Either way the body is read as text or bytes,
and the request is sent as httpx alone would send it."""

CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"}
    | {"x-honeycomb-team"}  # Honeycomb's API key, named after the team it belongs to
)
"""Request headers never stored, whatever they hold (with any named by
:data:`CREDENTIAL_WORDS`, or with a word ending in one of :data:`GLUED_CREDENTIALS`)."""

GLUED_CREDENTIALS = ("token", "secret", "apikey", "password")
"""What a header's word that glues its words together ends in when it names a credential
(Pivotal Tracker's ``X-TrackerToken``, a ``X-CSRFToken``): ``tokens`` (a count, as in
``x-ratelimit-remaining-tokens``) does not."""

CREDENTIAL_WORDS = frozenset(
    {
        *("key", "apikey", "token", "secret", "password", "auth", "credential", "credentials"),
        *("authorization", "authentication", "signature"),
    }
)
"""A request header one of whose words (its name split at ``-`` and ``_``) is one of these
carries a credential by its name: ``x-goog-api-key``, ``ocp-apim-subscription-key`` (Azure AI
services), ``private-token`` (GitLab), ``x-auth-token``, ``x-amz-security-token``,
``x-authorization``, ``x-hub-signature-256`` (a webhook's HMAC of its body). Such keys
are mostly random text no redaction pattern recognises, so the name is what tells. Whole
words, so ``x-keyboard-layout`` or ``x-max-tokens`` are not taken for one."""

CLIENT_HEADERS = frozenset(
    {
        *("host", "user-agent", "content-length", "connection", "accept-encoding"),
        "idempotency-key",
        *("traceparent", "tracestate", "baggage", "sentry-trace", "b3", "uber-trace-id"),
        *("x-amzn-trace-id", "x-cloud-trace-context"),
        *("date", "x-amz-date", "x-amz-content-sha256", "x-ms-date", "x-ms-client-request-id"),
        *("x-goog-date", "x-goog-content-sha256"),
    }
)
CLIENT_HEADER_PREFIXES = ("x-stainless-", "x-datadog-", "x-b3-", "uberctx-")
"""Request headers that describe the client software, its retries, the connection or the
telemetry, not what is asked (the host is in the URL, the length is the body's;
``x-stainless-*`` are the OpenAI and Anthropic SDKs' platform, version and retry-count
headers; an idempotency key is random per request; tracers (W3C trace context, Sentry,
Datadog, Zipkin B3, Jaeger, AWS X-Ray, Google Cloud) add a fresh trace id to every request,
and are often on live and off in a test; a signed request (AWS SigV4, Azure Storage) carries
the time it was signed, its body's hash and a request id beside the signature, which is a
credential and left out as one): left out of the input, so a replay does not diverge on
them."""

CREDENTIAL_FIELD_WORDS = frozenset(
    {
        *("apikey", "token", "secret", "password", "passwd", "passphrase", "auth", "bearer"),
        *("credential", "credentials", "authorization", "verifier", "assertion"),
    }
)
"""A JSON body's field, a query parameter or a form field carries a credential by its name
when its head word (the last of its words, split at ``-``, ``_`` and camel case) is one of
these, or is ``key`` after one of :data:`KEY_KINDS` (``api_key``, ``subscription-key``,
``accessKey``): ``client_secret``, ``refresh_token``, ``password``, ``apiKey``, an OAuth
``code_verifier`` or ``client_assertion``. The head, not any word: a ``token_symbol`` is a
symbol, an ``auth_level`` a level, a ``secret_id`` names a secret without holding it, and
each is what is asked (taken for a credential, a changed one replayed as identical). A
``token`` after one of :data:`CURSOR_WORDS` is a listing's cursor (``pageToken``), not one.
Whole words, so ``max_tokens`` is not one; nor is a bare ``key`` or a ``sort_key`` (what a
key-value or a list API is asked), unlike a header named so."""

CREDENTIAL_SUFFIXES = frozenset(
    {
        *("value", "string", "code", "hash", "digest", "jwt", "b64", "base64", "hex", "pem"),
        *("header", "new", "old", "current", "confirm", "confirmation", "again", "repeat"),
        "hint",  # OpenID Connect's ``id_token_hint``: the ID token itself
        *("binary", "json", "base", "blob", "bytes", "data", "file"),  # AWS's ``SecretBinary``
    }
)
"""Words after a credential's name that keep the field one: the form it holds the credential
in (``secret_value``, ``token_hash``; ``authorization_code``, an OAuth grant), or which of
them it is (``password_confirmation``, ``password_new``). Read past (with any number, as in
``api_key_2``) before the head word is."""

CURSOR_WORDS = frozenset(
    {
        *("page", "next", "prev", "previous", "continuation", "cursor", "pagination"),
        *("sync", "resume", "delta", "change"),
    }
)
"""Words before a final ``token`` that make it a position in a listing or a change feed
(Google's ``pageToken``/``nextPageToken``/``syncToken``, AWS's ``NextToken``, a
``continuation_token``, a change stream's ``resume_token``), which the server hands out to be
sent back: what is asked, not a credential."""

KEY_KINDS = frozenset(
    {
        *("api", "access", "secret", "private", "subscription", "client", "auth", "session"),
        *("signing", "encryption", "master", "app", "account", "service", "license"),
        *("developer", "functions", "consumer", "shared", "x"),
    }
)
"""The words before a final ``key`` that make a field's name a credential's."""

CREDENTIAL_FIELD_MARK = "[REDACTED:credential-field]"
"""What a credential field's string value is stored as: the field stays, so a diff still
shows the request's shape, and a rotated key compares equal."""

_WORDS = re.compile(r"[a-z0-9]+|[A-Z]+(?![a-z])|[A-Z][a-z0-9]*")
"""A name's words: lower-case runs, upper-case runs (``API`` of ``X-API-KEY``), and camel
case's capitalised words (``Key`` of ``apiKey``)."""


def credential_name(name: str) -> bool:
    """Whether a JSON field, query parameter or form field named ``name`` carries a
    credential by its name: by its head word (:data:`CREDENTIAL_FIELD_WORDS`), read past
    :data:`CREDENTIAL_SUFFIXES` and numbers."""
    words = [word.lower() for word in _WORDS.findall(name)]
    while len(words) > 1 and (words[-1].isdigit() or words[-1] in CREDENTIAL_SUFFIXES):
        words.pop()
    head = words[-1].rstrip("0123456789") if words else ""  # password2
    qualifier = words[-2] if len(words) > 1 else ""
    if head == "token":
        return qualifier not in CURSOR_WORDS
    if head == "key":
        return qualifier in KEY_KINDS
    return head in CREDENTIAL_FIELD_WORDS


_NAMES: dict[str, bool] = {}
""":func:`credential_name` of the field names met so far: a request's names repeat (every
message of a conversation is ``role`` and ``content``), and every call of a flow, and of its
replay, walks one. Bounded by :data:`_NAMES_KEPT` (names come from requests)."""
_NAMES_KEPT = 4096


def _credential_field(name: str) -> bool:
    known = _NAMES.get(name)
    if known is None:
        if len(_NAMES) >= _NAMES_KEPT:
            _NAMES.clear()
        known = _NAMES[name] = credential_name(name)
    return known


def without_credentials(value: Any) -> Any:
    """``value`` (decoded JSON: plain dicts and lists) with the string of every
    credential-named field replaced by :data:`CREDENTIAL_FIELD_MARK`, at any depth; anything
    else as it is (the same objects where nothing was replaced: a container is copied only
    once something in it changes).

    Only containers are walked into, and a field's name is read only when its value is text:
    a model request is mostly long strings, and every call and replay of a flow walks one
    (about 0.3 µs a message of a conversation)."""
    kind = type(value)
    if kind is dict:
        copy: dict[Any, Any] | None = None
        for name, item in value.items():
            held = type(item)
            if held is str:
                if type(name) is not str or not _credential_field(name):
                    continue
                changed: Any = CREDENTIAL_FIELD_MARK
            elif held is dict or held is list:
                changed = without_credentials(item)
                if changed is item:
                    continue
            else:
                continue
            copy = dict(value) if copy is None else copy
            copy[name] = changed
        return value if copy is None else copy
    if kind is list:
        items: list[Any] | None = None
        for index, item in enumerate(value):
            held = type(item)
            if held is dict or held is list:
                changed = without_credentials(item)
                if changed is not item:
                    items = list(value) if items is None else items
                    items[index] = changed
        return value if items is None else items
    return value


CREDENTIAL_PARAMETERS = frozenset(
    {
        *("key", "api_key", "api-key", "apikey", "access_token", "token", "password", "secret"),
        *("sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token"),
        *("appid", "hapikey"),  # OpenWeatherMap's and HubSpot's API keys
    }
)
"""Query parameters never stored, whatever they hold (compared lower-cased), with any one of
whose words is ``signature`` (GCS's ``X-Goog-Signature``) or that :func:`credential_name`
names; and, by :func:`credential_query`, a ``code`` that is a key and a signed URL's time."""

SIGNATURES = frozenset({"sig", "signature", "x-amz-signature", "x-goog-signature"})
SIGNING_TIMES = frozenset({"x-amz-date", "x-goog-date", "st", "se", "expires", "policy"})
"""A signed URL's times (AWS's and GCS's signing time, an Azure SAS's start and expiry, a
CloudFront or GCS v2 ``Expires``, a CloudFront custom ``Policy``, base64 JSON holding its
expiry): left out beside a signature (:data:`SIGNATURES`), since the same request signed later
differs in them; elsewhere a date is what is asked."""


def credential_query(
    pairs: list[tuple[str, str]], host: str, redactor: Redactor | None
) -> list[tuple[str, str]]:
    """``pairs`` (a URL's query) without the parameters that carry a credential.

    ``code`` is one only where it grants access: Azure Functions' key (a host under
    ``azurewebsites.net``: the ``x-functions-key`` header's, in the URL) and an OAuth
    authorization code (beside its ``state`` in the callback, its ``grant_type`` in the token
    request's form); anywhere else a country, product or error code is what is asked, and
    leaving it out hid a changed request."""
    lowered = [name.lower() for name, _ in pairs]
    signed = not SIGNATURES.isdisjoint(lowered)
    code_is_key = (
        "state" in lowered or "grant_type" in lowered or host.lower().endswith(".azurewebsites.net")
    )
    return [
        (name, value)
        for (name, value), lower in zip(pairs, lowered, strict=True)
        if not credential_parameter(name, value, redactor)
        and not (code_is_key and lower == "code")
        and not (signed and lower in SIGNING_TIMES)
    ]


def credential_parameter(name: str, value: str, redactor: Redactor | None) -> bool:
    """Whether a query parameter or form pair carries a credential: by its name, or by the
    redactor."""
    return credential_parameter_name(name) or (
        redactor is not None and redactor.secret_in(value) is not None
    )


def credential_parameter_name(name: str) -> bool:
    """Whether a query parameter or form field named ``name`` carries a credential by its
    name (:data:`CREDENTIAL_PARAMETERS`, :func:`credential_name`, the word ``signature``)."""
    named = _PARAMETERS.get(name)
    if named is None:  # names repeat from request to request: each is read once
        if len(_PARAMETERS) >= _NAMES_KEPT:
            _PARAMETERS.clear()
        lower = name.lower()
        named = _PARAMETERS[name] = (
            lower in CREDENTIAL_PARAMETERS
            or credential_name(name)
            or "signature" in _WORDS.findall(lower)
        )
    return named


_PARAMETERS: dict[str, bool] = {}
""":func:`credential_parameter_name`'s answers, for the names met so far (bounded by
:data:`_NAMES_KEPT`, as :data:`_NAMES` is)."""


PATH_SECRET_MARK = "[REDACTED:path-secret]"
"""What the secret part of a path is stored as, in a key and a URL alike."""

_DISCORD_WEBHOOK = re.compile(r"/api(?:/v\d+)?/webhooks/\d+/([^/]+)")
PATH_SECRETS: dict[str, re.Pattern[str]] = {
    "hooks.slack.com": re.compile(
        r"/(?:services/[^/]+/[^/]+|workflows/[^/]+/[^/]+/[^/]+|triggers/[^/]+/[^/]+)/([^/]+)"
    ),
    **dict.fromkeys(
        ("discord.com", "discordapp.com", "canary.discord.com", "ptb.discord.com"),
        _DISCORD_WEBHOOK,
    ),
    "api.telegram.org": re.compile(r"(?:/file)?/bot\d+:([^/]+)"),
}
"""Hosts whose URL path holds a credential, and where in it (the group): a Slack incoming
webhook's secret, a Discord webhook's (or interaction follow-up's) token, a Telegram bot's
token after its id (Slack's Workflow Builder webhooks and triggers end in their secret
too). Whoever has the URL can post as the app, and no redaction pattern knows
the random text; the host and the path's shape are what tell. The ids before the secret stay
(they say which webhook or bot was called)."""


def path_without_secrets(host: str, path: str) -> str:
    """``path`` (of a URL on ``host``) with the secret :data:`PATH_SECRETS` finds in it as
    :data:`PATH_SECRET_MARK`; ``path`` itself elsewhere. A request is keyed and compared by
    this path, so a rotated webhook secret replays as the same call."""
    shape = PATH_SECRETS.get(host.lower())
    found = shape.match(path) if shape is not None else None
    if found is None:
        return path
    return f"{path[: found.start(1)]}{PATH_SECRET_MARK}{path[found.end(1) :]}"


def urls_without_credentials(text: str) -> str:
    """``text`` (an error's message, a traceback) with every URL it quotes as
    :func:`url_without_credentials` stores one: an HTTP client's error names the URL it failed
    on, ``?key=...`` and a password included, which no pattern of a redactor knows."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda found: url_without_credentials(found[0]), text)


_URL_IN_TEXT = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>`]+""")
"""A URL quoted in a text: a scheme, ``://``, and what follows up to a space or a quote."""


def url_without_credentials(text: str) -> str:
    """``text`` (a URL a response names, a redirect's ``location``, an MCP resource URI)
    without its userinfo, the query parameters that carry a credential
    (:func:`credential_query`) and a secret in its path (:func:`path_without_secrets`), as a
    request's URL is stored: a presigned download's
    signature is a key to the object. ``text`` itself when it has neither; cut by hand
    (:func:`_cut_by_hand`) when ``urlsplit`` refuses it.

    Only those parts are cut out of the text: rebuilt by ``urlunsplit``, a scheme ``urllib``
    does not know loses its empty authority (``notes:///today`` became ``notes:/today``); it
    is rebuilt only when a tab or line break inside a part (which ``urlsplit`` drops before
    it parses) keeps the text from matching the parsed part."""
    try:
        parts = urlsplit(text)
        host = parts.netloc.rpartition("@")[2]
        pairs = parse_qsl(parts.query, keep_blank_values=True) if parts.query else []
    except ValueError:  # urlsplit refuses it (a host or userinfo holding what NFKC folds to a
        return _cut_by_hand(text)  # delimiter, an invalid IPv6 host): its secrets go all the same
    kept = credential_query(pairs, parts.hostname or "", None)
    query = urlencode(kept) if len(kept) != len(pairs) else parts.query
    path = path_without_secrets(parts.hostname or "", parts.path)
    if host == parts.netloc and query == parts.query and path == parts.path:
        return text
    stored = text
    for found, left in (
        (f"//{parts.netloc}", f"//{host}"),
        (parts.path, path),  # after the authority, which holds no "/"
        (f"?{parts.query}", f"?{query}"),
    ):
        if found != left:
            if found not in stored:
                return urlunsplit((parts.scheme, host, path, query, parts.fragment))
            stored = stored.replace(found, left if left != "?" else "", 1)
    return stored


def request_key_and_input(
    request: httpx.Request, redactor: Redactor | None
) -> tuple[str, dict[str, Any]]:
    """The decision key naming ``request`` and its canonical form (credentials left out).

    The request's body must have been read.
    """
    url = request.url
    origin = url.host if url.port is None else f"{url.host}:{url.port}"
    path = path_without_secrets(url.host, _path(url))
    query = [  # parsed only when there is one: parsing is most of what this costs a replay
        [name, value]
        for name, value in (
            credential_query(url.params.multi_items(), url.host, redactor) if url.query else ()
        )
    ]
    headers: dict[str, str] = {}
    encoding = request.headers.encoding  # what multi_items() would decode with, found once
    for raw_name, raw_value in request.headers.raw:
        name = raw_name.decode(encoding).lower()
        if name in CLIENT_HEADERS or name.startswith(CLIENT_HEADER_PREFIXES):
            continue
        value = raw_value.decode(encoding)
        if not _credential_header(name, value, redactor):
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    content_type = headers.get("content-type", "")
    boundary = _BOUNDARY.search(content_type)
    parts = None
    if boundary is not None:
        parts = _multipart(request.content, (boundary[1] or boundary[2]).encode("latin-1"))
    body: dict[str, Any] | None
    if parts is not None:  # the random boundary left out of the header and the body
        headers["content-type"] = _BOUNDARY.sub("", content_type)
        body = {"multipart": parts}
    else:  # a gzip header's time differs per run: the body is what it encodes
        content = _decoded(request.content, headers.get("content-encoding", ""))
        form = None
        if content and content_type.partition(";")[0].strip().lower() == FORM:
            form = _form(content, url.host, redactor)
        body = form if form is not None else _request_body(content)
    return f"{KIND}:{request.method} {origin}{path}", {
        "method": request.method,
        "url": f"{url.scheme}://{origin}{path}",
        "query": query,
        "headers": dict(sorted(headers.items())),
        "body": body,
    }


_ENCODED_SLASH = re.compile(b"%2[fF]")


def _path(url: httpx.URL) -> str:
    """``url``'s path as a request is keyed and compared by: decoded (``%20`` a space, UTF-8
    escapes their letters), but for an encoded ``/``, kept as ``%2F``. Decoded, a segment
    holding a slash (``reports%2F2024.csv``, one object) read as two (``reports/2024.csv``, an
    object in a folder), another resource to the server (ADR 0024, amended "encoded slash")."""
    raw = url.raw_path.partition(b"?")[0]
    if _ENCODED_SLASH.search(raw) is None:
        return url.path  # every recording before the amendment keeps its key
    return "%2F".join(unquote(part.decode("ascii")) for part in _ENCODED_SLASH.split(raw))


def credential_header(name: str) -> bool:
    """Whether a header (its name lower-cased) carries a credential by its name or one of its
    words: a request's is left out of the input, a response's stored redacted
    (:func:`~loom_runtime.http_transport.headers_to_store`)."""
    words = name.replace("_", "-").split("-")
    return (
        name in CREDENTIAL_HEADERS
        or not CREDENTIAL_WORDS.isdisjoint(words)
        or any(word.endswith(GLUED_CREDENTIALS) for word in words)
    )


def _credential_header(name: str, value: str, redactor: Redactor | None) -> bool:
    """Whether a request header (its name lower-cased) carries a credential: by its name, one
    of its words, or its value."""
    return credential_header(name) or (
        redactor is not None and redactor.secret_in(value) is not None
    )


MAX_DECODED_BODY = 4 * 1024 * 1024
"""The most a compressed request body is inflated to be compared and stored; a larger one (or
one that does not inflate) is compared and stored as its compressed bytes, as before. Kept
small because what is inflated is stored: a few kilobytes of gzip can hold megabytes."""


_INFLATE_WINDOW = 16 * 1024
"""How much compressed input a request body's inflater is handed at a time."""


def _decoded(content: bytes, encoding: str) -> bytes:
    """``content`` inflated when ``encoding`` is ``gzip`` or ``deflate`` (one coding; a chain
    or another coding is compared as sent). gzip writes the time it compressed into its
    header, so an unchanged body compressed again differs byte for byte; inflated, it is
    compared, diffed and checked for credential fields as any body is (ADR 0024, amended)."""
    coding = encoding.strip().lower()
    if not content or coding not in ("gzip", "x-gzip", "deflate"):
        return content
    wbits = 16 + zlib.MAX_WBITS if coding != "deflate" else zlib.MAX_WBITS
    body = memoryview(content)
    inflated: list[bytes] = []
    size = at = 0
    while at < len(body):  # gzip may hold several members one after another: all are read
        inflater = zlib.decompressobj(wbits)
        while not inflater.eof:
            # Fed a window at a time: handed the whole rest, each member's inflater copied
            # it back as ``unused_data``, quadratic in the members (a review's 4,096 members
            # of 8 KiB took 25 s).
            window = body[at : at + _INFLATE_WINDOW]
            if not window or size >= MAX_DECODED_BODY:  # cut short, or too large
                return content
            try:
                piece = inflater.decompress(window, MAX_DECODED_BODY - size)
            except zlib.error:
                return content  # not what it says (or bytes after its members): as sent
            if inflater.unconsumed_tail:  # too large
                return content
            inflated.append(piece)
            size += len(piece)
            at += len(window)
        at -= len(inflater.unused_data)  # where the next member starts
        if at < len(body) and coding == "deflate":  # one zlib stream only
            return content
    return b"".join(inflated)


def _cut_by_hand(text: str) -> str:
    """:func:`url_without_credentials` of a URL ``urlsplit`` refuses: the authority's userinfo
    (up to its last ``@``) and the query's credential parameters cut from the text as it is,
    split at the first ``?``, ``#``, ``&`` and ``=`` (whoever sent the URL chose its text, and
    a refusal must not store its signature)."""
    base, hashed, fragment = text.partition("#")
    base, asked, query = base.partition("?")
    scheme, slashes, rest = base.partition("//")
    if slashes:
        authority, slash, path = rest.partition("/")
        base = f"{scheme}//{authority.rpartition('@')[2]}{slash}{path}"
    if asked:
        pairs = [(n, v) for n, _, v in (item.partition("=") for item in query.split("&"))]
        kept = credential_query(pairs, "", None)
        query = "&".join(f"{n}={v}" for n, v in kept)
        asked = "?" if query else ""
    return f"{base}{asked}{query}{hashed}{fragment}"


FORM = "application/x-www-form-urlencoded"


def _form(content: bytes, host: str, redactor: Redactor | None) -> dict[str, Any] | None:
    """A form body as its ``[name, value]`` pairs without the ones that carry a credential,
    by the rule a URL's query is read by (:func:`credential_query`: an OAuth token request's
    ``client_secret``, ``code``, ``code_verifier``, ``refresh_token``...); None when it is not
    UTF-8 (then it is compared as any body is). Pairs, not text: a credential can only be cut
    out of a diffable body field by field."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    pairs = parse_qsl(text, keep_blank_values=True)
    return {"form": [[name, value] for name, value in credential_query(pairs, host, redactor)]}


def _request_body(content: bytes) -> dict[str, Any] | None:
    """A request body as data a diff can read: JSON when it parses, else text, else bytes."""
    if not content:
        return None
    try:
        return {"json": without_credentials(msgspec.json.decode(content))}
    except JSON_DECODE_ERRORS:
        pass
    try:
        return {"text": content.decode("utf-8")}
    except UnicodeDecodeError:
        return {"bytes": content}


_BOUNDARY = re.compile(r';\s*boundary=(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
"""A multipart content type's boundary parameter (quoted or not)."""


def _multipart(content: bytes, boundary: bytes) -> list[dict[str, Any]] | None:
    """A multipart body's parts, each its headers and its body (as :func:`_request_body`
    reads one), without the boundary; None when the body is not multipart with ``boundary``
    as httpx writes it (then it is compared as it is).

    The boundary is random per request (httpx draws one for every upload), so a body
    compared with it would differ on every run; and an upload's fields (a transcription's
    ``model``) read as text in a diff rather than as one line of base64. A part whose form
    name is a credential's (an ``api_key`` field beside the file, by
    :func:`credential_parameter_name`) is left out, as such a form pair is.
    """
    pieces = content.split(b"--" + boundary)
    if len(pieces) < 3 or pieces[0] or not pieces[-1].startswith(b"--"):
        return None
    parts = []
    for piece in pieces[1:-1]:
        head, blank, part = piece.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not blank or not piece.startswith(b"\r\n") or not part.endswith(b"\r\n"):
            return None
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n"):
            name, colon, value = line.partition(":")
            if not colon:
                return None
            headers[name.strip().lower()] = value.strip()
        named = _FIELD_NAME.search(headers.get("content-disposition", ""))
        if named is None or not credential_parameter_name(named[1] or named[2] or ""):
            parts.append({"headers": headers, "body": _request_body(part.removesuffix(b"\r\n"))})
    return parts


_FIELD_NAME = re.compile(r';\s*name=(?:"([^"]*)"|([^;\s]+))', re.IGNORECASE)
"""A multipart part's ``content-disposition`` form name (quoted or not; not ``filename``)."""
