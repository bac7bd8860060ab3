"""Timestamp fields and values that stay the stdlib ``datetime`` under a frozen test clock.

freezegun's ``freeze_time`` swaps every module attribute that *is* ``datetime.datetime`` for
its ``FakeDatetime`` subclass, and a module first imported while the clock is frozen binds
``FakeDatetime`` for good. loom imports its modules lazily and msgspec resolves a Struct's
field types on first use, so a field annotated ``datetime`` could resolve to ``FakeDatetime``
in a user's frozen test and stay so: every later decode of a timestamp then failed with
"Expected `FakeDatetime`, got `str`", and msgspec refuses to encode the subclass at all.

So loom's msgspec Structs annotate timestamps :data:`UtcTimestamp`, an alias to the class
found by walking the MRO back to the stdlib (never a module attribute freezegun could swap),
and a value loom makes itself is passed through :func:`plain_datetime` before it is encoded.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import msgspec


def stdlib_class(hint: Any) -> Any:
    """The stdlib class behind a patched one (``FakeDatetime`` → ``datetime``); any other
    hint as it is."""
    if isinstance(hint, type) and hint.__module__ != "datetime":
        return next((c for c in hint.__mro__ if c.__module__ == "datetime"), hint)
    return hint


# No module attribute may hold the class itself: freezegun swaps every attribute that *is*
# datetime, whatever its name. Inside the alias it is out of that walk's reach.
if TYPE_CHECKING:
    UtcTimestamp = Annotated[datetime, msgspec.Meta(tz=True)]
else:
    UtcTimestamp = Annotated[stdlib_class(datetime), msgspec.Meta(tz=True)]
"""A timezone-aware timestamp field of a msgspec Struct (a naive value is refused on decode)."""


def as_utc(when: datetime) -> datetime:
    """``when``, a recorded time, in UTC: read as UTC if it has no zone (an imported execution
    from a writer that stored none; loom's own are UTC), converted if it has another offset.
    A naive time cannot be compared with an aware one, and a time at +05:00 listed as it is
    would be five hours off under a UTC heading."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def plain_datetime(value: datetime) -> datetime:
    """``value`` as the stdlib class: the same instant and zone, so the same encoded bytes."""
    stdlib: type[datetime] = stdlib_class(type(value))
    if type(value) is stdlib:
        return value
    return stdlib(*value.timetuple()[:6], value.microsecond, value.tzinfo, fold=value.fold)


def plain_datetime_hook(value: object) -> object:
    """An ``enc_hook`` encoding a ``datetime`` subclass as the stdlib datetime it is.

    Converting to the stdlib class (rather than to an ISO string) keeps the bytes identical
    to those of a real datetime, so a value written under a frozen clock re-encodes byte for
    byte when it is read back and written again (a store rebuilt from the log).
    """
    if isinstance(value, datetime):
        return plain_datetime(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")
