"""Presenting an :class:`~loom_knowledge.tools.audit.Audit`: plain text for a terminal, and one
self-contained HTML page (inline CSS, no scripts, no external assets) that reads as a
timeline: start, each retrieval with what became of its passages, each model call with the
exact request and the citation check, the outcome.

Every string in an audit comes from the log, so both renderings are inert: control, bidi and
zero-width characters are shown as ``<U+XXXX>`` (:func:`loom_runtime.tools.display.visible`),
and the HTML escapes every value through :func:`_h` (a planted ``<script>`` is text, not a script).
The page also carries a Content-Security-Policy that allows its inline style and nothing
else, so a value that ever escaped escaping still could not run a script or load anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from importlib.resources import files
from string import Template

import msgspec
from msgspec import UNSET

from loom_knowledge.domain.grounding import Message, ToolCall
from loom_knowledge.tools.audit import (
    Audit,
    AuditedDecision,
    AuditedModelCall,
    AuditedPassage,
    AuditedRetrieval,
)
from loom_runtime.tools.display import describe_meta, identifier, visible
from loom_runtime.tools.display import lineage_lines as display_lineage


def render_text(report: Audit) -> str:
    """The audit as plain text, one line per fact (a value cannot forge a line)."""
    lines = [
        f"execution {report.execution_id}  flow {report.flow}  code {report.code_version}",
        f"status {report.status}; {_position(report)}",
        *lineage_lines(report),
        f"input: {flat(report.input)}",
    ]
    for retrieval in report.retrievals:
        lines.append(
            f"retrieval {flat(retrieval.query)!r} in {identifier(retrieval.scope)} "
            f"(limit {retrieval.limit})" + _origin(retrieval.origin)
        )
        lines += [f"  {_passage_line(p)}" for p in retrieval.passages]
        lines += _measured(retrieval.meta)
    for call in report.model_calls:
        lines.append(f"model call {call.key}{_origin(call.origin)}")
        lines += _measured(call.meta)
        if call.error is not None:
            lines.append(f"  raised {call.error}")
        if call.request is not None:
            if call.request.tools:
                lines.append(f"  tools offered: {_ids([tool.name for tool in call.request.tools])}")
            for number, message in enumerate(call.request.messages):
                label = _message_label(message)
                shown = flat(message.content, 60)
                if number in call.erased:
                    shown = f"erased (position {call.erased[number]})"
                lines.append(f"  {message.role:>6} {label:<40} {shown}")
                asked_for = message.tool_calls or ()
                lines += [f"         asks {_call_text(asked)}" for asked in asked_for]
        else:
            lines.append(f"  input: {flat(call.raw_input)}")
        if call.answer is None and call.error is None:
            lines.append(f"  returned: {flat(returned(call))}")
        if call.answer is not None:
            if call.answer.text or not call.answer.tool_calls:
                lines.append(f"  answer: {flat(call.answer.text, 100)}")
            lines += [f"  answer asks {_call_text(asked)}" for asked in call.answer.tool_calls]
        if call.citations is not None:
            ungrounded = call.citations.ungrounded
            lines.append(
                f"  cited {_ids(call.citations.grounded)}"
                + (f", UNGROUNDED {_ids(ungrounded)}" if ungrounded else ", all grounded")
            )
    for decision in report.decisions:
        lines.append(f"decision {_decision_line(decision)}")
        if decision.input is not None:
            lines.append(f"  input: {flat(decision.input)}")
    lines.append(f"error: {report.error}" if report.error else f"output: {flat(report.output)}")
    return "\n".join(visible(line, one_line=True) for line in lines)


def render_html(report: Audit) -> str:
    """The audit as one self-contained HTML page."""
    lineage = "".join(f"<br>{_h(line)}" for line in lineage_lines(report))
    items = [
        _card(
            "Started",
            f"input <code>{_h(flat(report.input, 400))}</code><br>{_position(report)}{lineage}",
            "start",
        )
    ]
    items += [_retrieval_card(r) for r in report.retrievals]
    items += [_model_card(c) for c in report.model_calls]
    items += [
        _card(
            f"Decision: {d.key}", f"<pre>{_h(_decision_line(d))}</pre>{_input_html(d)}", "decision"
        )
        for d in report.decisions
    ]
    outcome = (
        f"<b>error</b> {_h(report.error)}"
        if report.error
        else f"output <code>{_h(flat(report.output, 600))}</code>"
    )
    items.append(_card(f"Outcome: {report.status}", outcome, "end"))
    page = Template(
        files("loom_knowledge.tools").joinpath("templates/audit.html").read_text("utf-8")
    )
    return page.substitute(
        title=_h(f"Audit of {report.flow} {report.execution_id}"),
        heading=_h(f"{report.flow}: execution {report.execution_id}"),
        meta=_h(f"code {report.code_version}"),
        items="".join(items),
    )


_BADGES = 200
"""At most this many citation badges on a page (the rest are counted; ``--json`` has all)."""


def _ids(ids: Sequence[str], width: int = 400) -> str:
    """Document ids as a list printing each apart from its look-alikes (:func:`identifier`),
    one line of at most ``width`` characters, the number in all when it is cut."""
    shown = repr([identifier(doc_id) for doc_id in ids])
    return shown if len(shown) <= width else f"{shown[: width - 1]}… ({len(ids)} in all)"


def flat(value: object, width: int = 200) -> str:
    """One inert line of at most ``width`` characters (JSON for non-strings)."""
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    single = visible(" ".join(text.split()), one_line=True)
    return single if len(single) <= width else single[: width - 1] + "…"


def returned(call: AuditedModelCall) -> object:
    """What a model call that is no loom ``Answer`` returned, for a reader: a wrapped client's
    stored reply (status, headers, body) as the text its message holds, when it has the shape
    of an OpenAI chat completion, a Responses API response or an Anthropic message (a
    stream's assembled one alike); any other reply or value as recorded."""
    try:
        value = msgspec.json.decode(call.raw_output)
    except msgspec.DecodeError:  # "(none)": nothing was stored
        return call.raw_output
    if isinstance(value, dict) and "status" in value and "headers" in value:
        value = next((value[part] for part in _REPLY_PARTS if value.get(part) is not None), None)
    text = _message_text(value)
    return value if text is None else text


_REPLY_PARTS = ("final", "body", "text")
"""Where a stored provider reply keeps its message (``loom_runtime.providers.ModelResponse``):
a stream's assembled one, a JSON body, a body that is no JSON."""


def _message_text(reply: object) -> str | None:
    """The text of a provider reply's message(s), and each tool call it asks for (``asks
    name(arguments)``: an agent's first call often holds nothing else), or None when it has
    none of the known shapes (an embedding): the reply is then shown as it is."""
    if not isinstance(reply, dict):
        return None
    pieces: list[object] = []
    for choice in _items(reply.get("choices")):  # OpenAI chat completion
        message = choice.get("message")
        pieces.append(_field(message, "content"))
        calls = _items(_field(message, "tool_calls"))
        pieces += [
            _asks(_field(call.get("function"), "name"), call.get("function")) for call in calls
        ]
    for item in _items(reply.get("output")):  # OpenAI Responses
        pieces += [_field(part, "text") for part in _items(item.get("content"))]
        if item.get("type") == "function_call":
            pieces.append(_asks(item.get("name"), item))
    if reply.get("type") == "message":  # Anthropic
        for block in _items(reply.get("content")):
            is_call = block.get("type") == "tool_use"
            pieces.append(
                _asks(block.get("name"), block, "input") if is_call else block.get("text")
            )
    texts = [piece for piece in pieces if isinstance(piece, str)]
    return "\n".join(texts) if texts else None


def _asks(name: object, call: object, field: str = "arguments") -> str | None:
    """``asks name(arguments)`` for a tool call of a reply (its arguments as the provider
    sent them: a JSON text, or for Anthropic an object), None if it names no tool."""
    if not isinstance(name, str):
        return None
    arguments = _field(call, field)
    shown = arguments if isinstance(arguments, str) else msgspec.json.encode(arguments).decode()
    return f"asks {name}({shown})"


def _items(value: object) -> list[dict[str, object]]:
    """The objects of a reply's list (anything else in it, or no list, is skipped)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _field(value: object, name: str) -> object:
    return value.get(name) if isinstance(value, dict) else None


def _message_label(message: Message) -> str:
    """What a message's line names beside its role: the document its content came from, or
    for a tool turn the call it answers (which is how a reader pairs it with the request)."""
    if message.provenance:
        return identifier(message.provenance.label)
    if message.tool_call_id is not UNSET:
        return f"answers {identifier(message.tool_call_id)}"
    return ""


def _call_text(call: ToolCall) -> str:
    """A tool call the model asked for, on one line: the tool, its arguments as the model
    wrote them (bounded), and the call's id that the tool turn answering it names."""
    return f"{identifier(call.name)} {flat(call.arguments, 120)} (call {identifier(call.id)})"


def _call_html(call: ToolCall) -> str:
    return (
        f"<div class='msg'><span class='role'>asks</span><code>{_h(identifier(call.name))}</code>"
        f" <span class='prov'>call {_h(identifier(call.id))}</span>"
        f"<pre>{_h(call.arguments)}</pre></div>"
    )


def _h(value: str) -> str:
    """A value from the log as HTML text: inert (see the module docstring), then escaped."""
    return escape(visible(value))


def _passage_line(passage: AuditedPassage) -> str:
    since = ""
    if passage.ended_at is not None:
        since = f" at {passage.ended_at:%Y-%m-%d %H:%M:%S} (position {passage.ended_position})"
    return (
        f"{identifier(passage.doc_id)}#{passage.index} r{passage.revision}  "
        f"{passage.status}{since}  {flat(passage.text, 60)}"
    )


def lineage_lines(report: Audit) -> list[str]:
    """Where the execution comes from: the parent it was forked from, each reopened failure."""
    return display_lineage(
        parent_id=report.parent_id,
        forked_at=report.forked_at,
        reopenings=[(r.worker, r.error, r.dropped) for r in report.reopenings],
        labels=report.labels,
    )


def _origin(origin: str | None) -> str:
    return f" [{origin}]" if origin else ""


def _measured(meta: object) -> list[str]:
    """The line that shows a decision's meta (model, latency, usage, retries), if any."""
    return [] if meta is None else [f"  measured: {flat(describe_meta(meta), 300)}"]


def _position(report: Audit) -> str:
    """Where in the log the execution started: for one that retrieved, the corpus then. Not
    called the corpus it saw: a retrieval searches the corpus as it is when it runs, which a
    sync while the flow waited (a tool, an approval, a resume after a crash) has changed; the
    retrieval rows below are what each one returned. A fork's inherited retrievals were made
    by its parent, which started earlier: said, or the fork's start would read as theirs."""
    if report.imported:
        return (
            f"imported from another log: its log position {report.log_position} is that "
            "log's, not this log's corpus; its passages are as recorded, their fate here unknown"
        )
    if not report.retrievals:
        return f"started after log position {report.log_position}"
    seen = (
        f"started at log position {report.log_position} (the corpus then; each retrieval "
        "below shows what it returned when it ran)"
    )
    if any(r.origin == "inherited" and r.imported for r in report.retrievals):
        seen += " (inherited retrievals: made in another log and imported; their fate unknown)"
    elif any(r.origin == "inherited" for r in report.retrievals):
        seen += f" (inherited retrievals: as execution {report.parent_id} saw it)"
    return seen


def _decision_line(decision: AuditedDecision) -> str:
    outcome = f"raised {decision.error}" if decision.error else flat(decision.value, 100)
    measured = f"; measured: {describe_meta(decision.meta)}" if decision.meta is not None else ""
    kind = "" if decision.kind is None else f" (kind {decision.kind})"
    return f"{decision.key}{kind}{_origin(decision.origin)}: {outcome}{measured}"


def _input_html(decision: AuditedDecision) -> str:
    """What a decision was asked with (its prompt, a tool's arguments), whole; none if none."""
    value = decision.input
    if value is None:
        return ""
    if not isinstance(value, str):
        value = msgspec.json.format(msgspec.json.encode(value)).decode()
    return f"<p><b>Input:</b></p><pre>{_h(value)}</pre>"


def _card(title: str, body: str, kind: str) -> str:
    return f"<li class='{kind}'><h2>{_h(title)}</h2>{body}</li>"


def _badge(text: str, kind: str) -> str:
    """``text`` in a badge styled by ``kind``: both come from the log, so both are escaped
    (a quote in ``kind`` would otherwise open an attribute of its own)."""
    return f"<span class='badge {escape(kind)}'>{_h(text)}</span>"


def _retrieval_card(retrieval: AuditedRetrieval) -> str:
    rows = []
    for p in retrieval.passages:
        when = f"<br><small>{p.ended_at:%Y-%m-%d %H:%M:%S}</small>" if p.ended_at else ""
        rows.append(
            f"<tr><td>{escape(identifier(p.doc_id))}#{p.index}</td><td>r{p.revision}</td>"
            f"<td>{_badge(p.status, p.status)}{when}</td><td>{_h(flat(p.text, 220))}</td></tr>"
        )
    table = (
        "<table><tr><th>passage</th><th>revision</th><th>now</th><th>text</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    intro = (
        f"<p>scope <b>{_h(retrieval.scope)}</b>, limit {retrieval.limit}"
        f"{_origin_badge(retrieval.origin)}</p>"
    )
    measured = _measured_html(retrieval.meta)
    return _card(f"Retrieval: {retrieval.query}", intro + table + measured, "retrieval")


def _origin_badge(origin: str | None) -> str:
    return f" {_badge(origin, 'origin')}" if origin else ""


def _measured_html(meta: object) -> str:
    return "" if meta is None else f"<p><b>Measured:</b> {_h(describe_meta(meta))}</p>"


def _model_card(call: AuditedModelCall) -> str:
    body = [_measured_html(call.meta)]
    if call.origin:
        body.append(f"<p>{_origin_badge(call.origin)}</p>")
    if call.error is not None:
        body.append(f"<p><b>Raised:</b> {_h(call.error)}</p>")
    if call.request is None:
        body.append(f"<pre>{_h(call.raw_input)}</pre>")
    elif call.request.tools:
        offered = "".join(_badge(identifier(tool.name), "current") for tool in call.request.tools)
        body.append(f"<p><b>Tools offered:</b> {offered}</p>")
    for number, message in enumerate(call.request.messages if call.request is not None else ()):
        named = _message_label(message)
        label = f"<span class='prov'>{_h(named)}</span>" if named else ""
        content = (
            _badge(f"erased (position {call.erased[number]})", "erased")
            if number in call.erased
            else f"<pre>{_h(message.content)}</pre>"
        )
        body.append(
            f"<div class='msg'><span class='role'>{_h(message.role)}</span>{label}{content}</div>"
        )
        body += [_call_html(asked) for asked in message.tool_calls or ()]
    if call.answer is None and call.error is None:
        shown = returned(call)
        text = (
            shown
            if isinstance(shown, str)
            else msgspec.json.format(msgspec.json.encode(shown)).decode()
        )
        body.append(f"<p><b>Returned:</b></p><pre>{_h(text)}</pre>")
    if call.answer is not None:
        if call.answer.text or not call.answer.tool_calls:
            body.append(f"<p><b>Answer:</b> {_h(call.answer.text)}</p>")
        body += [_call_html(asked) for asked in call.answer.tool_calls]
    if call.citations is not None:
        grounded, ungrounded = call.citations.grounded, call.citations.ungrounded
        cites = [_badge(identifier(c), "current") for c in grounded[:_BADGES]]
        cites += [
            _badge(f"UNGROUNDED {identifier(c)}", "ungrounded")
            for c in ungrounded[: max(0, _BADGES - len(grounded))]
        ]
        more = len(grounded) + len(ungrounded) - len(cites)
        shown = "".join(cites) + (f" and {more} more (--json lists them)" if more else "")
        body.append(f"<p><b>Citations:</b> {shown or 'none'}</p>")
    return _card(f"Model call: {call.key}", "".join(body), "model")
