"""An execution recorded from hostile strings: what an attacker who can write a document, a
decision key or an exception message plants for the terminal and the HTML audit to run."""

from __future__ import annotations

from typing import Any, Final
from uuid import UUID

import pytest

from loom_knowledge import Doc, ExtractiveModel, open_knowledge_base
from loom_knowledge.models.answering import answer_from_corpus
from loom_runtime import FlowContext, Loom
from replay_tests.unchecked import register_unchecked

CLEAR_SCREEN: Final = "\x1b[2J\x1b[H"
OSC_TITLE: Final = "\x1b]0;owned window\x07"
OSC_LINK: Final = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
C1_CSI: Final = "\x9b2J"
RLO: Final = "\u202e"
ZERO_WIDTH: Final = "\u200b"
CONTROL: Final = ("\x1b", "\x9b", "\x07", RLO, ZERO_WIDTH, "\u2066", "\ufeff")
"""No raw occurrence of any of these may reach a terminal or a page."""

PWN: Final = "document.title='PW'+'NED';document.body.dataset.x='PW'+'NED'"
"""A planted script's effect: the word only exists once the script has run."""
SCRIPT: Final = f"<script>{PWN}</script>"
IMG: Final = f'<img src=x onerror="{PWN}">'
LINK: Final = f'<a href="javascript:{PWN}">go</a>'
TEXTAREA: Final = f"</textarea></pre></code><script>{PWN}</script>"
MARKUP: Final = ("[red]x[/]", "[link=https://evil.example/]y[/link]")
"""Rich markup that must print literally, not as a style or a hyperlink."""

DOC_ID: Final = f"{MARKUP[1]}{SCRIPT}{CLEAR_SCREEN}{RLO}dm.txt"
TITLE: Final = f"{IMG}{OSC_TITLE}{MARKUP[0]}"
TEXT: Final = f"The disk is full {LINK}{OSC_LINK}{MARKUP[1]} {C1_CSI} ad{ZERO_WIDTH}min."
KEY: Final = f"note {TEXTAREA}{OSC_TITLE}{MARKUP[0]}"
FLOW: Final = f"hostile {MARKUP[0]}{CLEAR_SCREEN}"
ERROR: Final = f"boom {IMG}{CLEAR_SCREEN}{RLO}\u2066{MARKUP[1]}"
PLANTED: Final = (SCRIPT, IMG, LINK, TEXTAREA, *MARKUP)
"""Every string that must appear literally in what a reader sees."""


def record_hostile_execution(loom: Loom) -> UUID:
    """A failed execution whose doc id, title, text, decision key, value and error are hostile."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id=DOC_ID, title=TITLE, text=TEXT))

    @register_unchecked(loom, FLOW)  # a name registration refuses, as an old log holds it
    def hostile(ctx: FlowContext, question: str) -> Any:
        answer_from_corpus(kb, question, decide=ctx.decide, model=ExtractiveModel())
        ctx.decide(KEY, lambda: TEXT, kind="note")
        raise RuntimeError(ERROR)

    with pytest.raises(RuntimeError):
        loom.run(FLOW, question="is the disk full")
    [summary] = [s for s in loom.executions() if s.flow == FLOW]
    return summary.execution_id
