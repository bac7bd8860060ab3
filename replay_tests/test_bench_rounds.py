"""An arm may run fewer rounds than the others (a slow reference whose samples barely move):
it is measured in the first rounds only, interleaved with the arms that keep every round, and
its figure is the median of the samples it has."""

from __future__ import annotations

from benchmarks.harness import Arm, interleave


def test_a_capped_arm_runs_in_the_first_rounds_only_and_the_others_in_every_round() -> None:
    order: list[str] = []

    def arm(name: str, rounds: int | None = None) -> Arm:
        def measure() -> dict[str, float]:
            order.append(name)
            return {"n": float(len(order))}

        return Arm(name, measure, rounds=rounds)

    results = interleave(
        [arm("cheap"), arm("slow", rounds=1), arm("floor")], rounds=3, progress=lambda _: None
    )

    assert order == ["cheap", "slow", "floor", "floor", "cheap", "floor", "cheap"]
    assert results["slow"]["n"].samples == (2.0,)
    assert results["cheap"]["n"].samples == (1.0, 5.0, 7.0)
    assert results["floor"]["n"].samples == (3.0, 4.0, 6.0)


def test_a_cap_above_the_run_s_rounds_changes_nothing() -> None:
    counts = {"a": 0, "b": 0}

    def arm(name: str, rounds: int | None) -> Arm:
        def measure() -> dict[str, float]:
            counts[name] += 1
            return {"x": 1.0}

        return Arm(name, measure, rounds=rounds)

    interleave([arm("a", None), arm("b", 5)], rounds=2, progress=lambda _: None)
    assert counts == {"a": 2, "b": 2}
