"""The benchmarks' real text is read from the manuals only as far as a caller needs: a few
windows open the first manual alone, and a later, longer pass continues from what was read
with the same windows a single pass would cut. (Small stand-in manuals: the real ones take
seconds to read whole.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import corpora


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """The manuals opened from now on, by name: four of two pages each, nothing read yet."""
    for name in corpora.FILES:
        with gzip.open(tmp_path / f"{name}.jsonl.gz", "wt", encoding="utf-8") as manual:
            for page in range(2):
                text = "\n\n".join(f"{name} page {page} paragraph {n} " * 4 for n in range(6))
                manual.write(json.dumps({"id": f"p{page}.html", "text": text}) + "\n")
    monkeypatch.setenv("LOOM_BENCH_CORPORA", str(tmp_path))
    names: list[str] = []
    real = gzip.open

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(corpora.gzip, "open", counting)
    corpora._pages.cache_clear()
    yield names
    corpora._pages.cache_clear()


def test_a_few_windows_open_the_first_manual_alone(opened: list[str]) -> None:
    assert len(corpora.windows(200, 3)) == 3
    assert opened == ["pg13.jsonl.gz"]


def test_a_longer_pass_continues_from_what_was_read(opened: list[str]) -> None:
    first = corpora.windows(200, 3)
    longer = corpora.windows(200, 40)  # every manual's windows, then a second cut of them
    assert opened == [f"{name}.jsonl.gz" for name in corpora.FILES]  # each read once

    corpora._pages.cache_clear()
    assert longer[:3] == first
    assert longer == corpora.windows(200, 40)  # one pass from nothing read
    assert {window.origin.split("/")[0] for window in longer} == set(corpora.FILES)


def test_a_manual_that_fails_to_parse_fails_every_pass(opened: list[str], tmp_path: Path) -> None:
    """A bad line fails the pass that reaches it and every later one: never a shorter corpus
    read as the whole."""
    with gzip.open(tmp_path / "pg15.18.jsonl.gz", "at", encoding="utf-8") as manual:
        manual.write("not json\n")
    for _ in range(2):
        with pytest.raises(json.JSONDecodeError):
            corpora.windows(200, 40)
