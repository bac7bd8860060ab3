"""The bytes of a SQLite log as they lie on disk, for the capture tests that plant a secret.

A "never stored" claim is checked against the file itself and its write-ahead log (what a
row's encoding, an index or an uncheckpointed page could still hold), not against what the
API reads back."""

from __future__ import annotations

from pathlib import Path


def raw_log(path: Path) -> bytes:
    """The database file at ``path`` and its ``-wal``, whichever exist, end to end."""
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())
