"""A badge's class comes from the log too, and is escaped like its text.

``_badge`` put a passage's status and a decision's origin into an HTML ``class`` attribute
unescaped: a log row (or a derived table) holding a quote opened an attribute of its own
(``onmouseover=...``) in the report a reviewer opens in a browser.
"""

from __future__ import annotations

from html.parser import HTMLParser

from loom_knowledge.tools.audit import AuditedPassage, AuditedRetrieval
from loom_knowledge.tools.audit_render import _retrieval_card

PLANTED = "x' onmouseover='alert(1)"


class _Attributes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.update(name for name, _ in attrs)


def test_a_planted_status_or_origin_opens_no_attribute() -> None:
    passage = AuditedPassage(doc_id="a.md", index=0, revision=1, text="t", status=PLANTED)  # type: ignore[arg-type]
    retrieval = AuditedRetrieval(
        key="k", scope="ops", query="q", limit=1, passages=(passage,), origin=PLANTED
    )
    parser = _Attributes()
    parser.feed(_retrieval_card(retrieval))
    assert parser.names <= {"class"}, parser.names
