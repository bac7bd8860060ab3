"""``loom.services``: one service per key, created on first use, closed with the Loom."""

from __future__ import annotations

import pytest

from loom_runtime import Loom


class Resource:
    def __init__(self, name: str, closed: list[str], *, fail: bool = False) -> None:
        self.name, self.closed, self.fail = name, closed, fail

    def close(self) -> None:
        self.closed.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} failed to close")


def test_a_service_is_created_once_per_key_and_per_loom(tmp_path) -> None:
    made: list[str] = []

    def factory() -> object:
        made.append("x")
        return object()

    with Loom(f"sqlite:///{tmp_path / 'a.db'}") as a, Loom(f"sqlite:///{tmp_path / 'b.db'}") as b:
        first = a.services.get("pkg.thing", factory)
        assert a.services.get("pkg.thing", factory) is first
        assert b.services.get("pkg.thing", factory) is not first
        assert a.services.peek("pkg.other") is None
    assert made == ["x", "x"]


def test_services_close_with_the_loom_newest_first_even_when_one_fails(tmp_path) -> None:
    closed: list[str] = []
    loom = Loom(f"sqlite:///{tmp_path / 'a.db'}")
    loom.services.get("one", lambda: Resource("one", closed))
    loom.services.get("two", lambda: Resource("two", closed, fail=True))
    loom.services.get("three", lambda: Resource("three", closed))
    with pytest.raises(RuntimeError, match="two failed"):
        loom.close()
    assert closed == ["three", "two", "one"]
    assert loom.services.peek("one") is None


def test_discard_closes_one_service_and_the_next_get_makes_a_fresh_one(tmp_path) -> None:
    closed: list[str] = []
    with Loom(f"sqlite:///{tmp_path / 'a.db'}") as loom:
        first = loom.services.get("one", lambda: Resource("one", closed))
        loom.services.discard("one")
        assert closed == ["one"]
        assert loom.services.get("one", lambda: Resource("one", closed)) is not first
