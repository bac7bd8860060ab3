"""Only a real bool overrides the mass-delete guard (ADR 0006, amended "corpus review").

The override was taken for its truthiness, so ``allow_mass_delete=os.environ.get("X",
"false")`` (the string ``"false"``) let an empty sync remove every document of its source.
"""

from __future__ import annotations

import pytest

from loom_knowledge import Doc, InvalidOptionError, open_knowledge_base, reconcile
from loom_runtime import Loom

NOT_BOOLS = ["false", "False", "0", "", "true", 1, 0, None, [True]]
"""Flags as configuration hands them over: none of them is a decision to delete."""


@pytest.mark.parametrize("flag", NOT_BOOLS, ids=repr)
def test_an_override_that_is_not_a_bool_is_refused_by_every_entry(loom: Loom, flag: object) -> None:
    kb = open_knowledge_base(loom, "s")
    kb.sync([Doc(id=f"d{i}", text=f"doc {i}") for i in range(3)])
    before = loom.log.position
    for entry in (kb.sync, kb.plan_sync):
        with pytest.raises(InvalidOptionError, match="allow_mass_delete must be True or False"):
            entry([], allow_mass_delete=flag)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="allow_mass_delete must be True or False"):
        reconcile(manifest={}, docs=[], source=None, allow_mass_delete=flag)  # type: ignore[arg-type]
    assert loom.log.position == before
    assert len(kb.list_docs()) == 3


@pytest.mark.parametrize("fraction", [True, "0.5", float("nan"), [0.5]], ids=repr)
def test_a_removal_fraction_that_is_not_a_number_is_refused_typed(
    loom: Loom, fraction: object
) -> None:
    """Corpus review, second: ``True`` was taken as 1.0 (a guard that never fires) and a
    string failed the comparison with an untyped ``TypeError``, at open and in reconcile."""
    with pytest.raises(InvalidOptionError, match="max_removal_fraction"):
        open_knowledge_base(loom, "s", max_removal_fraction=fraction)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="max_removal_fraction"):
        reconcile(manifest={}, docs=[], source=None, max_removal_fraction=fraction)  # type: ignore[arg-type]


def test_a_removal_fraction_of_any_real_type_is_taken(loom: Loom) -> None:
    """The control (second regression review): numpy's floats and ``Fraction`` are real
    numbers, and were taken before the check; they still are, as floats."""
    from fractions import Fraction

    import numpy

    for fraction in (Fraction(1, 2), numpy.float32(0.5), numpy.float64(0.5), 1):
        kb = open_knowledge_base(loom, f"s{fraction!r}", max_removal_fraction=fraction)  # type: ignore[arg-type]
        assert kb.max_removal_fraction == float(fraction)
