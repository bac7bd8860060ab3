"""The public surface of loom_knowledge is one explicit __all__ with no private names."""

from __future__ import annotations

import loom_knowledge


def test_every_public_name_is_exported_and_importable() -> None:
    assert all(hasattr(loom_knowledge, name) for name in loom_knowledge.__all__)
    assert len(set(loom_knowledge.__all__)) == len(loom_knowledge.__all__)


def test_no_underscore_name_is_exported() -> None:
    assert not [name for name in loom_knowledge.__all__ if name.startswith("_")]


def test_every_error_derives_from_knowledge_error() -> None:
    errors = [
        obj
        for name in loom_knowledge.__all__
        if isinstance(obj := getattr(loom_knowledge, name), type) and issubclass(obj, Exception)
    ]
    import loom_knowledge.errors as module

    defined = {
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, Exception)
        and obj.__module__ == module.__name__  # not the runtime errors it builds on
    }
    assert set(errors) == defined  # every error the package defines is exported
    assert all(issubclass(error, loom_knowledge.KnowledgeError) for error in errors)
